"""Forgetting: the text of chosen messages taken out of everything that holds it.

A forgotten message stays as a **tombstone**: its row keeps its place (conversation, seq, role,
time, the host's entry id) so the DAG's edges, the context's order and a transcript's
reconciliation stay whole — re-importing the same file finds the entry stored and does not
bring it back — while its text, parts, envelope and metadata are gone. In the same
transaction go its search-index entries (and the context entries of its neighbours, which
carried its start), its parts, its kept original, its tool-log rows and large-file records,
its place in the active context, the session-summary versions made from it, and the text of
every summary whose sources reach it (each replaced by a marker that says what was forgotten
and when). What a back end can do about freed space afterwards is :meth:`purge_freed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..codec import dumps, loads
from ..timestamps import format_ts, now
from .archive import ArchiveStore
from .archive_files import ARCHIVE_SCRUB
from .connection import Connection
from .core import in_chunks
from .summaries import SummaryStore

__all__ = ["DueScrub", "ForgetCounts", "ForgetStore"]


@dataclass
class ForgetCounts:
    """What one forget changed (or, planned, would change)."""

    messages: int = 0
    summaries: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    session_summaries: int = 0
    tool_executions: int = 0
    originals: int = 0
    context_items: int = 0
    #: Large files' paths (relative to the files directory) to delete once committed.
    file_paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DueScrub:
    """A forget's scrub not finished yet: the space its text left still holds it."""

    scrub_id: int
    #: What was forgotten (what was asked, never the text).
    what: str
    #: Large files to delete, relative to the files directory; an archive file that held
    #: forgotten messages, as ``archive:NAME`` (rewritten without them, or deleted).
    files: list[str]
    due_at: str
    #: ``host:pid`` of the process scrubbing it, if one began.
    claimed_by: str | None
    claimed_at: str | None


class ForgetStore(SummaryStore, ArchiveStore):
    """Forgetting messages (see the module doc)."""

    def summaries_reaching(self, message_ids: Sequence[int]) -> list[str]:
        """Every summary (live or retired) whose sources reach one of *message_ids*: the
        leaves made from them, and every summary made from those, up the DAG."""
        with self.read() as conn:
            return self._reaching(conn, message_ids)

    @staticmethod
    def _reaching(conn: Connection, message_ids: Sequence[int]) -> list[str]:
        found: set[str] = set()
        frontier: list[str] = []
        for chunk, marks in in_chunks(list(message_ids)):
            frontier += [
                str(r[0])
                for r in conn.execute(
                    "SELECT DISTINCT summary_id FROM summary_messages"
                    f" WHERE message_id IN ({marks})",
                    chunk,
                ).fetchall()
            ]
        while frontier:
            fresh = [s for s in dict.fromkeys(frontier) if s not in found]
            found.update(fresh)
            frontier = []
            for names, marks in in_chunks(fresh):
                frontier += [
                    str(r[0])
                    for r in conn.execute(
                        "SELECT DISTINCT summary_id FROM summary_parents"
                        f" WHERE parent_summary_id IN ({marks})",
                        names,
                    ).fetchall()
                ]
        return sorted(found)

    def forget_messages(
        self,
        conversation_ids: Sequence[int],
        message_ids: Sequence[int],
        *,
        marker: Callable[[str], tuple[str, int]],
        whole: Sequence[int] = (),
        how: str,
        dry_run: bool = False,
        allow_reimport: bool = False,
    ) -> ForgetCounts:
        """Forget *message_ids* (of *conversation_ids*) in one transaction; every summary
        reaching them gets ``marker(summary_id)`` as its text and token count. The
        conversations in *whole* are forgotten entirely: their title, metadata and session
        summary go too. *how* (what was asked, never the text asked for) goes in the log of
        what was forgotten. With *dry_run*, the counts only, nothing changed. With
        *allow_reimport*, the tombstones keep no transcript entry id and the conversations'
        transcript checkpoints go, so importing the transcript again stores what follows the
        last entry still held (all of it, for a conversation forgotten whole)."""
        ids = sorted(set(message_ids))
        stamp = format_ts(now())
        counts = ForgetCounts(messages=len(ids))
        with self.transaction() as conn:
            for conv in sorted(set(conversation_ids)):
                self._lock_conversation(conn, conv)
            counts.summaries = self._reaching(conn, ids)
            for chunk, marks in in_chunks(ids):
                counts.files += [
                    str(r[0])
                    for r in conn.execute(
                        f"SELECT file_id FROM large_files WHERE message_id IN ({marks})", chunk
                    ).fetchall()
                ]
                counts.file_paths += [
                    str(r[0])
                    for r in conn.execute(
                        f"SELECT storage_path FROM large_files WHERE message_id IN ({marks})",
                        chunk,
                    ).fetchall()
                ]
                counts.tool_executions += int(
                    conn.execute(
                        "SELECT count(*) FROM tool_executions WHERE"
                        f" call_message_id IN ({marks}) OR result_message_id IN ({marks})",
                        [*chunk, *chunk],
                    ).fetchone()[0]
                )
                counts.originals += int(
                    conn.execute(
                        f"SELECT count(*) FROM redacted_originals WHERE message_id IN ({marks})",
                        chunk,
                    ).fetchone()[0]
                )
                counts.context_items += int(
                    conn.execute(
                        "SELECT count(*) FROM context_items WHERE item_type = 'message'"
                        f" AND message_id IN ({marks})",
                        chunk,
                    ).fetchone()[0]
                )
            spans = self._spans(conn, ids)
            firsts = {conv: first for conv, (_, first, _) in spans.items()}
            for conv, first in firsts.items():
                counts.session_summaries += int(
                    conn.execute(
                        "SELECT count(*) FROM session_summaries WHERE conversation_id = ?"
                        " AND (last_message_id IS NULL OR last_message_id >= ?)",
                        (conv, first),
                    ).fetchone()[0]
                )
            if dry_run:
                return counts
            touched = sorted(firsts)
            self._forgetting(conn, touched, ids, counts.summaries)
            # Archived ones: their lines leave their archive files in the scrub.
            counts.file_paths += [ARCHIVE_SCRUB + n for n in self._unarchive(conn, ids)]
            for chunk, marks in in_chunks(ids):
                conn.execute(
                    "UPDATE messages SET content = '', token_count = 0, envelope = NULL,"
                    " metadata = NULL, archived_at = NULL, forgotten_at = ?"
                    f" WHERE message_id IN ({marks})",
                    [stamp, *chunk],
                )
                conn.execute(f"DELETE FROM message_parts WHERE message_id IN ({marks})", chunk)
                conn.execute(f"DELETE FROM redacted_originals WHERE message_id IN ({marks})", chunk)
                conn.execute(
                    "DELETE FROM tool_executions WHERE"
                    f" call_message_id IN ({marks}) OR result_message_id IN ({marks})",
                    [*chunk, *chunk],
                )
                conn.execute(f"DELETE FROM large_files WHERE message_id IN ({marks})", chunk)
                placed = conn.execute(
                    "SELECT conversation_id, message_id FROM context_items"
                    f" WHERE item_type = 'message' AND message_id IN ({marks})",
                    chunk,
                ).fetchall()
                conn.execute(
                    "DELETE FROM context_items WHERE item_type = 'message'"
                    f" AND message_id IN ({marks})",
                    chunk,
                )
                if placed:
                    conn.executemany(
                        "INSERT INTO context_removals (message_id, conversation_id, removed_at)"
                        " VALUES (?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET"
                        " removed_at = excluded.removed_at",
                        [(int(m), int(c), stamp) for c, m in placed],
                    )
            for sid in counts.summaries:
                text, tokens = marker(sid)
                conn.execute(
                    "UPDATE summaries SET content = ?, token_count = ?, model = 'forgotten',"
                    " file_ids = '[]' WHERE summary_id = ?",
                    (text, tokens, sid),
                )
            for conv, first in firsts.items():
                conn.execute(
                    "DELETE FROM session_summaries WHERE conversation_id = ?"
                    " AND (last_message_id IS NULL OR last_message_id >= ?)",
                    (conv, first),
                )
                # The conversation's copy of its latest session summary: the latest left.
                conn.execute(
                    "UPDATE conversations SET summary = (SELECT v.summary FROM session_summaries v"
                    " WHERE v.conversation_id = ? ORDER BY v.version DESC LIMIT 1),"
                    " summary_version = (SELECT max(v.version) FROM session_summaries v"
                    " WHERE v.conversation_id = ?) WHERE conversation_id = ?",
                    (conv, conv, conv),
                )
                self._renumber(conn, conv)
            if allow_reimport:
                for chunk, marks in in_chunks(ids):
                    conn.execute(
                        f"UPDATE messages SET external_id = NULL WHERE message_id IN ({marks})",
                        chunk,
                    )
                for conv in touched:
                    conn.execute(
                        "DELETE FROM transcript_checkpoints WHERE conversation_id = ?", (conv,)
                    )
            for conv in whole:
                conn.execute(
                    "UPDATE conversations SET title = NULL, metadata = NULL, summary = NULL,"
                    " summary_version = NULL, updated_at = ? WHERE conversation_id = ?",
                    (stamp, conv),
                )
            # The contexts that held a forgotten message or a summary now a marker.
            changed = set(touched)
            for held, marks in in_chunks(list(counts.summaries)):
                changed.update(
                    int(r[0])
                    for r in conn.execute(
                        "SELECT DISTINCT conversation_id FROM context_items"
                        f" WHERE summary_id IN ({marks})",
                        held,
                    )
                )
            for conv in sorted(changed):
                self._context_changed(conn, conv)
            self._forgotten(conn, touched, ids, counts.summaries)
            for conv in touched:
                count, first, last = spans[conv]
                conn.execute(
                    "INSERT INTO forgotten (conversation_id, what, messages, first_message_id,"
                    " last_message_id, details, forgotten_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        conv,
                        how,
                        count,
                        first,
                        last,
                        dumps({"summaries": len(counts.summaries), "files": len(counts.files)}),
                        stamp,
                    ),
                )
            if ids:
                # Done with the forget or not at all: the next command finishes a scrub a
                # stopped process left (lossless.forget.finish_scrubs).
                conn.execute(
                    "INSERT INTO scrubs_due (what, files, due_at) VALUES (?, ?, ?)",
                    (how, dumps(counts.file_paths), stamp),
                )
        return counts

    def scrubs_due(self) -> list[DueScrub]:
        """The forgets whose scrub is not finished, oldest first."""
        return [
            DueScrub(int(r[0]), str(r[1]), list(loads(str(r[2]))), str(r[3]), r[4], r[5])
            for r in self.fetchall(
                "SELECT scrub_id, what, files, due_at, claimed_by, claimed_at FROM scrubs_due"
                " ORDER BY scrub_id"
            )
        ]

    def claim_scrubs(self, claim: str, free: Callable[[DueScrub], bool]) -> list[DueScrub]:
        """Mark the due scrubs no one is finishing (unclaimed, or *free* says their claim is
        over) as being finished by *claim*; the ones claimed. A row another process claimed
        between the read and the write is left to it."""
        taken: list[DueScrub] = []
        stamp = format_ts(now())
        with self.transaction() as conn:
            for scrub in self.scrubs_due():
                if scrub.claimed_by not in (None, claim) and not free(scrub):
                    continue
                cur = conn.execute(
                    "UPDATE scrubs_due SET claimed_by = ?, claimed_at = ? WHERE scrub_id = ?"
                    " AND coalesce(claimed_by, '') = ?",
                    (claim, stamp, scrub.scrub_id, scrub.claimed_by or ""),
                )
                if cur.rowcount:
                    taken.append(scrub)
        return taken

    def scrubs_done(self, scrub_ids: Sequence[int]) -> None:
        """Forget the scrubs that are finished."""
        with self.transaction() as conn:
            for chunk, marks in in_chunks(list(scrub_ids)):
                conn.execute(f"DELETE FROM scrubs_due WHERE scrub_id IN ({marks})", chunk)

    @staticmethod
    def _spans(conn: Connection, ids: Sequence[int]) -> dict[int, tuple[int, int, int]]:
        """Each touched conversation's forgotten messages: how many, the first and last id."""
        spans: dict[int, tuple[int, int, int]] = {}
        for chunk, marks in in_chunks(list(ids)):
            for conv, count, first, last in conn.execute(
                "SELECT conversation_id, count(*), min(message_id), max(message_id)"
                f" FROM messages WHERE message_id IN ({marks}) GROUP BY conversation_id",
                chunk,
            ).fetchall():
                n, lo, hi = spans.get(int(conv), (0, int(first), int(last)))
                spans[int(conv)] = (n + int(count), min(lo, int(first)), max(hi, int(last)))
        return spans

    def message_ids_of(self, conversation_ids: Sequence[int]) -> list[int]:
        """Every message id of these conversations, in order."""
        ids: list[int] = []
        for chunk, marks in in_chunks(list(conversation_ids)):
            ids += [
                int(r[0])
                for r in self.fetchall(
                    f"SELECT message_id FROM messages WHERE conversation_id IN ({marks})"
                    " ORDER BY message_id",
                    chunk,
                )
            ]
        return sorted(ids)

    def conversations_of(self, message_ids: Sequence[int]) -> list[int]:
        """The conversations these messages belong to."""
        convs: set[int] = set()
        for chunk, marks in in_chunks(list(message_ids)):
            convs.update(
                int(r[0])
                for r in self.fetchall(
                    f"SELECT DISTINCT conversation_id FROM messages WHERE message_id IN ({marks})",
                    chunk,
                )
            )
        return sorted(convs)

    def forgotten_log(self, conversation_id: int | None = None) -> list[dict[str, object]]:
        """What was forgotten and when (never the text): newest first."""
        where = " WHERE conversation_id = ?" if conversation_id is not None else ""
        rows = self.fetchall(
            "SELECT conversation_id, what, messages, first_message_id, last_message_id,"
            f" forgotten_at FROM forgotten{where} ORDER BY forget_id DESC",
            [conversation_id] if conversation_id is not None else [],
        )
        return [
            {
                "conversation_id": int(r[0]),
                "what": str(r[1]),
                "messages": int(r[2]),
                "first": f"msg#{r[3]}",
                "last": f"msg#{r[4]}",
                "forgotten_at": str(r[5]),
            }
            for r in rows
        ]

    def not_forgotten(self, message_ids: Sequence[int]) -> list[int]:
        """Those of *message_ids* that are not tombstones, in order."""
        kept: set[int] = set()
        for chunk, marks in in_chunks(list(message_ids)):
            kept.update(
                int(r[0])
                for r in self.fetchall(
                    f"SELECT message_id FROM messages WHERE message_id IN ({marks})"
                    " AND forgotten_at IS NULL",
                    chunk,
                )
            )
        return [m for m in message_ids if m in kept]
