"""Importing the SQLite databases hosts keep their transcripts in, on small databases with
the hosts' own tables (the real hosts write them in tests/test_host_openclaw.py and
tests/test_host_hermes.py, which import what they wrote)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import zstandard

from lossless import Config, Engine


def openclaw_db(path: Path, events: list[dict[str, object]], *, packed: int | None = None) -> Path:
    """An OpenClaw agent database holding *events* for session s1 (event *packed* stored
    zstd-compressed, as OpenClaw stores large ones)."""
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE transcript_events (session_id TEXT, seq INTEGER, event_json TEXT,"
        " created_at INTEGER, event_zstd BLOB, event_utf8_bytes INTEGER, navigation_json TEXT,"
        " PRIMARY KEY (session_id, seq))"
    )
    for seq, event in enumerate(events):
        text = json.dumps(event)
        if seq == packed:
            blob = zstandard.ZstdCompressor().compress(text.encode())
            row = ("s1", seq, None, 0, blob, len(text.encode()), "{}")
        else:
            row = ("s1", seq, text, 0, None, None, None)
        db.execute("INSERT INTO transcript_events VALUES (?, ?, ?, ?, ?, ?, ?)", row)
    db.commit()
    db.close()
    return path


def test_an_openclaw_database_imports_each_message_once(tmp_path: Path) -> None:
    big = "x" * 5000
    events: list[dict[str, object]] = [
        {"type": "session", "version": 4, "id": "s1", "timestamp": "2026-11-25T12:00:00Z"},
        {"type": "model_change", "id": "e1", "parentId": None, "provider": "p", "modelId": "m"},
        {
            "type": "message",
            "id": "e2",
            "parentId": "e1",
            "timestamp": "2026-11-25T12:00:01Z",
            "message": {"role": "user", "content": "hello", "timestamp": 1},
        },
        {
            "type": "message",
            "id": "e3",
            "parentId": "e2",
            "timestamp": "2026-11-25T12:00:02Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": big}]},
        },
    ]
    path = openclaw_db(tmp_path / "openclaw-agent.sqlite", events, packed=3)
    with Engine.open(tmp_path / "store.db", config=Config()) as engine:
        first = engine.import_path(path)
        assert [r.imported for r in first] == [2]
        assert [m.to_source() for m in engine.messages("s1")] == [
            events[2]["message"],
            events[3]["message"],
        ]
        again = engine.import_path(tmp_path)  # the folder: found by its name
        assert [(r.imported, r.already_stored) for r in again] == [(0, 2)]


def hermes_db(path: Path, rows: list[tuple[str, str, float, str | None]]) -> Path:
    """A Hermes state.db with one session and *rows* (role, content, time, tool calls)."""
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, display_name TEXT,"
        " started_at REAL)"
    )
    db.execute(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, role TEXT,"
        " content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL,"
        " reasoning TEXT, active INTEGER DEFAULT 1, compacted INTEGER DEFAULT 0)"
    )
    db.execute("INSERT INTO sessions VALUES ('h1', 'cli', 'Deploys', 1.0)")
    for role, content, at, calls in rows:
        db.execute(
            "INSERT INTO messages (session_id, role, content, tool_calls, timestamp)"
            " VALUES ('h1', ?, ?, ?, ?)",
            (role, content, calls, at),
        )
    db.commit()
    db.close()
    return path


def test_a_hermes_database_imports_what_was_said_not_the_copies_compression_wrote(
    tmp_path: Path,
) -> None:
    said = [
        ("user", "deploy it", 100.0, None),
        ("assistant", "done", 101.0, None),
        ("user", "yes", 102.0, None),
        ("assistant", "Confirmed.", 103.0, None),
        ("user", "yes", 104.0, None),  # said again: kept
        ("assistant", "Confirmed.", 105.0, None),
    ]
    # A compression rewrote the list: a summary, then copies of the last turn, 1 µs apart.
    rewrite = [
        ("user", "[Hermes summary of earlier turns]", 106.000001, None),
        ("user", "yes", 106.000002, None),
        ("assistant", "Confirmed.", 106.000003, None),
    ]
    after = [("user", "and now?", 110.0, None), ("assistant", "all good", 111.0, None)]
    path = hermes_db(tmp_path / "state.db", said + rewrite + after)
    with Engine.open(tmp_path / "store.db", config=Config()) as engine:
        reports = engine.import_path(path)
        assert [r.imported for r in reports] == [9]
        stored = [(m.role, m.content) for m in engine.messages("h1")]
        expected = said + rewrite[:1] + after
        assert stored == [(role, content) for role, content, _, _ in expected]
        assert engine.conversation("h1").title == "Deploys"
        assert [r.imported for r in engine.import_path(path)] == [0]


def test_something_else_in_sqlite_is_refused_with_a_reason(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with Engine.open(tmp_path / "store.db", config=Config()) as engine:
        reports = engine.import_path(other)
    assert [r.mode for r in reports] == ["failed"]
    assert "not OpenClaw's (openclaw-agent.sqlite) or Hermes" in reports[0].problems[0].reason


@pytest.mark.parametrize("name", ["openclaw-agent.sqlite", "state.db"])
def test_a_folder_import_finds_host_databases_by_name(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "home"
    folder.mkdir()
    if name == "state.db":
        hermes_db(folder / name, [("user", "hi", 1.0, None)])
    else:
        openclaw_db(
            folder / name,
            [
                {"type": "session", "version": 4, "id": "s1"},
                {"type": "message", "id": "e1", "message": {"role": "user", "content": "hi"}},
            ],
        )
    with Engine.open(tmp_path / "store.db", config=Config()) as engine:
        assert [r.imported for r in engine.import_path(folder)] == [1]


def test_hermes_compression_artefacts_are_the_hosts_and_their_copies_are_left_out(
    tmp_path: Path,
) -> None:
    """Hermes's own compressor writes a summary and a task-list note; a later compression
    copies them into its new list (not always in one block of rows). Each is kept once, as
    the host's record, never as the user's words."""
    summary = "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted: deploy plan."
    note = "[Your active task list was preserved across context compression]\n- [ ] ship"
    rows = [
        ("user", "deploy it", 100.0, None),
        ("assistant", "done", 101.0, None),
        ("user", summary, 110.0, None),
        ("user", note, 110.5, None),
        ("user", "and now?", 120.0, None),
        ("assistant", "all good", 121.0, None),
        # The second compression: the first summary and note copied, a second summary.
        ("user", summary, 130.0, None),
        ("user", note, 130.4, None),
        ("user", "[CONTEXT COMPACTION — REFERENCE ONLY] And later: the rollout.", 130.8, None),
        ("user", "finish the rollout", 140.0, None),
    ]
    path = hermes_db(tmp_path / "state.db", rows)
    with Engine.open(tmp_path / "store.db", config=Config()) as engine:
        engine.import_path(path)
        stored = [(m.content, m.host_meta) for m in engine.messages("h1")]
        assert [c for c, _ in stored].count(summary) == 1 and [c for c, _ in stored].count(
            note
        ) == 1
        assert dict(stored)[summary] == "host_summary" and dict(stored)[note] == "caveat"
        assert dict(stored)["finish the rollout"] is None
        assert engine.resume("h1", latest=True).current_task == "finish the rollout"
        assert engine.resume("h1", latest=True).goal == ["deploy it"]
