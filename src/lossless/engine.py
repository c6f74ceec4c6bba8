"""The engine: the lifecycle a host drives (bootstrap, ingest, ...) over one store.

All mutating operations on a conversation are serialized per conversation: a re-entrant lock
per conversation inside the process, and the store's write transaction across processes.
Work on different conversations never waits on each other's locks.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from .assemble import AssembledContext
from .assemble import assemble as assemble_context
from .compaction import CompactionReport, Compactor
from .config import Config, default_data_dir, load_config
from .errors import ImportProblem, NotFoundError
from .ingest.files import LargeFile, externalize, read_file
from .ingest.reconcile import Progress, ReconcileReport, reconcile_file
from .ingest.shapes import NormalizedMessage, keep_text_in_parts, normalize
from .model import (
    ContextItem,
    Conversation,
    ConversationStats,
    IngestResult,
    StoredMessage,
    Summary,
)
from .retrieval import grants
from .retrieval.describe import Description
from .retrieval.describe import describe as describe_id
from .retrieval.expand import ExpandResult
from .retrieval.expand import expand as expand_dag
from .retrieval.expand_query import ExpandQueryResult
from .retrieval.expand_query import expand_query as expand_query_answer
from .retrieval.grants import Grant
from .retrieval.grep import GrepResult, Mode, Scope, Sort
from .retrieval.grep import grep as grep_store
from .store import SQLiteStore, open_store
from .summarize import Summarizer
from .summarize.guards import guard_state
from .summarize.providers import build_summarizer
from .tokens import HeuristicTokenCounter, TokenCounter

__all__ = ["ConversationRef", "Engine", "TurnResult", "default_db_path"]

logger = logging.getLogger(__name__)

#: A conversation by id (int), by external session id (str), or the row itself.
ConversationRef = int | str | Conversation


def default_db_path() -> Path:
    """``lossless.db`` in the platform's user data directory."""
    return default_data_dir() / "lossless.db"


class _ConversationLocks:
    """One re-entrant lock per conversation, created on demand."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[int, threading.RLock] = {}

    def get(self, conversation_id: int) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(conversation_id)
            if lock is None:
                lock = self._locks[conversation_id] = threading.RLock()
            return lock


@dataclass(frozen=True)
class TurnResult:
    """What :meth:`Engine.after_turn` did: the ingest, and the compaction (if it ran inline)."""

    ingest: IngestResult
    compaction: CompactionReport | None
    deferred: bool = False
    error: str | None = None


class Engine:
    """Lossless context management over one store.

    Open one with :meth:`open`; use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        store: SQLiteStore,
        config: Config | None = None,
        *,
        token_counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.store = store
        self.config = config or Config()
        self.token_counter: TokenCounter = token_counter or HeuristicTokenCounter()
        self.summarizer: Summarizer = summarizer or build_summarizer(self.config)
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future[CompactionReport]] = {}
        self._pending_guard = threading.Lock()
        self._locks = _ConversationLocks()
        # session id → conversation; ids never change, so the hot path skips the lookup.
        self._by_session: dict[str, Conversation] = {}

    @classmethod
    def open(
        cls,
        target: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
        token_counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
    ) -> Engine:
        """Open the store at *target* (a path or URL).

        Without *target*: ``config.db``, then ``LOSSLESS_DB``, then the default file in the
        user data directory. The database is created (owner-only) and migrated as needed.
        """
        cfg = config or load_config()
        chosen = target if target is not None else cfg.db or os.environ.get("LOSSLESS_DB")
        store = open_store(chosen if chosen else default_db_path())
        return cls(store, cfg, token_counter=token_counter, summarizer=summarizer)

    def close(self) -> None:
        """Finish background compaction, then close the store's connections."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- conversations ---------------------------------------------------------------------

    def conversation(self, ref: ConversationRef, *, create: bool = False) -> Conversation:
        """Resolve *ref*: an int is a conversation id, a str an external session id.

        With ``create=True`` an unknown session id starts a new conversation.
        """
        if isinstance(ref, Conversation):
            return ref
        if isinstance(ref, bool) or not isinstance(ref, int | str):
            raise TypeError(f"a conversation is an int id or a str session id, not {ref!r}")
        if isinstance(ref, int):
            return self.store.get_conversation(ref)
        cached = self._by_session.get(ref)
        if cached is not None:
            return cached
        found = self.store.find_conversation(ref)
        if found is None:
            if not create:
                raise NotFoundError(
                    f"no conversation with session id {ref!r};"
                    " list them with `lossless conversations`"
                )
            found = self.store.get_or_create_conversation(ref)
        self._by_session[ref] = found
        return found

    def conversations(self) -> list[ConversationStats]:
        """Every conversation with its counts."""
        return self.store.list_conversations()

    @contextmanager
    def lock(self, conversation_id: int) -> Iterator[None]:
        """Hold the conversation's lock: serializes mutations of one conversation."""
        with self._locks.get(conversation_id):
            yield

    # --- ingestion -------------------------------------------------------------------------

    def normalize(
        self,
        message: Any,
        *,
        format: str | None = None,
        external_id: str | None = None,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> NormalizedMessage:
        """Normalize one message with this engine's token counter."""
        return normalize(
            message,
            format=format,
            external_id=external_id,
            created_at=created_at,
            metadata=metadata,
            counter=self.token_counter,
        )

    def ingest(
        self,
        conversation: ConversationRef,
        message: Any,
        *,
        format: str | None = None,
        external_id: str | None = None,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> IngestResult:
        """Store one message (any supported shape) and append it to the active context.

        A message whose external id is already stored in the conversation is skipped.
        """
        norm = self.normalize(
            message,
            format=format,
            external_id=external_id,
            created_at=created_at,
            metadata=metadata,
        )
        return self._append(conversation, [norm])

    def ingest_batch(
        self,
        conversation: ConversationRef,
        messages: Iterable[Any],
        *,
        format: str | None = None,
        external_ids: Sequence[str | None] | None = None,
    ) -> IngestResult:
        """Store several messages in one transaction (all or nothing), in order.

        Items may be messages of any supported shape, or messages already passed through
        :meth:`normalize` (to set each one's id, time or metadata).
        """
        items = list(messages)
        if external_ids is not None and len(external_ids) != len(items):
            raise ValueError(
                f"external_ids has {len(external_ids)} entries for {len(items)} messages"
            )
        norms = [
            m
            if isinstance(m, NormalizedMessage)
            else self.normalize(
                m, format=format, external_id=None if external_ids is None else external_ids[i]
            )
            for i, m in enumerate(items)
        ]
        return self._append(conversation, norms)

    @property
    def files_dir(self) -> Path:
        """Where large files are kept: ``data_dir/files``, else ``<database>-files`` beside it."""
        if self.config.data_dir:
            return Path(self.config.data_dir).expanduser() / "files"
        return self.store.path.with_name(self.store.path.name + "-files")

    def externalize(self, conversation_id: int, norm: NormalizedMessage) -> None:
        """Keep the large files of *norm* outside its plain text (its parts stay exact)."""
        threshold = self.config.large_file_token_threshold
        if len(norm.content) < threshold or self.token_counter.count(norm.content) <= threshold:
            return  # a token is at least a character for any tokenizer
        results = [p for p in norm.parts if p.type == "tool_result"]
        whole = norm.role == "tool" and len(results) == 1
        content, records = externalize(
            norm.content,
            conversation_id=conversation_id,
            files_dir=self.files_dir,
            threshold=threshold,
            whole=whole,
            name=f"{results[0].tool_name or 'tool'}-output.txt" if whole else None,
        )
        if records:
            keep_text_in_parts(norm)
            norm.content = content
            norm.large_files = records
            norm.token_count = self.token_counter.count(content)

    def large_file(self, file_id: str) -> LargeFile:
        """The record of a large file (id, name, size, exploration summary, ...)."""
        return self.store.get_large_file(file_id)

    def read_large_file(self, file_id: str) -> str:
        """The full content of a large file."""
        return read_file(self.files_dir, self.store.get_large_file(file_id))

    def _append(
        self, conversation: ConversationRef, norms: list[NormalizedMessage]
    ) -> IngestResult:
        conv = self.conversation(conversation, create=True)
        for norm in norms:
            self.externalize(conv.conversation_id, norm)
        with self.lock(conv.conversation_id):
            ids, skipped = self.store.append_messages(conv, norms)
        return IngestResult(conv.conversation_id, tuple(ids), skipped)

    # --- compaction ------------------------------------------------------------------------

    def compact(
        self,
        conversation: ConversationRef,
        *,
        mode: str = "full",
        until: int | None = None,
        budget: int | None = None,
    ) -> CompactionReport:
        """Compact a conversation's active context.

        ``mode="full"`` (the default, a manual compact): leaf passes until none is eligible,
        then condensation. ``mode="incremental"``: what :meth:`after_turn` does. ``until=N``:
        sweeps until the context is at or under N tokens (at most ``max_rounds``). With the
        model's *budget*, the fresh tail is capped at ``fresh_tail_budget_share`` of it.
        """
        conv = self.conversation(conversation)
        compactor = Compactor(self, self.summarizer, budget=budget)
        with self.lock(conv.conversation_id):
            if until is not None:
                return compactor.until_under(conv.conversation_id, until)
            if mode == "incremental":
                return compactor.incremental(conv.conversation_id)
            if mode != "full":
                raise ValueError(f"unknown compaction mode {mode!r}; use full or incremental")
            return compactor.full_sweep(conv.conversation_id)

    def after_turn(
        self,
        conversation: ConversationRef,
        messages: Iterable[Any] = (),
        *,
        token_budget: int | None = None,
        format: str | None = None,
    ) -> TurnResult:
        """After the model answered: store the turn's new messages, then compact if needed.

        Compaction is incremental (a leaf pass once enough raw material is outside the fresh
        tail, then condensation up to ``incremental_max_depth``); with *token_budget*, a
        context above ``context_threshold`` of it is compacted down to ``compaction_target``
        of it.
        Compaction is best effort: a failure is logged and reported, never raised, so the
        conversation goes on. With ``background_compaction`` it runs in a worker thread.
        """
        ingest = self.ingest_batch(conversation, messages, format=format)
        conv_id = ingest.conversation_id
        if self.config.background_compaction:
            return TurnResult(ingest, None, deferred=self._defer(conv_id, token_budget))
        try:
            report = self._turn_compaction(conv_id, token_budget)
        except Exception as exc:  # best effort: the turn must not fail because of compaction
            logger.exception("compaction of conversation %s failed", conv_id)
            return TurnResult(ingest, None, error=f"{type(exc).__name__}: {exc}")
        return TurnResult(ingest, report)

    def _turn_compaction(self, conversation_id: int, token_budget: int | None) -> CompactionReport:
        report = self.compact(conversation_id, mode="incremental", budget=token_budget)
        if token_budget is not None:
            threshold = int(token_budget * self.config.context_threshold)
            # Crossing the threshold compacts down to the (lower) target, so the next turns
            # have headroom instead of triggering a small compaction each.
            target = int(
                token_budget * min(self.config.compaction_target, self.config.context_threshold)
            )
            if report.tokens_after > threshold:
                over = self.compact(conversation_id, until=target, budget=token_budget)
                report.passes.extend(over.passes)
                report.rounds = over.rounds
                report.target = target
                report.tokens_after = over.tokens_after
        return report

    def _defer(self, conversation_id: int, token_budget: int | None) -> bool:
        with self._pending_guard:
            running = self._pending.get(conversation_id)
            if running is not None and not running.done():
                return False  # one queued run per conversation is enough
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=2, thread_name_prefix="lossless-compaction"
                )
            self._pending[conversation_id] = self._executor.submit(
                self._background, conversation_id, token_budget
            )
            return True

    def _background(self, conversation_id: int, token_budget: int | None) -> CompactionReport:
        try:
            return self._turn_compaction(conversation_id, token_budget)
        except Exception:  # a worker's top level: log and let the next turn try again
            logger.exception("background compaction of conversation %s failed", conversation_id)
            raise

    def wait_for_compaction(self, timeout: float | None = None) -> list[CompactionReport]:
        """Wait (at most *timeout* seconds in all) for queued background compaction.

        Returns the reports of the runs that finished; runs still going stay queued, and a
        later call collects them. Failed runs were logged by the worker and are dropped.
        """
        with self._pending_guard:
            futures = dict(self._pending)
        wait(list(futures.values()), timeout=timeout)
        reports = []
        with self._pending_guard:
            for conv_id, future in futures.items():
                if not future.done():
                    continue
                if self._pending.get(conv_id) is future:
                    del self._pending[conv_id]
                if future.exception() is None:
                    reports.append(future.result())
        return reports

    def assemble(
        self,
        conversation: ConversationRef,
        token_budget: int,
        *,
        format: str = "anthropic",
    ) -> AssembledContext:
        """The messages to send the model before its next turn, within *token_budget*.

        Summaries come first as XML, then the newest items that fit, then the fresh tail
        (always, even over budget); tool calls and results are never left without each other.
        """
        conv = self.conversation(conversation)
        return assemble_context(self, conv.conversation_id, token_budget, format=format)

    def grep(
        self,
        pattern: str,
        *,
        conversation: ConversationRef | None = None,
        family: bool = True,
        mode: Mode = "full_text",
        scope: Scope = "both",
        since: str | None = None,
        before: str | None = None,
        limit: int = 50,
        sort: Sort = "recency",
    ) -> GrepResult:
        """``lcm_grep``: search messages, summaries or large files.

        With *conversation*, the search covers its family (the conversations sharing its
        session key; only itself with ``family=False``); without, the whole store.
        """
        ids = None
        if conversation is not None:
            conv = self.conversation(conversation)
            ids = self.store.family_ids(conv) if family else [conv.conversation_id]
        return grep_store(
            self.store,
            pattern,
            conversation_ids=ids,
            mode=mode,
            scope=scope,
            since=since,
            before=before,
            limit=limit,
            sort=sort,
        )

    def describe(
        self,
        ident: str,
        *,
        conversation: ConversationRef | None = None,
        token_cap: int | None = None,
        lines: tuple[int, int] | None = None,
    ) -> Description:
        """``lcm_describe``: a summary, large file or message by id, with what lies below it.

        With *conversation*, ids outside its family are unknown (nothing leaks across).
        """
        scope = None
        if conversation is not None:
            scope = self.store.family_ids(self.conversation(conversation))
        return describe_id(self, ident, scope=scope, token_cap=token_cap, lines=lines)

    def create_grant(
        self,
        conversation: ConversationRef,
        *,
        family: bool = True,
        token_cap: int | None = None,
        max_depth: int | None = None,
        ttl_seconds: int | None = None,
        purpose: str | None = None,
    ) -> Grant:
        """A delegation grant over a conversation (and its family): what a sub-agent may expand.

        Defaults: ``max_expand_tokens``, ``grant_max_depth``, ``grant_ttl_seconds``.
        """
        conv = self.conversation(conversation)
        ids = self.store.family_ids(conv) if family else [conv.conversation_id]
        grants.sweep(self.store)
        return grants.create(
            self.store,
            ids,
            token_cap=token_cap or self.config.max_expand_tokens,
            max_depth=self.config.grant_max_depth if max_depth is None else max_depth,
            ttl_seconds=ttl_seconds or self.config.grant_ttl_seconds,
            purpose=purpose,
        )

    def revoke_grant(self, grant_id: str) -> None:
        """Revoke a delegation grant now."""
        grants.revoke(self.store, grant_id)

    def expand(
        self,
        grant_id: str,
        summary_ids: Sequence[str],
        *,
        max_depth: int | None = None,
        include_messages: bool = False,
        token_cap: int | None = None,
    ) -> ExpandResult:
        """``lcm_expand``: walk the DAG down from *summary_ids*, within what the grant allows."""
        return expand_dag(
            self,
            grant_id,
            summary_ids,
            max_depth=max_depth,
            include_messages=include_messages,
            token_cap=token_cap,
        )

    def expand_query(
        self,
        prompt: str,
        *,
        conversation: ConversationRef,
        query: str | None = None,
        summary_ids: Sequence[str] | None = None,
        max_tokens: int | None = None,
    ) -> ExpandQueryResult:
        """``lcm_expand_query``: answer *prompt* from the history below the summaries.

        Runs under a delegation grant that is revoked when it ends; see
        :mod:`lossless.retrieval.expand_query`.
        """
        return expand_query_answer(
            self,
            prompt,
            conversation=conversation,
            query=query,
            summary_ids=summary_ids,
            max_tokens=max_tokens,
        )

    def context(self, conversation: ConversationRef) -> list[ContextItem]:
        """The conversation's active context items, in order."""
        return self.store.context(self.conversation(conversation).conversation_id)

    def summary(self, summary_id: str) -> Summary:
        """One summary by id."""
        return self.store.get_summaries([summary_id])[0]

    # --- transcripts -----------------------------------------------------------------------

    def bootstrap(
        self,
        transcript: str | os.PathLike[str],
        *,
        format: str | None = None,
        session_id: str | None = None,
        progress: Progress | None = None,
    ) -> list[ReconcileReport]:
        """Reconcile the store with a transcript file (crash recovery on session start).

        Imports what the file has and the store lacks, after the newest entry both have;
        re-running it, or running it on the grown file, never stores a message twice.
        """
        return reconcile_file(
            self, Path(transcript), format=format, session_id=session_id, progress=progress
        )

    def import_path(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        progress: Progress | None = None,
    ) -> list[ReconcileReport]:
        """Import a transcript file, or every transcript below a directory.

        In a directory, ``.jsonl`` files and ``.json`` files that look like transcripts are
        imported; other ``.json`` files (Claude Code's ``sessions-index.json``, sub-agent
        ``.meta.json`` sidecars, ...) are passed over. A file that cannot be read as a
        transcript does not stop the others: it gets a report with ``mode="failed"`` and the
        problem. *progress* receives bytes done and total over all the files.
        """
        root = Path(path).expanduser()
        files = transcript_files(root)
        total = sum(f.stat().st_size for f in files)
        base = 0
        reports: list[ReconcileReport] = []
        for file in files:

            def advance(done: int, _size: int, offset: int = base) -> None:
                if progress is not None:
                    progress(offset + done, total)

            try:
                reports.extend(self.bootstrap(file, format=format, progress=advance))
            except ImportProblem as problem:
                if root.is_dir() and file.suffix == ".json" and format is None:
                    logger.info("passing over %s: %s", file, problem.reason)
                else:
                    reports.append(ReconcileReport.failed(file, problem))
            base += file.stat().st_size
        return reports

    # --- reading ---------------------------------------------------------------------------

    def messages(
        self, conversation: ConversationRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        """Stored messages of a conversation in order."""
        conv = self.conversation(conversation)
        return self.store.get_messages(conv.conversation_id, after_seq=after_seq, limit=limit)

    def get_message(self, message_id: int) -> StoredMessage:
        """One stored message by id (``msg#<id>``)."""
        return self.store.get_message(message_id)

    def stats(self) -> dict[str, Any]:
        """Totals over the whole store (what ``lossless stats`` shows)."""
        convs = self.conversations()
        by_depth: dict[int, int] = {}
        for c in convs:
            for depth, n in c.summaries_by_depth.items():
                by_depth[depth] = by_depth.get(depth, 0) + n
        return {
            "database": str(self.store.path),
            "backend": self.store.backend,
            "conversations": len(convs),
            "messages": sum(c.message_count for c in convs),
            "message_tokens": sum(c.message_tokens for c in convs),
            "summaries": sum(c.summary_count for c in convs),
            "summaries_by_depth": dict(sorted(by_depth.items())),
            "context_items": sum(c.context_items for c in convs),
            "context_tokens": sum(c.context_tokens for c in convs),
            "bytes": self.store.database_size(),
            "migrations": self.store.applied_migrations(),
            "summarizer": {
                "name": self.summarizer.name,
                "model": self.summarizer.model,
                "offline": self.summarizer.offline,
                "guards": guard_state(self.summarizer),
            },
        }


def transcript_files(root: Path) -> list[Path]:
    """The transcript files a path names: itself, or the ``.jsonl``/``.json`` files below it."""
    if root.is_file():
        return [root]
    if root.is_dir():
        return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))
    raise NotFoundError(f"{root} does not exist; give a transcript file or a directory of them")
