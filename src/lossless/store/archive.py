"""Archives: messages whose text retention moved out of the store into a compressed file.

An archive file is gzip (a format every machine reads: ``zcat`` shows it) made of *members*,
each a run of JSON lines of at most :data:`MEMBER_BYTES`; the whole file is one JSONL text.
The first line says what the file is (``{"type": "lossless_archive", ...}``); each other line
is one message as the store held it: its ``messages`` row and its ``message_parts`` rows,
column by column (:data:`~.message_rows.MSG_COLS`, :data:`~.message_rows.PART_COLS`), and the
tool log's input or output it held. A message is read back from the one member holding it
(``archived_messages`` says where: the member's offset and length, the line in it) through the
same code that reads the live tables, so it comes back exactly as it was.

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
import hashlib
import json
import os
import secrets
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..codec import has_lone_surrogates
from ..errors import StoreError
from ..timestamps import format_ts, now
from .connection import Connection
from .core import StoreCore, in_chunks
from .message_rows import MSG_COLS, PART_COLS
from .toollog import INPUT_SQL, OUTPUT_SQL

__all__ = [
    "ARCHIVE_SCRUB",
    "ARCHIVE_TYPE",
    "MEMBER_BYTES",
    "STUB_CHARS",
    "ArchiveRow",
    "ArchiveStore",
    "WrittenArchive",
    "archived_tools",
    "fresh_archive_name",
    "partial_of",
    "read_archived",
    "stub_of",
    "write_archive",
]

#: The ``type`` of an archive file's first line.
ARCHIVE_TYPE = "lossless_archive"
#: The version this module writes and reads.
ARCHIVE_VERSION = 1
#: A member holds lines up to about this many bytes (a message read back decompresses one).
MEMBER_BYTES = 256 * 1024
#: How much of an archived message's text stays in the store (what search still finds).
STUB_CHARS = 80
#: The mark after the start of a text that was cut when its message was archived.
STUB_MARK = " …[archived]"
#: How a forget's scrub names an archive file that held forgotten messages.
ARCHIVE_SCRUB = "archive:"
#: Members kept decompressed (a run of reads of one stretch reads each member once).
_CACHED_MEMBERS = 8


def stub_of(content: str) -> str:
    """What stays in the store of an archived message's *content*: its start."""
    if len(content) <= STUB_CHARS + len(STUB_MARK):
        return content
    return content[:STUB_CHARS] + STUB_MARK


def _line(value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if has_lone_surrogates(text):  # UTF-8 cannot carry half a surrogate pair: escape all
        text = json.dumps(value, separators=(",", ":"))
    return text.encode() + b"\n"


@dataclass(frozen=True)
class WrittenArchive:
    """An archive file as written: where each record is, and the file's facts."""

    #: Its name once :meth:`publish`\ ed (until then it is written as ``NAME.partial``).
    path: Path
    #: Per record, in the order given: (member offset, member length, line in the member).
    places: list[tuple[int, int, int]]
    bytes: int
    sha256: str

    @property
    def partial(self) -> Path:
        return partial_of(self.path)

    def publish(self) -> None:
        """Give the file its name, once the transaction naming it has committed (a read
        that finds only ``NAME.partial`` does this itself: a stop in between loses nothing)."""
        os.replace(self.partial, self.path)
        _sync_folder(self.path.parent)

    def discard(self) -> None:
        """Delete the file (its transaction did not commit)."""
        self.partial.unlink(missing_ok=True)


def fresh_archive_name() -> str:
    """A new archive file's name: when it was made, and a random part."""
    stamp = format_ts(now()).replace(":", "").replace("-", "")[:15]
    return f"archive-{stamp}-{secrets.token_hex(4)}.jsonl.gz"


def partial_of(path: Path) -> Path:
    """Where an archive file is written before its transaction commits."""
    return path.with_name(path.name + ".partial")


def write_archive(
    folder: Path, header: dict[str, Any], records: Sequence[dict[str, Any]]
) -> WrittenArchive:
    """Write *records* (after *header*) to a new archive file in *folder* (as
    ``NAME.partial``: :meth:`WrittenArchive.publish` names it once its transaction has
    committed), flushed to disk, and check that every record reads back as given."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / fresh_archive_name()
    partial = partial_of(path)
    places: list[tuple[int, int, int]] = []
    digest = hashlib.sha256()
    try:
        with partial.open("xb") as out:
            offset = 0
            lines = [_line({"type": ARCHIVE_TYPE, "version": ARCHIVE_VERSION, **header})]
            size = len(lines[0])
            pending: list[int] = []  # the records in the member being filled

            def flush() -> None:
                nonlocal offset, lines, size, pending
                member = gzip.compress(b"".join(lines), compresslevel=9, mtime=0)
                out.write(member)
                digest.update(member)
                first = len(lines) - len(pending)
                for i in range(len(pending)):
                    places.append((offset, len(member), first + i))
                offset += len(member)
                lines, size, pending = [], 0, []

            for index, record in enumerate(records):
                line = _line(record)
                if lines and size + len(line) > MEMBER_BYTES:
                    flush()
                lines.append(line)
                size += len(line)
                pending.append(index)
            if lines:
                flush()
            out.flush()
            os.fsync(out.fileno())
        for record, (at, length, line_no) in zip(records, places, strict=True):
            back = json.loads(_member(str(partial), at, length)[line_no])
            if back != json.loads(_line(record)):
                raise StoreError(f"an archive line did not read back as written ({partial})")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return WrittenArchive(path, places, offset, digest.hexdigest())


def _sync_folder(folder: Path) -> None:
    if os.name == "nt":  # pragma: no cover - folders cannot be opened there
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_members: OrderedDict[tuple[str, int, int], list[str]] = OrderedDict()
_members_lock = threading.Lock()


def _member(path: str, offset: int, length: int) -> list[str]:
    """The lines of one member of an archive file (the last few read are kept)."""
    key = (path, offset, length)
    with _members_lock:
        if key in _members:
            _members.move_to_end(key)
            return _members[key]
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        # Its transaction committed, and the process stopped before naming the file.
        partial = partial_of(Path(path))
        if not partial.is_file():
            raise
        os.replace(partial, path)
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    with handle:
        handle.seek(offset)
        data = handle.read(length)
    if len(data) != length:
        raise ValueError(f"the file ends {length - len(data)} bytes short of a member")
    # Lines end at "\n" only: a JSON string may hold U+2028, U+0085 and the like as they are.
    lines = zlib.decompress(data, wbits=31).decode().split("\n")
    with _members_lock:
        _members[key] = lines
        while len(_members) > _CACHED_MEMBERS:
            _members.popitem(last=False)
    return lines


def _archived_records(
    conn: Connection, folder: Path | None, message_ids: Sequence[int]
) -> dict[int, dict[str, Any]]:
    """Archived messages' lines, by id (``row``, ``parts``, ``tools``); a message no archive
    names, or whose file is missing or unreadable, raises :class:`StoreError` saying so."""
    out: dict[int, dict[str, Any]] = {}
    for chunk, marks in in_chunks(list(message_ids)):
        for mid, name, offset, length, line in conn.execute(
            "SELECT a.message_id, r.name, a.member_offset, a.member_bytes, a.line"
            " FROM archived_messages a JOIN archives r ON r.archive_id = a.archive_id"
            f" WHERE a.message_id IN ({marks})",
            chunk,
        ).fetchall():
            if folder is None:
                raise StoreError(
                    f"msg#{mid} is archived in {name}, and this store was opened without its"
                    " archive folder: read it through lossless (the CLI, the engine)"
                )
            path = folder / str(name)
            try:
                out[int(mid)] = json.loads(_member(str(path), int(offset), int(length))[int(line)])
            except FileNotFoundError:
                raise StoreError(
                    f"msg#{mid} is archived in {path}, which is missing: put the archive file"
                    " back (`lossless doctor` lists every archive it cannot read)"
                ) from None
            except (OSError, ValueError, IndexError, zlib.error) as exc:
                raise StoreError(
                    f"msg#{mid} is archived in {path}, which cannot be read ({exc}): restore"
                    " the file from a copy (`lossless doctor` checks every archive)"
                ) from None
    missing = [m for m in message_ids if m not in out]
    if missing:
        raise StoreError(
            f"msg#{missing[0]} is marked archived but no archive names it: run `lossless doctor`"
        )
    return out


def read_archived(
    conn: Connection, folder: Path | None, message_ids: Sequence[int]
) -> dict[int, tuple[list[Any], list[list[Any]]]]:
    """The stored rows of archived messages, by id: (the ``messages`` row, its parts' rows)."""
    return {
        mid: (record["row"], record["parts"])
        for mid, record in _archived_records(conn, folder, message_ids).items()
    }


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


def archived_tools(
    conn: Connection, folder: Path | None, message_ids: Sequence[int]
) -> dict[int, list[Any]]:
    """What the tool log held of archived messages, by message: ``[conversation id,
    execution id, column, value]`` each, as the log's columns were when they were archived."""
    return {
        mid: record.get("tools", [])
        for mid, record in _archived_records(conn, folder, message_ids).items()
    }


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
