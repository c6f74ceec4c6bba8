"""Persistence behind one interface. ``open_store`` picks the back end from a path or URL."""

from __future__ import annotations

import os
from pathlib import Path

from .sqlite import SQLiteStore

__all__ = ["SQLiteStore", "open_store"]


def open_store(target: str | os.PathLike[str]) -> SQLiteStore:
    """Open (creating and migrating as needed) the store at *target*.

    A filesystem path or a ``sqlite:///path`` URL opens the embedded SQLite store.
    """
    text = os.fspath(target)
    if text.startswith(("postgresql://", "postgres://")):
        from ..errors import StoreError

        raise StoreError(
            "the PostgreSQL back end is not available in this version; use a SQLite file path"
        )
    if text.startswith("sqlite:///"):
        # sqlite:///relative/path, sqlite:////absolute/path (the SQLAlchemy convention)
        text = text[len("sqlite:///") :]
    return SQLiteStore(Path(text))
