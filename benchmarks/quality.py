"""Compaction quality, offline and deterministic.

    python benchmarks/quality.py                   # canaries

**Canaries.** Facts planted at known turns of long generated sessions ("the staging port for
<project> is 9xxx"), replayed turn by turn with a token budget and the extractive summarizer.
Reported per run: active canary recall (the fact is still in the active context, in a summary
or a message), retrieval canary recall (the fact's message is found by full-text search and is
reachable from the context through the DAG), post-compaction headroom (budget left after each
compaction, tokens and share), fresh-tail pressure (tail tokens / threshold tokens), repeated-
compaction risk (compactions fewer than 5 turns after the previous one), summarizer calls.

LoCoMo (evidence in the assembled context against a sliding window) is measured by
``recall.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lossless import Engine
from lossless.compaction import fresh_tail_start
from lossless.replay import replay_messages
from lossless.sample import generate_session

from common import save

# --- shared helpers ------------------------------------------------------------------------


def context_text(engine: Engine, conversation_id: int) -> str:
    """The text the model would see: summaries and messages of the active context."""
    items = engine.context(conversation_id)
    ids = [i.message_id for i in items if i.message_id is not None]
    sums = [i.summary_id for i in items if i.summary_id is not None]
    texts = [m.content for m in engine.store.get_messages_by_id(ids)]
    texts += [s.content for s in engine.store.get_summaries(sums)]
    return "\n".join(texts)


# --- canaries ------------------------------------------------------------------------------


def canary_run(work: Path, turns: int, budget: int, seed: int) -> dict[str, Any]:
    canary_turns = [int(turns * f) for f in (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)]
    canaries = {
        t: f"The staging port for project {name} is {9000 + t}."
        for t, name in zip(
            canary_turns, ("amber", "basalt", "cobalt", "dahlia", "ember", "fjord"), strict=True
        )
    }
    source = Engine.open(work / f"canary-source-{turns}.db")
    turn = 0
    lines = []
    for obj in generate_session(turns, seed=seed, session_id="canary"):
        if obj.get("type") == "message" and obj["message"]["role"] == "user":
            if turn in canaries:
                obj["message"]["content"][0]["text"] += " Remember: " + canaries[turn]
            turn += 1
        lines.append(obj)
    path = work / f"canary-{turns}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    source.bootstrap(path)
    messages = source.messages("canary")
    source.close()
    engine = Engine.open(work / f"canary-{turns}.db")
    started = time.perf_counter()
    report = replay_messages(engine, "canary-replay", messages, budget)
    seconds = time.perf_counter() - started
    conv = report.conversation_id
    text = context_text(engine, conv)
    active = sum(1 for fact in canaries.values() if fact in text)
    retrievable = 0
    for fact in canaries.values():
        rows = engine.store.fetchall(
            "SELECT m.message_id FROM messages_fts f JOIN messages m ON m.message_id = f.rowid"
            " WHERE messages_fts MATCH ? AND m.conversation_id = ?",
            ('"' + fact.rstrip(".") + '"', conv),
        )
        if rows and _reachable(engine, conv, rows[0][0]):
            retrievable += 1
    threshold = int(budget * engine.config.context_threshold)
    events = report.compaction_turns
    headroom = [budget - t.context_tokens for t in events]
    repeated = sum(1 for a, b in itertools.pairwise(events) if b.turn - a.turn < 5)
    items = engine.context(conv)
    cfg = engine.config
    tail = fresh_tail_start(items, cfg.fresh_tail_count, cfg.fresh_tail_max_tokens)
    tail_tokens = sum(i.tokens for i in items[tail:])
    calls = _calls(engine, conv)
    engine.close()
    return {
        "turns": turns,
        "budget": budget,
        "seconds": round(seconds, 1),
        "canaries": len(canaries),
        "active_recall": round(active / len(canaries), 2),
        "retrieval_recall": round(retrievable / len(canaries), 2),
        "compactions": len(events),
        "headroom_tokens_mean": round(statistics.fmean(headroom)) if headroom else None,
        "headroom_share_mean": round(statistics.fmean(headroom) / budget, 2) if headroom else None,
        "fresh_tail_pressure": round(tail_tokens / threshold, 2),
        "repeated_compactions": repeated,
        "summaries_written": calls,
        "final_context_tokens": report.turns[-1].context_tokens,
        "raw_tokens": report.turns[-1].raw_tokens,
    }


def _calls(engine: Engine, conversation_id: int) -> int:
    return int(
        engine.store.fetchall(
            "SELECT count(*) FROM summaries WHERE conversation_id = ?", (conversation_id,)
        )[0][0]
    )


def _reachable(engine: Engine, conversation_id: int, message_id: int) -> bool:
    in_context = {i.summary_id for i in engine.context(conversation_id) if i.summary_id}
    in_context_msgs = {i.message_id for i in engine.context(conversation_id) if i.message_id}
    if message_id in in_context_msgs:
        return True
    frontier: list[str | int] = [message_id]
    seen: set[str | int] = set()
    while frontier:
        ref = frontier.pop()
        for above in engine.store.covering(ref):
            if above in in_context:
                return True
            if above not in seen:
                seen.add(above)
                frontier.append(above)
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", default="1000,3000", help="canary session lengths")
    parser.add_argument("--budget", type=int, default=32_000, help="canary run budget")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-quality-"))
    results: dict[str, Any] = {}
    try:
        results["canaries"] = []
        for turns in (int(t) for t in args.turns.split(",")):
            run = canary_run(work, turns, args.budget, seed=11)
            results["canaries"].append(run)
            print(
                f"canaries, {turns:,} turns at {args.budget:,} tokens: active recall "
                f"{run['active_recall']:.0%}, retrieval recall {run['retrieval_recall']:.0%}, "
                f"{run['compactions']} compactions (mean headroom {run['headroom_share_mean']:.0%}"
                f" of budget), tail pressure {run['fresh_tail_pressure']}, repeated "
                f"{run['repeated_compactions']}, {run['summaries_written']} summaries; "
                f"{run['seconds']} s",
                flush=True,
            )
        print(f"results: {save('quality', results)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
