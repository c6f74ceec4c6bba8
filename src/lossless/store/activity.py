"""Reads over a conversation's activity: requests, replies, tool calls and the frames and
executions chat_context_query filters.

Positions are message ``seq`` numbers of one conversation; a range ``after``, ``upto`` is the
messages with ``after < seq <= upto``. A *request* is a user message with text that is not a
host's record (``host_meta`` is null): the user's own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..codec import loads
from .archive_files import archived_texts
from .core import StoreCore
from .toollog import INPUT_SQL

__all__ = ["ActivityStore", "Request", "ToolCall"]


class Request(NamedTuple):
    """A user request: its position and its stored text."""

    seq: int
    content: str


class ToolCall(NamedTuple):
    """A logged tool call and where it was made (``tool_executions`` by its call message)."""

    execution_id: str
    tool_name: str | None
    input: str | None  # JSON, as the model sent it
    status: str  # pending, ok or error
    seq: int  # of the call message
    call_message_id: int


_REQUEST = (
    "SELECT seq, content, message_id, archived_at FROM messages WHERE conversation_id = ?"
    " AND role = 'user' AND host_meta IS NULL"
)


#: A message's opening: its first 40 characters, leading blanks dropped, lower-cased.
OPENING = "lower(substr(ltrim(content), 1, 40))"


def requests_sql(*, newest_first: bool) -> str:
    """The statement of :meth:`ActivityStore.user_requests` (parameters: the conversation,
    *upto*, the limit)."""
    order = "DESC" if newest_first else "ASC"
    return f"{_REQUEST} AND seq <= ? AND length(trim(content)) > 0 ORDER BY seq {order} LIMIT ?"


class ActivityStore(StoreCore):
    """Reads over a conversation's activity."""

    def _opening_like(self, openings: Sequence[str]) -> tuple[str, list[Any]]:
        """The condition that a message's :data:`OPENING` matches one of the LIKE patterns
        *openings*, and its parameters."""
        return "(" + " OR ".join([f"{OPENING} LIKE ?"] * len(openings)) + ")", list(openings)

    def _whole(self, rows: Sequence[Any]) -> list[Request]:
        """Rows of :data:`_REQUEST` as requests, an archived one's text read back whole."""
        archived = [int(r[2]) for r in rows if r[3] is not None]
        if not archived:
            return [Request(int(r[0]), str(r[1])) for r in rows]
        with self.read() as conn:
            kept = archived_texts(conn, self.archive_dir, archived)
        return [Request(int(r[0]), kept.get(int(r[2]), str(r[1]))) for r in rows]

    def seq_of(self, message_id: int) -> int | None:
        """The position of a message in its conversation (``None`` if there is no such
        message)."""
        rows = self.fetchall("SELECT seq FROM messages WHERE message_id = ?", (message_id,))
        return int(rows[0][0]) if rows else None

    def last_seq(self, conversation_id: int) -> int:
        """The position of the conversation's last message (0 with none)."""
        rows = self.fetchall(
            "SELECT coalesce(max(seq), 0) FROM messages WHERE conversation_id = ?",
            (conversation_id,),
        )
        return int(rows[0][0])

    def user_requests(
        self, conversation_id: int, upto: int, *, newest_first: bool = False, limit: int = 20
    ) -> list[Request]:
        """The first (or, with *newest_first*, the latest) *limit* requests at or before
        *upto*, in that order; blank messages are not requests."""
        rows = self.fetch_in_order(
            requests_sql(newest_first=newest_first), (conversation_id, upto, limit)
        )
        return self._whole(rows)

    def restated_requests(
        self,
        conversation_id: int,
        after: int,
        upto: int,
        openings: Sequence[str],
        *,
        limit: int = 10,
    ) -> list[Request]:
        """The latest *limit* requests in ``after < seq <= upto`` whose first 40 characters
        (leading blanks dropped, lower-cased) match one of the LIKE patterns *openings*,
        oldest first: the candidates for a restated goal."""
        if not openings:
            return []
        likes, patterns = self._opening_like(openings)
        rows = self.fetch_in_order(
            f"{_REQUEST} AND seq > ? AND seq <= ? AND {likes} ORDER BY seq DESC LIMIT ?",
            (conversation_id, after, upto, *patterns, limit),
        )
        return self._whole(rows[::-1])

    def tool_calls_between(self, conversation_id: int, after: int, upto: int) -> list[ToolCall]:
        """The tool calls made by the messages in ``after < seq <= upto``, in the order they
        were made."""
        rows = self.fetchall(
            f"SELECT e.execution_id, e.tool_name, {INPUT_SQL}, e.status, m.seq, e.call_message_id"
            " FROM messages m JOIN tool_executions e ON e.call_message_id = m.message_id"
            " WHERE m.conversation_id = ? AND m.seq > ? AND m.seq <= ?"
            " ORDER BY m.seq, e.execution_id",
            (conversation_id, after, upto),
        )
        return [
            ToolCall(str(eid), name, tool_input, str(status), int(seq), int(mid))
            for eid, name, tool_input, status, seq, mid in rows
        ]

    def acted_between(self, conversation_id: int, after: int, upto: int) -> bool:
        """Whether any message in ``after < seq <= upto`` made a tool call."""
        return bool(
            self.fetchall(
                "SELECT 1 FROM messages m JOIN tool_executions e"
                " ON e.call_message_id = m.message_id"
                " WHERE m.conversation_id = ? AND m.seq > ? AND m.seq <= ? LIMIT 1",
                (conversation_id, after, upto),
            )
        )

    def replied_between(self, conversation_id: int, after: int, upto: int) -> bool:
        """Whether the assistant wrote a message in ``after < seq <= upto`` (a host's records
        are not replies)."""
        return bool(
            self.fetchall(
                "SELECT 1 FROM messages WHERE conversation_id = ? AND seq > ? AND seq <= ?"
                " AND role = 'assistant' AND host_meta IS NULL LIMIT 1",
                (conversation_id, after, upto),
            )
        )

    def latest_checklist(self, conversation_id: int, after: int, upto: int) -> str | None:
        """The text of the latest message in ``after < seq <= upto`` with an unchecked box
        (``[ ]``) in it, if any."""
        rows = self.fetch_in_order(
            "SELECT seq, content, message_id, archived_at FROM messages WHERE conversation_id = ?"
            " AND seq > ? AND seq <= ? AND content LIKE '%[ ]%' ORDER BY seq DESC LIMIT 1",
            (conversation_id, after, upto),
        )
        return self._whole(rows)[0].content if rows else None

    def key_points_upto(self, conversation_id: int, upto: int) -> list[str]:
        """The key points of the conversation's latest session summary that covers no message
        after *upto* (none without one, or when they cannot be read)."""
        rows = self.fetchall(
            "SELECT ss.key_points FROM session_summaries ss"
            " LEFT JOIN messages m ON m.message_id = ss.last_message_id"
            " WHERE ss.conversation_id = ? AND (ss.last_message_id IS NULL OR m.seq <= ?)"
            " ORDER BY ss.version DESC LIMIT 1",
            (conversation_id, upto),
        )
        if not rows or not rows[0][0]:
            return []
        try:
            points = loads(rows[0][0])
        except ValueError:
            return []
        return [p for p in points if isinstance(p, str)] if isinstance(points, list) else []
