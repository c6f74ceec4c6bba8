"""Persistence behind one interface. ``open_store`` picks the back end from a path or URL."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Store
from .sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store", "is_postgres_url", "open_store"]


def is_postgres_url(target: str | os.PathLike[str]) -> bool:
    """Whether *target* names a PostgreSQL database rather than a SQLite file."""
    return os.fspath(target).startswith(("postgresql://", "postgres://"))


def open_store(target: str | os.PathLike[str]) -> Store:
    """Open (creating and migrating as needed) the store at *target*.

    A ``postgresql://`` (or ``postgres://``) URL opens the PostgreSQL back end (the
    ``postgres`` extra); a filesystem path or a ``sqlite:///path`` URL the embedded SQLite
    store.
    """
    text = os.fspath(target)
    if is_postgres_url(text):
        from .postgres import PostgresStore

        return PostgresStore(text)
    if text.startswith("sqlite:///"):
        # sqlite:///relative/path, sqlite:////absolute/path (the SQLAlchemy convention)
        text = text[len("sqlite:///") :]
    return SQLiteStore(Path(text))
