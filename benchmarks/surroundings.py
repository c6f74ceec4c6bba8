"""The surroundings ranking computed at query time (issue 48): the largest object of a store
is the surroundings index ``messages_ctx_fts``, which holds each message's neighbours' words
again so that FTS5's ``bm25()`` can rank a message by its own words and, weighted less, the
words said around it. This benchmark asks whether the same ranking can be had without it.

    python benchmarks/surroundings.py             # LoCoMo dev x10, as footprint.py stores it
    python benchmarks/surroundings.py --copies 1  # a quicker look

The index ranks with a field-weighted BM25 over five columns (the message, the first
``NEIGHBOUR_CHARS`` characters of the one before, the one after and the one two before, and
its *about* words): a word counts as often as a column holds it, times the column's weight
(kept without positions, ``detail=column``, the index still counts them); a row's length is
the words of all five; a word's rarity is the number of rows holding it in any column. Every
one of those numbers can be counted from the message's own words (which message holds a
word, and how many words each message has) and the order of the conversation. Three rankings
are compared, each answering every question of the first copy through ``Engine.grep``
(scoped to its conversation, as ``recall.py`` does):

* **index** — as the store ranks now, with the surroundings index;
* **counted, exact** — the same formula counted at query time, the neighbours cut at
  ``NEIGHBOUR_CHARS`` characters as the index cuts them (helper tables over those cut texts
  stand in for what a real implementation would count from word positions): the proof the
  formula is the index's;
* **counted, own words** — counted from the own-words index ``messages_fts`` and the
  ``messages`` table alone: a neighbour's words count wherever its text holds them, and its
  length counts up to ``NEIGHBOUR_WORDS`` words (what the cut at ``NEIGHBOUR_CHARS``
  characters bounds). Its cost per search is timed beside the index's own ranked query.

Beside them, each question's search of its conversation is timed with the index asked only
for the ids between the conversation's first and last message (as the store searches one
conversation now) and for every row it matches (as it did before).

The *about* words (the conversation's title, the month and year) are read from a small
helper table in both counted forms: a real implementation would keep them per conversation
and month, a few rows, not per message. Results go to ``benchmarks/out/surroundings.json``.
"""

from __future__ import annotations

import argparse
import math
import re
import sqlite3
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import footprint
from lossless import Config, Engine
from lossless.store import sqlite_search
from lossless.store.search import (
    ABOUT_WEIGHT,
    FAR_WEIGHT,
    NEIGHBOUR_CHARS,
    NEXT_WEIGHT,
    PREV_WEIGHT,
    hit_columns,
)

import locomo
from common import save

#: FTS5's bm25() constants.
K1, B = 1.2, 0.75
#: A neighbour's length counted up to this many words in the own-words form (about what
#: NEIGHBOUR_CHARS characters of English hold).
NEIGHBOUR_WORDS = 60
#: Where a message's neighbour sits, and how much a word there counts: the message before it
#: is its *prev*, the one after its *next*, the one two before its *far*.
SHIFTS = ((-1, PREV_WEIGHT), (1, NEXT_WEIGHT), (-2, FAR_WEIGHT))
_TERM = re.compile(r'"((?:[^"]|"")*)"|(\(|\)|AND|OR|NOT)')


def _varint(blob: bytes) -> int:
    """The first varint of an FTS5 docsize blob (a one-column table's row length)."""
    value = 0
    for byte in blob[:9]:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            break
    return value


class Counted:
    """The surroundings index's BM25, counted at query time over one store."""

    def __init__(self, conn: sqlite3.Connection, exact: bool) -> None:
        self.conn = conn
        self.exact = exact
        self.where: dict[int, tuple[int, int]] = {}
        self.at: dict[tuple[int, int], int] = {}
        for mid, cid, seq in conn.execute("SELECT message_id, conversation_id, seq FROM messages"):
            self.where[mid] = (cid, seq)
            self.at[(cid, seq)] = mid
        conn.execute(
            "CREATE TEMP TABLE words AS SELECT message_id, content, prev, next, far, about"
            " FROM message_words"
        )
        helpers = {"about": "about", "cut": f"substr(content, 1, {NEIGHBOUR_CHARS})"}
        for name, column in helpers.items():
            conn.execute(
                f"CREATE VIRTUAL TABLE temp.{name} USING fts5(c, tokenize='porter unicode61')"
            )
            conn.execute(
                f"INSERT INTO temp.{name} (rowid, c) SELECT message_id, {column} FROM words"
            )
            conn.execute(
                f"CREATE VIRTUAL TABLE temp.{name}_v USING fts5vocab(temp, {name}, instance)"
            )
        conn.execute("CREATE VIRTUAL TABLE temp.q USING fts5(c, tokenize='porter unicode61')")
        conn.execute("CREATE VIRTUAL TABLE temp.q_v USING fts5vocab(temp, q, instance)")
        conn.execute(
            "CREATE VIRTUAL TABLE temp.own_v USING fts5vocab(main, messages_fts, instance)"
        )
        own = {i: _varint(sz) for i, sz in conn.execute("SELECT id, sz FROM messages_fts_docsize")}
        about = self._lengths("about")
        cut = (
            self._lengths("cut") if exact else {m: min(n, NEIGHBOUR_WORDS) for m, n in own.items()}
        )
        self.own, self.cut, self.about = own, cut, about
        total = sum(self._length(m) for m in self.where)
        self.rows = len(self.where)
        self.average = total / self.rows

    def _lengths(self, table: str) -> dict[int, int]:
        return dict(self.conn.execute(f"SELECT doc, count(*) FROM temp.{table}_v GROUP BY doc"))

    def _neighbour(self, mid: int, shift: int) -> int | None:
        cid, seq = self.where[mid]
        return self.at.get((cid, seq + shift))

    def _length(self, mid: int) -> int:
        n = self.own.get(mid, 0) + self.about.get(mid, 0)
        for shift, _ in SHIFTS:
            other = self._neighbour(mid, shift)
            if other is not None:
                n += self.cut.get(other, 0)
        return n

    def _stem(self, word: str) -> list[str]:
        self.conn.execute("DELETE FROM temp.q")
        self.conn.execute("INSERT INTO temp.q (rowid, c) VALUES (1, ?)", (word,))
        return [r[0] for r in self.conn.execute("SELECT term FROM temp.q_v ORDER BY offset")]

    def _docs(self, table: str, term: str) -> dict[int, int]:
        """The rows of *table* holding *term*, each with how many times."""
        sql = f"SELECT doc, count(*) FROM temp.{table}_v WHERE term = ? GROUP BY doc"
        return dict(self.conn.execute(sql, (term,)))

    def frequencies(self, word: str) -> dict[int, float] | None:
        """Each row's weighted count of *word* (a word query's term) over its five fields."""
        stems = self._stem(word)
        if len(stems) != 1:
            return None
        (term,) = stems
        holding = self._docs("own", term)
        near = self._docs("cut", term) if self.exact else holding
        counts: dict[int, float] = defaultdict(float)
        for mid, times in holding.items():
            counts[mid] += times
        for mid, times in self._docs("about", term).items():
            counts[mid] += ABOUT_WEIGHT * times
        for mid, times in near.items():
            for shift, weight in SHIFTS:
                other = self._neighbour(mid, -shift)
                if other is not None:
                    counts[other] += weight * times
        return counts

    def ranked(self, query: str, conversation: int, limit: int) -> list[tuple[int, float]] | None:
        """The best *limit* rows of *conversation* for a word query (quoted terms joined by
        AND / OR / NOT), best first, as FTS5 would rank them; ``None`` for a term of several
        words (the index takes those as its own-words ranking does)."""
        sets: list[dict[int, float]] = []
        expression: list[str] = []
        for m in _TERM.finditer(query):
            if m[1] is None:
                expression.append({"AND": "&", "OR": "|", "NOT": "-"}.get(m[2], m[2]))
                continue
            counts = self.frequencies(m[1].replace('""', '"'))
            if counts is None:
                return None
            sets.append(counts)
            expression.append(f"set(s[{len(sets) - 1}])")
        matching = eval(" ".join(expression), {"s": sets, "set": set})
        weights = [(c, _idf(len(c), self.rows)) for c in sets]
        score: dict[int, float] = {}
        for mid in matching:
            if self.where[mid][0] != conversation:
                continue
            norm = K1 * (1 - B + B * self._length(mid) / self.average)
            score[mid] = sum(
                idf * c[mid] * (K1 + 1) / (c[mid] + norm) for c, idf in weights if mid in c
            )
        return sorted(score.items(), key=lambda kv: (-kv[1], -kv[0]))[:limit]


def _idf(holding: int, rows: int) -> float:
    """FTS5 bm25()'s weight of a term held by *holding* of *rows* rows."""
    idf = math.log((rows - holding + 0.5) / (holding + 0.5))
    return idf if idf > 0 else 1e-6


def ask_all(
    engine: Engine, data: list[dict[str, Any]], on_conversation: Callable[[int], None]
) -> tuple[float, int]:
    """recall@10 of every question of the first copy, through ``Engine.grep``."""
    found = asked = 0
    for sample in data:
        turns = locomo.messages(sample)
        conv = f"{sample['sample_id']}-0"
        row = engine.store.fetchall(
            "SELECT conversation_id FROM conversations WHERE session_id = ?", [conv]
        )
        on_conversation(int(row[0][0]))
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


def spans_timed(engine: Engine, data: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each question of the first copy asked twice, in turns: the index asked only for the ids
    between the conversation's first and last message (as a search of one conversation is
    now) and for every row it matches (as before), in milliseconds."""
    original = sqlite_search.SQLiteSearch._id_span
    times: dict[str, list[float]] = {"span": [], "every row": []}
    for sample in data:
        turns = locomo.messages(sample)
        conv = f"{sample['sample_id']}-0"
        for n, (qa, _) in enumerate(locomo.questions(sample, turns)):
            for mode in ("span", "every row") if n % 2 else ("every row", "span"):
                if mode != "span":
                    sqlite_search.SQLiteSearch._id_span = lambda *_: None  # type: ignore[method-assign]
                started = time.perf_counter()
                try:
                    engine.grep(qa["question"], conversation=conv, limit=10)
                finally:
                    sqlite_search.SQLiteSearch._id_span = original  # type: ignore[method-assign]
                times[mode].append((time.perf_counter() - started) * 1000)
    return times


def _spread(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50": round(statistics.median(ms), 1),
        "p95": round(ms[int(len(ms) * 0.95)], 1),
        "max": round(ms[-1], 1),
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
    original = sqlite_search.SQLiteSearch._ranked_rows
    with tempfile.TemporaryDirectory(prefix="lossless-surroundings-") as tmp:
        work = Path(tmp)
        footprint.locomo_store(work, data, args.copies)
        path = work / "locomo.db"
        with Engine.open(str(path), config=Config()) as engine:
            ctx_bytes = sum(
                o.bytes for o in engine.space(top=0).objects if o.name.startswith("messages_ctx")
            )
            recall, asked = ask_all(engine, data, lambda _: None)
            results["index"] = {"recall_at_10": round(recall, 4), "questions": asked}
            results["ctx_index_bytes"] = ctx_bytes
            print(
                f"index: recall@10 {recall:.1%} ({asked} questions); the index"
                f" {ctx_bytes / 1e6:.1f} MB"
            )
            spans = {mode: _spread(ms) for mode, ms in spans_timed(engine, data).items()}
            results["grep_ms"] = spans
            for mode, spread in spans.items():
                print(
                    f"  a question's search of its conversation, the index asked for {mode}:"
                    f" {spread['p50']} ms p50, {spread['p95']} p95, {spread['max']} max"
                )
            for name, exact in (("counted, exact", True), ("counted, own words", False)):
                conn = sqlite3.connect(path)
                counted = Counted(conn, exact)
                scope: dict[str, int] = {}
                same = [0, 0]
                index_ms: list[float] = []
                counted_ms: list[float] = []

                def ranked_rows(
                    self: Any,
                    table: str,
                    index: str,
                    *rest: Any,
                    counted: Counted = counted,
                    scope: dict[str, int] = scope,
                    same: list[int] = same,
                    index_ms: list[float] = index_ms,
                    counted_ms: list[float] = counted_ms,
                ) -> list[tuple[Any, ...]]:
                    # rest: rank, query, where, params, limit, span
                    if index != "messages_ctx_fts":
                        return original(self, table, index, *rest)
                    query, limit = rest[1], rest[4]
                    started = time.perf_counter()
                    theirs = original(self, table, index, *rest)
                    index_ms.append((time.perf_counter() - started) * 1000)
                    started = time.perf_counter()
                    best = counted.ranked(
                        sqlite_search.without_phrases(query), scope["conversation"], limit * 4
                    )
                    counted_ms.append((time.perf_counter() - started) * 1000)
                    if best is None:
                        return theirs
                    same[1] += 1
                    mine = [f"msg#{m}" for m, _ in best][: len(theirs)]
                    same[0] += [r[0] for r in theirs] == mine
                    if not best:
                        return []
                    ids = [m for m, _ in best]
                    rows = self.fetchall(
                        f"SELECT {hit_columns('messages')}, s.content, s.message_id FROM messages s"
                        f" WHERE s.message_id IN ({','.join('?' * len(ids))})",
                        ids,
                    )
                    return sqlite_search._by_score(rows, {m: -s for m, s in best})

                sqlite_search.SQLiteSearch._ranked_rows = ranked_rows  # type: ignore[method-assign]
                try:
                    recall, asked = ask_all(
                        engine, data, lambda c, scope=scope: scope.update(conversation=c)
                    )
                finally:
                    sqlite_search.SQLiteSearch._ranked_rows = original  # type: ignore[method-assign]
                    conn.close()
                p = statistics.quantiles
                row = {
                    "recall_at_10": round(recall, 4),
                    "searches": same[1],
                    "same_order_as_index": same[0],
                    "index_ms_p50": round(statistics.median(index_ms), 2),
                    "index_ms_p95": round(p(index_ms, n=20)[-1], 2),
                    "counted_ms_p50": round(statistics.median(counted_ms), 2),
                    "counted_ms_p95": round(p(counted_ms, n=20)[-1], 2),
                }
                results[name] = row
                print(
                    f"{name}: recall@10 {recall:.1%}; {same[0]} of {same[1]} ranked searches in"
                    f" the index's order; the index's ranked query {row['index_ms_p50']} ms p50"
                    f" / {row['index_ms_p95']} p95, counted {row['counted_ms_p50']} /"
                    f" {row['counted_ms_p95']} ms"
                )
    print(f"results: {save('surroundings', results)}")


if __name__ == "__main__":
    main()
