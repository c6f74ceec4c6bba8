"""Side records: session summaries, large files, transcript checkpoints, the word index counts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..codec import dumps, loads
from ..errors import ConflictError, NotFoundError
from ..model import (
    Checkpoint,
    LargeFile,
    SessionSummary,
    check_file_id,
)
from ..timestamps import format_ts, now
from .core import (
    TERM_CACHE_SECONDS,
    StoreCore,
    in_chunks,
)

__all__ = ["RecordStore"]


class RecordStore(StoreCore):
    """Session summary versions, large files, checkpoints, term counts."""

    _SESSION_COLS = (
        "session_summary_id, conversation_id, version, summary, topics, decisions,"
        " code_references, key_points, first_message_id, last_message_id, message_count,"
        " messages_processed, is_incremental, model, created_at"
    )

    @staticmethod
    def _session_summary(row: Sequence[Any]) -> SessionSummary:
        return SessionSummary(
            session_summary_id=row[0],
            conversation_id=row[1],
            version=row[2],
            summary=row[3],
            topics=tuple(loads(row[4]) or ()),
            decisions=tuple(loads(row[5]) or ()),
            code_references=tuple(loads(row[6]) or ()),
            key_points=tuple(loads(row[7]) or ()),
            first_message_id=row[8],
            last_message_id=row[9],
            message_count=row[10],
            messages_processed=row[11],
            is_incremental=bool(row[12]),
            model=row[13],
            created_at=row[14],
        )

    def insert_session_summary(self, summary: SessionSummary) -> None:
        """Store the next version of a conversation's session summary and make it the
        conversation's latest, in one transaction.

        ``summary.version`` must be one more than the latest stored version; if another writer
        got there first, nothing is written and :class:`ConflictError` is raised.
        """
        conv = summary.conversation_id
        with self.transaction() as conn:
            self._lock_conversation(conn, conv)
            latest = conn.execute(
                "SELECT coalesce(max(version), 0) FROM session_summaries WHERE conversation_id = ?",
                (conv,),
            ).fetchone()[0]
            if summary.version != latest + 1:
                raise ConflictError(
                    f"conversation {conv} has session summary version {latest} already (another"
                    f" summary was written meanwhile); summarize it again"
                )
            conn.execute(
                f"INSERT INTO session_summaries ({self._SESSION_COLS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    summary.session_summary_id,
                    conv,
                    summary.version,
                    summary.summary,
                    dumps(list(summary.topics)),
                    dumps(list(summary.decisions)),
                    dumps(list(summary.code_references)),
                    dumps(list(summary.key_points)),
                    summary.first_message_id,
                    summary.last_message_id,
                    summary.message_count,
                    summary.messages_processed,
                    1 if summary.is_incremental else 0,
                    summary.model,
                    summary.created_at,
                ),
            )
            conn.execute(
                "UPDATE conversations SET summary = ?, summary_version = ?"
                " WHERE conversation_id = ?",
                (summary.summary, summary.version, conv),
            )

    def latest_session_summary(self, conversation_id: int) -> SessionSummary | None:
        """The newest version of a conversation's session summary, if it has one."""
        rows = self.fetchall(
            f"SELECT {self._SESSION_COLS} FROM session_summaries WHERE conversation_id = ?"
            " ORDER BY version DESC LIMIT 1",
            (conversation_id,),
        )
        return self._session_summary(rows[0]) if rows else None

    def session_summaries(self, conversation_id: int | None = None) -> list[SessionSummary]:
        """Every version of a conversation's session summary (of all conversations without
        one), oldest first."""
        where = " WHERE conversation_id = ?" if conversation_id is not None else ""
        rows = self.fetchall(
            f"SELECT {self._SESSION_COLS} FROM session_summaries{where}"
            " ORDER BY conversation_id, version",
            () if conversation_id is None else (conversation_id,),
        )
        return [self._session_summary(r) for r in rows]

    _FILE_COLS = (
        "file_id, conversation_id, file_name, mime_type, byte_size, token_count, sha256,"
        " storage_path, exploration_summary, message_id, created_at"
    )

    def get_large_file(self, file_id: str) -> LargeFile:
        """The record of a large file; :class:`NotFoundError` if there is none."""
        rows = self.fetchall(
            f"SELECT {self._FILE_COLS} FROM large_files WHERE file_id = ?",
            (check_file_id(file_id),),
        )
        if not rows:
            raise NotFoundError(f"no large file {file_id}; list them with `lossless files`")
        return LargeFile(*rows[0])

    def large_files(
        self, conversation_id: int | None = None, message_ids: Sequence[int] | None = None
    ) -> list[LargeFile]:
        """Large files of a conversation, or of some messages, oldest first."""
        if message_ids is not None:
            ids = list(message_ids)
            out: list[LargeFile] = []
            for chunk, marks in in_chunks(ids):
                out.extend(
                    LargeFile(*r)
                    for r in self.fetchall(
                        f"SELECT {self._FILE_COLS} FROM large_files"
                        f" WHERE message_id IN ({marks}) ORDER BY created_at, file_id",
                        chunk,
                    )
                )
            return out
        if conversation_id is None:
            rows = self.fetchall(f"SELECT {self._FILE_COLS} FROM large_files ORDER BY created_at")
        else:
            rows = self.fetchall(
                f"SELECT {self._FILE_COLS} FROM large_files WHERE conversation_id = ?"
                " ORDER BY created_at",
                (conversation_id,),
            )
        return [LargeFile(*r) for r in rows]

    def get_checkpoint(self, conversation_id: int) -> Checkpoint | None:
        """The reconciliation checkpoint of a conversation, if it has one."""
        rows = self.fetchall(
            'SELECT conversation_id, path, format, header_id, head_hash, size, "offset", line_no,'
            " last_line_start, last_line_hash, last_entry_id, problems FROM transcript_checkpoints"
            " WHERE conversation_id = ?",
            (conversation_id,),
        )
        if not rows:
            return None
        (cid, path, fmt, header, head, size, offset, line_no, start, digest, last, bad) = rows[0]
        return Checkpoint(
            cid,
            path,
            fmt,
            header,
            head,
            size,
            offset,
            line_no,
            start,
            digest,
            last,
            tuple((int(n), str(k), str(r)) for n, k, r in loads(bad or "[]")),
        )

    def put_checkpoint(self, cp: Checkpoint) -> None:
        """Record a checkpoint (call inside the transaction that stored what it covers)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO transcript_checkpoints (conversation_id, path, format, header_id,"
                ' head_hash, size, "offset", line_no, last_line_start, last_line_hash,'
                " last_entry_id, problems, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (conversation_id) DO UPDATE SET path = excluded.path,"
                " format = excluded.format, header_id = excluded.header_id,"
                " head_hash = excluded.head_hash, size = excluded.size,"
                ' "offset" = excluded."offset",'
                " line_no = excluded.line_no, last_line_start = excluded.last_line_start,"
                " last_line_hash = excluded.last_line_hash,"
                " last_entry_id = excluded.last_entry_id, problems = excluded.problems,"
                " updated_at = excluded.updated_at",
                (
                    cp.conversation_id,
                    cp.path,
                    cp.format,
                    cp.header_id,
                    cp.head_hash,
                    cp.size,
                    cp.offset,
                    cp.line_no,
                    cp.last_line_start,
                    cp.last_line_hash,
                    cp.last_entry_id,
                    dumps([list(p) for p in cp.problems]),
                    format_ts(now()),
                ),
            )

    def term_documents(self, table: str, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """How many rows of *table*'s word index hold each term, and how many rows it has:
        cached for a few minutes (they move slowly, and only steer the search).
        ``messages_ctx`` is the messages' index with their surroundings (SQLite's
        ``messages_ctx_fts``), where a word counts in the rows beside where it was said too."""
        if table not in ("messages", "summaries", "messages_ctx"):
            raise ValueError(f"no full-text index for {table!r}")
        cache = self._term_cache
        clock = time.monotonic()
        out: dict[str, int] = {}
        missing = []
        for term in terms:
            hit = cache.get((table, term))
            if hit is not None and clock - hit[0] < TERM_CACHE_SECONDS:
                out[term] = hit[1]
            else:
                missing.append(term)
        if missing:
            for term, count in self._term_counts(table, missing).items():
                out[term] = count
                cache[(table, term)] = (clock, count)
        total = cache.get((table, ""))
        if total is None or clock - total[0] >= TERM_CACHE_SECONDS:
            source, key = (
                ("summaries", "rowid") if table == "summaries" else ("messages", "message_id")
            )
            rows = int(self.fetchall(f"SELECT coalesce(max({key}), 0) FROM {source}")[0][0])
            total = cache[(table, "")] = (clock, rows)
        return out, total[1]
