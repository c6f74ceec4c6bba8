"""`lossless hooks claude-code`: the hook settings and MCP server entry it prints, and its
--install into Claude Code's settings files (split from test_claude_code.py)."""

from __future__ import annotations

import io
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from lossless.integrations.claude_code import CLAUDE_CODE
from lossless.integrations.hooks import (
    EVENTS,
)
from lossless.integrations.settings import settings_hooks


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """~/.claude and the hook log live in the test's directory, never the user's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


# --- lossless hooks claude-code: print and install --------------------------------------------


def test_hooks_prints_the_hooks_and_the_mcp_command_for_this_store(
    run_cli,
    db_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    res = run_cli("--db", str(db_path), "hooks", "claude-code", "--json")
    assert res.code == 0, res
    data = json.loads(res.out)
    assert list(data["settings"]["hooks"]) == list(EVENTS)
    assert data["settings_path"] == str(Path(os.environ["HOME"]) / ".claude" / "settings.json")
    for event, groups in data["settings"]["hooks"].items():
        [group] = groups
        [entry] = group["hooks"]
        argv = shlex.split(entry["command"])
        assert Path(argv[0]).is_absolute() and Path(argv[0]).is_file()
        assert argv[1:] == ["--db", str(db_path.resolve()), "hook", "claude-code", event]
        assert entry["type"] == "command" and entry["timeout"] >= 30
    assert data["settings"]["hooks"]["SessionStart"][0]["matcher"] == "compact|resume"
    mcp = shlex.split(data["mcp_command"])
    assert mcp[:7] == ["claude", "mcp", "add", "--scope", "user", "lossless", "--"]
    assert mcp[8:] == ["--db", str(db_path.resolve()), "mcp"]

    people = run_cli("--db", str(db_path), "hooks", "claude-code")
    assert '"PreCompact"' in people.out and "claude mcp add --scope user lossless" in people.out
    assert "~/.claude.json, not in settings.json" in people.out


def settings_file(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".claude" / "settings.json"


USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(pytest:*)"]},
    "hooks": {
        "PreCompact": [
            {"matcher": "manual", "hooks": [{"type": "command", "command": "~/bin/notes.sh"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
    },
}


def ours(settings: dict[str, Any], event: str) -> list[str]:
    return [
        h["command"]
        for g in settings["hooks"].get(event, [])
        for h in g["hooks"]
        if "hook claude-code" in h["command"]
    ]


def test_install_merges_into_user_settings_keeping_the_users_hooks_and_a_backup(
    run_cli,
    db_path: Path,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir(parents=True)
    before = json.dumps(USER_SETTINGS, indent=2) + "\n"
    path.write_text(before)

    res = run_cli("--db", str(db_path), "hooks", "claude-code", "--install", "--yes")

    assert res.code == 0, res
    assert '+            "command": ' in res.out and "hook claude-code PreCompact" in res.out
    assert f"wrote {path}" in res.out
    assert "claude mcp add --scope user lossless" in res.out
    after = json.loads(path.read_text())
    assert after["model"] == "opus"
    # The user's rules stay; the recall tools are allowed (print mode cannot ask).
    assert after["permissions"] == {"allow": ["Bash(pytest:*)", "mcp__lossless"]}
    assert after["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]
    assert after["hooks"]["PreCompact"][0] == USER_SETTINGS["hooks"]["PreCompact"][0]
    for event in EVENTS:
        assert len(ours(after, event)) == 1
    [backup] = path.parent.glob("settings.json.*.bak")
    assert backup.read_text() == before


def test_a_second_install_changes_nothing_and_a_new_path_replaces_the_old_entry(
    run_cli,
    db_path: Path,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(USER_SETTINGS, indent=2) + "\n")
    args = ("--db", str(db_path), "hooks", "claude-code", "--install", "--yes")
    assert run_cli(*args).code == 0
    installed = path.read_text()

    again = run_cli(*args)
    assert again.code == 0
    assert "already installed; nothing to change" in again.out
    assert path.read_text() == installed
    assert len(list(path.parent.glob("*.bak"))) == 1

    moved = run_cli(*args, "--executable", "/opt/lossless/bin/lossless")
    assert moved.code == 0
    after = json.loads(path.read_text())
    for event in EVENTS:
        [command] = ours(after, event)
        assert command.startswith("/opt/lossless/bin/lossless --db ")
    assert after["hooks"]["PreCompact"][0] == USER_SETTINGS["hooks"]["PreCompact"][0]
    assert after["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]
    assert len(list(path.parent.glob("*.bak"))) == 2


def test_install_into_a_project_writes_its_settings_and_mcp_json(
    run_cli,
    db_path: Path,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    other = {"mcpServers": {"docs": {"command": "docs-mcp", "args": []}}}
    (project / ".mcp.json").write_text(json.dumps(other))

    res = run_cli(
        "--db", str(db_path), "hooks", "claude-code", "--install", "--yes",
        "--scope", "project", "--project-dir", str(project),
    )  # fmt: skip

    assert res.code == 0, res
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert all(len(ours(settings, event)) == 1 for event in EVENTS)
    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert servers["docs"] == other["mcpServers"]["docs"]
    assert servers["lossless"]["args"] == ["--db", str(db_path.resolve()), "mcp"]
    assert Path(servers["lossless"]["command"]).is_file()
    assert len(list(project.glob(".mcp.json.*.bak"))) == 1
    assert not settings_file(tmp_path).exists()

    local = run_cli(
        "--db", str(db_path), "hooks", "claude-code", "--install", "--yes",
        "--scope", "local", "--project-dir", str(project),
    )  # fmt: skip
    assert local.code == 0
    assert (project / ".claude" / "settings.local.json").exists()
    assert "claude mcp add --scope local lossless" in local.out


class Terminal(io.StringIO):
    """Answers typed at a terminal."""

    def isatty(self) -> bool:
        return True


def test_install_asks_first_and_writes_nothing_when_declined(
    run_cli,
    db_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    res = run_cli("--db", str(db_path), "hooks", "claude-code", "--install")
    assert res.code == 0
    assert "+++ " in res.out  # the diff was shown
    assert "nothing written" in res.err
    assert not settings_file(tmp_path).exists()

    # With no one at a terminal to answer, it is refused, as every command that asks.
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    refused = run_cli("--db", str(db_path), "hooks", "claude-code", "--install")
    assert refused.code == 2 and "add --yes to go ahead" in refused.err
    assert not settings_file(tmp_path).exists()

    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert run_cli("--db", str(db_path), "hooks", "claude-code", "--install").code == 0
    assert settings_file(tmp_path).exists()


def test_install_refuses_a_settings_file_it_cannot_read(
    run_cli,
    db_path: Path,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"hooks": {,}')
    res = run_cli("--db", str(db_path), "hooks", "claude-code", "--install", "--yes")
    assert res.code == 1
    assert "is not valid JSON" in res.err
    assert path.read_text() == '{"hooks": {,}'
    assert not list(path.parent.glob("*.bak"))


def test_the_plugin_carries_the_hooks_and_server_lossless_installs_into_settings() -> None:
    root = Path(__file__).resolve().parents[1]
    plugin = root / "hosts" / "claude-code"
    hooks = json.loads((plugin / "hooks" / "hooks.json").read_text())
    # One declaration: the plugin's hooks are what `lossless hooks claude-code` installs.
    assert hooks["hooks"] == settings_hooks("lossless", CLAUDE_CODE)
    assert set(hooks["hooks"]) == {
        "SessionStart",
        "UserPromptSubmit",
        "Stop",
        "SubagentStop",
        "PreCompact",
        "SessionEnd",
    }
    manifest = json.loads((plugin / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "lossless"
    servers = json.loads((plugin / ".mcp.json").read_text())["mcpServers"]
    assert servers["lossless"]["args"][-1] == "mcp"
    market = json.loads((root / ".claude-plugin" / "marketplace.json").read_text())
    [entry] = market["plugins"]
    assert (root / entry["source"]).resolve() == plugin
