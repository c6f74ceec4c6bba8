"""The active context: the ordered items compaction rewrites and assembly reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model import (
    ContextItem,
    StoredMessage,
)
from ..timestamps import format_ts, now
from .connection import Connection
from .core import in_chunks
from .messages import MessageStore

__all__ = ["ContextStore"]

CONTEXT_READ = (
    "SELECT ci.ordinal, ci.item_type, ci.message_id, ci.summary_id,"
    " coalesce(m.token_count, s.token_count, 0), m.role, s.depth,"
    " coalesce(m.created_at, s.earliest_at, s.created_at),"
    " coalesce(m.created_at, s.latest_at, s.created_at)"
    " FROM context_items ci"
    " LEFT JOIN messages m ON m.message_id = ci.message_id"
    " LEFT JOIN summaries s ON s.summary_id = ci.summary_id"
    " WHERE ci.conversation_id = ? ORDER BY ci.ordinal"
)


#: A conversation's context version (see :meth:`StoreCore._context_changed`).
_VERSION = "SELECT context_version FROM conversations WHERE conversation_id = ?"


class ContextStore(MessageStore):
    """Each conversation's active context (over the messages its items point at).

    A host reads the context after every turn (does it need compacting?), and the context
    can hold hundreds of items. So the store keeps the contexts it read, each with its
    conversation's *context version*: a random number every write that changes the context
    (or what its items weigh) sets anew, in the same transaction, under the conversation's
    lock. A read checks the version (one row) and gives the kept list when it is unchanged,
    whatever process wrote since; an append adds its items to the kept list when the version
    it found is the one the list was read at. A version set by a transaction that rolled
    back is never seen again, so a list patched for it is never used."""

    def context(self, conversation_id: int, *, as_written: bool = False) -> list[ContextItem]:
        """The conversation's context items in order (cost: one row when this store read it
        before and nothing changed it since; else the size of the active context).

        With *as_written*, the context as this store's own last write to it left it, when
        that write was the last change this store saw, without asking the database whether
        another process wrote since (on PostgreSQL a round trip, about a sixth of a turn):
        for a decision taken right after that write, such as whether the turn needs
        compacting. Compaction itself reads the context again under its lock."""
        outside = not self._in_transaction()
        held = self._kept_context(conversation_id) if outside else None
        if held is not None:
            if as_written and held[2]:
                return held[1]
            # The version alone, one statement (on PostgreSQL one round trip, where a
            # snapshot's BEGIN and COMMIT would be two more): unchanged, the kept list is it.
            found = self.fetchall(_VERSION, (conversation_id,))
            if found and found[0][0] is not None and int(found[0][0]) == held[0]:
                return held[1]
        with self.read() as conn:
            row = conn.execute(_VERSION, (conversation_id,)).fetchone()
            version = None if row is None else int(row[0])
            if held is not None and held[0] == version:
                return held[1]
            rows = self._context_rows(conn, conversation_id)
        items = [ContextItem(*r) for r in rows]
        # Not inside a transaction: what it wrote may yet roll back.
        if outside and version is not None:
            self._keep_context(conversation_id, version, list(items), written=False)
        return items

    def _context_rows(self, conn: Connection, conversation_id: int) -> list[tuple[Any, ...]]:
        """The rows of the conversation's context items (:data:`CONTEXT_READ`), read in
        *conn*."""
        return list(conn.execute(CONTEXT_READ, (conversation_id,)).fetchall())

    def tool_links(self, message_ids: Sequence[int]) -> dict[int, tuple[set[str], set[str]]]:
        """For each message: the tool call ids it makes and the tool call ids it answers."""
        out: dict[int, tuple[set[str], set[str]]] = {}
        ids = list(message_ids)
        with self.read() as conn:
            for chunk, marks in in_chunks(ids):
                for mid, kind, call in conn.execute(
                    "SELECT message_id, part_type, tool_call_id FROM message_parts"
                    f" WHERE message_id IN ({marks}) AND tool_call_id IS NOT NULL"
                    " AND part_type IN ('tool_call', 'tool_result')",
                    chunk,
                ):
                    calls, results = out.setdefault(mid, (set(), set()))
                    (calls if kind == "tool_call" else results).add(call)
        return out

    def pop_context_message(self, conversation_id: int) -> StoredMessage | None:
        """Take the newest context item out when it is a message, recording that it was taken
        out (it stays stored and searchable); ``None`` when the context is empty or ends in a
        summary. One transaction."""
        with self.transaction() as conn:
            self._lock_conversation(conn, conversation_id)
            row = conn.execute(
                "SELECT ordinal, message_id FROM context_items WHERE conversation_id = ?"
                " ORDER BY ordinal DESC LIMIT 1",
                (conversation_id,),
            ).fetchone()
            if row is None or row[1] is None:
                return None
            self._context_changed(conn, conversation_id)
            conn.execute(
                "DELETE FROM context_items WHERE conversation_id = ? AND ordinal = ?",
                (conversation_id, row[0]),
            )
            conn.execute(
                "INSERT INTO context_removals (message_id, conversation_id, removed_at)"
                " VALUES (?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET"
                " conversation_id = excluded.conversation_id, removed_at = excluded.removed_at",
                (row[1], conversation_id, format_ts(now())),
            )
            return self.get_message(int(row[1]))

    def renumber_context(self, conversation_id: int) -> int:
        """Give the conversation's context items the ordinals ``0..n-1`` in their present
        order (what ``doctor --repair`` does to gaps); the items renumbered. One
        transaction."""
        with self.transaction() as conn:
            self._lock_conversation(conn, conversation_id)
            self._context_changed(conn, conversation_id)
            return self._renumber(conn, conversation_id)

    @staticmethod
    def _renumber(conn: Connection, conversation_id: int) -> int:
        """:meth:`renumber_context` inside the caller's transaction."""
        ordinals = [
            int(r[0])
            for r in conn.execute(
                "SELECT ordinal FROM context_items WHERE conversation_id = ? ORDER BY ordinal",
                (conversation_id,),
            ).fetchall()
        ]
        if not ordinals:
            return 0
        # First below every ordinal in use and below 0 (no two items ever share one, and
        # none of these is one of 0..n-1), then 0..n-1: each step moves rows only onto
        # ordinals no row holds (a forget that took the first items leaves ordinals from 2).
        low = min(ordinals[0], 0)
        for i, ordinal in enumerate(ordinals):
            conn.execute(
                "UPDATE context_items SET ordinal = ? WHERE conversation_id = ? AND ordinal = ?",
                (low - 1 - i, conversation_id, ordinal),
            )
        conn.execute(
            "UPDATE context_items SET ordinal = ? - ordinal WHERE conversation_id = ?",
            (low - 1, conversation_id),
        )
        return len(ordinals)

    @staticmethod
    def _shift_ordinals(conn: Connection, conversation_id: int, *, after: int, by: int) -> None:
        """Move the items after ordinal *after* by *by*, through negative numbers so that the
        primary key never sees two items on one ordinal, whatever order rows are visited in."""
        if by == 0:
            return
        conn.execute(
            "UPDATE context_items SET ordinal = -(ordinal + ?) - 1"
            " WHERE conversation_id = ? AND ordinal > ?",
            (by, conversation_id, after),
        )
        conn.execute(
            "UPDATE context_items SET ordinal = -ordinal - 1"
            " WHERE conversation_id = ? AND ordinal < 0",
            (conversation_id,),
        )
