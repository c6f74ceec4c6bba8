"""What every back end shares: the store's interface and the SQL both dialects speak.

:class:`Store` holds the queries, written once in the SQL that SQLite and PostgreSQL both
accept (``?`` placeholders; the PostgreSQL connection translates them). A back end supplies
the connections and transactions, id allocation, the per-conversation write lock, the
full-text indexes and the integrity checks that differ between engines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..codec import content_hash, dumps, loads
from ..errors import ConflictError, NotFoundError, StoreError
from ..model import (
    Checkpoint,
    ContextItem,
    Conversation,
    ConversationStats,
    LargeFile,
    NormalizedMessage,
    SessionSummary,
    StoredMessage,
    StoredPart,
    Summary,
    check_file_id,
)
from ..timestamps import format_ts, now
from .toollog import record_tool_executions

__all__ = ["NO_LIMIT", "Store", "in_chunks"]

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
#: Batches at least this large leave the trigram index to :meth:`Store.catch_up_indexes`
#: (it costs more than everything else on ingest); smaller ones index it inline.
DEFER_TRIGRAM_AT = 64
_IN_CHUNK = 500  # host parameters per IN (...) list
#: "No limit" for a ``LIMIT ?`` both engines accept (SQLite's -1 is an error in PostgreSQL).
NO_LIMIT = 2**62
_TOOL_PARTS = frozenset({"tool_call", "tool_result"})
_MESSAGE_INSERT = (
    "INSERT INTO messages (message_id, conversation_id, seq, role, content, token_count,"
    " created_at, external_id, source_format, envelope, metadata, host_meta)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_PART_INSERT = (
    "INSERT INTO message_parts (part_id, message_id, session_id, ordinal, slot, part_type, text,"
    " tool_call_id, tool_name, tool_input, tool_output, is_error, raw)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: How long a term's document count is trusted (it moves slowly; it only steers the search).
TERM_CACHE_SECONDS = 300.0


def in_chunks(values: Sequence[T]) -> Iterator[tuple[list[T], str]]:
    """*values* in slices short enough for one ``IN (...)`` list, each with its ``?`` marks."""
    for start in range(0, len(values), _IN_CHUNK):
        chunk = list(values[start : start + _IN_CHUNK])
        yield chunk, ",".join("?" * len(chunk))


def _loads(text: str | None) -> Any:
    return None if text is None else loads(text)


def _row_id(value: int) -> int:
    """*value* if SQLite can hold it; else -1, an id no row has (not found, not a crash)."""
    return value if isinstance(value, int) and -(2**63) <= value < 2**63 else -1


class Store:
    """Messages, parts, summaries, context items and indexes, whatever the engine."""

    backend = ""
    _term_cache: dict[tuple[str, str], tuple[float, int]]
    #: The engine's own error classes (what a failed statement raises).
    errors: tuple[type[Exception], ...] = ()
    #: Where the store lives, for messages (a file path or a URL without its password).
    location = ""
    #: The file the store lives in (``None`` for a server's store).
    path: Path | None = None

    # --- what a back end supplies ------------------------------------------------------------

    def close(self) -> None:
        """Close every connection the store opened."""
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[Any]:
        """A write transaction on a connection of this thread; nested calls are savepoints."""
        raise NotImplementedError

    def read(self) -> AbstractContextManager[Any]:
        """A consistent snapshot for several reads (joins an open transaction)."""
        raise NotImplementedError

    def migrate(self) -> list[str]:
        """Apply pending migrations, each in its own transaction; return the names applied."""
        raise NotImplementedError

    def _allocate_ids(self, conn: Any, table: str, count: int) -> int:
        """The first of *count* consecutive fresh ids for ``messages`` or ``message_parts``."""
        raise NotImplementedError

    def _lock_conversation(self, conn: Any, conversation_id: int) -> None:
        """Hold the conversation's write lock until the transaction ends (writers to one
        conversation never interleave, whatever process or host they run in)."""

    @contextmanager
    def compaction_lock(self, conversation_id: int, *, wait: bool = True) -> Iterator[bool]:
        """Hold the right to compact a conversation for the block; yields whether it is
        held (with *wait* false, ``False`` at once when another process has it). Here a
        no-op: a store whose writers are one at a time needs none (a race that slips through
        ends in a ConflictError, retried)."""
        yield True

    def _index_messages(self, conn: Any, first_id: int, last_id: int, *, trigram: bool) -> None:
        """Index messages ``first_id..last_id`` for search (no-op where the engine does)."""

    def _index_summaries(self, conn: Any, summary_ids: Sequence[str]) -> None:
        """Index these summaries for search (no-op where the engine does)."""

    #: A case-insensitive LIKE (SQLite's LIKE folds ASCII case; PostgreSQL needs ILIKE).
    like = "LIKE"
    #: Message ids whose text matches a word query (one ``?``, see :meth:`word_query`).
    match_ids_sql = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"

    def word_query(self, query: str) -> str:
        """A safe query of quoted terms joined by ``AND`` / ``OR`` (how search builds them)
        in the syntax of this engine's word index."""
        return query

    def pending_index_rows(self) -> int:
        """Messages not yet in every search index."""
        return 0

    def catch_up_indexes(self, batch: int = 50_000) -> int:
        """Index what large batches left out; returns rows indexed."""
        return 0

    def index_terms(self, text: str) -> list[str]:
        """The distinct terms the word index makes of *text* (stemmed, folded)."""
        raise NotImplementedError

    def _term_counts(self, table: str, terms: Sequence[str]) -> dict[str, int]:
        """How many rows of *table* hold each of *terms* (as :meth:`index_terms` makes them)."""
        raise NotImplementedError

    def backup_to(self, dest: Path) -> None:
        """Copy the whole store to *dest* while writers go on."""
        raise StoreError(f"the {self.backend} back end has no built-in backup")

    def fts_problems(self) -> list[tuple[str, str, str]]:
        """Search-index rows that do not match their sources: (index, id, problem)."""
        raise NotImplementedError

    def rebuild_fts(self) -> None:
        """Rebuild every search index from its source table."""
        raise NotImplementedError

    def foreign_key_problems(self) -> list[tuple[str, int, str, int]]:
        """Rows whose foreign keys point nowhere: (table, row, parent table, fk index)."""
        raise NotImplementedError

    def database_size(self) -> dict[str, int]:
        """Bytes the store takes (``database``, and ``wal`` where there is one)."""
        raise NotImplementedError

    # --- connections and transactions ------------------------------------------------------

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read query (used by the integrity checks and reports)."""
        with self.read() as conn:
            return list(conn.execute(sql, params).fetchall())

    # --- schema ----------------------------------------------------------------------------

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
            # Another process may create it at the same moment: then its row is the one.
            created = conn.execute(
                "INSERT INTO conversations (session_id, session_key, title, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING"
                " RETURNING conversation_id",
                (session_id, session_key, title, stamp, stamp),
            ).fetchone()
            if created is None:
                row = conn.execute(
                    f"SELECT {self._CONV_COLS} FROM conversations WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
                return self._conversation(row)
            return Conversation(
                conversation_id=int(created[0]),
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
            (_row_id(conversation_id),),
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
        status: str | None = None,
    ) -> None:
        """Set the title, family key, status (``active`` / ``archived``) or metadata (merged
        into what is there) of a conversation."""
        if status not in (None, "active", "archived"):
            raise ValueError(f"unknown conversation status {status!r}; use active or archived")
        with self.transaction() as conn:
            current = self.get_conversation(conversation_id)
            merged = {**current.metadata, **metadata} if metadata else current.metadata
            conn.execute(
                "UPDATE conversations SET title = coalesce(?, title),"
                " session_key = coalesce(?, session_key), status = coalesce(?, status),"
                " metadata = ?, updated_at = ? WHERE conversation_id = ?",
                (
                    title,
                    session_key,
                    status,
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
            for chunk, marks in in_chunks(wanted):
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
            self._lock_conversation(conn, conv_id)
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
            # Ids come in one consecutive block, so a batch can be inserted with executemany
            # and its index rows filled with one statement; seq and ordinal under the
            # conversation's lock.
            first_id = self._allocate_ids(conn, "messages", len(fresh))
            seq0, ord0 = conn.execute(
                "SELECT (SELECT coalesce(max(seq), 0) FROM messages WHERE conversation_id = ?),"
                " (SELECT coalesce(max(ordinal), -1) FROM context_items"
                "  WHERE conversation_id = ?)",
                (conv_id, conv_id),
            ).fetchone()
            part_count = sum(len(m.parts) for m in fresh)
            part_id = self._allocate_ids(conn, "message_parts", part_count) - 1 if part_count else 0
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
                        m.host_meta,
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
                _MESSAGE_INSERT,
                msg_rows,
            )
            if part_rows:
                conn.executemany(
                    _PART_INSERT,
                    part_rows,
                )
            files = [(f, first_id + i) for i, m in enumerate(fresh) for f in m.large_files]
            if files:
                conn.executemany(
                    "INSERT INTO large_files (file_id, conversation_id, message_id,"
                    " file_name, mime_type, byte_size, token_count, sha256, storage_path,"
                    " exploration_summary, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (file_id) DO NOTHING",
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
            sealed = [
                (first_id + i, m.sealed, m.redactions)
                for i, m in enumerate(fresh)
                if m.sealed is not None
            ]
            if sealed:
                conn.executemany(
                    "INSERT INTO redacted_originals (message_id, sealed, secrets) VALUES (?, ?, ?)",
                    sealed,
                )
            last_id = first_id + len(fresh) - 1
            self._index_messages(conn, first_id, last_id, trigram=len(fresh) < DEFER_TRIGRAM_AT)
            if any(p.type in _TOOL_PARTS for m in fresh for p in m.parts):
                record_tool_executions(conn, conv_id, first_id, last_id)
            return list(range(first_id, last_id + 1)), skipped

    _MSG_COLS = (
        "message_id, conversation_id, seq, role, content, token_count, created_at, external_id,"
        " source_format, envelope, metadata, host_meta"
    )

    def _messages_with_parts(self, conn: Any, rows: list[tuple[Any, ...]]) -> list[StoredMessage]:
        if not rows:
            return []
        parts: dict[int, list[StoredPart]] = {}
        ids = [r[0] for r in rows]
        for chunk, marks in in_chunks(ids):
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
                host_meta=r[11],
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
                (conversation_id, after_seq, NO_LIMIT if limit is None else limit),
            ).fetchall()
            return self._messages_with_parts(conn, rows)

    def get_message(self, message_id: int) -> StoredMessage:
        """One message with its parts; :class:`NotFoundError` if there is none."""
        with self.read() as conn:
            rows = conn.execute(
                f"SELECT {self._MSG_COLS} FROM messages WHERE message_id = ?",
                (_row_id(message_id),),
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

    def get_messages_by_id(self, message_ids: Sequence[int]) -> list[StoredMessage]:
        """Messages by id, in the order given."""
        ids = list(message_ids)
        found: dict[int, StoredMessage] = {}
        queryable = [_row_id(i) for i in ids]
        with self.read() as conn:
            for chunk, marks in in_chunks(queryable):
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
            self._lock_conversation(conn, conv)
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
            conn.execute(self._SUM_INSERT, _summary_row(summary))
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
            self._index_summaries(conn, [summary.summary_id])
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

    # --- session summaries -------------------------------------------------------------------

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

    def messages_after(
        self, conversation_id: int, message_id: int | None, *, limit: int | None = None
    ) -> list[StoredMessage]:
        """Messages of a conversation after *message_id* (all of them for ``None``), in seq
        order, at most *limit*."""
        with self.read() as conn:
            after = 0
            if message_id is not None:
                row = conn.execute(
                    "SELECT seq FROM messages WHERE message_id = ? AND conversation_id = ?",
                    (message_id, conversation_id),
                ).fetchone()
                if row is None:
                    raise NotFoundError(
                        f"no message msg#{message_id} in conversation {conversation_id}"
                    )
                after = int(row[0])
            rows = conn.execute(
                f"SELECT {self._MSG_COLS} FROM messages WHERE conversation_id = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (conversation_id, after, NO_LIMIT if limit is None else limit),
            ).fetchall()
            return self._messages_with_parts(conn, rows)

    def message_seq(self, message_id: int) -> int:
        """The seq of a message: its position in its conversation, which is also how many
        messages the conversation had once it was stored (seqs are 1, 2, ... with no gaps)."""
        rows = self.fetchall("SELECT seq FROM messages WHERE message_id = ?", (message_id,))
        if not rows:
            raise NotFoundError(f"no message msg#{message_id}; search with `lossless grep`")
        return int(rows[0][0])

    def host_record_seq(self, conversation_id: int, kinds: Sequence[str]) -> int | None:
        """The seq of the newest message that is a host record of one of *kinds*."""
        marks = ", ".join("?" for _ in kinds)
        with self.read() as conn:
            row = conn.execute(
                "SELECT max(seq) FROM messages WHERE conversation_id = ?"
                f" AND host_meta IN ({marks})",
                (conversation_id, *kinds),
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def host_record_mentions(
        self, conversation_id: int, kind: str, after_seq: int, needle: str
    ) -> bool:
        """Whether a host record of *kind* after *after_seq* holds *needle*."""
        pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self.read() as conn:
            row = conn.execute(
                "SELECT 1 FROM messages WHERE conversation_id = ? AND host_meta = ? AND seq > ?"
                " AND content LIKE ? ESCAPE '\\' LIMIT 1",
                (conversation_id, kind, after_seq, pattern),
            ).fetchone()
        return row is not None

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

    def sealed_original(self, message_id: int) -> bytes | None:
        """The encrypted original of a redacted message (``None`` when none was kept)."""
        rows = self.fetchall(
            "SELECT sealed FROM redacted_originals WHERE message_id = ?", (message_id,)
        )
        return bytes(rows[0][0]) if rows else None

    # --- search statistics ---------------------------------------------------------------

    def term_documents(self, table: str, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """How many rows of *table*'s word index hold each term, and how many rows it has:
        cached for a few minutes (they move slowly, and only steer the search)."""
        if table not in ("messages", "summaries"):
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
            key = "message_id" if table == "messages" else "rowid"
            rows = int(self.fetchall(f"SELECT coalesce(max({key}), 0) FROM {table}")[0][0])
            total = cache[(table, "")] = (clock, rows)
        return out, total[1]

    # --- maintenance -----------------------------------------------------------------------

    def degraded_summaries(
        self, conversation_id: int | None, marker: str
    ) -> list[tuple[Summary, str]]:
        """Live summaries written by the deterministic fallback, or ending in *marker* (cut
        to size), with the reason, shallowest first."""
        where = " AND conversation_id = ?" if conversation_id is not None else ""
        rows = self.fetchall(
            f"SELECT {self._SUM_READ} FROM summaries WHERE retired_at IS NULL"
            " AND (model = 'fallback' OR substr(content, -length(?)) = ?)"
            f"{where} ORDER BY depth, created_at, rowid",
            [marker, marker, *([conversation_id] if conversation_id is not None else [])],
        )
        found = []
        for r in rows:
            summary = self._summary(r)
            why = "fallback" if summary.model == "fallback" else "truncated"
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
            self._shift_ordinals(conn, conv, after=ordinal, by=len(sources) - 1)
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
        return items[ordinal : ordinal + len(sources)]

    # --- backup ----------------------------------------------------------------------------

    # --- transplant ------------------------------------------------------------------------

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
                    f" envelope, metadata, host_meta FROM messages WHERE message_id IN ({marks})",
                    chunk,
                ).fetchall()
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

    @staticmethod
    def _shift_ordinals(conn: Any, conversation_id: int, *, after: int, by: int) -> None:
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

    # --- transcript checkpoints ------------------------------------------------------------

    def get_checkpoint(self, conversation_id: int) -> Checkpoint | None:
        """The reconciliation checkpoint of a conversation, if it has one."""
        rows = self.fetchall(
            'SELECT conversation_id, path, format, header_id, head_hash, size, "offset", line_no,'
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
                ' head_hash, size, "offset", line_no, last_line_start, last_line_hash,'
                " last_entry_id, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (conversation_id) DO UPDATE SET path = excluded.path,"
                " format = excluded.format, header_id = excluded.header_id,"
                " head_hash = excluded.head_hash, size = excluded.size,"
                ' "offset" = excluded."offset",'
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
