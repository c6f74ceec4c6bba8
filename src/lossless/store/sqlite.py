"""The embedded SQLite store (the default back end).

One connection per thread (WAL lets readers run beside the writer), ``BEGIN IMMEDIATE`` for
every write so two processes never interleave a batch, nested transactions as savepoints,
foreign keys on and a busy timeout. Full-text rows are filled in bulk after each batch.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConflictError, NotFoundError, StoreError
from ..ingest.files import LargeFile, check_file_id
from ..ingest.shapes import NormalizedMessage, dumps, loads
from ..model import (
    ContextItem,
    Conversation,
    ConversationStats,
    StoredMessage,
    StoredPart,
    Summary,
)
from ..timestamps import format_ts, now
from .migrations import MIGRATIONS

__all__ = ["Checkpoint", "SQLiteStore"]

BUSY_TIMEOUT_MS = 30_000
#: Batches at least this large leave the trigram index to :meth:`SQLiteStore.catch_up_indexes`
#: (it costs more than everything else on ingest); smaller ones index it inline.
DEFER_TRIGRAM_AT = 64
_IN_CHUNK = 500  # host parameters per IN (...) list


@dataclass(frozen=True)
class Checkpoint:
    """How far a conversation's transcript has been reconciled."""

    conversation_id: int
    path: str
    format: str
    header_id: str | None
    head_hash: str
    size: int
    offset: int
    line_no: int
    last_line_start: int
    last_line_hash: str
    last_entry_id: str | None


def _loads(text: str | None) -> Any:
    return None if text is None else loads(text)


class SQLiteStore:
    """Messages, parts, summaries, context items and indexes in one SQLite file."""

    backend = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        if str(self.path) != ":memory:":
            _create_private(self.path)
        self.migrate()

    # --- connections and transactions ------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"the store {self.path} is closed; open it again")
            try:
                conn = sqlite3.connect(
                    str(self.path),
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                )
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute("PRAGMA cache_size = -65536")  # 64 MiB: batches touch many pages
                # Checkpoint every 32 MiB of WAL rather than 4: fewer stalls inside bulk writes.
                conn.execute("PRAGMA wal_autocheckpoint = 8192")
            except sqlite3.Error as exc:
                raise StoreError(
                    f"cannot open the database {self.path}: {exc}; check the path and its "
                    f"permissions"
                ) from exc
            self._local.conn = conn
            self._local.depth = 0
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        """Close every connection this store opened (in any thread)."""
        with self._lock:
            self._closed = True
            for conn in self._connections:
                with contextlib.suppress(sqlite3.ProgrammingError):  # closed in its thread
                    conn.close()
            self._connections.clear()
        self._local = threading.local()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``); nested calls become savepoints."""
        conn = self._conn()
        depth: int = self._local.depth
        if depth == 0:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"cannot start a write on {self.path}: {exc}") from exc
        else:
            conn.execute(f"SAVEPOINT sp{depth}")
        self._local.depth = depth + 1
        try:
            yield conn
        except BaseException:
            self._local.depth = depth
            if depth == 0:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            else:
                conn.execute(f"ROLLBACK TO sp{depth}")
                conn.execute(f"RELEASE sp{depth}")
            raise
        self._local.depth = depth
        if depth == 0:
            try:
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"cannot commit to {self.path}: {exc}") from exc
        else:
            conn.execute(f"RELEASE sp{depth}")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several reads (joins an open transaction)."""
        conn = self._conn()
        if self._local.depth > 0:
            yield conn
            return
        conn.execute("BEGIN")
        self._local.depth = 1
        try:
            yield conn
        finally:
            self._local.depth = 0
            if conn.in_transaction:
                conn.execute("COMMIT")

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read query (used by the integrity checks and reports)."""
        with self.read() as conn:
            return list(conn.execute(sql, params).fetchall())

    # --- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply pending migrations, each in its own transaction; return the names applied."""
        conn = self._conn()
        conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations"
            " (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        applied: list[str] = []
        for name, fn in MIGRATIONS:
            with self.transaction():
                row = conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone()
                if row is not None:
                    continue
                fn(conn)
                conn.execute(
                    "INSERT INTO migrations (name, applied_at) VALUES (?, ?)",
                    (name, format_ts(now())),
                )
                applied.append(name)
        return applied

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this database, in order."""
        return [r[0] for r in self.fetchall("SELECT name FROM migrations ORDER BY name")]

    # --- conversations ---------------------------------------------------------------------

    _CONV_COLS = (
        "conversation_id, session_id, session_key, title, status, created_at, updated_at, metadata"
    )

    @staticmethod
    def _conversation(row: Sequence[Any]) -> Conversation:
        return Conversation(
            conversation_id=row[0],
            session_id=row[1],
            session_key=row[2],
            title=row[3],
            status=row[4],
            created_at=row[5],
            updated_at=row[6],
            metadata=_loads(row[7]) or {},
        )

    def get_or_create_conversation(
        self,
        session_id: str,
        *,
        session_key: str | None = None,
        title: str | None = None,
    ) -> Conversation:
        """The conversation for *session_id*, created on first use."""
        with self.transaction() as conn:
            row = conn.execute(
                f"SELECT {self._CONV_COLS} FROM conversations WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is not None:
                return self._conversation(row)
            stamp = format_ts(now())
            cur = conn.execute(
                "INSERT INTO conversations (session_id, session_key, title, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (session_id, session_key, title, stamp, stamp),
            )
            return Conversation(
                conversation_id=int(cur.lastrowid or 0),
                session_id=session_id,
                session_key=session_key,
                title=title,
                status="active",
                created_at=stamp,
                updated_at=stamp,
            )

    def get_conversation(self, conversation_id: int) -> Conversation:
        """The conversation with this id; :class:`NotFoundError` if there is none."""
        rows = self.fetchall(
            f"SELECT {self._CONV_COLS} FROM conversations WHERE conversation_id = ?",
            (conversation_id,),
        )
        if not rows:
            raise NotFoundError(
                f"no conversation with id {conversation_id};"
                " list them with `lossless conversations`"
            )
        return self._conversation(rows[0])

    def find_conversation(self, session_id: str) -> Conversation | None:
        """The conversation whose external session id is *session_id*, if any."""
        rows = self.fetchall(
            f"SELECT {self._CONV_COLS} FROM conversations WHERE session_id = ?", (session_id,)
        )
        return self._conversation(rows[0]) if rows else None

    def family_ids(self, conversation: Conversation) -> list[int]:
        """The conversation and the others sharing its session_key (its family)."""
        if conversation.session_key is None:
            return [conversation.conversation_id]
        rows = self.fetchall(
            "SELECT conversation_id FROM conversations WHERE session_key = ?"
            " OR conversation_id = ? ORDER BY conversation_id",
            (conversation.session_key, conversation.conversation_id),
        )
        return [int(r[0]) for r in rows]

    def update_conversation(
        self,
        conversation_id: int,
        *,
        title: str | None = None,
        session_key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Set the title, family key or metadata (merged into what is there) of a conversation."""
        with self.transaction() as conn:
            current = self.get_conversation(conversation_id)
            merged = {**current.metadata, **metadata} if metadata else current.metadata
            conn.execute(
                "UPDATE conversations SET title = coalesce(?, title),"
                " session_key = coalesce(?, session_key), metadata = ?, updated_at = ?"
                " WHERE conversation_id = ?",
                (
                    title,
                    session_key,
                    dumps(merged) if merged else None,
                    format_ts(now()),
                    conversation_id,
                ),
            )

    def list_conversations(self) -> list[ConversationStats]:
        """Every conversation with its message, summary, token and context counts."""
        with self.read() as conn:
            convs = [
                self._conversation(r)
                for r in conn.execute(
                    f"SELECT {self._CONV_COLS} FROM conversations ORDER BY conversation_id"
                )
            ]
            msgs = {
                r[0]: (r[1], r[2] or 0, r[3])
                for r in conn.execute(
                    "SELECT conversation_id, count(*), sum(token_count), max(created_at)"
                    " FROM messages GROUP BY conversation_id"
                )
            }
            sums: dict[int, dict[int, int]] = {}
            for cid, depth, n in conn.execute(
                "SELECT conversation_id, depth, count(*) FROM summaries"
                " GROUP BY conversation_id, depth"
            ):
                sums.setdefault(cid, {})[depth] = n
            ctx = {
                r[0]: (r[1], r[2] or 0)
                for r in conn.execute(
                    "SELECT ci.conversation_id, count(*),"
                    " sum(coalesce(m.token_count, s.token_count))"
                    " FROM context_items ci"
                    " LEFT JOIN messages m ON m.message_id = ci.message_id"
                    " LEFT JOIN summaries s ON s.summary_id = ci.summary_id"
                    " GROUP BY ci.conversation_id"
                )
            }
        out = []
        for conv in convs:
            count, tokens, last = msgs.get(conv.conversation_id, (0, 0, None))
            by_depth = sums.get(conv.conversation_id, {})
            items, ctx_tokens = ctx.get(conv.conversation_id, (0, 0))
            out.append(
                ConversationStats(
                    conversation=conv,
                    message_count=count,
                    message_tokens=tokens,
                    summary_count=sum(by_depth.values()),
                    summaries_by_depth=dict(sorted(by_depth.items())),
                    context_items=items,
                    context_tokens=ctx_tokens,
                    last_message_at=last,
                )
            )
        return out

    # --- messages --------------------------------------------------------------------------

    def existing_external_ids(self, conversation_id: int, ids: Iterable[str]) -> set[str]:
        """The subset of *ids* already stored in the conversation."""
        wanted = list(dict.fromkeys(ids))
        found: set[str] = set()
        with self.read() as conn:
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                found.update(
                    r[0]
                    for r in conn.execute(
                        f"SELECT external_id FROM messages WHERE conversation_id = ?"
                        f" AND external_id IN ({marks})",
                        (conversation_id, *chunk),
                    )
                )
        return found

    def append_messages(
        self, conversation: Conversation, messages: Sequence[NormalizedMessage]
    ) -> tuple[list[int], int]:
        """Store *messages* at the end of the conversation and of its context, in one transaction.

        Messages whose external id is already stored (or repeated within the batch) are
        skipped. Returns the new message ids and the number skipped.
        """
        conv_id = conversation.conversation_id
        with self.transaction() as conn:
            ext_ids = [m.external_id for m in messages if m.external_id is not None]
            seen = self.existing_external_ids(conv_id, ext_ids) if ext_ids else set()
            fresh: list[NormalizedMessage] = []
            for m in messages:
                if m.external_id is not None:
                    if m.external_id in seen:
                        continue
                    seen.add(m.external_id)
                fresh.append(m)
            skipped = len(messages) - len(fresh)
            if not fresh:
                return [], skipped
            # Ids are allocated here, under the write lock, so a batch can be inserted with
            # executemany and its index rows filled with one statement.
            first_id, seq0, ord0 = conn.execute(
                "SELECT (SELECT coalesce(max(message_id), 0) + 1 FROM messages),"
                " (SELECT coalesce(max(seq), 0) FROM messages WHERE conversation_id = ?),"
                " (SELECT coalesce(max(ordinal), -1) FROM context_items"
                "  WHERE conversation_id = ?)",
                (conv_id, conv_id),
            ).fetchone()
            has_parts = any(m.parts for m in fresh)
            part_id = (
                conn.execute("SELECT coalesce(max(part_id), 0) FROM message_parts").fetchone()[0]
                if has_parts
                else 0
            )
            stamp = format_ts(now())
            msg_rows = []
            part_rows = []
            ctx_rows = []
            session = conversation.session_id
            for i, m in enumerate(fresh):
                mid = first_id + i
                msg_rows.append(
                    (
                        mid,
                        conv_id,
                        seq0 + 1 + i,
                        m.role,
                        m.content,
                        m.token_count,
                        format_ts(m.created_at) if m.created_at is not None else stamp,
                        m.external_id,
                        m.source_format,
                        None if m.envelope is None else dumps(m.envelope),
                        dumps(m.metadata) if m.metadata else None,
                    )
                )
                for j, p in enumerate(m.parts):
                    part_id += 1
                    part_rows.append(
                        (
                            part_id,
                            mid,
                            session,
                            j,
                            p.slot,
                            p.type,
                            p.text,
                            p.tool_call_id,
                            p.tool_name,
                            None if p.tool_input is None else dumps(p.tool_input),
                            p.tool_output,
                            1 if p.is_error else 0,
                            None if p.raw_is_text else dumps(p.raw),
                        )
                    )
                ctx_rows.append((conv_id, ord0 + 1 + i, mid, stamp))
            conn.executemany(
                "INSERT INTO messages (message_id, conversation_id, seq, role, content,"
                " token_count,"
                " created_at, external_id, source_format, envelope, metadata)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                msg_rows,
            )
            if part_rows:
                conn.executemany(
                    "INSERT INTO message_parts (part_id, message_id, session_id, ordinal, slot,"
                    " part_type, text, tool_call_id, tool_name, tool_input, tool_output,"
                    " is_error, raw)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    part_rows,
                )
            files = [(f, first_id + i) for i, m in enumerate(fresh) for f in m.large_files]
            if files:
                conn.executemany(
                    "INSERT OR IGNORE INTO large_files (file_id, conversation_id, message_id,"
                    " file_name, mime_type, byte_size, token_count, sha256, storage_path,"
                    " exploration_summary, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            f.file_id,
                            conv_id,
                            mid,
                            f.file_name,
                            f.mime_type,
                            f.byte_size,
                            f.token_count,
                            f.sha256,
                            f.storage_path,
                            f.exploration_summary,
                            stamp,
                        )
                        for f, mid in files
                    ],
                )
            conn.executemany(
                "INSERT INTO context_items (conversation_id, ordinal, item_type, message_id,"
                " created_at) VALUES (?, ?, 'message', ?, ?)",
                ctx_rows,
            )
            last_id = first_id + len(fresh) - 1
            self._index_messages(conn, first_id, last_id, trigram=len(fresh) < DEFER_TRIGRAM_AT)
            return list(range(first_id, last_id + 1)), skipped

    @staticmethod
    def _index_messages(
        conn: sqlite3.Connection, first_id: int, last_id: int, *, trigram: bool
    ) -> None:
        tables = ("messages_fts", "messages_trigram") if trigram else ("messages_fts",)
        for table in tables:
            conn.execute(
                f"INSERT INTO {table} (rowid, content) SELECT message_id, content FROM messages"
                " WHERE message_id BETWEEN ? AND ?",
                (first_id, last_id),
            )

    def pending_index_rows(self) -> int:
        """Messages not yet in the trigram index (left there by large batches)."""
        (upto,) = self.fetchall("SELECT upto FROM index_state WHERE name = 'messages_trigram'")[0]
        return int(
            self.fetchall(
                "SELECT count(*) FROM messages m WHERE m.message_id > ? AND NOT EXISTS"
                " (SELECT 1 FROM messages_trigram_docsize d WHERE d.id = m.message_id)",
                (upto,),
            )[0][0]
        )

    def catch_up_indexes(self, batch: int = 50_000) -> int:
        """Index what large batches left out of the trigram index; returns rows indexed.

        Runs in transactions of *batch* rows so writers are not held up for long. Search
        calls it before using the trigram index, imports call it when they finish. When
        nothing is behind it only reads: searching never takes the write lock for nothing.
        """
        behind = self.fetchall(
            "SELECT 1 FROM index_state WHERE name = 'messages_trigram'"
            " AND upto < (SELECT coalesce(max(message_id), 0) FROM messages)"
        )
        if not behind:
            return 0
        done = 0
        while True:
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
                cur = conn.execute(
                    "INSERT INTO messages_trigram (rowid, content) SELECT message_id, content"
                    " FROM messages m WHERE message_id > ? AND message_id <= ? AND NOT EXISTS"
                    " (SELECT 1 FROM messages_trigram_docsize d WHERE d.id = m.message_id)",
                    (upto, top),
                )
                done += max(cur.rowcount, 0)
                conn.execute(
                    "UPDATE index_state SET upto = ? WHERE name = 'messages_trigram'", (top,)
                )

    _MSG_COLS = (
        "message_id, conversation_id, seq, role, content, token_count, created_at, external_id,"
        " source_format, envelope, metadata"
    )

    def _messages_with_parts(
        self, conn: sqlite3.Connection, rows: list[tuple[Any, ...]]
    ) -> list[StoredMessage]:
        if not rows:
            return []
        parts: dict[int, list[StoredPart]] = {}
        ids = [r[0] for r in rows]
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            for p in conn.execute(
                "SELECT part_id, message_id, ordinal, slot, part_type, text, tool_call_id,"
                " tool_name, tool_input, tool_output, is_error, raw FROM message_parts"
                f" WHERE message_id IN ({marks}) ORDER BY message_id, ordinal",
                chunk,
            ):
                parts.setdefault(p[1], []).append(
                    StoredPart(
                        part_id=p[0],
                        message_id=p[1],
                        ordinal=p[2],
                        slot=p[3],
                        type=p[4],
                        text=p[5],
                        tool_call_id=p[6],
                        tool_name=p[7],
                        tool_input=_loads(p[8]),
                        tool_output=p[9],
                        is_error=bool(p[10]),
                        raw=p[5] if p[11] is None else loads(p[11]),
                    )
                )
        return [
            StoredMessage(
                message_id=r[0],
                conversation_id=r[1],
                seq=r[2],
                role=r[3],
                content=r[4],
                token_count=r[5],
                created_at=r[6],
                external_id=r[7],
                source_format=r[8],
                envelope=_loads(r[9]),
                metadata=_loads(r[10]),
                parts=tuple(parts.get(r[0], ())),
            )
            for r in rows
        ]

    def get_messages(
        self, conversation_id: int, *, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        """Messages of a conversation in seq order, after *after_seq*, at most *limit*."""
        with self.read() as conn:
            rows = conn.execute(
                f"SELECT {self._MSG_COLS} FROM messages WHERE conversation_id = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (conversation_id, after_seq, -1 if limit is None else limit),
            ).fetchall()
            return self._messages_with_parts(conn, rows)

    def get_message(self, message_id: int) -> StoredMessage:
        """One message with its parts; :class:`NotFoundError` if there is none."""
        with self.read() as conn:
            rows = conn.execute(
                f"SELECT {self._MSG_COLS} FROM messages WHERE message_id = ?", (message_id,)
            ).fetchall()
            if not rows:
                raise NotFoundError(f"no message msg#{message_id}; search with `lossless grep`")
            return self._messages_with_parts(conn, rows)[0]

    def last_messages(self, conversation_id: int, count: int) -> list[StoredMessage]:
        """The newest *count* messages of a conversation, oldest first."""
        with self.read() as conn:
            rows = conn.execute(
                f"SELECT {self._MSG_COLS} FROM messages WHERE conversation_id = ?"
                " ORDER BY seq DESC LIMIT ?",
                (conversation_id, count),
            ).fetchall()
            return self._messages_with_parts(conn, rows[::-1])

    def message_count(self, conversation_id: int | None = None) -> int:
        """Messages stored, in one conversation or in all."""
        if conversation_id is None:
            return int(self.fetchall("SELECT count(*) FROM messages")[0][0])
        return int(
            self.fetchall(
                "SELECT count(*) FROM messages WHERE conversation_id = ?", (conversation_id,)
            )[0][0]
        )

    # --- the active context and the summary DAG ----------------------------------------------

    def context(self, conversation_id: int) -> list[ContextItem]:
        """The conversation's context items in order (cost: the size of the active context)."""
        rows = self.fetchall(
            "SELECT ci.ordinal, ci.item_type, ci.message_id, ci.summary_id,"
            " coalesce(m.token_count, s.token_count, 0), m.role, s.depth,"
            " coalesce(m.created_at, s.earliest_at, s.created_at),"
            " coalesce(m.created_at, s.latest_at, s.created_at)"
            " FROM context_items ci"
            " LEFT JOIN messages m ON m.message_id = ci.message_id"
            " LEFT JOIN summaries s ON s.summary_id = ci.summary_id"
            " WHERE ci.conversation_id = ? ORDER BY ci.ordinal",
            (conversation_id,),
        )
        return [ContextItem(*r) for r in rows]

    def tool_links(self, message_ids: Sequence[int]) -> dict[int, tuple[set[str], set[str]]]:
        """For each message: the tool call ids it makes and the tool call ids it answers."""
        out: dict[int, tuple[set[str], set[str]]] = {}
        ids = list(message_ids)
        with self.read() as conn:
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = ids[start : start + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                for mid, kind, call in conn.execute(
                    "SELECT message_id, part_type, tool_call_id FROM message_parts"
                    f" WHERE message_id IN ({marks}) AND tool_call_id IS NOT NULL"
                    " AND part_type IN ('tool_call', 'tool_result')",
                    chunk,
                ):
                    calls, results = out.setdefault(mid, (set(), set()))
                    (calls if kind == "tool_call" else results).add(call)
        return out

    def get_messages_by_id(self, message_ids: Sequence[int]) -> list[StoredMessage]:
        """Messages by id, in the order given."""
        ids = list(message_ids)
        found: dict[int, StoredMessage] = {}
        with self.read() as conn:
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = ids[start : start + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT {self._MSG_COLS} FROM messages WHERE message_id IN ({marks})", chunk
                ).fetchall()
                for m in self._messages_with_parts(conn, rows):
                    found[m.message_id] = m
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFoundError(f"no message msg#{missing[0]}; search with `lossless grep`")
        return [found[i] for i in ids]

    _SUM_COLS = (
        "summary_id, conversation_id, kind, depth, content, token_count, created_at,"
        " earliest_at, latest_at, descendant_count, file_ids, model"
    )

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
        )

    def get_summaries(self, summary_ids: Sequence[str]) -> list[Summary]:
        """Summaries by id, in the order given; :class:`NotFoundError` for an unknown id."""
        ids = list(summary_ids)
        found: dict[str, Summary] = {}
        with self.read() as conn:
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = ids[start : start + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                for row in conn.execute(
                    f"SELECT {self._SUM_COLS} FROM summaries WHERE summary_id IN ({marks})", chunk
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

    def covering(self, ref: str | int) -> list[str]:
        """The summaries made from *ref*: leaves covering a message id, or the condensed
        summaries made from a summary id."""
        if isinstance(ref, int):
            rows = self.fetchall(
                "SELECT summary_id FROM summary_messages WHERE message_id = ?", (ref,)
            )
        else:
            rows = self.fetchall(
                "SELECT summary_id FROM summary_parents WHERE parent_summary_id = ?", (ref,)
            )
        return [r[0] for r in rows]

    def summary_counts(self, conversation_id: int) -> dict[int, int]:
        """Summaries of a conversation by depth."""
        rows = self.fetchall(
            "SELECT depth, count(*) FROM summaries WHERE conversation_id = ? GROUP BY depth",
            (conversation_id,),
        )
        return {int(d): int(n) for d, n in rows}

    def write_summary(
        self,
        summary: Summary,
        sources: Sequence[ContextItem],
    ) -> None:
        """Store *summary* and put it in place of *sources* in the context: one transaction.

        *sources* are consecutive context items (messages for a leaf, same-depth summaries for
        a condensed summary). If the context changed since they were read, nothing is written
        and :class:`ConflictError` is raised (retrying the pass is safe).
        """
        if not sources:
            raise ValueError("a summary needs at least one source")
        conv = summary.conversation_id
        first, last = sources[0].ordinal, sources[-1].ordinal
        with self.transaction() as conn:
            current = conn.execute(
                "SELECT ordinal, message_id, summary_id FROM context_items"
                " WHERE conversation_id = ? AND ordinal BETWEEN ? AND ? ORDER BY ordinal",
                (conv, first, last),
            ).fetchall()
            expected = [(i.ordinal, i.message_id, i.summary_id) for i in sources]
            if [tuple(r) for r in current] != expected:
                raise ConflictError(
                    f"the context of conversation {conv} changed during compaction; run it again"
                )
            conn.execute(
                f"INSERT INTO summaries ({self._SUM_COLS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    summary.summary_id,
                    conv,
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
                ),
            )
            if summary.kind == "leaf":
                conn.executemany(
                    "INSERT INTO summary_messages (summary_id, message_id, ordinal)"
                    " VALUES (?, ?, ?)",
                    [(summary.summary_id, i.message_id, n) for n, i in enumerate(sources)],
                )
            else:
                conn.executemany(
                    "INSERT INTO summary_parents (summary_id, parent_summary_id, ordinal)"
                    " VALUES (?, ?, ?)",
                    [(summary.summary_id, i.summary_id, n) for n, i in enumerate(sources)],
                )
            self._index_summary(conn, summary.summary_id)
            conn.execute(
                "DELETE FROM context_items WHERE conversation_id = ? AND ordinal BETWEEN ? AND ?",
                (conv, first, last),
            )
            conn.execute(
                "INSERT INTO context_items (conversation_id, ordinal, item_type, summary_id,"
                " created_at) VALUES (?, ?, 'summary', ?, ?)",
                (conv, first, summary.summary_id, summary.created_at),
            )
            self._shift_ordinals(conn, conv, after=last, by=-(last - first))

    @staticmethod
    def _index_summary(conn: sqlite3.Connection, summary_id: str) -> None:
        for table in ("summaries_fts", "summaries_trigram"):
            conn.execute(
                f"INSERT INTO {table} (rowid, content) SELECT rowid, content FROM summaries"
                " WHERE summary_id = ?",
                (summary_id,),
            )

    @staticmethod
    def _shift_ordinals(
        conn: sqlite3.Connection, conversation_id: int, *, after: int, by: int
    ) -> None:
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

    # --- large files -----------------------------------------------------------------------

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
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = ids[start : start + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
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

    # --- transcript checkpoints ------------------------------------------------------------

    def get_checkpoint(self, conversation_id: int) -> Checkpoint | None:
        """The reconciliation checkpoint of a conversation, if it has one."""
        rows = self.fetchall(
            "SELECT conversation_id, path, format, header_id, head_hash, size, offset, line_no,"
            " last_line_start, last_line_hash, last_entry_id FROM transcript_checkpoints"
            " WHERE conversation_id = ?",
            (conversation_id,),
        )
        return Checkpoint(*rows[0]) if rows else None

    def put_checkpoint(self, cp: Checkpoint) -> None:
        """Record a checkpoint (call inside the transaction that stored what it covers)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO transcript_checkpoints (conversation_id, path, format, header_id,"
                " head_hash, size, offset, line_no, last_line_start, last_line_hash,"
                " last_entry_id, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (conversation_id) DO UPDATE SET path = excluded.path,"
                " format = excluded.format, header_id = excluded.header_id,"
                " head_hash = excluded.head_hash, size = excluded.size, offset = excluded.offset,"
                " line_no = excluded.line_no, last_line_start = excluded.last_line_start,"
                " last_line_hash = excluded.last_line_hash,"
                " last_entry_id = excluded.last_entry_id, updated_at = excluded.updated_at",
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
                    format_ts(now()),
                ),
            )

    # --- integrity -------------------------------------------------------------------------

    def fts_problems(self) -> list[tuple[str, str, str]]:
        """Full-text rows that do not match their sources: (index, id, problem)."""
        problems: list[tuple[str, str, str]] = []
        checks = [
            ("messages_fts", "messages", "message_id", "msg#"),
            ("messages_trigram", "messages", "message_id", "msg#"),
            ("summaries_fts", "summaries", "rowid", ""),
            ("summaries_trigram", "summaries", "rowid", ""),
        ]
        with self.read() as conn:
            (upto,) = conn.execute(
                "SELECT upto FROM index_state WHERE name = 'messages_trigram'"
            ).fetchone()
            for fts, source, key, prefix in checks:
                label = "summary_id" if source == "summaries" else key
                # Rows above the trigram watermark are waiting for catch_up_indexes.
                limit = upto if fts == "messages_trigram" else None
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
                    fts == "messages_trigram"
                    and conn.execute(
                        "SELECT 1 FROM messages WHERE message_id > ? LIMIT 1", (upto,)
                    ).fetchone()
                )
                rank = 0 if pending else 1
                try:
                    conn.execute(
                        f"INSERT INTO {fts} ({fts}, rank) VALUES ('integrity-check', {rank})"
                    )
                except sqlite3.DatabaseError as exc:
                    problems.append((fts, "-", f"index does not match its source text ({exc})"))
        return problems

    def rebuild_fts(self) -> None:
        """Rebuild every full-text index from its source table (the fix doctor suggests)."""
        with self.transaction() as conn:
            for fts in ("messages_fts", "messages_trigram", "summaries_fts", "summaries_trigram"):
                conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('rebuild')")
            conn.execute(
                "UPDATE index_state SET upto = (SELECT coalesce(max(message_id), 0) FROM messages)"
                " WHERE name = 'messages_trigram'"
            )

    def foreign_key_problems(self) -> list[tuple[str, int, str, int]]:
        """Rows whose foreign keys point nowhere: (table, rowid, parent table, fk index)."""
        with self.read() as conn:
            return [(r[0], r[1], r[2], r[3]) for r in conn.execute("PRAGMA foreign_key_check")]

    def database_size(self) -> dict[str, int]:
        """Bytes on disk of the database and its WAL."""
        sizes = {}
        for suffix, label in (("", "database"), ("-wal", "wal")):
            try:
                sizes[label] = os.path.getsize(f"{self.path}{suffix}")
            except OSError:
                sizes[label] = 0
        return sizes


def _create_private(path: Path) -> None:
    """Create the database file (and its directory) readable by the owner only."""
    try:
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        if not path.exists():
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
    except OSError as exc:
        raise StoreError(
            f"cannot create the database {path}: {exc.strerror}; pick a writable location "
            f"with --db or LOSSLESS_DB"
        ) from exc
