"""The host's room: what a model window leaves the conversation's messages once the host's own
prompt and the reply are set aside, measured from the host's figures and kept per
conversation; and a compaction the host asks for, answered in the host's terms."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from lossless import Config, Engine
from lossless.summarize import ScriptedSummarizer

CONFIG = Config().replace(fresh_tail_count=16, leaf_chunk_tokens=4_000)


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def session(engine: Engine, turns: int, size: int = 170, name: str = "s") -> None:
    """*turns* user/assistant turns of about *size* words each."""
    for t in range(turns):
        engine.ingest(name, {"role": "user", "content": words(size, f"q{t}-")})
        engine.ingest(name, {"role": "assistant", "content": words(size, f"a{t}-")})


@pytest.fixture
def db(new_db: Callable[[], str]) -> str:
    return new_db()


def test_without_figures_the_host_takes_its_default_share_and_the_reply_its_reserve(
    db: str,
) -> None:
    with Engine.open(db, config=CONFIG) as engine:
        room = engine.room("s", 40_000)
    assert (room.overhead, room.reply, room.source) == (10_000, 4_096, "default")
    assert room.budget == 40_000 - 10_000 - 4_096
    # A small window keeps at most a quarter of itself for the reply.
    with Engine.open(db, config=CONFIG) as engine:
        assert engine.room("s", 8_000).reply == 2_000


def test_a_measured_host_part_is_kept_for_the_next_turn_in_a_new_process(db: str) -> None:
    with Engine.open(db, config=CONFIG) as engine:
        session(engine, 4)
        made = engine.assemble("s", 30_000)
        # The host sent those messages with its own 14,500 tokens and the new request (500).
        room = engine.measure_room(
            "s", window=40_000, prompt_tokens=made.tokens + 15_000, pending_tokens=500
        )
        assert room is not None and (room.overhead, room.source) == (14_500, "measured")
    with Engine.open(db, config=CONFIG) as engine:  # the next turn: a new process
        room = engine.room("s", 40_000, reply=8_000)
        assert (room.overhead, room.source) == (14_500, "recorded")
        assert room.budget == 40_000 - 14_500 - 8_000
        # Nothing to measure against in a process that assembled nothing.
        assert engine.measure_room("s", window=40_000, prompt_tokens=30_000) is None


def test_a_window_the_host_fills_alone_warns_once_and_keeps_the_minimum(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="lossless.room"),
        Engine.open(db, config=CONFIG) as engine,
    ):
        engine.measure_room("s", window=16_000, prompt_tokens=14_000, messages_tokens=0)
        room = engine.room("s", 16_000, reply=4_000)
        again = engine.room("s", 16_000, reply=4_000)
    assert room.overflows and room.budget == CONFIG.room.min_tokens == again.budget
    warned = [r.getMessage() for r in caplog.records if "leave" in r.getMessage()]
    assert len(warned) == 1, warned  # once per conversation and window
    assert "14,000" in warned[0] and "16,000-token window" in warned[0]
    assert "larger window" in warned[0]


def test_a_host_asked_compaction_fits_the_room_and_keeps_summaries_in_view(db: str) -> None:
    summarizer = ScriptedSummarizer()
    with Engine.open(db, config=CONFIG, summarizer=summarizer) as engine:
        session(engine, 150)  # 300 messages, about 100k tokens
        before = sum(i.tokens for i in engine.context("s"))
        room = engine.room("s", 40_000, overhead=18_000, reply=4_000)

        done = engine.compact_for_host("s", room, host_tokens=18_000 + before)

        assert done.compacted and done.passes > 0 and done.reason is None
        assert done.tokens_before == 18_000 + before
        assert done.messages_after <= room.budget
        assert done.tokens_after == 18_000 + done.messages_after <= 40_000 - 4_000
        made = engine.assemble("s", room.budget)
        assert made.tokens <= room.budget and made.summaries >= 1
        # Asked again in the same turn: answered without another run.
        calls = len(summarizer.requests)
        again = engine.compact_for_host("s", room)
        assert not again.compacted and again.reason is not None
        assert again.reason.startswith("already")
        assert len(summarizer.requests) == calls


def test_a_host_asked_compaction_with_nothing_to_do_says_it_is_under_target(db: str) -> None:
    with Engine.open(db, config=CONFIG) as engine:
        session(engine, 2)
        room = engine.room("s", 40_000, overhead=20_000, reply=4_000)
        done = engine.compact_for_host("s", room, host_tokens=21_000)
    assert not done.compacted
    assert done.reason is not None and done.reason.startswith("already under target")
    assert done.tokens_before == 21_000


def test_a_newest_exchange_larger_than_the_room_is_already_compacted_and_shown_clipped(
    db: str,
) -> None:
    with Engine.open(db, config=CONFIG) as engine:
        session(engine, 3)
        engine.ingest("s", {"role": "user", "content": words(6_000, "paste")})
        room = engine.room("s", 16_000, overhead=9_000, reply=3_000)
        first = engine.compact_for_host("s", room)  # the turns before it are summarized
        assert first.compacted and first.messages_after <= room.budget
        done = engine.compact_for_host("s", room)
        assert not done.compacted
        assert done.reason is not None and done.reason.startswith("already compacted")
        made = engine.assemble("s", room.budget)
    assert made.tokens <= room.budget
    assert made.clipped is not None  # its head, and where to read it whole


def test_the_room_is_in_the_conversations_metadata_for_status(tmp_path: Path) -> None:
    with Engine.open(tmp_path / "s.db", config=CONFIG) as engine:
        session(engine, 1)
        engine.assemble("s", 10_000)
        engine.measure_room("s", window=32_000, prompt_tokens=20_000, reply=8_000)
        kept = engine.conversation("s").metadata["room"]
    assert kept["window"] == 32_000 and kept["reply"] == 8_000
    assert kept["overhead"] > 19_000
