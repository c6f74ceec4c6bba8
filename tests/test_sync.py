"""``lossless sync``: the installed hosts' transcripts found where their settings put them,
imported once, and followed as they grow (``--watch``, a real child process)."""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine

LOSSLESS = Path(sys.executable).parent / "lossless"
SESSION = "9f1e2d3c-0000-4000-8000-00000000c0de"
CODEX_SESSION = "01a211dd-0000-7000-8000-00000000c0de"


def cc_line(uuid: str, parent: str | None, text: str, role: str = "user") -> dict[str, Any]:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": role,
        "message": {"role": role, "content": content},
        "uuid": uuid,
        "timestamp": "2026-11-25T09:00:00.000Z",
        "sessionId": SESSION,
    }


def write_lines(path: Path, lines: list[dict[str, Any]], mode: str = "w") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode, encoding="utf-8") as handle:
        handle.writelines(json.dumps(line) + "\n" for line in lines)


@pytest.fixture
def hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Where each host keeps its sessions here (from its own environment variables)."""
    folders = {
        "claude": tmp_path / "claude-config",
        "codex": tmp_path / "codex-home",
        "openclaw": tmp_path / "openclaw-state",
        "hermes": tmp_path / "hermes-home",
    }
    monkeypatch.setenv("HERMES_HOME", str(folders["hermes"]))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(folders["claude"]))
    monkeypatch.setenv("CODEX_HOME", str(folders["codex"]))
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(folders["openclaw"]))
    return folders


def claude_transcript(hosts: dict[str, Path]) -> Path:
    return hosts["claude"] / "projects" / "-work-app" / f"{SESSION}.jsonl"


def test_sync_imports_every_hosts_transcripts_once(
    run_cli: Any, hosts: dict[str, Path], db_path: Path
) -> None:
    write_lines(
        claude_transcript(hosts),
        [cc_line("u1", None, "Fix the flaky test"), cc_line("a1", "u1", "On it.", "assistant")],
    )
    rollout = (
        hosts["codex"] / "sessions" / "2026" / "11" / "25" / f"rollout-x-{CODEX_SESSION}.jsonl"
    )
    write_lines(
        rollout,
        [
            {
                "timestamp": "t",
                "ordinal": 0,
                "type": "session_meta",
                "payload": {"id": CODEX_SESSION},
            },
            {
                "timestamp": "t",
                "ordinal": 1,
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Bump the version"}],
                },
            },
        ],
    )
    sessions = hosts["openclaw"] / "agents" / "main" / "sessions"
    write_lines(
        sessions / "oc-1.jsonl",
        [
            {"type": "session", "version": 3, "id": "oc-1", "timestamp": "2026-11-25T09:00:00Z"},
            {
                "type": "message",
                "id": "e1",
                "parentId": None,
                "message": {"role": "user", "content": [{"type": "text", "text": "Hi claw"}]},
            },
        ],
    )
    write_lines(
        sessions / "oc-1.trajectory.jsonl",
        [{"traceSchema": "openclaw-trajectory", "sessionId": "oc-1", "type": "session.started"}],
    )

    first = run_cli("--db", str(db_path), "sync", "--json")
    assert first.code == 0, first
    data = json.loads(first.out)
    assert data["imported"] == 4
    assert {f["host"] for f in data["folders"] if f["exists"]} == {
        "claude-code",
        "codex",
        "openclaw",
    }
    again = run_cli("--db", str(db_path), "sync", "--json")
    assert json.loads(again.out)["imported"] == 0
    with Engine.open(db_path, config=Config()) as engine:
        assert [m.content for m in engine.messages(SESSION)] == ["Fix the flaky test", "On it."]
        assert [m.content for m in engine.messages(CODEX_SESSION)] == ["Bump the version"]
        assert [m.content for m in engine.messages("oc-1")] == ["Hi claw"]
        assert len(engine.conversations()) == 3  # the trajectory was not filed anywhere


def test_sync_of_one_host_says_where_it_looked_when_nothing_is_there(
    run_cli: Any, hosts: dict[str, Path], db_path: Path
) -> None:
    res = run_cli("--db", str(db_path), "sync", "--host", "codex")
    assert res.code == 0
    assert f"codex: {hosts['codex'] / 'sessions'} (not there)" in res.err
    assert "0 message(s) imported" in res.out
    bad = run_cli("--db", str(db_path), "sync", "--host", "emacs")
    assert bad.code == 2 and "emacs" in bad.err


def test_sync_names_a_bad_line_on_every_pass_and_skip_bad_accepts_it(
    run_cli: Any, hosts: dict[str, Path], db_path: Path
) -> None:
    transcript = claude_transcript(hosts)
    write_lines(transcript, [cc_line("u1", None, "Start the migration")])
    with transcript.open("a", encoding="utf-8") as handle:
        handle.write("{cut short\n")
    write_lines(transcript, [cc_line("a1", "u1", "Migrated 3 tables.", "assistant")], "a")

    first = run_cli("--db", str(db_path), "sync", "--host", "claude-code")
    again = run_cli("--db", str(db_path), "sync", "--host", "claude-code")
    accepted = run_cli("--db", str(db_path), "sync", "--host", "claude-code", "--skip-bad")

    assert (first.code, again.code, accepted.code) == (3, 3, 0)
    for res in (first, again, accepted):
        assert f"not imported {transcript}:2: not valid JSON" in res.err
    assert "2 message(s) imported" in first.out and "0 message(s) imported" in again.out


class Follower:
    """``lossless sync --watch --json`` as a child process; its report lines in a queue."""

    def __init__(self, db: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [str(LOSSLESS), "--db", str(db), "sync", "--watch", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def next_report(self, timeout: float = 30) -> dict[str, Any]:
        """The next report the watcher printed (JSON lines; the first pass is one object)."""
        while True:
            line = self.lines.get(timeout=timeout)
            if line.startswith("{") and line.rstrip().endswith("}"):
                data = json.loads(line)
                if "mode" in data:
                    return dict(data)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=30)


def test_watch_imports_each_turn_as_it_lands_and_leaves_a_torn_line_for_later(
    hosts: dict[str, Path], db_path: Path, tmp_path: Path
) -> None:
    transcript = claude_transcript(hosts)
    write_lines(transcript, [cc_line("u1", None, "Start the migration")])
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg-data")}
    follower = Follower(db_path, env)
    try:
        assert follower.proc.stderr is not None
        for line in follower.proc.stderr:  # the first pass is done when it says it watches
            if "watching" in line:
                break

        write_lines(transcript, [cc_line("a1", "u1", "Migrated 3 tables.", "assistant")], "a")
        grown = follower.next_report()
        assert (grown["mode"], grown["imported"]) == ("tail", 1)

        # The host is half-way through writing a line: nothing of it is stored yet.
        whole = json.dumps(cc_line("u2", "a1", "Now the indexes")) + "\n"
        with transcript.open("a", encoding="utf-8") as handle:
            handle.write(whole[:25])
        torn = follower.next_report()
        assert torn["imported"] == 0 and torn["problems"] == []
        with transcript.open("a", encoding="utf-8") as handle:
            handle.write(whole[25:])
        done = follower.next_report()
        assert done["imported"] == 1
    finally:
        code = follower.stop()
    assert code == 0
    with Engine.open(db_path, config=Config()) as engine:
        assert [m.content for m in engine.messages(SESSION)] == [
            "Start the migration",
            "Migrated 3 tables.",
            "Now the indexes",
        ]


def test_sync_and_watch_take_the_hosts_databases_too(
    run_cli: Any,
    hosts: dict[str, Path],
    db_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from test_host_stores import hermes_db, openclaw_db

    hermes_home = hosts["hermes"]
    hermes_home.mkdir()
    state = hermes_db(hermes_home / "state.db", [("user", "hello hermes", 1.0, None)])
    agent = hosts["openclaw"] / "agents" / "main" / "agent"
    agent.mkdir(parents=True)
    openclaw_db(
        agent / "openclaw-agent.sqlite",
        [
            {"type": "session", "version": 4, "id": "s1"},
            {"type": "message", "id": "e1", "message": {"role": "user", "content": "hi claw"}},
        ],
    )
    first = run_cli("--db", str(db_path), "sync", "--json")
    assert first.code == 0, first
    assert json.loads(first.out)["imported"] == 2
    assert json.loads(run_cli("--db", str(db_path), "sync", "--json").out)["imported"] == 0

    follower = Follower(db_path, {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg-data")})
    try:
        assert follower.proc.stderr is not None
        for line in follower.proc.stderr:
            if "watching" in line:
                break
        db = sqlite3.connect(state)
        db.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('h1', 'assistant', 'hello back', 2.0)"
        )
        db.commit()
        db.close()
        report = follower.next_report()
        assert (report["imported"], report["session_id"]) == (1, "h1")
    finally:
        assert follower.stop() == 0
    with Engine.open(db_path, config=Config()) as engine:
        assert [m.content for m in engine.messages("h1")] == ["hello hermes", "hello back"]
        assert [m.content for m in engine.messages("s1")] == ["hi claw"]


def test_a_symbolic_link_out_of_the_host_folders_is_not_followed(
    hosts: dict[str, Path], db_path: Path, tmp_path: Path
) -> None:
    """A transcript in a host folder that is a link to a file elsewhere is named and passed
    over by a sync's pass, and a watched transcript replaced by such a link is not read."""
    elsewhere = tmp_path / "elsewhere.jsonl"
    write_lines(elsewhere, [cc_line("x1", None, "private notes outside the host folder")])
    transcript = claude_transcript(hosts)
    write_lines(transcript, [cc_line("u1", None, "Start the migration")])
    link = transcript.with_name("linked-session.jsonl")
    link.symlink_to(elsewhere)
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg-data")}
    once = subprocess.run(
        [str(LOSSLESS), "--db", str(db_path), "sync", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert once.returncode in (0, 3), once
    reports = {Path(r["path"]).name: r for r in json.loads(once.stdout)["files"]}
    assert reports["linked-session.jsonl"]["mode"] == "passed_over"
    assert "symbolic link" in reports["linked-session.jsonl"]["problems"][0]["reason"]

    follower = Follower(db_path, env)
    try:
        assert follower.proc.stderr is not None
        for line in follower.proc.stderr:
            if "watching" in line:
                break
        transcript.unlink()
        transcript.symlink_to(elsewhere)  # the watched file becomes a link out
        write_lines(elsewhere, [cc_line("x2", "x1", "more private notes")], "a")
        link.with_name("after.jsonl").write_text(
            json.dumps(cc_line("v1", None, "a later session")) + "\n"
        )
        seen = [follower.next_report()]
        while Path(seen[-1]["path"]).name != "after.jsonl":
            seen.append(follower.next_report())
        assert seen[-1]["imported"] == 1
    finally:
        code = follower.stop()
    assert code == 0
    with Engine.open(db_path, config=Config()) as engine:
        said = {m.content for c in engine.conversations() for m in engine.messages(c.conversation)}
    assert not any("private notes" in text for text in said), said


def test_watch_without_its_extra_says_so_before_any_pass(
    run_cli: Any, hosts: dict[str, Path], db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    write_lines(claude_transcript(hosts), [cc_line("u1", None, "Fix the flaky test")])
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "watchdog" else found(name, *a),
    )
    res = run_cli("--db", str(db_path), "sync", "--watch")
    assert res.code == 1 and "pip install 'lossless[watch]'" in res.err
    assert "imported" not in res.out and not db_path.exists()
