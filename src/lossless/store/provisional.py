"""Provisional summaries: written at once by the offline summarizer, finished in place when
the model's summary of the same sources arrives (same id, same DAG edges, same place)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..codec import loads
from ..model import PROVISIONAL, Summary
from .core import in_chunks
from .summaries import SummaryStore

__all__ = ["PendingCount", "ProvisionalStore"]


class PendingCount(NamedTuple):
    """How many live summaries are provisional, and when the oldest was written."""

    summaries: int
    oldest_at: str | None


class ProvisionalStore(SummaryStore):
    """Finding the provisional summaries and finishing them."""

    def provisional_summaries(self, conversation_id: int | None = None) -> list[Summary]:
        """Live provisional summaries (of one conversation, or all), shallowest and oldest
        first: the order they can be finished in (a condensed one waits for its sources)."""
        where, params = "", [PROVISIONAL]
        if conversation_id is not None:
            where = " AND conversation_id = ?"
            params.append(conversation_id)  # type: ignore[arg-type]
        rows = self.fetchall(
            f"SELECT {self._SUM_READ} FROM summaries WHERE model = ? AND retired_at IS NULL"
            f"{where} ORDER BY depth, created_at, rowid",
            params,
        )
        return [self._summary(r) for r in rows]

    def pending_summaries(self, conversation_id: int | None = None) -> PendingCount:
        """The count of live provisional summaries and the oldest one's time."""
        where, params = "", [PROVISIONAL]
        if conversation_id is not None:
            where = " AND conversation_id = ?"
            params.append(conversation_id)  # type: ignore[arg-type]
        rows = self.fetchall(
            "SELECT count(*), min(created_at) FROM summaries WHERE model = ?"
            f" AND retired_at IS NULL{where}",
            params,
        )
        count, oldest = rows[0] if rows else (0, None)
        return PendingCount(int(count or 0), None if oldest is None else str(oldest))

    def provisional_conversations(self) -> list[int]:
        """The conversations holding a provisional summary."""
        return [
            int(r[0])
            for r in self.fetchall(
                "SELECT DISTINCT conversation_id FROM summaries WHERE model = ?"
                " AND retired_at IS NULL ORDER BY conversation_id",
                (PROVISIONAL,),
            )
        ]

    def conversations_marked(self, key: str) -> list[tuple[int, dict[str, object]]]:
        """The conversations whose metadata holds *key*, with its value."""
        found = []
        for conv, raw in self.fetchall(
            "SELECT conversation_id, metadata FROM conversations WHERE metadata LIKE ?"
            " ORDER BY conversation_id",
            (f'%"{key}"%',),
        ):
            value = (loads(str(raw)) or {}).get(key) if raw else None
            if isinstance(value, dict):
                found.append((int(conv), value))
        return found

    def finish_summary(self, summary_id: str, content: str, token_count: int, model: str) -> bool:
        """Put the final text of a provisional summary in place of its provisional text, in
        one transaction: its id, edges and place stay, the search indexes get the new text,
        and the contexts that show it are marked changed. ``False`` (nothing written) when
        it is no longer a live provisional summary (finished by another process, retired,
        forgotten)."""
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT conversation_id FROM summaries WHERE summary_id = ? AND model = ?"
                " AND retired_at IS NULL",
                (summary_id, PROVISIONAL),
            ).fetchone()
            if row is None:
                return False
            conversation_id = int(row[0])
            self._lock_conversation(conn, conversation_id)
            # The old text leaves the indexes as a forgotten summary's does, while it is
            # still the stored text (what the index entries were made of).
            self._forgetting(conn, [], [], [summary_id])
            conn.execute(
                "UPDATE summaries SET content = ?, token_count = ?, model = ?"
                " WHERE summary_id = ? AND model = ?",
                (content, token_count, model, summary_id, PROVISIONAL),
            )
            self._forgotten(conn, [], [], [summary_id])
            for (conv,) in conn.execute(
                "SELECT DISTINCT conversation_id FROM context_items WHERE summary_id = ?",
                (summary_id,),
            ).fetchall():
                self._context_changed(conn, int(conv))
            return True

    def sources_provisional(self, summary_ids: Sequence[str]) -> set[str]:
        """Those of *summary_ids* that have a provisional summary among their sources."""
        found: set[str] = set()
        ids = list(summary_ids)
        with self.read() as conn:
            for chunk, marks in in_chunks(ids):
                found.update(
                    str(r[0])
                    for r in conn.execute(
                        "SELECT DISTINCT p.summary_id FROM summary_parents p"
                        " JOIN summaries s ON s.summary_id = p.parent_summary_id"
                        f" WHERE p.summary_id IN ({marks}) AND s.model = ?",
                        [*chunk, PROVISIONAL],
                    )
                )
        return found
