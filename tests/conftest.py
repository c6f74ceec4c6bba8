"""Shared fixtures: every test gets real SQLite files in its own temporary directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def engine(db_path: Path) -> Iterator[Engine]:
    """An engine on a fresh SQLite file with default settings."""
    with Engine.open(db_path, config=Config()) as eng:
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
