"""Reading the summary DAG: summaries by id, what each was made from, what covers a message,
and how many a conversation has."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codec import loads
from ..errors import NotFoundError
from ..model import Summary
from .context import ContextStore
from .core import in_chunks

__all__ = ["SummaryReads"]


class SummaryReads(ContextStore):
    """The summary DAG, read (:class:`~.summaries.SummaryStore` writes it)."""

    _SUM_COLS = (
        "summary_id, conversation_id, kind, depth, content, token_count, created_at,"
        " earliest_at, latest_at, descendant_count, file_ids, model"
    )

    _SUM_INSERT = f"INSERT INTO summaries ({_SUM_COLS}) VALUES ({', '.join('?' * 12)})"

    #: What is read back: the written columns and the retirement marks.
    _SUM_READ = _SUM_COLS + ", retired_reason, superseded_by"

    @staticmethod
    def _summary(row: Sequence[Any]) -> Summary:
        return Summary(
            summary_id=row[0],
            conversation_id=row[1],
            kind=row[2],
            depth=row[3],
            content=row[4],
            token_count=row[5],
            created_at=row[6],
            earliest_at=row[7],
            latest_at=row[8],
            descendant_count=row[9],
            file_ids=tuple(loads(row[10]) or ()),
            model=row[11],
            retired_reason=row[12] if len(row) > 12 else None,
            superseded_by=row[13] if len(row) > 13 else None,
        )

    def get_summaries(self, summary_ids: Sequence[str]) -> list[Summary]:
        """Summaries by id, in the order given; :class:`NotFoundError` for an unknown id."""
        ids = list(summary_ids)
        found: dict[str, Summary] = {}
        queryable = [i for i in ids if isinstance(i, str) and i.isascii()]  # ids are ASCII
        with self.read() as conn:
            for chunk, marks in in_chunks(queryable):
                for row in conn.execute(
                    f"SELECT {self._SUM_READ} FROM summaries WHERE summary_id IN ({marks})", chunk
                ):
                    found[row[0]] = self._summary(row)
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFoundError(
                f"no summary {missing[0]}; summary ids look like sum_0123456789abcdef"
            )
        return [found[i] for i in ids]

    def summary_sources(self, summary_id: str) -> tuple[list[str], list[int]]:
        """The summaries a condensed summary was made from, and the messages a leaf covers."""
        parents = [
            r[0]
            for r in self.fetchall(
                "SELECT parent_summary_id FROM summary_parents WHERE summary_id = ?"
                " ORDER BY ordinal",
                (summary_id,),
            )
        ]
        messages = [
            r[0]
            for r in self.fetchall(
                "SELECT message_id FROM summary_messages WHERE summary_id = ? ORDER BY ordinal",
                (summary_id,),
            )
        ]
        return parents, messages

    def parents_of(self, summary_ids: Sequence[str]) -> dict[str, list[str]]:
        """The summaries each of *summary_ids* was made from, in source order, in one query
        per 500 ids (leaves map to an empty list)."""
        out: dict[str, list[str]] = {sid: [] for sid in summary_ids}
        ids = list(out)
        with self.read() as conn:
            for chunk, marks in in_chunks(ids):
                for sid, parent in conn.execute(
                    "SELECT summary_id, parent_summary_id FROM summary_parents"
                    f" WHERE summary_id IN ({marks}) ORDER BY summary_id, ordinal",
                    chunk,
                ):
                    out[sid].append(parent)
        return out

    def summary_starts(self, summary_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Where each of *summary_ids* starts: the conversation and seq of the first message
        below it (down its first sources; a leaf's first message is its lowest id), in a
        few statements per level of the DAG; one with no message below it is left out."""
        first: dict[str, str] = {sid: sid for sid in summary_ids}  # summary → where it is now
        leads: dict[str, int] = {}  # summary → its first message
        with self.read() as conn:
            for _ in range(64):  # deeper than any DAG: a damaged store's cycle ends here
                if not first:
                    break
                level = sorted(set(first.values()))
                down: dict[str, tuple[int, str]] = {}
                for chunk, marks in in_chunks(level):
                    for sid, parent, ordinal in conn.execute(
                        "SELECT summary_id, parent_summary_id, ordinal FROM summary_parents"
                        f" WHERE summary_id IN ({marks})",
                        chunk,
                    ):
                        if sid not in down or ordinal < down[sid][0]:
                            down[sid] = (ordinal, parent)
                for root, at in list(first.items()):
                    if at in down:
                        first[root] = down[at][1]
                        continue
                    del first[root]
                    # A leaf (a folded one may cover thousands of messages: one index seek).
                    row = conn.execute(
                        "SELECT min(message_id) FROM summary_messages WHERE summary_id = ?",
                        (at,),
                    ).fetchone()
                    if row is not None and row[0] is not None:
                        leads[root] = int(row[0])
            out: dict[str, tuple[int, int]] = {}
            at_message: dict[int, tuple[int, int]] = {}
            for ids, marks in in_chunks(sorted(set(leads.values()))):
                for mid, conv, seq in conn.execute(
                    "SELECT message_id, conversation_id, seq FROM messages"
                    f" WHERE message_id IN ({marks})",
                    ids,
                ):
                    at_message[int(mid)] = (int(conv), int(seq))
            for root, mid in leads.items():
                if mid in at_message:
                    out[root] = at_message[mid]
        return out

    def replaced_by(self, summary_id: str) -> list[str]:
        """The summaries *summary_id* took the place of (retired as rewritten, naming it), in
        the order of what they cover: the leaves a fold under pressure made one, or the one
        summary a rewrite replaced."""
        rows = self.fetchall(
            "SELECT summary_id FROM summaries WHERE superseded_by = ?"
            " ORDER BY COALESCE(earliest_at, created_at), created_at, summary_id",
            (summary_id,),
        )
        return [r[0] for r in rows]

    def covering(self, ref: str | int) -> list[str]:
        """The summaries made from *ref*: leaves covering a message id, or the condensed
        summaries made from a summary id."""
        if isinstance(ref, int):
            rows = self.fetchall(
                "SELECT sm.summary_id FROM summary_messages sm JOIN summaries s"
                " ON s.summary_id = sm.summary_id WHERE sm.message_id = ?"
                " AND s.retired_at IS NULL",
                (ref,),
            )
        else:
            rows = self.fetchall(
                "SELECT sp.summary_id FROM summary_parents sp JOIN summaries s"
                " ON s.summary_id = sp.summary_id WHERE sp.parent_summary_id = ?"
                " AND s.retired_at IS NULL",
                (ref,),
            )
        return [r[0] for r in rows]

    def summary_counts(self, conversation_id: int) -> dict[int, int]:
        """Summaries of a conversation by depth."""
        rows = self.fetchall(
            "SELECT depth, count(*) FROM summaries WHERE conversation_id = ? GROUP BY depth",
            (conversation_id,),
        )
        return {int(d): int(n) for d, n in rows}
