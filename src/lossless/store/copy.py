"""Copy a whole store to another back end (``lossless migrate-store``), ids and DAG intact.

The tables copied are described in :mod:`.copy_tables`; this module is the algorithm.

Every table is copied with its ids as they are (message, part, conversation and summary
ids, the summaries' ``rowid`` the search indexes key on), so the summary DAG, the context
and every reference a host kept (``msg#42``, ``sum_...``) mean the same in the copy.

How it stays correct when it is interrupted (an exception, a full disk, ``kill -9``):

* tables are copied one after the other in foreign-key order, each in primary-key order,
  in batches read with keyset pagination; each batch is one transaction of the target, so
  after any interruption the target holds, table by table, a prefix of the source: the
  tables before one table whole, that table's first rows, nothing after it;
* a run first measures that prefix and continues after it, so running the same command
  again finishes the copy and never writes a row twice. A target whose rows are not such a
  prefix (another store, or one written since) is refused before anything is written;
* the source is read under one snapshot, so a copy is of one moment of it.

Generated columns (PostgreSQL's ``content_tsv``), the messages' neighbours in the word index
(its ``context_tsv``) and the search indexes are never copied: the target makes its own
(PostgreSQL keeps them on every write and indexes the neighbours at the end; SQLite's FTS5
tables are rebuilt at the end: :meth:`~.core.StoreCore.finish_bulk_copy`). Then PostgreSQL's
sequences are moved past the copied ids, and the copy is checked: the row count of every table
against the source, and ``doctor`` (which lies above the store: the caller passes it in as
*check*, see :mod:`lossless.migrate_store`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LosslessError, StoreError
from .base import Store
from .copy_tables import TABLES, Table

__all__ = [
    "DEFAULT_BATCH",
    "CopyMismatchError",
    "MigrationError",
    "MigrationProgress",
    "MigrationReport",
    "StoreCheck",
    "TableCount",
    "copy_store",
]

#: A check of a whole store (``doctor``): the problems it finds, one line each.
StoreCheck = Callable[[Store], Sequence[str]]


#: Rows per batch (one target transaction each) unless the caller says otherwise.
DEFAULT_BATCH = 5000
_CHECK_CHUNK = 500  # conversations compared per query when checking a target's prefix


class MigrationError(LosslessError):
    """A store cannot be copied into this target; nothing was written."""

    exit_code = 2


class CopyMismatchError(MigrationError):
    """The copy does not match its source (row counts, or what ``doctor`` finds)."""

    exit_code = 1


@dataclass(frozen=True)
class MigrationProgress:
    """Where a copy is: reported once before the first batch and after every batch."""

    table: str
    #: Rows of this table in the target so far, and in the source.
    table_done: int
    table_total: int
    #: Rows of every table in the target so far (those of earlier runs included), and in
    #: the source.
    done: int
    total: int


@dataclass(frozen=True)
class TableCount:
    """One table after a copy: its rows in the source and the target, and how many of them
    this run wrote (the rest were copied by an interrupted run before it)."""

    table: str
    source_rows: int
    target_rows: int
    copied: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "table": self.table,
            "source_rows": self.source_rows,
            "target_rows": self.target_rows,
            "copied": self.copied,
        }


@dataclass(frozen=True)
class MigrationReport:
    """What :func:`migrate_store` did, and what the check of the copy found."""

    source: str
    target: str
    tables: tuple[TableCount, ...]
    #: Whether the target already held part of the copy (an interrupted run's).
    resumed: bool
    #: Row counts equal in every table (a copy that fails this raises instead).
    counts_match: bool
    #: What ``doctor`` found in the target (a copy with problems raises instead).
    doctor_problems: tuple[str, ...]

    @property
    def copied(self) -> int:
        """Rows this run wrote."""
        return sum(t.copied for t in self.tables)

    @property
    def rows(self) -> int:
        """Rows the target holds, in all."""
        return sum(t.target_rows for t in self.tables)

    @property
    def verified(self) -> bool:
        """Whether the copy passed its check."""
        return self.counts_match and not self.doctor_problems

    def count(self, table: str) -> int:
        """Rows of *table* in the target."""
        return next(t.target_rows for t in self.tables if t.table == table)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "source": self.source,
            "target": self.target,
            "resumed": self.resumed,
            "copied": self.copied,
            "rows": self.rows,
            "tables": [t.to_dict() for t in self.tables],
            "verified": self.verified,
            "counts_match": self.counts_match,
            "doctor_problems": list(self.doctor_problems),
        }


@dataclass(frozen=True)
class _Step:
    """What a run does to one table: the rows there are, and where to continue."""

    table: Table
    source_rows: int
    target_rows: int  # before this run (of a seeded table: those equal to the source's)
    resume_after: tuple[Any, ...] | None


def copy_store(
    source: Store,
    target: Store,
    *,
    batch: int = DEFAULT_BATCH,
    progress: Callable[[MigrationProgress], None] | None = None,
    check: StoreCheck | None = None,
) -> MigrationReport:
    """Copy every row of *source* into *target*, or finish a copy an earlier run began.

    Both stores must be open (which creates and migrates the target) and have the same
    migrations applied. The target must hold nothing, or what an interrupted copy of this
    source left (checked before anything is written; anything else raises
    :class:`MigrationError`). Each batch of *batch* rows is one target transaction. Stop
    whatever writes to the source first. Raises :class:`CopyMismatchError` when the copy's
    row counts differ from the source's or *check* (``doctor``, given by the caller: it lies
    above the store) finds a problem in it; without *check* only the row counts are
    compared.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, not {batch}")
    _check_distinct(source, target)
    _check_migrations(source, target)
    report_progress = progress or (lambda _p: None)
    failures: tuple[type[Exception], ...] = (StoreError, *source.errors, *target.errors)
    copied: dict[str, int] = {}
    with source.read():  # one snapshot of the source for the whole run
        steps = _plan(source, target)
        total = sum(s.source_rows for s in steps)
        done = sum(s.target_rows for s in steps)
        first = steps[0].table.name
        report_progress(
            MigrationProgress(first, steps[0].target_rows, steps[0].source_rows, done, total)
        )
        for step in steps:
            table_done = step.target_rows

            def advance(rows: int, step: _Step = step) -> None:
                nonlocal done, table_done
                done += rows
                table_done += rows
                report_progress(
                    MigrationProgress(step.table.name, table_done, step.source_rows, done, total)
                )

            try:
                copied[step.table.name] = _copy_table(source, target, step, batch, advance)
                if step.table.deferred:
                    _fill_deferred(source, target, step.table, batch)
            except failures as exc:
                raise StoreError(
                    f"the copy stopped in table {step.table.name}: {exc}. What was copied"
                    " before is kept: run the same command again to continue from there"
                ) from exc
    # Ready for writers and searches: PostgreSQL's id generators continue after the copied
    # ids; SQLite's full-text indexes are built from the copied text.
    target.finish_bulk_copy()
    return _verify(
        source,
        target,
        copied,
        resumed=any(s.target_rows for s in steps if not s.table.seeded),
        check=check,
    )


# --- checks before anything is written -------------------------------------------------------


def _where(store: Store) -> tuple[str, str]:
    path = getattr(store, "path", None)  # a SQLite file, named however it was named
    return store.backend, str(path.resolve()) if isinstance(path, Path) else store.location


def _check_distinct(source: Store, target: Store) -> None:
    if _where(source) == _where(target):
        raise MigrationError(
            f"the source and the target are the same store ({source.location}); name another target"
        )


def _check_migrations(source: Store, target: Store) -> None:
    in_source, in_target = source.applied_migrations(), target.applied_migrations()
    if in_source == in_target:
        return
    only_source = sorted(set(in_source) - set(in_target))
    only_target = sorted(set(in_target) - set(in_source))
    detail = "; ".join(
        part
        for part in (
            f"only the source has {', '.join(only_source)}" if only_source else "",
            f"only the target has {', '.join(only_target)}" if only_target else "",
        )
        if part
    )
    raise MigrationError(
        f"the source ({source.location}) and the target ({target.location}) have different"
        f" schema migrations ({detail}); open both with the same version of lossless (which"
        " brings an older store up to date) and run the command again"
    )


def _count(store: Store, table: Table) -> int:
    return store.row_count(table.name)


def _refuse(target: Store, source: Store, why: str) -> MigrationError:
    return MigrationError(
        f"the target {target.location} already holds data that is not part of a copy of"
        f" {source.location}: {why}. Nothing was written. Name a new, empty target (one that"
        " an interrupted copy of this source left is simply continued)"
    )


def _plan(source: Store, target: Store) -> list[_Step]:
    """The rows each table has in the source and the target, and where its copy continues;
    raises, before anything is written, when the target is not a prefix of the source."""
    _check_conversations(source, target)  # first: says most plainly what the target is
    steps: list[_Step] = []
    partial: str | None = None  # the first table the target holds only part of
    for table in TABLES:
        in_source = _count(source, table)
        if table.seeded:
            present = _rows_by_key(target, table)
            same = sum(present.get(k) == row for k, row in _rows_by_key(source, table).items())
            steps.append(_Step(table, in_source, same, None))
            continue
        in_target = _count(target, table)
        if in_target > in_source:
            raise _refuse(
                target, source, f"its {table.name} has {in_target} rows, the source's {in_source}"
            )
        resume = None
        if in_target:
            if partial is not None:
                raise _refuse(
                    target,
                    source,
                    f"it holds rows of {table.name} but only part of {partial}, which a copy"
                    " finishes first",
                )
            resume = _prefix_end(source, target, table, in_target)
        if in_target < in_source and partial is None:
            partial = table.name
        steps.append(_Step(table, in_source, in_target, resume))
    return steps


def _prefix_end(source: Store, target: Store, table: Table, rows: int) -> tuple[Any, ...]:
    """The key of the last row the target holds of *table*, checked to be the source's
    *rows*-th row (in the source's key order, whatever the target's collation) with the same
    values; the copy continues after it."""
    cols, key = table.column_list, table.key
    ((*found,),) = source.fetchall(
        f"SELECT {cols} FROM {table.name} ORDER BY {', '.join(key)} LIMIT 1 OFFSET ?",
        (rows - 1,),
    )
    at = tuple(found[i] for i in table.positions(key))
    match = " AND ".join(f"{k} = ?" for k in key)
    held = target.fetchall(f"SELECT {cols} FROM {table.name} WHERE {match}", at)
    shown = ", ".join(f"{k} {v!r}" for k, v in zip(key, at, strict=True))
    if not held:
        raise _refuse(target, source, f"its {table.name} has no row {shown}")
    compared = [i for i, c in enumerate(table.columns) if c not in table.deferred]
    differ = [table.columns[i] for i in compared if found[i] != held[0][i]]
    if differ:
        raise _refuse(
            target,
            source,
            f"row {shown} of {table.name} differs from the source's in {', '.join(differ)}",
        )
    if table.integer_key:
        # Integer keys order alike everywhere: nothing of the target may lie beyond the row.
        beyond = target.fetchall(f"SELECT 1 FROM {table.name} WHERE {_after(key)} LIMIT 1", at)
        if beyond:
            raise _refuse(target, source, f"its {table.name} has rows the source lacks")
    return at


def _check_conversations(source: Store, target: Store) -> None:
    """Every conversation of the target is the source's with the same id (by session id)."""
    after = 0
    while True:
        in_target = target.fetchall(
            "SELECT conversation_id, session_id FROM conversations WHERE conversation_id > ?"
            " ORDER BY conversation_id LIMIT ?",
            (after, _CHECK_CHUNK),
        )
        if not in_target:
            return
        marks = ",".join("?" * len(in_target))
        in_source: dict[int, str] = dict(
            source.fetchall(
                "SELECT conversation_id, session_id FROM conversations"
                f" WHERE conversation_id IN ({marks})",
                [r[0] for r in in_target],
            )
        )
        for conv, session in in_target:
            if in_source.get(conv) != session:
                other = in_source.get(conv)
                raise _refuse(
                    target,
                    source,
                    f"its conversation {conv} is session {session!r}, the source's "
                    + ("does not exist" if other is None else f"is session {other!r}"),
                )
        after = in_target[-1][0]


# --- the copy ----------------------------------------------------------------------------------


def _rows_by_key(store: Store, table: Table) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Every row of a (small) table by its key."""
    key_at = table.positions(table.key)
    return {
        tuple(row[i] for i in key_at): tuple(row)
        for row in store.fetchall(f"SELECT {table.column_list} FROM {table.name}")
    }


def _after(key: Sequence[str]) -> str:
    """The keyset condition "after this key" (a row-value comparison for composite keys)."""
    if len(key) == 1:
        return f"{key[0]} > ?"
    return f"({', '.join(key)}) > ({', '.join('?' * len(key))})"


def _copy_table(
    source: Store, target: Store, step: _Step, batch: int, advance: Callable[[int], None]
) -> int:
    """Copy the rows of *step*'s table after its resume point, a batch per target
    transaction; returns the rows written."""
    table = step.table
    order = ", ".join(table.key)
    select = f"SELECT {table.column_list} FROM {table.name}"
    insert = (
        f"INSERT INTO {table.name} ({table.column_list})"
        f" VALUES ({', '.join('?' * len(table.columns))})"
    )
    if table.seeded:
        updates = ", ".join(f"{c} = excluded.{c}" for c in table.columns if c not in table.key)
        insert += f" ON CONFLICT ({', '.join(table.key)}) DO UPDATE SET {updates}"
    if table.seeded:
        ours = _rows_by_key(target, table)
        changed = [r for k, r in _rows_by_key(source, table).items() if ours.get(k) != r]
        if changed:
            with target.transaction() as conn:
                conn.executemany(insert, changed)
            advance(len(changed))
        return len(changed)
    key_at = table.positions(table.key)
    nulled = table.positions(table.deferred)
    after = step.resume_after
    written = 0
    while True:
        if after is None:
            rows = source.fetchall(f"{select} ORDER BY {order} LIMIT ?", (batch,))
        else:
            rows = source.fetchall(
                f"{select} WHERE {_after(table.key)} ORDER BY {order} LIMIT ?", (*after, batch)
            )
        if not rows:
            return written
        values = [
            tuple(None if i in nulled else v for i, v in enumerate(row)) for row in rows
        ] if nulled else rows  # fmt: skip
        with target.transaction() as conn:
            conn.executemany(insert, values)
        written += len(rows)
        advance(len(rows))
        if len(rows) < batch:
            return written
        after = tuple(rows[-1][i] for i in key_at)


def _fill_deferred(source: Store, target: Store, table: Table, batch: int) -> None:
    """Set the deferred columns of *table* to the source's values, now that every row they
    can point at is there. Every run checks them; only values the target lacks are written."""
    (key,) = table.key
    cols = ", ".join((key, *table.deferred))
    present = " OR ".join(f"{c} IS NOT NULL" for c in table.deferred)
    update = (
        f"UPDATE {table.name} SET {', '.join(f'{c} = ?' for c in table.deferred)} WHERE {key} = ?"
    )
    after: Any = None
    while True:
        rows = source.fetchall(
            f"SELECT {cols} FROM {table.name} WHERE ({present})"
            + ("" if after is None else f" AND {key} > ?")
            + f" ORDER BY {key} LIMIT ?",
            (batch,) if after is None else (after, batch),
        )
        if not rows:
            return
        current: dict[Any, tuple[Any, ...]] = {}
        for start in range(0, len(rows), _CHECK_CHUNK):
            chunk = [r[0] for r in rows[start : start + _CHECK_CHUNK]]
            marks = ",".join("?" * len(chunk))
            for r in target.fetchall(
                f"SELECT {cols} FROM {table.name} WHERE {key} IN ({marks})", chunk
            ):
                current[r[0]] = tuple(r[1:])
        stale = [(*r[1:], r[0]) for r in rows if current.get(r[0]) != tuple(r[1:])]
        if stale:
            with target.transaction() as conn:
                conn.executemany(update, stale)
        if len(rows) < batch:
            return
        after = rows[-1][0]


# --- the check of the copy -------------------------------------------------------------------


def _verify(
    source: Store,
    target: Store,
    copied: dict[str, int],
    *,
    resumed: bool,
    check: StoreCheck | None,
) -> MigrationReport:
    counts = tuple(
        TableCount(table.name, _count(source, table), _count(target, table), copied[table.name])
        for table in TABLES
    )
    differ = [c for c in counts if c.source_rows != c.target_rows]
    if differ:
        raise CopyMismatchError(
            "the copy does not match its source: "
            + "; ".join(
                f"{c.table} has {c.source_rows} rows in the source, {c.target_rows} in the target"
                for c in differ
            )
            + ". Did something write to the source while it was copied? Stop it, copy into"
            " a new, empty target, and check again"
        )
    problems = tuple(check(target)) if check is not None else ()
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" * (len(problems) > 5))
        raise CopyMismatchError(
            f"the copy in {target.location} has {len(problems)} problem(s) doctor finds: {shown}."
            f" Check the source too (lossless --db '{source.location}' doctor): a copy keeps"
            " what its source has"
        )
    return MigrationReport(
        source=source.location,
        target=target.location,
        tables=counts,
        resumed=resumed,
        counts_match=True,
        doctor_problems=problems,
    )
