"""What ``doctor``'s file checks cost on a large store, and how soon Ctrl-C stops a long command.

    python benchmarks/checks.py --db big.db          # a store you have (read, and copied)
    python benchmarks/checks.py --turns 150000       # builds one: 1,020,000 messages, ~3 min

Timed on the store (a SQLite file):

* SQLite's ``PRAGMA quick_check`` (``lossless doctor``'s default) and ``integrity_check``
  (``doctor --full``), each alone with the file in the page cache (and the first
  ``quick_check``, which reads it from disk), and the whole of ``doctor`` and ``doctor --full``;
* for ``doctor --full``, ``backup`` and ``doctor --rebuild-fts``: how long after SIGINT
  (Ctrl-C), sent ``--at`` seconds into the command, the process has ended. Each is a real
  ``lossless`` process; the rebuild runs on a copy and is rolled back by the interrupt.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lossless.sample import write_session

from common import load_average, machine, revision, save

EXE = Path(sys.executable).with_name("lossless")


def pragma_seconds(db: Path, pragma: str) -> float:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        began = time.perf_counter()
        rows = conn.execute(f"PRAGMA {pragma}(100)").fetchall()
        took = time.perf_counter() - began
    assert rows == [("ok",)], rows
    return took


def command_seconds(*args: str) -> float:
    began = time.perf_counter()
    subprocess.run([str(EXE), *args], check=True, capture_output=True)
    return time.perf_counter() - began


def stop_seconds(at: float, *args: str) -> float | None:
    """Seconds from SIGINT to the end of ``lossless ARGS`` (None: it ended before *at*)."""
    proc = subprocess.Popen([str(EXE), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(at)
    if proc.poll() is not None:
        return None
    began = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=600)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="an existing SQLite store")
    parser.add_argument("--turns", type=int, default=150_000, help="turns of a store to build")
    parser.add_argument("--at", type=float, default=2.0, help="seconds before the SIGINT")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.db.parent if args.db else None) as tmp:
        work = Path(tmp)
        db = args.db
        if db is None:
            db = work / "big.db"
            transcript = write_session(work / "big.jsonl", args.turns, session_id="big")
            subprocess.run([str(EXE), "--db", str(db), "import", str(transcript)], check=True)
        messages = (
            sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            .execute("SELECT count(*) FROM messages")
            .fetchone()[0]
        )
        # The first read of a large file comes from disk; the checks are timed once it is in
        # the page cache, as on a machine that uses the store (the first read is reported).
        cold = pragma_seconds(db, "quick_check")
        quick = pragma_seconds(db, "quick_check")
        full = pragma_seconds(db, "integrity_check")
        doctor = command_seconds("--db", str(db), "doctor")
        doctor_full = command_seconds("--db", str(db), "doctor", "--full")
        copy = work / "copy.db"
        shutil.copy(db, copy)
        stops = {
            "doctor --full": stop_seconds(args.at, "--db", str(db), "doctor", "--full"),
            "backup": stop_seconds(args.at, "--db", str(db), "backup", str(work / "b.db")),
            "doctor --rebuild-fts": stop_seconds(
                args.at, "--db", str(copy), "doctor", "--rebuild-fts"
            ),
        }
    result = {
        "revision": revision(),
        "load_average": load_average(),
        "messages": messages,
        "database_bytes": db.stat().st_size if db.exists() else None,
        "first_quick_check_s": round(cold, 2),
        "quick_check_s": round(quick, 2),
        "integrity_check_s": round(full, 2),
        "doctor_s": round(doctor, 2),
        "doctor_full_s": round(doctor_full, 2),
        "sigint_at_s": args.at,
        "stopped_after_sigint_s": {k: None if v is None else round(v, 2) for k, v in stops.items()},
    }
    print(f"store: {messages:,} messages; load average {result['load_average']}")
    print(f"PRAGMA quick_check      {cold:6.2f} s   (the first, the file read from disk)")
    print(f"PRAGMA quick_check      {quick:6.2f} s   (doctor)")
    print(f"PRAGMA integrity_check  {full:6.2f} s   (doctor --full)")
    print(f"lossless doctor         {doctor:6.2f} s")
    print(f"lossless doctor --full  {doctor_full:6.2f} s")
    for name, took in stops.items():
        said = "ended before the signal" if took is None else f"{took:.2f} s after SIGINT"
        print(f"Ctrl-C at {args.at:.0f} s into {name:<22} {said}")
    save("checks", {"machine": machine(), **result})


if __name__ == "__main__":
    main()
