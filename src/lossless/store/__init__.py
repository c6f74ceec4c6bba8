"""Persistence behind one interface. ``open_store`` picks the back end from a path or URL."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import NoStore
from .base import Store
from .core import DEFER_TRIGRAM_AT
from .sqlite import SQLiteStore

__all__ = ["DEFER_TRIGRAM_AT", "NoStore", "SQLiteStore", "Store", "is_postgres_url", "open_store"]


def is_postgres_url(target: str | os.PathLike[str]) -> bool:
    """Whether *target* names a PostgreSQL database rather than a SQLite file."""
    return os.fspath(target).startswith(("postgresql://", "postgres://"))


def open_store(target: str | os.PathLike[str], *, create: bool = True) -> Store:
    """Open (creating and migrating as needed) the store at *target*.

    A ``postgresql://`` (or ``postgres://``) URL opens the PostgreSQL back end (the
    ``postgres`` extra); a filesystem path or a ``sqlite:///path`` URL the embedded SQLite
    store. With *create* false, a store that does not exist yet is a :class:`NoStore`
    error (nothing is made: a mistyped path is not a new, empty store).
    """
    text = os.fspath(target)
    if is_postgres_url(text):
        from .postgres import PostgresStore

        return PostgresStore(text, create=create)
    if text.startswith("sqlite:///"):
        # sqlite:///relative/path, sqlite:////absolute/path (the SQLAlchemy convention)
        text = text[len("sqlite:///") :]
    if not create and text != ":memory:" and not Path(text).exists():
        raise NoStore(
            f"no lossless store at {text}: check --db (or LOSSLESS_DB); `lossless import`, a"
            " host's first turn or Engine.open makes one"
        )
    return SQLiteStore(Path(text))
