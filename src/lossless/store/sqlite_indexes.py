"""SQLite's full-text indexes kept by the store's writes: the word and trigram entries of
each batch, what a forget takes out and puts back, the catch-up of what large batches left,
and the checks and rebuild doctor uses. (A message's surroundings are counted when a search
ranks, from the own-words index: :mod:`.surroundings`.)"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence

from ..errors import StoreError
from .connection import Connection
from .core import StoreCore, in_chunks
from .sqlite_files import interrupted, scrub_failed

__all__ = ["CATCH_UP_AT", "FTS_TABLES", "SQLiteIndexes"]

#: The full-text indexes (FTS5 tables) a store keeps.
FTS_TABLES = (
    "messages_fts",
    "messages_trigram",
    "summaries_fts",
    "summaries_trigram",
)

#: Small batches leave their trigram entries until this many messages wait for them (a
#: host's turn is two messages: one batch of entries every eight turns), so the index gets
#: one new segment for several turns.
CATCH_UP_AT = 16


class _SnapshotMoved(Exception):
    """A check's read snapshot fell behind a commit: run it again."""


class SQLiteIndexes(StoreCore):
    """The full-text side of :class:`~.sqlite.SQLiteStore`'s writes and checks."""

    def _conn(self) -> sqlite3.Connection:
        raise NotImplementedError  # the store's connection of this thread

    def _index_messages(
        self, conn: Connection, first_id: int, last_id: int, *, trigram: bool
    ) -> None:
        conn.execute(
            "INSERT INTO messages_fts (rowid, content) SELECT message_id, content FROM messages"
            " WHERE message_id BETWEEN ? AND ?",
            (first_id, last_id),
        )
        # Large batches leave the trigram entries to catch_up_indexes: they cost more than
        # everything else an import does.
        if not trigram:
            return
        (upto,) = conn.execute(
            "SELECT upto FROM index_state WHERE name = 'messages_trigram'"
        ).fetchone()
        if first_id - 1 - upto > CATCH_UP_AT:
            # A large batch's rows wait for catch_up_indexes (which skips the entries made):
            # this batch's own are made now, and the watermark stays where it is.
            self._index_trigrams(conn, first_id, last_id, guarded=False)
        elif last_id - upto >= CATCH_UP_AT:
            # Small batches (a host's turns) leave theirs until CATCH_UP_AT messages wait,
            # then one batch makes them all: one new segment in each index for several
            # turns, not one a turn. Until then a search reads those rows itself.
            # Ids are taken in order under the write lock: nothing below last_id waits now.
            self._catch_up_to(conn, upto, last_id)

    def _catch_up_to(self, conn: Connection, upto: int, top: int) -> int:
        """The entries of the messages above the mark *upto* up to *top* that are not made
        yet, and the mark moved to *top*; the messages given a trigram entry."""
        done = self._index_trigrams(conn, upto + 1, top, guarded=True)
        conn.execute("UPDATE index_state SET upto = ? WHERE name = 'messages_trigram'", (top,))
        return done

    def _index_trigrams(
        self, conn: Connection, first_id: int, last_id: int, *, guarded: bool
    ) -> int:
        """The trigram entries of the messages *first_id*..*last_id*; when *guarded*, only
        those not made yet (some rows of a range that waited for the catch-up may have had
        theirs made by a forget's putting back). The messages given an entry."""
        made = (
            " AND NOT EXISTS (SELECT 1 FROM messages_trigram_docsize d WHERE d.id = m.message_id)"
            if guarded
            else ""
        )
        cur = conn.execute(
            "INSERT INTO messages_trigram (rowid, content) SELECT message_id, content"
            f" FROM messages m WHERE m.message_id BETWEEN ? AND ?{made}",
            (first_id, last_id),
        )
        return max(cur.rowcount, 0)

    def _forgetting(
        self,
        conn: Connection,
        conversation_ids: Sequence[int],
        message_ids: Sequence[int],
        summary_ids: Sequence[str],
    ) -> None:
        # Secure delete: the pages the old text leaves are zeroed, not just freed.
        conn.execute("PRAGMA secure_delete = ON")
        for chunk, marks in in_chunks(list(message_ids)):
            conn.execute(
                "INSERT INTO messages_fts (messages_fts, rowid, content) SELECT 'delete',"
                f" message_id, content FROM messages WHERE message_id IN ({marks})",
                chunk,
            )
            conn.execute(
                "INSERT INTO messages_trigram (messages_trigram, rowid, content)"
                " SELECT 'delete', m.message_id, m.content FROM messages m"
                f" WHERE m.message_id IN ({marks}) AND EXISTS"
                " (SELECT 1 FROM messages_trigram_docsize d WHERE d.id = m.message_id)",
                chunk,
            )
        for names, marks in in_chunks(list(summary_ids)):
            for table in ("summaries_fts", "summaries_trigram"):
                conn.execute(
                    f"INSERT INTO {table} ({table}, rowid, content) SELECT 'delete', rowid,"
                    f" content FROM summaries WHERE summary_id IN ({marks})",
                    names,
                )

    def _forgotten(
        self,
        conn: Connection,
        conversation_ids: Sequence[int],
        message_ids: Sequence[int],
        summary_ids: Sequence[str],
    ) -> None:
        super()._forgotten(conn, conversation_ids, message_ids, summary_ids)
        (upto,) = conn.execute(
            "SELECT upto FROM index_state WHERE name = 'messages_trigram'"
        ).fetchone()
        for chunk, marks in in_chunks(list(message_ids)):
            conn.execute(
                "INSERT INTO messages_fts (rowid, content) SELECT message_id, content"
                f" FROM messages WHERE message_id IN ({marks})",
                chunk,
            )
            conn.execute(
                "INSERT INTO messages_trigram (rowid, content) SELECT m.message_id, m.content"
                f" FROM messages m WHERE m.message_id IN ({marks}) AND m.message_id <= ?"
                " AND NOT EXISTS (SELECT 1 FROM messages_trigram_docsize d"
                " WHERE d.id = m.message_id)",
                [*chunk, upto],
            )
        self._index_summaries(conn, summary_ids)

    def purge_freed(self) -> list[str]:
        """Merge each full-text index into one segment (an index keeps a deleted entry's
        words in its older segments until a merge), then rewrite the file (VACUUM: no free
        page keeps old text) and empty the write-ahead log (it holds old page images)."""
        conn = self._conn()
        try:
            for table in FTS_TABLES:
                with self.transaction() as tx:
                    tx.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
            # VACUUM wrote the whole file again through the log: empty it, waiting out the
            # store's own merge thread (or a reader) that may hold it for a moment.
            for _ in range(100):
                busy, _frames, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    break
                time.sleep(0.05)
        except (StoreError, sqlite3.Error) as exc:
            if stop := interrupted(exc):
                raise stop from exc
            raise scrub_failed(self.path, exc) from exc
        return [
            f"merged the full-text indexes ({', '.join(FTS_TABLES)})",
            f"rewrote {self.path} (VACUUM) with secure delete on",
            "emptied the write-ahead log (checkpoint, TRUNCATE)",
        ]

    def pending_index_rows(self) -> int:
        """Messages not yet in the trigram index (left by large batches, or by the last few
        small ones until :data:`CATCH_UP_AT` wait or the writes pause)."""
        (upto,) = self.fetchall("SELECT upto FROM index_state WHERE name = 'messages_trigram'")[0]
        return int(
            self.fetchall(
                "SELECT count(*) FROM messages m WHERE m.message_id > ? AND NOT EXISTS"
                " (SELECT 1 FROM messages_trigram_docsize d WHERE d.id = m.message_id)",
                (upto,),
            )[0][0]
        )

    def catch_up_indexes(
        self,
        batch: int = 50_000,
        progress: Callable[[int, int], None] | None = None,
        *,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Index what large batches (and the last small ones) left out of the trigram index;
        returns rows indexed.

        Runs in transactions of *batch* rows so writers are not held up for long. Imports
        call it when they finish (:meth:`~lossless.engine.Engine.finish_indexes`); a search
        never does (it reads the rows above the mark itself). When nothing is behind it only
        reads: it never takes the write lock for nothing. *stop* is asked between
        transactions.
        """
        behind = self.fetchall(
            "SELECT upto, (SELECT coalesce(max(message_id), 0) FROM messages) - upto"
            " FROM index_state WHERE name = 'messages_trigram'"
            " AND upto < (SELECT coalesce(max(message_id), 0) FROM messages)"
        )
        if not behind:
            return 0
        ((first, rows),) = behind
        done = 0
        while not (stop is not None and stop()):
            with self.transaction() as conn:
                (upto,) = conn.execute(
                    "SELECT upto FROM index_state WHERE name = 'messages_trigram'"
                ).fetchone()
                top = conn.execute(
                    "SELECT max(message_id) FROM (SELECT message_id FROM messages"
                    " WHERE message_id > ? ORDER BY message_id LIMIT ?)",
                    (upto, batch),
                ).fetchone()[0]
                if top is None:
                    return done
                done += self._catch_up_to(conn, upto, top)
            if progress is not None:
                progress(min(max(top - first, 0), rows), rows)
        return done

    def _index_summaries(self, conn: Connection, summary_ids: Sequence[str]) -> None:
        ids = list(summary_ids)
        for chunk, marks in in_chunks(ids):
            for table in ("summaries_fts", "summaries_trigram"):
                conn.execute(
                    f"INSERT INTO {table} (rowid, content) SELECT rowid, content FROM summaries"
                    f" WHERE summary_id IN ({marks})",
                    chunk,
                )

    def fts_unchecked(self) -> str | None:
        """FTS5 compares an index with its text only through a write statement
        (``'integrity-check'``), which a read-only database file refuses: say so rather than
        report the refusal as damage."""
        if self.path is None or str(self.path) == ":memory:":
            return None
        try:
            os.close(os.open(self.path, os.O_RDWR))
        except OSError as exc:
            return (
                f"{self.path} is read-only here ({exc.strerror}): the full-text indexes were "
                "checked for missing and orphaned rows but not compared with their text; run "
                "doctor as a user who can write the file, or on a copy made with `lossless backup`"
            )
        return None

    def fts_problems(self) -> list[tuple[str, str, str]]:
        """Full-text rows that do not match their sources: (index, id, problem)."""
        compare = self.fts_unchecked() is None
        checks = [
            ("messages_fts", "messages", "message_id", "msg#"),
            ("messages_trigram", "messages", "message_id", "msg#"),
            ("summaries_fts", "summaries", "rowid", ""),
            ("summaries_trigram", "summaries", "rowid", ""),
        ]
        # FTS5's integrity check is an INSERT: it takes the write lock, which a read
        # transaction cannot once another commit (the store's index merging, say) landed
        # after its snapshot; then the whole check runs again on a new one.
        for _ in range(20):
            try:
                return self._fts_problems(checks, compare)
            except _SnapshotMoved:
                time.sleep(0.01)
        return self._fts_problems(checks, compare)

    def _fts_problems(
        self, checks: list[tuple[str, str, str, str]], compare: bool
    ) -> list[tuple[str, str, str]]:
        problems: list[tuple[str, str, str]] = []
        with self.read() as conn:
            (upto,) = conn.execute(
                "SELECT upto FROM index_state WHERE name = 'messages_trigram'"
            ).fetchone()
            for fts, source, key, prefix in checks:
                label = "summary_id" if source == "summaries" else key
                # Rows above the watermark are waiting for catch_up_indexes.
                deferred = fts == "messages_trigram"
                limit = upto if deferred else None
                bound = "" if limit is None else f" AND s.{key} <= {int(limit)}"
                for (ident,) in conn.execute(
                    f"SELECT s.{label} FROM {source} s LEFT JOIN {fts}_docsize d ON d.id = s.{key}"
                    f" WHERE d.id IS NULL{bound} LIMIT 1000"
                ):
                    problems.append((fts, f"{prefix}{ident}", "not indexed"))
                for (ident,) in conn.execute(
                    f"SELECT d.id FROM {fts}_docsize d LEFT JOIN {source} s ON s.{key} = d.id"
                    f" WHERE s.{key} IS NULL LIMIT 1000"
                ):
                    problems.append((fts, f"rowid {ident}", "indexed row has no source"))
                # rank 1 also compares the index with the source text; while large batches
                # wait for catch_up_indexes the trigram index is behind by design, so only
                # its internal consistency is checked then.
                pending = (
                    deferred
                    and conn.execute(
                        "SELECT 1 FROM messages WHERE message_id > ? LIMIT 1", (upto,)
                    ).fetchone()
                )
                rank = 0 if pending else 1
                if not compare:
                    continue
                try:
                    conn.execute(
                        f"INSERT INTO {fts} ({fts}, rank) VALUES ('integrity-check', {rank})"
                    )
                except sqlite3.OperationalError as exc:
                    if "locked" in str(exc) or "busy" in str(exc):
                        raise _SnapshotMoved from exc
                    problems.append((fts, "-", f"index does not match its source text ({exc})"))
                except sqlite3.DatabaseError as exc:
                    problems.append((fts, "-", f"index does not match its source text ({exc})"))
        return problems

    def rebuild_fts(self) -> None:
        """Rebuild every full-text index from its source table (the fix doctor suggests)."""
        with self.transaction() as conn:
            for fts in (
                "messages_fts",
                "messages_trigram",
                "summaries_fts",
                "summaries_trigram",
            ):
                conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('rebuild')")
            conn.execute(
                "UPDATE index_state SET upto = (SELECT coalesce(max(message_id), 0) FROM messages)"
                " WHERE name = 'messages_trigram'"
            )

    def foreign_key_problems(self) -> list[tuple[str, int, str, int]]:
        """Rows whose foreign keys point nowhere: (table, rowid, parent table, fk index)."""
        with self.read() as conn:
            return [(r[0], r[1], r[2], r[3]) for r in conn.execute("PRAGMA foreign_key_check")]
