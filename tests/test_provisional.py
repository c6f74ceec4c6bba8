"""Compaction at a real model's pace: the turn never waits for the model.

A model summarizer (the ``openai`` and ``anthropic`` providers, over their official SDKs) talks
to a local server that answers like a model: a time to the first token, then tokens at a
rate (:class:`tests.model_servers.SummaryServer`). A turn's compaction writes provisional
summaries at once (the offline summarizer's), and the model's replace them in place off the
turn: same ids, same DAG, same context, on both back ends; a model that keeps failing falls
back once, with one warning, and says so in the status; a process killed while it finishes
them leaves a consistent store, and the next run finishes them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.model import PROVISIONAL
from model_servers import SummaryServer

#: A small conversation compacts often: these settings make every few turns a pass.
SMALL = {
    "fresh_tail_count": 6,
    "leaf_chunk_tokens": 1_200,
    "leaf_target_tokens": 150,
    "condensed_target_tokens": 150,
    "leaf_min_fanout": 3,
    "condensed_min_fanout": 3,
    "incremental_max_depth": -1,
}


def model_config(provider: str = "openai", **guards: Any) -> Config:
    return Config().replace(
        summarizer=provider,
        summarizer_model="test-model",
        guards={"max_retries": 0, **guards},
        **SMALL,
    )


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[SummaryServer]:
    with SummaryServer(ttft=0.05, tokens_per_second=4_000) as made:
        point(monkeypatch, made)
        yield made


def point(monkeypatch: pytest.MonkeyPatch, server: SummaryServer) -> None:
    """The providers' standard variables at *server* (a local endpoint needs no key)."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def turn(i: int) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": f"question {i}: how does the deploy pipeline {i} work? " + "detail " * 60,
        },
        {
            "role": "assistant",
            "content": f"answer {i}: it builds image {i} first. " + "reason " * 60,
        },
    ]


def turns(engine: Engine, count: int, start: int = 0) -> list[Any]:
    """*count* turns; the compaction reports (with a model summarizer it runs in the
    background: waited for here)."""
    for i in range(start, start + count):
        engine.after_turn("s", turn(i), token_budget=2_000)
    return engine.wait_for_compaction(60)


def models(engine: Engine) -> list[str | None]:
    return [s.model for s, _ in engine.context_summaries("s")]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_turn_writes_provisional_summaries_and_the_models_replace_them_in_place(
    db: str, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    with SummaryServer(ttft=0.2, hold=True) as slow:  # no answer before release()
        point(monkeypatch, slow)
        with Engine.open(db, config=model_config(provider)) as engine:
            for i in range(24):
                result = engine.after_turn("s", turn(i), token_budget=2_000)
                # The turn only stored: its compaction went to the background.
                assert result.compaction is None or not result.compaction.passes
            engine.wait_for_compaction(60)
            # The model has not answered, yet the context fits: provisional summaries.
            assert sum(it.tokens for it in engine.context("s")) <= 2_000
            shown = engine.assemble("s", 2_000, format="openai").messages
            said = " ".join(str(m.get("content")) for m in shown)
            assert 'provisional="true"' in said  # the model is told so
            before = {s.summary_id: s for s, _ in engine.context_summaries("s")}
            assert before
            assert {s.model for s in before.values()} == {PROVISIONAL}
            order = [it.summary_id or it.message_id for it in engine.context("s")]
            assert engine.pending_summaries("s")["provisional"] >= len(before)

            slow.release()
            engine.wait_for_summaries(120)

            after = {s.summary_id: s for s, _ in engine.context_summaries("s")}
            assert set(after) == set(before)  # in place: the same ids where they were
            assert [it.summary_id or it.message_id for it in engine.context("s")] == order
            assert PROVISIONAL not in {s.model for s in after.values()}
            assert all(s.model == "test-model" for s in after.values())
            assert all(after[k].content.startswith("Summary: ") for k in after)
            assert engine.pending_summaries()["provisional"] == 0
            shown = engine.assemble("s", 2_000, format="openai").messages
            assert "provisional" not in " ".join(str(m.get("content")) for m in shown)
            # Search and describe read the model's text, and the store is consistent.
            one = next(iter(after.values()))
            assert engine.describe(one.summary_id).content == one.content
            hits = engine.grep("Summary", conversation="s", scope="summaries")
            assert {h.id for h in hits.hits} & set(after)
            assert engine.check() == []


def test_condensed_summaries_wait_for_their_sources_and_calls_run_side_by_side(
    tmp_path: Path, server: SummaryServer
) -> None:
    config = model_config(concurrency=3)
    with Engine.open(tmp_path / "s.db", config=config) as engine:
        engine.finish_elsewhere(lambda conversation_id: None)  # finished below, here
        turns(engine, 40)
        summaries = engine.summaries([s.summary_id for s in engine.store.provisional_summaries()])
        assert any(s.depth > 0 for s in summaries) and sum(s.depth == 0 for s in summaries) > 3
        report = engine.finish_summaries()
        assert report.finished == len(summaries) and report.left == 0
        assert 1 < server.in_flight_max <= 3
    # A summary made of leaves is asked for after leaves were (its own, at least two of
    # them: other leaves may still be under way beside it), and its request holds the
    # leaves' final (model) text, not their provisional text.
    asked = [r["body"]["messages"][-1]["content"] for r in server.requests]
    condensed = [i for i, text in enumerate(asked) if "These are summaries" in text]
    leaves = [i for i, text in enumerate(asked) if "These are summaries" not in text]
    assert condensed and all(sum(1 for j in leaves if j < i) >= 2 for i in condensed)
    assert all("Summary: " in asked[i] for i in condensed)


def test_a_429_with_retry_after_pauses_the_calls_and_is_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SummaryServer(rate_limited=2) as limited:
        point(monkeypatch, limited)
        with Engine.open(tmp_path / "s.db", config=model_config(concurrency=1)) as engine:
            engine.finish_elsewhere(lambda conversation_id: None)  # finished below, here
            turns(engine, 16)
            pending = engine.pending_summaries()["provisional"]
            assert pending > 0
            began = time.monotonic()
            report = engine.finish_summaries()
            assert report.finished == pending and report.kept_offline == 0
            assert report.errors == [] and engine.pending_summaries()["fell_back"] == []
            assert time.monotonic() - began >= 1.0  # it waited as the server asked
            assert limited.rate_limited == 0


def test_a_model_that_keeps_failing_falls_back_once_with_one_warning_and_says_why(
    db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with SummaryServer(fail=500) as broken:
        point(monkeypatch, broken)
        config = model_config(failures_before_fallback=2)
        with Engine.open(db, config=config) as engine:
            engine.finish_elsewhere(lambda conversation_id: None)
            turns(engine, 16)
            pending = engine.pending_summaries()["provisional"]
            assert pending > 2
            with caplog.at_level(logging.WARNING, logger="lossless.compaction.finish"):
                report = engine.finish_summaries()
                again = engine.finish_summaries()  # nothing left to try: no loop
            warned = [r for r in caplog.records if r.name == "lossless.compaction.finish"]
            assert len(warned) == 1 and "kept" in warned[0].getMessage()
            assert report.kept_offline == pending and report.finished == 0
            # No loop: the second run found nothing provisional and asked the model nothing.
            assert again.pending == 0 and again.calls == 0
            # The first asked at most the failures it counted and the calls then in flight.
            assert report.calls <= len(broken.requests) <= report.calls + 4
            status = engine.pending_summaries("s")
            assert status["provisional"] == 0
            [failed] = status["fell_back"]
            assert failed["summaries"] == pending and "500" in failed["reason"]
            assert {s.model for s, _ in engine.context_summaries("s")} == {"extractive"}
            assert engine.check() == []


def test_finishing_stops_at_its_time_limit_and_the_next_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SummaryServer(ttft=0.4) as slow:
        point(monkeypatch, slow)
        with Engine.open(tmp_path / "s.db", config=model_config(concurrency=1)) as engine:
            engine.finish_elsewhere(lambda conversation_id: None)
            turns(engine, 24)
            pending = engine.pending_summaries()["provisional"]
            cut = engine.finish_summaries(deadline=time.monotonic() + 0.5)
            assert cut.out_of_time and 0 < cut.left < pending
            assert cut.finished + cut.left == pending
            assert engine.check() == []
            rest = engine.finish_summaries()
            assert rest.left == 0 and engine.pending_summaries()["provisional"] == 0


def test_a_run_out_of_time_leaves_passes_due_not_truncated_placeholders(
    tmp_path: Path, run_cli: Any
) -> None:
    db = tmp_path / "s.db"
    config = Config().replace(**SMALL)
    with Engine.open(db, config=config) as engine:
        for i in range(300):
            engine.ingest_batch("s", turn(i))
    small = (
        "fresh_tail_count = 6\nleaf_chunk_tokens = 1200\nleaf_target_tokens = 150\n"
        "condensed_target_tokens = 150\n"
    )
    (tmp_path / "cut.toml").write_text(small + "[guards]\nrun_seconds = 0.1\n")
    (tmp_path / "small.toml").write_text(small)
    cut = run_cli("--db", str(db), "--config", str(tmp_path / "cut.toml"), "compact", "s")
    assert cut.code == 3, cut
    assert "left: stopped at the time limit (guards.run_seconds = 0.1 s)" in cut.err
    assert "escalated passes" not in cut.out
    with Engine.open(db, config=config) as engine:
        assert engine.check(degraded=True) == []  # nothing truncated was written
        due = engine.compaction_plan("s").leaf_passes_about
        assert due > 0
    done = run_cli("--db", str(db), "--config", str(tmp_path / "small.toml"), "compact", "s")
    assert done.code == 0, done
    with Engine.open(db, config=config) as engine:
        assert engine.compaction_plan("s").leaf_passes_about == 0


def test_the_cli_compacts_finishes_and_shows_the_status(
    tmp_path: Path, server: SummaryServer, run_cli: Any
) -> None:
    db = tmp_path / "s.db"
    with Engine.open(db, config=Config().replace(**SMALL)) as engine:
        for i in range(40):
            engine.ingest_batch("s", turn(i))
    (tmp_path / "model.toml").write_text(
        'summarizer = "openai"\nsummarizer_model = "test-model"\nfresh_tail_count = 6\n'
        "leaf_chunk_tokens = 1200\nleaf_target_tokens = 150\ncondensed_target_tokens = 150\n"
        "leaf_min_fanout = 3\ncondensed_min_fanout = 3\n"
    )
    args = ("--db", str(db), "--config", str(tmp_path / "model.toml"))
    done = run_cli(*args, "compact", "s")
    assert done.code == 0, done
    assert "model summaries:" in done.out and "provisional summaries finished" in done.out
    status = run_cli(*args, "status")
    assert status.code == 0 and "provisional summaries: none" in status.out
    assert "summarizer openai" in status.out
    with Engine.open(db, config=Config()) as engine:
        assert PROVISIONAL not in models(engine) and engine.check() == []


# --- killed while finishing --------------------------------------------------------------------


def _provisional(db: Path) -> int:
    with Engine.open(db, config=Config()) as engine:
        return int(engine.pending_summaries()["provisional"])


@pytest.mark.parametrize("kill_after", [0, 1, 3])
def test_kill_9_while_finishing_leaves_a_consistent_dag_and_the_next_start_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_after: int
) -> None:
    db = tmp_path / "s.db"
    with SummaryServer(ttft=0.3) as slow:
        point(monkeypatch, slow)
        config = model_config(concurrency=1)
        with Engine.open(db, config=config) as engine:
            engine.finish_elsewhere(lambda conversation_id: None)
            turns(engine, 24)
            ids = [s.summary_id for s, _ in engine.context_summaries("s")]
        pending = _provisional(db)
        assert pending > kill_after + 1
        toml = tmp_path / "model.toml"
        toml.write_text(
            'summarizer = "openai"\nsummarizer_model = "test-model"\n[guards]\nmax_retries = 0\n'
            "concurrency = 1\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-m", "lossless", "--db", str(db), "--config", str(toml), "finish"],
            env={**os.environ},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while _provisional(db) > pending - kill_after and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.15)  # into the next call, or its write
        os.kill(child.pid, signal.SIGKILL)
        child.wait()

        with Engine.open(db, config=Config()) as engine:
            assert engine.check() == []  # the DAG and the indexes are consistent
            # Every summary is there, provisional or final: none is missing.
            assert [s.summary_id for s, _ in engine.context_summaries("s")] == ids
            assert all(s.content for s, _ in engine.context_summaries("s"))
        left = _provisional(db)
        assert 0 < left <= pending - kill_after

        # The next start (a turn in a long-running host) finishes them.
        with Engine.open(db, config=config) as engine:
            engine.after_turn("s", turn(99))
            engine.wait_for_summaries(60)
            assert engine.pending_summaries()["provisional"] == 0
            assert engine.check() == []


# --- a hook's short process ----------------------------------------------------------------------


def test_a_hook_returns_before_the_model_and_a_process_of_its_own_finishes_the_summaries(
    tmp_path: Path,
) -> None:
    from lossless.sample import write_session

    with SummaryServer(ttft=1.0) as slow:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOSSLESS_")}
        env.update(
            XDG_STATE_HOME=str(tmp_path / "xdg-state"),
            HOME=str(tmp_path / "home"),
            OPENAI_BASE_URL=slow.url + "/v1",
        )
        env.pop("OPENAI_API_KEY", None)
        config = tmp_path / "model.toml"
        config.write_text(
            'summarizer = "openai"\nsummarizer_model = "test-model"\nfresh_tail_count = 8\n'
            "leaf_chunk_tokens = 4000\n[guards]\nmax_retries = 0\n"
        )
        db = tmp_path / "hooks.db"
        transcript = write_session(
            tmp_path / "session.jsonl", 120, format="claude_code", session_id="s-hook"
        )
        log = tmp_path / "hooks.log"
        hook = {
            "session_id": "s-hook",
            "transcript_path": str(transcript),
            "cwd": str(tmp_path),
            "hook_event_name": "PreCompact",
            "trigger": "auto",
        }
        began = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "lossless",
                "--db",
                str(db),
                "--config",
                str(config),
                "hook",
                "claude-code",
                "PreCompact",
                "--log-file",
                str(log),
            ],
            input=json.dumps(hook).encode(),
            capture_output=True,
            env=env,
            timeout=120,
        )
        took = time.monotonic() - began
        assert done.returncode == 0, done.stderr
        line = [x for x in log.read_text().splitlines() if "PreCompact/auto" in x][-1]
        provisional = int(line.split("provisional=")[1].split()[0])
        assert provisional > 2
        # The hook did not wait for one model answer per summary (a second each, at least).
        assert took < provisional * 1.0
        deadline = time.monotonic() + 90
        while _provisional(db) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _provisional(db) == 0
        assert "model summaries:" in log.read_text()
        with Engine.open(db, config=Config()) as engine:
            assert engine.check() == []
            assert "test-model" in {s.model for s, _ in engine.context_summaries("s-hook")}


def test_a_serve_child_ends_with_its_turn_and_a_process_of_its_own_finishes_the_summaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lossless serve --stdio`` as a host's child for one turn (OpenClaw's one-process
    turns): it stops when its stdin closes, without waiting for the model, and the model's
    summaries are put in place afterwards by a ``lossless finish`` process of its own."""
    from lossless.serve.client import ServeClient

    with SummaryServer(ttft=1.0) as slow:
        point(monkeypatch, slow)
        config = tmp_path / "model.toml"
        config.write_text(
            'summarizer = "openai"\nsummarizer_model = "test-model"\nfresh_tail_count = 6\n'
            "leaf_chunk_tokens = 1200\nleaf_target_tokens = 150\n"
            "condensed_target_tokens = 150\n[guards]\nmax_retries = 0\n"
        )
        db = tmp_path / "served.db"
        began = time.monotonic()
        with ServeClient.spawn(["--db", str(db), "--config", str(config)]) as client:
            for i in range(20):
                client.after_turn("s", turn(i), token_budget=2_000)
            client.wait_for_compaction(30)
            assert client.status("s")["summaries_pending"]["provisional"] > 0
        took = time.monotonic() - began
        pending = _provisional(db)
        assert pending > 0 and took < 1.0 * pending  # it did not wait for them all
        deadline = time.monotonic() + 90
        while _provisional(db) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _provisional(db) == 0
        with Engine.open(db, config=Config()) as engine:
            assert engine.check() == []
            assert {s.model for s, _ in engine.context_summaries("s")} == {"test-model"}
