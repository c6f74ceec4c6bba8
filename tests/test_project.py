"""The project's own promises: README commands, CI script, docs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None, "the README must open with a bash block of two commands"
    assert text.index(block.group(0)) < 40, "the commands must be the README's first lines"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_a_demo_command_and_a_test_command() -> None:
    demo, tests = _readme_commands()
    assert "lossless demo" in demo
    assert "pytest" in tests


def test_ci_runs_the_readmes_test_command() -> None:
    _, tests = _readme_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci


def test_every_public_name_is_documented() -> None:
    import lossless

    for name in lossless.__all__:
        if name.startswith("__"):
            continue
        obj = getattr(lossless, name)
        assert getattr(obj, "__doc__", None), f"lossless.{name} has no docstring"


SHELLS = ("cli", "tui", "integrations", "mcp_server.py", "sync.py", "replay.py")


def test_the_shells_use_the_engine_never_its_store_or_services() -> None:
    """The CLI, the TUI, the MCP server and the host integrations talk to the engine's
    public methods: none reads ``.store`` or ``.services`` of anything (the core's
    layering, which import-linter checks, would not see an attribute reached through)."""
    import ast

    src = Path(__file__).resolve().parents[1] / "src" / "lossless"
    offenders = []
    for shell in SHELLS:
        root = src / shell
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in ("store", "services"):
                    offenders.append(f"{path.relative_to(src)}:{node.lineno} .{node.attr}")
    assert offenders == []


def test_the_package_says_its_licence_and_ships_what_it_needs() -> None:
    """A maintainer would sign the packaging: the licence file, an `all` extra that installs
    every user extra (Hermes Agent's apart), and no repository binary in the sdist."""
    import fnmatch
    import subprocess
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["license"] == "Apache-2.0" and (ROOT / "LICENSE").is_file()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert project["license-files"] == ["LICENSE"]
    extras = project["optional-dependencies"]
    user = set(extras) - {"all", "test", "bench", "dev", "hermes"}
    named = {
        name.strip()
        for spec in extras["all"]
        for name in spec.removeprefix("lossless[").removesuffix("]").split(",")
    }
    assert named == user
    excluded = meta["tool"]["hatch"]["build"]["targets"]["sdist"]["exclude"]
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    binaries = [f for f in tracked if f.endswith((".db", ".sqlite"))]
    assert binaries and all(any(fnmatch.fnmatch(f, pat) for pat in excluded) for f in binaries)


def test_the_schema_page_names_every_table_and_column() -> None:
    """docs/schema.md (for datasette and sqlite-utils users) keeps up with the migrations."""
    import re
    import sqlite3

    from lossless.store.migrations import MIGRATIONS
    from lossless.store.sqlite_files import MIGRATIONS_TABLE

    doc = (ROOT / "docs" / "schema.md").read_text()
    conn = sqlite3.connect(":memory:")
    conn.execute(MIGRATIONS_TABLE)
    for _, migration in MIGRATIONS:
        migration(conn)
    shadow = re.compile(r"_(data|idx|docsize|config|content)$")
    missing = []
    for (table,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        " AND name NOT LIKE 'sqlite_%'"
    ):
        if shadow.search(table):
            continue
        if f"`{table}`" not in doc:
            missing.append(table)
            continue
        if table.endswith(("_fts", "_trigram")) or table == "message_words":
            continue
        for column in conn.execute(f"PRAGMA table_xinfo({table})"):
            if f"`{column[1]}`" not in doc:
                missing.append(f"{table}.{column[1]}")
    assert missing == []


def test_the_postgres_marker_selects_the_postgresql_cases() -> None:
    import subprocess
    import sys

    def collected(*args: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/test_forget.py", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        return [line for line in done.stdout.splitlines() if "::" in line]

    chosen, others = collected("-m", "postgres"), collected("-m", "not postgres")
    assert chosen and all("[postgres" in t for t in chosen)
    assert others and not any("[postgres" in t for t in others)
