"""The documented examples run, and print what the docs say they print.

A fenced block right after a line ``<!-- checked: run in examples/ ... -->`` (in the README or
any page of docs/) is a session at a shell: each ``$ `` line a command, the lines after it
what it prints (stdout and stderr together, as a terminal shows them). The test runs the
block's commands in order, in a folder holding a copy of ``examples/`` (the inputs the docs
use), with this checkout's ``lossless`` first on the PATH, and compares each command's
output with the block's after making both free of what changes from run to run (times,
durations, summary ids). A block that drifts from what the CLI prints fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- checked: run in examples/.*-->$")
SEPARATOR = "@@lossless-doc-example@@"

#: What changes from one run to the next, and what it is compared as.
VOLATILE = [
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?Z?"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)? (s|ms)\b"), "<duration>"),
    (re.compile(r"\bsum_[0-9a-f]{16}\b"), "sum_<id>"),
]


def blocks() -> list[tuple[str, list[str]]]:
    """Every checked block: where it is (file:line), and its lines."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if MARKER.match(line.strip()) and lines[i + 1].startswith("```"):
                end = lines.index("```", i + 2)
                found.append((f"{page.relative_to(ROOT)}:{i + 2}", lines[i + 2 : end]))
    return found


def sessions(lines: list[str]) -> list[tuple[str, list[str]]]:
    """A block as (command, what it prints) pairs."""
    out: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def calm(lines: list[str]) -> list[str]:
    text = "\n".join(line.rstrip() for line in lines).strip("\n")
    for pattern, stands_for in VOLATILE:
        text = pattern.sub(stands_for, text)
    return text.splitlines()


def test_there_are_checked_examples() -> None:
    assert len(blocks()) >= 1


@pytest.mark.parametrize(("where", "lines"), blocks(), ids=[w for w, _ in blocks()])
def test_a_documented_example_prints_what_the_docs_say(
    where: str, lines: list[str], tmp_path: Path
) -> None:
    work = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", work)
    steps = sessions(lines)
    assert steps, f"{where}: a checked block with no command"
    script = []
    for command, _ in steps:
        # Each command's exit status is the next one's $? (echo $? shows it).
        script += [command, "rc=$?", f"echo {SEPARATOR}", "(exit $rc)"]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LOSSLESS_")},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "NO_COLOR": "1",
    }
    env.pop("COLUMNS", None)
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    printed = done.stdout.split(SEPARATOR + "\n")
    for (command, expected), got in zip(steps, printed, strict=False):
        assert calm(got.splitlines()) == calm(expected), f"{where}: $ {command}"
