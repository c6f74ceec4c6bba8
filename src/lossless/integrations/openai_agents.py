"""The OpenAI Agents SDK session: lossless memory for ``Runner.run``.

:class:`LosslessSession` implements the SDK's ``Session`` protocol over an
:class:`~lossless.aio.AsyncEngine` (every store and summarizer call runs off the event loop):

* ``get_items()`` returns the *assembled* context, never the raw history: the summaries that
  replaced old turns (the spec's XML, marked as untrusted history), the resume summary, then
  the newest items within ``token_budget``, each exactly as it was added (ids, types and
  roles kept, items of kinds lossless does not know included). A tool call whose output has
  not come yet is there; any other call and its output are both there or both left out.
  ``get_items(limit)`` returns its newest *limit* items; without *limit*, the session's
  ``session_settings.limit`` decides, as in the SDK's own sessions.
* ``add_items(items)`` stores every item, in order, as a new message (an exact append: a
  repeated item, a reused id such as the SDK's ``__fake_id__`` placeholder, the same words
  twice are each kept), then runs :meth:`~lossless.engine.Engine.after_turn`, which compacts
  when needed. A cancelled call still finishes its write before the cancellation goes on,
  so the caller knows what is stored.
* ``pop_item()`` takes the newest message out of the active context and returns it as it was
  added. The message stays stored, and the recall tools still find it.
* ``clear_session()`` archives the conversation and goes on in a new one of the same family:
  the next ``get_items()`` is empty, and the recall tools still search everything.
* ``prompt_aware_input`` (``RunConfig(call_model_input_filter=session.prompt_aware_input)``)
  makes the context prompt-aware: the runner reads the session before the new request is
  there, so before each model call the history ``get_items()`` gave is assembled again with
  the turn's request as the prompt (:meth:`~lossless.engine.Engine.assemble`'s ``prompt``:
  the turns it needs unfolded first), and the turn's own items follow it unchanged.

:func:`recall_tools` gives the agent ``lcm_grep``, ``lcm_describe``, ``lcm_expand_query`` and
``chat_context_query`` as function tools, bound to the session's conversation family.

The SDK (``pip install 'lossless[agents]'``) is imported with this module, which nothing in the
core imports.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

from ..aio import AsyncEngine
from ..assemble import AssembledContext
from ..engine import Engine, TurnResult
from ..errors import LosslessError
from ..ingest.normalizers.blocks import text_of_blocks
from ..model import Conversation, NormalizedMessage
from ..retrieval.describe import parse_lines
from ..retrieval.tools import TOOLS
from .generations import Generations

INSTALL_HINT = "the OpenAI Agents SDK integration needs the SDK: pip install 'lossless[agents]'"

try:
    from agents import FunctionTool, function_tool
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
    from agents.run_config import CallModelData, ModelInputData
    from pydantic import Field
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] not in ("agents", "openai", "pydantic"):
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

__all__ = ["DEFAULT_TOKEN_BUDGET", "INSTALL_HINT", "LosslessSession", "recall_tools"]

#: The assembly budget when none is given: room for a 128k-token window's answer and tools.
DEFAULT_TOKEN_BUDGET = 100_000

#: Where a conversation keeps what this session knows of it (in ``conversations.metadata``).
STATE_KEY = "openai_agents"
#: A session's generations (a clear archives one and goes on in the next).
GENERATIONS = Generations(STATE_KEY)

T = TypeVar("T")


class LosslessSession:
    """An OpenAI Agents SDK session whose history is a lossless store (see the module doc).

    *engine* is an :class:`~lossless.aio.AsyncEngine`, or an :class:`~lossless.engine.Engine`
    to wrap in one; the caller keeps ownership of it (and closes it). The session's first
    conversation has *session_id* as its session id; after :meth:`clear_session` the next ones
    are ``<session_id>#2``, ``#3``, ... in the same family (session key *session_id*).

        engine = await AsyncEngine.open("agent.db")
        session = LosslessSession("user-42", engine, token_budget=100_000)
        result = await Runner.run(agent, "Where did we deploy?", session=session)
    """

    def __init__(
        self,
        session_id: str,
        engine: AsyncEngine | Engine,
        *,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        if token_budget < 1:
            raise ValueError(
                f"token_budget must be a positive number of tokens, not {token_budget}"
            )
        self.session_id = session_id
        self.engine = engine if isinstance(engine, AsyncEngine) else AsyncEngine(engine)
        self.token_budget = token_budget
        #: The SDK's session settings (``limit``: how many items ``get_items()`` returns).
        if isinstance(session_settings, Mapping):
            session_settings = dict(session_settings)
        self.session_settings: SessionSettings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        #: What the last :meth:`add_items` did: the ingest and the compaction report.
        self.last_turn: TurnResult | None = None
        self._current: Conversation | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        #: What the last get_items() gave (its items, and the conversation's stored messages
        #: then), for :meth:`prompt_aware_input`; ``None`` after a limited one.
        self._given: tuple[list[Any], int] | None = None

    def __repr__(self) -> str:
        return f"LosslessSession({self.session_id!r}, token_budget={self.token_budget})"

    def _serial(self) -> asyncio.Lock:
        """The lock that orders this session's operations, one per event loop (a session may
        outlive the loop it was first used in, as with one ``asyncio.run`` per turn)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def conversation(self) -> Conversation:
        """The conversation the session adds to now (created on first use)."""
        if self._current is None:
            self._current = await asyncio.to_thread(
                GENERATIONS.current, self.engine.engine, self.session_id
            )
        return self._current

    async def assemble(self) -> AssembledContext:
        """The assembled context with its token count and what went into it (what
        :meth:`get_items` returns, with the figures)."""
        conv = await self.conversation()
        # The SDK's items come back exactly as added: no date marks in them.
        return await self.engine.assemble(
            conv.conversation_id,
            self.token_budget,
            format="responses",
            pending_calls=True,
            dates=False,
        )

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The assembled context as Responses input items: its newest *limit* (default: the
        session settings' ``limit``; ``None`` or a negative number means all of it)."""
        async with self._serial():
            items = (await self.assemble()).messages
            stored = await self.engine.message_count((await self.conversation()).conversation_id)
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted >= 0:
            items = items[-wanted:] if wanted else []
            self._given = None
        else:
            self._given = (json.loads(json.dumps(items)), stored)
        return cast(list[TResponseInputItem], items)

    async def prompt_aware_input(self, data: CallModelData[Any]) -> ModelInputData:
        """A ``RunConfig.call_model_input_filter``: the model's input with the history
        :meth:`get_items` gave assembled again for the turn's request (the newest user message
        after it), within the same budget plus what the turn has added; the turn's own items
        follow unchanged. The input is left as it is when it does not start with what
        :meth:`get_items` gave (another session's, or a limited one), when the turn has no
        request (a run continuing from tool output), or when the store does not hold the
        turn's items as the runner sent them.

            config = RunConfig(call_model_input_filter=session.prompt_aware_input)
            await Runner.run(agent, "What port did we pick?", session=session, run_config=config)
        """
        given = self._given
        model_data = data.model_data
        items = list(model_data.input)
        if given is None or items[: len(given[0])] != given[0]:
            return model_data
        turn = items[len(given[0]) :]
        prompt = next(
            (text for text in map(_request_text, reversed(turn)) if text is not None), None
        )
        if prompt is None:
            return model_data
        async with self._serial():
            conv = await self.conversation()
            stored = await self.engine.message_count(conv.conversation_id) - given[1]
            if not 0 <= stored <= len(turn):
                return model_data
            added = await asyncio.to_thread(_prepare, self.engine.engine, turn[:stored])
            made = await self.engine.assemble(
                conv.conversation_id,
                self.token_budget + sum(m.token_count for m in added),
                format="responses",
                pending_calls=True,
                dates=False,
                prompt=prompt,
            )
        assembled = made.messages
        history = assembled[: len(assembled) - stored]
        if stored and json.loads(json.dumps(assembled[len(history) :])) != turn[:stored]:
            return model_data  # the turn's items are not the context's newest: leave it
        return ModelInputData(
            input=[*cast(list[TResponseInputItem], history), *turn],
            instructions=model_data.instructions,
        )

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store every item as a new message, in order, and compact if needed
        (``after_turn``)."""
        if not items:
            return
        batch = list(items)

        async def write() -> None:
            async with self._serial():
                conv = await self.conversation()
                conv_id = conv.conversation_id
                norms = await asyncio.to_thread(_prepare, self.engine.engine, batch)
                self.last_turn = await self.engine.after_turn(
                    conv_id, norms, token_budget=self.token_budget
                )

        await _settled(write())

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest message out of the active context and return it as it was added.

        The message stays stored (and searchable). ``None`` when the active context holds no
        message at its end: it is empty, or everything in it was compacted.
        """

        async def take() -> Any:
            async with self._serial():
                conv = await self.conversation()
                message = await self.engine.pop_context(conv.conversation_id)
            return None if message is None else message.to_source()

        return cast(TResponseInputItem | None, await _settled(take()))

    async def clear_session(self) -> None:
        """Archive the conversation and go on in a new, empty one of the same family.

        Nothing is deleted: the archived conversation keeps its messages and summaries, and
        the recall tools (which search the family) still find them.
        """

        async def clear() -> None:
            async with self._serial():
                conv = await self.conversation()
                self._current = await asyncio.to_thread(
                    GENERATIONS.clear,
                    self.engine.engine,
                    conv.conversation_id,
                    self.session_id,
                )

        await _settled(clear())


def recall_tools(session: LosslessSession) -> list[FunctionTool]:
    """``lcm_grep``, ``lcm_describe``, ``lcm_expand_query`` and ``chat_context_query`` as Agents
    SDK function tools, searching the session's conversation family (archived generations
    included). Their names, descriptions and parameters are the recall tools' one declaration
    (:mod:`lossless.retrieval.tools`), without ``conversation``: the session decides it. Each
    returns JSON; lossless's own errors come back as ``{"error": ...}``."""
    engine = session.engine

    async def family() -> int:
        return (await session.conversation()).conversation_id

    async def lcm_grep(**args: Any) -> str:
        async def run() -> dict[str, Any]:
            result = await engine.grep(conversation=await family(), **args)
            return {"hits": [h.to_dict() for h in result.hits], "truncated": result.truncated}

        return await _answer(run)

    async def lcm_describe(id: str, token_cap: int | None, lines: str | None) -> str:
        async def run() -> dict[str, Any]:
            span = parse_lines(lines)
            found = await engine.describe(
                id, conversation=await family(), token_cap=token_cap, lines=span
            )
            return found.to_dict()

        return await _answer(run)

    async def lcm_expand_query(
        prompt: str, query: str | None, summary_ids: list[str] | None, max_tokens: int | None
    ) -> str:
        async def run() -> dict[str, Any]:
            result = await engine.expand_query(
                prompt,
                conversation=await family(),
                query=query,
                summary_ids=[s.strip() for s in summary_ids or [] if s.strip()] or None,
                max_tokens=max_tokens,
            )
            return result.to_dict()

        return await _answer(run)

    async def chat_context_query(**args: Any) -> str:
        async def run() -> dict[str, Any]:
            result = await engine.chat_context_query(conversation=await family(), **args)
            return result.to_dict()

        return await _answer(run)

    made = []
    for implementation in (lcm_grep, lcm_describe, lcm_expand_query, chat_context_query):
        declared = TOOLS[implementation.__name__]
        made.append(
            function_tool(
                declared.bind(implementation, Field, omit=("conversation",)),
                name_override=declared.name,
                description_override=declared.description,
                strict_mode=False,
            )
        )
    return made


async def _answer(run: Callable[[], Any]) -> str:
    """A tool's JSON answer; lossless's own errors (bad regex, unknown id, ...) go back to
    the model as ``{"error": ...}`` with their advice, not as a failed run."""
    try:
        out = await run()
    except LosslessError as exc:
        out = {"error": str(exc)}
    return json.dumps(out, ensure_ascii=False, default=str)


# --- the work behind the methods, run in worker threads -------------------------------------


def _request_text(item: Any) -> str | None:
    """The text of *item* when it is a user's message (a request), else ``None``."""
    if not isinstance(item, Mapping) or item.get("role") != "user":
        return None
    if item.get("type", "message") != "message":
        return None
    text = text_of_blocks(item.get("content"))
    return text if text.strip() else None


def _data(item: Any) -> Any:
    """An item as JSON data (SDK pydantic objects are dumped; dicts are kept as they are)."""
    dump = getattr(item, "model_dump", None)
    if callable(dump) and not isinstance(item, Mapping):
        return dump(mode="json", exclude_unset=True)
    return item


def _prepare(engine: Engine, items: list[Any]) -> list[NormalizedMessage]:
    """The items to store, normalized (an id inside an item is kept with it; it is not a
    key: hosts reuse them)."""
    return [engine.normalize(_data(item)) for item in items]


async def _settled(work: Awaitable[T]) -> T:
    """Run *work* to its end even when the caller is cancelled meanwhile, then let the
    cancellation go on: a cancelled write still lands whole or not at all, and the caller
    knows which (what the SDK's own sessions promise)."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise  # the work itself was cancelled
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result
