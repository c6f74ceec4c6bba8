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
