"""Concurrent writers: ingest throughput of 1, 4 and 16 processes on SQLite and PostgreSQL.

    python benchmarks/writers.py                                   # both back ends, 20 s a cell
    python benchmarks/writers.py --backends sqlite --writers 1,4 --seconds 5
    python benchmarks/writers.py --batches 200                     # a fixed count per writer

For each back end (``sqlite``: a temporary file; ``postgres``: a fresh schema of
``LOSSLESS_BENCH_PG``, by default postgresql://postgres@127.0.0.1:5432/test, dropped
afterwards), each number of writer processes and each target (``separate``: every process
writes a conversation of its own; ``shared``: all of them write one conversation), a fresh
store is made, its conversations created, and the processes started. Each opens its own
``Engine``, says it is ready, and waits for the start signal; then all of them call
``Engine.ingest_batch`` with batches of ``--batch`` messages (text of
``common.corpus_messages``, each message carrying a marker of its writer, batch and position)
for ``--seconds``, or ``--batches`` times each. Every call is one transaction and is timed.

Reported per cell: messages/s and batches/s over the whole run (from the start signal to
the last writer's last acknowledged batch), the per-batch latency p50/p95/p99, and the
fewest and most batches one writer got done (how fairly the store shares itself). Then the
store is reconciled exactly against what the writers were told: every acknowledged batch is
stored once, with the message ids ``ingest_batch`` returned, its messages in order at
consecutive seqs (no other writer's message between them), each conversation's seqs and
context ordinals run without gaps, nothing else is stored, and ``doctor`` finds nothing.
A failed call counts as an error (and must have left nothing behind). Not part of the test run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue as queue_module
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.doctor import check

from common import (
    corpus_messages,
    drop_pg_schema,
    fresh_store,
    load_average,
    percentiles,
    revision,
    save,
)

#: A writer that is not ready this long after it was started has failed.
READY_TIMEOUT_S = 120.0


def marker(writer: int, batch: int, position: int) -> str:
    """``[w03 b0000123 m07]``: writer, batch and position in the batch, always as wide."""
    return f"[w{writer:02d} b{batch:07d} m{position:02d}]"


MARKER_CHARS = len(marker(0, 0, 0))


def session_of(target: str, writer: int) -> str:
    return "shared" if target == "shared" else f"writer-{writer:02d}"


def worker(
    writer: int,
    target_url: str,
    target: str,
    args: argparse.Namespace,
    ready: Any,
    go: Any,
    start_at: Any,
    out: Any,
) -> None:
    """One writer process: open the store, wait for the signal, ingest, report to *out*."""
    try:
        engine = Engine.open(target_url, config=Config())
        session = session_of(target, writer)
        engine.conversation(session)  # resolved (and cached) before the start
        corpus = corpus_messages(args.corpus, seed=writer + 1)
    except Exception:  # noqa: BLE001 - reported to the parent, which stops the run
        ready.put((writer, traceback.format_exc()))
        return
    ready.put((writer, None))
    go.wait()
    begin = start_at.value
    while time.monotonic() < begin:
        time.sleep(0.0005)
    deadline = begin + args.seconds
    samples: list[float] = []
    acked: list[tuple[int, int, tuple[int, ...]]] = []  # batch, conversation id, message ids
    errors: list[str] = []
    at = 0
    batch_no = 0
    finished = begin

    def more() -> bool:
        if len(errors) >= 100:  # something is wrong with the store: stop
            return False
        return batch_no < args.batches if args.batches else time.monotonic() < deadline

    while more():
        messages = []
        for position in range(args.batch):
            base = corpus[at % len(corpus)]
            at += 1
            text = f"{marker(writer, batch_no, position)} {base['content']}"
            messages.append({"role": base["role"], "content": text})
        started = time.perf_counter()
        try:
            result = engine.ingest_batch(session, messages)
        except Exception as exc:  # noqa: BLE001 - a failed batch is counted, not fatal
            errors.append(f"batch {batch_no}: {type(exc).__name__}: {exc}")
        else:
            samples.append((time.perf_counter() - started) * 1000)
            acked.append((batch_no, result.conversation_id, result.message_ids))
            finished = time.monotonic()
        batch_no += 1
    engine.close()
    out.put(
        {"writer": writer, "samples": samples, "acked": acked, "errors": errors, "end": finished}
    )


def run_cell(backend: str, writers: int, target: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start *writers* processes on a fresh store, collect their results, reconcile."""
    work = Path(tempfile.mkdtemp(prefix="lossless-writers-"))
    url, schema = fresh_store(backend, work, f"writers-{target}-{writers}")
    procs: list[Any] = []
    try:
        with Engine.open(url, config=Config()) as engine:  # create, migrate, conversations
            for w in range(writers):
                engine.conversation(session_of(target, w), create=True)
        ctx = mp.get_context(args.start_method)
        ready: Any = ctx.Queue()
        out: Any = ctx.Queue()
        go = ctx.Event()
        start_at = ctx.Value("d", 0.0)
        procs = [
            ctx.Process(
                target=worker, args=(w, url, target, args, ready, go, start_at, out), daemon=True
            )
            for w in range(writers)
        ]
        load_before = load_average()
        for p in procs:
            p.start()
        failed = []
        for _ in procs:
            writer, error = ready.get(timeout=READY_TIMEOUT_S)
            if error:
                failed.append(f"writer {writer}: {error}")
        if failed:
            go.set()
            raise RuntimeError("a writer could not start:\n" + "\n".join(failed))
        start_at.value = time.monotonic() + 0.05  # the same instant for every writer
        go.set()
        results = []
        limit = time.monotonic() + (args.seconds if not args.batches else 0) + args.timeout
        while len(results) < len(procs):
            try:
                results.append(out.get(timeout=1.0))
            except queue_module.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > limit:
                    raise RuntimeError(
                        f"{len(procs) - len(results)} writer(s) did not report"
                        f" (exit codes {[p.exitcode for p in procs]})"
                    ) from None
        for p in procs:
            p.join()
        load_after = load_average()
        elapsed = max(r["end"] for r in results) - start_at.value
        samples = [s for r in results for s in r["samples"]]
        errors = [e for r in results for e in r["errors"]]
        batches = sum(len(r["acked"]) for r in results)
        messages = sum(len(ids) for r in results for _, _, ids in r["acked"])
        started = time.perf_counter()
        checks = reconcile(url, target, args.batch, results)
        row: dict[str, Any] = {
            "backend": backend,
            "target": target,
            "writers": writers,
            "seconds": round(elapsed, 3),
            "batch": args.batch,
            "batches": batches,
            "messages": messages,
            "messages_per_s": round(messages / elapsed, 1) if elapsed > 0 else 0.0,
            "batches_per_s": round(batches / elapsed, 2) if elapsed > 0 else 0.0,
            **(percentiles(samples) if len(samples) > 1 else {}),
            "batches_by_writer": sorted(len(r["acked"]) for r in results),
            "errors": len(errors),
            "first_errors": errors[:5],
            "reconcile": checks,
            "reconciles": checks.pop("ok"),
            "reconcile_s": round(time.perf_counter() - started, 1),
            "load_before": load_before,
            "load_after": load_after,
        }
        return row
    finally:
        for p in procs:  # only after a failure: the writers have exited otherwise
            if p.is_alive():
                p.terminate()
                p.join()
        if schema is not None:
            drop_pg_schema(schema)
        shutil.rmtree(work, ignore_errors=True)


def reconcile(url: str, target: str, batch: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Compare the store with what the writers were acknowledged, exactly."""
    expected: dict[str, tuple[int, int]] = {}  # marker -> (conversation id, message id)
    acked_by_conv: Counter[int] = Counter()
    wrong_size = 0
    for r in results:
        for batch_no, conv, ids in r["acked"]:
            wrong_size += len(ids) != batch
            acked_by_conv[conv] += len(ids)
            for position, mid in enumerate(ids):
                expected[marker(r["writer"], batch_no, position)] = (conv, mid)
    with Engine.open(url, config=Config()) as engine:
        store = engine.store
        rows = store.fetchall(
            f"SELECT substr(content, 1, {MARKER_CHARS}), conversation_id, message_id, seq"
            " FROM messages ORDER BY conversation_id, seq"
        )
        contexts = store.fetchall(
            "SELECT conversation_id, count(*), min(ordinal), max(ordinal),"
            " count(DISTINCT ordinal) FROM context_items GROUP BY conversation_id"
        )
        problems = check(store)
    seen: Counter[str] = Counter(r[0] for r in rows)
    stored: dict[str, tuple[int, int]] = {r[0]: (r[1], r[2]) for r in rows}
    unexpected = [m for m in seen if m not in expected]
    missing = [m for m in expected if m not in seen]
    wrong_place = [m for m, at in expected.items() if m in stored and stored[m] != at]
    # Each conversation's seqs run 1..N with no gap, and N is what was acknowledged in it.
    seqs: dict[int, list[int]] = defaultdict(list)
    for _, conv, _, seq in rows:
        seqs[conv].append(seq)
    seq_gaps = sum(s != list(range(1, len(s) + 1)) for s in seqs.values())
    counts_match = {c: len(s) for c, s in seqs.items()} == dict(acked_by_conv)
    # No batch interleaved: a batch's messages sit at consecutive seqs, in order.
    by_batch: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for m, _, _, seq in rows:
        by_batch[m[: m.index(" m")]].append((int(m[m.index(" m") + 2 : m.index("]")]), seq))
    interleaved = 0
    for members in by_batch.values():
        members.sort(key=lambda pair: pair[1])
        positions = [p for p, _ in members]
        first = members[0][1]
        interleaved += positions != list(range(len(members))) or [s for _, s in members] != list(
            range(first, first + len(members))
        )
    context_ok = {
        conv: count == n == distinct and low == 0 and high == n - 1
        for conv, count, low, high, distinct in contexts
        for n in [len(seqs.get(conv, []))]
    }
    checks: dict[str, Any] = {
        "acknowledged_messages": len(expected),
        "stored_messages": len(rows),
        "counts_match": counts_match and len(rows) == len(expected),
        "missing": len(missing),
        "unexpected": len(unexpected),
        "duplicated": sum(1 for n in seen.values() if n > 1),
        "not_as_acknowledged": len(wrong_place),
        "wrong_batch_size": wrong_size,
        "conversations_with_seq_gaps": seq_gaps,
        "batches_interleaved": interleaved,
        "contexts_exact": all(context_ok.values()) and set(context_ok) == set(seqs),
        "doctor_problems": len(problems),
    }
    if target == "shared":
        checks["one_conversation"] = len(seqs) <= 1
    totals = ("acknowledged_messages", "stored_messages")
    checks["ok"] = all(
        v is True if isinstance(v, bool) else v == 0 for k, v in checks.items() if k not in totals
    )
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres")
    parser.add_argument("--writers", default="1,4,16", help="writer processes per cell")
    parser.add_argument("--targets", default="separate,shared", help="separate, shared")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each cell writes")
    parser.add_argument(
        "--batches", type=int, default=0, help="a fixed number of batches per writer instead"
    )
    parser.add_argument("--batch", type=int, default=20, help="messages per ingest_batch call")
    parser.add_argument(
        "--corpus", type=int, default=2_000, help="distinct corpus messages per writer (cycled)"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds past the run before giving up"
    )
    parser.add_argument(
        "--start-method",
        default="spawn",
        choices=("spawn", "forkserver", "fork"),
        help="how writer processes are started (multiprocessing)",
    )
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    targets = [t for t in args.targets.split(",") if t]
    counts = [int(n) for n in args.writers.split(",") if n]
    for b in backends:
        if b not in ("sqlite", "postgres"):
            parser.error(f"unknown back end {b!r}")
    for t in targets:
        if t not in ("separate", "shared"):
            parser.error(f"unknown target {t!r}")
    how = f"{args.batches} batches each" if args.batches else f"{args.seconds:g} s"
    print(f"batches of {args.batch} messages; {how} per cell")
    load_before = load_average()
    rows = []
    for backend in backends:
        for target in targets:
            for writers in counts:
                row = run_cell(backend, writers, target, args)
                rows.append(row)
                line = (
                    f"  {backend:<8} {target:<8} {writers:>2} writers:"
                    f" {row['messages_per_s']:>9,.0f} msg/s {row['batches_per_s']:>8,.1f} batches/s"
                )
                if "p50_ms" in row:
                    line += (
                        f"  p50 {row['p50_ms']:7.2f} ms  p95 {row['p95_ms']:7.2f} ms"
                        f"  p99 {row['p99_ms']:7.2f} ms"
                    )
                fewest, most = row["batches_by_writer"][0], row["batches_by_writer"][-1]
                line += (
                    f"  {row['messages']:,} messages (batches per writer {fewest}-{most}),"
                    f" {row['errors']} errors,"
                    f" reconciles: {row['reconciles']} (load {row['load_after']})"
                )
                print(line, flush=True)
                for error in row["first_errors"]:
                    print("    error:", error)
                if not row["reconciles"]:
                    print("    reconcile:", row["reconcile"])
    print()
    print(
        "| back end | target | writers | messages/s | batches/s | p50 | p95 | p99 | messages"
        " | batches per writer | errors | reconciles |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = (
            f"{r['p50_ms']:.2f} ms | {r['p95_ms']:.2f} ms | {r['p99_ms']:.2f} ms"
            if "p50_ms" in r
            else "– | – | –"
        )
        print(
            f"| {r['backend']} | {r['target']} | {r['writers']} | {r['messages_per_s']:,.0f} |"
            f" {r['batches_per_s']:,.1f} | {lat} | {r['messages']:,} |"
            f" {r['batches_by_writer'][0]}–{r['batches_by_writer'][-1]} | {r['errors']} |"
            f" {'yes' if r['reconciles'] else 'NO'} |"
        )
    load_after = load_average()
    print(f"1-minute load average: {load_before} before, {load_after} after (2 cores)")
    results = {
        "revision": revision(),
        "load_before": load_before,
        "load_after": load_after,
        "seconds": None if args.batches else args.seconds,
        "batches_per_writer": args.batches or None,
        "batch": args.batch,
        "start_method": args.start_method,
        "rows": rows,
    }
    print(f"results: {save('writers', results)}")
    if not all(r["reconciles"] and not r["errors"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
