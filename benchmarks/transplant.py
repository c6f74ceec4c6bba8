"""Time and peak memory of a transplant: 10,000 summaries over 100,000 linked messages.

    python benchmarks/transplant.py                       # 100,000 messages (~10,000 summaries)
    python benchmarks/transplant.py --messages 20000      # quicker

Builds a source conversation whose DAG is four levels deep (leaves of 11 messages, then
fanouts of 10) with its top summaries and a 64-message tail in its context, and a target with
1,000 messages of its own. The DAG rows are written straight into the store in one
transaction (the benchmark measures transplanting, not compacting; ``doctor`` confirms the
store is consistent before and after). The dry run and the transplant then run in fresh child
processes (``lossless transplant``), whose wall time and peak resident memory are reported.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lossless import Config, Engine
from lossless.doctor import check
from lossless.timestamps import format_ts, now

from common import corpus_messages, save

LEAF_SIZE = 11
FANOUT = 10
TAIL = 64


def build(db: Path, messages: int) -> dict[str, int]:
    """The source (``source``) with its DAG, and the target (``target``)."""
    with Engine.open(db, config=Config()) as engine:
        for start in range(0, messages, 20_000):
            batch = corpus_messages(min(20_000, messages - start), start=start)
            engine.ingest_batch("source", batch)
        engine.ingest_batch("target", corpus_messages(1_000, seed=7))
        src = engine.conversation("source").conversation_id
        store = engine.store
        ids = [
            r[0]
            for r in store.fetchall(
                "SELECT message_id FROM messages WHERE conversation_id = ? ORDER BY seq", (src,)
            )
        ]
        covered, tail = ids[:-TAIL], ids[-TAIL:]
        stamp = format_ts(now())
        summaries: list[tuple[object, ...]] = []
        sum_msgs: list[tuple[object, ...]] = []
        sum_parents: list[tuple[object, ...]] = []
        serial = 0

        def new_id() -> str:
            nonlocal serial
            serial += 1
            return f"sum_{serial:016x}"

        level: list[str] = []
        for i in range(0, len(covered), LEAF_SIZE):
            sid = new_id()
            chunk = covered[i : i + LEAF_SIZE]
            summaries.append(
                (
                    sid,
                    src,
                    "leaf",
                    0,
                    f"Leaf {sid}: work on messages {chunk[0]}"
                    f" to {chunk[-1]}; decisions and files touched.",
                    24,
                    stamp,
                    0,
                )
            )
            sum_msgs += [(sid, mid, n) for n, mid in enumerate(chunk)]
            level.append(sid)
        depth = 0
        while len(level) > FANOUT:
            depth += 1
            upper = []
            for i in range(0, len(level), FANOUT):
                sid = new_id()
                group = level[i : i + FANOUT]
                summaries.append(
                    (
                        sid,
                        src,
                        "condensed",
                        depth,
                        f"Condensed {sid} of {len(group)} summaries at depth {depth - 1}.",
                        20,
                        stamp,
                        len(group),
                    )
                )
                sum_parents += [(sid, p, n) for n, p in enumerate(group)]
                upper.append(sid)
            level = upper
        with store.transaction() as conn:
            conn.executemany(
                "INSERT INTO summaries (summary_id, conversation_id, kind, depth, content,"
                " token_count, created_at, descendant_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                summaries,
            )
            conn.executemany("INSERT INTO summary_messages VALUES (?, ?, ?)", sum_msgs)
            conn.executemany("INSERT INTO summary_parents VALUES (?, ?, ?)", sum_parents)
            conn.execute("DELETE FROM context_items WHERE conversation_id = ?", (src,))
            items = [("summary", None, sid) for sid in level] + [
                ("message", mid, None) for mid in tail
            ]
            conn.executemany(
                "INSERT INTO context_items (conversation_id, ordinal, item_type, message_id,"
                " summary_id, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                [(src, n, kind, mid, sid, stamp) for n, (kind, mid, sid) in enumerate(items)],
            )
            for table in ("summaries_fts", "summaries_trigram"):
                conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        store.catch_up_indexes()
        problems = check(store)
        if problems:
            raise SystemExit(f"the benchmark store is inconsistent: {problems[:3]}")
        return {
            "summaries": len(summaries),
            "linked_messages": len(covered),
            "context_summaries": len(level),
            "depth": depth,
        }


def run_child(db: Path, *extra: str) -> tuple[float, float, dict[str, object]]:
    """Run ``lossless transplant`` in a fresh process: (seconds, peak RSS MB, JSON report)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "lossless"),
            "--db",
            str(db),
            "transplant",
            "source",
            "target",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest child so far; each run here is larger or equal.
    return seconds, max(peak, before) / 1024, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="linked source messages")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-transplant-bench-"))
    try:
        db = work / "t.db"
        started = time.perf_counter()
        shape = build(db, args.messages + TAIL)
        build_s = time.perf_counter() - started
        print(
            f"source: {shape['summaries']:,} summaries (depth {shape['depth']},"
            f" {shape['context_summaries']} in the context) over"
            f" {shape['linked_messages']:,} messages; built in {build_s:.1f} s",
            flush=True,
        )
        dry_s, dry_mb, dry = run_child(db)
        print(f"dry run   {dry_s:6.2f} s   peak {dry_mb:6.1f} MB", flush=True)
        apply_s, apply_mb, applied = run_child(db, "--apply")
        print(f"transplant {apply_s:5.2f} s   peak {apply_mb:6.1f} MB", flush=True)
        with Engine.open(db, config=Config()) as engine:
            problems = check(engine.store)
        print(f"doctor after: {'ok' if not problems else problems[:3]}")
        assert applied["applied"] and applied["dag"]["summaries"] == shape["summaries"]  # type: ignore[index]
        save(
            "transplant",
            {
                **shape,
                "build_seconds": round(build_s, 2),
                "dry_run_seconds": round(dry_s, 3),
                "dry_run_peak_mb": round(dry_mb, 1),
                "transplant_seconds": round(apply_s, 3),
                "transplant_peak_mb": round(apply_mb, 1),
                "copied_messages": dry["messages"],
                "doctor_ok": not problems,
            },
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
