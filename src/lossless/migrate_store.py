"""``lossless migrate-store``: copy a whole store to another back end, ids and DAG intact,
then check the copy with ``doctor``.

The copy itself (its crash-safety guarantees, the tables it copies) is the store's:
:mod:`lossless.store.copy` and :mod:`lossless.store.copy_tables`, re-exported here. What this
module adds is ``doctor``, which lies above the store: :func:`migrate_store` hands it to the
copy as its final check, so a copy that ``doctor`` finds a problem in raises
:class:`CopyMismatchError` and its report lists the problems.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from . import doctor
from .store.archive_files import fresh_archive_name, partial_of
from .store.base import Store
from .store.copy import (
    DEFAULT_BATCH,
    CopyMismatchError,
    MigrationError,
    MigrationProgress,
    MigrationReport,
    TableCount,
    copy_store,
)
from .store.copy_tables import TABLES, Table

__all__ = [
    "DEFAULT_BATCH",
    "TABLES",
    "CopyMismatchError",
    "MigrationError",
    "MigrationProgress",
    "MigrationReport",
    "Table",
    "TableCount",
    "copy_archives",
    "migrate_store",
]


def migrate_store(
    source: Store,
    target: Store,
    *,
    batch: int = DEFAULT_BATCH,
    progress: Callable[[MigrationProgress], None] | None = None,
) -> MigrationReport:
    """Copy every row of *source* into *target*, or finish a copy an earlier run began, and
    check the copy: row counts against the source, then ``doctor``.

    Both stores must be open (which creates and migrates the target) and have the same
    migrations applied. The target must hold nothing, or what an interrupted copy of this
    source left (checked before anything is written; anything else raises
    :class:`MigrationError`). Each batch of *batch* rows is one target transaction. Stop
    whatever writes to the source first. Raises :class:`CopyMismatchError` when the copy's
    row counts differ from the source's or ``doctor`` finds a problem in it.
    """
    report = copy_store(source, target, batch=batch, progress=progress, check=_doctor_problems)
    copy_archives(source, target)
    return report


def copy_archives(source: Store, target: Store) -> int:
    """Copy the archive files *source* names into *target*'s archive folder (when both
    stores know theirs): each written whole under a temporary name, then renamed; one
    already there at its size is left. When both stores keep their archives in the same
    folder, the target's copies get names of their own (its rows renamed), so that neither
    store ever rewrites or deletes a file the other reads. The files copied."""
    here, there = source.archive_dir, target.archive_dir
    if here is None or there is None:
        return 0
    same = here.resolve() == there.resolve()
    targets = {a.name for a in target.archives()}
    copied = 0
    for row in source.archives():
        path = here / row.name
        if not path.is_file() or row.name not in targets:
            continue  # (a row the target no longer has: it was renamed by an earlier run)
        dest = there / (fresh_archive_name() if same else row.name)
        if not same and dest.is_file() and dest.stat().st_size == row.bytes:
            continue
        there.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, partial_of(dest))
        if same:
            target.rename_archive(row.name, dest.name)
        os.replace(partial_of(dest), dest)
        copied += 1
    return copied


def _doctor_problems(store: Store) -> list[str]:
    """What ``doctor`` finds in *store*, one line each."""
    return [f"{p.check}: {p.ids} — {p.detail}" for p in doctor.check(store)]
