"""Compaction cost: engine overhead per pass, and summarizer calls as history grows.

    python benchmarks/compaction.py                 # overhead + replays of 10k and 100k turns
    python benchmarks/compaction.py --turns 2000,20000

*Overhead*: leaf and condensed passes with an instant summarizer (the scripted provider
answering with a summary of the target size), so the time is lossless's own: reading the
context, building the request, the write transaction. Measured on a conversation whose store
holds 10k and 200k messages, to show it does not grow with history.

*Calls*: generated sessions replayed turn by turn through ``after_turn`` with a 32k budget and
the instant summarizer; the summarizer calls must grow linearly with the number of turns.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.compaction import Compactor
from lossless.replay import replay_messages
from lossless.sample import write_session
from lossless.summarize import ScriptedSummarizer, SummaryRequest

from common import save, text_messages


def sized(request: SummaryRequest) -> str:
    """An instant answer of about the target size (4 characters per token)."""
    return ("summary " * (request.target_tokens // 2))[: request.target_tokens * 4]


def overhead(work: Path, stored: int) -> dict[str, Any]:
    config = Config().replace(fresh_tail_count=64, leaf_chunk_tokens=20_000)
    summarizer = ScriptedSummarizer(default=sized)
    path = work / f"overhead-{stored}.db"
    with Engine.open(path, config=config, summarizer=summarizer) as engine:
        filler = text_messages(min(stored, 50_000), seed=9)
        done = 0
        while done < stored:
            chunk = filler[: min(len(filler), stored - done)]
            engine.ingest_batch("other", chunk)  # history in another conversation
            done += len(chunk)
        conv = engine.conversation("target", create=True).conversation_id
        compactor = Compactor(engine.services, summarizer)
        leaf_ms: list[float] = []
        for _ in range(24):
            engine.ingest_batch(conv, text_messages(500, seed=len(leaf_ms)))
            started = time.perf_counter()
            result = compactor.leaf_pass(conv)
            leaf_ms.append((time.perf_counter() - started) * 1000)
            assert result is not None
        cond_ms: list[float] = []
        while True:
            started = time.perf_counter()
            result = compactor.condensed_pass(conv)
            if result is None:
                break
            cond_ms.append((time.perf_counter() - started) * 1000)
    return {
        "stored_messages": stored,
        "leaf_pass_ms_median": round(statistics.median(leaf_ms), 2),
        "leaf_passes": len(leaf_ms),
        "condensed_pass_ms_median": round(statistics.median(cond_ms), 2) if cond_ms else None,
        "condensed_passes": len(cond_ms),
    }


def calls(work: Path, turns: int, budget: int) -> dict[str, Any]:
    path = write_session(work / f"calls-{turns}.jsonl", turns, seed=5)
    with Engine.open(work / f"calls-src-{turns}.db") as source:
        source.bootstrap(path)
        messages = source.messages("demo-session")
    summarizer = ScriptedSummarizer(default=sized)
    with Engine.open(work / f"calls-{turns}.db", summarizer=summarizer) as engine:
        started = time.perf_counter()
        report = replay_messages(engine, "replay", messages, budget)
        seconds = time.perf_counter() - started
        sources_sent = sum(len(r.sources) for r in summarizer.requests if r.kind == "leaf")
        leaf_calls = sum(1 for r in summarizer.requests if r.kind == "leaf")
    events = len(report.compaction_turns)
    return {
        "budget": budget,
        "turns": turns,
        "leaf_calls": leaf_calls,
        "condensed_calls": summarizer.calls - leaf_calls,
        "calls_per_compaction": round(summarizer.calls / events, 2) if events else None,
        "messages": len(messages),
        "summarizer_calls": summarizer.calls,
        "calls_per_1000_turns": round(summarizer.calls / turns * 1000, 2),
        "leaf_source_messages_sent": sources_sent,
        "seconds": round(seconds, 1),
        "ms_per_turn": round(seconds / turns * 1000, 3),
        "compaction_turns": len(report.compaction_turns),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stored", default="10000,200000")
    parser.add_argument("--turns", default="10000,100000")
    parser.add_argument("--budget", type=int, default=32_000, help="token budget of the replays")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-compaction-bench-"))
    results: dict[str, Any] = {"overhead": [], "calls": []}
    try:
        for stored in (int(s) for s in args.stored.split(",")):
            row = overhead(work, stored)
            results["overhead"].append(row)
            print(
                f"overhead with {stored:,} stored messages: leaf pass "
                f"{row['leaf_pass_ms_median']} ms, condensed pass "
                f"{row['condensed_pass_ms_median']} ms (medians, instant summarizer)",
                flush=True,
            )
        for turns in (int(t) for t in args.turns.split(",")):
            row = calls(work, turns, args.budget)
            results["calls"].append(row)
            print(
                f"replay of {turns:,} turns ({row['messages']:,} messages) at {args.budget:,}: "
                f"{row['summarizer_calls']:,} summarizer calls ({row['leaf_calls']:,} leaf, "
                f"{row['condensed_calls']:,} condensed; {row['calls_per_1000_turns']} per 1,000 "
                f"turns; {row['calls_per_compaction']} per compaction), "
                f"{row['leaf_source_messages_sent']:,} messages sent as leaf input, "
                f"{row['ms_per_turn']} ms per turn",
                flush=True,
            )
        print(f"results: {save('compaction', results)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
