"""Structural checks of the store (doctor): the context, the DAG and the records every id must
keep.

Each check is one read-only query returning the rows that break a rule, as typed rows; what
they mean and how to fix them is :mod:`lossless.doctor`'s to say. A damaged store can have
millions of such rows, so every check that can find many takes a *limit* (at most that many
rows).
The back ends add their own checks: :meth:`~.core.StoreCore.fts_problems` and
:meth:`~.core.StoreCore.foreign_key_problems`.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from .core import NO_LIMIT, StoreCore

__all__ = [
    "CheckStore",
    "CrossLink",
    "DanglingItem",
    "DepthViolation",
    "OrdinalGap",
    "OrphanSummary",
    "RetiredUse",
    "UnplacedMessage",
]


class OrdinalGap(NamedTuple):
    """A conversation whose context ordinals go below 0."""

    conversation_id: int
    items: int  # how many items the context holds
    low: int
    high: int


class DanglingItem(NamedTuple):
    """A context item whose message or summary is missing or of another conversation."""

    conversation_id: int
    ordinal: int
    item_type: str  # message or summary
    ref: str  # the message id (as text) or summary id it points at


class UnplacedMessage(NamedTuple):
    """A message neither in its context, nor removed from it, nor under a summary in it."""

    conversation_id: int
    message_id: int


class OrphanSummary(NamedTuple):
    """A leaf summary without messages or a condensed one without parents."""

    summary_id: str
    kind: str


class CrossLink(NamedTuple):
    """A summary's source (a message or a parent summary) of another conversation."""

    summary_id: str
    source_type: Literal["message", "summary"]
    source: str  # the message id (as text) or the parent summary id
    conversation_id: int  # the summary's


class DepthViolation(NamedTuple):
    """A summary made from a parent no shallower than itself."""

    summary_id: str
    parent_summary_id: str
    depth: int
    parent_depth: int


class RetiredUse(NamedTuple):
    """A retired summary still in use: in a conversation's context, or a parent of a live
    summary."""

    summary_id: str
    user_type: Literal["context", "summary"]
    user: str  # the conversation id (as text) or the live summary's id


_UNPLACED = """
WITH RECURSIVE reach(summary_id) AS (
  SELECT summary_id FROM context_items WHERE item_type = 'summary'
  UNION
  SELECT sp.parent_summary_id FROM summary_parents sp JOIN reach r ON sp.summary_id = r.summary_id
),
placed(message_id) AS (
  SELECT message_id FROM context_items WHERE message_id IS NOT NULL
  UNION SELECT message_id FROM context_removals
  UNION SELECT sm.message_id FROM summary_messages sm JOIN reach r ON r.summary_id = sm.summary_id
)
SELECT m.conversation_id, m.message_id FROM messages m
WHERE m.message_id IN (SELECT message_id FROM messages EXCEPT SELECT message_id FROM placed)
ORDER BY m.message_id LIMIT ?
"""


class CheckStore(StoreCore):
    """Structural checks of the store (doctor)."""

    def ordinal_gaps(self) -> list[OrdinalGap]:
        """Conversations with context ordinals below 0 (what a move half done would leave).
        Gaps are no fault: ordinals are sparse (a summary takes its first source's ordinal
        and the items after keep theirs); only their order counts."""
        rows = self.fetchall(
            "SELECT conversation_id, count(*), min(ordinal), max(ordinal) FROM context_items"
            " GROUP BY conversation_id HAVING min(ordinal) < 0"
        )
        return [OrdinalGap(int(c), int(n), int(lo), int(hi)) for c, n, lo, hi in rows]

    def dangling_items(self, limit: int = NO_LIMIT) -> list[DanglingItem]:
        """Context items pointing at a message or summary that is missing or belongs to
        another conversation."""
        rows = self.fetchall(
            "SELECT ci.conversation_id, ci.ordinal, ci.item_type,"
            " coalesce(CAST(ci.message_id AS TEXT), ci.summary_id)"
            " FROM context_items ci"
            " LEFT JOIN messages m ON m.message_id = ci.message_id"
            " LEFT JOIN summaries s ON s.summary_id = ci.summary_id"
            " WHERE (ci.item_type = 'message' AND (m.message_id IS NULL"
            "        OR m.conversation_id <> ci.conversation_id))"
            "    OR (ci.item_type = 'summary' AND (s.summary_id IS NULL"
            "        OR s.conversation_id <> ci.conversation_id))"
            " LIMIT ?",
            (limit,),
        )
        return [
            DanglingItem(int(conv), int(ordinal), str(kind), str(ref))
            for conv, ordinal, kind, ref in rows
        ]

    def unplaced_messages(self, limit: int = NO_LIMIT) -> list[UnplacedMessage]:
        """Messages unreachable from their context: not in it, not removed from it, and not
        under any summary reachable from it; by message id."""
        return [UnplacedMessage(int(c), int(m)) for c, m in self.fetchall(_UNPLACED, (limit,))]

    def orphan_summaries(self, limit: int = NO_LIMIT) -> list[OrphanSummary]:
        """Summaries with no sources: leaves linking no message, condensed ones no parent."""
        rows = self.fetchall(
            "SELECT s.summary_id, s.kind FROM summaries s WHERE"
            " (s.kind = 'leaf' AND NOT EXISTS"
            "   (SELECT 1 FROM summary_messages sm WHERE sm.summary_id = s.summary_id))"
            " OR (s.kind = 'condensed' AND NOT EXISTS"
            "   (SELECT 1 FROM summary_parents sp WHERE sp.summary_id = s.summary_id))"
            " LIMIT ?",
            (limit,),
        )
        return [OrphanSummary(str(sid), str(kind)) for sid, kind in rows]

    def cross_conversation_links(self, limit: int = NO_LIMIT) -> list[CrossLink]:
        """Summaries linking a message or parent summary of another conversation."""
        rows = self.fetchall(
            "SELECT sm.summary_id, 'message', CAST(sm.message_id AS TEXT), s.conversation_id"
            " FROM summary_messages sm"
            " JOIN summaries s ON s.summary_id = sm.summary_id"
            " JOIN messages m ON m.message_id = sm.message_id"
            " WHERE m.conversation_id <> s.conversation_id"
            " UNION ALL"
            " SELECT sp.summary_id, 'summary', sp.parent_summary_id, s.conversation_id"
            " FROM summary_parents sp"
            " JOIN summaries s ON s.summary_id = sp.summary_id"
            " JOIN summaries p ON p.summary_id = sp.parent_summary_id"
            " WHERE p.conversation_id <> s.conversation_id"
            " LIMIT ?",
            (limit,),
        )
        return [
            CrossLink(str(sid), "message" if kind == "message" else "summary", str(src), int(conv))
            for sid, kind, src, conv in rows
        ]

    def depth_violations(self, limit: int = NO_LIMIT) -> list[DepthViolation]:
        """Parent links whose parent is as deep as its child or deeper."""
        rows = self.fetchall(
            "SELECT sp.summary_id, sp.parent_summary_id, s.depth, p.depth FROM summary_parents sp"
            " JOIN summaries s ON s.summary_id = sp.summary_id"
            " JOIN summaries p ON p.summary_id = sp.parent_summary_id"
            " WHERE p.depth >= s.depth LIMIT ?",
            (limit,),
        )
        return [
            DepthViolation(str(sid), str(parent), int(depth), int(pdepth))
            for sid, parent, depth, pdepth in rows
        ]

    def retired_but_live(self, limit: int = NO_LIMIT) -> list[RetiredUse]:
        """Retired summaries still used: in a context, or as the parent of a live summary."""
        rows = self.fetchall(
            "SELECT ci.summary_id, 'context', CAST(ci.conversation_id AS TEXT)"
            " FROM context_items ci JOIN summaries s ON s.summary_id = ci.summary_id"
            " WHERE s.retired_at IS NOT NULL"
            " UNION ALL"
            " SELECT sp.parent_summary_id, 'summary', sp.summary_id FROM summary_parents sp"
            " JOIN summaries c ON c.summary_id = sp.summary_id"
            " JOIN summaries p ON p.summary_id = sp.parent_summary_id"
            " WHERE c.retired_at IS NULL AND p.retired_at IS NOT NULL"
            " LIMIT ?",
            (limit,),
        )
        return [
            RetiredUse(str(sid), "context" if kind == "context" else "summary", str(user))
            for sid, kind, user in rows
        ]

    def storage_paths(self) -> set[str]:
        """The storage paths (relative to the files directory) every large file names."""
        return {str(r[0]) for r in self.fetchall("SELECT storage_path FROM large_files")}
