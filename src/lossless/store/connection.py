"""The connection every aggregate writes its SQL against, whatever the back end.

The store's SQL is written once, with ``?`` placeholders; a back end hands the aggregates a
connection that takes it (SQLite's own ``sqlite3.Connection``; on PostgreSQL a pooled psycopg
connection that translates the placeholders). These protocols are all the aggregates may
use of it, so a new back end knows exactly what to provide.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

__all__ = ["Connection", "Cursor", "Row"]

#: One result row: the selected columns in order (the drivers give tuples).
Row = tuple[Any, ...]


class Cursor(Protocol):
    """The result of one statement."""

    @property
    def rowcount(self) -> int:
        """Rows the statement changed (-1 when the driver cannot tell)."""
        ...

    def fetchone(self) -> Any:
        """The next row, or ``None`` when there is none."""
        ...

    def fetchall(self) -> Any:
        """Every remaining row (a list of :data:`Row`)."""
        ...

    def __iter__(self) -> Iterator[Any]:
        """The remaining rows, one at a time."""
        ...


class Connection(Protocol):
    """A connection inside one of the store's transactions or read snapshots."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor:
        """Run one statement with ``?`` placeholders."""
        ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Cursor:
        """Run one statement once per row of parameters."""
        ...
