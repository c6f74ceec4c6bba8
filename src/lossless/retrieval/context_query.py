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
from ..store.search import CallFilter, ExecutionRow, FrameRow, SearchScope
from .grep import MAX_LIMIT
from .grep_text import _WORD, GrepError, _fts_query, _snippet, check_length, time_bound

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
    since, before = time_bound(since, "since"), time_bound(before, "before")
    if text is not None:
        check_length(text, "text")
    text, tool_name, execution_id = (
        None if v is None else clean_text(v) for v in (text, tool_name, execution_id)
    )
    query = _fts_query(text, any_word=False) if text and text.strip() else None
    by_execution = tool_name is not None or execution_id is not None or status is not None
    scope = SearchScope(
        None if conversation_ids is None else tuple(conversation_ids), since, before
    )
    calls = CallFilter(tool_name, execution_id, status)
    newest_first = order == "newest"
    result = ContextQueryResult()
    more = False
    if kind in ("executions", "both") and role is None:
        rows = store.executions(
            scope,
            calls,
            query=query,
            words=_WORD.findall(text or "") if query else [],
            limit=limit + 1,
            offset=offset,
            newest_first=newest_first,
        )
        more |= len(rows) > limit
        result.executions = [_execution(r) for r in rows[:limit]]
    if kind in ("frames", "both"):
        frames = store.frames(
            scope,
            role=role,
            query=query,
            calls=calls if by_execution else None,
            limit=limit + 1,
            offset=offset,
            newest_first=newest_first,
        )
        more |= len(frames) > limit
        words = text.split() if text else []
        result.frames = [_frame(r, words[0] if words else None) for r in frames[:limit]]
    result.next_offset = offset + limit if more else None
    return result


def _execution(row: ExecutionRow) -> ExecutionHit:
    return ExecutionHit(
        execution_id=row.execution_id,
        conversation_id=row.conversation_id,
        tool_name=row.tool_name,
        status=row.status,
        started_at=row.started_at,
        finished_at=row.finished_at,
        duration_ms=row.duration_ms,
        input=None if row.input is None else _clip(row.input, _INPUT_CHARS),
        output=_snippet(row.output or "", None),
        error=row.error,
        call_message=None if row.call_message_id is None else f"msg#{row.call_message_id}",
        result_message=None if row.result_message_id is None else f"msg#{row.result_message_id}",
        output_file_id=row.output_file_id,
    )


def _frame(row: FrameRow, needle: str | None) -> FrameHit:
    return FrameHit(
        f"msg#{row.message_id}",
        row.conversation_id,
        row.seq,
        row.role,
        row.created_at,
        _snippet(row.content, needle),
    )


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"
