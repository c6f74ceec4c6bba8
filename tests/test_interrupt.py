"""Ctrl-C stops a long command within a second (issue 45, point 5): a long SQLite statement
yields to it (the store's progress handler lets Python handle the signal, and the statement
stops), and ``sync --watch`` stops in the middle of an import pass, keeping what it stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.sample import write_session

#: What "within a second" is allowed on a loaded 2-core machine.
PROMPT_SECONDS = 1.5


def interrupt_after(proc: subprocess.Popen[Any], ready: str, stream: Any) -> float:
    """Send SIGINT once *ready* appears on *stream*; how long the process took to end."""
    for line in stream:
        if ready in line:
            break
    time.sleep(0.3)
    return interrupt(proc, "the command ended before it was interrupted")


def interrupt(proc: subprocess.Popen[Any], ended_early: str) -> float:
    """SIGINT to the running *proc*; how long it took to end (killed past 30 s)."""
    assert proc.poll() is None, ended_early
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return time.monotonic() - began


def test_a_long_statement_stops_at_ctrl_c(tmp_path: Path) -> None:
    """A read that would run for about a minute ends within a second of Ctrl-C, as a
    KeyboardInterrupt (not a store error), and the store is fine afterwards."""
    db = tmp_path / "s.db"
    with Engine.open(db, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "hello"})
    script = textwrap.dedent(
        f"""
        import sys
        from lossless.store import open_store
        store = open_store({str(db)!r})
        print("reading", flush=True)
        try:
            store.fetchall(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
                " WHERE i < 2000000000) SELECT count(*) FROM n"
            )
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    took = interrupt_after(proc, "reading", proc.stdout)
    assert proc.stdout is not None
    said = proc.stdout.read()
    assert (proc.returncode, said.strip()) == (130, "interrupted"), proc.stderr.read()
    assert took < PROMPT_SECONDS, f"Ctrl-C took {took:.2f} s to stop the statement"
    with Engine.open(db, config=Config()) as engine:
        assert engine.check() == []


def test_sync_watch_stops_in_the_middle_of_a_long_import(tmp_path: Path) -> None:
    """A large transcript lands while ``sync --watch`` runs: Ctrl-C in the middle of its
    import stops the watch at once; what it stored stays, and the next sync reads on."""
    claude = tmp_path / "claude-config"
    folder = claude / "projects" / "-work-app"
    folder.mkdir(parents=True)
    staged = write_session(tmp_path / "big.jsonl", 12_000, session_id="big")
    env = {
        **os.environ,
        "CLAUDE_CONFIG_DIR": str(claude),
        "CODEX_HOME": str(tmp_path / "codex"),
        "HERMES_HOME": str(tmp_path / "hermes"),
        "OPENCLAW_STATE_DIR": str(tmp_path / "openclaw"),
        "HOME": str(tmp_path),
    }
    db = tmp_path / "w.db"
    lossless = [sys.executable, "-m", "lossless", "--db", str(db)]
    proc = subprocess.Popen(
        [*lossless, "sync", "--watch", "--host", "claude-code"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "watching" in line:
            break
    staged.rename(folder / "big.jsonl")  # lands whole: its import starts once it is quiet
    time.sleep(2.5)
    took = interrupt(proc, "the import ended before it was interrupted")
    assert took < PROMPT_SECONDS, f"Ctrl-C took {took:.2f} s to stop the watch"
    assert proc.returncode == 0, proc.stderr.read()
    with Engine.open(db, config=Config()) as engine:
        stored = sum(c.message_count for c in engine.conversations())
    done = subprocess.run(
        [*lossless, "sync", "--host", "claude-code"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    with Engine.open(db, config=Config()) as engine:
        total = sum(c.message_count for c in engine.conversations())
        assert total > stored, (stored, total)
        assert engine.check() == []
