"""``lossless migrate-store``: copy a whole store to another back end, ids and DAG intact,
then check the copy with ``doctor``.

The copy itself (its crash-safety guarantees, the tables it copies) is the store's:
:mod:`lossless.store.copy` and :mod:`lossless.store.copy_tables`, re-exported here. What this
module adds is ``doctor``, which lies above the store: :func:`migrate_store` hands it to the
copy as its final check, so a copy that ``doctor`` finds a problem in raises
:class:`CopyMismatchError` and its report lists the problems.
"""

from __future__ import annotations

from collections.abc import Callable

from . import doctor
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
    return copy_store(source, target, batch=batch, progress=progress, check=_doctor_problems)


def _doctor_problems(store: Store) -> list[str]:
    """What ``doctor`` finds in *store*, one line each."""
    return [f"{p.check}: {p.ids} — {p.detail}" for p in doctor.check(store)]
