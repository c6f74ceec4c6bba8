"""Compaction's modes: incremental after a turn, full sweeps, the background worker, the
summarizer calls they make as a session grows, crashes, and the invariants over random
operations (the helpers: ``compaction_support.py``)."""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compaction_support import (
    COMPACTION_TABLES,
    SMALL,
    SUMMARY_ID,
    T0,
    EngineFactory,
    Feed,
    assert_tool_pairs_whole,
    compactor,
    condensed_pass,
    context_tokens,
    engines,
    leaf_pass,
    raw_ids,
    scripted,
    snapshot,
    text,
    write_leaves,
)
from lossless import Config, Engine, Message, Part, doctor
from lossless.model import ContextItem
from lossless.sample import generate_session, write_session
from lossless.summarize import AuthError, ScriptedSummarizer, SummaryRequest


@pytest.fixture
def open_engine(new_db: Callable[[], str]) -> Iterator[EngineFactory]:
    """``open_engine(summarizer, **config_changes)``: an engine on a new store (of each back
    end in turn)."""
    yield from engines(new_db)


# --- modes -------------------------------------------------------------------------------------


def test_incremental_compaction_waits_until_raw_tokens_outside_the_tail_exceed_the_chunk(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine()
    feed = Feed(engine)
    for i in range(10):  # 6 outside the 4-message tail: exactly 300 tokens, not more
        feed.say("user", 50, f"note {i}")

    report = engine.compact("s", mode="incremental")

    assert report.passes == [] and scripted(engine).calls == 0
    assert report.tokens_after == report.tokens_before == 500
    feed.say("user", 50, "one more")  # 350 tokens outside the tail
    report = engine.compact("s", mode="incremental")
    assert [p.kind for p in report.passes] == ["leaf"]
    assert report.passes[0].tokens_before == 300
    assert scripted(engine).calls == 1


def test_incremental_compaction_runs_one_leaf_pass_per_turn(open_engine: EngineFactory) -> None:
    engine = open_engine(incremental_max_depth=0)
    Feed(engine).turns(15)  # 26 messages (1,300 tokens) outside the tail
    report = engine.compact("s", mode="incremental")
    assert [p.kind for p in report.passes] == ["leaf"]
    assert compactor(engine).leaf_chunk(engine.context("s"))  # more is eligible, for later


def test_a_full_sweep_leaves_no_eligible_leaf_chunk_and_condenses(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine()
    Feed(engine).turns(20)

    report = engine.compact("s")

    assert report.mode == "full"
    by_depth = report.by_depth()
    assert by_depth[0] >= 6 and by_depth.get(1, 0) >= 1
    items = engine.context("s")
    work = compactor(engine)
    assert work.leaf_chunk(items) == []
    assert work.condensed_chunk(items) == []
    assert work.raw_tokens_outside_tail(items) == 0
    assert report.tokens_after == context_tokens(engine) < report.tokens_before
    assert report.summarizer_calls == scripted(engine).calls == len(report.passes)
    again = engine.compact("s")
    assert again.passes == [] and scripted(engine).calls == len(report.passes)


def test_after_turn_compacts_when_the_context_exceeds_the_threshold_of_the_budget(
    open_engine: EngineFactory,
) -> None:
    # context_threshold 0.75; the tail is not capped by the budget here, so the leaf pass
    # that after_turn runs first cannot bring the context under the threshold by itself.
    engine = open_engine(fresh_tail_budget_share=1.0)
    feed = Feed(engine)
    for i in range(8):
        feed.say("user", 50, f"note {i}")
    # 9 messages, 450 tokens; 250 outside the tail (under the 300-token chunk).
    low = engine.after_turn("s", [{"role": "user", "content": text(50, "fine")}], token_budget=1000)
    assert low.compaction is not None and low.compaction.passes == []
    assert scripted(engine).calls == 0

    result = engine.after_turn(
        "s", [{"role": "user", "content": text(50, "over")}], token_budget=600
    )

    report = result.compaction
    assert report is not None and result.error is None
    # 500 tokens crossed the threshold (450 of 600); compaction aims at the lower target.
    assert int(600 * SMALL.context_threshold) == 450
    aim = int(600 * min(SMALL.compaction_target, SMALL.context_threshold))
    assert report.target == aim
    assert report.passes and report.tokens_after <= aim
    assert context_tokens(engine) == report.tokens_after
    assert report.reached_target


def test_after_turn_never_raises_when_the_summarizer_fails_and_keeps_the_messages(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine(ScriptedSummarizer(default=AuthError("401 invalid api key")))
    for i in range(20):
        result = engine.after_turn(
            "s",
            [
                {"role": "user", "content": text(60, f"question {i}")},
                {"role": "assistant", "content": text(60, f"answer {i}")},
            ],
            token_budget=2_000,
        )
        assert len(result.ingest.message_ids) == 2
        assert result.error is None
    assert len(engine.messages("s")) == 40
    levels = {p.level for p in engine.compact("s").passes} | {"fallback"}
    assert levels == {"fallback"}
    models = {r[0] for r in engine.store.fetchall("SELECT DISTINCT model FROM summaries")}
    assert models == {"fallback"}
    assert doctor.check(engine.store) == []


def test_after_turn_reports_a_failed_compaction_instead_of_raising(
    open_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = open_engine()
    Feed(engine).turns(8)
    before = {t: snapshot(engine.store, t) for t in ("summaries", "summary_messages")}

    def broken_index(*args: Any) -> None:
        raise RuntimeError("disk I/O error")

    monkeypatch.setattr(type(engine.store), "_index_summaries", staticmethod(broken_index))
    result = engine.after_turn("s", [{"role": "user", "content": "still here?"}])

    assert result.compaction is None
    assert result.error is not None and "disk I/O error" in result.error
    assert engine.messages("s")[-1].content == "still here?"
    assert raw_ids(engine)[-1] == result.ingest.message_ids[0]
    assert {t: snapshot(engine.store, t) for t in before} == before
    monkeypatch.undo()
    assert engine.after_turn("s", []).compaction is not None
    assert doctor.check(engine.store) == []


def test_background_compaction_runs_in_a_worker_and_wait_for_compaction_returns_its_report(
    open_engine: EngineFactory,
) -> None:
    started = threading.Event()
    release = threading.Event()

    def slow(request: Any) -> str:
        started.set()
        release.wait(timeout=30)  # a slow model, bounded
        return "background summary"

    engine = open_engine(ScriptedSummarizer(default=slow), background_compaction=True)
    turn = [{"role": "user", "content": text(50, f"note {i}")} for i in range(12)]

    try:
        result = engine.after_turn("s", turn)

        # The turn returned while the worker is still waiting for the summarizer.
        assert result.deferred is True and result.compaction is None
        assert started.wait(timeout=10)
        assert len(engine.messages("s")) == 12
        assert all(it.item_type == "message" for it in engine.context("s"))
    finally:
        release.set()
    reports = engine.wait_for_compaction(timeout=30)
    assert len(reports) == 1
    report = reports[0]
    assert report.mode == "incremental" and [p.kind for p in report.passes] == ["leaf"]
    assert engine.context("s")[0].summary_id == report.passes[0].summary_id
    assert engine.summary(report.passes[0].summary_id).content == "background summary"
    assert engine.wait_for_compaction(timeout=30) == []


def test_background_compaction_hands_the_worker_only_turns_with_something_to_compact(
    open_engine: EngineFactory,
) -> None:
    engine = open_engine(ScriptedSummarizer(default="summary"), background_compaction=True)
    small = engine.after_turn("s", [{"role": "user", "content": "hello"}])
    # Nothing to compact: said in the turn, with its report, and no worker run is queued.
    assert small.deferred is False and small.compaction is not None
    assert small.compaction.passes == [] and small.compaction.tokens_after > 0
    assert engine.wait_for_compaction(timeout=30) == []
    turn = [{"role": "user", "content": text(50, f"note {i}")} for i in range(12)]
    big = engine.after_turn("s", turn)
    assert big.deferred is True and big.compaction is None
    [report] = engine.wait_for_compaction(timeout=30)
    assert [p.kind for p in report.passes] == ["leaf"]


def test_a_slow_summarizer_on_one_conversation_does_not_block_another(
    open_engine: EngineFactory,
) -> None:
    started = threading.Event()
    release = threading.Event()

    def answer(request: Any) -> str:
        if any("ALPHA" in s.text for s in request.sources):
            started.set()
            release.wait(timeout=30)  # a slow model, bounded
            return "alpha summary"
        return "bravo summary"

    engine = open_engine(ScriptedSummarizer(default=answer))
    alpha, bravo = Feed(engine, "alpha"), Feed(engine, "bravo")
    for i in range(12):
        alpha.say("user", 50, f"ALPHA {i}")
        bravo.say("user", 50, f"BRAVO {i}")

    alpha_reports: list[Any] = []
    alpha_thread = threading.Thread(target=lambda: alpha_reports.append(engine.compact("alpha")))
    bravo_done = threading.Event()
    bravo_errors: list[BaseException] = []

    def work_on_bravo() -> None:
        try:
            bravo.say("user", 50, "BRAVO during alpha's compaction")
            engine.compact("bravo")
            engine.after_turn("bravo", [{"role": "user", "content": "BRAVO again"}])
        except BaseException as exc:  # re-raised by the test thread
            bravo_errors.append(exc)
        finally:
            bravo_done.set()

    alpha_thread.start()
    try:
        assert started.wait(timeout=10), "alpha's compaction never reached the summarizer"
        bravo_thread = threading.Thread(target=work_on_bravo)
        bravo_thread.start()
        assert bravo_done.wait(timeout=20), "bravo waited for alpha's summarizer"
        assert not bravo_errors
        assert alpha_thread.is_alive() and not alpha_reports  # alpha is still summarizing
    finally:
        release.set()
        alpha_thread.join(timeout=30)
    bravo_thread.join(timeout=30)
    assert len(alpha_reports) == 1 and alpha_reports[0].passes
    assert engine.summary(alpha_reports[0].passes[0].summary_id).content == "alpha summary"
    assert all(
        engine.summary(it.summary_id).content == "bravo summary"
        for it in engine.context("bravo")
        if it.summary_id
    )
    assert engine.messages("bravo")[-1].content == "BRAVO again"
    assert doctor.check(engine.store) == []


# --- bounded summarizer calls ------------------------------------------------------------------


def _leaf_refs(summarizer: ScriptedSummarizer) -> list[str]:
    return [
        s.ref
        for r in summarizer.requests
        if r.kind == "leaf" and r.level == "normal"
        for s in r.sources
    ]


def test_compacting_a_long_session_calls_the_summarizer_in_proportion_to_its_size(
    open_engine: EngineFactory, tmp_path: Path
) -> None:
    chunk = 2_000
    engine = open_engine(leaf_chunk_tokens=chunk)
    engine.bootstrap(write_session(tmp_path / "session.jsonl", 300))
    stats = engine.conversations()[0]
    assert stats.message_count > 2_000

    report = engine.compact(stats.conversation.conversation_id)

    summarizer = scripted(engine)
    chunks = stats.message_tokens / chunk
    assert summarizer.calls == report.summarizer_calls
    assert summarizer.calls <= 2 * chunks + 10  # ~40 calls for ~78k tokens, not thousands
    leaf_calls = sum(1 for r in summarizer.requests if r.kind == "leaf")
    assert chunks * 0.9 <= leaf_calls <= 1.5 * chunks + 5  # chunks are full, not crumbs
    refs = _leaf_refs(summarizer)
    assert len(refs) == len(set(refs))
    assert assert_tool_pairs_whole(engine.store) > 500
    assert doctor.check(engine.store) == []


def _replay(engine: Engine, turns: int) -> ScriptedSummarizer:
    current: list[dict[str, Any]] = []
    for obj in generate_session(turns):
        if obj.get("type") != "message":
            continue
        message = obj["message"]
        if message["role"] == "user" and current:
            assert engine.after_turn("replay", current).error is None
            current = []
        current.append(message)
    engine.after_turn("replay", current)
    return scripted(engine)


def test_turn_by_turn_compaction_grows_linearly_and_never_resummarizes_history(
    open_engine: EngineFactory,
) -> None:
    short = _replay(open_engine(), 100)
    long = _replay(open_engine(), 200)

    assert short.calls > 20
    assert 1.7 <= long.calls / short.calls <= 2.3  # linear, not quadratic
    for summarizer in (short, long):
        refs = _leaf_refs(summarizer)
        assert len(refs) == len(set(refs))  # each message is leaf input at most once
        assert all(r.startswith("msg#") for r in refs)
        condensed = [s.ref for r in summarizer.requests if r.kind == "condensed" for s in r.sources]
        assert all(SUMMARY_ID.fullmatch(ref) for ref in condensed)


# --- crashes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["_index_summaries", "_place_summary"])
@pytest.mark.parametrize("kind", ["leaf", "condensed"])
def test_a_crash_inside_a_pass_leaves_the_database_as_it_was(
    open_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch, step: str, kind: str
) -> None:
    engine = open_engine()
    feed = Feed(engine)
    if kind == "condensed":
        write_leaves(engine, 3, feed)
    else:
        feed.turns(8)
    before = {t: snapshot(engine.store, t) for t in COMPACTION_TABLES}

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"crash in {step}")

    monkeypatch.setattr(type(engine.store), step, staticmethod(crash))
    with pytest.raises(RuntimeError, match="crash in"):
        if kind == "leaf":
            leaf_pass(engine)
        else:
            condensed_pass(engine)

    assert {t: snapshot(engine.store, t) for t in COMPACTION_TABLES} == before
    assert doctor.check(engine.store) == []
    monkeypatch.undo()
    assert (leaf_pass(engine) if kind == "leaf" else condensed_pass(engine)) is not None
    assert doctor.check(engine.store) == []


# --- invariants over random operations ---------------------------------------------------------

_KINDS = st.sampled_from(
    ["user", "assistant", "chatter", "tool", "parallel_tools", "interrupted_tool", "lost_tool"]
)

_BATCH = st.lists(
    st.tuples(_KINDS, st.integers(min_value=3, max_value=150)), min_size=1, max_size=8
)

_CONV = st.integers(min_value=0, max_value=1)

_INGEST = st.tuples(st.just("ingest"), _CONV, _BATCH)

_TURN = st.tuples(st.just("after_turn"), _CONV, _BATCH, st.sampled_from([None, 300, 900]))

_OPS = st.one_of(
    _INGEST,
    _TURN,
    _TURN,
    st.tuples(st.just("compact"), _CONV),
    st.tuples(st.just("until"), _CONV, st.integers(min_value=50, max_value=900)),
    st.tuples(st.just("condense"), _CONV, st.booleans()),
    st.tuples(st.just("crash"), _CONV, st.sampled_from(["_place_summary", "_index_summaries"])),
    st.tuples(st.just("misbehave"), st.sampled_from(["error", "empty", "huge", "timeout"])),
)


class _Session:
    def __init__(self, engine: Engine, name: str) -> None:
        self.engine = engine
        self.name = name
        self.clock = T0
        self.calls = 0

    def _at(self) -> datetime:
        self.clock += timedelta(seconds=30)
        return self.clock

    def batch(self, spec: list[tuple[str, int]]) -> list[Message]:
        out: list[Message] = []
        for kind, tokens in spec:
            if kind in ("tool", "parallel_tools", "interrupted_tool", "lost_tool"):
                ids = [
                    f"call_{self.calls + n}" for n in range(2 if kind == "parallel_tools" else 1)
                ]
                self.calls += len(ids)
                parts = tuple(
                    Part(type="tool_call", tool_call_id=c, tool_name="bash", tool_input={"n": c})
                    for c in ids
                )
                out.append(Message(role="assistant", parts=parts, created_at=self._at()))
                if kind == "lost_tool":  # the run died before the tool answered
                    continue
                if kind == "interrupted_tool":  # the user writes while the tool runs
                    out.append(Message(role="user", content="and then?", created_at=self._at()))
                for c in ids:
                    output = text(tokens, f"output of {c}")
                    out.append(
                        Message(
                            role="tool",
                            content=output,
                            parts=(Part(type="tool_result", tool_call_id=c, tool_output=output),),
                            created_at=self._at(),
                        )
                    )
            elif kind == "chatter":
                out.append(Message(role="user", content="ok, thanks", created_at=self._at()))
            else:
                out.append(Message(role=kind, content=text(tokens, kind), created_at=self._at()))  # type: ignore[arg-type]
        return out


def _check_invariants(engine: Engine, sessions: Sequence[_Session]) -> None:
    store = engine.store
    assert doctor.check(store) == []
    assert_tool_pairs_whole(store)
    for session in sessions:
        conv = engine.store.find_conversation(session.name)
        if conv is None:
            continue
        items: list[ContextItem] = engine.context(conv.conversation_id)
        for a, b in itertools.pairwise(items):
            assert a.earliest_at <= b.earliest_at, (a, b)
            assert a.latest_at <= b.earliest_at, (a, b)
    for sid, depth, parent_depth in store.fetchall(
        "SELECT s.summary_id, s.depth, p.depth FROM summary_parents sp"
        " JOIN summaries s ON s.summary_id = sp.summary_id"
        " JOIN summaries p ON p.summary_id = sp.parent_summary_id"
    ):
        # Same-depth runs make depth + 1; under pressure a run of mixed depths makes one
        # deeper than the deepest of them. Sources are always shallower.
        assert parent_depth < depth, sid


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    prelude=st.lists(_INGEST, min_size=1, max_size=3), ops=st.lists(_OPS, min_size=3, max_size=14)
)
def test_compaction_invariants_hold_over_random_operations(
    prelude: list[tuple[Any, ...]], ops: list[tuple[Any, ...]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        summarizer = ScriptedSummarizer(default=lambda r: f"{r.kind} summary of {len(r.sources)}")
        engine = Engine.open(Path(tmp) / "lossless.db", config=SMALL, summarizer=summarizer)
        sessions = [_Session(engine, "one"), _Session(engine, "two")]
        try:
            for op in [*prelude, *ops]:
                messages = snapshot(engine.store, "messages")
                parts = snapshot(engine.store, "message_parts")
                name, *args = op
                session = sessions[args[0]] if name != "misbehave" else sessions[0]
                tokens_before = (
                    context_tokens(engine, session.name)
                    if engine.store.find_conversation(session.name)
                    else 0
                )
                exists = engine.store.find_conversation(session.name) is not None
                if name == "ingest":
                    engine.ingest_batch(session.name, session.batch(args[1]))
                elif name == "after_turn":
                    result = engine.after_turn(
                        session.name, session.batch(args[1]), token_budget=args[2]
                    )
                    assert result.error is None
                elif name == "misbehave":
                    misbehaviours: dict[str, str | BaseException] = {
                        "error": RuntimeError("HTTP 500"),
                        "empty": "",
                        "huge": text(2_000, "rambling"),
                        "timeout": TimeoutError(),
                    }
                    step = misbehaviours[args[0]]
                    summarizer.enqueue(step, step)
                elif not exists:
                    continue
                elif name == "compact":
                    engine.compact(session.name)
                elif name == "until":
                    engine.compact(session.name, until=args[1])
                elif name == "condense":
                    conv = engine.conversation(session.name).conversation_id
                    with engine.lock(conv):
                        compactor(engine).condensed_pass(conv, hard=args[1])
                elif name == "crash":
                    tables = {t: snapshot(engine.store, t) for t in COMPACTION_TABLES}

                    def crash(*a: Any, **k: Any) -> None:
                        raise RuntimeError("injected crash")

                    patch.setattr(type(engine.store), args[1], staticmethod(crash))
                    try:
                        engine.compact(session.name)
                    except RuntimeError as exc:
                        if "injected crash" not in str(exc):
                            raise
                        event("a crash was injected in a pass")
                    finally:
                        patch.undo()
                    assert {t: snapshot(engine.store, t) for t in COMPACTION_TABLES} == tables
                if name in ("compact", "until", "condense"):
                    assert context_tokens(engine, session.name) <= tokens_before
                # Stored messages and parts are never changed or deleted, only added to.
                assert snapshot(engine.store, "messages")[: len(messages)] == messages
                assert snapshot(engine.store, "message_parts")[: len(parts)] == parts
                _check_invariants(engine, sessions)
            depths = engine.store.fetchall("SELECT max(depth), count(*) FROM summaries")[0]
            event(f"deepest summary: {depths[0]}")
            event(f"summaries: {'none' if not depths[1] else '1-5' if depths[1] <= 5 else '6+'}")
        finally:
            engine.close()


def test_waiting_with_a_timeout_keeps_unfinished_runs_for_later(tmp_path: Path) -> None:
    release = threading.Event()

    def blocked(request: SummaryRequest) -> str:
        release.wait(timeout=30)
        return "short summary"

    config = Config().replace(
        fresh_tail_count=2,
        leaf_chunk_tokens=100,
        leaf_target_tokens=20,
        background_compaction=True,
    )
    with Engine.open(
        tmp_path / "w.db", config=config, summarizer=ScriptedSummarizer(default=blocked)
    ) as engine:
        engine.after_turn(
            "s", [{"role": "user", "content": f"message {i} " * 20} for i in range(10)]
        )
        assert engine.wait_for_compaction(timeout=0.05) == []
        release.set()
        reports = engine.wait_for_compaction(timeout=30)
        assert len(reports) == 1
        assert reports[0].passes


def test_leaf_summaries_list_the_large_files_of_their_messages(tmp_path: Path) -> None:
    config = SMALL.replace(large_file_token_threshold=100)
    body = "\n".join(f"line {i} of the report" for i in range(200))
    with Engine.open(tmp_path / "f.db", config=config, summarizer=ScriptedSummarizer()) as engine:
        engine.ingest("s", {"role": "user", "content": f'<file name="report.txt">{body}</file>'})
        for i in range(20):
            engine.ingest("s", {"role": "assistant", "content": text(30, f"reply {i}")})
        report = engine.compact("s")
        leaf = engine.summary(report.passes[0].summary_id)
        [record] = engine.store.large_files()
        assert leaf.file_ids == (record.file_id,)


def test_a_pass_raced_by_another_process_is_tried_again_on_the_fresh_context(
    tmp_path: Path,
) -> None:

    config = Config().replace(
        fresh_tail_count=2, leaf_chunk_tokens=150, leaf_target_tokens=20, leaf_min_fanout=2
    )
    path = tmp_path / "race.db"
    other = Engine.open(path, config=config, summarizer=ScriptedSummarizer())
    raced: list[bool] = []

    def summarize(request: SummaryRequest) -> str:
        if not raced:  # meanwhile another process compacts the same conversation
            raced.append(True)
            other.compact("s")
        return f"summary of {len(request.sources)}"

    engine = Engine.open(path, config=config, summarizer=ScriptedSummarizer(default=summarize))
    for i in range(12):
        engine.ingest("s", {"role": "user", "content": f"turn {i} " + "words " * 30})
    report = engine.compact("s")  # its first write is refused: the context moved under it
    assert raced and report.errors == []
    assert doctor.check(engine.store) == []
    covered = engine.store.fetchall(
        "SELECT message_id, count(*) FROM summary_messages GROUP BY message_id HAVING count(*) > 1"
    )
    assert covered == []  # redone on the fresh context: nothing summarized twice
    other.close()
    engine.close()
