"""Archive files: the format retention moves messages' text out of the store into.

An archive file is gzip (a format every machine reads: ``zcat`` shows it) made of *members*,
each a run of JSON lines of at most :data:`MEMBER_BYTES`; the whole file is one JSONL text.
The first line says what the file is (``{"type": "lossless_archive", ...}``); each other line
is one message as the store held it: its ``messages`` row and its ``message_parts`` rows,
column by column (:data:`~.message_rows.MSG_COLS`, :data:`~.message_rows.PART_COLS`), and the
tool log's input or output it held. A message is read back from the one member holding it
(``archived_messages`` says where: the member's offset and length, the line in it) through the
same code that reads the live tables, so it comes back exactly as it was.

A file is written and flushed to disk under ``NAME.partial`` first and named only once the
transaction that moves its messages has committed (:mod:`.archive`, which moves them).
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..codec import has_lone_surrogates
from ..errors import StoreError
from ..timestamps import format_ts, now
from .connection import Connection
from .core import in_chunks
from .message_rows import MSG_COLS

__all__ = [
    "ARCHIVE_SCRUB",
    "ARCHIVE_TYPE",
    "MEMBER_BYTES",
    "STUB_CHARS",
    "WrittenArchive",
    "archived_texts",
    "archived_tools",
    "fresh_archive_name",
    "partial_of",
    "read_archived",
    "stub_of",
    "write_archive",
]

#: Where a message's text is in its stored row (:data:`~.message_rows.MSG_COLS`).
_CONTENT_COLUMN = [c.strip() for c in MSG_COLS.split(",")].index("content")
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


def archived_texts(
    conn: Connection, folder: Path | None, message_ids: Sequence[int]
) -> dict[int, str]:
    """The whole text of archived messages, by id (their rows keep only its start)."""
    if not message_ids:
        return {}
    at = _CONTENT_COLUMN
    return {mid: str(row[at]) for mid, (row, _) in read_archived(conn, folder, message_ids).items()}


def archived_tools(
    conn: Connection, folder: Path | None, message_ids: Sequence[int]
) -> dict[int, list[Any]]:
    """What the tool log held of archived messages, by message: ``[conversation id,
    execution id, column, value]`` each, as the log's columns were when they were archived."""
    return {
        mid: record.get("tools", [])
        for mid, record in _archived_records(conn, folder, message_ids).items()
    }
