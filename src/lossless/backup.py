"""Online backups and checked restores of a SQLite store.

``backup`` copies the database with the SQLite backup API — one consistent moment, while
writers keep going — and the large files beside it (they are written once and never changed,
so a plain copy of the directory is consistent with the database: a file written after the
snapshot is simply one the copy does not refer to). The copy is then checked with ``doctor``.

``restore`` checks a backup with ``doctor`` *before* anything is replaced, keeps the current
database (and its files) aside under a ``.before-restore-<time>`` name, and moves the backup
into place with an atomic rename. Stop the hosts writing to the store first: a restore
replaces the file under them.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from . import doctor
from .errors import LosslessError, StoreError
from .ingest.files import write_private
from .store.base import Store
from .store.sqlite import copy_database, standalone
from .timestamps import now

__all__ = ["BackupError", "BackupReport", "backup", "restore"]


class BackupError(LosslessError):
    """A backup or restore that cannot be done (nothing was replaced)."""

    exit_code = 2


@dataclass
class BackupReport:
    """What a backup or restore did."""

    database: str
    files: str | None
    bytes: int
    messages: int
    summaries: int
    problems: list[str] = field(default_factory=list)
    kept_aside: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "database": self.database,
            "files": self.files,
            "bytes": self.bytes,
            "messages": self.messages,
            "summaries": self.summaries,
            "problems": self.problems,
            "kept_aside": self.kept_aside,
        }


def _files_beside(database: Path) -> Path:
    """The large files of a backup: ``<backup>-files`` beside it."""
    return database.with_name(database.name + "-files")


class _Checked(NamedTuple):
    messages: int
    summaries: int
    problems: list[str]
    used: set[str]  # the large files it names, relative to its files folder


def _check(path: Path) -> _Checked:
    """Counts, ``doctor`` problems and named large files of the database at *path*; it is
    left as one self-contained file (rollback journal, no write-ahead log beside it)."""
    with standalone(path) as store:
        return _Checked(
            store.row_count("messages"),
            store.row_count("summaries"),
            [f"{p.check}: {p.ids} — {p.detail}" for p in doctor.check(store)],
            store.storage_paths(),
        )


def _copy(source: Path, dest: Path) -> None:
    """Copy a database file through SQLite (what a write-ahead log beside it holds too)."""
    try:
        copy_database(source, dest)
    except StoreError as exc:
        dest.unlink(missing_ok=True)
        raise BackupError(f"{source} cannot be read as a lossless store: {exc}") from exc


def backup(store: Store, files_dir: Path, dest: str | os.PathLike[str]) -> BackupReport:
    """Copy *store* (and *files_dir*) to *dest* (and ``<dest>-files``), then check the copy.

    The copy is made under a partial name beside *dest* and takes its name only once it is
    whole and checked, so a backup that is killed leaves no *dest* behind (its partial copy is
    cleared by the next run)."""
    target = Path(dest).expanduser()
    if target.exists():
        raise BackupError(f"{target} exists already; back up to a new path (nothing was written)")
    partial = target.with_name(f".{target.name}.partial")
    partial_files = _files_beside(partial)
    for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
        leftover.unlink(missing_ok=True)  # what a killed run left
    shutil.rmtree(partial_files, ignore_errors=True)
    store.backup_to(partial)
    copied_files = None
    if files_dir.is_dir():
        shutil.copytree(files_dir, partial_files, symlinks=True)  # links stay links
        partial_files.chmod(0o700)

    def refuse(why: str) -> BackupError:
        """Clear the partial copy; the error saying the store is damaged and what to do."""
        for path in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            path.unlink(missing_ok=True)
        shutil.rmtree(partial_files, ignore_errors=True)
        return BackupError(
            f"the store {store.location} is damaged ({why}). Nothing was kept at {target}."
            " Restore the store from an earlier backup, or save what is readable with"
            f" `sqlite3 {store.location} .recover`"
        )

    try:
        messages, summaries, problems, _ = _check(partial)
    except LosslessError as exc:  # the copy does not read: the store it was copied from
        raise refuse(f"the copy of it does not read: {exc.__cause__ or exc}") from exc
    damage = [p for p in problems if p.startswith("database file")]
    if damage:  # a copy of damaged pages is damaged: no backup is better than a bad one
        raise refuse(damage[0])
    if partial_files.is_dir():
        copied_files = _files_beside(target)
        os.replace(partial_files, copied_files)
    os.replace(partial, target)  # last: the backup exists once it is whole
    return BackupReport(
        str(target),
        None if copied_files is None else str(copied_files),
        target.stat().st_size,
        messages,
        summaries,
        problems,
    )


def restore(
    source: str | os.PathLike[str], database: str | os.PathLike[str], files_dir: Path
) -> BackupReport:
    """Replace *database* (and the large files in *files_dir*) with the backup at *source*, if
    ``doctor`` finds nothing wrong with it; the current database and its files are kept aside.

    Killed at any point, it leaves *database* whole — the old one or the backup, never neither —
    with every large file it refers to in *files_dir* (at most some that nothing refers to,
    which ``doctor`` lists), and running it again completes it:

    1. the backup is copied beside *database* and checked there;
    2. the backup's large files join *files_dir* one by one, each written whole (files are
       named by their content and never change, so one already there is the same file), after
       the current files are kept aside as hard links;
    3. the current database, settled into its one file, gets a second name aside (a hard
       link), and the checked copy replaces it in one rename;
    4. files the restored database does not refer to leave *files_dir* (they stay aside).
    """
    backup_path = Path(source).expanduser()
    if not backup_path.is_file():
        raise BackupError(
            f"{backup_path} is not a backup file; give the path `lossless backup` wrote"
        )
    target = Path(database)
    staged = Path(str(database) + ".restoring")
    for leftover in (staged, Path(f"{staged}-wal"), Path(f"{staged}-shm")):
        leftover.unlink(missing_ok=True)  # what a killed run left
    staged.touch(mode=0o600)
    _copy(backup_path, staged)  # checked as a copy: the backup itself stays untouched
    try:
        messages, summaries, problems, used = _check(staged)
    except LosslessError as exc:
        staged.unlink(missing_ok=True)
        raise BackupError(f"{backup_path} cannot be read as a lossless store: {exc}") from exc
    if problems:
        staged.unlink(missing_ok=True)
        raise BackupError(
            f"{backup_path} has {len(problems)} problem(s), nothing was replaced; first:"
            f" {problems[0]}"
        )
    stamp = now().strftime("%Y%m%dT%H%M%S")
    aside = target.with_name(f"{target.name}.before-restore-{stamp}")
    if target.exists():
        try:
            _settle(target)
        except BackupError:
            staged.unlink(missing_ok=True)
            raise
        if files_dir.is_dir():  # beside the kept database when they were beside this one
            beside = files_dir == _files_beside(target)
            _link_tree(
                files_dir,
                _files_beside(aside)
                if beside
                else files_dir.with_name(f"{files_dir.name}.before-restore-{stamp}"),
            )
    source_files = _files_beside(backup_path)
    if source_files.is_dir():
        _merge_files(source_files, files_dir)
    kept = _keep_aside(target, aside) if target.exists() else None
    os.replace(staged, target)  # the one step that swaps the database
    if files_dir.is_dir():
        root = files_dir.resolve()
        for path in root.rglob("*"):
            if (path.is_file() or path.is_symlink()) and str(path.relative_to(root)) not in used:
                path.unlink()
    return BackupReport(
        str(target),
        str(files_dir) if files_dir.is_dir() else None,
        target.stat().st_size,
        messages,
        summaries,
        [],
        kept,
    )


#: SQLite's codes for a database file that does not read as SQLite wrote it.
_DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}


def _settle(database: Path) -> None:
    """Move everything the write-ahead log of *database* holds into the file itself, so the
    file alone is the database; refused while another process is writing to it."""
    try:
        with closing(sqlite3.connect(database, timeout=2)) as conn:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except UnicodeDecodeError:
        return  # SQLite's error text quotes damaged bytes that are not text: damaged too
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", None) in _DAMAGED:
            return  # a damaged database is kept aside as it is, log and all
        raise BackupError(
            f"cannot settle {database} before replacing it ({exc}); nothing was replaced"
        ) from exc
    except sqlite3.Error as exc:
        raise BackupError(
            f"cannot settle {database} before replacing it ({exc}); nothing was replaced"
        ) from exc
    if busy:
        raise BackupError(
            f"{database} is in use: stop the agents and servers writing to it, then run the"
            " restore again (nothing was replaced)"
        )


def _keep_aside(database: Path, aside: Path) -> str:
    """Give the settled *database* a second name, *aside*, and move its write-ahead log and
    index beside that name (empty once settled; never to be read with the file that replaces
    it)."""
    _link_or_copy(database, aside)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{database}{suffix}")
        if side.exists():
            _link_or_copy(side, Path(f"{aside}{suffix}"))
            side.unlink()
    return str(aside)


def _link_or_copy(source: Path, dest: Path) -> None:
    """*dest* as a second name of *source* (a copy where the file system has no hard links)."""
    dest.unlink(missing_ok=True)
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def _link_tree(source: Path, dest: Path) -> None:
    """The files under *source*, by the same paths under *dest* (hard links: no copy)."""
    for path in sorted(source.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out = dest / path.relative_to(source)
            out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            _link_or_copy(path, out)


def _merge_files(source: Path, dest: Path) -> None:
    """Each large file of *source* that *dest* lacks, written into *dest* whole (never through
    a symbolic link: a link in a backup is not followed)."""
    for path in sorted(source.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out = dest / path.relative_to(source)
            if not out.exists():
                write_private(out, path.read_bytes())
