"""A request as its caller may make it: ``lossless serve``'s namespaces, roles and audit.

Each request runs for a :class:`~lossless.access.Caller`. For the owner nothing changes. For
an access token's holder, :func:`admit` checks the token's role allows the method and its
sessions glob the session named, and puts the session id in the token's namespace
(:func:`lossless.model.qualify`); :func:`acting` runs the method with the caller known to the
recall methods (their tools see only the namespace: :class:`~lossless.toolbox.ToolScope`) and
to the store (a conversation the request creates lands in the namespace); :func:`shown`
gives the result back with the host's own session ids. :func:`record` writes the audit line
of a write.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from ..access import OWNER, Caller, Role
from ..engine import Engine
from ..errors import AccessError, ArgumentError, NotFoundError
from ..model import NAMESPACE_SEP, qualify, unqualify, writing_namespace
from ..toolbox import ToolScope

__all__ = [
    "ROLE_OF",
    "WRITES",
    "acting",
    "admit",
    "caller",
    "check_reads",
    "order_key",
    "record",
    "said",
    "scope",
    "shown",
]

#: The role each method needs (``rpc.discover`` needs none).
ROLE_OF: dict[str, Role] = {
    "bootstrap": "write",
    "ingest": "write",
    "ingest_batch": "write",
    "after_turn": "write",
    "compact": "write",
    "compact_for_host": "write",
    "cancel_compaction": "write",
    "assemble": "read",
    "grep": "read",
    "describe": "read",
    "expand": "read",
    "expand_query": "read",
    "session_summary": "write",  # writes a new version, with the model
    "resume": "read",
    "status": "read",
    "tools": "read",
    "call_tool": "read",
    "wait_for_compaction": "read",
    "audit": "admin",
    "doctor": "admin",
}
#: The methods the audit log records (writes).
WRITES = frozenset(name for name, role in ROLE_OF.items() if role == "write")
#: Methods that check the store as a whole: only the owner runs them.
_OWNERS_ONLY = frozenset({"doctor"})
#: Recall tools that write (a new session summary, with the model): ``call_tool`` of one
#: needs the write role.
_WRITING_TOOLS = frozenset({"summarize_session"})

_caller: ContextVar[Caller] = ContextVar("lossless_serve_caller", default=OWNER)


def caller() -> Caller:
    """Who the request running now comes from (the owner outside a request)."""
    return _caller.get()


@contextlib.contextmanager
def acting(who: Caller) -> Iterator[None]:
    """Run the block as *who*: its recall tools and its writes stay in its namespace."""
    token = _caller.set(who)
    written = writing_namespace.set(who.namespace)
    try:
        yield
    finally:
        writing_namespace.reset(written)
        _caller.reset(token)


def scope(engine: Engine, **kwargs: Any) -> ToolScope:
    """The recall tools' scope for the caller running now (see :meth:`ToolScope.of`)."""
    who = caller()
    return ToolScope.of(engine, namespace=who.namespace, sessions=who.sessions, **kwargs)


def admit(who: Caller, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """*arguments* as *who* may send them to *method*: its session id in its namespace.

    An :class:`~lossless.errors.AccessError` when its role does not allow the method, or a
    write names a session its sessions glob does not reach (a read of one is "not found",
    as for any conversation beyond it)."""
    need = ROLE_OF.get(method, "admin")
    if method == "call_tool" and arguments.get("name") in _WRITING_TOOLS:
        need = "write"
    if not who.may(need):
        raise AccessError(
            f"this token's role is {who.role}; {method} needs {need}. Ask the store's owner"
            f" for a token with --role {need}"
        )
    if who.is_owner:
        return arguments
    if method in _OWNERS_ONLY:
        raise AccessError(
            f"{method} checks the whole store, not one namespace: only the server's own token"
            " runs it"
        )
    for name in ("session_id", "conversation"):  # a stored id is the owner's to name
        value = arguments.get(name)
        if isinstance(value, str) and NAMESPACE_SEP in value:
            raise ArgumentError(
                f"a {name.replace('_', ' ')} may not hold control characters; this one has"
                f" U+001F at position {value.index(NAMESPACE_SEP)}"
            )
    if method == "bootstrap" and arguments.get("transcript") is not None:
        raise AccessError(
            "bootstrap reads a transcript on the server's own machine: only the server's own"
            " token may name one. Send the session's messages with ingest_batch instead"
        )
    session = arguments.get("session_id")
    if not isinstance(session, str):
        return arguments
    if not who.reaches(session):
        if need == "write":
            raise AccessError(
                f"this token writes only sessions matching {who.sessions!r}, not {session!r}"
            )
        raise _unknown_session(session)
    return {**arguments, "session_id": qualify(who.namespace, session)}


def _unknown_session(session: str) -> NotFoundError:
    return NotFoundError(
        f"no conversation with session id {unqualify(session)!r}; list them with"
        " lcm_list_conversations"
    )


def check_reads(engine: Engine, who: Caller, method: str, arguments: dict[str, Any]) -> None:
    """A namespace's caller reads only what is there: a method that does not write, naming a
    session the namespace does not have, is "not found" (it would otherwise make the
    conversation, as a host's first ``assemble`` does for the owner)."""
    if who.is_owner or ROLE_OF.get(method) == "write":
        return
    session = arguments.get("session_id")
    if isinstance(session, str) and engine.find_conversation(session) is None:
        raise _unknown_session(session)


def order_key(who: Caller, key: Any) -> str | None:
    """The key a request is ordered by (the session or conversation it names), as stored:
    a namespace's "main" waits for that namespace's writes to "main", not the owner's."""
    if key is None:
        return None
    return str(key) if who.is_owner else qualify(who.namespace, str(key))


def shown(who: Caller, value: Any) -> Any:
    """*value* (a result) with the session ids of *who*'s namespace as the host knows them,
    and without search scores (they weigh words by the whole store: a namespace would learn
    how often a word is used beyond it). Assembled messages are left as they are."""
    if who.is_owner:
        return value
    return _unqualified(value, who.namespace + NAMESPACE_SEP if who.namespace else "")


def _unqualified(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        return {
            k: v if k == "messages" else _unqualified(v, prefix)
            for k, v in value.items()
            if k != "score"
        }
    if isinstance(value, list):
        return [_unqualified(v, prefix) for v in value]
    if isinstance(value, str) and prefix and prefix in value:
        return value.replace(prefix, "")
    return value


def said(who: Caller, message: str) -> str:
    """An error's *message* with *who*'s qualified session ids as the host knows them."""
    if who.is_owner or who.namespace is None:
        return message
    return message.replace(who.namespace + NAMESPACE_SEP, "").replace(
        repr(who.namespace + NAMESPACE_SEP)[1:-1], ""
    )


def record(
    engine: Engine,
    who: Caller,
    method: str,
    arguments: dict[str, Any],
    result: Any,
    error: BaseException | None,
) -> None:
    """The audit line of a write *who* made (or tried): never message text."""
    session = arguments.get("session_id")
    conversation_id = result.get("conversation_id") if isinstance(result, dict) else None
    detail = None
    if isinstance(result, dict) and "inserted" in result:
        detail = f"inserted={result['inserted']} skipped={result.get('skipped', 0)}"
    engine.record(
        who.actor,
        method,
        namespace=who.namespace,
        outcome="ok" if error is None else type(error).__name__,
        conversation_id=conversation_id if isinstance(conversation_id, int) else None,
        session_id=None if not isinstance(session, str) else unqualify(session),
        detail=detail,
    )
