"""The OpenAI Agents SDK session: lossless memory for ``Runner.run``.

:class:`LosslessSession` implements the SDK's ``Session`` protocol over an
:class:`~lossless.aio.AsyncEngine` (every store and summarizer call runs off the event loop):

* ``get_items()`` returns the *assembled* context, never the raw history: the summaries that
  replaced old turns (the spec's XML, marked as untrusted history), the resume summary, then
  the newest items, as Responses input items within ``token_budget``; a tool call and its
  output are always both there or both left out. ``get_items(limit)`` returns its newest
  *limit* items.
* ``add_items(items)`` stores the items and runs :meth:`~lossless.engine.Engine.after_turn`,
  which compacts when needed. Adding items again never stores them twice (below).
* ``pop_item()`` takes the newest message out of the active context and returns it as it was
  added. The message stays stored, and the recall tools still find it.
* ``clear_session()`` archives the conversation and goes on in a new one of the same family:
  the next ``get_items()`` is empty, and the recall tools still search everything.

External ids make ``add_items`` idempotent. An item keeps its own ``id`` (Responses items:
``msg_...``, ``fc_...``, ``rs_...``) unless it is the SDK's placeholder ``__fake_id__``; a tool
output is named by its call (``function_call_output:call_1``); any other item (the user's
input, say) gets ``agents:<position>:<digest>`` from its position in the conversation and its
content. Items already at the end of the active context, in the same order, are skipped
before any of that, so adding the same batch twice in a row stores it once; identical text
at another position is a message of its own. An item added again after ``pop_item`` took it
back is stored again under its id plus ``#2`` (``#3``, ...), since the first copy is no longer
in the context.

:func:`recall_tools` gives the agent ``lcm_grep``, ``lcm_describe``, ``lcm_expand_query`` and
``chat_context_query`` as function tools, bound to the session's conversation family.

The SDK (``pip install 'lossless[agents]'``) is imported with this module, which nothing in the
core imports.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from ..aio import AsyncEngine
from ..assemble import AssembledContext
from ..engine import Engine, TurnResult
from ..errors import LosslessError
from ..ingest.shapes import NormalizedMessage, safe_id
from ..model import Conversation
from ..timestamps import format_ts, now

INSTALL_HINT = "the OpenAI Agents SDK integration needs the SDK: pip install 'lossless[agents]'"

try:
    from agents import FunctionTool, function_tool
    from agents.items import TResponseInputItem
    from agents.models.fake_id import FAKE_RESPONSES_ID
    from pydantic import Field
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] not in ("agents", "openai", "pydantic"):
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

if TYPE_CHECKING:
    from agents.memory import SessionSettings  # openai-agents 0.16 and later

__all__ = ["DEFAULT_TOKEN_BUDGET", "INSTALL_HINT", "LosslessSession", "recall_tools"]

#: The assembly budget when none is given: room for a 128k-token window's answer and tools.
DEFAULT_TOKEN_BUDGET = 100_000

#: Where a conversation keeps what this session knows of it (in ``conversations.metadata``).
STATE_KEY = "openai_agents"


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
        session_settings: SessionSettings | None = None,
    ) -> None:
        if token_budget < 1:
            raise ValueError(
                f"token_budget must be a positive number of tokens, not {token_budget}"
            )
        self.session_id = session_id
        self.engine = engine if isinstance(engine, AsyncEngine) else AsyncEngine(engine)
        self.token_budget = token_budget
        self.session_settings = session_settings
        #: What the last :meth:`add_items` did: the ingest and the compaction report.
        self.last_turn: TurnResult | None = None
        self._current: Conversation | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

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
            self._current = await asyncio.to_thread(_resolve, self.engine.engine, self.session_id)
        return self._current

    async def assemble(self) -> AssembledContext:
        """The assembled context with its token count and what went into it (what
        :meth:`get_items` returns, with the figures)."""
        conv = await self.conversation()
        return await self.engine.assemble(
            conv.conversation_id, self.token_budget, format="responses"
        )

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The assembled context as Responses input items (its newest *limit* with a limit)."""
        async with self._serial():
            items = (await self.assemble()).messages
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store *items* (idempotently) and compact if needed (``after_turn``)."""
        if not items:
            return
        async with self._serial():
            conv = await self.conversation()
            conv_id = conv.conversation_id
            norms = await asyncio.to_thread(_prepare, self.engine.engine, conv_id, list(items))
            self.last_turn = await self.engine.after_turn(
                conv_id, norms, token_budget=self.token_budget
            )

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest message out of the active context and return it as it was added.

        The message stays stored (and searchable). ``None`` when the active context holds no
        message at its end: it is empty, or everything in it was compacted.
        """
        async with self._serial():
            conv = await self.conversation()
            popped = await asyncio.to_thread(_pop, self.engine.engine, conv.conversation_id)
        return cast(TResponseInputItem | None, popped)

    async def clear_session(self) -> None:
        """Archive the conversation and go on in a new, empty one of the same family.

        Nothing is deleted: the archived conversation keeps its messages and summaries, and
        the recall tools (which search the family) still find them.
        """
        async with self._serial():
            conv = await self.conversation()
            self._current = await asyncio.to_thread(
                _archive_and_continue, self.engine.engine, conv.conversation_id, self.session_id
            )


def recall_tools(session: LosslessSession) -> list[FunctionTool]:
    """``lcm_grep``, ``lcm_describe``, ``lcm_expand_query`` and ``chat_context_query`` as Agents
    SDK function tools, searching the session's conversation family (archived generations
    included). Each returns JSON; lossless's own errors come back as ``{"error": ...}``."""
    engine = session.engine

    async def family() -> int:
        return (await session.conversation()).conversation_id

    async def lcm_grep(
        pattern: Annotated[
            str,
            Field(description="Words, a quoted phrase or a question (full_text), or a regex."),
        ],
        mode: Annotated[
            Literal["full_text", "regex"],
            Field(description="full_text (the search index) or regex (newest first)."),
        ] = "full_text",
        scope: Annotated[
            Literal["both", "messages", "summaries", "files"],
            Field(description="What to search."),
        ] = "both",
        limit: Annotated[int, Field(ge=1, le=200, description="Most hits to return.")] = 20,
    ) -> str:
        """Search the stored history of this conversation, older parts included: every
        message exactly as it was, the summaries that replaced old context, large files.

        Step 1 of recall. Each hit has an id (msg#42, sum_<16 hex>, file_<16 hex>), its time,
        role or depth and a snippet. Next: lcm_describe(id), or lcm_expand_query(prompt) to
        answer a question from the exact history below the summaries.
        """

        async def run() -> dict[str, Any]:
            result = await engine.grep(
                pattern,
                conversation=await family(),
                mode=mode,
                scope=scope,
                limit=limit,
                sort="relevance" if mode == "full_text" else "recency",
            )
            return {"hits": [h.to_dict() for h in result.hits], "truncated": result.truncated}

        return await _answer(run)

    async def lcm_describe(
        id: Annotated[str, Field(description="msg#42, sum_0123456789abcdef or file_...")],
        token_cap: Annotated[
            int | None, Field(ge=1, description="Tokens you could read below a summary.")
        ] = None,
    ) -> str:
        """Describe an id from lcm_grep or from a summary's text: a summary's metadata, what
        it was made from and the token cost of reading below it; a message or file in full.

        Step 2 of recall; then lcm_expand_query(prompt, summary_ids=[...]).
        """

        async def run() -> dict[str, Any]:
            found = await engine.describe(id, conversation=await family(), token_cap=token_cap)
            return found.to_dict()

        return await _answer(run)

    async def lcm_expand_query(
        prompt: Annotated[str, Field(description="The question to answer from the history.")],
        query: Annotated[
            str | None, Field(description="Search words for the summaries (default: prompt).")
        ] = None,
        summary_ids: Annotated[
            list[str] | None, Field(description="Summaries to read below (sum_...).")
        ] = None,
    ) -> str:
        """Answer a question from the exact history below the summaries, citing the ids it
        used (msg#42, sum_...). Step 3 of recall, after lcm_grep."""

        async def run() -> dict[str, Any]:
            result = await engine.expand_query(
                prompt,
                conversation=await family(),
                query=query,
                summary_ids=[s.strip() for s in summary_ids or [] if s.strip()] or None,
            )
            return result.to_dict()

        return await _answer(run)

    async def chat_context_query(
        text: Annotated[
            str | None, Field(description="Words that must all appear; omit to filter only.")
        ] = None,
        kind: Annotated[
            Literal["both", "frames", "executions"],
            Field(description="frames (messages), executions (tool calls), or both."),
        ] = "both",
        tool_name: Annotated[str | None, Field(description="Only executions of this tool.")] = None,
        status: Annotated[
            Literal["ok", "error", "pending"] | None,
            Field(description="Only executions that succeeded, failed, or have no result."),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="Most of each kind.")] = 20,
        offset: Annotated[int, Field(ge=0, description="Skip this many (paging).")] = 0,
    ) -> str:
        """Query past messages and the tool-execution log: what a tool was called with and
        what it returned, which calls failed, what was said when. Newest first."""

        async def run() -> dict[str, Any]:
            result = await engine.chat_context_query(
                conversation=await family(),
                kind=kind,
                tool_name=tool_name,
                status=status,
                text=text,
                limit=limit,
                offset=offset,
            )
            return result.to_dict()

        return await _answer(run)

    return [
        function_tool(lcm_grep, strict_mode=False),
        function_tool(lcm_describe, strict_mode=False),
        function_tool(lcm_expand_query, strict_mode=False),
        function_tool(chat_context_query, strict_mode=False),
    ]


async def _answer(run: Callable[[], Any]) -> str:
    """A tool's JSON answer; lossless's own errors (bad regex, unknown id, ...) go back to
    the model as ``{"error": ...}`` with their advice, not as a failed run."""
    try:
        out = await run()
    except LosslessError as exc:
        out = {"error": str(exc)}
    return json.dumps(out, ensure_ascii=False, default=str)


# --- the work behind the methods, run in worker threads -------------------------------------


def _state(conversation: Conversation) -> dict[str, Any]:
    value = conversation.metadata.get(STATE_KEY)
    return dict(value) if isinstance(value, Mapping) else {}


def _resolve(engine: Engine, session_id: str) -> Conversation:
    """The session's current conversation: the newest of ``S``, ``S#2``, ``S#3``, ...; a
    fresh one when that was archived (a clear stopped halfway)."""
    store = engine.store
    conv = store.find_conversation(session_id)
    if conv is None:
        conv = store.get_or_create_conversation(session_id, session_key=session_id)
        store.update_conversation(
            conv.conversation_id, metadata={STATE_KEY: {"session": session_id, "generation": 1}}
        )
        return store.get_conversation(conv.conversation_id)
    if conv.session_key is None:  # stored before it was a session: it starts the family
        store.update_conversation(conv.conversation_id, session_key=session_id)
        conv = store.get_conversation(conv.conversation_id)
    generation = 1
    while (later := store.find_conversation(f"{session_id}#{generation + 1}")) is not None:
        conv, generation = later, generation + 1
    if conv.status == "archived":
        return _next_generation(engine, conv, session_id, generation + 1)
    return conv


def _next_generation(
    engine: Engine, previous: Conversation, session_id: str, generation: int
) -> Conversation:
    conv = engine.store.get_or_create_conversation(
        f"{session_id}#{generation}", session_key=previous.session_key or session_id
    )
    return engine.update_conversation(
        conv.conversation_id,
        metadata={
            STATE_KEY: {
                "session": session_id,
                "generation": generation,
                "continues": previous.conversation_id,
            }
        },
    )


def _data(item: Any) -> Any:
    """An item as JSON data (SDK pydantic objects are dumped; dicts are kept as they are)."""
    dump = getattr(item, "model_dump", None)
    if callable(dump) and not isinstance(item, Mapping):
        return dump(mode="json", exclude_unset=True)
    return item


def _fingerprint(item: Any) -> str:
    text = json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _external_id(item: Any, position: int) -> str:
    """The item's own id, its tool call's, or one from its position and content."""
    if isinstance(item, Mapping):
        own = item.get("id")
        if isinstance(own, str) and own and own != FAKE_RESPONSES_ID:
            return own
        kind, call = item.get("type"), item.get("call_id")
        if isinstance(kind, str) and isinstance(call, str) and call:
            return f"{kind}:{call}"
    return f"agents:{position}:{_fingerprint(item)}"


def _overlap(tail: Sequence[Any], batch: Sequence[Any]) -> int:
    """How many of *batch*'s first items are already the last items of *tail*, in order."""
    for k in range(min(len(tail), len(batch)), 0, -1):
        if list(tail[-k:]) == list(batch[:k]):
            return k
    return 0


def _prepare(engine: Engine, conversation_id: int, items: list[Any]) -> list[NormalizedMessage]:
    """The items to store, normalized with their external ids (those already at the end of
    the active context left out)."""
    store = engine.store
    data = [_data(item) for item in items]
    tail_ids: list[int] = []
    for ctx_item in reversed(store.context(conversation_id)):
        if ctx_item.message_id is None or len(tail_ids) == len(data):
            break
        tail_ids.append(ctx_item.message_id)
    tail = [m.to_source() for m in store.get_messages_by_id(tail_ids[::-1])]
    fresh = data[_overlap(tail, data) :]
    popped = set(_state(store.get_conversation(conversation_id)).get("popped", ()))
    position = store.message_count(conversation_id)
    norms = []
    for n, item in enumerate(fresh, start=1):
        base = safe_id(_external_id(item, position + n))
        ext, copy = base, 1
        while ext in popped:  # taken back by pop_item: this is a new copy in the context
            copy += 1
            ext = f"{base}#{copy}"
        norms.append(engine.normalize(item, external_id=ext))
    return norms


def _pop(engine: Engine, conversation_id: int) -> Any:
    """Take the newest message out of the context; record its id so that adding it again
    stores a new copy."""
    with engine.lock(conversation_id):
        message = engine.pop_context(conversation_id)
        if message is None:
            return None
        if message.external_id is not None:
            state = _state(engine.conversation(conversation_id))
            state["popped"] = [*state.get("popped", ()), message.external_id]
            engine.update_conversation(conversation_id, metadata={STATE_KEY: state})
    return message.to_source()


def _archive_and_continue(engine: Engine, conversation_id: int, session_id: str) -> Conversation:
    """Archive the conversation and start the next of the session's family (an empty
    conversation is kept as it is: there is nothing to clear)."""
    with engine.lock(conversation_id):
        conv = engine.conversation(conversation_id)
        if engine.store.message_count(conversation_id) == 0:
            return conv
        generation = int(_state(conv).get("generation", 1))
        state = {**_state(conv), "archived_at": format_ts(now())}
        archived = engine.update_conversation(
            conversation_id, status="archived", metadata={STATE_KEY: state}
        )
        return _next_generation(engine, archived, session_id, generation + 1)
