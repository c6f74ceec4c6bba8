"""Ingest throughput and per-turn latency, with the OpenAI Agents SDK's SQLiteSession beside it.

    python benchmarks/ingest.py                    # 100k bulk + per-turn at 1k..1M
    python benchmarks/ingest.py --sizes 1000,100000 --bulk 20000   # quicker

Bulk: N messages of ~200 characters through ``Engine.ingest_batch`` (batches of 5,000; one
transaction each; the full-text index filled in the same transaction, the trigram index
caught up afterwards and timed separately). Per turn: one user + one assistant message in one
call (one transaction), timed over many turns on stores that already hold 1k ... 1M messages.
The baseline is ``agents.SQLiteSession`` (``pip install openai-agents``) fed the same
messages; it stores JSON blobs with no search index, so it is a floor, not a competitor.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine

from common import percentiles, save, text_messages

BATCH = 5_000


def bulk_lossless(
    work: Path, messages: list[dict[str, str]], repeat: int, *, mask: bool = True
) -> dict[str, Any]:
    """Median of *repeat* runs, each on a fresh database (this machine's timing is noisy);
    secrets masked (the default) or not."""
    runs = []
    config = Config().replace(redact={"mask": mask})
    for r in range(repeat):
        with Engine.open(work / f"bulk-{r}-{mask}.db", config=config) as engine:
            started = time.perf_counter()
            for i in range(0, len(messages), BATCH):
                engine.ingest_batch("bulk", messages[i : i + BATCH])
            ingest = time.perf_counter() - started
            started = time.perf_counter()
            engine.store.catch_up_indexes()
            catch_up = time.perf_counter() - started
        runs.append((ingest, catch_up))
    rates = sorted(len(messages) / i for i, _ in runs)
    ingest, catch_up = sorted(runs)[len(runs) // 2]
    return {
        "messages_per_s": round(statistics.median(rates)),
        "messages_per_s_runs": [round(r) for r in rates],
        "seconds": round(ingest, 3),
        "trigram_catch_up_s": round(catch_up, 3),
        "messages_per_s_incl_catch_up": round(len(messages) / (ingest + catch_up)),
    }


def bulk_agents(db: Path, messages: list[dict[str, str]]) -> dict[str, float] | None:
    try:
        from agents import SQLiteSession
    except ImportError:
        return None

    async def run() -> float:
        session = SQLiteSession("bulk", str(db))
        started = time.perf_counter()
        for i in range(0, len(messages), BATCH):
            await session.add_items(messages[i : i + BATCH])  # type: ignore[arg-type]
        elapsed = time.perf_counter() - started
        session.close()
        return elapsed

    seconds = asyncio.run(run())
    return {"messages_per_s": round(len(messages) / seconds), "seconds": round(seconds, 3)}


def per_turn_lossless(db: Path, size: int, turns: int) -> dict[str, float]:
    fill = text_messages(min(size, 50_000), seed=3)
    with Engine.open(db) as engine:
        done = 0
        while done < size:
            chunk = fill[: min(len(fill), size - done)]
            engine.ingest_batch("history", chunk)
            done += len(chunk)
        engine.store.catch_up_indexes()
        turn_msgs = text_messages(turns * 2, seed=5)
        samples = []
        for t in range(turns):
            pair = turn_msgs[2 * t : 2 * t + 2]
            started = time.perf_counter()
            engine.ingest_batch("history", pair)
            samples.append((time.perf_counter() - started) * 1000)
    return {"stored_before": size, "turns": turns, **percentiles(samples)}


def per_turn_agents(db: Path, size: int, turns: int) -> dict[str, float] | None:
    try:
        from agents import SQLiteSession
    except ImportError:
        return None
    fill = text_messages(min(size, 50_000), seed=3)
    turn_msgs = text_messages(turns * 2, seed=5)

    async def run() -> list[float]:
        session = SQLiteSession("history", str(db))
        done = 0
        while done < size:
            chunk = fill[: min(len(fill), size - done)]
            await session.add_items(chunk)  # type: ignore[arg-type]
            done += len(chunk)
        samples = []
        for t in range(turns):
            started = time.perf_counter()
            await session.add_items(turn_msgs[2 * t : 2 * t + 2])  # type: ignore[arg-type]
            samples.append((time.perf_counter() - started) * 1000)
        session.close()
        return samples

    return {"stored_before": size, "turns": turns, **percentiles(asyncio.run(run()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bulk", type=int, default=100_000, help="messages in the bulk run")
    parser.add_argument(
        "--sizes", default="1000,10000,100000,1000000", help="stored messages before per-turn runs"
    )
    parser.add_argument("--turns", type=int, default=1000, help="turns timed per size")
    parser.add_argument("--repeat", type=int, default=3, help="bulk runs (the median is kept)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-bench-"))
    results: dict[str, Any] = {}
    try:
        messages = text_messages(args.bulk)
        results["bulk"] = {
            "messages": args.bulk,
            "lossless": bulk_lossless(work, messages, args.repeat),
            "agents_sqlite_session": bulk_agents(work / "bulk-agents.db", messages),
        }
        # Masking (on by default) against off, in the same run, on the same messages and on
        # messages of which one in fifty holds a key.
        keyed = [
            {**m, "content": m["content"] + f" key sk-proj-{i:024d}"} if i % 50 == 0 else m
            for i, m in enumerate(messages)
        ]
        masking = {
            "off": bulk_lossless(work, messages, args.repeat, mask=False),
            "on": results["bulk"]["lossless"],
            "on_with_keys": bulk_lossless(work, keyed, args.repeat),
        }
        results["masking"] = masking
        b = results["bulk"]
        print(f"bulk ingest of {args.bulk:,} messages (~200 chars, FTS):")
        print(
            f"  lossless      {b['lossless']['messages_per_s']:>9,} msg/s (median of"
            f" {b['lossless']['messages_per_s_runs']})"
            f"  (+ trigram catch-up {b['lossless']['trigram_catch_up_s']} s;"
            f" {b['lossless']['messages_per_s_incl_catch_up']:,} msg/s with it)"
        )
        if b["agents_sqlite_session"]:
            ratio = b["lossless"]["messages_per_s"] / b["agents_sqlite_session"]["messages_per_s"]
            b["ratio_lossless_to_agents"] = round(ratio, 2)
            print(
                f"  SQLiteSession {b['agents_sqlite_session']['messages_per_s']:>9,} msg/s"
                f"  (no search index); lossless/SQLiteSession = {ratio:.2f}"
            )
        print("masking secrets (the default) against off, bulk msg/s (with catch-up):")
        for name, row in masking.items():
            rate, whole = row["messages_per_s"], row["messages_per_s_incl_catch_up"]
            share = rate / masking["off"]["messages_per_s"]
            print(f"  {name:<13} {rate:>9,} ({whole:,})  {share:.1%} of off")
        results["per_turn"] = []
        print("per-turn ingest (user + assistant, one transaction):")
        for size in (int(s) for s in args.sizes.split(",")):
            row = {
                "lossless": per_turn_lossless(work / f"turn-{size}.db", size, args.turns),
                "agents_sqlite_session": per_turn_agents(
                    work / f"turn-agents-{size}.db", size, args.turns
                ),
            }
            results["per_turn"].append(row)
            lo, ag = row["lossless"], row["agents_sqlite_session"]
            line = (
                f"  {size:>9,} stored: lossless p50 {lo['p50_ms']:.3f} ms"
                f" p95 {lo['p95_ms']:.3f} ms p99 {lo['p99_ms']:.3f} ms"
            )
            if ag:
                line += f" | SQLiteSession p50 {ag['p50_ms']:.3f} ms p95 {ag['p95_ms']:.3f} ms"
            print(line, flush=True)
            for suffix in ("", "-wal", "-shm"):
                for name in (f"turn-{size}.db", f"turn-agents-{size}.db"):
                    (work / f"{name}{suffix}").unlink(missing_ok=True)
        p50s = [r["lossless"]["p50_ms"] for r in results["per_turn"]]
        results["per_turn_p50_ratio_largest_to_smallest"] = round(p50s[-1] / p50s[0], 2)
        print(f"  p50 largest/smallest store: {results['per_turn_p50_ratio_largest_to_smallest']}")
        print(f"results: {save('ingest', results)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
