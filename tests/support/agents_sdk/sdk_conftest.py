"""Root conftest of the Agents SDK's session tests run against LosslessSession.

``tests/test_agents_sdk_suite.py`` writes this file as ``conftest.py`` beside the SDK's own
test files (downloaded from PyPI at the installed version). Every test module's
``SQLiteSession`` is replaced by ``lossless_sqlite_shim.SQLiteSession``; the test bodies
read the name at call time, so no test is edited. The tests listed in ``NOT_APPLICABLE``
exercise SQLiteSession's own machinery and are skipped with their reason (docs/agents-sdk.md
lists them).
"""

from __future__ import annotations

import asyncio
import inspect
import os

import lossless_sqlite_shim as shim
import pytest


@pytest.fixture(autouse=True)
def _lossless_sessions(request, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    for key in list(os.environ):
        if key.startswith("LOSSLESS_"):
            monkeypatch.delenv(key)
    if request.module is not None and hasattr(request.module, "SQLiteSession"):
        monkeypatch.setattr(request.module, "SQLiteSession", shim.SQLiteSession)
    try:
        yield
    finally:
        shim.close_all()


def _internals(what):
    return f"exercises SQLiteSession's own machinery ({what}), not the Session protocol"


NOT_APPLICABLE = {
    "test_sqlite_session_close_closes_worker_thread_connections": _internals("_connections"),
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _internals("_connections"),
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _internals(
        "_connections and sqlite3.connect"
    ),
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _internals("_connections"),
    "test_sqlite_session_closed_rejects_empty_add_items": (
        "a LosslessSession has no close(): whoever opened the engine closes it"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _internals(
        "rows corrupted through _locked_connection"
    ),
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _internals(
        "rows corrupted through _locked_connection"
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _internals(
        "rows corrupted through _locked_connection"
    ),
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _internals(
        "rows corrupted through _locked_connection"
    ),
    "test_sqlite_session_file_lock_is_shared_across_instances": _internals("_file_locks"),
    "test_sqlite_session_failed_add_items_releases_write_lock": _internals(
        "its own tables; lossless refuses object() content with UnknownShapeError"
    ),
    "test_sqlite_session_failed_clear_session_rolls_back": _internals(
        "drops the agent_sessions table"
    ),
    "test_sqlite_session_failed_pop_item_releases_write_lock": _internals(
        "drops the agent_messages table"
    ),
    "test_sqlite_session_rollback_failure_evicts_connection": _internals(
        "_connections_lock and a sqlite3.Connection subclass"
    ),
    "test_sqlite_session_close_retries_quarantined_connection": _internals(
        "quarantined sqlite3 connections"
    ),
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": _internals(
        "a sqlite3.Connection subclass; the promise itself is tested in test_openai_agents.py"
    ),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = NOT_APPLICABLE.get(item.originalname)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


try:
    import pytest_asyncio  # noqa: F401
except ImportError:  # run the coroutine tests ourselves, each in a fresh event loop

    def pytest_configure(config):
        config.addinivalue_line("markers", "asyncio: a coroutine test")

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(pyfuncitem):
        if not inspect.iscoroutinefunction(pyfuncitem.obj):
            return None
        names = pyfuncitem._fixtureinfo.argnames
        asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
        return True
