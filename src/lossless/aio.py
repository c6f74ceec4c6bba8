"""``AsyncEngine``: the engine for asyncio hosts, without blocking the event loop.

Every method is the sync :class:`~lossless.engine.Engine` method of the same name, run in a
thread pool of the async engine's own: database work and summarizer calls never block the
loop, and there is one implementation of each operation (the methods are generated from the
engine's, with the same signature and documentation). The engine's per-conversation locks
hold across threads, so concurrent tasks writing to one conversation are serialized exactly
as threads are, and tasks on different conversations run side by side.

A task cancelled while its call runs stops waiting, but the call itself finishes (a thread
cannot be interrupted): every write is one transaction, so it is either done or not at all.

    async with await AsyncEngine.open("agent.db") as engine:
        await engine.ingest("session-1", {"role": "user", "content": "hello"})
        context = await engine.assemble("session-1", token_budget=100_000)
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from .config import Config
from .engine import Engine

__all__ = ["AsyncEngine"]

P = ParamSpec("P")
R = TypeVar("R")


def _offload(
    method: Callable[Concatenate[Engine, P], R],
) -> Callable[Concatenate[AsyncEngine, P], Coroutine[Any, Any, R]]:
    """The async form of an :class:`Engine` method: the same call, in the pool."""
    name = method.__name__

    @functools.wraps(method)
    async def run(self: AsyncEngine, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[..., R] = getattr(self.engine, name)
        return await self._run(functools.partial(bound, *args, **kwargs))

    return run


class AsyncEngine:
    """An :class:`Engine` for asyncio (see the module docstring).

    Open one with ``await AsyncEngine.open(...)`` (same arguments as :meth:`Engine.open`) or
    wrap an engine: ``AsyncEngine(engine)``. *workers* sizes the thread pool.
    """

    def __init__(self, engine: Engine, *, workers: int | None = None) -> None:
        self.engine = engine
        self._pool = ThreadPoolExecutor(
            max_workers=workers or min(32, (os.cpu_count() or 1) + 4),
            thread_name_prefix="lossless-aio",
        )

    @classmethod
    async def open(
        cls, target: str | os.PathLike[str] | None = None, *, workers: int | None = None, **kw: Any
    ) -> AsyncEngine:
        """Open the store at *target* off the loop (see :meth:`Engine.open`)."""
        engine = await asyncio.to_thread(functools.partial(Engine.open, target, **kw))
        return cls(engine, workers=workers)

    @property
    def config(self) -> Config:
        """The engine's configuration."""
        return self.engine.config

    async def _run(self, call: Callable[[], R]) -> R:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    async def close(self) -> None:
        """Finish background work and close the store, off the loop."""
        await self._run(self.engine.close)
        self._pool.shutdown(wait=True)

    async def __aenter__(self) -> AsyncEngine:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # The engine's operations, one line each: the sync method runs in the pool.
    conversation = _offload(Engine.conversation)
    lookup = _offload(Engine.lookup)
    find_conversation = _offload(Engine.find_conversation)
    conversations = _offload(Engine.conversations)
    message_count = _offload(Engine.message_count)
    context_summaries = _offload(Engine.context_summaries)
    host_compaction_seq = _offload(Engine.host_compaction_seq)
    reinjected_since = _offload(Engine.reinjected_since)
    update_conversation = _offload(Engine.update_conversation)
    rename = _offload(Engine.rename)
    archive = _offload(Engine.archive)
    forget = _offload(Engine.forget)
    finish_forgets = _offload(Engine.finish_forgets)
    prune = _offload(Engine.prune)
    archives = _offload(Engine.archives)
    restore_archives = _offload(Engine.restore_archives)
    scrubs_due = _offload(Engine.scrubs_due)
    unarchive = _offload(Engine.unarchive)
    pop_context = _offload(Engine.pop_context)
    normalize = _offload(Engine.normalize)
    ingest = _offload(Engine.ingest)
    ingest_batch = _offload(Engine.ingest_batch)
    after_turn = _offload(Engine.after_turn)
    compact = _offload(Engine.compact)
    wait_for_compaction = _offload(Engine.wait_for_compaction)
    finish_summaries = _offload(Engine.finish_summaries)
    wait_for_summaries = _offload(Engine.wait_for_summaries)
    pending_summaries = _offload(Engine.pending_summaries)
    finish_elsewhere = _offload(Engine.finish_elsewhere)
    room = _offload(Engine.room)
    measure_room = _offload(Engine.measure_room)
    compact_for_host = _offload(Engine.compact_for_host)
    assemble = _offload(Engine.assemble)
    context = _offload(Engine.context)
    resume = _offload(Engine.resume)
    grep = _offload(Engine.grep)
    relevant_to = _offload(Engine.relevant_to)
    describe = _offload(Engine.describe)
    create_grant = _offload(Engine.create_grant)
    revoke_grant = _offload(Engine.revoke_grant)
    expand = _offload(Engine.expand)
    expand_query = _offload(Engine.expand_query)
    chat_context_query = _offload(Engine.chat_context_query)
    summarize_session = _offload(Engine.summarize_session)
    session_summaries = _offload(Engine.session_summaries)
    wait_for_session_summaries = _offload(Engine.wait_for_session_summaries)
    transplant = _offload(Engine.transplant)
    rewrite = _offload(Engine.rewrite)
    repair = _offload(Engine.repair)
    mend = _offload(Engine.mend)
    dissolve = _offload(Engine.dissolve)
    backfill = _offload(Engine.backfill)
    bootstrap = _offload(Engine.bootstrap)
    import_path = _offload(Engine.import_path)
    import_store = _offload(Engine.import_store)
    messages = _offload(Engine.messages)
    get_message = _offload(Engine.get_message)
    last_request = _offload(Engine.last_request)
    summary = _offload(Engine.summary)
    large_file = _offload(Engine.large_file)
    read_large_file = _offload(Engine.read_large_file)
    stats = _offload(Engine.stats)
    space = _offload(Engine.space)
    backup = _offload(Engine.backup)
    reveal = _offload(Engine.reveal)
    summaries = _offload(Engine.summaries)
    summary_sources = _offload(Engine.summary_sources)
    covering = _offload(Engine.covering)
    messages_by_id = _offload(Engine.messages_by_id)
    family_ids = _offload(Engine.family_ids)
    large_files = _offload(Engine.large_files)
    latest_session_summary = _offload(Engine.latest_session_summary)
    summary_counts = _offload(Engine.summary_counts)
    check_grant = _offload(Engine.check_grant)
    compaction_plan = _offload(Engine.compaction_plan)
    check = _offload(Engine.check)
    check_notes = _offload(Engine.check_notes)
    cap = _offload(Engine.cap)
    finish_indexes = _offload(Engine.finish_indexes)
    rebuild_indexes = _offload(Engine.rebuild_indexes)
    archived_ids = _offload(Engine.archived_ids)
    namespace_conversations = _offload(Engine.namespace_conversations)
    create_token = _offload(Engine.create_token)
    tokens = _offload(Engine.tokens)
    revoke_token = _offload(Engine.revoke_token)
    token_check = _offload(Engine.token_check)
    audit_log = _offload(Engine.audit_log)
    record = _offload(Engine.record)
