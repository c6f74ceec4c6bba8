"""A message ranked with what surrounds it, counted at query time (SQLite).

A relevance search finds a message through its own words and, counting for less, the words
said around it: in the message before it (its *prev*, :data:`~.search.PREV_WEIGHT`), after it
(*next*) and two before it (*far*), and its *about* words (its conversation's title, the month
and year it was said). The ranking is FTS5's field-weighted BM25 over those five fields: a
word counts as often as a field holds it, times the field's weight; a row's length is the
words of all five; a word's rarity is the number of rows holding it in any of them.

Every one of those numbers is a count over the messages' own words and the order of their
conversation, so none is stored twice: a word's rows and how often each holds it come from
the own-words index (``messages_fts``, through an ``fts5vocab`` table of its instances), the
rows around them through the ``(conversation_id, seq)`` key, a row's length from the index's
``docsize``, the *about* words from the conversation's title and the message's time. Only
the rows that can still reach the best are given their lengths (the rest are bounded by what
their words could score at the shortest length): a search reads the rows a word touches, and
the lengths of the few that rank.

``benchmarks/surroundings.py`` compared this count with the index that stored the
neighbours' words again (``messages_ctx_fts``, the largest object of a store, dropped by
migration m028): the same recall on the dev data.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from .records import RecordStore
from .search import _MONTHS, ABOUT_WEIGHT, FAR_WEIGHT, NEXT_WEIGHT, PREV_WEIGHT

__all__ = ["SPREAD", "SurroundingsRanking", "varint"]

#: FTS5 bm25()'s constants.
K1, B = 1.2, 0.75
#: A neighbour's words count toward a row's length up to this many (the index this replaced
#: kept the first 300 characters of each neighbour: about this many words of English).
NEIGHBOUR_WORDS = 60
#: The *about* words of an average row (a short title, the month and the year).
ABOUT_WORDS = 4
#: A word said in one message counts for the one after it (as its prev), the one before it
#: (as its next) and the one two after it (as its far): the shift to each, and its weight.
CREDITS = ((1, PREV_WEIGHT), (-1, NEXT_WEIGHT), (2, FAR_WEIGHT))
#: The rows holding a word in any field, for each row holding it in its own words (each
#: also counts for the three around it, some of which hold it themselves).
SPREAD = 3.0
#: A word in more of the store's messages than this is a common one: its rows are not
#: counted one by one (an ``fts5vocab`` table of instances reads all of a word's), only in
#: the rows around the query's best candidates.
DOCS_MAX = 5_000
#: The best candidates by their own words a common word is counted around.
POOL = 200
#: At most this many rare words' rows are candidates a common word is counted around too.
SEEDS_MAX = 400
#: Rows given their lengths (and checked against the search's scope) at a time, the best
#: bounded first.
LENGTH_BATCH = 256
#: At most this many rows are found through their *about* words alone (a month's or a
#: title's rows: each scores the same but for its length), the newest first.
ABOUT_ROWS_MAX = 5_000
#: Years a month's name is looked for in (from the store's first message's).
YEARS_MAX = 50
#: A ranked query of quoted terms joined by OR (what a relevance search asks).
_QUERY = re.compile(r'\s*"((?:[^"]|"")*)"\s*(?:OR\b|$)')


def varints(blob: bytes | None, count: int = 1) -> list[int]:
    """The first *count* varints of an FTS5 record (fewer where it ends): a ``docsize``
    blob's first is a one-column row's length in words."""
    values: list[int] = []
    data = bytes(blob or b"")
    at = 0
    while at < len(data) and len(values) < count:
        value = 0
        for byte in data[at : at + 9]:
            at += 1
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        values.append(value)
    return values


def varint(blob: bytes | None) -> int:
    """The first varint of an FTS5 ``docsize`` blob: a one-column row's length in words."""
    return (varints(blob) or [0])[0]


def query_words(query: str) -> list[str] | None:
    """The quoted terms of a ranked query (``"a" OR "b"``), or ``None`` for any other
    shape."""
    words: list[str] = []
    at = 0
    while at < len(query):
        m = _QUERY.match(query, at)
        if m is None or m.end() == at:
            return None
        words.append(m[1].replace('""', '"'))
        at = m.end()
    return words or None


def _quoted(term: str) -> str:
    """*term* as one quoted term of a word query."""
    return '"' + term.replace('"', '""') + '"'


def _ranges(ids: Sequence[int], gap: int = 4) -> list[tuple[int, int]]:
    """*ids* as ranges of ids, those at most *gap* apart joined."""
    out: list[tuple[int, int]] = []
    for i in sorted(ids):
        if out and i - out[-1][1] <= gap:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def _idf(holding: int, rows: int) -> float:
    """FTS5 bm25()'s weight of a term held by *holding* of *rows* rows."""
    idf = math.log((rows - holding + 0.5) / (holding + 0.5))
    return idf if idf > 0 else 1e-6


class SurroundingsRanking(RecordStore):
    """The counted surroundings ranking of :class:`~.sqlite_search.SQLiteSearch`."""

    def _instances(self, stem: str, span: tuple[int, int] | None) -> dict[int, int]:
        """The messages whose own words hold *stem* (within *span* of ids), each with how
        many times."""
        conn = self._conn()  # type: ignore[attr-defined]
        local = self._local  # type: ignore[attr-defined]
        if not getattr(local, "instances", False):
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.lossless_messages_instances"
                " USING fts5vocab(main, messages_fts, 'instance')"
            )
            local.instances = True
        sql = "SELECT doc, count(*) FROM temp.lossless_messages_instances WHERE term = ?"
        args: list[Any] = [stem]
        if span is not None:
            sql += " AND doc BETWEEN ? AND ?"
            args += list(span)
        return {int(d): int(n) for d, n in self.fetchall(sql + " GROUP BY doc", args)}

    def _pool(self, query: str, span: tuple[int, int] | None) -> list[int]:
        """The best :data:`POOL` messages for *query* (its terms each alone, joined by OR) by
        their own words (within *span*)."""
        within = f" AND rowid BETWEEN {int(span[0])} AND {int(span[1])}" if span else ""
        return [
            int(r[0])
            for r in self.fetchall(
                f"SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?{within}"
                " ORDER BY rank LIMIT ?",
                [query, POOL],
            )
        ]

    def _around(self, seeds: Sequence[int]) -> list[int]:
        """The messages whose counts a ranking of *seeds* and the rows they count for needs:
        three either side of each in its conversation."""
        return list({other for _, other, _ in self._neighbours(seeds, -3, 3)})

    def _neighbours(self, ids: Sequence[int], low: int, high: int) -> list[tuple[int, int, int]]:
        """(id, neighbour's id, how far after it) for each of *ids* and each message of its
        conversation *low*..*high* places from it (itself included)."""
        out: list[tuple[int, int, int]] = []
        for at in range(0, len(ids), 50_000):
            out += [
                (int(a), int(b), int(c))
                for a, b, c in self.fetchall(
                    "SELECT m.message_id, n.message_id, n.seq - m.seq"
                    " FROM json_each(?) j JOIN messages m ON m.message_id = j.value"
                    " JOIN messages n ON n.conversation_id = m.conversation_id"
                    " AND n.seq BETWEEN m.seq + ? AND m.seq + ?",
                    [json.dumps(list(ids[at : at + 50_000])), low, high],
                )
            ]
        return out

    def _counted_in(self, word: str, ranges: Sequence[tuple[int, int]]) -> dict[int, int]:
        """How many times each message in *ranges* of ids holds *word* (a query's term)."""
        quoted = _quoted(word)
        out: dict[int, int] = {}
        for low, high in ranges:
            for row, marked in self.fetchall(
                "SELECT rowid, highlight(messages_fts, 0, char(1), '') FROM messages_fts"
                " WHERE messages_fts MATCH ? AND rowid BETWEEN ? AND ?",
                [quoted, low, high],
            ):
                out[int(row)] = max(1, str(marked).count("\x01"))
        return out

    def _credited(self, docs: Sequence[int]) -> dict[int, list[tuple[int, float]]]:
        """For each of *docs*, the rows its words count for beside itself, with the weight."""
        weight = dict(CREDITS)
        out: dict[int, list[tuple[int, float]]] = {}
        for doc, other, shift in self._neighbours(docs, -1, 2):
            if shift:
                out.setdefault(doc, []).append((other, weight[shift]))
        return out

    def _month_stems(self) -> dict[str, str]:
        """Each month name's term, to its number (``"01"``...)."""
        local = self._local  # type: ignore[attr-defined]
        months: dict[str, str] | None = getattr(local, "month_stems", None)
        if months is None:
            months = {}
            for n, name in enumerate(_MONTHS, 1):
                for stem in self.index_terms(name):
                    months[stem] = f"{n:02d}"
            local.month_stems = months
        return months

    def _about(
        self, stems: Sequence[str], span: tuple[int, int] | None
    ) -> dict[str, tuple[set[int], int]]:
        """For each of *stems* its *about* words hold (a conversation's title, or the month
        or year a message was said): the messages they hold it for, at most
        :data:`ABOUT_ROWS_MAX`, the newest first (within *span*), and how many the store
        has, counted up to as many for the titles and for each time."""
        within = " AND message_id BETWEEN ? AND ?" if span else ""
        extra = list(span) if span else []
        out: dict[str, tuple[set[int], int]] = {}
        for stem in stems:
            found: set[int] = set()
            count = 0
            conversations = self._titled(stem)
            if conversations:
                among = f"conversation_id IN ({','.join('?' * len(conversations))})"
                found |= self._ids(
                    f"SELECT message_id FROM messages WHERE {among}{within}"
                    " ORDER BY message_id DESC LIMIT ?",
                    [*conversations, *extra, ABOUT_ROWS_MAX],
                )
                count += self._capped(f"SELECT 1 FROM messages WHERE {among}", conversations)
            for low, high in self._time_ranges(stem, self._month_stems()):
                when = "created_at >= ? AND created_at < ?"
                if len(found) < ABOUT_ROWS_MAX:
                    found |= self._ids(
                        f"SELECT message_id FROM messages WHERE {when}{within}"
                        " ORDER BY created_at DESC LIMIT ?",
                        [low, high, *extra, ABOUT_ROWS_MAX - len(found)],
                    )
                count += self._capped(f"SELECT 1 FROM messages WHERE {when}", [low, high])
            if found or count:
                out[stem] = (found, count)
        return out

    def _ids(self, sql: str, args: list[Any]) -> set[int]:
        return {int(r[0]) for r in self.fetchall(sql, args)}

    def _capped(self, sql: str, args: Sequence[Any]) -> int:
        """How many rows *sql* gives, counted up to :data:`ABOUT_ROWS_MAX`."""
        return int(
            self.fetchall(f"SELECT count(*) FROM ({sql} LIMIT ?)", [*args, ABOUT_ROWS_MAX])[0][0]
        )

    def _titled(self, stem: str) -> list[int]:
        """The conversations whose title holds *stem*."""
        probe = stem[: max(3, len(stem) - 1)]
        return [
            int(cid)
            for cid, title in self.fetchall(
                "SELECT conversation_id, title FROM conversations"
                " WHERE title IS NOT NULL AND instr(lower(title), ?) > 0",
                [probe],
            )
            if stem in self.index_terms(str(title))
        ]

    def _time_ranges(self, stem: str, months: dict[str, str]) -> list[tuple[str, str]]:
        """The stored times (ranges of the fixed-width UTC text) a month's or year's term
        names: a year, or its month in every year the store holds (newest first)."""
        if stem.isdigit() and len(stem) == 4:
            return [(stem, f"{int(stem) + 1:04d}")]
        month = months.get(stem)
        if month is None:
            return []
        first, last = self.fetchall("SELECT min(created_at), max(created_at) FROM messages")[0]
        if first is None:
            return []
        newest = int(str(last)[:4])
        years = range(newest, max(int(str(first)[:4]), newest - YEARS_MAX) - 1, -1)
        after = f"{int(month) + 1:02d}" if month != "12" else "13"
        return [(f"{y:04d}-{month}", f"{y:04d}-{after}") for y in years]

    def surroundings_ranked(
        self,
        query: str,
        where: str,
        params: list[Any],
        limit: int,
        span: tuple[int, int] | None,
    ) -> list[tuple[int, float]] | None:
        """The best *limit* messages in the scope (*where*, *params*: conditions on ``s``)
        for a ranked query of quoted terms joined by OR, with their scores (lower is better,
        as ``bm25()``'s), best first, ties newest first; ``None`` when *query* is not of that
        shape. A term of several words asks for each of them in the row (as a word query of
        an index without positions does)."""
        words = query_words(query)
        if words is None:
            return None
        phrases = [terms for terms in (self.index_terms(w) for w in words) if terms]
        stems = sorted({s for p in phrases for s in p})
        if not stems:
            return []
        everywhere, total = self.term_documents("messages", stems)
        common = {s for s in stems if everywhere.get(s, 0) > DOCS_MAX}
        own = {s: self._instances(s, span) for s in stems if s not in common}
        if common:
            # A common word's rows are too many to count one by one: it is counted in the
            # rows around the best candidates only (the whole query's best by their own
            # words, and the rows of its rare words), where it can still move the order.
            # Each term asked for alone: itself where the index takes it as itself (a stem
            # is, most often), else the word it came from (a phrase of its pieces).
            alone: dict[str, str] = {}
            for word in words:
                for stem in self.index_terms(word):
                    if stem not in alone or alone[stem] != stem:
                        alone[stem] = stem if self.index_terms(stem) == [stem] else word
            asked = " OR ".join(dict.fromkeys(_quoted(alone[s]) for s in stems))
            seeds = self._pool(asked, span)
            rare_docs = sorted({d for rows in own.values() for d in rows})
            if len(rare_docs) <= SEEDS_MAX:
                seeds = list(dict.fromkeys([*seeds, *rare_docs]))
            ranges = _ranges(self._around(seeds))
            for stem in sorted(common):
                merged = own.setdefault(stem, {})
                for doc, times in self._counted_in(alone[stem], ranges).items():
                    merged[doc] = max(merged.get(doc, 0), times)
        docs = sorted({d for rows in own.values() for d in rows})
        credited = self._credited(docs)
        tf: dict[int, dict[str, float]] = {}
        for stem, rows in own.items():
            for doc, times in rows.items():
                counts = tf.setdefault(doc, {})
                counts[stem] = counts.get(stem, 0.0) + times
                for other, weight in credited.get(doc, ()):
                    counts = tf.setdefault(other, {})
                    counts[stem] = counts.get(stem, 0.0) + weight * times
        abouts = self._about(stems, span)
        about = {stem: rows for stem, (rows, _) in abouts.items()}
        for found in about.values():
            for row in found:
                tf.setdefault(row, {})
        # A word's rarity: the rows holding it in any field, estimated from the store's own
        # counts (the same for a search of one conversation as for the whole store's).
        idf = {}
        for stem in stems:
            holding = round(everywhere.get(stem, 0) * SPREAD) + abouts.get(stem, (set(), 0))[1]
            idf[stem] = _idf(min(max(holding, 1), total), max(total, 1))
        weights = [s for p in phrases for s in p]  # a term asked twice counts twice
        average = self._average_length()

        def bound(row: int) -> float:
            counts = tf[row]
            score = 0.0
            for stem in weights:
                n = counts.get(stem, 0.0) + (ABOUT_WEIGHT if row in about.get(stem, ()) else 0)
                if n:
                    score += idf[stem] * n * (K1 + 1) / (n + K1 * (1 - B))
            return score

        order = sorted(tf, key=lambda r: (-bound(r), -r))
        best: list[tuple[float, int]] = []  # a heap of the best (score, row id)
        titles: dict[int, set[str]] = {}
        for at in range(0, len(order), LENGTH_BATCH):
            batch = order[at : at + LENGTH_BATCH]
            if len(best) >= limit and bound(batch[0]) < best[0][0]:
                break
            for row, length, conversation, title, month in self._lengths(batch, where, params):
                if conversation not in titles:
                    titles[conversation] = set(self.index_terms(title)) if title else set()
                named = titles[conversation] | set(self._month_terms(month))
                counts = dict(tf[row])
                for stem in named & set(stems):
                    counts[stem] = counts.get(stem, 0.0) + ABOUT_WEIGHT
                if not any(all(counts.get(s) for s in p) for p in phrases):
                    continue
                norm = K1 * (1 - B + B * length / average)
                score = sum(
                    idf[s] * counts[s] * (K1 + 1) / (counts[s] + norm)
                    for s in weights
                    if counts.get(s)
                )
                item = (score, row)
                if len(best) < limit:
                    heapq.heappush(best, item)
                elif item > best[0]:
                    heapq.heapreplace(best, item)
        return [(row, -score) for score, row in sorted(best, reverse=True)]

    def _month_terms(self, month: str | None) -> list[str]:
        """The terms of a message's month and year (``"2023-05"``)."""
        if not month or len(month) < 7:
            return []
        local = self._local  # type: ignore[attr-defined]
        names: dict[str, str] | None = getattr(local, "month_names", None)
        if names is None:
            names = local.month_names = {v: k for k, v in self._month_stems().items()}
        return [t for t in (names.get(month[5:7]), month[:4]) if t]

    def _lengths(
        self, rows: Sequence[int], where: str, params: list[Any]
    ) -> list[tuple[int, int, int, str | None, str | None]]:
        """Of *rows*, those in the scope, each with its length over the five fields (its own
        words, each neighbour's up to :data:`NEIGHBOUR_WORDS`, its *about* words), its
        conversation, that conversation's title and the month it was said."""
        size = "(SELECT d.sz FROM messages_fts_docsize d WHERE d.id = {0})"
        near = (
            "(SELECT d.sz FROM messages n JOIN messages_fts_docsize d ON d.id = n.message_id"
            " WHERE n.conversation_id = s.conversation_id AND n.seq = s.seq + {0})"
        )
        found = self.fetchall(
            f"SELECT s.message_id, {size.format('s.message_id')}, {near.format(-1)},"
            f" {near.format(1)}, {near.format(-2)}, s.conversation_id, c.title,"
            " substr(s.created_at, 1, 7) FROM messages s"
            " JOIN conversations c ON c.conversation_id = s.conversation_id"
            f" WHERE s.message_id IN ({','.join('?' * len(rows))}){where}",
            [*rows, *params],
        )
        out = []
        for row, mine, prev, nxt, far, conversation, title, month in found:
            title_words = len(self.index_terms(title)) if title else 0
            length = varint(mine) + title_words + (2 if month else 0)
            length += sum(min(varint(b), NEIGHBOUR_WORDS) for b in (prev, nxt, far) if b)
            out.append((int(row), length, int(conversation), title, month))
        return out

    def _average_length(self) -> float:
        """A row's average length over its five fields: the own-words index's average (from
        its totals record) and each neighbour's up to :data:`NEIGHBOUR_WORDS`."""
        blob = self.fetchall("SELECT block FROM messages_fts_data WHERE id = 1")
        totals = varints(blob[0][0] if blob else None, 2)  # rows, then words
        rows, words = totals if len(totals) == 2 else (0, 0)
        mean = words / rows if rows else 1.0
        return max(mean + 3 * min(mean, NEIGHBOUR_WORDS) + ABOUT_WORDS, 1.0)
