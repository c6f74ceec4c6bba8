"""``chat_context_query``: one retrieval tool over the chat frames and the tool-execution log.

Chat frames are the stored messages (user, assistant, tool result, each with its time and
conversation); tool executions are the log kept beside them, one row per tool call. One
query filters both:

* ``conversation`` — a conversation (and its family, unless ``family=False``); default all;
* ``role`` — frames of that role (``user``, ``assistant``, ``tool``, ``system``);
* ``tool_name`` / ``execution_id`` / ``status`` — executions (and, for frames, the messages
  that made or answered those calls);
* ``since`` / ``before`` — time range (ISO-8601): a frame's time, an execution's start (or
  finish, when it has no start);
* ``text`` — full text, through the message index: frames whose text matches, executions
  whose call or result message matches (user text is sanitized as in ``lcm_grep``).

Results are paged (``limit``, ``offset``; newest first unless ``order="oldest"``) and cite
ids: ``msg#N`` for frames, the host's tool call id for executions (with the ``msg#`` of the
call and of the result).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..codec import clean_text
from .grep import _WORD, MAX_LIMIT, GrepError, _fts_query, _in, _snippet

if TYPE_CHECKING:
    from ..store.base import Store

__all__ = ["ContextQueryResult", "ExecutionHit", "FrameHit", "chat_context_query"]

Kind = Literal["frames", "executions", "both"]
Order = Literal["newest", "oldest"]
ROLES = ("user", "assistant", "tool", "system")
STATUSES = ("pending", "ok", "error")
_INPUT_CHARS = 300


@dataclass(frozen=True)
class FrameHit:
    """A stored message."""

    id: str  # msg#N
    conversation_id: int
    seq: int
    role: str
    created_at: str
    snippet: str


@dataclass(frozen=True)
class ExecutionHit:
    """A logged tool execution."""

    execution_id: str
    conversation_id: int
    tool_name: str | None
    status: str
    started_at: str | None
    finished_at: str | None
    duration_ms: int | None
    input: str | None
    output: str
    error: str | None
    call_message: str | None  # msg#N
    result_message: str | None
    output_file_id: str | None


@dataclass
class ContextQueryResult:
    """One page of frames and executions; ``next_offset`` when there may be more."""

    frames: list[FrameHit] = field(default_factory=list)
    executions: list[ExecutionHit] = field(default_factory=list)
    next_offset: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "frames": [asdict(f) for f in self.frames],
            "executions": [asdict(e) for e in self.executions],
            "next_offset": self.next_offset,
        }


def chat_context_query(
    store: Store,
    *,
    conversation_ids: Sequence[int] | None = None,
    kind: Kind = "both",
    role: str | None = None,
    tool_name: str | None = None,
    execution_id: str | None = None,
    status: str | None = None,
    since: str | None = None,
    before: str | None = None,
    text: str | None = None,
    limit: int = 20,
    offset: int = 0,
    order: Order = "newest",
) -> ContextQueryResult:
    """Query frames and executions (see the module docstring)."""
    if kind not in ("frames", "executions", "both"):
        raise GrepError(f"unknown kind {kind!r}; use frames, executions or both")
    if role is not None and role not in ROLES:
        raise GrepError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    if status is not None and status not in STATUSES:
        raise GrepError(f"unknown status {status!r}; use one of {', '.join(STATUSES)}")
    if order not in ("newest", "oldest"):
        raise GrepError(f"unknown order {order!r}; use newest or oldest")
    if not 1 <= limit <= MAX_LIMIT:
        raise GrepError(f"limit must be from 1 to {MAX_LIMIT}")
    if not 0 <= offset < 2**62:
        raise GrepError("offset must be 0 or more")
    # Stored text has no lone surrogates (they become U+FFFD), and SQLite cannot take them.
    text, tool_name, execution_id, since, before = (
        None if v is None else clean_text(v) for v in (text, tool_name, execution_id, since, before)
    )
    query = _fts_query(text, any_word=False) if text and text.strip() else None
    by_execution = tool_name is not None or execution_id is not None or status is not None
    result = ContextQueryResult()
    more = False
    if kind in ("executions", "both") and role is None:
        rows = _executions(
            store,
            conversation_ids,
            tool_name,
            execution_id,
            status,
            since,
            before,
            query,
            _WORD.findall(text or "") if query else [],
            limit + 1,
            offset,
            order,
        )
        more |= len(rows) > limit
        result.executions = rows[:limit]
    if kind in ("frames", "both"):
        frames = _frames(
            store,
            conversation_ids,
            role,
            since,
            before,
            query,
            text,
            (tool_name, execution_id, status) if by_execution else None,
            limit + 1,
            offset,
            order,
        )
        more |= len(frames) > limit
        result.frames = frames[:limit]
    result.next_offset = offset + limit if more else None
    return result


def _scope(alias: str, ids: Sequence[int] | None) -> tuple[str, list[Any]]:
    if ids is None:
        return "", []
    clause, params = _in(f"{alias}.conversation_id", list(ids) or [-1])
    return f" AND {clause}", params


def _executions(
    store: Store,
    ids: Sequence[int] | None,
    tool_name: str | None,
    execution_id: str | None,
    status: str | None,
    since: str | None,
    before: str | None,
    query: str | None,
    words: Sequence[str],
    limit: int,
    offset: int,
    order: Order,
) -> list[ExecutionHit]:
    where, params = _scope("e", ids)
    at = "coalesce(e.started_at, e.finished_at)"
    for clause, value in (
        ("e.tool_name = ?", tool_name),
        ("e.execution_id = ?", execution_id),
        ("e.status = ?", status),
        (f"{at} >= ?", since),
        (f"{at} < ?", before),
    ):
        if value is not None:
            where += f" AND {clause}"
            params.append(value)
    if query is not None:
        # The index finds the messages; each word must then be in this execution's own input
        # or output (one message can carry the results of several parallel calls).
        where += (
            f" AND (e.call_message_id IN ({store.match_ids_sql})"
            f" OR e.result_message_id IN ({store.match_ids_sql}))"
        )
        params += [store.word_query(query)] * 2
        for word in words:
            where += (
                f" AND (coalesce(e.input, '') || ' ' || coalesce(e.output, '')) {store.like} ?"
                " ESCAPE '\\'"
            )
            params.append("%" + _like(word) + "%")
    direction = "DESC" if order == "newest" else "ASC"
    rows = store.fetchall(
        "SELECT e.execution_id, e.conversation_id, e.tool_name, e.status, e.started_at,"
        " e.finished_at, e.duration_ms, e.input, e.output, e.error, e.call_message_id,"
        " e.result_message_id, e.output_file_id FROM tool_executions e"
        f" WHERE 1 = 1{where} ORDER BY {at} {direction}, e.execution_id LIMIT ? OFFSET ?",
        [*params, limit, offset],
    )
    return [
        ExecutionHit(
            execution_id=r[0],
            conversation_id=r[1],
            tool_name=r[2],
            status=r[3],
            started_at=r[4],
            finished_at=r[5],
            duration_ms=r[6],
            input=None if r[7] is None else _clip(r[7], _INPUT_CHARS),
            output=_snippet(r[8] or "", None),
            error=r[9],
            call_message=None if r[10] is None else f"msg#{r[10]}",
            result_message=None if r[11] is None else f"msg#{r[11]}",
            output_file_id=r[12],
        )
        for r in rows
    ]


def _frames(
    store: Store,
    ids: Sequence[int] | None,
    role: str | None,
    since: str | None,
    before: str | None,
    query: str | None,
    text: str | None,
    calls: tuple[str | None, str | None, str | None] | None,
    limit: int,
    offset: int,
    order: Order,
) -> list[FrameHit]:
    where, params = _scope("m", ids)
    for clause, value in (
        ("m.role = ?", role),
        ("m.created_at >= ?", since),
        ("m.created_at < ?", before),
    ):
        if value is not None:
            where += f" AND {clause}"
            params.append(value)
    if query is not None:
        where += f" AND m.message_id IN ({store.match_ids_sql})"
        params.append(store.word_query(query))
    if calls is not None:  # the messages that made or answered the chosen calls
        tool_name, execution_id, status = calls
        inner, inner_params = _scope("e", ids)
        for clause, value in (
            ("e.tool_name = ?", tool_name),
            ("e.execution_id = ?", execution_id),
            ("e.status = ?", status),
        ):
            if value is not None:
                inner += f" AND {clause}"
                inner_params.append(value)
        where += (
            " AND m.message_id IN (SELECT e.call_message_id FROM tool_executions e"
            f" WHERE 1 = 1{inner} UNION SELECT e.result_message_id FROM tool_executions e"
            f" WHERE 1 = 1{inner})"
        )
        params += inner_params + inner_params
    direction = "DESC" if order == "newest" else "ASC"
    rows = store.fetchall(
        "SELECT m.message_id, m.conversation_id, m.seq, m.role, m.created_at, m.content"
        f" FROM messages m WHERE 1 = 1{where}"
        f" ORDER BY m.created_at {direction}, m.message_id {direction} LIMIT ? OFFSET ?",
        [*params, limit, offset],
    )
    words = text.split() if text else []
    return [
        FrameHit(f"msg#{r[0]}", r[1], r[2], r[3], r[4], _snippet(r[5], words[0] if words else None))
        for r in rows
    ]


def _like(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"
