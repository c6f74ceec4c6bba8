"""Soak: many processes and threads working one store at once, then an exact reconciliation.

    python benchmarks/soak.py                                   # 4 processes × 2 threads, 60 s
    python benchmarks/soak.py --processes 8 --threads 1 --seconds 600
    python benchmarks/soak.py --postgres postgresql://postgres@127.0.0.1:5432/test

Every worker thread runs a random mix, for the set time, over a shared set of conversations:
a turn (``after_turn`` with one to three new messages, each with a unique marker, compacting
when the context grows), an assembly, a search, and now and then a full compaction. The
parent samples the database and WAL size every second (with ``--postgres URL`` the store is
a fresh schema of that database, dropped at the end, and the size is that of its tables). At
the end it checks that every acknowledged message is stored exactly once (by its marker),
that each conversation holds exactly the acknowledged messages, and that ``doctor`` finds
nothing; it reports throughput and p50/p95/p99 latency per operation. Not part of the test
run.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import queue as queue_module
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.doctor import check
from lossless.store import open_store
from lossless.summarize import ScriptedSummarizer, SummaryRequest

from common import corpus_messages, load_average, machine, percentiles, save

OPS = (("turn", 0.55), ("assemble", 0.25), ("grep", 0.17), ("compact", 0.03))
BUDGET = 8_000


def sized(request: SummaryRequest) -> str:
    """An instant summary of about the target size."""
    return ("summary " * (request.target_tokens // 2))[: request.target_tokens * 4]


def worker(proc: int, args: argparse.Namespace, out: Any) -> None:
    """One process: ``args.threads`` threads until the deadline; results go to *out*."""
    config = Config().replace(
        fresh_tail_count=16, leaf_chunk_tokens=1_500, background_compaction=False
    )
    engine = Engine.open(args.db, config=config, summarizer=ScriptedSummarizer(default=sized))
    deadline = time.monotonic() + args.seconds
    samples: dict[str, list[float]] = {name: [] for name, _ in OPS}
    acked: Counter[str] = Counter()
    errors: list[str] = []
    lock = threading.Lock()
    filler = corpus_messages(2_000, seed=proc + 1)

    def run(thread: int) -> None:
        rng = random.Random(proc * 1000 + thread)
        names = [n for n, _ in OPS]
        weights = [w for _, w in OPS]
        n = 0
        while time.monotonic() < deadline:
            op = rng.choices(names, weights)[0]
            conv = f"soak-{rng.randrange(args.conversations)}"
            started = time.perf_counter()
            try:
                if op == "turn":
                    batch = []
                    for _ in range(rng.randint(1, 3)):
                        n += 1
                        body = filler[rng.randrange(len(filler))]["content"]
                        role = "user" if n % 2 else "assistant"
                        batch.append({"role": role, "content": f"[m-{proc}-{thread}-{n}] {body}"})
                    result = engine.after_turn(conv, batch, token_budget=BUDGET)
                    with lock:
                        acked[conv] += len(result.ingest.message_ids)
                elif op == "assemble":
                    engine.assemble(conv, token_budget=BUDGET)
                elif op == "grep":
                    engine.grep(rng.choice(["cache retry", "deploy", "timeout worker"]), limit=20)
                else:
                    engine.compact(conv)
            except Exception as exc:  # noqa: BLE001 - a soak counts failures, it does not stop
                if "no conversation" in str(exc):
                    continue  # assembling a conversation no turn has created yet
                errors.append(f"{op}: {type(exc).__name__}: {exc}")
                continue
            with lock:
                samples[op].append((time.perf_counter() - started) * 1000)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.close()
    out.put({"samples": samples, "acked": dict(acked), "errors": errors})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument(
        "--postgres", metavar="URL", help="soak a PostgreSQL schema of this database instead"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-soak-"))
    args.db = str(work / "soak.db")
    schema = f"lossless_soak_{os.getpid()}"
    if args.postgres:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"CREATE SCHEMA {schema}")
        sep = "&" if "?" in args.postgres else "?"
        args.db = f"{args.postgres}{sep}options=-csearch_path%3D{schema},public"
    sizer = None
    try:
        Engine.open(args.db, config=Config()).close()  # create and migrate once
        sizer = open_store(args.db) if args.postgres else None
        load_before = load_average()
        queue: Any = mp.Queue()
        procs = [mp.Process(target=worker, args=(p, args, queue)) for p in range(args.processes)]
        started = time.monotonic()
        for p in procs:
            p.start()
        sizes: list[tuple[float, int, int]] = []
        results = []
        while len(results) < len(procs):
            if sizer is not None:
                on_disk = sizer.database_size()
                sizes.append((round(time.monotonic() - started, 1), on_disk["database"], 0))
            else:
                db, wal = Path(args.db), Path(args.db + "-wal")
                sizes.append(
                    (
                        round(time.monotonic() - started, 1),
                        db.stat().st_size,
                        wal.stat().st_size if wal.exists() else 0,
                    )
                )
            with contextlib.suppress(queue_module.Empty):  # keep sampling sizes meanwhile
                results.append(queue.get(timeout=1.0))
        for p in procs:
            p.join()
        elapsed = time.monotonic() - started

        samples: dict[str, list[float]] = {name: [] for name, _ in OPS}
        acked: Counter[str] = Counter()
        errors: list[str] = []
        for r in results:
            for name, values in r["samples"].items():
                samples[name] += values
            acked.update(r["acked"])
            errors += r["errors"]

        with Engine.open(args.db, config=Config()) as engine:
            stored = {
                c.conversation.session_id: c.message_count
                for c in engine.conversations()
                if c.conversation.session_id.startswith("soak-")
            }
            find = "strpos" if engine.store.backend == "postgresql" else "instr"
            markers = engine.store.fetchall(
                f"SELECT substr(content, 1, {find}(content, ']')) AS m, count(*) FROM messages"
                " GROUP BY m HAVING count(*) > 1"
            )
            problems = check(engine.store)
        exact = dict(acked) == stored
        report = {
            "machine": machine(),
            "backend": "postgresql" if args.postgres else "sqlite",
            "processes": args.processes,
            "threads": args.threads,
            "seconds": round(elapsed, 1),
            "conversations": args.conversations,
            "operations": {
                name: {"count": len(values), "per_second": round(len(values) / elapsed, 1)}
                | (percentiles(values) if len(values) > 1 else {})
                for name, values in samples.items()
            },
            "messages_acknowledged": sum(acked.values()),
            "counts_reconcile": exact,
            "duplicated_markers": len(markers),
            "doctor_problems": len(problems),
            "errors": len(errors),
            "first_errors": errors[:5],
            "db_mb_over_time": [(t, round(d / 1e6, 1), round(w / 1e6, 1)) for t, d, w in sizes][
                :: max(1, len(sizes) // 20)
            ],
            "load_before": load_before,
            "load_after": load_average(),
        }
        print(
            f"{args.processes} processes × {args.threads} threads, {elapsed:.0f} s,"
            f" {args.conversations} conversations"
        )
        for name, row in report["operations"].items():
            if row["count"] > 1:
                print(
                    f"  {name:<9} {row['count']:>7,} ({row['per_second']:>7.1f}/s)"
                    f"  p50 {row['p50_ms']:8.2f} ms  p95 {row['p95_ms']:8.2f} ms"
                    f"  p99 {row['p99_ms']:8.2f} ms"
                )
        print(
            f"messages acknowledged {report['messages_acknowledged']:,}; stored exactly as"
            f" acknowledged: {exact}; duplicated markers: {len(markers)}; doctor problems:"
            f" {len(problems)}; errors: {len(errors)}"
        )
        last = sizes[-1] if sizes else (0, 0, 0)
        peak_wal = max((w for _, _, w in sizes), default=0)
        print(
            f"database {last[1] / 1e6:.1f} MB at the end, WAL peak {peak_wal / 1e6:.1f} MB;"
            f" mean {statistics.fmean(d for _, d, _ in sizes) / 1e6:.1f} MB"
            if sizes
            else ""
        )
        for e in errors[:5]:
            print("  error:", e)
        save("soak-postgres" if args.postgres else "soak", report)
        if not exact or markers or problems:
            sys.exit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.postgres:
            if sizer is not None:
                sizer.close()
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    main()
