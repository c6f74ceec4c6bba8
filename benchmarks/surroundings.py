"""The surroundings ranking counted at query time against the index that stored it (issue 48).

A relevance search ranks a message by its own words and, counting for less, the words said
around it and its *about* words: FTS5's field-weighted BM25 over five fields. Until m028 a
store kept that as an index of its own (``messages_ctx_fts``: each message's neighbours'
words again, the largest object of a store); now the store counts it when a search ranks
(``lossless.store.surroundings``). This benchmark builds the old index again in the same
store (reading its text from a table of the five fields, as the old one read it from a view;
only the index's own tables are counted) and answers every question of the first copy both
ways, through ``Engine.grep``
(scoped to its conversation, as ``recall.py`` does):

* **index** — FTS5's ``bm25()`` over the rebuilt index (weights 1, 0.6, 0.3, 0.3, 0.2), as
  the store ranked before m028 (a search of one conversation asked only for its span of ids);
* **counted** — the store's own ranking now.

    python benchmarks/surroundings.py             # LoCoMo dev x10, as footprint.py stores it
    python benchmarks/surroundings.py --copies 1  # a quicker look

It prints recall@10 of each, the time of each ranked search (p50 / p95 / max), and the bytes
the index took. Results go to ``benchmarks/out/surroundings.json``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import footprint
from lossless import Config, Engine
from lossless.store import sqlite_search
from lossless.store.migrations import MESSAGE_WORDS
from lossless.store.search import ABOUT_WEIGHT, FAR_WEIGHT, NEXT_WEIGHT, PREV_WEIGHT
from lossless.store.surroundings import query_words

import locomo
from common import save

#: The index the store kept before m028, made again over the same rows.
OLD_INDEX = f"""
CREATE TABLE ctx_words AS {MESSAGE_WORDS};
CREATE VIRTUAL TABLE messages_ctx_fts USING fts5(
  content, prev, next, far, about, content='ctx_words', content_rowid='message_id',
  tokenize='porter unicode61', detail='column');
INSERT INTO messages_ctx_fts (messages_ctx_fts) VALUES ('rebuild');
INSERT INTO messages_ctx_fts (messages_ctx_fts) VALUES ('optimize');
"""
WEIGHTS = (1.0, PREV_WEIGHT, NEXT_WEIGHT, FAR_WEIGHT, ABOUT_WEIGHT)


def indexed_ranked(
    self: Any, query: str, where: str, params: list[Any], limit: int, span: Any
) -> list[tuple[int, float]] | None:
    """The old ranking: ``bm25()`` over the rebuilt index, the best *limit* in the scope."""
    words = query_words(query)
    if words is None:
        return None
    terms = [re.findall(r"\w+", w) for w in words]
    match = " OR ".join(
        "(" + " AND ".join(f'"{p}"' for p in pieces) + ")" for pieces in terms if pieces
    )
    if not match:
        return []
    within = f" AND rowid BETWEEN {span[0]} AND {span[1]}" if span else ""
    rank = f"bm25(messages_ctx_fts, {', '.join(map(str, WEIGHTS))})"
    # As the store asked it: the best four times *limit* first, all of them when too few of
    # those are in the scope.
    for inner in (limit * 4, None):
        found = self.fetchall(
            f"SELECT rowid, {rank} FROM messages_ctx_fts WHERE messages_ctx_fts MATCH ?{within}"
            " ORDER BY 2, rowid DESC" + (f" LIMIT {inner}" if inner else ""),
            [match],
        )
        score = {int(r): float(s) for r, s in found}
        kept: set[int] = set()
        ids = list(score)
        for at in range(0, len(ids), 500):
            chunk = ids[at : at + 500]
            kept |= {
                int(r[0])
                for r in self.fetchall(
                    f"SELECT s.message_id FROM messages s WHERE s.message_id IN"
                    f" ({','.join('?' * len(chunk))}){where}",
                    [*chunk, *params],
                )
            }
        if len(kept) >= limit or inner is None or len(found) < inner:
            break
    return [(i, score[i]) for i in ids if i in kept][:limit]


def ask_all(engine: Engine, data: list[dict[str, Any]]) -> tuple[float, int]:
    """recall@10 of every question of the first copy, through ``Engine.grep``."""
    found = asked = 0
    for sample in data:
        turns = locomo.messages(sample)
        conv = f"{sample['sample_id']}-0"
        row = engine.store.fetchall(
            "SELECT conversation_id FROM conversations WHERE session_id = ?", [conv]
        )
        dia = dict(
            engine.store.fetchall(
                "SELECT 'msg#' || message_id, external_id FROM messages WHERE conversation_id = ?",
                [row[0][0]],
            )
        )
        for qa, evidence in locomo.questions(sample, turns):
            hits = engine.grep(qa["question"], conversation=conv, limit=10).hits
            asked += 1
            found += bool({dia.get(h.id) for h in hits} & evidence)
    return found / asked, asked


def timed(ranking: Callable[..., Any], times: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return ranking(*args, **kw)
        finally:
            times.append((time.perf_counter() - started) * 1000)

    return wrapper


def _spread(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "searches": len(ms),
        "p50": round(statistics.median(ms), 2),
        "p95": round(ms[int(len(ms) * 0.95)], 2),
        "max": round(ms[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, default=locomo.LOCOMO)
    parser.add_argument("--copies", type=int, default=10)
    args = parser.parse_args()
    data = locomo.load(args.locomo, "")
    if data is None:
        return
    results: dict[str, Any] = {"copies": args.copies}
    counted = sqlite_search.SQLiteSearch.surroundings_ranked
    with tempfile.TemporaryDirectory(prefix="lossless-surroundings-") as tmp:
        work = Path(tmp)
        footprint.locomo_store(work, data, args.copies)
        with Engine.open(str(work / "locomo.db"), config=Config()) as engine:
            conn = engine.store._conn()  # type: ignore[attr-defined]
            conn.executescript(OLD_INDEX)
            index_bytes = sum(
                o.bytes for o in engine.space(top=0).objects if o.name.startswith("messages_ctx")
            )
            results["index_bytes"] = index_bytes
            print(f"the index made again: {index_bytes / 1e6:.1f} MB")
            for name, ranking in (("index", indexed_ranked), ("counted", counted)):
                times: list[float] = []
                sqlite_search.SQLiteSearch.surroundings_ranked = timed(ranking, times)  # type: ignore[method-assign]
                try:
                    recall, asked = ask_all(engine, data)
                finally:
                    sqlite_search.SQLiteSearch.surroundings_ranked = counted  # type: ignore[method-assign]
                row = {"recall_at_10": round(recall, 4), "questions": asked, **_spread(times)}
                results[name] = row
                print(
                    f"{name}: recall@10 {recall:.1%} ({asked} questions); a ranked search"
                    f" {row['p50']} ms p50, {row['p95']} p95, {row['max']} max"
                    f" ({row['searches']} searches)"
                )
    print(f"results: {save('surroundings', results)}")


if __name__ == "__main__":
    main()
