"""The documented examples run, and print what the docs say they print.

A fenced block right after a line ``<!-- checked: run in examples/ ... -->`` (in the README or
any page of docs/) is a session at a shell: each ``$ `` line a command, the lines after it
what it prints (stdout and stderr together, as a terminal shows them). The test runs the
block's commands in order, in a folder holding a copy of ``examples/`` (the inputs the docs
use), with this checkout's ``lossless`` (and its ``python``) first on the PATH, and compares
each command's output with the block's after making both free of what changes from run to
run (times, durations, summary and grant ids, the tags of masked secrets, versions). A block
that drifts from what the CLI prints fails here. A block whose output holds a fence of its
own (a markdown export) is fenced with four backticks.

The commands run in ``HOME/examples``, HOME a fresh folder: the hosts' folders
(``~/.claude`` and the like) and lossless's own data, config and log folders are under it,
none of the machine's. The output names HOME ``/home/me`` (and the folder of this checkout's
``lossless``, which hooks name by its path, ``/home/me/.venv/bin``). No ``LOSSLESS_*``
variable is passed on, no host's (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``, ...), no
``COLUMNS``; ``NO_COLOR=1``, ``TZ=UTC`` and ``PYTHONHASHSEED=0`` (the offline summarizer's
choice of lines can turn on the order of a set, which the hash seed changes).

A block that needs a store made first says how at the end of its marker::

    <!-- checked: run in examples/ by tests/test_doc_examples.py; first: COMMANDS -->

(``first: lossless --db my.db import --skip-bad session.jsonl``, say). COMMANDS, one bash
line, run in the same folder before the block's own; their output is not compared, and
their failing (a nonzero exit) fails the test, with what they printed. They may use
``$CHECKOUT``, this checkout's root (to copy a test fixture, say). Blocks with the same
``first:`` share one run of it: the folder it left is kept and copied back for each (HOME is
the same path for every block, so the paths a store records stay valid).
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
MARKER = re.compile(r"^<!-- checked: run in examples/.*?(; first: (?P<first>.+?))? -->$")
SEPARATOR = "@@lossless-doc-example@@"
#: What a block's output calls the HOME the commands ran with.
SHOWN_HOME = "/home/me"
#: What it calls the folder of this checkout's ``lossless`` (hooks name it by its path).
SHOWN_BIN = "/home/me/.venv/bin"
#: The agent hosts' own variables: a machine's setting would move their folders out of HOME.
HOST_VARIABLES = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "OPENCLAW_STATE_DIR", "HERMES_HOME")

#: What changes from one run to the next, and what it is compared as.
VOLATILE = [
    # An archive file's name: when it was written and a random part.
    (re.compile(r"\barchive-\d{8}T\d{6}-[0-9a-f]{8}\b"), "archive-<id>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}([.,]\d+)?)?Z?"), "<time>"),
    (re.compile(r"\b\d{8}[T-]\d{6}\b"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)? (s|ms)\b"), "<duration>"),
    (re.compile(r"\bsum_[0-9a-f]{16}\b"), "sum_<id>"),
    (re.compile(r"\bgrant_[0-9a-f]{32}\b"), "grant_<id>"),
    # A masked secret's tag: a keyed hash under a key each store makes for itself.
    (re.compile(r"(\[secret:[\w-]+#)[0-9a-f]{6}\]"), r"\1<tag>]"),
    # The versions `lossless info` names: this checkout's, the interpreter's, its SQLite's.
    (re.compile(r"\b(lossless|Python|SQLite) \d+(\.\w+)+"), r"\1 <version>"),
]


class Block:
    """A checked block: where it is (file:line), its ``first:`` commands, its lines."""

    def __init__(self, where: str, first: str | None, lines: list[str]) -> None:
        self.where, self.first, self.lines = where, first, lines


def blocks() -> list[Block]:
    """Every checked block of the README and docs/."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            marker = MARKER.match(line.strip())
            if marker and lines[i + 1].startswith("```"):
                # A block whose output holds a fence of its own is fenced with more backticks.
                fence = "`" * (len(lines[i + 1]) - len(lines[i + 1].lstrip("`")))
                end = lines.index(fence, i + 2)
                where = f"{page.relative_to(ROOT)}:{i + 2}"
                found.append(Block(where, marker["first"], lines[i + 2 : end]))
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


def environment(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LOSSLESS_", "XDG_")) and k not in HOST_VARIABLES
    }
    env.pop("COLUMNS", None)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        NO_COLOR="1",
        TZ="UTC",
        # The offline summarizer's choice of lines can turn on the order of a set of words
        # (a sum of floats over it), which the hash seed changes from run to run.
        PYTHONHASHSEED="0",
    )
    return env


def prepare(home: Path, first: str | None, kept: dict[str, Path], keep_in: Path) -> None:
    """HOME as a block starts in it: a fresh copy of examples/, and what ``first:`` made."""
    shutil.rmtree(home, ignore_errors=True)
    if first is not None and first in kept:
        shutil.copytree(kept[first], home, symlinks=True)
        return
    home.mkdir(parents=True)
    shutil.copytree(ROOT / "examples", home / "examples")
    if first is None:
        return
    done = subprocess.run(
        ["bash", "-c", first],
        cwd=home / "examples",
        env={**environment(home), "CHECKOUT": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"first: {first}\nexit {done.returncode}:\n{done.stdout}"
    kept[first] = keep_in / f"first-{len(kept)}"
    shutil.copytree(home, kept[first], symlinks=True)


def run(block: Block, home: Path, kept: dict[str, Path], keep_in: Path) -> list[list[str]]:
    """What each of the block's commands printed, HOME shown as /home/me."""
    prepare(home, block.first, kept, keep_in)
    script = []
    for command, _ in sessions(block.lines):
        # Each command's exit status is the next one's $? (echo $? shows it).
        script += [command, "rc=$?", f"echo {SEPARATOR}", "(exit $rc)"]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=home / "examples",
        env=environment(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    shown = done.stdout.replace(str(home), SHOWN_HOME)
    shown = shown.replace(str(Path(sys.executable).parent), SHOWN_BIN)
    printed = shown.split(SEPARATOR + "\n")
    return [part.splitlines() for part in printed]


@pytest.fixture(scope="module")
def kept() -> dict[str, Path]:
    """The folders ``first:`` commands left, by their commands."""
    return {}


def test_there_are_checked_examples() -> None:
    assert len(blocks()) >= 1


@pytest.mark.parametrize("block", blocks(), ids=[b.where for b in blocks()])
def test_a_documented_example_prints_what_the_docs_say(
    block: Block, kept: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    steps = sessions(block.lines)
    assert steps, f"{block.where}: a checked block with no command"
    base = tmp_path_factory.getbasetemp()
    printed = run(block, base / "doc-home", kept, base)
    assert len(printed) == len(steps) + 1, f"{block.where}: the shell stopped early: {printed}"
    for (command, expected), got in zip(steps, printed, strict=False):
        assert calm(got) == calm(expected), f"{block.where}: $ {command}"
