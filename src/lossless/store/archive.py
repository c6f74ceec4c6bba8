"""Archives in the store: messages whose text retention moved out into a compressed file
(the file format: :mod:`.archive_files`).

What stays in the store for an archived message: its row with its place, role, time, token
count and the start of its text (what the word indexes then hold of it, so a search still
finds it by its first words), and the summaries over it, untouched. Its envelope, host facts,
parts and tool log input or output leave with the rest of its text.

The file is written and flushed to disk first, under a name no row names yet, then one
transaction moves the messages (and re-checks that each may still go): a process stopped in
between leaves only a file nothing names, which ``lossless doctor`` reports and ``--repair``
deletes.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from ..timestamps import format_ts, now
from .archive_files import (
    WrittenArchive,
    archived_tools,
    read_archived,
    stub_of,
    write_archive,
)
from .connection import Connection
from .core import StoreCore, in_chunks
from .message_rows import MSG_COLS, PART_COLS
from .toollog import INPUT_SQL, OUTPUT_SQL

__all__ = ["MOVABLE", "ArchiveRow", "ArchiveStore"]


def _distinct(conn: Connection, column: str, table: str, message_ids: Sequence[int]) -> set[int]:
    """The values of *column* in *table*'s rows of *message_ids* (the store's own names)."""
    found: set[int] = set()
    for chunk, marks in in_chunks(list(message_ids)):
        found.update(
            int(r[0])
            for r in conn.execute(
                f"SELECT DISTINCT {column} FROM {table} WHERE message_id IN ({marks})", chunk
            )
        )
    return found


class _Moved(Exception):
    """An archive's messages changed while it was written again."""


@dataclass(frozen=True)
class ArchiveRow:
    """An ``archives`` row: one archive file."""

    archive_id: int
    name: str
    messages: int
    bytes: int
    text_bytes: int
    sha256: str
    rule: str | None
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


#: What a message must be for its text to be archived: out of the active context and covered
#: by a summary (what the summaries say stays as it was), or in the context of a conversation
#: with no message since a time (``?``: a conversation left that long, whose context is read
#: back from the archive when it is assembled again).
MOVABLE = (
    "((NOT EXISTS (SELECT 1 FROM context_items i WHERE i.conversation_id = m.conversation_id"
    " AND i.item_type = 'message' AND i.message_id = m.message_id)"
    " AND EXISTS (SELECT 1 FROM summary_messages s WHERE s.message_id = m.message_id))"
    " OR (SELECT x.created_at FROM messages x WHERE x.conversation_id = m.conversation_id"
    " ORDER BY x.seq DESC LIMIT 1) < ?)"
)

#: The messages of each kind a retention rule may name (on ``messages m`` and
#: ``conversations c``): a tool's output (a ``tool`` message, or one holding a tool result),
#: a host's record, a sub-agent's conversation (Claude Code's sidechains and agents' files).
KIND_SQL = {
    "tool_outputs": "(m.role = 'tool' OR EXISTS (SELECT 1 FROM message_parts p"
    " WHERE p.message_id = m.message_id AND p.part_type = 'tool_result'))",
    "host_records": "m.host_meta IS NOT NULL",
    "sidechains": "(c.session_id LIKE '%:sidechain' OR c.session_id LIKE '%:agent-%')",
    "all": "1 = 1",
}

#: A message's bytes in the store: its text, envelope and host facts, its parts'.
_TEXT_BYTES = (
    "{size}(m.content) + coalesce({size}(m.envelope), 0) + coalesce({size}(m.metadata), 0)"
    " + coalesce((SELECT sum(coalesce({size}(p.text), 0) + coalesce({size}(p.raw), 0)"
    " + coalesce({size}(p.tool_input), 0) + coalesce({size}(p.tool_output), 0))"
    " FROM message_parts p WHERE p.message_id = m.message_id), 0)"
)

_ARCHIVE_COLS = "archive_id, name, messages, bytes, text_bytes, sha256, rule, created_at"


class ArchiveStore(StoreCore):
    """Moving messages' text out to archive files, and back."""

    def archive_records(self, message_ids: Sequence[int]) -> list[dict[str, Any]]:
        """What an archive file holds of each of *message_ids* (live messages, in the order
        given): its row, its parts' rows, the tool log's input and output it holds."""
        rows: dict[int, list[Any]] = {}
        parts: dict[int, list[list[Any]]] = {}
        tools: dict[int, list[list[Any]]] = {}
        with self.read() as conn:
            for chunk, marks in in_chunks(list(message_ids)):
                for r in conn.execute(
                    f"SELECT {MSG_COLS} FROM messages WHERE message_id IN ({marks})"
                    " AND forgotten_at IS NULL AND archived_at IS NULL",
                    chunk,
                ):
                    rows[int(r[0])] = list(r)
                for p in conn.execute(
                    f"SELECT {PART_COLS} FROM message_parts WHERE message_id IN ({marks})"
                    " ORDER BY message_id, ordinal",
                    chunk,
                ):
                    parts.setdefault(int(p[1]), []).append(list(p))
                # The log's own columns as they are (NULL: the part's): put back on restore.
                for column, key in (("output", "result_message_id"), ("input", "call_message_id")):
                    for mid, conv, execution, value in conn.execute(
                        f"SELECT {key}, conversation_id, execution_id, {column}"
                        f" FROM tool_executions WHERE {key} IN ({marks})",
                        chunk,
                    ):
                        tools.setdefault(int(mid), []).append([conv, execution, column, value])
        missing = [m for m in message_ids if m not in rows]
        if missing:
            raise StoreError(f"msg#{missing[0]} is not a live message: it cannot be archived")
        return [
            {"row": rows[m], "parts": parts.get(m, []), "tools": tools.get(m, [])}
            for m in message_ids
        ]

    def retention_candidates(
        self,
        *,
        kinds: Sequence[str],
        before: str | None,
        idle_before: str | None,
        archive: bool,
        limit: int,
        after: tuple[str, int] | None = None,
        context_idle_before: str | None = None,
    ) -> list[tuple[int, int, str, int]]:
        """The oldest live messages of *kinds* (made before *before*, in conversations with
        no message since *idle_before*; for *archive*, only those :data:`MOVABLE`, in the
        context too when their conversation has had no message since *context_idle_before*),
        after the (time, id) *after*: (message id, conversation id, time, bytes), at most
        *limit*."""
        size = "octet_length" if self.backend == "postgresql" else "length"
        where = ["m.forgotten_at IS NULL", "m.archived_at IS NULL"]
        params: list[Any] = []
        where.append("(" + " OR ".join(KIND_SQL[k] for k in kinds) + ")")
        if archive:
            where.append(MOVABLE)
            params.append(context_idle_before or "")  # "": no time is earlier
        if before is not None:
            where.append("m.created_at < ?")
            params.append(before)
        if idle_before is not None:
            where.append(
                "(SELECT x.created_at FROM messages x WHERE x.conversation_id = m.conversation_id"
                " ORDER BY x.seq DESC LIMIT 1) < ?"
            )
            params.append(idle_before)
        if after is not None:
            where.append("(m.created_at > ? OR (m.created_at = ? AND m.message_id > ?))")
            params += [after[0], after[0], after[1]]
        rows = self.fetchall(
            f"SELECT m.message_id, m.conversation_id, m.created_at, {_TEXT_BYTES.format(size=size)}"
            " FROM messages m JOIN conversations c ON c.conversation_id = m.conversation_id"
            f" WHERE {' AND '.join(where)} ORDER BY m.created_at, m.message_id LIMIT ?",
            [*params, limit],
        )
        return [(int(a), int(b), str(t), int(n or 0)) for a, b, t, n in rows]

    def free_bytes(self) -> int | None:
        """Bytes the database file holds free for reuse (``None``: the back end cannot tell)."""
        return None

    def commit_archive(
        self,
        written: WrittenArchive,
        message_ids: Sequence[int],
        *,
        text_bytes: int,
        rule: str | None,
        context_idle_before: str | None = None,
    ) -> bool:
        """Move *message_ids*' text out (their lines are in *written*) in one transaction.
        Each must still be :data:`MOVABLE`: when one no longer is (a forget, a new context,
        another prune came first), nothing changes and the answer is ``False``: the caller
        deletes the file and chooses again."""
        ids = list(message_ids)
        stamp = format_ts(now())
        with self.transaction() as conn:
            convs = _distinct(conn, "conversation_id", "messages", ids)
            for conv in sorted(convs):
                self._lock_conversation(conn, conv)
            still = 0
            for chunk, marks in in_chunks(ids):
                still += int(
                    conn.execute(
                        f"SELECT count(*) FROM messages m WHERE m.message_id IN ({marks})"
                        f" AND m.forgotten_at IS NULL AND m.archived_at IS NULL AND {MOVABLE}",
                        [*chunk, context_idle_before or ""],
                    ).fetchone()[0]
                )
            if still != len(ids):
                return False
            touched = sorted(convs)
            self._forgetting(conn, touched, ids, [])
            conn.execute(
                "INSERT INTO archives (name, messages, bytes, text_bytes, sha256, rule,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    written.path.name,
                    len(ids),
                    written.bytes,
                    text_bytes,
                    written.sha256,
                    rule,
                    stamp,
                ),
            )
            (archive_id,) = conn.execute(
                "SELECT archive_id FROM archives WHERE name = ?", (written.path.name,)
            ).fetchone()
            conn.executemany(
                "INSERT INTO archived_messages (message_id, archive_id, member_offset,"
                " member_bytes, line) VALUES (?, ?, ?, ?, ?)",
                [
                    (mid, archive_id, at, length, line)
                    for mid, (at, length, line) in zip(ids, written.places, strict=True)
                ],
            )
            for chunk, marks in in_chunks(ids):
                heads = conn.execute(
                    f"SELECT message_id, content FROM messages WHERE message_id IN ({marks})",
                    chunk,
                ).fetchall()
                conn.executemany(
                    "UPDATE messages SET content = ?, envelope = NULL, metadata = NULL,"
                    " archived_at = ? WHERE message_id = ?",
                    [(stub_of(str(content)), stamp, mid) for mid, content in heads],
                )
                # The tool log keeps the start of each output (what its text filter reads),
                # and each input whole (small; the call's part leaves): read from the parts
                # before they go.
                outputs = conn.execute(
                    f"SELECT e.conversation_id, e.execution_id, {OUTPUT_SQL} FROM tool_executions e"
                    f" WHERE e.result_message_id IN ({marks})",
                    chunk,
                ).fetchall()
                inputs = conn.execute(
                    f"SELECT e.conversation_id, e.execution_id, {INPUT_SQL} FROM tool_executions e"
                    f" WHERE e.call_message_id IN ({marks})",
                    chunk,
                ).fetchall()
                conn.executemany(
                    "UPDATE tool_executions SET output = ? WHERE conversation_id = ?"
                    " AND execution_id = ?",
                    [
                        (None if out is None else stub_of(str(out)), conv, execution)
                        for conv, execution, out in outputs
                    ],
                )
                conn.executemany(
                    "UPDATE tool_executions SET input = ? WHERE conversation_id = ?"
                    " AND execution_id = ?",
                    [(value, conv, execution) for conv, execution, value in inputs],
                )
                conn.execute(f"DELETE FROM message_parts WHERE message_id IN ({marks})", chunk)
            self._forgotten(conn, touched, ids, [])
        return True

    def restore_archived(self, message_ids: Sequence[int]) -> list[str]:
        """Put archived messages' text back in the store (one transaction); the names of the
        archive files that held them (the caller writes each again without them, or deletes
        it: :meth:`rewrite_archive`)."""
        ids = sorted(set(message_ids))
        with self.transaction() as conn:
            found = read_archived(conn, self.archive_dir, ids)
            records: dict[int, dict[str, Any]] = {}
            for mid in ids:
                records[mid] = {"row": found[mid][0], "parts": found[mid][1]}
            tools = archived_tools(conn, self.archive_dir, ids)
            convs = sorted({int(records[m]["row"][1]) for m in ids})
            for conv in convs:
                self._lock_conversation(conn, conv)
            self._forgetting(conn, convs, ids, [])
            for mid in ids:
                row = records[mid]["row"]
                conn.execute(
                    "UPDATE messages SET content = ?, envelope = ?, metadata = ?,"
                    " archived_at = NULL WHERE message_id = ?",
                    (row[4], row[9], row[10], mid),
                )
                parts = [list(p) for p in records[mid]["parts"]]
                if parts:
                    # A part keeps its id unless a part stored since took it (SQLite gives
                    # the next part the largest id stored plus one): then it gets a new one.
                    taken = {
                        int(r[0])
                        for chunk, marks in in_chunks([int(p[0]) for p in parts])
                        for r in conn.execute(
                            f"SELECT part_id FROM message_parts WHERE part_id IN ({marks})",
                            chunk,
                        )
                    }
                    moved = [p for p in parts if int(p[0]) in taken]
                    if moved:
                        first = self._allocate_ids(conn, "message_parts", len(moved))
                        for n, p in enumerate(moved):
                            p[0] = first + n
                    conn.executemany(
                        f"INSERT INTO message_parts ({PART_COLS}, session_id) VALUES"
                        " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                        " (SELECT session_id FROM conversations WHERE conversation_id = ?))",
                        [[*p, row[1]] for p in parts],
                    )
                for conv, execution, column, value in tools.get(mid, []):
                    if column not in ("input", "output"):
                        raise StoreError(f"msg#{mid}'s archive line names a column {column!r}")
                    conn.execute(
                        f"UPDATE tool_executions SET {column} = ?"
                        " WHERE conversation_id = ? AND execution_id = ?",
                        (value, conv, execution),
                    )
            archive_ids = _distinct(conn, "archive_id", "archived_messages", ids)
            for chunk, marks in in_chunks(ids):
                conn.execute(f"DELETE FROM archived_messages WHERE message_id IN ({marks})", chunk)
            self._forgotten(conn, convs, ids, [])
            names = [
                str(r[0])
                for chunk, marks in in_chunks(sorted(archive_ids))
                for r in conn.execute(
                    f"SELECT name FROM archives WHERE archive_id IN ({marks})", chunk
                )
            ]
            self._drop_empty_archives(conn, archive_ids)
            return names

    def rewrite_archive(self, name: str) -> int:
        """Write the archive file *name* again with only the messages still archived in it
        (a forget took some out), then delete the old file; deleted outright when it holds
        none. 1 when a file was written or deleted, 0 when there was nothing to do."""
        folder = self.archive_dir
        if folder is None:
            raise StoreError(f"cannot rewrite archive {name}: no archive folder is known here")
        old = folder / name
        for _ in range(5):
            rows = self.fetchall("SELECT archive_id, rule FROM archives WHERE name = ?", (name,))
            if not rows:
                if not old.exists():
                    return 0
                old.unlink()
                return 1
            archive_id, rule = int(rows[0][0]), rows[0][1]
            ids = [
                int(r[0])
                for r in self.fetchall(
                    "SELECT message_id FROM archived_messages WHERE archive_id = ?"
                    " ORDER BY message_id",
                    (archive_id,),
                )
            ]
            with self.read() as conn:
                found = read_archived(conn, folder, ids)
                tools = archived_tools(conn, self.archive_dir, ids)
            records = [
                {"row": found[m][0], "parts": found[m][1], "tools": tools.get(m, [])} for m in ids
            ]
            written = write_archive(folder, {"rule": rule, "messages": len(ids)}, records)
            try:
                with self.transaction() as conn:
                    now_ids = [
                        int(r[0])
                        for r in conn.execute(
                            "SELECT message_id FROM archived_messages WHERE archive_id = ?"
                            " ORDER BY message_id",
                            (archive_id,),
                        )
                    ]
                    if now_ids != ids:
                        raise _Moved
                    conn.execute(
                        "UPDATE archives SET name = ?, messages = ?, bytes = ?, sha256 = ?"
                        " WHERE archive_id = ?",
                        (written.path.name, len(ids), written.bytes, written.sha256, archive_id),
                    )
                    conn.executemany(
                        "UPDATE archived_messages SET member_offset = ?, member_bytes = ?,"
                        " line = ? WHERE message_id = ?",
                        [
                            (at, n, line, m)
                            for m, (at, n, line) in zip(ids, written.places, strict=True)
                        ],
                    )
            except _Moved:
                written.discard()
                continue
            except BaseException:
                written.discard()
                raise
            written.publish()
            old.unlink(missing_ok=True)
            return 1
        raise StoreError(f"archive {name} kept changing while it was being written again; retry")

    def _unarchive(self, conn: Connection, message_ids: Sequence[int]) -> list[str]:
        """Take *message_ids* out of their archives' records (a forget: their lines must then
        leave the files); the names of the archive files that held any."""
        archive_ids = _distinct(conn, "archive_id", "archived_messages", message_ids)
        if not archive_ids:
            return []
        names = [
            str(r[0])
            for chunk, marks in in_chunks(sorted(archive_ids))
            for r in conn.execute(f"SELECT name FROM archives WHERE archive_id IN ({marks})", chunk)
        ]
        for chunk, marks in in_chunks(list(message_ids)):
            conn.execute(f"DELETE FROM archived_messages WHERE message_id IN ({marks})", chunk)
        self._drop_empty_archives(conn, archive_ids)
        return names

    def _drop_empty_archives(self, conn: Connection, archive_ids: Iterable[int]) -> list[str]:
        """Delete the rows of the archives among *archive_ids* no message is archived in
        (keeping the count of the others true); their names."""
        empty: list[str] = []
        for archive_id in sorted(archive_ids):
            (left,) = conn.execute(
                "SELECT count(*) FROM archived_messages WHERE archive_id = ?", (archive_id,)
            ).fetchone()
            if int(left) == 0:
                (name,) = conn.execute(
                    "SELECT name FROM archives WHERE archive_id = ?", (archive_id,)
                ).fetchone()
                conn.execute("DELETE FROM archives WHERE archive_id = ?", (archive_id,))
                empty.append(str(name))
            else:
                conn.execute(
                    "UPDATE archives SET messages = ? WHERE archive_id = ?", (left, archive_id)
                )
        return empty

    def rename_archive(self, name: str, new: str) -> None:
        """Name the archive *name* *new* (a copy of its file made under that name)."""
        with self.transaction() as conn:
            conn.execute("UPDATE archives SET name = ? WHERE name = ?", (new, name))

    def archives(self) -> list[ArchiveRow]:
        """Every archive file the store names, oldest first."""
        return [
            ArchiveRow(
                int(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4]), str(r[5]), r[6], str(r[7])
            )
            for r in self.fetchall(f"SELECT {_ARCHIVE_COLS} FROM archives ORDER BY archive_id")
        ]

    def archived_holding(self, text: str, conversation_ids: Sequence[int] | None) -> list[int]:
        """The archived messages (of *conversation_ids*, or any) whose text, or a part's
        text, input or output, holds *text* in any case: each archive file holding such
        messages read through. Raises :class:`StoreError` naming a file that cannot be read."""
        folder = self.archive_dir
        if folder is None:
            return []
        wanted = text.casefold()
        if conversation_ids is None:
            names = [a.name for a in self.archives()]
        else:
            names = []
            for chunk, marks in in_chunks(list(conversation_ids)):
                names += [
                    str(r[0])
                    for r in self.fetchall(
                        "SELECT DISTINCT r.name FROM archives r JOIN archived_messages a"
                        " ON a.archive_id = r.archive_id JOIN messages m"
                        f" ON m.message_id = a.message_id WHERE m.conversation_id IN ({marks})",
                        chunk,
                    )
                ]
        convs = None if conversation_ids is None else set(conversation_ids)
        found: list[int] = []
        for name in sorted(set(names)):
            path = folder / name
            try:
                lines = gzip.decompress(path.read_bytes()).split(b"\n")
            except (OSError, EOFError, zlib.error) as exc:
                raise StoreError(
                    f"cannot read the archive file {path} to look for the text in it ({exc}):"
                    " nothing was forgotten; put the file back (`lossless doctor` lists the"
                    " archives it cannot read), or forget by conversation or message range"
                ) from None
            for line in lines[1:]:  # the first is the file's own header
                if not line:
                    continue
                record = json.loads(line)
                msg = record["row"]
                if convs is not None and int(msg[1]) not in convs:
                    continue
                texts = [msg[4]] + [
                    str(v) for p in record["parts"] for v in (p[5], p[8], p[9]) if v
                ]
                if any(wanted in t.casefold() for t in texts):
                    found.append(int(msg[0]))
        live = set(self.archived_ids())
        return [m for m in found if m in live]

    def unfiled_archived(self, limit: int) -> list[int]:
        """Messages marked archived that no archive names, and messages an archive names
        that are not marked archived (at most *limit*)."""
        rows = self.fetchall(
            "SELECT m.message_id FROM messages m WHERE m.archived_at IS NOT NULL AND NOT EXISTS"
            " (SELECT 1 FROM archived_messages a WHERE a.message_id = m.message_id)"
            " UNION SELECT a.message_id FROM archived_messages a LEFT JOIN messages m"
            " ON m.message_id = a.message_id WHERE m.archived_at IS NULL LIMIT ?",
            (limit,),
        )
        return sorted(int(r[0]) for r in rows)

    def archived_ids(self, archive_names: Sequence[str] | None = None) -> list[int]:
        """The archived messages (of the archives named, or of all), in id order."""
        if archive_names is None:
            rows = self.fetchall("SELECT message_id FROM archived_messages ORDER BY message_id")
        else:
            rows = []
            for chunk, marks in in_chunks(list(archive_names)):
                rows += self.fetchall(
                    "SELECT a.message_id FROM archived_messages a JOIN archives r"
                    f" ON r.archive_id = a.archive_id WHERE r.name IN ({marks})",
                    chunk,
                )
            rows.sort()
        return [int(r[0]) for r in rows]
