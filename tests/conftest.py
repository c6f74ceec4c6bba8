"""Shared fixtures: every test gets real SQLite files in its own temporary directory."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep tests away from the user's config and data dirs and LOSSLESS_* settings."""
    for key in list(os.environ):
        if key.startswith("LOSSLESS_") and not key.startswith("LOSSLESS_TEST_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Path of a fresh database file."""
    return tmp_path / "store.db"


#: Where the PostgreSQL tests find their server (``.ci/run`` sets it).
POSTGRES_ENV = "LOSSLESS_TEST_POSTGRES_URL"


def postgres_base_url() -> str:
    """The test server's URL; skips the test, saying why, when none is configured."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(
            f"{POSTGRES_ENV} is not set, so the PostgreSQL back end is not tested here"
            " (.ci/run sets it to the local server)"
        )
    return url


@contextmanager
def postgres_schema(base: str) -> Iterator[str]:
    """A fresh schema of its own for one test: yields a URL whose search path is that schema
    (then ``public``, where ``pg_trgm`` lives), and drops the schema afterwards."""
    import psycopg

    name = f"lossless_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(base, autocommit=True) as conn:
        with contextlib.suppress(psycopg.errors.UniqueViolation):  # another test made it
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        conn.execute(f'CREATE SCHEMA "{name}"')
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options=-csearch_path%3D{name},public"
    finally:
        # An engine the test left open may still be reading the schema (a fixture torn down
        # after this one closes it): the drop can deadlock with it, and is tried again.
        for attempt in range(5):
            try:
                with psycopg.connect(base, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
                break
            except psycopg.errors.DeadlockDetected:
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The back end under test: the suite's behaviour tests run on each."""
    name: str = request.param
    if name == "postgres":
        postgres_base_url()  # skips, saying why, without a server
    return name


@pytest.fixture
def new_db(backend: str, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """``new_db()``: one more fresh store on the back end under test (a SQLite file, or a
    PostgreSQL schema of its own, dropped after the test)."""
    with contextlib.ExitStack() as stack:
        made: list[str] = []

        def make() -> str:
            if backend == "sqlite":
                target = str(tmp_path / f"store-{len(made)}.db")
            else:
                target = stack.enter_context(postgres_schema(postgres_base_url()))
            made.append(target)
            return target

        yield make


@pytest.fixture
def db(new_db: Callable[[], str]) -> str:
    """A fresh store on the back end under test."""
    return new_db()


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    """An engine on a fresh store (each back end in turn) with default settings."""
    with Engine.open(db, config=Config()) as eng:
        yield eng


class CliResult:
    """What one run of the ``lossless`` command printed and returned."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, out={self.out[:200]!r}, err={self.err[:200]!r})"


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Run the real console-script entry point in-process: ``run_cli("stats", "--json")``."""
    import sys

    from lossless.cli.main import main

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["lossless", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


#: The test files that drive real hosts (their own packages, installed once per run).
HOST_FILES = {
    "test_agents_sdk_suite.py",
    "test_host_claude_code.py",
    "test_host_codex.py",
    "test_host_hermes.py",
    "test_host_openclaw.py",
}


@pytest.hookimpl(tryfirst=True)  # (before xdist reads the groups)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``postgres`` marker on every test that runs on the PostgreSQL back end (the
    ``postgres`` case of ``backend``, a test of test_postgres.py, or one asking for a
    server URL), so ``-m postgres`` selects them and ``-m "not postgres"`` leaves them out.

    The real-host tests first, in one group (``-n auto --dist loadgroup``, the README's
    command, runs them one after another on one worker while the others take the rest):
    they are the longest, and each host keeps a core busy, so two at once on a small
    machine would make each other's turns wait."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        fixtures = getattr(item, "fixturenames", ())
        if (
            params.get("backend") == "postgres"
            or item.path.name == "test_postgres.py"
            or "pg_url" in fixtures
        ):
            item.add_marker(pytest.mark.postgres)
        if item.path.name in HOST_FILES:
            item.add_marker(pytest.mark.xdist_group("hosts"))
    items.sort(key=lambda item: item.path.name not in HOST_FILES)  # (a stable sort)


@pytest.fixture(scope="module")
def import_case(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The crash tests' imported reference store (``crash_support.make_import_case``), once
    for each module that asks for it."""
    from crash_support import make_import_case

    return make_import_case(tmp_path_factory)
