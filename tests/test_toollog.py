"""The tool-execution log and chat_context_query over frames and executions."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.retrieval.grep import GrepError
from lossless.store.toollog import INPUT_SQL, OUTPUT_SQL

T0 = datetime(2026, 4, 1, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def anthropic_turn(engine: Engine, session: str, n: int, start: float, *, fail: bool) -> None:
    """A user request, an assistant tool_use (two parallel calls), their results."""
    engine.ingest(
        session, {"role": "user", "content": f"request {n}: fix the parser"}, created_at=at(start)
    )
    engine.ingest(
        session,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading and running."},
                {
                    "type": "tool_use",
                    "id": f"toolu_{n}a",
                    "name": "read_file",
                    "input": {"path": f"src/mod{n}.py"},
                },
                {
                    "type": "tool_use",
                    "id": f"toolu_{n}b",
                    "name": "bash",
                    "input": {"command": "pytest -q"},
                },
            ],
        },
        created_at=at(start + 1),
    )
    engine.ingest(
        session,
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": f"toolu_{n}a",
                    "content": f"def parse_{n}(): ...",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": f"toolu_{n}b",
                    "content": "1 failed: zebra_overflow" if fail else "3 passed",
                    "is_error": fail,
                },
            ],
        },
        created_at=at(start + 3.5),
    )


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    eng = Engine.open(db, config=Config())
    anthropic_turn(eng, "a", 1, 0, fail=False)
    anthropic_turn(eng, "a", 2, 60, fail=True)
    # OpenAI chat shape in another conversation
    eng.ingest("b", {"role": "user", "content": "list the files"}, created_at=at(100))
    eng.ingest(
        "b",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_x",
                    "type": "function",
                    "function": {"name": "ls", "arguments": json.dumps({"path": "."})},
                }
            ],
        },
        created_at=at(101),
    )
    eng.ingest(
        "b",
        {"role": "tool", "tool_call_id": "call_x", "content": "README.md\nsrc"},
        created_at=at(101.25),
    )
    eng.ingest(
        "b",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_y", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        created_at=at(102),
    )
    yield eng
    eng.close()


def rows(engine: Engine, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return engine.store.fetchall(sql, params)


def test_every_call_is_logged_with_its_result_status_and_duration(engine: Engine) -> None:
    log = {
        r[0]: r[1:]
        for r in rows(
            engine,
            f"SELECT e.execution_id, e.tool_name, e.status, {INPUT_SQL}, {OUTPUT_SQL}, e.error,"
            " e.duration_ms, e.call_message_id IS NOT NULL, e.result_message_id IS NOT NULL"
            " FROM tool_executions e",
        )
    }
    # The log holds no second copy of an input or output: its readers take the parts'.
    assert (
        rows(engine, "SELECT 1 FROM tool_executions WHERE input IS NOT NULL OR output IS NOT NULL")
        == []
    )
    assert set(log) == {"toolu_1a", "toolu_1b", "toolu_2a", "toolu_2b", "call_x", "call_y"}
    assert log["toolu_1a"][:2] == ("read_file", "ok")
    assert json.loads(log["toolu_1a"][2]) == {"path": "src/mod1.py"}
    assert log["toolu_1a"][3] == "def parse_1(): ..."
    assert log["toolu_1a"][5] == 2500  # 1 s → 3.5 s
    assert log["toolu_2b"][1] == "error" and log["toolu_2b"][4] == "1 failed: zebra_overflow"
    assert log["call_x"][1:] == ("ok", '{"path":"."}', "README.md\nsrc", None, 250, 1, 1)
    assert log["call_y"][1] == "pending" and log["call_y"][6:] == (1, 0)


def test_reingesting_does_not_log_twice_and_old_stores_are_logged_on_upgrade(
    engine: Engine, tmp_path: Path
) -> None:
    if engine.store.backend != "sqlite":
        pytest.skip(
            "SQLite only: a PostgreSQL store never predates the log (m001-m008 shipped together)"
        )
    before = rows(engine, "SELECT * FROM tool_executions ORDER BY execution_id")
    path = engine.store.path
    engine.close()
    with sqlite3.connect(path) as conn:  # a store from before the log existed
        conn.execute("DROP TABLE tool_executions")
        conn.execute("DELETE FROM migrations WHERE name = 'm005_tool_executions'")
    with Engine.open(path, config=Config()) as again:
        assert rows(again, "SELECT * FROM tool_executions ORDER BY execution_id") == before


def test_query_executions_by_tool_status_and_text(engine: Engine) -> None:
    failed = engine.chat_context_query(status="error", kind="executions")
    assert [e.execution_id for e in failed.executions] == ["toolu_2b"]
    assert failed.executions[0].error == "1 failed: zebra_overflow"

    by_tool = engine.chat_context_query(tool_name="ls")
    assert [e.execution_id for e in by_tool.executions] == ["call_y", "call_x"]  # newest first
    call_ids = {e.call_message for e in by_tool.executions}
    assert {f.id for f in by_tool.frames} >= {c for c in call_ids if c}

    text = engine.chat_context_query(text="zebra_overflow")
    assert [e.execution_id for e in text.executions] == ["toolu_2b"]
    assert [f.role for f in text.frames] == ["tool"]


def test_query_frames_by_role_time_conversation_and_pages(engine: Engine) -> None:
    users = engine.chat_context_query(role="user", conversation="a", order="oldest")
    assert [f.snippet for f in users.frames] == [
        "request 1: fix the parser",
        "request 2: fix the parser",
    ]
    assert users.executions == []  # a role filters messages only

    window = engine.chat_context_query(
        since=at(59).isoformat(), before=at(70).isoformat(), conversation="a"
    )
    assert {f.created_at[:19] for f in window.frames} <= {
        at(60).isoformat()[:19],
        at(61).isoformat()[:19],
        at(63.5).isoformat()[:19],
    }
    assert {e.execution_id for e in window.executions} == {"toolu_2a", "toolu_2b"}

    everything = engine.chat_context_query(kind="frames", order="oldest", limit=200)
    pages, offset = [], 0
    while True:
        page = engine.chat_context_query(kind="frames", order="oldest", limit=3, offset=offset)
        pages += page.frames
        if page.next_offset is None:
            break
        offset = page.next_offset
    assert pages == everything.frames and len(pages) == 10

    only_b = engine.chat_context_query(conversation="b", kind="executions")
    assert {e.conversation_id for e in only_b.executions} == {
        engine.conversation("b").conversation_id
    }


def test_bad_filters_are_clear_errors(engine: Engine) -> None:
    with pytest.raises(GrepError, match="unknown role 'robot'"):
        engine.chat_context_query(role="robot")
    with pytest.raises(GrepError, match="unknown status"):
        engine.chat_context_query(status="done")
    with pytest.raises(GrepError, match="limit must be from 1 to 200"):
        engine.chat_context_query(limit=0)
    result = engine.chat_context_query(text='AND OR "unbalanced (')  # sanitized, not an error
    assert result.frames == [] and result.executions == []


def test_lossless_query_from_the_cli(run_cli, db: str, engine: Engine) -> None:  # type: ignore[no-untyped-def]
    out = run_cli("--db", db, "query", "--status", "error")
    assert out.code == 0, out
    assert "toolu_2b bash error 2500 ms" in out.out
    data = json.loads(run_cli("--db", db, "query", "--tool", "ls", "--json").out)
    assert [e["execution_id"] for e in data["executions"]] == ["call_y", "call_x"]
    bad = run_cli("--db", db, "query", "--limit", "500")
    assert bad.code == 2
