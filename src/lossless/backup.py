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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import doctor
from .errors import LosslessError, StoreError
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


def _check(path: Path) -> tuple[int, int, list[str]]:
    """Counts and ``doctor`` problems of the database at *path*; it is left as one
    self-contained file (rollback journal, no write-ahead log beside it)."""
    with standalone(path) as store:
        problems = [f"{p.check}: {p.ids} — {p.detail}" for p in doctor.check(store)]
        messages = store.row_count("messages")
        summaries = store.row_count("summaries")
    return messages, summaries, problems


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
    try:
        messages, summaries, problems = _check(partial)
    except LosslessError as exc:  # the copy does not read: the store it was copied from
        for path in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            path.unlink(missing_ok=True)
        shutil.rmtree(partial_files, ignore_errors=True)
        raise BackupError(
            f"the store {store.location} is damaged: the copy of it does not read"
            f" ({exc.__cause__ or exc}). Nothing was kept at {target}. Restore the store from"
            f" an earlier backup, or save what is readable with `sqlite3 {store.location}"
            " .recover`"
        ) from exc
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
    """Replace *database* (and *files_dir*) with the backup at *source*, if ``doctor`` finds
    nothing wrong with it; the current ones are kept aside."""
    backup_path = Path(source).expanduser()
    if not backup_path.is_file():
        raise BackupError(
            f"{backup_path} is not a backup file; give the path `lossless backup` wrote"
        )
    staged = Path(str(database) + ".restoring")
    staged.unlink(missing_ok=True)
    staged.touch(mode=0o600)
    _copy(backup_path, staged)  # checked as a copy: the backup itself stays untouched
    try:
        messages, summaries, problems = _check(staged)
    except LosslessError as exc:
        staged.unlink(missing_ok=True)
        raise BackupError(f"{backup_path} cannot be read as a lossless store: {exc}") from exc
    if problems:
        staged.unlink(missing_ok=True)
        raise BackupError(
            f"{backup_path} has {len(problems)} problem(s), nothing was replaced; first:"
            f" {problems[0]}"
        )
    for suffix in ("-wal", "-shm"):
        Path(str(staged) + suffix).unlink(missing_ok=True)
    target = Path(database)
    stamp = now().strftime("%Y%m%dT%H%M%S")
    aside = None
    if target.exists():
        aside = target.with_name(f"{target.name}.before-restore-{stamp}")
        os.replace(target, aside)
        for suffix in ("-wal", "-shm"):
            side = Path(str(target) + suffix)
            if side.exists():
                os.replace(side, Path(str(aside) + suffix))
    os.replace(staged, target)
    source_files = _files_beside(backup_path)
    restored_files = None
    if source_files.is_dir():
        if files_dir.exists():
            os.replace(files_dir, files_dir.with_name(f"{files_dir.name}.before-restore-{stamp}"))
        shutil.copytree(source_files, files_dir, symlinks=True)
        restored_files = str(files_dir)
    return BackupReport(
        str(target),
        restored_files,
        target.stat().st_size,
        messages,
        summaries,
        [],
        None if aside is None else str(aside),
    )
