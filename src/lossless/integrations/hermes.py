"""Hermes Agent's context engine: lossless keeps every turn, compresses by assembling, and
gives the agent the recall tools (``pip install 'lossless[hermes]'``).

Hermes (PyPI ``hermes-agent``) finds this module through its ``hermes_agent.plugins`` entry
point; ``register(ctx)`` registers :class:`LosslessContextEngine` and a ``post_llm_call``
hook. Select it in ``$HERMES_HOME/config.yaml``::

    plugins: {enabled: [lossless]}
    context: {engine: lossless}

The store is lossless's own: ``LOSSLESS_DB`` / ``LOSSLESS_CONFIG`` / the config file, as for
the CLI. A Hermes session is a lossless conversation with the same session id.

* **Every turn is stored** by the ``post_llm_call`` hook (Hermes has no per-turn engine
  method), whether or not Hermes compresses, and again (idempotently) whenever Hermes hands
  messages over: ``compress`` and ``on_session_end`` store what the store lacks first, so a turn
  the hook never saw (an interrupted one) is kept too.
* **The room** is what Hermes's window leaves the conversation: the window less Hermes's own
  part of every request (its system prompt and tool schemas, measured from a session's first
  request the ``pre_api_request`` hook sees, and from ``compress``'s ``current_tokens``; kept
  per session)
  less the reply (Hermes's ``max_tokens``). ``context_threshold`` is a share of that room, so a
  threshold below Hermes's own ~13k tokens cannot make it compress before every turn (a
  warning says so once).
* **Compression** is lossless's: the conversation is compacted to ``compaction_target`` of the
  room (``focus_topic`` passed to the summarizer; once a turn however often Hermes asks) and
  the assembled context — summaries (one user message), then the newest turns with tool calls
  and results together, under the threshold — replaces Hermes's working list.
* **Recall**: ``lcm_grep``, ``lcm_describe``, ``lcm_expand_query``, ``chat_context_query``,
  ``get_history`` and the rest of a pinned scope's tools, searching the session's own
  conversations.

Which of Hermes's messages are new is found without trusting Hermes to keep them unchanged:
after storing, the conversation's metadata records how many messages of the working list are
stored and a fingerprint of the last one; when the list still agrees with that, the rest is
new, otherwise the longest run of the list that the stored tail ends with is taken as stored.

Hermes deep-copies the engine for every agent, so an engine holds no connection: the store is
opened on first use and shared by every copy in the process (closed at exit, after background
work).
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..assemble import UNTRUSTED_NOTE
from ..codec import SUMMARY_MESSAGE_LEAD, chat_fingerprint
from ..config import load_config
from ..engine import Engine
from ..errors import NotFoundError
from ..resume import HEADER as RESUME_HEADER
from ..room import Room, default_room
from ..toolbox import SESSION_TOOLS, ToolScope, call_json, tool_schemas
from .absorb import Absorber
from .finisher import finish_if_pending

INSTALL_HINT = "the Hermes Agent engine needs Hermes Agent: pip install 'lossless[hermes]'"

try:
    from agent.context_engine import ContextEngine
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] != "agent":
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

__all__ = ["ENGINE_NAME", "INSTALL_HINT", "LosslessContextEngine", "register"]

logger = logging.getLogger(__name__)

#: The name ``context.engine`` selects (and the plugin's name).
ENGINE_NAME = "lossless"
#: Hermes's own background reviews (of memory, of skills) replay the conversation under a
#: prompt that begins so, with the parent's session id; those turns are not the conversation's.
REVIEW_PROMPT = "Review the conversation above"
#: Hermes's keys on a message that are its bookkeeping, not the message.
HOST_KEYS = ("_db_persisted",)
#: The tools the agent gets (a session's own conversations; nothing that writes history).
TOOL_NAMES = SESSION_TOOLS
#: How the message lossless hands Hermes with the summaries begins.
SUMMARY_LEAD = SUMMARY_MESSAGE_LEAD
#: The window when Hermes has not named one yet (its own floor).
DEFAULT_WINDOW = 64_000

_engines: dict[str, Engine] = {}
_opening = threading.Lock()
#: session id → the model's window as Hermes last told an engine of that session (the
#: ``pre_api_request`` hook measures Hermes's own part of the window with it).
_windows: dict[str, int] = {}
#: Sessions whose too-low threshold was reported (once each).
_warned: set[str] = set()
#: Sessions whose requests the ``pre_api_request`` hook has measured in this process (once
#: each: Hermes's own part changes little within a session, and ``compress`` measures again
#: from its ``current_tokens``; counting the whole working list on every request would put
#: the history's length on every call).
_measured: set[str] = set()


def shared_engine() -> Engine:
    """The process's engine on the configured store (opened on first use, closed at exit)."""
    with _opening:
        engine = _engines.get("default")
        if engine is None:
            engine = _engines["default"] = Engine.open(config=load_config())
            atexit.register(_close, engine)
        return engine


def _close(engine: Engine) -> None:
    """At Hermes's exit: provisional summaries the model has not replaced yet go to a
    ``lossless finish`` process of its own (it reads the same ``LOSSLESS_*`` settings), then
    the engine closes without waiting for the model."""
    finish_if_pending(engine)
    engine.close()


def _is_ours(message: Mapping[str, Any]) -> bool:
    """A summary message lossless put into the working list (not the conversation's)."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith(SUMMARY_LEAD)


def _clean(message: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in HOST_KEYS}


#: How Hermes's lists are stored (see :mod:`.absorb`).
ABSORBER = Absorber("hermes", "openai_chat", chat_fingerprint, _is_ours, _clean)


def absorb(engine: Engine, session_id: str, working: Sequence[Mapping[str, Any]]) -> int:
    """Store the messages of Hermes's *working* list that the conversation lacks, in order;
    returns how many were stored. Running it again on the same list stores nothing."""
    return ABSORBER.absorb(engine, session_id, working)


def mark(engine: Engine, session_id: str, *lists: Sequence[Mapping[str, Any]]) -> None:
    """Record that every message of each of *lists* is stored (or is lossless's own)."""
    ABSORBER.mark(engine, session_id, *lists)


class LosslessContextEngine(ContextEngine):  # type: ignore[misc]  # Hermes is untyped
    """Hermes's ``ContextEngine`` over lossless (see the module docstring)."""

    name = ENGINE_NAME

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.compression_count = 0
        self.last_prompt_tokens = 0
        self.last_completion_tokens = 0
        self.last_total_tokens = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> LosslessContextEngine:
        copy = type(self)()
        copy.__dict__.update(self.__dict__)
        return copy

    @property
    def engine(self) -> Engine:
        """The process's engine (opened on first use)."""
        return shared_engine()

    # --- what Hermes tells the engine ------------------------------------------------------

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        """The model's window: compress at ``context_threshold`` of the room it leaves the
        conversation (lossless's setting)."""
        self.threshold_percent = self.engine.config.context_threshold
        super().update_model(model, context_length, base_url, api_key, provider, api_mode)
        if self.session_id is not None and context_length:
            _windows[self.session_id] = int(context_length)
        self._threshold()

    def bind_session_state(self, session_db: Any = None, session_id: str | None = None) -> None:
        """Hermes names the session (at start, and after ``/new``, ``/resume``, ``/branch``)."""
        if session_id:
            self._bind(session_id)

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """A session starts (or goes on after a compression): remember its id. Its
        conversation is made by the first turn stored: Hermes starts sessions it never runs
        a turn in (a background review's agent, a sub-agent before its first call)."""
        self._bind(session_id)

    def _bind(self, session_id: str) -> None:
        self.session_id = session_id
        if self.context_length:
            _windows[session_id] = int(self.context_length)

    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        """Hermes hands over its working list (at exit, at ``/new``, before a compression):
        store what the conversation lacks."""
        if messages:
            self._absorb(session_id, messages)

    def update_from_response(self, usage: dict[str, Any]) -> None:
        """The last call's token usage (Hermes may pass an empty dict)."""
        self.last_prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.last_completion_tokens = int(usage.get("completion_tokens") or 0)
        self.last_total_tokens = int(usage.get("total_tokens") or 0)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether the prompt passed the threshold: Hermes's own part of it, and
        ``context_threshold`` of the room the window leaves the conversation."""
        tokens = prompt_tokens if prompt_tokens is not None else self.last_prompt_tokens
        self._threshold()
        return bool(self.threshold_tokens) and (tokens or 0) >= self.threshold_tokens

    def _room(self) -> Room:
        """The room of the session's messages (a default one for a session not stored yet)."""
        engine = self.engine
        window = int(self.context_length or DEFAULT_WINDOW)
        session = self.session_id
        if session is not None and engine.find_conversation(session) is not None:
            return engine.room(session, window)
        return default_room(engine.config.room, window)

    def _threshold(self) -> Room:
        """Set ``threshold_tokens`` (what Hermes reads) from the room; report once when the
        configured share of the window would be below Hermes's own part."""
        room = self._room()
        share = self.engine.config.context_threshold
        self.threshold_tokens = room.overhead + int(share * room.budget)
        session = self.session_id
        if (
            session is not None
            and room.source != "default"
            and share * room.window < room.overhead
            and session not in _warned
        ):
            _warned.add(session)
            logger.warning(
                "context_threshold %.2f of the %s-token window is %s tokens, below Hermes's own"
                " ~%s (system prompt and tools): lossless applies it to the room the"
                " conversation has (%s) and compresses once its messages pass %s tokens",
                share,
                f"{room.window:,}",
                f"{int(share * room.window):,}",
                f"{room.overhead:,}",
                room.describe(),
                f"{int(share * room.budget):,}",
            )
        return room

    # --- compression -----------------------------------------------------------------------

    def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[dict[str, Any]]:
        """Store what is new, compact the conversation to ``compaction_target`` of the room
        Hermes's window leaves it (the fresh tail down to the newest exchange if need be;
        once a turn, however often Hermes asks), and return the assembled context under the
        threshold (what compaction left, not unfolded to fill the room) as Hermes's new
        working list (no system message, tool calls with their results, no two messages of
        one role side by side)."""
        session_id = self.session_id
        if session_id is None or not messages:
            return messages
        engine = self.engine
        try:
            self._absorb(session_id, messages)
            window = int(self.context_length or DEFAULT_WINDOW)
            counted = _tokens(engine, messages)
            if current_tokens and current_tokens > counted:  # Hermes's part: the rest
                engine.measure_room(
                    session_id,
                    window=window,
                    prompt_tokens=current_tokens,
                    messages_tokens=counted,
                )
            room = self._threshold()
            engine.compact_for_host(
                session_id,
                room,
                host_tokens=current_tokens,
                full=force,
                instructions=focus_topic,
                format="openai",
            )
            # Under the threshold (so Hermes does not compress again at once), and not filled
            # back up with unfolded detail: that would bring the list straight back to it. The
            # stored messages the topic (or else the newest request) is about do come back,
            # within prompt_share of the room left.
            under = int(engine.config.context_threshold * room.budget) - 1
            budget = max(room.minimum, min(room.budget, under))
            made = engine.assemble(
                session_id,
                budget,
                format="openai",
                fill=False,
                focus=focus_topic or engine.last_request(session_id),
            )
        except Exception:  # the host's turn goes on: Hermes keeps its list, nothing is lost
            logger.exception("lossless could not compress session %s", session_id)
            return messages
        out = to_hermes(made.messages)
        if not out or out == messages or not made.summaries:
            # Nothing was summarized: the list stays Hermes's own (handing it back rewritten
            # would only make Hermes store a copy of the same turns).
            return messages
        mark(engine, session_id, messages, out)
        self.compression_count += 1
        return out

    def _absorb(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        with self.engine.lock(self.engine.conversation(session_id, create=True).conversation_id):
            absorb(self.engine, session_id, messages)

    # --- recall tools ------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """The recall tools, as function schemas (the session's own conversations)."""
        return tool_schemas(TOOL_NAMES, pinned=True)

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Run a recall tool the model called; lossless's errors come back as
        ``{"error": ...}`` with their advice."""

        def scope() -> ToolScope:
            if self.session_id is None:
                raise NotFoundError("no Hermes session has started yet; nothing to search")
            if name not in TOOL_NAMES:
                raise NotFoundError(f"no tool {name!r} here; the tools are {', '.join(TOOL_NAMES)}")
            return ToolScope.of(self.engine, conversation=self.session_id)

        arguments = {k: v for k, v in (args or {}).items() if k != "conversation"}
        return call_json(scope, name, arguments)

    def get_status(self) -> dict[str, Any]:
        """Hermes's status fields, and the session's stored messages and summaries."""
        status: dict[str, Any] = dict(super().get_status())
        if self.session_id is not None:
            try:
                conv = self.engine.conversation(self.session_id)
            except NotFoundError:
                return status
            status["lossless_messages"] = self.engine.message_count(conv)
            status["lossless_summaries"] = sum(self.engine.summary_counts(conv).values())
            pending = self.engine.pending_summaries(conv)
            status["lossless_provisional_summaries"] = pending["provisional"]
            status["lossless_oldest_provisional_seconds"] = pending["oldest_age_seconds"]
            if pending["fell_back"]:
                status["lossless_summarizer_fell_back"] = pending["fell_back"][-1]
        return status


def to_hermes(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The assembled context as Hermes wants it: what lossless wrote (the summaries, the resume
    summary) becomes one user message marked as lossless's, and a message of the same role as
    the one before it is merged into it (Hermes would merge them itself)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        if m.get("role") == "system" and not _made_by_lossless(m):
            continue  # Hermes sends its own system prompt before the list
        if _made_by_lossless(m):
            m = {"role": "user", "content": f"{SUMMARY_LEAD}]\n{m.get('content') or ''}"}
            if out and _is_ours(out[-1]):
                body = str(m["content"]).removeprefix(f"{SUMMARY_LEAD}]\n")
                out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n\n{body}"}
                continue
        if (
            out
            and out[-1]["role"] == m["role"]
            and m["role"] in ("user", "assistant")
            and not out[-1].get("tool_calls")
            and not m.get("tool_calls")
        ):
            joined = f"{out[-1].get('content') or ''}\n\n{m.get('content') or ''}"
            out[-1] = {**out[-1], "content": joined}
            continue
        out.append(m)
    return out


def _made_by_lossless(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") in ("user", "system") and (
        isinstance(content, str) and content.startswith((UNTRUSTED_NOTE, RESUME_HEADER))
    )


def _tokens(engine: Engine, messages: Sequence[Any]) -> int:
    """*messages* as lossless counts them when it stores them (what its context and its
    compaction targets are counted in; a shape it does not know is kept, and counted, whole)."""
    return sum(
        engine.normalize(_clean(m) if isinstance(m, Mapping) else m).token_count for m in messages
    )


def _before_request(**kwargs: Any) -> None:
    """The ``pre_api_request`` hook: what Hermes sends besides the conversation's messages
    (its system prompt, the tool schemas, what it injects) is measured from the request
    itself, with the model's reply reserve (``max_tokens``), and kept for the session."""
    session_id = kwargs.get("session_id")
    window = _windows.get(str(session_id or ""))
    history = kwargs.get("conversation_history")
    request = kwargs.get("request")
    body = request.get("body") if isinstance(request, dict) else None
    if (
        not window
        or str(session_id) in _measured
        or not isinstance(history, list)
        or not isinstance(body, dict)
    ):
        return
    engine = shared_engine()
    if engine.find_conversation(str(session_id)) is None:
        return  # nothing stored yet: its first turn will be
    try:
        sent = {"messages": body.get("messages"), "tools": body.get("tools")}
        whole = engine.token_counter.count(json.dumps(sent, default=str, ensure_ascii=False))
        reply = kwargs.get("max_tokens")
        engine.measure_room(
            str(session_id),
            window=window,
            prompt_tokens=whole,
            messages_tokens=_tokens(engine, history),
            reply=reply if isinstance(reply, int) and reply > 0 else None,
        )
        _measured.add(str(session_id))
    except Exception:  # never the host's request
        logger.exception("lossless could not measure the request of session %s", session_id)


def _after_turn(**kwargs: Any) -> None:
    """The ``post_llm_call`` hook: store the turn (Hermes calls it once per answered turn)."""
    session_id = kwargs.get("session_id")
    history = kwargs.get("conversation_history")
    if not session_id or not isinstance(history, list) or not history:
        return
    if str(kwargs.get("user_message") or "").startswith(REVIEW_PROMPT):
        return  # Hermes's memory review, replaying the conversation: not a turn of it
    engine = shared_engine()
    try:
        conv = engine.conversation(session_id, create=True)
        with engine.lock(conv.conversation_id):
            absorb(engine, session_id, history)
        window = _windows.get(session_id)
        budget = engine.room(conv.conversation_id, window).budget if window else None
        engine.after_turn(conv.conversation_id, token_budget=budget)
    except Exception:  # never the host's turn: the next hand-over stores what this missed
        logger.exception("lossless could not store the turn of session %s", session_id)


def register(ctx: Any) -> None:
    """Hermes's plugin entry: the engine, and the hook that stores every turn."""
    ctx.register_context_engine(LosslessContextEngine())
    ctx.register_hook("post_llm_call", _after_turn)
    ctx.register_hook("pre_api_request", _before_request)
