"""Summaries and their DAG: writing a pass, maintenance (rewrite, dissolve) and transplant."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from ..codec import content_hash, dumps
from ..errors import ConflictError, NotFoundError, StoreError
from ..model import (
    ContextItem,
    Conversation,
    Summary,
)
from ..timestamps import format_ts, now
from .archive_files import read_archived
from .connection import Connection
from .core import (
    _MESSAGE_INSERT,
    _PART_INSERT,
    DEFER_TRIGRAM_AT,
    in_chunks,
)
from .summary_reads import SummaryReads
from .toollog import record_tool_executions

_ordinal = attrgetter("ordinal")

__all__ = ["SummaryStore"]


class SummaryStore(SummaryReads):
    """The summary DAG (over the context it rewrites)."""

    def write_summary(
        self,
        summary: Summary,
        sources: Sequence[ContextItem],
        *,
        links: Sequence[int] | Sequence[str] | None = None,
        retire: Sequence[str] = (),
    ) -> None:
        """Store *summary* and put it in place of *sources* in the context: one transaction.

        *sources* are consecutive context items (messages for a leaf, same-depth summaries for
        a condensed summary). If the context changed since they were read, nothing is written
        and :class:`ConflictError` is raised (retrying the pass is safe).

        A summary folded under pressure names what it was made from in *links* instead (a
        leaf's message ids, a condensed summary's parent ids, in order), and the summaries it
        takes the place of in *retire*: they are retired as ``rewritten``, naming it as their
        successor (kept, with their own edges).
        """
        if not sources:
            raise ValueError("a summary needs at least one source")
        conv = summary.conversation_id
        first, last = sources[0].ordinal, sources[-1].ordinal
        with self.transaction() as conn:
            self._lock_conversation(conn, conv)
            # The stretch as stored, each row with the context's version before this write.
            current = conn.execute(
                "SELECT ordinal, message_id, summary_id,"
                " (SELECT context_version FROM conversations WHERE conversation_id = ?)"
                " FROM context_items"
                " WHERE conversation_id = ? AND ordinal BETWEEN ? AND ? ORDER BY ordinal",
                (conv, conv, first, last),
            ).fetchall()
            expected = [(i.ordinal, i.message_id, i.summary_id) for i in sources]
            if [tuple(r[:3]) for r in current] != expected:
                raise ConflictError(
                    f"the context of conversation {conv} changed during compaction; run it again"
                )
            conn.execute(self._SUM_INSERT, _summary_row(summary))
            if links is None:
                self._link_sources(conn, summary, first, last)
            else:
                self._link_given(conn, summary, links)
            if retire:
                conn.executemany(
                    "UPDATE summaries SET retired_at = ?, retired_reason = 'rewritten',"
                    " superseded_by = ? WHERE summary_id = ? AND retired_at IS NULL",
                    [(summary.created_at, summary.summary_id, old) for old in retire],
                )
            self._index_summaries(conn, [summary.summary_id])
            self._place_summary(conn, summary, first, last)
            version = self._context_changed(conn, conv)

        # Committed: a context kept as it was before is kept with the summary in place of its
        # sources (the next pass, and the turn after, read one row instead of the context).
        def splice(items: list[ContextItem]) -> None:
            # Ordinals increase along the context: the stretch is found by bisection.
            lo = bisect.bisect_left(items, first, key=_ordinal)
            hi = bisect.bisect_right(items, last, lo=lo, key=_ordinal)
            items[lo:hi] = [ContextItem.of_summary(summary, first)]

        if current[0][3] is not None:
            # Inside a caller's transaction it may yet roll back: kept, but read again.
            written = not self._in_transaction()
            self._patch_kept_context(conv, int(current[0][3]), version, splice, written=written)

    @staticmethod
    def _link_sources(conn: Connection, summary: Summary, first: int, last: int) -> None:
        """Record the context items at ordinals *first*..*last* (found to be the summary's
        sources, under the lock) as what *summary* was made from, in their order: messages
        for a leaf (``summary_messages``), summaries for a condensed one
        (``summary_parents``). One statement that reads them where they are, however many
        (a leaf holds hundreds of messages, which row by row were most of its write)."""
        table, column, source = (
            ("summary_messages", "message_id", "message_id")
            if summary.kind == "leaf"
            else ("summary_parents", "parent_summary_id", "summary_id")
        )
        conn.execute(
            f"INSERT INTO {table} (summary_id, {column}, ordinal)"
            f" SELECT ?, {source}, row_number() OVER (ORDER BY ordinal) - 1 FROM context_items"
            " WHERE conversation_id = ? AND ordinal BETWEEN ? AND ?",
            (summary.summary_id, summary.conversation_id, first, last),
        )

    @staticmethod
    def _link_given(
        conn: Connection, summary: Summary, links: Sequence[int] | Sequence[str]
    ) -> None:
        """Record *links* as what *summary* was made from, in their order."""
        table, column = (
            ("summary_messages", "message_id")
            if summary.kind == "leaf"
            else ("summary_parents", "parent_summary_id")
        )
        conn.executemany(
            f"INSERT INTO {table} (summary_id, {column}, ordinal) VALUES (?, ?, ?)",
            [(summary.summary_id, link, n) for n, link in enumerate(links)],
        )

    @staticmethod
    def _place_summary(conn: Connection, summary: Summary, first: int, last: int) -> None:
        """Put *summary* where the items at ordinals *first*..*last* were. The items after
        keep their ordinals (ordinals are sparse: only their order counts), so a summary
        rewrites two rows of the context however long it is."""
        conv = summary.conversation_id
        conn.execute(
            "DELETE FROM context_items WHERE conversation_id = ? AND ordinal BETWEEN ? AND ?",
            (conv, first, last),
        )
        conn.execute(
            "INSERT INTO context_items (conversation_id, ordinal, item_type, summary_id,"
            " created_at) VALUES (?, ?, 'summary', ?, ?)",
            (conv, first, summary.summary_id, summary.created_at),
        )

    def degraded_summaries(
        self, conversation_id: int | None, marker: str
    ) -> list[tuple[Summary, str]]:
        """Live summaries written by the deterministic fallback, withdrawn by a forget, or
        ending in *marker* (cut to size), with the reason, shallowest first."""
        where = " AND conversation_id = ?" if conversation_id is not None else ""
        rows = self.fetchall(
            f"SELECT {self._SUM_READ} FROM summaries WHERE retired_at IS NULL"
            " AND (model IN ('fallback', 'forgotten') OR substr(content, -length(?)) = ?)"
            f"{where} ORDER BY depth, created_at, rowid",
            [marker, marker, *([conversation_id] if conversation_id is not None else [])],
        )
        found = []
        for r in rows:
            summary = self._summary(r)
            why = summary.model if summary.model in ("fallback", "forgotten") else "truncated"
            found.append((summary, why))
        return found

    def live_summaries(
        self, conversation_id: int | None, *, depth: int | None = None
    ) -> list[Summary]:
        """Summaries not retired, shallowest first (optionally of one conversation / depth)."""
        where, params = "", []
        if conversation_id is not None:
            where += " AND conversation_id = ?"
            params.append(conversation_id)
        if depth is not None:
            where += " AND depth = ?"
            params.append(depth)
        rows = self.fetchall(
            f"SELECT {self._SUM_READ} FROM summaries WHERE retired_at IS NULL{where}"
            " ORDER BY depth, created_at, rowid",
            params,
        )
        return [self._summary(r) for r in rows]

    def replace_summaries(self, replacements: Sequence[tuple[str, Summary]]) -> None:
        """Put each new summary in place of the old one, in order (shallowest first), in one
        transaction: the new one gets the old one's sources (a replaced source mapped to its
        replacement), takes its place in the context and under the summaries made from it,
        and the old one is retired as ``rewritten`` (kept, with its edges, naming its
        successor). :class:`ConflictError`, changing nothing, if an old one is retired."""
        mapping = {old: new.summary_id for old, new in replacements}
        stamp = format_ts(now())
        with self.transaction() as conn:
            for conv in sorted({new.conversation_id for _, new in replacements}):
                self._lock_conversation(conn, conv)
                self._context_changed(conn, conv)
            for old, new in replacements:
                row = conn.execute(
                    "SELECT retired_at FROM summaries WHERE summary_id = ?", (old,)
                ).fetchone()
                if row is None:
                    raise NotFoundError(f"no summary {old}")
                if row[0] is not None:
                    raise ConflictError(f"{old} was retired meanwhile; run the command again")
                conn.execute(self._SUM_INSERT, _summary_row(new))
                conn.execute(
                    "INSERT INTO summary_messages (summary_id, message_id, ordinal)"
                    " SELECT ?, message_id, ordinal FROM summary_messages WHERE summary_id = ?",
                    (new.summary_id, old),
                )
                conn.executemany(
                    "INSERT INTO summary_parents (summary_id, parent_summary_id, ordinal)"
                    " VALUES (?, ?, ?)",
                    [
                        (new.summary_id, mapping.get(parent, parent), ordinal)
                        for parent, ordinal in conn.execute(
                            "SELECT parent_summary_id, ordinal FROM summary_parents"
                            " WHERE summary_id = ?",
                            (old,),
                        ).fetchall()
                    ],
                )
                # live summaries made from the old one now stand on the new one
                conn.execute(
                    "UPDATE summary_parents SET parent_summary_id = ? WHERE parent_summary_id = ?"
                    " AND summary_id IN (SELECT summary_id FROM summaries"
                    "  WHERE retired_at IS NULL AND summary_id <> ?)",
                    (new.summary_id, old, new.summary_id),
                )
                conn.execute(
                    "UPDATE context_items SET summary_id = ? WHERE summary_id = ?"
                    " AND conversation_id = ?",
                    (new.summary_id, old, new.conversation_id),
                )
                conn.execute(
                    "UPDATE summaries SET retired_at = ?, retired_reason = 'rewritten',"
                    " superseded_by = ? WHERE summary_id = ?",
                    (stamp, new.summary_id, old),
                )
                self._index_summaries(conn, [new.summary_id])

    def dissolve_summary(self, summary_id: str) -> list[ContextItem]:
        """Put a context summary's sources back into the context in its place (its parent
        summaries, or a leaf's messages) and retire it as ``dissolved`` — one transaction.
        Returns the items put back."""
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT conversation_id, ordinal FROM context_items WHERE summary_id = ?",
                (summary_id,),
            ).fetchone()
            if row is None:
                raise NotFoundError(
                    f"{summary_id} is not in an active context, so there is nothing to"
                    " dissolve in its place; dissolve the summary above it first"
                )
            conv, ordinal = row
            self._lock_conversation(conn, conv)
            self._context_changed(conn, conv)
            parents = conn.execute(
                "SELECT parent_summary_id FROM summary_parents WHERE summary_id = ?"
                " ORDER BY ordinal",
                (summary_id,),
            ).fetchall()
            messages = conn.execute(
                "SELECT message_id FROM summary_messages WHERE summary_id = ? ORDER BY ordinal",
                (summary_id,),
            ).fetchall()
            sources = [("summary", None, r[0]) for r in parents] + [
                ("message", r[0], None) for r in messages
            ]
            if not sources:
                raise ConflictError(f"{summary_id} has no sources to put back")
            stamp = format_ts(now())
            conn.execute(
                "DELETE FROM context_items WHERE conversation_id = ? AND ordinal = ?",
                (conv, ordinal),
            )
            # The items after move up only by what the gap after it cannot hold.
            (following,) = conn.execute(
                "SELECT min(ordinal) FROM context_items WHERE conversation_id = ? AND ordinal > ?",
                (conv, ordinal),
            ).fetchone()
            room = len(sources) if following is None else int(following) - ordinal
            self._shift_ordinals(conn, conv, after=ordinal, by=max(0, len(sources) - room))
            conn.executemany(
                "INSERT INTO context_items (conversation_id, ordinal, item_type, message_id,"
                " summary_id, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (conv, ordinal + n, kind, mid, sid, stamp)
                    for n, (kind, mid, sid) in enumerate(sources)
                ],
            )
            conn.execute(
                "UPDATE summaries SET retired_at = ?, retired_reason = 'dissolved'"
                " WHERE summary_id = ?",
                (stamp, summary_id),
            )
        items = self.context(int(conv))
        return [i for i in items if ordinal <= i.ordinal < ordinal + len(sources)]

    def context_summaries(self, conversation_id: int) -> list[Summary]:
        """The summaries in a conversation's context, in ordinal order."""
        rows = self.fetchall(
            f"SELECT {', '.join('s.' + c.strip() for c in self._SUM_READ.split(','))}"
            " FROM context_items ci JOIN summaries s ON s.summary_id = ci.summary_id"
            " WHERE ci.conversation_id = ? AND ci.item_type = 'summary' ORDER BY ci.ordinal",
            (conversation_id,),
        )
        return [self._summary(r) for r in rows]

    def summary_dag(self, summary_ids: Sequence[str]) -> list[Summary]:
        """*summary_ids* and every summary beneath them (recursively through
        ``summary_parents``), each once, in topological order: depth ascending, creation
        order within a depth."""
        if not summary_ids:
            return []
        cols = ", ".join("s." + c.strip() for c in self._SUM_READ.split(","))
        marks = ",".join("(?)" for _ in summary_ids)
        rows = self.fetchall(
            f"WITH RECURSIVE below(sid) AS (VALUES {marks}"
            "  UNION SELECT sp.parent_summary_id FROM summary_parents sp"
            "  JOIN below b ON sp.summary_id = b.sid)"
            f" SELECT {cols} FROM below b JOIN summaries s ON s.summary_id = b.sid"
            " ORDER BY s.depth, s.created_at, s.rowid",
            list(summary_ids),
        )
        return [self._summary(r) for r in rows]

    def covered_messages(self, summary_ids: Sequence[str]) -> dict[str, tuple[int, int, int]]:
        """For each of *summary_ids*: how many messages lie below it, and the first and last
        of them. The first is found down the DAG's first edge (its first source, that one's
        first, … its first message), the last down its last; the count is the run of the
        conversation from the one to the other (what a summary covers). A few queries
        whatever the summaries cover: a top summary of a million messages costs what a
        leaf does."""
        if not summary_ids:
            return {}
        ends: dict[str, list[int]] = {}
        for direction in ("ASC", "DESC"):
            marks = ",".join("(?, ?)" for _ in summary_ids)
            rows = self.fetchall(
                f"WITH RECURSIVE walk(root, sid) AS (VALUES {marks}"
                "  UNION ALL SELECT w.root, (SELECT sp.parent_summary_id FROM summary_parents sp"
                f"   WHERE sp.summary_id = w.sid ORDER BY sp.ordinal {direction} LIMIT 1)"
                "  FROM walk w WHERE EXISTS"
                "   (SELECT 1 FROM summary_parents sp WHERE sp.summary_id = w.sid))"
                f" SELECT w.root, (SELECT {'min' if direction == 'ASC' else 'max'}(sm.message_id)"
                "  FROM summary_messages sm WHERE sm.summary_id = w.sid)"
                " FROM walk w WHERE NOT EXISTS"
                "  (SELECT 1 FROM summary_parents sp WHERE sp.summary_id = w.sid)",
                [v for sid in summary_ids for v in (sid, sid)],
            )
            for root, message_id in rows:
                if message_id is not None:
                    ends.setdefault(str(root), []).append(int(message_id))
        ids = sorted({m for found in ends.values() for m in found})
        seq: dict[int, tuple[int, int]] = {}
        for chunk, marks in in_chunks(ids):
            for mid, conv, n in self.fetchall(
                "SELECT message_id, conversation_id, seq FROM messages"
                f" WHERE message_id IN ({marks})",
                chunk,
            ):
                seq[int(mid)] = (int(conv), int(n))
        out: dict[str, tuple[int, int, int]] = {}
        for root, found in ends.items():
            if len(found) != 2 or found[0] not in seq or found[1] not in seq:
                continue
            first, last = found
            (conv_a, a), (conv_b, b) = seq[first], seq[last]
            count = b - a + 1 if conv_a == conv_b and b >= a else 2
            out[root] = (count, first, last)
        return out

    def linked_message_ids(self, summary_ids: Sequence[str]) -> list[int]:
        """The messages the given leaf summaries cover, each once, in id order."""
        found: set[int] = set()
        ids = list(summary_ids)
        with self.read() as conn:
            for chunk, marks in in_chunks(ids):
                found.update(
                    r[0]
                    for r in conn.execute(
                        f"SELECT message_id FROM summary_messages WHERE summary_id IN ({marks})",
                        chunk,
                    )
                )
        return sorted(found)

    def summary_hashes(self, conversation_id: int) -> set[str]:
        """SHA-256 of the content of every summary of a conversation."""
        return {
            content_hash(r[0])
            for r in self.fetchall(
                "SELECT content FROM summaries WHERE conversation_id = ?", (conversation_id,)
            )
        }

    def adopt_dag(
        self,
        conversation_id: int,
        summaries: Sequence[Summary],
        leaf_messages: dict[str, list[int]],
        sources: dict[str, list[str]],
        context: Sequence[tuple[str, int | str]],
    ) -> int:
        """Bring a summary DAG made elsewhere into a conversation whose messages are stored,
        and make *context* (``("message", message_id)`` / ``("summary", summary_id)``, in
        order) its active context — one transaction (the caller's, when it holds one).

        *summaries* come in dependency order (sources before what condenses them); one whose id
        the store holds already is kept as it is. *leaf_messages* links a leaf to its messages,
        *sources* a condensed summary to the summaries it was made from, both in order.
        Returns how many summaries were new."""
        with self.transaction() as conn:
            self._lock_conversation(conn, conversation_id)
            ids = [s.summary_id for s in summaries]
            known: set[str] = set()
            for chunk, marks in in_chunks(ids):
                known.update(
                    r[0]
                    for r in conn.execute(
                        f"SELECT summary_id FROM summaries WHERE summary_id IN ({marks})", chunk
                    )
                )
            fresh = [s for s in summaries if s.summary_id not in known]
            conn.executemany(self._SUM_INSERT, [_summary_row(s) for s in fresh])
            conn.executemany(
                "INSERT INTO summary_messages (summary_id, message_id, ordinal) VALUES (?, ?, ?)",
                [
                    (s.summary_id, mid, n)
                    for s in fresh
                    for n, mid in enumerate(leaf_messages.get(s.summary_id, []))
                ],
            )
            conn.executemany(
                "INSERT INTO summary_parents (summary_id, parent_summary_id, ordinal)"
                " VALUES (?, ?, ?)",
                [
                    (s.summary_id, source, n)
                    for s in fresh
                    for n, source in enumerate(sources.get(s.summary_id, []))
                ],
            )
            if fresh:
                self._index_summaries(conn, [s.summary_id for s in fresh])
            stamp = format_ts(now())
            conn.execute("DELETE FROM context_items WHERE conversation_id = ?", (conversation_id,))
            self._context_changed(conn, conversation_id)
            conn.executemany(
                "INSERT INTO context_items (conversation_id, ordinal, item_type, message_id,"
                " summary_id, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        conversation_id,
                        n,
                        kind,
                        ref if kind == "message" else None,
                        ref if kind == "summary" else None,
                        stamp,
                    )
                    for n, (kind, ref) in enumerate(context)
                ],
            )
        return len(fresh)

    def transplant(
        self,
        source_id: int,
        target: Conversation,
        context_ids: Sequence[str],
        dag: Sequence[Summary],
        message_ids: Sequence[int],
        new_summary_id: Callable[[], str],
    ) -> tuple[dict[str, str], dict[int, int]]:
        """Copy *dag* (topologically ordered) and *message_ids* into *target* and prepend
        *context_ids*' copies to its context — one transaction. Raises
        :class:`ConflictError`, changing nothing, when the source's context summaries are no
        longer *context_ids*. Returns the summary and message id mappings (old → new)."""
        try:
            return self._transplant(
                source_id, target, context_ids, dag, message_ids, new_summary_id
            )
        except self.errors as exc:
            raise StoreError(
                f"the transplant into conversation {target.conversation_id} failed and was"
                f" rolled back, nothing changed: {exc}"
            ) from exc

    def _transplant(
        self,
        source_id: int,
        target: Conversation,
        context_ids: Sequence[str],
        dag: Sequence[Summary],
        message_ids: Sequence[int],
        new_summary_id: Callable[[], str],
    ) -> tuple[dict[str, str], dict[int, int]]:
        tgt = target.conversation_id
        with self.transaction() as conn:
            for conv in sorted({source_id, tgt}):
                self._lock_conversation(conn, conv)
            self._context_changed(conn, tgt)
            current = [
                r[0]
                for r in conn.execute(
                    "SELECT summary_id FROM context_items WHERE conversation_id = ?"
                    " AND item_type = 'summary' ORDER BY ordinal",
                    (source_id,),
                )
            ]
            if current != list(context_ids):
                raise ConflictError(
                    f"the context of conversation {source_id} changed since the transplant was"
                    " planned; run it again"
                )
            stamp = format_ts(now())
            # messages, with fresh ids and seq numbers at the target's end
            first_id = self._allocate_ids(conn, "messages", len(message_ids)) if message_ids else 0
            (seq0,) = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM messages WHERE conversation_id = ?", (tgt,)
            ).fetchone()
            msg_map = {old: first_id + i for i, old in enumerate(message_ids)}
            for chunk, marks in in_chunks(message_ids):
                rows = conn.execute(
                    "SELECT message_id, role, content, token_count, created_at, source_format,"
                    " envelope, metadata, host_meta, archived_at FROM messages"
                    f" WHERE message_id IN ({marks})",
                    chunk,
                ).fetchall()
                # An archived message is copied whole, as its archive file holds it.
                kept = read_archived(conn, self.archive_dir, [r[0] for r in rows if r[9]])
                for i, m in enumerate(rows):
                    if m[0] in kept:
                        a = kept[m[0]][0]  # the columns of message_rows.MSG_COLS
                        rows[i] = (a[0], a[3], a[4], a[5], a[6], a[8], a[9], a[10], a[11], None)
                rows = [m[:9] for m in rows]
                conn.executemany(
                    _MESSAGE_INSERT,
                    [
                        # the copy keeps no external id: the target's own imports never match it
                        (
                            msg_map[r[0]],
                            tgt,
                            seq0 + msg_map[r[0]] - first_id + 1,
                            *r[1:5],
                            None,
                            *r[5:],
                        )
                        for r in rows
                    ],
                )
                parts = conn.execute(
                    "SELECT message_id, ordinal, slot, part_type, text, tool_call_id, tool_name,"
                    " tool_input, tool_output, is_error, raw FROM message_parts"
                    f" WHERE message_id IN ({marks}) ORDER BY message_id, ordinal",
                    chunk,
                ).fetchall()
                parts += [tuple(p[1:12]) for m in sorted(kept) for p in kept[m][1]]
                if parts:
                    part_id = self._allocate_ids(conn, "message_parts", len(parts))
                    conn.executemany(
                        _PART_INSERT,
                        [
                            (part_id + n, msg_map[r[0]], target.session_id, *r[1:])
                            for n, r in enumerate(parts)
                        ],
                    )
            if message_ids:
                last_id = first_id + len(message_ids) - 1
                self._index_messages(
                    conn, first_id, last_id, trigram=len(message_ids) < DEFER_TRIGRAM_AT
                )
                record_tool_executions(conn, tgt, first_id, last_id)
            # summaries in topological order, with their edges remapped, in bulk
            sum_map = {summary.summary_id: new_summary_id() for summary in dag}
            conn.executemany(
                self._SUM_INSERT,
                [
                    _summary_row(
                        summary, summary_id=sum_map[summary.summary_id], conversation_id=tgt
                    )
                    for summary in dag
                ],
            )
            old_ids = list(sum_map)
            for some, marks in in_chunks(old_ids):
                conn.executemany(
                    "INSERT INTO summary_parents (summary_id, parent_summary_id, ordinal)"
                    " VALUES (?, ?, ?)",
                    [
                        (sum_map[child], sum_map[parent], ordinal)
                        for child, parent, ordinal in conn.execute(
                            "SELECT summary_id, parent_summary_id, ordinal FROM summary_parents"
                            f" WHERE summary_id IN ({marks})",
                            some,
                        ).fetchall()
                    ],
                )
                conn.executemany(
                    "INSERT INTO summary_messages (summary_id, message_id, ordinal)"
                    " VALUES (?, ?, ?)",
                    [
                        (sum_map[sid], msg_map[mid], ordinal)
                        for sid, mid, ordinal in conn.execute(
                            "SELECT summary_id, message_id, ordinal FROM summary_messages"
                            f" WHERE summary_id IN ({marks})",
                            some,
                        ).fetchall()
                    ],
                )
            self._index_summaries(conn, list(sum_map.values()))
            # the context: existing items move up, the copies of the context summaries first
            self._shift_ordinals(conn, tgt, after=-1, by=len(context_ids))
            conn.executemany(
                "INSERT INTO context_items (conversation_id, ordinal, item_type, summary_id,"
                " created_at) VALUES (?, ?, 'summary', ?, ?)",
                [(tgt, n, sum_map[sid], stamp) for n, sid in enumerate(context_ids)],
            )
            conn.execute(
                "UPDATE conversations SET updated_at = ? WHERE conversation_id = ?", (stamp, tgt)
            )
        return sum_map, msg_map


# --- integrity -------------------------------------------------------------------------


def _summary_row(
    summary: Summary, *, summary_id: str | None = None, conversation_id: int | None = None
) -> tuple[Any, ...]:
    """A summary as the values of ``_SUM_INSERT`` (with another id or owner for a copy)."""
    return (
        summary_id or summary.summary_id,
        summary.conversation_id if conversation_id is None else conversation_id,
        summary.kind,
        summary.depth,
        summary.content,
        summary.token_count,
        summary.created_at,
        summary.earliest_at,
        summary.latest_at,
        summary.descendant_count,
        dumps(list(summary.file_ids)),
        summary.model,
    )
