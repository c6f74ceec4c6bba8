"""The resume summary: deterministic, bounded, quoted from the store, injected after the
summaries, and stable between compactions."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.resume import HONESTY_GATE
from lossless.summarize import ScriptedSummarizer

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=200,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)
T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
GATE = (
    "BE HONEST: DO YOU HAVE ENOUGH INFORMATION TO CONTINUE?\n"
    "If NO: query past context and tool results before continuing.\n"
    "If YES: proceed."
)


class Session:
    """Writes a Claude-style session with tool calls, one message a minute."""

    def __init__(self, engine: Engine, session: str = "work") -> None:
        self.engine, self.session, self.n, self.calls = engine, session, 0, 0

    def add(self, message: dict[str, Any]) -> None:
        self.n += 1
        self.engine.ingest(self.session, message, created_at=T0 + timedelta(minutes=self.n))

    def user(self, text: str) -> None:
        self.add({"role": "user", "content": text})

    def tool(self, name: str, args: dict[str, Any], output: str, *, error: bool = False) -> str:
        self.calls += 1
        call_id = f"toolu_{self.calls:03d}"
        self.add(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}],
            }
        )
        self.add(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": output,
                        "is_error": error,
                    }
                ],
            }
        )
        return call_id


def build(engine: Engine) -> dict[str, str]:
    s = Session(engine)
    s.user("Add rate limiting to the public API and keep the tests green.")
    s.tool("Read", {"file_path": "src/api/app.py"}, "from flask import Flask ...")
    s.tool("Edit", {"file_path": "src/api/limits.py", "old_string": "", "new_string": "X"}, "ok")
    s.user("ok")
    s.user("Change of plan: use a token bucket per API key instead of per IP.")
    s.tool(
        "TodoWrite",
        {
            "todos": [
                {"content": "token bucket in src/api/limits.py", "status": "completed"},
                {"content": "document limits in docs/limits.md", "status": "pending"},
            ]
        },
        "Todos updated",
    )
    failed = s.tool(
        "Edit",
        {"file_path": "src/api/app.py", "old_string": "a", "new_string": "b"},
        "old_string not found",
        error=True,
    )
    s.tool("Write", {"file_path": "tests/test_limits.py", "content": "def test(): ..."}, "ok")
    s.user("Now make the bucket size configurable through settings.toml.")
    s.tool("Bash", {"command": "pytest -q"}, "12 passed")
    s.user("nice")
    s.user("thanks")  # the fresh tail: two messages
    return {"failed": failed}


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    eng = Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer())
    build(eng)
    eng.compact("work")
    yield eng
    eng.close()


def test_the_parts_come_from_the_stored_session(engine: Engine) -> None:
    summary = engine.resume("work")
    assert summary.upto_seq is not None
    assert summary.goal == [
        "Add rate limiting to the public API and keep the tests green.",
        "Change of plan: use a token bucket per API key instead of per IP.",
    ]
    assert summary.current_task == "Now make the bucket size configurable through settings.toml."
    assert summary.files_modified == ["tests/test_limits.py", "src/api/limits.py"]
    assert summary.files_pending == ["docs/limits.md", "src/api/app.py"]
    failed = [e for e in summary.executions if " error " in e]
    assert failed and failed[0].startswith("toolu_004 Edit error")
    assert summary.text.endswith(
        GATE + "\nRetrieval tools: chat_context_query (past messages and tool results, by text,"
        " tool or execution id), lcm_grep (search messages and summaries), lcm_expand_query"
        " (ask a question of the exact history below the summaries)."
    )
    assert HONESTY_GATE == GATE


def test_nothing_in_it_is_invented(engine: Engine) -> None:
    text = engine.resume("work").text
    stored = " ".join(
        r[0] or "" for r in engine.store.fetchall("SELECT content FROM messages")
    ) + " ".join(r[0] or "" for r in engine.store.fetchall("SELECT input FROM tool_executions"))
    for path in re.findall(r"[\w./-]+\.(?:py|md|toml)", text):
        assert path in stored, path
    ids = {r[0] for r in engine.store.fetchall("SELECT execution_id FROM tool_executions")}
    for ident in re.findall(r"toolu_\d+", text):
        assert ident in ids
    for mid in re.findall(r"msg#(\d+)", text):
        assert (
            engine.get_message(int(mid)).conversation_id
            == engine.conversation("work").conversation_id
        )


def test_it_is_deterministic_across_stores(new_db: Callable[[], str], engine: Engine) -> None:
    with Engine.open(new_db(), config=SMALL, summarizer=ScriptedSummarizer()) as other:
        build(other)
        other.compact("work")
        assert other.resume("work").text == engine.resume("work").text
    assert engine.resume("work").text == engine.resume("work").text


def test_it_is_injected_after_the_summaries_and_stays_put_until_the_next_compaction(
    engine: Engine,
) -> None:
    first = engine.assemble("work", token_budget=50_000, format="openai", fill=False)
    texts = [m.get("content") for m in first.messages]
    at = next(
        n for n, t in enumerate(texts) if isinstance(t, str) and t.startswith("Resume summary")
    )
    assert all("<summary" in str(t) for t in texts[:at])
    assert at > 0 and "<summary" not in str(texts[at + 1])
    assert first.resume_tokens > 0

    engine.ingest("work", {"role": "user", "content": "one more thing"})
    second = engine.assemble("work", token_budget=50_000, format="openai", fill=False)
    prefix = json.dumps(first.messages[: at + 1])
    assert json.dumps(second.messages[: at + 1]) == prefix  # byte-identical: caches keep hitting

    s = Session(engine)
    s.n = 100
    for i in range(8):
        s.user(f"Please also handle burst traffic case {i} in the limiter module now.")
    engine.compact("work")
    third = engine.assemble("work", token_budget=50_000, format="openai", fill=False)
    resumes = [m["content"] for m in third.messages if str(m.get("content")).startswith("Resume")]
    assert len(resumes) == 1 and "burst traffic case" in resumes[0]


def test_injection_can_be_turned_off_and_needs_a_compaction(new_db: Callable[[], str]) -> None:
    off = Engine.open(
        new_db(),
        config=SMALL.replace(resume={"inject": False}),
        summarizer=ScriptedSummarizer(),
    )
    build(off)
    off.compact("work")
    assembled = off.assemble("work", token_budget=50_000, format="anthropic")
    assert assembled.resume_tokens == 0
    assert "Resume summary" not in json.dumps(assembled.messages)
    off.close()

    fresh = Engine.open(new_db(), config=SMALL, summarizer=ScriptedSummarizer())
    build(fresh)
    assert fresh.resume("work").upto_seq is None
    assert "Resume summary" not in json.dumps(fresh.assemble("work", token_budget=50_000).messages)
    assert fresh.resume("work", latest=True).current_task == (
        'Now make the bucket size configurable through settings.toml. (then: "thanks")'
    )
    fresh.close()


def test_it_is_bounded_and_says_what_it_left_out(new_db: Callable[[], str]) -> None:
    eng = Engine.open(
        new_db(),
        config=SMALL.replace(resume={"max_tokens": 200}),
        summarizer=ScriptedSummarizer(),
    )
    s = Session(eng)
    s.user("Rename every module.")
    for i in range(40):
        s.tool("Write", {"file_path": f"src/pkg/module_{i:02d}.py", "content": "x"}, "ok")
    s.user("done?")
    s.user("yes")
    eng.compact("work")
    text = eng.resume("work").text
    assert eng.token_counter.count(text) <= 200
    assert re.search(r"… and \d+ more \(chat_context_query lists them\)", text)
    assert text.endswith(
        "lcm_expand_query (ask a question of the exact history below the summaries)."
    )
    assert GATE in text
    eng.close()


def test_lossless_resume_prints_it(  # type: ignore[no-untyped-def]
    run_cli, engine: Engine, db: str, new_db: Callable[[], str]
) -> None:
    out = run_cli("--db", db, "resume", "work")
    assert out.code == 0 and out.out.rstrip().endswith("below the summaries).")
    assert GATE in out.out
    data = json.loads(run_cli("--db", db, "resume", "work", "--json").out)
    assert data["files_modified"] == ["tests/test_limits.py", "src/api/limits.py"]
    fresh = new_db()
    with Engine.open(fresh, config=SMALL) as eng:
        eng.ingest("new", {"role": "user", "content": "hello there, start the work"})
    nothing = run_cli("--db", fresh, "resume", "new")
    assert nothing.code == 1 and "has not been compacted yet" in nothing.err
    assert "start the work" in run_cli("--db", fresh, "resume", "new", "--latest").out
