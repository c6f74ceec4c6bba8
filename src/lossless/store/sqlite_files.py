"""The SQLite database file itself: copying it, making it owner-only, and telling a damaged
file, a full disk or a read-only one from other failures, with what to do about each."""

from __future__ import annotations

import functools
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from ..errors import StoreError
from .migrations import MIGRATIONS

__all__ = [
    "MIGRATIONS_TABLE",
    "PROGRESS_STEPS",
    "copy_database",
    "interrupted",
    "let_signals_in",
    "not_sqlite",
    "scrub_failed",
]

#: The table of the migrations a database has had.
MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
)


def copy_database(source: Path, dest: Path) -> None:
    """Copy the SQLite database at *source* into the file *dest* through SQLite, so what a
    write-ahead log beside *source* holds is in the copy too. *source* is opened read-only
    and left as it was; raises :class:`StoreError` when it cannot be read as a database
    (*dest* may then hold part of a copy: the caller removes it)."""
    try:
        with (
            closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)) as src,
            closing(sqlite3.connect(dest)) as dst,
        ):
            src.backup(dst)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot copy the database {source}: {exc}") from exc


#: SQLite's codes for a damaged file: a page that does not read as SQLite wrote it.
_DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}


def _damage(path: Path, exc: BaseException) -> StoreError | None:
    """A read or write that met a damaged database file, as a StoreError saying what to do
    (``None`` for any other failure)."""
    if isinstance(exc, UnicodeDecodeError) and _raised_in_store(exc):
        return _damaged(
            path, "SQLite's message about it quotes bytes of the file that are not text"
        )
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    # A stored text that is not UTF-8 any more: the store writes only text it encoded so.
    undecodable = str(exc).startswith("Could not decode to UTF-8")
    if code in _DAMAGED or "malformed" in str(exc) or undecodable:
        return _damaged(path, str(exc)[:160])
    if str(exc).startswith(("no such column", "no such table")):
        # The store's own statements name what its migrations made: a name the file lacks
        # is damage (or another program's change) when the file's schema says so too; when
        # it has everything the migrations make, the statement is wrong, and it is raised.
        missing = _missing_schema(path)
        if missing:
            return _damaged(path, f"{exc}: its schema lacks {missing}")
    return None


@functools.cache
def _made_schema() -> dict[str, frozenset[str]]:
    """The tables every store has once migrated, with their columns (read from an in-memory
    database the migrations are applied to)."""
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(MIGRATIONS_TABLE)
        for _, migration in MIGRATIONS:
            migration(conn)
        return _schema(conn)


def _schema(conn: sqlite3.Connection) -> dict[str, frozenset[str]]:
    """The tables and views of a database, each with its column names."""
    names = [
        str(n)
        for (n,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            " AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {
        n: frozenset(str(c[1]) for c in conn.execute(f"PRAGMA table_xinfo('{n}')")) for n in names
    }


def _missing_schema(path: Path) -> str | None:
    """What the database file at *path* lacks of what the migrations make (a table, or a
    table's columns, named), or ``None`` when it has it all or cannot be read so."""
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            found = _schema(conn)
            applied = {str(n) for (n,) in conn.execute("SELECT name FROM migrations")}
    except (sqlite3.Error, UnicodeDecodeError, OSError):
        return None
    if applied - {name for name, _ in MIGRATIONS}:
        return None  # made by a newer lossless: its schema is not this one's to judge
    lacks = []
    for table, columns in sorted(_made_schema().items()):
        if table not in found:
            lacks.append(f"the table {table}")
        elif gone := sorted(columns - found[table]):
            lacks.append(f"the column {', '.join(gone)} of {table}")
    return "; ".join(lacks[:3]) or None


def _raised_in_store(exc: BaseException) -> bool:
    """Whether *exc* was raised right in the store's own code (by a call into ``sqlite3``,
    whose messages about a damaged file may quote its bytes), not in a caller's."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return Path(tb.tb_frame.f_code.co_filename).parent == Path(__file__).parent


def _damaged(path: Path, what: str) -> StoreError:
    """The error for a damaged database file: what was wrong, and the ways out."""
    return StoreError(
        f"the database {path} is damaged ({what}); nothing was written. Restore it from a"
        f" backup (lossless restore BACKUP), or save what is readable with"
        f" `sqlite3 {path} .recover` into a new file and import that"
    )


def _write_error(path: Path, exc: sqlite3.OperationalError) -> StoreError:
    """A failed write as a StoreError that says what happened and what to do (the
    transaction was rolled back: nothing of it is stored)."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code == sqlite3.SQLITE_FULL:
        return StoreError(
            f"cannot write to {path}: the disk is full (or the database reached its size"
            " limit); nothing of this write was stored. Free up disk space and try again"
        )
    if code == sqlite3.SQLITE_READONLY:
        return StoreError(
            f"cannot write to {path}: the database is read-only; nothing of this write was"
            " stored. Check the permissions of the file and of its folder (SQLite writes its"
            " -wal and -shm files beside it), or open a writable copy"
        )
    return StoreError(f"cannot write to {path}: {exc}; nothing of this write was stored")


#: SQLite's virtual-machine steps between two calls of :func:`let_signals_in` (about a
#: millisecond of work): how long a statement can keep Ctrl-C waiting.
PROGRESS_STEPS = 50_000


def let_signals_in() -> int:
    """SQLite's progress handler on every connection: a call into Python now and then, so a
    signal (Ctrl-C) is handled while a long statement runs, not after it. A handler that
    raises (KeyboardInterrupt) makes SQLite stop the statement (``interrupted``)."""
    return 0


def interrupted(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt a statement stopped by Ctrl-C stands for (SQLite reports it as
    ``interrupted``; the interrupt itself was raised inside its progress handler)."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if isinstance(exc, sqlite3.OperationalError) and code == sqlite3.SQLITE_INTERRUPT:
        return KeyboardInterrupt()
    return None


def scrub_failed(path: Path | None, exc: BaseException) -> StoreError:
    """A scrub of freed space (merging the indexes, VACUUM, emptying the log) that stopped:
    what stopped it. What was committed before it stays; the scrub can run again."""
    cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc
    code = (getattr(cause, "sqlite_errorcode", None) or 0) & 0xFF
    if code == sqlite3.SQLITE_FULL or "disk is full" in str(cause):
        why = "the disk is full (VACUUM needs free space about the size of the database)"
    elif code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        why = "another process held the database for longer than the wait allows"
    else:
        why = str(cause)
    return StoreError(f"cannot scrub the space freed in {path}: {why}")


#: The first bytes of every SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\x00"


def not_sqlite(path: Path) -> StoreError | None:
    """The error for a file that is not a SQLite database (a transcript named as the store,
    say), or ``None`` (no file, an empty one, or a SQLite database)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except OSError as exc:
        return StoreError(f"cannot read the database {path}: {exc.strerror}")
    if not head or head == SQLITE_MAGIC:
        return None
    shown = head.decode("utf-8", "replace").replace("\n", " ")[:12]
    if head.lstrip()[:1] in (b"{", b"["):
        why = (
            f"it begins {shown!r}, like a JSON transcript: import it with `lossless import"
            f" {path}`, and give the store's own path with --db (or LOSSLESS_DB)"
        )
    else:
        why = (
            f"it begins {shown!r}: check --db (or LOSSLESS_DB); if it is your store, its first"
            " bytes are damaged: restore the latest backup (lossless restore BACKUP)"
        )
    return StoreError(f"{path} is not a SQLite database, so not a lossless store; {why}")


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
