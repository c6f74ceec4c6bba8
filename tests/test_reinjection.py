"""What a host is given back after it compacts, and the resume summary it is built on: the
header says what follows (summaries or none), names the tools the host really has, the
current task is the latest request, and a host's own compaction is a boundary too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lossless import Config, Engine
from lossless.integrations.claude_code import CLAUDE_CODE
from lossless.integrations.codex import CODEX
from lossless.integrations.hooks import reinjection

SESSION = "s-1"


def _user(uuid: str, parent: str | None, text: str, **extra: object) -> dict[str, object]:
    return {
        "type": "user",
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SESSION,
        "message": {"role": "user", "content": text},
        **extra,
    }


def _assistant(uuid: str, parent: str, text: str) -> dict[str, object]:
    message = {"id": f"m-{uuid}", "role": "assistant", "content": [{"type": "text", "text": text}]}
    return {
        "type": "assistant",
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SESSION,
        "message": message,
    }


def _host_compacted(tmp_path: Path) -> Path:
    """A Claude Code session its host compacted once; lossless never compacted it."""
    lines = [
        _user("u1", None, "Plan the retry policy for the HTTP client"),
        _assistant("a1", "u1", "Three retries with backoff."),
        _user("u2", "a1", "Now write the backoff table for the client"),
        _assistant("a2", "u2", "Here it is."),
        _user("u3", "a2", "yes"),
        _assistant("a3", "u3", "Confirmed."),
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": "b1",
            "parentUuid": None,
            "logicalParentUuid": "a3",
            "sessionId": SESSION,
            "content": "Conversation compacted",
        },
        _user("s1", "b1", "This session is being continued. HOST-SUMMARY", isCompactSummary=True),
        _user("u4", "s1", "Add jitter of ten percent to the table"),
        _assistant("a4", "u4", "Added."),
    ]
    path = tmp_path / f"{SESSION}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_header_says_there_are_no_summaries_when_there_are_none(tmp_path: Path) -> None:
    with Engine.open(tmp_path / "s.db", config=Config()) as engine:
        engine.import_path(_host_compacted(tmp_path))
        conv = engine.conversation(SESSION).conversation_id
        given = reinjection(engine, conv, CLAUDE_CODE)
    assert given.summaries_shown == 0
    assert "(the newest that fit)" not in given.text
    assert "lossless has no summaries of it yet" in given.text
    assert "lcm_grep" in given.text  # Claude Code's plugin brings the MCP tools


def test_codex_is_told_of_the_mcp_tools_only_when_its_config_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(home))
    with Engine.open(tmp_path / "s.db", config=Config()) as engine:
        engine.import_path(_host_compacted(tmp_path))
        conv = engine.conversation(SESSION).conversation_id
        without = reinjection(engine, conv, CODEX).text
        (home / "config.toml").write_text(
            '[mcp_servers.lossless]\ncommand = "/usr/local/bin/lossless"\n'
            'args = ["--db", "/x/store.db", "mcp"]\n'
        )
        with_tools = reinjection(engine, conv, CODEX).text
    assert "MCP tools" not in without and "lcm_grep" not in without.split("\n\n")[0]
    assert f"lossless grep WORDS --conversation {SESSION}" in without
    assert "one call away with the lossless MCP tools: lcm_grep" in with_tools


def test_the_current_task_is_the_latest_request_and_a_hosts_compaction_is_a_boundary(
    tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "s.db")
    assert run_cli("--db", db, "import", str(_host_compacted(tmp_path))).code == 0
    with Engine.open(db, config=Config()) as engine:
        latest = engine.resume(SESSION, latest=True)
        assert latest.current_task == "Add jitter of ten percent to the table"
        upto = engine.resume(SESSION)  # lossless never compacted: the host's boundary
        boundary = next(m for m in engine.messages(SESSION) if m.external_id == "b1")
        assert upto.upto_seq == boundary.seq
        assert upto.current_task == 'Now write the backoff table for the client (then: "yes")'
    shown = run_cli("--db", db, "resume", SESSION)
    assert shown.code == 0, shown
    assert "Now write the backoff table" in shown.out and "jitter" not in shown.out
