"""UserPromptSubmit in a session the host compacted: the stored messages the prompt is about,
which the host's window no longer holds, come back as additionalContext (Claude Code's hook
protocol over the real CLI, a transcript in its format)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.integrations.claude_code import CLAUDE_CODE
from lossless.integrations.hooks import DEFAULT_RECALL_CHARS, default_log_path
from test_claude_code import SESSION, host_compaction, last_uuid, lines_of, payload, write

FACT = "Remember: the staging database password rotates every thursday at noon."
ASK = "When does the staging database password rotate?"

Hook = Callable[..., Any]


@pytest.fixture(autouse=True)
def _logs_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def hook(run_cli, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hook:  # type: ignore[no-untyped-def]
    def call(data: dict[str, Any], *args: str) -> Any:
        monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(data)))
        return run_cli("--db", str(db_path), "hook", "claude-code", data["hook_event_name"], *args)

    return call


def session_with_fact(tmp_path: Path) -> Path:
    """A 120-turn session whose 5th request says FACT."""
    lines = lines_of(120)
    requests = [
        n
        for n, line in enumerate(lines)
        if json.loads(line)["type"] == "user"
        and isinstance(json.loads(line)["message"]["content"], str)
    ]
    entry = json.loads(lines[requests[4]])
    entry["message"]["content"] = FACT
    lines[requests[4]] = json.dumps(entry)
    return write(tmp_path / f"{SESSION}.jsonl", lines)


def compacted(hook: Hook, transcript: Path) -> None:
    """Claude Code compacts the session: PreCompact, its two lines, SessionStart(compact)."""
    assert hook(payload("PreCompact", transcript, trigger="auto")).code == 0
    write(transcript, host_compaction(last_uuid(transcript)), mode="a")
    assert hook(payload("SessionStart", transcript, source="compact")).code == 0


def recalled(out: str) -> str:
    data = json.loads(out)
    assert data["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    return str(data["hookSpecificOutput"]["additionalContext"])


def test_a_prompt_about_what_the_host_compacted_away_gets_the_originals_back(
    hook: Hook, db_path: Path, tmp_path: Path
) -> None:
    transcript = session_with_fact(tmp_path)
    # Before any compaction the host's window holds everything: nothing is added.
    before = hook(payload("UserPromptSubmit", transcript, prompt=ASK))
    assert before.code == 0 and before.out == ""
    compacted(hook, transcript)

    res = hook(payload("UserPromptSubmit", transcript, prompt=ASK))

    assert res.code == 0, res.err
    assert len(res.out.rstrip("\n")) <= DEFAULT_RECALL_CHARS
    text = recalled(res.out)
    with Engine.open(db_path, config=Config()) as engine:
        fact = next(m for m in engine.messages(SESSION) if m.content == FACT)
    assert f"msg#{fact.message_id} (user" in text and FACT in text
    assert "lcm_describe msg#N" in text  # where to read one whole
    assert "HOST-SUMMARY" not in text  # the host's own records are never given back
    assert "recalled=" in default_log_path(CLAUDE_CODE).read_text()


def test_recall_can_be_turned_off_and_finds_nothing_for_unknown_words(
    hook: Hook, tmp_path: Path
) -> None:
    transcript = session_with_fact(tmp_path)
    compacted(hook, transcript)
    off = hook(payload("UserPromptSubmit", transcript, prompt=ASK), "--recall-chars", "0")
    assert off.code == 0 and off.out == ""
    nothing = hook(payload("UserPromptSubmit", transcript, prompt="qqzx vvwy"))
    assert nothing.code == 0 and nothing.out == ""
    small = hook(payload("UserPromptSubmit", transcript, prompt=ASK), "--recall-chars", "700")
    assert small.code == 0 and 0 < len(small.out.rstrip("\n")) <= 700
    assert "staging database password" in recalled(small.out)
    # A value that is not a number never fails the host: the default is used, and logged.
    bad = hook(payload("UserPromptSubmit", transcript, prompt=ASK), "--recall-chars", "lots")
    assert bad.code == 0 and FACT in recalled(bad.out)
    assert "--recall-chars 'lots'" in default_log_path(CLAUDE_CODE).read_text()
