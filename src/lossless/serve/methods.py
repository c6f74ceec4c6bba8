"""The methods ``lossless serve`` answers: each one declared once (name, what it does, its
parameters with types, defaults and limits) beside the engine call it makes.

The recall methods (``grep``, ``describe``, ``expand``, ``expand_query``, ``session_summary``)
take exactly the parameters of the recall tool they run (:mod:`lossless.retrieval.tools`) and
return what the tool returns (:mod:`lossless.toolbox`); ``tools`` and ``call_tool`` hand a
host the tools themselves, for its model. The engine methods mirror :class:`~lossless.engine.
Engine` and name the conversation by the host's ``session_id`` (created on first use).
``rpc.discover`` lists all of them with their parameters' JSON Schema.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import __version__, toolbox
from ..assemble import FORMATS
from ..engine import Engine
from ..errors import ArgumentError
from ..model import IngestResult
from ..retrieval.tools import TOOLS, Param, RecallTool
from ..room import Room, recorded
from ..timestamps import parse_ts
from ..toolbox import ToolScope
from . import tenancy

__all__ = ["METHODS", "Method", "discover"]


@dataclass(frozen=True)
class Method:
    """One method: its declaration and the call behind it."""

    name: str
    description: str
    params: tuple[Param, ...]
    #: ``run(engine, arguments)`` with the arguments checked and completed.
    run: Callable[[Engine, dict[str, Any]], Any]
    #: The parameter naming the session whose requests run one at a time, in arrival order.
    ordered_by: str | None = "session_id"

    def check(self, params: Any) -> dict[str, Any]:
        """The request's params checked against the declaration, defaults filled in (an
        :class:`~lossless.errors.ArgumentError` says what does not fit)."""
        return RecallTool(self.name, self.name, self.description, self.params).check(params)

    def schema(self) -> dict[str, Any]:
        """What ``rpc.discover`` says of it."""
        return {
            "name": self.name,
            "description": self.description,
            "params": {
                "type": "object",
                "properties": {p.name: p.json_schema() for p in self.params},
                "required": [p.name for p in self.params if p.required],
                "additionalProperties": False,
            },
        }


_SESSION = Param(
    "session_id",
    "string",
    "The host's session id: names the conversation (created on first use).",
)
_FORMAT = Param(
    "format",
    "string",
    "The messages' shape (anthropic, openai_chat, openai_responses, openclaw, ...);"
    " default: detected from each message.",
    None,
)
_BUDGET = Param(
    "token_budget",
    "integer",
    "The model's context budget in tokens.",
    None,
    minimum=1,
)


_WINDOW = Param(
    "window",
    "integer",
    "The model's context window in tokens: the budget becomes the room the host leaves the"
    " messages (the window less the host's own prompt, measured and kept per session, less"
    " the reply reserve).",
    None,
    minimum=1,
)
_REPLY = Param(
    "reply_tokens",
    "integer",
    "What the host keeps for the model's reply (default: the kept one, else room.reply_tokens).",
    None,
    minimum=0,
)
_HINT = Param(
    "overhead_hint",
    "integer",
    "A lower bound of the host's own prompt (system prompt and the like) before any measurement.",
    None,
    minimum=0,
)
_PENDING = Param(
    "pending_tokens",
    "integer",
    "Tokens the host sends after the assembled messages (the turn under way).",
    0,
    minimum=0,
)


def _room(engine: Engine, a: dict[str, Any]) -> Room | None:
    if a.get("window") is None:
        return None
    return engine.room(
        a["session_id"], a["window"], reply=a.get("reply_tokens"), hint=a.get("overhead_hint")
    )


def _ingested(result: IngestResult) -> dict[str, Any]:
    return {
        "conversation_id": result.conversation_id,
        "message_ids": [f"msg#{i}" for i in result.message_ids],
        "inserted": result.inserted,
        "skipped": result.skipped,
    }


def _bootstrap(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    reports = []
    if a["transcript"] is not None:
        reports = [
            r.to_dict()
            for r in engine.bootstrap(
                a["transcript"], format=a["format"], session_id=a["session_id"]
            )
        ]
    conv = engine.conversation(a["session_id"], create=True)
    return {**_session_state(engine, conv.conversation_id), "reports": reports}


def _session_state(engine: Engine, conversation_id: int) -> dict[str, Any]:
    conv = engine.conversation(conversation_id)
    room = recorded(conv.metadata, engine.config.room.min_tokens)
    return {
        "conversation_id": conv.conversation_id,
        "session_id": conv.session_id,
        "messages": engine.message_count(conv.conversation_id),
        "context_tokens": sum(i.tokens for i in engine.context(conv.conversation_id)),
        "summaries": sum(engine.summary_counts(conv.conversation_id).values()),
        "room": None if room is None else room.to_dict(),
    }


def _ingest(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    created = None
    if a["created_at"] is not None:
        created = parse_ts(a["created_at"])
        if created is None:
            raise ArgumentError(
                "ingest: created_at must be an ISO-8601 time, e.g. 2026-03-02T09:30Z"
            )
    return _ingested(
        engine.ingest(
            a["session_id"],
            a["message"],
            format=a["format"],
            external_id=a["external_id"],
            created_at=created,
        )
    )


def _ingest_batch(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    return _ingested(
        engine.ingest_batch(
            a["session_id"], a["messages"], format=a["format"], external_ids=a["external_ids"]
        )
    )


def _after_turn(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    budget = a["token_budget"]
    room = None
    if a["window"] is not None:
        if a["prompt_tokens"]:  # the host's figure for the request lossless assembled
            engine.measure_room(
                a["session_id"],
                window=a["window"],
                prompt_tokens=a["prompt_tokens"],
                pending_tokens=a["pending_tokens"],
                messages_tokens=a["assembled_tokens"],
                reply=a["reply_tokens"],
            )
        room = _room(engine, a)
        budget = room.budget if room is not None else budget
    turn = engine.after_turn(
        a["session_id"], a["messages"], token_budget=budget, format=a["format"]
    )
    return {
        **_ingested(turn.ingest),
        "compaction": None if turn.compaction is None else turn.compaction.to_dict(),
        "deferred": turn.deferred,
        "error": turn.error,
        "room": None if room is None else room.to_dict(),
    }


def _assemble(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    room = _room(engine, a)
    budget = a["token_budget"]
    if room is not None:
        fits = room.budget_after(a["pending_tokens"])
        budget = fits if budget is None else min(budget, fits)
    if budget is None:
        raise ArgumentError("assemble: give token_budget, or window (the model's context window)")
    made = engine.assemble(
        a["session_id"],
        budget,
        format=a["format"],
        pending_calls=a["pending_calls"],
        fill=a["fill"],
        prompt=a["prompt"],
        # Without a request to go by, the newest stored one: what the context is for.
        focus=a["focus"] if a["focus"] or a["prompt"] else engine.last_request(a["session_id"]),
    )
    return {
        "room": None if room is None else room.to_dict(),
        "clipped_all": made.clipped_all,
        "messages": made.messages,
        "tokens": made.tokens,
        "budget": made.budget,
        "format": made.format,
        "summaries": made.summaries,
        "raw_messages": made.raw_messages,
        "unfolded": made.unfolded,
        "recalled": made.recalled,
        "dropped_items": made.dropped_items,
        "over_budget": made.over_budget,
        "clipped": made.clipped,
    }


#: The host compactions under way, by session: ``cancel_compaction`` stops one.
_RUNNING: dict[str, threading.Event] = {}
_RUNNING_GUARD = threading.Lock()


def _compact_for_host(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    session = a["session_id"]
    room = _room(engine, a)
    if room is None:  # the declaration requires it; said for a direct caller
        raise ArgumentError("compact_for_host: give window, the model's context window")
    stop = threading.Event()
    with _RUNNING_GUARD:
        _RUNNING[session] = stop
    deadline = None if a["timeout"] is None else time.monotonic() + a["timeout"]
    try:
        done = engine.compact_for_host(
            session,
            room,
            host_tokens=a["host_tokens"],
            full=a["full"],
            instructions=a["instructions"],
            stop=stop,
            deadline=deadline,
            format=a["format"],
        )
    finally:
        with _RUNNING_GUARD:
            if _RUNNING.get(session) is stop:
                del _RUNNING[session]
    return done.to_dict()


def _cancel(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    with _RUNNING_GUARD:
        stop = _RUNNING.get(a["session_id"])
    if stop is not None:
        stop.set()
    return {"cancelled": stop is not None}


def _compact(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    return dict(
        engine.compact(
            a["session_id"], mode=a["mode"], until=a["until"], budget=a["token_budget"]
        ).to_dict()
    )


def _resume(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    return engine.resume(a["session_id"], latest=a["latest"]).to_dict()


def _status(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    if a["session_id"] is not None:
        conv = engine.conversation(a["session_id"])
        state = _session_state(engine, conv.conversation_id)
        return {**state, "summaries_pending": engine.pending_summaries(conv.conversation_id)}
    who = tenancy.caller()
    if who.namespace is not None:  # a namespace's totals, nothing of the rest of the store
        return {
            "version": __version__,
            "namespace": who.namespace,
            "conversations": len(tenancy.scope(engine).scope() or ()),
        }
    return {
        "version": __version__,
        **engine.stats(),
        "summaries_pending": engine.pending_summaries(),
    }


def _doctor(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    problems = engine.check(degraded=a["degraded"])
    return {
        "ok": not problems,
        "problems": [p.to_dict() for p in problems],
        "notes": engine.check_notes(),
    }


def _scope(engine: Engine, session_id: str | None) -> ToolScope:
    return tenancy.scope(engine, conversation=session_id)


def _tools(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    scope = _scope(engine, a["session_id"])
    names = toolbox.SESSION_TOOLS if scope.pinned is not None else toolbox.TOOLSETS["store"]
    return {
        "tools": toolbox.tool_schemas(names, pinned=scope.pinned is not None),
        "instructions": toolbox.RECALL_ORDER,
    }


def _call_tool(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    scope = _scope(engine, a["session_id"])
    arguments = a["arguments"]
    if scope.pinned is not None and isinstance(arguments, dict) and "conversation" in arguments:
        raise ArgumentError(
            f"{a['name']}: a session's tools search its own conversations; leave out conversation"
        )
    return toolbox.call(scope, a["name"], arguments)


def _recall(name: str) -> Callable[[Engine, dict[str, Any]], Any]:
    def run(engine: Engine, a: dict[str, Any]) -> Any:
        return toolbox.run(tenancy.scope(engine), name, a)

    return run


def _expand(engine: Engine, a: dict[str, Any]) -> Any:
    grant = a.pop("grant_id")
    return toolbox.run(tenancy.scope(engine, grant_id=grant), "lcm_expand", a)


def _wait(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    # a namespace's caller waits for, and collects, its own runs only
    reports = engine.wait_for_compaction(a["timeout"], conversations=tenancy.scope(engine).scope())
    return {"finished": [dict(r.to_dict()) for r in reports]}


def _audit(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    who = tenancy.caller()
    rows = engine.audit_log(
        namespace=who.namespace if who.namespace is not None else a["namespace"],
        actor=a["actor"],
        action=a["action"],
        since=a["since"],
        limit=a["limit"],
    )
    return {"entries": [r.to_dict() for r in rows]}


def _declared(method: str, tool: str, description: str) -> Method:
    # Ordered behind the writes of the conversation it names (by session id), if it names one.
    return Method(method, description, TOOLS[tool].params, _recall(tool), ordered_by="conversation")


_METHODS = (
    Method(
        "bootstrap",
        "Start (or resume) a session: the conversation is created if new; with transcript, the"
        " host's transcript file is reconciled first (what the store lacks is imported, nothing"
        " twice). Returns the session's state and the import reports.",
        (
            _SESSION,
            Param("transcript", "string", "A transcript file to reconcile with.", None),
            _FORMAT,
        ),
        _bootstrap,
    ),
    Method(
        "ingest",
        "Store one message exactly and append it to the active context. With external_id, a"
        " message already stored under that id is skipped (a retried request stores nothing"
        " twice).",
        (
            _SESSION,
            Param("message", "object", "The message, in any shape lossless reads."),
            _FORMAT,
            Param("external_id", "string", "The host's id of the message.", None),
            Param("created_at", "string", "When it was said (ISO-8601).", None),
        ),
        _ingest,
    ),
    Method(
        "ingest_batch",
        "Store several messages in one transaction (all or none), in order.",
        (
            _SESSION,
            Param("messages", "objects", "The messages, oldest first."),
            _FORMAT,
            Param(
                "external_ids",
                "strings",
                "The host's id of each message (same length as messages).",
                None,
            ),
        ),
        _ingest_batch,
    ),
    Method(
        "after_turn",
        "After the model answered: store the turn's new messages, then compact if the context"
        " needs it (in the background: the answer never waits for a summarizer).",
        (
            _SESSION,
            Param("messages", "objects", "The turn's new messages, oldest first.", []),
            _BUDGET,
            _FORMAT,
            _WINDOW,
            Param(
                "prompt_tokens",
                "integer",
                "The size of the turn's last request to the model as the host or its provider"
                " counted it (usage); with window, measures the host's own part of it.",
                None,
                minimum=0,
            ),
            _PENDING,
            Param(
                "assembled_tokens",
                "integer",
                "The tokens of the messages lossless assembled for that request (default: its"
                " newest assembly of the session in this process).",
                None,
                minimum=0,
            ),
            _REPLY,
            _HINT,
        ),
        _after_turn,
    ),
    Method(
        "assemble",
        "The messages to send the model next, within token_budget: summaries first, then the"
        " newest items that fit, then the fresh tail; room left is spent on detail from below"
        " the summaries; tool calls never without their results.",
        (
            _SESSION,
            Param(
                "token_budget",
                "integer",
                "The tokens the messages may take (a cap: the model's window less its reply);"
                " with window, at most the room.",
                None,
                minimum=1,
            ),
            Param("format", "string", "The messages' shape.", "anthropic", choices=FORMATS),
            Param(
                "pending_calls",
                "boolean",
                "Keep a tool call whose result is not stored yet.",
                False,
            ),
            _WINDOW,
            _PENDING,
            _REPLY,
            _HINT,
            Param(
                "fill",
                "boolean",
                "Spend room left on detail from below the summaries (default: fill_budget).",
                None,
            ),
            Param(
                "prompt",
                "string",
                "The request the host sends after these messages itself (not stored yet):"
                " the summaries come first, and the room left goes first to the stored"
                " messages a search for it finds (up to prompt_share of it).",
                None,
            ),
            Param(
                "focus",
                "string",
                "As prompt, for a request already stored or a topic (the newest user"
                " message stays shown). Default, when no prompt is given either: the newest"
                " stored user message.",
                None,
            ),
        ),
        _assemble,
    ),
    Method(
        "compact",
        "Compact the session's active context now (full: every eligible leaf pass, then"
        " condensation; incremental: what a turn does). With until, sweep until the context is"
        " at or under that many tokens.",
        (
            _SESSION,
            Param(
                "mode", "string", "full or incremental.", "full", choices=("full", "incremental")
            ),
            Param("until", "integer", "Stop at this many context tokens.", None, minimum=1),
            _BUDGET,
        ),
        _compact,
    ),
    Method(
        "compact_for_host",
        "The host must fit its next request: compact the session down to compaction_target of"
        " the room its window leaves the messages (the fresh tail shrinking to the newest"
        " exchange if need be). Answers in the host's terms: compacted, its whole prompt before"
        " and after, and, when nothing was compacted, why ('already under target' / 'already"
        " compacted'). Asked again in the same turn with the same target, it answers without"
        " another run.",
        (
            _SESSION,
            Param("window", "integer", "The model's context window in tokens.", minimum=1),
            Param(
                "host_tokens",
                "integer",
                "The host's count of its whole prompt now (system prompt and tools included).",
                None,
                minimum=0,
            ),
            _REPLY,
            _HINT,
            Param("full", "boolean", "A user's /compact: every eligible pass.", False),
            Param(
                "instructions",
                "string",
                "What the summaries should keep in view (the host's custom instructions).",
                None,
            ),
            Param(
                "timeout",
                "integer",
                "Seconds after which no model is called (later passes fall back).",
                None,
                minimum=0,
            ),
            Param("format", "string", "The messages' shape.", "anthropic", choices=FORMATS),
        ),
        _compact_for_host,
    ),
    Method(
        "cancel_compaction",
        "Stop the session's host compaction between passes (the host gave up waiting):"
        " nothing is left half written.",
        (_SESSION,),
        _cancel,
        ordered_by=None,
    ),
    _declared(
        "grep",
        "lcm_grep",
        "Search the stored history (the lcm_grep tool): messages, summaries and large files.",
    ),
    _declared(
        "describe",
        "lcm_describe",
        "What an id is and what lies below it (the lcm_describe tool).",
    ),
    Method(
        "expand",
        "Read below summaries under a delegation grant (the lcm_expand tool).",
        (
            Param("grant_id", "string", "The delegation grant the reads are charged to."),
            *TOOLS["lcm_expand"].params,
        ),
        _expand,
        ordered_by=None,
    ),
    _declared(
        "expand_query",
        "lcm_expand_query",
        "Answer a question from the exact history below the summaries, citing ids (the"
        " lcm_expand_query tool).",
    ),
    _declared(
        "session_summary",
        "summarize_session",
        "Bring the session summary up to date (the summarize_session tool).",
    ),
    Method(
        "resume",
        "The resume summary: what a model needs to carry on after the compaction boundary.",
        (
            _SESSION,
            Param("latest", "boolean", "Summarize every stored message instead.", False),
        ),
        _resume,
    ),
    Method(
        "status",
        "With session_id, the session's state (messages, context tokens, summaries);"
        " without, the store's totals and the server's version. summaries_pending: the"
        " provisional summaries waiting for the model, the oldest one's age, and the runs"
        " whose model kept failing (with the reason).",
        (Param("session_id", "string", "A session to report on.", None),),
        _status,
    ),
    Method(
        "doctor",
        "Every integrity check of the store (ok: true when it is consistent).",
        (Param("degraded", "boolean", "Also list summaries a repair would redo.", False),),
        _doctor,
        ordered_by=None,
    ),
    Method(
        "tools",
        "The recall tools to offer a model (name, description, parameters); with"
        " session_id, the session's tools, which search its own conversations.",
        (Param("session_id", "string", "Pin the tools to this session.", None),),
        _tools,
        ordered_by=None,
    ),
    Method(
        "call_tool",
        "Run a recall tool a model called, with the model's arguments; with session_id, in"
        " that session's scope.",
        (
            Param("name", "string", "The tool's name (see tools)."),
            Param("arguments", "object", "The model's arguments.", None),
            Param("session_id", "string", "The session whose tools these are.", None),
        ),
        _call_tool,
    ),
    Method(
        "wait_for_compaction",
        "Wait (at most timeout seconds) for background compaction to finish; returns the runs"
        " that finished.",
        (Param("timeout", "integer", "Seconds to wait at most.", 30, minimum=0, maximum=3600),),
        _wait,
        ordered_by=None,
    ),
    Method(
        "audit",
        "The audit log, newest first: who (a token id, never a token) did what to which"
        " conversation and when; a namespace's admin token reads its namespace's lines.",
        (
            Param("namespace", "string", "Only this namespace's lines (the owner's).", None),
            Param("actor", "string", "Only this actor's lines (a token id, owner, ...).", None),
            Param("action", "string", "Only this action's lines (after_turn, ...).", None),
            Param("since", "string", "Only lines at or after this ISO-8601 time.", None),
            Param("limit", "integer", "The most lines returned.", 100, minimum=1, maximum=10_000),
        ),
        _audit,
        ordered_by=None,
    ),
)

#: Every method, by name.
METHODS: dict[str, Method] = {m.name: m for m in _METHODS}


def discover() -> dict[str, Any]:
    """``rpc.discover``: the protocol, the server's version and every method's schema."""
    return {
        "protocol": "JSON-RPC 2.0",
        "server": "lossless",
        "version": __version__,
        "methods": [m.schema() for m in _METHODS],
    }
