"""What a store costs on disk, against the text it holds and a one-index floor, and the
recall it buys, in one run.

    python benchmarks/footprint.py                 # LoCoMo dev x10 and a Claude Code session
    python benchmarks/footprint.py --copies 2      # a quicker look
    python benchmarks/footprint.py --kept 1000000  # the 1M-message store of assembly.py too

Two stores are built in a scratch folder, each finished as a long-lived store is (every
deferred index entry made, the write-ahead log checkpointed into the file):

* **LoCoMo x N** — the six dev conversations (``../shared/data``) stored N times, each copy
  its own conversations, every turn one message as ``recall.py`` stores it. Beside it, the
  *floor*: the same rows in a plain SQLite table (id, conversation, role, time, text) with one
  FTS5 index (``porter unicode61``, external content: the text is not stored twice), vacuumed.
  In the same store, ``lossless grep QUESTION --limit 10`` is asked every question of the
  first copy (scoped to its conversation, as ``recall.py`` does): the recall a change to the
  footprint must keep.
* **A Claude Code session** — a generated transcript (``lossless.sample``) of about 6,000
  entries, imported as a file: the store against the JSONL's size.

With ``--kept N``, the N-message store ``assembly.py`` and ``grep.py`` read
(``common.compacted_store``, built once and kept; compacted with the extractive summarizer) is
measured the same way against the floor of its messages.

Each object's bytes come from ``Engine.space()`` (SQLite's ``dbstat``), the file's from the
file system after a checkpoint. Results go to ``benchmarks/out/footprint.json``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.sample import generate_session
from lossless.timestamps import parse_ts

import locomo
from common import compacted_store, machine, save

#: About the size of the Claude Code transcript the footprint is judged on (issue 48).
CLAUDE_CODE_ENTRIES = 6_000


def settled_size(path: Path) -> int:
    """The store's file size once it is closed and its log checkpointed into the file (what
    it settles to between sessions)."""
    conn = sqlite3.connect(path)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert not busy, "the checkpoint could not finish"
    finally:
        conn.close()
    return path.stat().st_size


def objects(engine: Engine) -> list[dict[str, Any]]:
    return [{"name": o.name, "kind": o.kind, "bytes": o.bytes} for o in engine.space(top=0).objects]


def floor_size(rows: list[tuple[str, str, str, str]], path: Path) -> int:
    """The bytes of *rows* (conversation, role, time, text) in a plain table with one FTS5
    index over the text: the least a searchable store of them can be."""
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE m (id INTEGER PRIMARY KEY, conversation TEXT, role TEXT, at TEXT,"
        " content TEXT);"
        "CREATE VIRTUAL TABLE f USING fts5(content, content='m', content_rowid='id',"
        " tokenize='porter unicode61');"
    )
    conn.executemany("INSERT INTO m (conversation, role, at, content) VALUES (?, ?, ?, ?)", rows)
    conn.execute("INSERT INTO f (f) VALUES ('rebuild')")
    conn.commit()
    conn.execute("VACUUM")
    conn.close()
    return path.stat().st_size


def locomo_store(work: Path, data: list[dict[str, Any]], copies: int) -> dict[str, Any]:
    path = work / "locomo.db"
    rows: list[tuple[str, str, str, str]] = []
    dia_of: dict[str, str] = {}
    started = time.perf_counter()
    with Engine.open(str(path), config=Config()) as engine:
        for copy in range(copies):
            for sample in data:
                turns = locomo.messages(sample)
                conv = f"{sample['sample_id']}-{copy}"
                norms = [
                    engine.normalize(msg, external_id=dia, created_at=parse_ts(stamp))
                    for dia, msg, stamp in turns
                ]
                done = engine.ingest_batch(conv, norms)
                if copy == 0:
                    dia_of.update(
                        (f"msg#{m}", dia)
                        for m, (dia, _, _) in zip(done.message_ids, turns, strict=True)
                    )
                rows += [(conv, msg["role"], stamp, msg["content"]) for _, msg, stamp in turns]
        ingest_s = time.perf_counter() - started
        engine.finish_indexes()
        parts = objects(engine)
        found = asked = 0
        for sample in data:
            turns = locomo.messages(sample)
            conv = f"{sample['sample_id']}-0"
            for qa, evidence in locomo.questions(sample, turns):
                hits = engine.grep(qa["question"], conversation=conv, limit=10).hits
                asked += 1
                found += bool({dia_of.get(h.id) for h in hits} & evidence)
    return {
        "copies": copies,
        **against_floor(path, rows, work / "floor.db", parts),
        "recall_at_10": round(found / asked, 3),
        "questions": asked,
        "ingest_s": round(ingest_s, 1),
    }


def claude_code_store(work: Path) -> dict[str, Any]:
    turns = CLAUDE_CODE_ENTRIES // 7
    lines = [json.dumps(o) for o in generate_session(turns, format="claude_code")]
    while len(lines) < CLAUDE_CODE_ENTRIES:
        turns += max(1, (CLAUDE_CODE_ENTRIES - len(lines)) // 7)
        lines = [json.dumps(o) for o in generate_session(turns, format="claude_code")]
    transcript = work / "session.jsonl"
    transcript.write_text("\n".join(lines) + "\n")
    path = work / "claude-code.db"
    with Engine.open(str(path), config=Config()) as engine:
        engine.import_path(transcript, format="claude_code")
        engine.finish_indexes()
        parts = objects(engine)
        messages = engine.store.fetchall("SELECT count(*) FROM messages")[0][0]
    size = settled_size(path)
    jsonl = transcript.stat().st_size
    return {
        "entries": len(lines),
        "messages": messages,
        "jsonl_bytes": jsonl,
        "store_bytes": size,
        "times_jsonl": round(size / jsonl, 2),
        "objects": parts,
    }


def kept_store(work: Path, size: int) -> dict[str, Any]:
    """The kept *size*-message store of ``common.compacted_store`` against its floor."""
    path = compacted_store(size, summarizer="extractive")
    with Engine.open(str(path), config=Config()) as engine:
        engine.finish_indexes()
        parts = objects(engine)
        rows = [
            (str(r[0]), str(r[1]), str(r[2]), str(r[3]))
            for r in engine.store.fetchall(
                "SELECT c.session_id, m.role, m.created_at, m.content FROM messages m"
                " JOIN conversations c ON c.conversation_id = m.conversation_id"
            )
        ]
    return against_floor(path, rows, work / "kept-floor.db", parts)


def against_floor(
    path: Path, rows: list[tuple[str, str, str, str]], floor_path: Path, parts: list[Any]
) -> dict[str, Any]:
    """The settled store at *path* against its *rows*' text and their one-index floor."""
    size = settled_size(path)
    text = sum(len(r[3].encode()) for r in rows)
    floor = floor_size(rows, floor_path)
    return {
        "messages": len(rows),
        "text_bytes": text,
        "store_bytes": size,
        "floor_bytes": floor,
        "times_text": round(size / text, 2),
        "times_floor": round(size / floor, 2),
        "objects": parts,
    }


def show(title: str, result: dict[str, Any], against: str) -> None:
    mb = 1_000_000
    print(f"\n{title}: {result['store_bytes'] / mb:.1f} MB, {result[against]}x")
    for o in result["objects"][:12]:
        print(f"  {o['name']:<32} {o['kind']:<13} {o['bytes'] / mb:7.2f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, default=locomo.LOCOMO)
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument(
        "--kept", type=int, help="also the kept N-message store of assembly.py (built once)"
    )
    args = parser.parse_args()
    data = locomo.load(args.locomo, "")
    if data is None:
        return
    with tempfile.TemporaryDirectory(prefix="lossless-footprint-") as tmp:
        work = Path(tmp)
        lo = locomo_store(work, data, args.copies)
        cc = claude_code_store(work)
        kept = kept_store(work, args.kept) if args.kept else None
    mb = 1_000_000
    print(
        f"LoCoMo dev x{lo['copies']}: {lo['messages']:,} messages, {lo['text_bytes'] / mb:.1f} MB"
        f" of text; store {lo['store_bytes'] / mb:.1f} MB = {lo['times_text']}x the text,"
        f" {lo['times_floor']}x the one-index floor ({lo['floor_bytes'] / mb:.1f} MB);"
        f" recall@10 {lo['recall_at_10']:.1%} ({lo['questions']} questions);"
        f" ingest {lo['ingest_s']} s"
    )
    print(
        f"Claude Code session: {cc['entries']:,} entries, {cc['messages']:,} messages,"
        f" JSONL {cc['jsonl_bytes'] / mb:.1f} MB; store {cc['store_bytes'] / mb:.1f} MB ="
        f" {cc['times_jsonl']}x the JSONL"
    )
    show("LoCoMo store by object", lo, "times_text")
    show("Claude Code store by object", cc, "times_jsonl")
    results: dict[str, Any] = {"locomo": lo, "claude_code": cc, "host": machine()}
    if kept is not None:
        print(
            f"\nkept store of {kept['messages']:,} messages, {kept['text_bytes'] / mb:.1f} MB of"
            f" text: {kept['store_bytes'] / mb:.1f} MB = {kept['times_text']}x the text,"
            f" {kept['times_floor']}x the one-index floor ({kept['floor_bytes'] / mb:.1f} MB)"
        )
        show("kept store by object", kept, "times_floor")
        results["kept"] = kept
    print(f"results: {save('footprint', results)}")


if __name__ == "__main__":
    main()
