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
