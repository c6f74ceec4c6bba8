"""Conversations and their messages: rows written once, read back exactly."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..codec import dumps
from ..errors import NotFoundError
from ..model import (
    DEFAULT_NAMESPACE,
    ContextItem,
    Conversation,
    ConversationStats,
    MessageText,
    NormalizedMessage,
    StoredMessage,
    StoredPart,
    check_session_id,
    namespace_of,
    qualify,
    speaker_of,
    unqualify,
    writing_namespace,
)
from ..timestamps import format_ts, now
from . import packed_json, raw_blocks
from .archive_files import archived_texts, read_archived
from .connection import Connection
from .core import (
    _MESSAGE_INSERT,
    _PART_INSERT,
    _POSITION,
    _TOOL_PARTS,
    CONTEXT_VERSION_UPDATE,
    DEFER_TRIGRAM_AT,
    NO_LIMIT,
    Placement,
    StoreCore,
    _loads,
    _row_id,
    in_chunks,
    new_context_version,
)
from .message_rows import MSG_COLS, PART_COLS, message_from_row, part_from_row
from .toollog import record_tool_executions

__all__ = ["MessageStore"]


class MessageStore(StoreCore):
    """Conversations, messages (with their parts) and the host's records among them."""

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
        """The conversation for *session_id*, created on first use (in the namespace a
        request is writing in, if one is: :data:`~lossless.model.writing_namespace`)."""
        namespace = writing_namespace.get()
        session_id = qualify(namespace, session_id)
        if session_key is not None:
            session_key = qualify(namespace, session_key)
        with self.transaction() as conn:
            row = conn.execute(
                f"SELECT {self._CONV_COLS} FROM conversations WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is not None:
                return self._conversation(row)
            check_session_id(unqualify(session_id))  # (one made before the check is found)
            stored_namespace = namespace_of(session_id)
            stamp = format_ts(now())
            # Another process may create it at the same moment: then its row is the one.
            created = conn.execute(
                "INSERT INTO conversations (session_id, session_key, title, created_at,"
                " updated_at, namespace) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (session_id) DO NOTHING RETURNING conversation_id",
                (
                    session_id,
                    session_key,
                    title,
                    stamp,
                    stamp,
                    None if stored_namespace == DEFAULT_NAMESPACE else stored_namespace,
                ),
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
        """The conversation whose external session id is *session_id*, if any (in the
        namespace a request is writing in, if one is)."""
        session_id = qualify(writing_namespace.get(), session_id)
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
            retitled = title is not None and title != current.title
            if retitled:  # every message's word-index entry carries the title
                self._words_changing(conn, conversation_id)
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
            if retitled:
                self._words_changed(conn, conversation_id)

    def list_conversations(self, *, archived: bool | None = None) -> list[ConversationStats]:
        """The conversations with their message, summary, token and context counts, their
        first and last message's times and where they came from: every one, or with
        *archived* the archived ones (``True``) or the others (``False``)."""
        where, params = "", []
        if archived is not None:
            where, params = " WHERE status = ?", ["archived" if archived else "active"]
        with self.read() as conn:
            convs = [
                self._conversation(r)
                for r in conn.execute(
                    f"SELECT {self._CONV_COLS} FROM conversations{where} ORDER BY conversation_id",
                    params,
                )
            ]
            msgs = {
                r[0]: (r[1], r[2] or 0, r[3], r[4])
                for r in conn.execute(
                    "SELECT conversation_id, count(*), sum(token_count), max(created_at),"
                    " min(created_at) FROM messages GROUP BY conversation_id"
                )
            }
            # The transcript's format, else the first message's shape.
            sources = {
                int(r[0]): r[1] or r[2]
                for r in conn.execute(
                    "SELECT c.conversation_id, t.format, (SELECT m.source_format FROM messages m"
                    " WHERE m.conversation_id = c.conversation_id ORDER BY m.seq LIMIT 1)"
                    " FROM conversations c LEFT JOIN transcript_checkpoints t"
                    " ON t.conversation_id = c.conversation_id"
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
            count, tokens, last, first = msgs.get(conv.conversation_id, (0, 0, None, None))
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
                    first_message_at=first,
                    source=sources.get(conv.conversation_id),
                )
            )
        return out

    def archived_conversation_ids(self) -> list[int]:
        """The ids of the archived conversations."""
        rows = self.fetchall(
            "SELECT conversation_id FROM conversations WHERE status = 'archived'"
            " ORDER BY conversation_id"
        )
        return [int(r[0]) for r in rows]

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

    def message_ids_by_external(self, conversation_id: int, ids: Iterable[str]) -> dict[str, int]:
        """The stored message id of each of *ids* the conversation holds."""
        wanted = list(dict.fromkeys(ids))
        found: dict[str, int] = {}
        with self.read() as conn:
            for chunk, marks in in_chunks(wanted):
                found.update(
                    (r[0], int(r[1]))
                    for r in conn.execute(
                        f"SELECT external_id, message_id FROM messages WHERE conversation_id = ?"
                        f" AND external_id IN ({marks})",
                        (conversation_id, *chunk),
                    )
                )
        return found

    def _reserve(
        self, conn: Connection, conversation_id: int, messages: int, parts: int
    ) -> tuple[int, int, int, int, int]:
        """Under the conversation's lock: the first of *messages* fresh message ids, the
        first of *parts* fresh part ids (0 for none), the conversation's last seq and last
        context ordinal (0 and -1 when it has none), and its context version."""
        first_id = self._allocate_ids(conn, "messages", messages)
        seq0, ord0, version = conn.execute(
            f"SELECT {_POSITION}", (conversation_id, conversation_id, conversation_id)
        ).fetchone()
        part_id = self._allocate_ids(conn, "message_parts", parts) if parts else 0
        return first_id, part_id, int(seq0), int(ord0), int(version)

    def _place_messages(
        self,
        conn: Connection,
        conversation: Conversation,
        rows: Sequence[Sequence[Any]],
        parts: Sequence[Sequence[Any]],
        *,
        stamp: str,
        trigram: bool,
        version: int,
    ) -> Placement:
        """Under the conversation's lock, write a batch at the end of the conversation and
        of its context: *rows* (the columns of ``_MESSAGE_INSERT`` after ``conversation_id``
        and ``seq``), *parts* (those of ``_PART_INSERT`` after ``message_id``, the message's
        index in *rows* first), each message's context item made at *stamp*, the
        messages' search-index entries (the trigram ones too when *trigram*), and the
        context's new *version*. Where the batch went: its first id, the ordinal and the
        context version before it."""
        conv_id = conversation.conversation_id
        first_id, part_id, seq0, ord0, version0 = self._reserve(
            conn, conv_id, len(rows), len(parts)
        )
        msg_rows = [(first_id + i, conv_id, seq0 + 1 + i, *r) for i, r in enumerate(rows)]
        part_rows = [(part_id + k, first_id + p[0], *p[1:]) for k, p in enumerate(parts)]
        conn.executemany(_MESSAGE_INSERT, msg_rows)
        if part_rows:
            conn.executemany(_PART_INSERT, part_rows)
        conn.executemany(
            "INSERT INTO context_items (conversation_id, ordinal, item_type, message_id,"
            " created_at) VALUES (?, ?, 'message', ?, ?)",
            [(conv_id, ord0 + 1 + i, first_id + i, stamp) for i in range(len(rows))],
        )
        self._index_messages(conn, first_id, first_id + len(rows) - 1, trigram=trigram)
        conn.execute(CONTEXT_VERSION_UPDATE, (version, conv_id))
        return Placement(first_id, ord0, version0)

    def append_messages(
        self, conversation: Conversation, messages: Sequence[NormalizedMessage]
    ) -> tuple[list[int], int]:
        """Store *messages* at the end of the conversation and of its context, in one transaction.

        Messages whose external id is already stored (or repeated within the batch) are
        skipped. Returns the new message ids and the number skipped.
        """
        conv_id = conversation.conversation_id
        with self.pipelined_transaction() as conn:
            self._lock_for_append(conn, conv_id)
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
            # Ids come in one consecutive block, so a batch is inserted as a set and its
            # index rows filled with one statement; seq and ordinal under the
            # conversation's lock.
            stamp = format_ts(now())
            version = new_context_version()
            rows = []
            parts = []
            session = conversation.session_id
            for i, m in enumerate(fresh):
                rows.append(
                    (
                        m.role,
                        m.content,
                        m.token_count,
                        format_ts(m.created_at) if m.created_at is not None else stamp,
                        m.external_id,
                        m.source_format,
                        None if m.envelope is None else packed_json.pack(dumps(m.envelope)),
                        packed_json.pack(dumps(m.metadata)) if m.metadata else None,
                        m.host_meta,
                    )
                )
                for j, p in enumerate(m.parts):
                    tool_input = None if p.tool_input is None else dumps(p.tool_input)
                    parts.append(
                        (
                            i,
                            session,
                            j,
                            p.slot,
                            p.type,
                            p.text,
                            p.tool_call_id,
                            p.tool_name,
                            tool_input,
                            p.tool_output,
                            1 if p.is_error else 0,
                            None
                            if p.raw_is_text
                            else raw_blocks.pack(
                                p.raw,
                                raw_blocks.Columns(
                                    p.text,
                                    p.tool_output,
                                    tool_input,
                                    p.tool_call_id,
                                    p.tool_name,
                                    p.is_error,
                                ),
                            ),
                        )
                    )
            placed = self._place_messages(
                conn,
                conversation,
                rows,
                parts,
                stamp=stamp,
                trigram=len(fresh) < DEFER_TRIGRAM_AT,
                version=version,
            )
            self._context_left(conv_id)
            files = [(f, placed.first_id + i) for i, m in enumerate(fresh) for f in m.large_files]
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
            sealed = [
                (placed.first_id + i, m.sealed, m.redactions, int(m.kept_plain))
                for i, m in enumerate(fresh)
                if m.sealed is not None
            ]
            if sealed:
                conn.executemany(
                    "INSERT INTO redacted_originals (message_id, sealed, secrets, plain)"
                    " VALUES (?, ?, ?, ?)",
                    sealed,
                )
            if any(p.type in _TOOL_PARTS for m in fresh for p in m.parts):
                first_id = placed.first_id
                record_tool_executions(conn, conv_id, first_id, first_id + len(fresh) - 1)
            gone = [
                (m.forgotten_at, placed.first_id + i)
                for i, m in enumerate(fresh)
                if m.forgotten_at is not None
            ]
            if gone:
                self._tombstones_placed(conn, conv_id, gone)
        # Committed: a context kept as it was before this append is kept with the new items.
        first_id, ord0 = placed.first_id, placed.ord0

        def extend(items: list[ContextItem]) -> None:
            items.extend(
                ContextItem(
                    ord0 + 1 + i, "message", first_id + i, None, r[2], r[0], None, r[3], r[3]
                )
                for i, r in enumerate(rows)
            )

        # Inside a caller's transaction it may yet roll back: kept, but read again.
        own = not self._in_transaction()
        if not gone:  # tombstones left the context: it is read again
            self._patch_kept_context(conv_id, placed.version0, version, extend, written=own)
        return list(range(first_id, first_id + len(fresh))), skipped

    def _tombstones_placed(
        self, conn: Connection, conversation_id: int, gone: Sequence[tuple[str | None, int]]
    ) -> None:
        """Messages just stored as tombstones (an export's forgotten ones, with when they were
        forgotten): marked so, and out of the active context, as a forget leaves them."""
        conn.executemany("UPDATE messages SET forgotten_at = ? WHERE message_id = ?", gone)
        ids = [mid for _, mid in gone]
        for chunk, marks in in_chunks(ids):
            conn.execute(
                "DELETE FROM context_items WHERE item_type = 'message'"
                f" AND message_id IN ({marks})",
                chunk,
            )
        conn.executemany(
            "INSERT INTO context_removals (message_id, conversation_id, removed_at)"
            " VALUES (?, ?, ?)",
            [(mid, conversation_id, at) for at, mid in gone],
        )
        self._context_changed(conn, conversation_id)

    _MSG_COLS = MSG_COLS

    def _messages_with_parts(
        self, conn: Connection, rows: list[tuple[Any, ...]]
    ) -> list[StoredMessage]:
        if not rows:
            return []
        ids = [r[0] for r in rows if r[13] is None]
        archived = [int(r[0]) for r in rows if r[13] is not None]
        if archived:
            # Retention moved their text to an archive file: read back as they were stored.
            found = read_archived(conn, self.archive_dir, archived)
            rows = [tuple(found[int(r[0])][0]) if r[13] is not None else r for r in rows]
        parts: dict[int, list[StoredPart]] = {}
        for chunk, marks in in_chunks(ids):
            for p in conn.execute(
                f"SELECT {PART_COLS} FROM message_parts"
                f" WHERE message_id IN ({marks}) ORDER BY message_id, ordinal",
                chunk,
            ):
                parts.setdefault(p[1], []).append(part_from_row(p))
        for mid in archived:
            parts[mid] = [part_from_row(p) for p in found[mid][1]]
        return [message_from_row(r, parts.get(r[0], ())) for r in rows]

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

    def message_sizes(self, message_ids: Sequence[int]) -> dict[int, tuple[int, int, str]]:
        """For each of *message_ids* that is stored: its seq, token count and role (what
        assembly weighs before it reads a message)."""
        out: dict[int, tuple[int, int, str]] = {}
        with self.read() as conn:
            for chunk, marks in in_chunks([_row_id(i) for i in message_ids]):
                for mid, seq, tokens, role in conn.execute(
                    "SELECT message_id, seq, token_count, role FROM messages"
                    f" WHERE message_id IN ({marks})",
                    chunk,
                ):
                    out[int(mid)] = (int(seq), int(tokens or 0), str(role))
        return out

    def messages_near(self, message_id: int, reach: int) -> list[tuple[int, int, int, str, int]]:
        """The messages within *reach* seqs of *message_id* in its conversation (itself too),
        in seq order, each as (message id, seq, token count, role, conversation id); empty
        when it is not stored."""
        rows = self.fetchall(
            "SELECT n.message_id, n.seq, n.token_count, n.role, n.conversation_id"
            " FROM messages m JOIN messages n ON n.conversation_id = m.conversation_id"
            " AND n.seq BETWEEN m.seq - ? AND m.seq + ? WHERE m.message_id = ? ORDER BY n.seq",
            (reach, reach, _row_id(message_id)),
        )
        return [(int(a), int(b), int(c or 0), str(d), int(e)) for a, b, c, d, e in rows]

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

    def message_texts(self, message_ids: Sequence[int]) -> list[MessageText]:
        """What summaries are made from of the messages *message_ids*, in the order given:
        one read of their rows, without parts (see :meth:`get_messages_by_id` for those)."""
        ids = list(message_ids)
        found: dict[int, MessageText] = {}
        with self.read() as conn:
            for chunk, marks in in_chunks([_row_id(i) for i in ids]):
                rows = conn.execute(
                    "SELECT message_id, role, content, created_at, token_count, host_meta,"
                    f" archived_at FROM messages WHERE message_id IN ({marks})",
                    chunk,
                ).fetchall()
                # An archived message's text is in its archive file (the row holds its start).
                archived = [int(r[0]) for r in rows if r[6] is not None]
                texts = archived_texts(conn, self.archive_dir, archived)
                for mid, role, content, created_at, tokens, host_meta, _ in rows:
                    content = texts.get(mid, content)
                    found[mid] = MessageText(
                        mid, speaker_of(role, host_meta), content, created_at, tokens
                    )
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFoundError(f"no message msg#{missing[0]}; search with `lossless grep`")
        return [found[i] for i in ids]

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

    def sealed_original(self, message_id: int) -> tuple[bytes, bool] | None:
        """The kept original of a message whose secrets were masked (as it was: ``True``) or
        removed (encrypted: ``False``); ``None`` when none was kept."""
        rows = self.fetchall(
            "SELECT sealed, plain FROM redacted_originals WHERE message_id = ?", (message_id,)
        )
        return (bytes(rows[0][0]), bool(rows[0][1])) if rows else None

    def masked_originals(
        self, message_ids: Sequence[int] | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """The originals kept as they were (masked messages): all, or those of *message_ids*,
        by message id."""
        sql = "SELECT message_id, sealed FROM redacted_originals WHERE plain = 1"
        if message_ids is None:
            for row in self.fetchall(sql + " ORDER BY message_id"):
                yield int(row[0]), bytes(row[1])
            return
        for chunk, marks in in_chunks(list(message_ids)):
            for row in self.fetchall(sql + f" AND message_id IN ({marks})", chunk):
                yield int(row[0]), bytes(row[1])

    def mask_salt(self) -> bytes:
        """The key that tags this store's masked secrets, made on first use."""
        rows = self.fetchall("SELECT value FROM store_settings WHERE name = 'mask_salt'")
        if not rows:
            with self.transaction() as conn:
                conn.execute(
                    "INSERT INTO store_settings (name, value) VALUES ('mask_salt', ?)"
                    " ON CONFLICT (name) DO NOTHING",
                    (secrets.token_hex(32),),
                )
            rows = self.fetchall("SELECT value FROM store_settings WHERE name = 'mask_salt'")
        return bytes.fromhex(str(rows[0][0]))
