"""A simulated year of a heavy user under a size cap and a retention policy (issue 48).

    python benchmarks/year.py                          # 365 days, a 500 MB cap
    python benchmarks/year.py --days 30 --cap-mb 40    # a quicker look

Each simulated day brings ``--sessions`` Claude Code sessions (``lossless.sample``, each
``--turns`` turns whose file reads are padded to ``--payload`` bytes: the tool outputs that
make most of a coding agent's bytes), written as transcripts, imported and compacted, as the
hooks do. Every ``--prune-every`` days the retention policy runs as of that day
(``Engine.prune(now=...)``): tool outputs older than ``--archive-days`` days are archived, and
with ``max_store_bytes`` at ``--cap-mb`` and ``at_cap`` on, the oldest go first when the store
passes 80% of it.

Measured: the store's size (database, write-ahead log, large files: what the cap counts) at
its largest before each prune and after it, the archive files, the time each step took. At
the end every archived message is read back and compared with a fingerprint of the message
taken when it was stored (its text, parts, envelope and host facts: what ``show`` and
``export`` print), ``doctor`` runs (its reachability check: every message is in the context
or under a summary in it), and the archived messages no summary covers are counted. Results
go to ``benchmarks/out/year.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.sample import write_session

from common import machine, save


def fingerprint(message: Any) -> bytes:
    """What a reader of the message gets, in 16 bytes."""
    return hashlib.blake2b(repr(message).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--sessions", type=int, default=6, help="sessions a day")
    parser.add_argument("--turns", type=int, default=60, help="turns a session")
    parser.add_argument("--payload", type=int, default=3000, help="bytes of a file read")
    parser.add_argument("--cap-mb", type=float, default=500.0)
    parser.add_argument("--archive-days", type=float, default=30.0)
    parser.add_argument("--prune-every", type=int, default=7)
    parser.add_argument("--folder", help="where the store goes (default: a scratch folder)")
    args = parser.parse_args()

    folder = Path(args.folder or tempfile.mkdtemp(prefix="lossless-year-"))
    folder.mkdir(parents=True, exist_ok=True)
    cap = int(args.cap_mb * 1e6)
    config = Config().replace(
        data_dir=str(folder / "data"),
        max_store_bytes=cap,
        retention={
            "archive_after_days": args.archive_days,
            "kinds": ["tool_outputs"],
            "at_cap": True,
            "batch": 2000,
        },
    )
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=args.days)
    prints: dict[int, bytes] = {}
    transcript_bytes = 0
    largest = 0
    prunes: list[dict[str, Any]] = []
    began = time.monotonic()
    ingest_seconds = prune_seconds = 0.0
    with Engine.open(str(folder / "year.db"), config=config) as engine:
        for day in range(args.days):
            t0 = time.monotonic()
            for s in range(args.sessions):
                sid = f"d{day:03d}-s{s}"
                path = write_session(
                    folder / f"{sid}.jsonl",
                    args.turns,
                    seed=day * args.sessions + s,
                    format="claude_code",
                    session_id=sid,
                    payload_bytes=args.payload,
                    start=start + timedelta(days=day, hours=8 + 2 * s),
                )
                transcript_bytes += path.stat().st_size
                engine.import_path(str(path))
                engine.compact(sid)
                path.unlink()
                for m in engine.messages(sid):
                    prints[m.message_id] = fingerprint(m)
            engine.finish_indexes()
            ingest_seconds += time.monotonic() - t0
            size = engine.cap()
            assert size is not None
            largest = max(largest, size.size)
            if (day + 1) % args.prune_every == 0 or day == args.days - 1:
                t0 = time.monotonic()
                report = engine.prune(now=start + timedelta(days=day + 1))
                took = time.monotonic() - t0
                prune_seconds += took
                after = engine.cap()
                assert after is not None
                prunes.append(
                    {
                        "day": day + 1,
                        "before": report.bytes_before,
                        "after": after.size,
                        "archived": sum(r.messages for r in report.rules),
                        "wal_after": engine.store.database_size().get("wal", 0),
                        "seconds": round(took, 2),
                    }
                )
                print(
                    f"day {day + 1:3d}: {len(prints):,} messages, store"
                    f" {report.bytes_before / 1e6:,.1f} -> {after.size / 1e6:,.1f} MB"
                    f" (cap {cap / 1e6:,.0f}; log {prunes[-1]['wal_after'] / 1e6:,.1f} MB),"
                    f" archived {prunes[-1]['archived']:,}"
                    f" in {took:.1f} s",
                    flush=True,
                )
        # Every archived message, read back, against its fingerprint.
        t0 = time.monotonic()
        archived = [
            int(r[0])
            for r in engine.store.fetchall(
                "SELECT message_id FROM messages WHERE archived_at IS NOT NULL ORDER BY message_id"
            )
        ]
        differ = 0
        for i in range(0, len(archived), 1000):
            for m in engine.store.get_messages_by_id(archived[i : i + 1000]):
                differ += fingerprint(m) != prints[m.message_id]
        read_seconds = time.monotonic() - t0
        uncovered = int(
            engine.store.fetchall(
                "SELECT count(*) FROM messages m WHERE m.archived_at IS NOT NULL AND NOT EXISTS"
                " (SELECT 1 FROM summary_messages s WHERE s.message_id = m.message_id)"
            )[0][0]
        )
        t0 = time.monotonic()
        problems = engine.check()
        doctor_seconds = time.monotonic() - t0
        archives = engine.archives()
        final = engine.cap()
        assert final is not None
    result = {
        "days": args.days,
        "sessions_a_day": args.sessions,
        "turns": args.turns,
        "payload": args.payload,
        "messages": len(prints),
        "transcript_bytes": transcript_bytes,
        "cap": cap,
        "largest_store": largest,
        "final_store": final.size,
        "archived": len(archived),
        "archived_differing": differ,
        "archived_without_summary": uncovered,
        "archive_files": len(archives),
        "archive_bytes": sum(a.bytes for a in archives),
        "archived_store_bytes": sum(a.text_bytes for a in archives),
        "doctor_problems": [p.to_dict() for p in problems[:10]],
        "seconds": {
            "ingest_and_compact": round(ingest_seconds, 1),
            "prunes": round(prune_seconds, 1),
            "read_back": round(read_seconds, 1),
            "doctor": round(doctor_seconds, 1),
            "all": round(time.monotonic() - began, 1),
        },
        "prunes": prunes,
    }
    save("year", result)
    print(
        f"\n{args.days} days, {len(prints):,} messages ({transcript_bytes / 1e6:,.0f} MB of"
        f" transcripts): the store at most {largest / 1e6:,.1f} MB of a {cap / 1e6:,.0f} MB cap"
        f" ({final.size / 1e6:,.1f} MB at the end); {len(archived):,} messages archived in"
        f" {len(archives):,} files ({result['archive_bytes'] / 1e6:,.1f} MB, from"
        f" {result['archived_store_bytes'] / 1e6:,.1f} MB in the store); read back:"
        f" {differ} differ; without a summary: {uncovered}; doctor: {len(problems)} problem(s)."
    )
    print(f"machine: {machine()['cpu']}")


if __name__ == "__main__":
    main()
