"""Compaction under pressure: until a target (the hard fanout floor, folding instead of a
deeper level), forced down to the newest exchange, a host's instructions, a stop between
passes, and stretches that will not get smaller (the helpers: ``compaction_support.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compaction_support import (
    SMALL,
    EngineFactory,
    Feed,
    engines,
    raw_ids,
    scripted,
)
from lossless import Engine, doctor
from lossless.compaction import Compactor
from lossless.sample import write_session
from lossless.summarize import ScriptedSummarizer, SummaryRequest


@pytest.fixture
def open_engine(new_db: Callable[[], str]) -> Iterator[EngineFactory]:
    """``open_engine(summarizer, **config_changes)``: an engine on a new store (of each back
    end in turn)."""
    yield from engines(new_db)


def test_until_under_stops_once_the_context_is_under_the_target(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine()
    Feed(engine).turns(20)  # 2,000 tokens
    already = engine.compact("s", until=5_000)
    assert already.rounds == 0 and already.passes == [] and already.reached_target
    assert scripted(engine).calls == 0

    report = engine.compact("s", until=1_000)

    assert report.reached_target is True
    assert report.tokens_after <= 1_000
    assert report.rounds == 1  # one sweep got it there; no second round
    assert report.target == 1_000
    calls = scripted(engine).calls
    assert engine.compact("s", until=1_000).rounds == 0
    assert scripted(engine).calls == calls


@pytest.mark.parametrize("max_rounds", [1, 2, 3])
def test_until_under_uses_at_most_max_rounds(open_engine: EngineFactory, max_rounds: int) -> None:
    engine = open_engine(max_rounds=max_rounds, leaf_min_fanout=4, condensed_min_fanout=4)
    Feed(engine).turns(30)
    report = engine.compact("s", until=1)  # out of reach: the tail alone is bigger
    assert 1 <= report.rounds <= max_rounds
    assert report.reached_target is False
    assert scripted(engine).calls == report.summarizer_calls
    assert doctor.check(engine.store) == []


def test_until_under_falls_back_to_the_hard_fanout_floor_within_its_rounds(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine(
        max_rounds=2, leaf_min_fanout=4, condensed_min_fanout=4, condensed_min_fanout_hard=2
    )
    ids = Feed(engine).turns(10)  # 16 messages outside the tail: 3 leaves, fewer than 4
    report = engine.compact("s", until=1)

    # Under pressure the 3 leaves become one, still at depth 0: a level is added only when a
    # level has condensed_min_fanout summaries (3 < 4), so the depth stays within
    # 1 + log4(leaves) however often a tight window forces it.
    assert report.by_depth() == {0: 4}
    assert report.rounds <= 2
    ((folded, _),) = engine.context_summaries("s")
    assert folded.depth == 0 and folded.kind == "leaf"
    assert engine.summary_sources(folded.summary_id) == ([], ids[:16])
    retired = engine.store.get_summaries([p.summary_id for p in report.passes[:3]])
    assert [s.superseded_by for s in retired] == [folded.summary_id] * 3
    assert doctor.check(engine.store) == []
    assert engine.compact("s").passes == []  # a normal sweep would not have condensed them


def test_until_under_stops_early_when_nothing_more_can_be_compacted(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine(max_rounds=10)
    Feed(engine).turns(2)  # only the fresh tail
    report = engine.compact("s", until=1)
    assert report.passes == [] and report.reached_target is False
    assert report.rounds == 1
    assert scripted(engine).calls == 0


def test_until_under_reports_a_missed_target_when_the_fresh_tail_alone_exceeds_it(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine()
    feed = Feed(engine)
    feed.turns(4, tokens=50)
    tail = [feed.say("user", 100, "big question"), feed.say("assistant", 100, "big answer")]
    tail += [feed.say("user", 100, "another"), feed.say("assistant", 100, "reply")]

    report = engine.compact("s", until=300)  # the tail is 400 tokens

    assert report.reached_target is False
    assert report.tokens_after > 300
    assert raw_ids(engine)[-4:] == tail
    assert raw_ids(engine) == tail  # everything before it was compacted
    assert report.rounds <= SMALL.max_rounds
    assert report.to_dict()["reached_target"] is False


def test_a_known_budget_caps_the_fresh_tail_at_its_share(open_engine: EngineFactory) -> None:
    engine = open_engine(fresh_tail_count=64, fresh_tail_budget_share=0.25)
    feed = Feed(engine)
    for i in range(30):
        feed.say("user" if i % 2 == 0 else "assistant", 50, f"turn {i}")
    items = engine.context("s")
    uncapped = Compactor(engine.services)
    capped = Compactor(engine.services, budget=800)
    assert uncapped.tail_start(items) == 0  # 30 messages are all "fresh" by count
    start = capped.tail_start(items)
    assert sum(i.tokens for i in items[start:]) <= 200
    assert items[start].role == "user"  # whole turns only


def test_a_long_session_stays_within_a_small_budget(tmp_path: Path) -> None:
    """Sustained pressure: summaries of mixed depths are merged instead of piling up one per
    depth, so the context never grows past the budget."""
    path = write_session(tmp_path / "s.jsonl", 400, seed=3)
    with Engine.open(tmp_path / "src.db") as source:
        source.bootstrap(path)
        messages = source.messages("demo-session")
    from lossless.replay import replay_messages

    with Engine.open(tmp_path / "small.db") as engine:
        report = replay_messages(engine, "replay", messages, 8_000)
        assert report.peak_context_tokens <= 8_000
        assert doctor.check(engine.store) == []
        assert len(report.compaction_turns) < 200  # not a compaction every turn


def test_a_forced_compaction_shrinks_the_fresh_tail_down_to_the_newest_exchange(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine(fresh_tail_count=64)  # a tail that holds the whole session
    feed = Feed(engine)
    feed.turns(6, tokens=100)
    newest = [feed.say("user", 80, "the request"), feed.say("assistant", 40, "working")]

    unforced = engine.compact("s", until=300)
    assert unforced.passes == [] and unforced.reached_target is False  # all of it is the tail

    report = engine.compact("s", until=300, force=True)

    assert report.reached_target is True, report.to_dict()
    assert raw_ids(engine)[-2:] == newest  # the newest exchange stays as it was
    assert len(raw_ids(engine)) < 6  # the old tail's turns went into summaries
    assert report.tail_tokens is not None
    assert doctor.check(engine.store) == []


def test_a_forced_compaction_that_cannot_reach_its_target_stops_at_the_newest_exchange(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine(fresh_tail_count=64)
    feed = Feed(engine)
    feed.turns(3, tokens=60)
    newest = [feed.say("user", 400, "a very long request")]

    report = engine.compact("s", until=100, force=True)

    assert report.reached_target is False
    assert raw_ids(engine) == newest
    assert report.rounds <= 3 * SMALL.max_rounds


@pytest.mark.parametrize("fanout", [2, 3, 4])
def test_forced_compaction_every_turn_keeps_the_dag_depth_within_the_log_of_its_leaves(
    open_engine: EngineFactory, fanout: int
) -> None:
    """A window so tight that every turn forces a compaction (a host asking to compact
    before each request) grows the DAG a level only when a level has condensed_min_fanout
    summaries: depth <= 1 + log_fanout(leaves), and every message stays reachable."""
    import math

    engine = open_engine(condensed_min_fanout=fanout, leaf_min_fanout=fanout)
    feed = Feed(engine)
    for turn in range(30):
        feed.say("user", 60, f"question {turn}")
        feed.say("assistant", 60, f"answer {turn}")
        engine.compact("s", until=150, force=True)
        live = engine.store.live_summaries(engine.conversation("s").conversation_id)
        leaves = sum(1 for s in live if s.kind == "leaf")
        depth = max((s.depth for s in live), default=0)
        assert depth <= 1 + math.log(max(leaves, 1), fanout) + 1e-9, (turn, depth, leaves)
    assert doctor.check(engine.store) == []


def test_instructions_reach_every_pass_of_the_summarizer(open_engine: EngineFactory) -> None:
    engine = open_engine()
    Feed(engine).turns(10)
    engine.compact("s", instructions="Keep the deployment dates and who decided them.")

    requests = scripted(engine).requests
    assert requests
    assert all("Keep the deployment dates" in r.prompt for r in requests)
    assert all(
        r.instructions == "Keep the deployment dates and who decided them." for r in requests
    )


def test_a_stopped_compaction_writes_whole_passes_only_and_says_it_stopped(
    open_engine: EngineFactory,
) -> None:
    stop = threading.Event()
    calls = {"n": 0}

    def answer(request: SummaryRequest) -> str:
        calls["n"] += 1
        if calls["n"] == 2:
            stop.set()  # the host gives up while the second pass is being summarized
        return "short summary"

    engine = open_engine(ScriptedSummarizer(default=answer))
    Feed(engine).turns(20)
    report = engine.compact("s", stop=stop)

    assert report.stopped is True
    assert len(report.passes) == 2  # the pass under way was finished, no other was begun
    assert doctor.check(engine.store) == []


def test_a_stretch_that_would_not_get_smaller_is_not_summarized_again(
    open_engine: EngineFactory,
) -> None:
    """A summary no smaller than its sources is not written; the stretch is remembered, so
    the next turns do not pay for the same summarizer calls again until it changes."""
    engine = open_engine(ScriptedSummarizer(default=lambda req: "padding " * 64))
    feed = Feed(engine)
    feed.turns(4, tokens=2)  # a few words: not even the fallback's cut is smaller
    first = engine.compact("s")
    assert first.passes == []
    calls = scripted(engine).calls
    assert calls > 0
    assert engine.compact("s").passes == [] and scripted(engine).calls == calls
    feed.turns(1, tokens=2)  # the stretch changed: tried again
    engine.compact("s")
    assert scripted(engine).calls > calls
