"""Versioned, incremental session summaries: the update, chunking, model replies and their
fallback, the extractive path, auto-summarize, the CLI and the MCP tools."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from lossless import Config, ConflictError, Engine, NotFoundError
from lossless.mcp_server import build_server
from lossless.sample import write_session
from lossless.sessions import MAX_DECISIONS, SessionSummary, parse_reply
from lossless.summarize import ScriptedSummarizer, SummaryRequest

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def reply(overview: str, **lists: list[str]) -> str:
    """A well-formed model reply."""
    return json.dumps(
        {
            "overview": overview,
            "topics": lists.get("topics", []),
            "decisions": lists.get("decisions", []),
            "code_references": lists.get("code_references", []),
            "key_points": lists.get("key_points", []),
        }
    )


def chat(engine: Engine, session: str, count: int, *, start: int = 0) -> list[int]:
    """*count* alternating user/assistant messages, one minute apart; their ids."""
    ids = []
    for i in range(start, start + count):
        role = "user" if i % 2 == 0 else "assistant"
        result = engine.ingest(
            session,
            {"role": role, "content": f"message {i}: we talked about the deploy pipeline"},
            created_at=T0 + timedelta(minutes=i),
        )
        ids.extend(result.message_ids)
    return ids


def refs(request: SummaryRequest) -> list[str]:
    return [s.ref for s in request.sources]


@pytest.fixture
def scripted(db: str) -> Iterator[tuple[Engine, ScriptedSummarizer]]:
    summarizer = ScriptedSummarizer(model="model-x")
    with Engine.open(db, config=Config(), summarizer=summarizer) as engine:
        yield engine, summarizer


# --- versions and the incremental update -----------------------------------------------------


def test_the_first_summary_is_version_1_of_every_message_with_the_models_fields(
    scripted: tuple[Engine, ScriptedSummarizer],
) -> None:
    engine, summarizer = scripted
    ids = chat(engine, "sess", 6)
    summarizer.enqueue(
        reply(
            "The user and the agent discussed the deploy pipeline.",
            topics=["deploy pipeline"],
            decisions=["Use blue-green deploys because rollbacks must be instant."],
            code_references=["deploy/pipeline.yaml"],
            key_points=["Staging must be green before production."],
        )
    )
    summary = engine.summarize_session("sess")
    assert summary.version == 1
    assert not summary.is_incremental
    assert (summary.first_message_id, summary.last_message_id) == (ids[0], ids[-1])
    assert summary.message_count == summary.messages_processed == 6
    assert summary.model == "model-x"
    assert summary.summary == "The user and the agent discussed the deploy pipeline."
    assert summary.topics == ("deploy pipeline",)
    assert summary.decisions == ("Use blue-green deploys because rollbacks must be instant.",)
    assert summary.code_references == ("deploy/pipeline.yaml",)
    assert summary.key_points == ("Staging must be green before production.",)
    assert summary.session_summary_id.startswith("ss_") and len(summary.session_summary_id) == 19
    (request,) = summarizer.requests
    assert request.kind == "session" and request.level == "normal"
    assert refs(request) == [f"msg#{i}" for i in ids]
    assert "untrusted" in request.system and "JSON" in request.system
    assert "message 5: we talked" in request.prompt
    for name in ("overview", "topics", "decisions", "code_references", "key_points"):
        assert f'"{name}"' in request.prompt
    # The conversation row holds the latest version for quick access.
    row = engine.store.fetchall(
        "SELECT summary, summary_version FROM conversations WHERE session_id = 'sess'"
    )
    assert row == [(summary.summary, 1)]


def test_an_incremental_update_sends_only_the_new_messages_and_the_previous_summary(
    scripted: tuple[Engine, ScriptedSummarizer],
) -> None:
    engine, summarizer = scripted
    chat(engine, "sess", 6)
    summarizer.enqueue(reply("First part: the deploy pipeline.", decisions=["Use blue-green."]))
    first = engine.summarize_session("sess")
    new_ids = chat(engine, "sess", 3, start=6)
    summarizer.enqueue(reply("Both parts.", decisions=["Use blue-green.", "Pin Python 3.12."]))
    second = engine.summarize_session("sess")

    update = summarizer.requests[-1]
    assert refs(update) == [f"msg#{i}" for i in new_ids]
    assert "You are updating a conversation summary." in update.prompt
    assert "covers messages up to 2026-03-02 09:05 UTC" in update.prompt
    assert "First part: the deploy pipeline." in update.prompt
    assert "message 2:" not in update.prompt  # nothing already summarized is sent again
    assert second.version == 2 and second.is_incremental
    assert second.messages_processed == 3 and second.message_count == 9
    assert second.first_message_id == first.first_message_id
    assert second.last_message_id == new_ids[-1]
    assert second.decisions == ("Use blue-green.", "Pin Python 3.12.")
    # Version 1 is still there, exactly as it was written.
    assert engine.session_summaries("sess") == [first, second]
    assert engine.store.latest_session_summary(first.conversation_id) == second


def test_with_no_new_messages_the_latest_version_comes_back_without_a_call(
    scripted: tuple[Engine, ScriptedSummarizer],
) -> None:
    engine, summarizer = scripted
    chat(engine, "sess", 4)
    summarizer.enqueue(reply("The deploy pipeline."))
    first = engine.summarize_session("sess")
    again = engine.summarize_session(first.conversation_id)  # by id, the same conversation
    assert again == first
    assert summarizer.calls == 1
    assert len(engine.session_summaries("sess")) == 1


def test_full_summarizes_every_message_again_as_a_new_version(
    scripted: tuple[Engine, ScriptedSummarizer],
) -> None:
    engine, summarizer = scripted
    ids = chat(engine, "sess", 4)
    summarizer.enqueue(reply("v1"))
    engine.summarize_session("sess")
    ids += chat(engine, "sess", 2, start=4)
    summarizer.enqueue(reply("v2"))
    engine.summarize_session("sess")
    summarizer.enqueue(reply("v3 from scratch"))
    third = engine.summarize_session("sess", full=True)
    request = summarizer.requests[-1]
    assert refs(request) == [f"msg#{i}" for i in ids]
    assert "<previous_summary>" not in request.prompt and "v2" not in request.prompt
    assert third.version == 3 and not third.is_incremental
    assert third.messages_processed == third.message_count == 6
    assert [v.summary for v in engine.session_summaries("sess")] == ["v1", "v2", "v3 from scratch"]


def test_the_store_refuses_a_version_that_would_overwrite_another(
    scripted: tuple[Engine, ScriptedSummarizer],
) -> None:
    engine, summarizer = scripted
    chat(engine, "sess", 2)
    summarizer.enqueue(reply("the original"))
    first = engine.summarize_session("sess")
    clash = SessionSummary(**{**first.__dict__, "session_summary_id": "ss_0", "summary": "new"})
    with pytest.raises(ConflictError, match="version 1 already"):
        engine.store.insert_session_summary(clash)
    assert engine.session_summaries("sess") == [first]


def test_summarizing_an_unknown_or_empty_conversation_says_so(engine: Engine) -> None:
    with pytest.raises(NotFoundError, match="no conversation with session id 'nope'"):
        engine.summarize_session("nope")
    conv = engine.store.get_or_create_conversation("empty")
    with pytest.raises(NotFoundError, match="no messages yet"):
        engine.summarize_session(conv.conversation_id)


# --- model replies: lenient reading, retry, fallback ------------------------------------------


def test_a_malformed_reply_is_retried_with_the_aggressive_prompt(
    scripted: tuple[Engine, ScriptedSummarizer],
) -> None:
    engine, summarizer = scripted
    chat(engine, "sess", 4)
    summarizer.enqueue("Sure! Here is a summary of the chat.", reply("Read on the second try."))
    summary = engine.summarize_session("sess")
    first, second = summarizer.requests
    assert (first.level, second.level) == ("normal", "aggressive")
    assert second.temperature < first.temperature
    assert second.target_tokens < first.target_tokens
    assert "could not be read as the JSON object" in second.prompt
    assert summary.summary == "Read on the second try."
    assert summary.model == "model-x"


@pytest.mark.parametrize(
    "answers",
    [
        ("no JSON here", "nor here"),
        (RuntimeError("provider down"), TimeoutError()),
        ('{"topics": ["no overview"]}', "```json\n{broken\n```"),
    ],
    ids=["malformed twice", "failing twice", "no overview, then broken JSON"],
)
def test_two_unusable_replies_fall_back_to_the_deterministic_extraction(
    scripted: tuple[Engine, ScriptedSummarizer], answers: tuple[Any, Any]
) -> None:
    engine, summarizer = scripted
    engine.ingest("sess", {"role": "user", "content": "Please fix the flaky login test."})
    engine.ingest(
        "sess",
        {
            "role": "assistant",
            "content": "Decision: we'll use a retry budget of 3 in auth/login.py.",
        },
    )
    summarizer.enqueue(*answers)
    summary = engine.summarize_session("sess")
    assert summarizer.calls == 2
    assert summary.model == "fallback"
    assert summary.decisions == ("Decision: we'll use a retry budget of 3 in auth/login.py.",)
    assert "auth/login.py" in summary.code_references
    assert "retry budget" in summary.summary  # the extractive overview
    assert summary.version == 1


@pytest.mark.parametrize(
    ("text", "overview", "decisions", "code"),
    [
        (
            'Here you go:\n```json\n{"overview": "O.", "decisions": ["D1"], '
            '"code_references": ["a.py"]}\n```\nAnything else?',
            "O.",
            ("D1",),
            ("a.py",),
        ),
        (
            '{"Summary": "O.", "Decisions": "- D1\\n- D2", "Code References": [{"path": "a.py"}]}',
            "O.",
            ("D1", "D2"),
            ("path: a.py",),
        ),
        ('{"session_summary": {"overview": "O.", "key-points": ["K"]}}', "O.", (), ()),
        (
            "## Overview\nO.\n\n**Decisions:**\n- D1\n1. D2\n\nCode references: a.py\n",
            "O.",
            ("D1", "D2"),
            ("a.py",),
        ),
    ],
    ids=["fenced, with prose", "other spellings", "wrapped", "headed sections"],
)
def test_replies_are_read_leniently(
    text: str, overview: str, decisions: tuple[str, ...], code: tuple[str, ...]
) -> None:
    draft = parse_reply(text)
    assert draft is not None
    assert draft.overview == overview
    assert tuple(draft.decisions) == decisions
    assert tuple(draft.code_references) == code


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Just some prose about the session.",
        '{"topics": ["x"]}',
        "[1, 2, 3]",
        '{"overview": ""}',
    ],
)
def test_a_reply_without_an_overview_is_unreadable(text: str) -> None:
    assert parse_reply(text) is None


def test_an_oversized_model_reply_is_kept_within_the_caps(
    scripted: tuple[Engine, ScriptedSummarizer],
) -> None:
    engine, summarizer = scripted
    chat(engine, "sess", 2)
    summarizer.enqueue(
        reply("word " * 20_000, decisions=[f"decision {i}" for i in range(MAX_DECISIONS + 20)])
    )
    summary = engine.summarize_session("sess")
    assert len(summary.decisions) == MAX_DECISIONS
    assert summary.decisions[-1] == f"decision {MAX_DECISIONS + 19}"
    assert engine.token_counter.count(summary.summary) <= 3 * 1_200 + 16
    assert summary.summary.endswith("[Truncated for context management]")


# --- the offline extractive path -------------------------------------------------------------

SESSION = [
    (
        "user",
        "Please add retries to the uploader in src/upload/client.py; it must never drop a file.",
    ),
    (
        "assistant",
        "I read `MAX_RETRIES` in src/upload/client.py. We decided to use exponential backoff "
        "because the storage API throttles bursts. I will call retry_upload() from UploadClient.",
    ),
    ("tool", "Traceback (most recent call last):\nConnectionResetError: peer reset the upload"),
    ("assistant", "The uploader retries now; the backoff cap is still open, todo for tomorrow."),
    ("user", "Thanks. The uploader retries look right; backoff jitter next."),
]


def _extractive_session(target: str) -> SessionSummary:
    with Engine.open(target, config=Config()) as engine:
        for role, text in SESSION:
            message: dict[str, Any] = {"role": role, "content": text}
            if role == "tool":
                message["tool_call_id"] = "call_1"
            engine.ingest("sess", message)
        return engine.summarize_session("sess")


def test_the_extractive_summarizer_extracts_the_fields_deterministically(
    new_db: Callable[[], str],
) -> None:
    summary = _extractive_session(new_db())
    assert summary.model == "extractive"
    assert summary.decisions == (
        "We decided to use exponential backoff because the storage API throttles bursts.",
    )
    for ref in ("src/upload/client.py", "MAX_RETRIES", "retry_upload()", "UploadClient"):
        assert ref in summary.code_references
    assert "ConnectionResetError: peer reset the upload" in summary.key_points
    assert any("must never drop a file" in k for k in summary.key_points)
    assert any("still open" in k for k in summary.key_points)
    assert "uploader retries" in summary.topics  # a pair of words stands in for its words
    assert "exponential backoff" in summary.summary  # the overview is the extractive summary
    again = _extractive_session(new_db())
    assert (again.summary, again.topics, again.decisions, again.code_references) == (
        summary.summary,
        summary.topics,
        summary.decisions,
        summary.code_references,
    )
    assert again.key_points == summary.key_points


def test_an_extractive_update_keeps_earlier_decisions_and_adds_the_new_ones(
    engine: Engine,
) -> None:
    engine.ingest(
        "sess", {"role": "assistant", "content": "Decision: we chose SQLite for the cache."}
    )
    engine.summarize_session("sess")
    engine.ingest("sess", {"role": "user", "content": "Let's use port 9043 for staging instead."})
    second = engine.summarize_session("sess")
    assert second.is_incremental and second.messages_processed == 1
    assert second.decisions == (
        "Decision: we chose SQLite for the cache.",
        "Let's use port 9043 for staging instead.",
    )


def test_a_guarded_extractive_summarizer_takes_the_deterministic_path_too(
    new_db: Callable[[], str],
) -> None:
    config = Config().replace(guards={"offline": True})
    with Engine.open(new_db(), config=config) as engine:
        assert type(engine.summarizer).__name__ == "GuardedExtractiveSummarizer"
        engine.ingest("sess", {"role": "user", "content": "Decision: we'll use uv for installs."})
        summary = engine.summarize_session("sess")
    assert summary.model == "extractive"
    assert summary.decisions == ("Decision: we'll use uv for installs.",)


# --- no silent truncation: chunks ------------------------------------------------------------

LAST_FACT = "Decision: the release codename is AURORA-7731 because the board voted for it."


def _long_session(engine: Engine, count: int) -> list[int]:
    batch: list[dict[str, Any]] = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"step {i}: routine progress on the ingestion worker and its queue depth",
        }
        for i in range(count - 1)
    ]
    batch.append({"role": "user", "content": LAST_FACT})
    return list(engine.ingest_batch("long", batch).message_ids)


def test_thousands_of_messages_are_chunked_and_the_last_one_reaches_the_summary(
    new_db: Callable[[], str],
) -> None:
    config = Config().replace(sessions={"chunk_tokens": 5_000})
    with Engine.open(new_db(), config=config) as engine:
        ids = _long_session(engine, 3_000)
        summary = engine.summarize_session("long")
    assert summary.messages_processed == summary.message_count == 3_000
    assert summary.last_message_id == ids[-1]
    assert LAST_FACT in summary.decisions
    assert "AURORA-7731" in summary.render()


def test_chunks_chain_through_the_update_and_cover_every_message(
    new_db: Callable[[], str],
) -> None:
    def answer(request: SummaryRequest) -> str:
        return reply(f"up to {request.sources[-1].ref}: {request.sources[-1].text}")

    summarizer = ScriptedSummarizer(default=answer)
    config = Config().replace(sessions={"chunk_tokens": 5_000})
    with Engine.open(new_db(), config=config, summarizer=summarizer) as engine:
        ids = _long_session(engine, 3_000)
        summary = engine.summarize_session("long")
        versions = engine.session_summaries("long")
    requests = summarizer.requests
    assert len(requests) > 3
    assert [r for req in requests for r in refs(req)] == [f"msg#{i}" for i in ids]
    assert all(sum(s.tokens for s in req.sources) <= 5_000 for req in requests)
    assert "<previous_summary>" not in requests[0].prompt
    for before, after in itertools.pairwise(requests):
        # Each chunk's result is the next chunk's previous summary.
        assert f"up to {before.sources[-1].ref}" in after.prompt
    assert summary.summary == f"up to msg#{ids[-1]}: {LAST_FACT}"
    assert [v.version for v in versions] == [1]  # one version for the whole run
    assert summary.messages_processed == 3_000


def test_a_message_larger_than_a_chunk_is_sent_in_pieces_none_dropped(
    new_db: Callable[[], str],
) -> None:
    def answer(request: SummaryRequest) -> str:
        return reply(f"read {request.sources[-1].ref}")

    summarizer = ScriptedSummarizer(default=answer)
    config = Config().replace(sessions={"chunk_tokens": 200})
    words = [f"w{i}" for i in range(600)]
    with Engine.open(new_db(), config=config, summarizer=summarizer) as engine:
        engine.ingest("big", {"role": "user", "content": "before"})
        engine.ingest("big", {"role": "tool", "tool_call_id": "c", "content": " ".join(words)})
        summary = engine.summarize_session("big")
    requests = summarizer.requests
    assert refs(requests[0]) == ["msg#1"]
    pieces = [s for req in requests[1:] for s in req.sources]
    assert len(requests) > 3  # the pieces went in several requests, each within the chunk
    assert all(sum(x.tokens for x in req.sources) <= 200 for req in requests)
    assert [x.ref for x in pieces] == [
        f"msg#2 (part {n} of {len(pieces)})" for n in range(1, len(pieces) + 1)
    ]
    assert " ".join(s.text for s in pieces).split() == words
    for before, after in itertools.pairwise(requests):
        assert f"read {before.sources[-1].ref}" in after.prompt
    assert summary.summary == f"read {pieces[-1].ref}" and summary.messages_processed == 2


# --- auto-summarize -----------------------------------------------------------------------------


class Gate:
    """A summarizer step that says when it started and waits (bounded) to be released."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, request: SummaryRequest) -> str:
        self.started.set()
        assert self.release.wait(10), "the test never released the summarizer"
        return reply(f"summary up to {request.sources[-1].ref}")


def _auto_engine(target: str, summarizer: ScriptedSummarizer, interval: int = 5) -> Engine:
    config = Config().replace(sessions={"auto_summarize": True, "summarize_interval": interval})
    return Engine.open(target, config=config, summarizer=summarizer)


def test_auto_summarize_runs_when_the_count_crosses_the_interval_without_blocking_ingest(
    new_db: Callable[[], str],
) -> None:
    gate = Gate()
    summarizer = ScriptedSummarizer(default=gate)
    with _auto_engine(new_db(), summarizer) as engine:
        chat(engine, "sess", 4)
        assert engine.wait_for_session_summaries(5) == [] and summarizer.calls == 0
        chat(engine, "sess", 1, start=4)  # the 5th message: returns while the model works
        assert gate.started.wait(5)
        assert engine.session_summaries("sess") == []
        chat(engine, "sess", 2, start=5)  # ingest goes on while the summary is being made
        gate.release.set()
        (first,) = engine.wait_for_session_summaries(10)
        assert first.version == 1 and first.message_count >= 5
        # 7 → 12 messages in one after_turn crosses 10: one more (incremental) version.
        engine.after_turn("sess", [{"role": "user", "content": f"more {i}"} for i in range(5)])
        engine.wait_for_session_summaries(10)
        versions = engine.session_summaries("sess")
    assert [v.version for v in versions][-1] >= 2
    assert versions[-1].is_incremental and versions[-1].message_count == 12
    assert sum(v.messages_processed for v in versions) == 12


def test_auto_summarize_is_off_by_default(new_db: Callable[[], str]) -> None:
    summarizer = ScriptedSummarizer()
    with Engine.open(new_db(), config=Config(), summarizer=summarizer) as engine:
        chat(engine, "sess", 45)
        assert engine.wait_for_session_summaries(5) == []
        assert engine.session_summaries("sess") == []
    assert summarizer.calls == 0


def test_engine_close_waits_for_a_queued_session_summary(new_db: Callable[[], str]) -> None:
    gate = Gate()
    db = new_db()
    engine = _auto_engine(db, ScriptedSummarizer(default=gate), interval=2)
    chat(engine, "sess", 2)
    assert gate.started.wait(5)
    closer = threading.Thread(target=engine.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # close is waiting for the summary
    gate.release.set()
    closer.join(10)
    assert not closer.is_alive()
    with Engine.open(db, config=Config()) as reopened:
        (summary,) = reopened.session_summaries("sess")
    assert summary.summary.startswith("summary up to msg#")


# --- CLI --------------------------------------------------------------------------------------


def test_cli_summarize_and_sessions_show_the_version_history(  # type: ignore[no-untyped-def]
    run_cli, db: str, tmp_path: Path
) -> None:
    transcript = write_session(tmp_path / "s.jsonl", 10, session_id="sess-a")
    assert run_cli("--db", db, "import", str(transcript)).code == 0

    listed = run_cli("--db", db, "sessions")
    assert listed.code == 0 and "sess-a" in listed.out and "lossless summarize" in listed.out

    made = run_cli("--db", db, "summarize", "sess-a")
    assert made.code == 0, made
    assert "session summary v1 (full: 68 message(s)" in made.out
    assert "Decisions:" in made.out and "cursor-based pagination" in made.out

    same = json.loads(run_cli("--db", db, "summarize", "1", "--json").out)
    assert same["version"] == 1 and same["unchanged"] is True

    full = json.loads(run_cli("--db", db, "summarize", "sess-a", "--full", "--json").out)
    assert full["version"] == 2 and full["is_incremental"] is False and not full["unchanged"]
    assert "src/inventory/reservations.py" in full["code_references"]

    history = json.loads(run_cli("--db", db, "sessions", "--summaries", "--json").out)
    (row,) = history
    assert row["summary_version"] == 2 and row["summary_covers"] == 68
    assert [(v["version"], v["message_count"], v["model"]) for v in row["versions"]] == [
        (1, 68, "extractive"),
        (2, 68, "extractive"),
    ]
    table = run_cli("--db", db, "sessions", "--summaries").out
    assert "v2" in table and "v1" in table and "extractive" in table

    missing = run_cli("--db", db, "summarize", "nope")
    assert missing.code == 4 and "no conversation" in missing.err


# --- MCP ----------------------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def connected(engine: Engine, **scope: Any) -> AsyncIterator[Client]:
    with anyio.fail_after(10):
        async with Client(build_server(engine, **scope)) as client:
            yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    assert result.structured_content is not None
    return result.structured_content


async def refusal(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


@pytest.mark.anyio
async def test_mcp_summarize_session_is_incremental_by_default(engine: Engine) -> None:
    chat(engine, "alpha", 4)
    async with connected(engine) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        first = await call(client, "summarize_session", conversation="alpha")
        same = await call(client, "summarize_session", conversation="alpha")
        chat(engine, "alpha", 2, start=4)
        update = await call(client, "summarize_session", conversation="alpha")
        full = await call(client, "summarize_session", conversation="alpha", incremental=False)
        unnamed = await refusal(client, "summarize_session")
    schema = tools["summarize_session"].input_schema["properties"]
    assert schema["incremental"]["default"] is True
    assert "incremental" in (tools["summarize_session"].description or "")
    assert (first["version"], first["is_incremental"], first["messages_processed"]) == (1, False, 4)
    assert first["first_message_id"] == "msg#1" and first["last_message_id"] == "msg#4"
    for key in ("summary", "topics", "decisions", "code_references", "key_points", "model"):
        assert key in first
    assert same["version"] == 1 and same["unchanged"] is True
    assert (update["version"], update["is_incremental"], update["messages_processed"]) == (
        2,
        True,
        2,
    )
    assert (full["version"], full["is_incremental"], full["messages_processed"]) == (3, False, 6)
    assert "name the conversation" in unnamed


@pytest.mark.anyio
async def test_mcp_get_history_pages_messages_and_adds_the_versions(engine: Engine) -> None:
    ids = chat(engine, "alpha", 7)
    engine.summarize_session("alpha")
    async with connected(engine) as client:
        page1 = await call(client, "get_history", conversation="alpha", limit=3)
        page2 = await call(
            client, "get_history", conversation="alpha", limit=3, after_seq=page1["next_after_seq"]
        )
        last = await call(client, "get_history", conversation="alpha", after_seq=6)
        capped = await call(client, "get_history", conversation="alpha", token_cap=1)
        with_versions = await call(
            client, "get_history", conversation="alpha", include_summaries=True
        )
    assert [m["id"] for m in page1["messages"]] == [f"msg#{i}" for i in ids[:3]]
    assert page1["next_after_seq"] == 3 and page1["total_messages"] == 7
    assert [m["seq"] for m in page2["messages"]] == [4, 5, 6]
    assert page1["messages"][0]["content"] == "message 0: we talked about the deploy pipeline"
    assert [m["seq"] for m in last["messages"]] == [7] and last["next_after_seq"] is None
    assert len(capped["messages"]) == 1 and capped["next_after_seq"] == 1
    assert "summaries" not in page1
    (version,) = with_versions["summaries"]
    assert version["version"] == 1 and version["last_message_id"] == f"msg#{ids[-1]}"


@pytest.mark.anyio
async def test_mcp_session_tools_respect_pinned_and_grant_scopes(engine: Engine) -> None:
    chat(engine, "alpha", 3)
    chat(engine, "beta", 3)
    async with connected(engine, conversation="alpha") as client:
        pinned = await call(client, "summarize_session")
        history = await call(client, "get_history")
        other = await refusal(client, "summarize_session", conversation="beta")
        other_history = await refusal(client, "get_history", conversation="beta")
    assert pinned["conversation_id"] == history["conversation_id"] == 1
    assert "not one these tools can see" in other and "not one these tools can see" in other_history
    assert engine.session_summaries("beta") == []

    grant = engine.create_grant("alpha")
    async with connected(engine, grant_id=grant.grant_id) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        read = await call(client, "get_history")
        outside = await refusal(client, "get_history", conversation="beta")
        missing = await refusal(client, "summarize_session", conversation="alpha")
    assert "get_history" in names and "summarize_session" not in names
    assert read["session_id"] == "alpha" and len(read["messages"]) == 3
    assert "not one these tools can see" in outside
    assert "Unknown tool" in missing
