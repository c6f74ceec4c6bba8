"""``SQLiteSession`` as the Agents SDK's tests call it, answered by a ``LosslessSession``.

Copied into the build folder of ``tests/test_agents_sdk_suite.py`` as
``lossless_sqlite_shim.py``. A file ``db_path`` is one lossless store beside it (sessions on
the same path share it, as SQLiteSession's do); ``":memory:"`` is a store of the session's
own. Table names are accepted and ignored. ``close()`` releases the store: the SDK's tests
call it, and a LosslessSession leaves its engine to whoever opened it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.integrations.openai_agents import LosslessSession

_guard = threading.Lock()
#: store path -> [engine, users, temporary folder or None]
_open: dict[str, list[Any]] = {}


def _acquire(db_path: str | os.PathLike[str]) -> tuple[str, Engine]:
    with _guard:
        if str(db_path) == ":memory:":
            folder = tempfile.mkdtemp(prefix="lossless-session-")
            key = os.path.join(folder, "store.db")
            _open[key] = [Engine.open(key, config=Config()), 1, folder]
            return key, _open[key][0]
        key = f"{Path(db_path).expanduser().resolve()}.lossless.db"
        entry = _open.setdefault(key, [None, 0, None])
        if entry[0] is None:
            entry[0] = Engine.open(key, config=Config())
        entry[1] += 1
        return key, entry[0]


def _release(key: str) -> None:
    with _guard:
        entry = _open.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _open[key]
    entry[0].close()
    if entry[2] is not None:
        shutil.rmtree(entry[2], ignore_errors=True)


def SQLiteSession(
    session_id: str,
    db_path: str | os.PathLike[str] = ":memory:",
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
    session_settings: Any = None,
) -> LosslessSession:
    del sessions_table, messages_table  # lossless has its own schema
    key, engine = _acquire(db_path)
    try:
        session = LosslessSession(session_id, engine, session_settings=session_settings)
    except BaseException:
        _release(key)
        raise
    released = threading.Event()

    def close() -> None:
        if not released.is_set():
            released.set()
            _release(key)

    session.close = close  # type: ignore[attr-defined]
    return session


def close_all() -> None:
    """Close whatever a test left open."""
    with _guard:
        entries = list(_open.values())
        _open.clear()
    for engine, _users, folder in entries:
        engine.close()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
