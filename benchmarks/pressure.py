"""Under pressure: a host's window, its own prompt, long messages; does every turn fit?

    python benchmarks/pressure.py                          # the default sweep, 2 conversations
    python benchmarks/pressure.py --samples conv-26 --windows 16000 --overheads 12000

Each cell replays LoCoMo conversations (``locomo.py``, the offline extractive summarizer,
lossless's defaults) through a host that behaves as OpenClaw does: before each request it
assembles lossless's context within the room its window leaves (``Engine.room``: the window
less the host's own prompt, measured from the previous request's size as a provider reports
it, less the reply reserve, less the request itself, which the host sends after lossless's
messages); when the request would be over its own limit (the window less the reply reserve) it
asks lossless to compact (``Engine.compact_for_host``) and assembles again; after the answer it
hands the turn over (``after_turn``). ``--message-turns N`` joins every N LoCoMo turns into
one message (longer messages: a paste, a tool output).

Per cell it prints: the turns that would fail (a request over the window), the compaction runs
per turn (mean and most), the DAG's depth against its bound (1 + log base
``condensed_min_fanout`` of the leaves), and the share of LoCoMo questions whose evidence turn
is in what the model gets at the end (lossless's context; a sliding window of the same room for
comparison).
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.timestamps import parse_ts
from lossless.tokens import estimate_tokens

import locomo
from common import revision, save

#: The windows, the host's own prompt, and message sizes swept by default.
WINDOWS = (8_000, 16_000, 32_000, 128_000)
OVERHEADS = (2_000, 12_000, 22_000)
MESSAGE_TURNS = (1, 8, 32)
#: The host's reply reserve: a quarter of the window, at most 8,000 tokens.
REPLY_SHARE = 0.25
REPLY_MAX = 8_000


class Runs(logging.Handler):
    """Counts the compaction runs lossless logs (each run that wrote summaries)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def joined(turns: list[locomo.Turn], size: int) -> list[locomo.Turn]:
    """Every *size* consecutive turns as one message (its first turn's id and time, the
    texts one after the other), the messages alternating user and assistant: fewer, longer
    messages, as when a user pastes a document or a tool returns a page."""
    if size <= 1:
        return turns
    out: list[locomo.Turn] = []
    for n in range(0, len(turns), size):
        block = turns[n : n + size]
        role = "user" if (n // size) % 2 == 0 else "assistant"
        text = "\n".join(msg["content"] for _, msg, _ in block)
        out.append((block[0][0], {"role": role, "content": text}, block[0][2]))
    return out


def exchanges(turns: list[locomo.Turn]) -> list[list[locomo.Turn]]:
    """The conversation as the host's turns: a user message and what answered it."""
    out: list[list[locomo.Turn]] = []
    for turn in turns:
        if turn[1]["role"] == "user" or not out:
            out.append([turn])
        else:
            out[-1].append(turn)
    return out


def text_of(messages: list[dict[str, Any]]) -> str:
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [c.get("text", "") for c in content if isinstance(c, dict)]
    return "\n".join(parts)


def replay(
    work: Path, sample: dict[str, Any], window: int, overhead: int, size: int
) -> dict[str, Any]:
    """One conversation through the host; what the cell reports of it."""
    turns = joined(locomo.messages(sample), size)
    reply = min(REPLY_MAX, int(window * REPLY_SHARE))
    sid = sample["sample_id"]
    runs = Runs()
    log = logging.getLogger("lossless.compaction")
    log.addHandler(runs)
    log.setLevel(logging.INFO)
    failed = host_asked = 0
    per_turn: list[int] = []
    last_text = ""
    try:
        with Engine.open(work / f"{sid}-{window}-{overhead}-{size}.db", config=Config()) as engine:
            engine.conversation(sid, create=True)
            for exchange in exchanges(turns):
                before = runs.count
                request = exchange[0][1]
                pending = estimate_tokens(request["content"])
                room = engine.room(sid, window, reply=reply)
                made = engine.assemble(
                    sid, room.budget_after(pending), format="openai", prompt=request["content"]
                )
                sent = overhead + made.tokens + pending
                if sent > window - reply:  # the host's preflight: it asks lossless to compact
                    host_asked += 1
                    engine.compact_for_host(sid, room, host_tokens=sent, format="openai")
                    made = engine.assemble(
                        sid,
                        room.budget_after(pending),
                        format="openai",
                        prompt=request["content"],
                    )
                    sent = overhead + made.tokens + pending
                failed += sent > window
                last_text = text_of(made.messages) + "\n" + request["content"]
                # The provider's usage of that request: the host's part is measured from it.
                engine.measure_room(
                    sid, window=window, prompt_tokens=sent, pending_tokens=pending, reply=reply
                )
                engine.after_turn(
                    sid,
                    [
                        engine.normalize(m, external_id=dia, created_at=parse_ts(stamp))
                        for dia, m, stamp in exchange
                    ],
                    token_budget=room.budget,
                )
                per_turn.append(runs.count - before)
            live = engine.store.live_summaries(engine.conversation(sid).conversation_id)
            final_room = engine.room(sid, window, reply=reply)
    finally:
        log.removeHandler(runs)
    leaves = sum(1 for s in live if s.kind == "leaf")
    depth = max((s.depth for s in live), default=0)
    fanout = Config().condensed_min_fanout
    bound = 1 + math.log(max(leaves, 1), fanout)
    # What the model got for the last request, against a sliding window of the same room.
    context = locomo.norm(last_text)
    by_id = {dia: msg["content"] for dia, msg, _ in locomo.messages(sample)}
    window_text, _ = locomo.window_text(
        locomo.messages(sample), final_room.budget_after(0) + estimate_tokens(request["content"])
    )
    window_norm = locomo.norm(window_text)
    found = slid = asked = 0
    for _, evidence in locomo.questions(sample, locomo.messages(sample)):
        said = [by_id[e] for e in evidence]
        asked += 1
        found += any(locomo.verbatim_present(t, context) for t in said)
        slid += any(locomo.verbatim_present(t, window_norm) for t in said)
    return {
        "sample": sid,
        "turns": len(per_turn),
        "failed": failed,
        "host_asked": host_asked,
        "runs_mean": sum(per_turn) / max(1, len(per_turn)),
        "runs_max": max(per_turn, default=0),
        "depth": depth,
        "bound": bound,
        "leaves": leaves,
        "room": final_room.budget,
        "overflows": final_room.overflows,
        "questions": asked,
        "evidence": found,
        "window_evidence": slid,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", default="", help="LoCoMo sample ids, comma-separated")
    parser.add_argument("--count", type=int, default=2, help="how many conversations (default 2)")
    parser.add_argument("--windows", default=",".join(map(str, WINDOWS)))
    parser.add_argument("--overheads", default=",".join(map(str, OVERHEADS)))
    parser.add_argument("--message-turns", default=",".join(map(str, MESSAGE_TURNS)))
    parser.add_argument("--locomo", type=Path, default=locomo.LOCOMO)
    args = parser.parse_args()
    samples = locomo.load(args.locomo, args.samples)
    if samples is None:
        return
    samples = samples[: args.count] if not args.samples else samples
    windows = [int(w) for w in args.windows.split(",")]
    overheads = [int(o) for o in args.overheads.split(",")]
    sizes = [int(s) for s in args.message_turns.split(",")]
    work = Path(tempfile.mkdtemp(prefix="lossless-pressure-"))
    cells: list[dict[str, Any]] = []
    started = time.perf_counter()
    header = (
        f"{'window':>7} {'host':>6} {'msg':>4} {'turns':>6} {'failed':>6} {'asked':>6}"
        f" {'runs/turn':>10} {'depth/bound':>12} {'evidence':>9} {'window':>7}"
    )
    print(header)
    try:
        for window in windows:
            for overhead in overheads:
                for size in sizes:
                    if overhead >= window:
                        print(
                            f"{window:>7,} {overhead:>6,} {size:>4} "
                            "the host's own prompt alone is over the window: skipped"
                        )
                        continue
                    rows = [replay(work, s, window, overhead, size) for s in samples]
                    turns = sum(r["turns"] for r in rows)
                    cell = {
                        "window": window,
                        "overhead": overhead,
                        "message_turns": size,
                        "turns": turns,
                        "failed": sum(r["failed"] for r in rows),
                        "host_asked": sum(r["host_asked"] for r in rows),
                        "runs_mean": sum(r["runs_mean"] * r["turns"] for r in rows) / turns,
                        "runs_max": max(r["runs_max"] for r in rows),
                        "depth": max(r["depth"] for r in rows),
                        "bound": min(r["bound"] for r in rows),
                        "depth_within_bound": all(r["depth"] <= r["bound"] + 1e-9 for r in rows),
                        "evidence": sum(r["evidence"] for r in rows)
                        / max(1, sum(r["questions"] for r in rows)),
                        "window_evidence": sum(r["window_evidence"] for r in rows)
                        / max(1, sum(r["questions"] for r in rows)),
                        "overflows": any(r["overflows"] for r in rows),
                        "rows": rows,
                    }
                    cells.append(cell)
                    print(
                        f"{window:>7,} {overhead:>6,} {size:>4} {turns:>6} {cell['failed']:>6}"
                        f" {cell['host_asked']:>6}"
                        f" {cell['runs_mean']:>5.2f}/{cell['runs_max']:<4}"
                        f" {cell['depth']:>5}/{cell['bound']:<6.2f}"
                        f" {cell['evidence']:>8.1%} {cell['window_evidence']:>7.1%}"
                        + ("  (room at its minimum)" if cell["overflows"] else ""),
                        flush=True,
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    took = time.perf_counter() - started
    print(f"{len(cells)} cells, {len(samples)} conversation(s) each, in {took:.0f} s")
    save(
        "pressure",
        {"revision": revision(), "samples": [s["sample_id"] for s in samples], "cells": cells},
    )


if __name__ == "__main__":
    main()
