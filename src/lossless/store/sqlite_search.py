"""SQLite's side of :class:`~.search.SearchStore`: the porter FTS5 tables (``messages_fts``,
``summaries_fts``: ``MATCH``, ``bm25()``) and the trigram tables beside them
(``messages_trigram``, ``summaries_trigram``) that serve substring ``LIKE``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from .core import in_chunks
from .search import (
    SearchScope,
    SearchStore,
    WordOrder,
    by_key,
    by_time,
    hit_columns,
    key_column,
    newest_first,
    scope_sql,
    time_column,
)
from .surroundings import SPREAD, SurroundingsRanking

__all__ = ["SQLiteSearch"]

#: Candidates ranked inside the index before their rows are read (then the full join).
RANK_CANDIDATES_MAX = 100_000
#: A walk newest first reads the time index a stretch at a time: at least this many rows
#: first, each stretch four times the last, at most this many rows in one.
WALK_FIRST_ROWS = 256
WALK_MAX_ROWS = 1 << 16
#: What sorting a match by time costs (reading its row), in rows of the time index walked
#: (measured at 100,000 messages: a summary's long text makes its row dearer to read).
SORTED_MATCH_COST = {"messages": 5, "summaries": 40}
#: Matches the index gave all of, few enough to read their rows in the scope at once.
FEW_CANDIDATES = 64
#: A ranked search of at most this many conversations asks the index only for the rows
#: between their first and last message id (when those span at most half the store's).
SPAN_CONVERSATIONS_MAX = 8
#: A substring with at most this many candidates in the trigram index has them sorted by
#: time; one with more is found walking the time index.
SORTED_CANDIDATES = 2_000
#: The last message whose trigram entries are made: those above it (the
#: last few turns', or what a large batch left for
#: :meth:`~.sqlite.SQLiteStore.catch_up_indexes`), a search reads itself.
_CAUGHT_UP = "(SELECT upto FROM index_state WHERE name = 'messages_trigram')"
#: What a walk starts below: later than any stored time, and than any row id.
_TOP = ("\uffff", 1 << 62)


class SQLiteSearch(SurroundingsRanking, SearchStore):
    """Search through SQLite's FTS5 word and trigram indexes."""

    def score_scale(self, table: str, terms: Sequence[str]) -> float:
        """BM25 weighs a word by how rare it is in its own index, and the summary DAG says
        each thing again level after level in few rows: a summary scores below a message
        saying the same. Its scores are scaled by the words' rarity among the messages (as
        their ranking with their surroundings counts it: :data:`~.surroundings.SPREAD` rows
        for each that says it) over their rarity among the summaries."""
        if table == "messages" or not terms:
            return 1.0
        mine, rows = self.term_documents(table, terms)
        said, messages = self.term_documents("messages", terms)
        own = sum(_idf(mine[t], rows) for t in terms if mine[t])
        theirs = sum(
            _idf(min(round(said[t] * SPREAD), messages), messages) for t in terms if mine[t]
        )
        return theirs / own if own > 0 and theirs > 0 else 1.0

    _match_ids_sql = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
    _like = "LIKE"
    _find = "instr"

    def _word_query(self, query: str) -> str:
        """The quoted terms, in the message's (or summary's) own text: a filter or a newest-
        first search means words said there, not beside it."""
        return f"content : ({query})"

    def _word_rows(
        self,
        table: str,
        query: str,
        scope: SearchScope,
        limit: int,
        order: WordOrder,
    ) -> list[tuple[Any, ...]]:
        key = key_column(table)
        where, params = scope_sql(table, scope)
        index, rank = f"{table}_fts", f"bm25({table}_fts)"
        if order == "recency":  # (no BM25: its weights count each word's rows everywhere)
            words = self._word_query(query)
            first = self._walk_first(table, query, limit, SORTED_MATCH_COST[table])
            if not first:
                # Few matches: the index finds them (CROSS JOIN keeps it the outer loop; the
                # other way round, each row would ask the index again), sorted by time.
                sql = (
                    f"SELECT {hit_columns(table)}, s.content, NULL AS score"
                    f" FROM {index} f CROSS JOIN {table} s ON s.{key} = f.rowid"
                    f" WHERE {index} MATCH ?{where} ORDER BY {newest_first(table)} LIMIT ?"
                )
                return self.fetchall(sql, [words, *params, limit])
            matching = f"SELECT rowid FROM {index} WHERE {index} MATCH ? AND rowid BETWEEN ? AND ?"
            return self._walk_newest(
                table, scope, limit, lambda lo, hi: (matching, [words, lo, hi]), first
            )
        span = self._id_span(table, scope)
        if table == "messages" and order == "context":
            best = self.surroundings_ranked(query, by_key(where), params, limit, span)
            if best is not None:
                return self._rows_of(best)
        return self._ranked_rows(table, index, rank, query, where, params, limit, span)

    def _rows_of(self, best: list[tuple[int, float]]) -> list[tuple[Any, ...]]:
        """The messages of *best* (ids with their scores), in its order, as hit rows."""
        if not best:
            return []
        score = dict(best)
        rows = self.fetchall(
            f"SELECT {hit_columns('messages')}, s.content, s.message_id FROM messages s"
            f" WHERE s.message_id IN ({','.join('?' * len(score))})",
            list(score),
        )
        return _by_score(rows, score)

    def _id_span(self, table: str, scope: SearchScope) -> tuple[int, int] | None:
        """The message ids a ranked search of one or a few conversations can find lie
        between (the lowest and highest of theirs), or ``None`` when a span would not narrow
        it. The index ranks every row it matches before the scope is applied: in a store of
        many conversations, a common word's search of one would rank them all, and more than
        once as the candidates grow (LoCoMo x10, 60 conversations: 78 ms a question at p50,
        1.7 s at p95; ``benchmarks/surroundings.py``). Their first and last messages by
        ``seq`` (two seeks each) say whether the span is worth its exact bounds; those (a
        scan of the conversations' keys) are what is used, so a conversation whose ids are
        not in its order loses nothing."""
        ids = scope.conversation_ids
        if table != "messages" or not ids or len(ids) > SPAN_CONVERSATIONS_MAX:
            return None
        low, high = self.fetchall(
            "SELECT (SELECT min(message_id) FROM messages), (SELECT max(message_id) FROM messages)"
        )[0]
        if low is None:
            return None
        marks = ",".join("?" * len(ids))
        ends = self.fetchall(
            "SELECT (SELECT message_id FROM messages m WHERE m.conversation_id = c.conversation_id"
            " ORDER BY seq LIMIT 1), (SELECT message_id FROM messages m"
            " WHERE m.conversation_id = c.conversation_id ORDER BY seq DESC LIMIT 1)"
            f" FROM conversations c WHERE c.conversation_id IN ({marks})",
            list(ids),
        )
        firsts = [int(a) for a, b in ends if a is not None and b is not None]
        lasts = [int(b) for a, b in ends if a is not None and b is not None]
        if not firsts or (max(lasts) - min(firsts)) * 2 > high - low:
            return None
        first, last = self.fetchall(
            "SELECT min(message_id), max(message_id) FROM messages"
            f" WHERE conversation_id IN ({marks})",
            list(ids),
        )[0]
        return None if first is None else (int(first), int(last))

    def _ranked_rows(
        self,
        table: str,
        index: str,
        rank: str,
        query: str,
        where: str,
        params: list[Any],
        limit: int,
        span: tuple[int, int] | None = None,
    ) -> list[tuple[Any, ...]]:
        """The best-ranked matches (with row ids in *span*, when given), ranked inside the
        index first: only the top candidates are checked against the scope and only the
        winners' rows are read (reading every candidate's row before sorting is what costs).
        When the scope leaves fewer than *limit* of the candidates and the index has more, it
        is asked for eight times more, at last for all (every candidate joined with its row in
        the scope, ranked)."""
        key = key_column(table)
        inner = limit * 4
        by_row = by_key(where)  # rowid lookups
        within = f" AND rowid BETWEEN {span[0]} AND {span[1]}" if span else ""
        ranked, args = (
            f"SELECT rowid, {rank} AS score FROM {index} WHERE {index} MATCH ?{within}",
            [query],
        )
        while inner <= RANK_CANDIDATES_MAX:
            candidates = self.fetchall(
                f"{ranked} ORDER BY score, rowid DESC LIMIT ?", [*args, inner]
            )
            score: dict[int, float] = {}
            for row_id, found in candidates:
                score[int(row_id)] = float(found)
            ids = list(score)
            if not ids:
                return []
            if len(candidates) < inner and len(ids) <= FEW_CANDIDATES:
                # The index gave every match, and few: their rows are read at once, in the
                # scope (a rare word's search: one statement, not a check and then a read).
                rows = self.fetchall(
                    f"SELECT {hit_columns(table)}, s.content, s.{key} FROM {table} s"
                    f" WHERE s.{key} IN ({','.join('?' * len(ids))}){by_row}",
                    [*ids, *params],
                )
                return _by_score(rows, score)[:limit]
            kept: list[int] = []
            for chunk, marks in in_chunks(ids):
                kept += [
                    int(r[0])
                    for r in self.fetchall(
                        f"SELECT s.{key} FROM {table} s WHERE s.{key} IN ({marks}){by_row}",
                        [*chunk, *params],
                    )
                ]
            if len(kept) >= limit or len(candidates) < inner:
                best = sorted(kept, key=lambda k: (score[k], -k))[:limit]  # ties newest first
                if not best:
                    return []
                marks = ",".join("?" * len(best))
                rows = self.fetchall(
                    f"SELECT {hit_columns(table)}, s.content, s.{key} FROM {table} s"
                    f" WHERE s.{key} IN ({marks})",
                    best,
                )
                return _by_score(rows, score)
            inner *= 8
        return self.fetchall(
            f"SELECT {hit_columns(table)}, s.content, c.score FROM ({ranked}) c"
            f" JOIN {table} s ON s.{key} = c.rowid WHERE 1{where}"
            " ORDER BY c.score, c.rowid DESC LIMIT ?",
            [*args, *params, limit],
        )

    def _walk_newest(
        self,
        table: str,
        scope: SearchScope,
        limit: int,
        matching: Callable[[int, int], tuple[str, list[Any]]],
        first: int,
    ) -> list[tuple[Any, ...]]:
        """Up to *limit* rows of *table* in *scope* that an index holds, newest first by
        time (the row id breaking ties), found by walking the time index a stretch at a time
        (the first about *first* rows, each next one four times longer): the index is asked
        only for the stretch's rows, by their range of row ids (``matching(lo, hi)``: a
        subquery of row ids and its parameters), so a word in most rows costs what the rows
        walked cost, not what all its matches do. Rows come as :func:`hit_columns`,
        ``content`` and a ``NULL`` score."""
        key, when = key_column(table), time_column(table)
        where, params = scope_sql(table, scope)
        walk = by_time(where, scope)
        size = min(max(first, WALK_FIRST_ROWS), WALK_MAX_ROWS)
        below: tuple[str, int] = _TOP
        found: list[tuple[Any, ...]] = []
        while len(found) < limit:
            # The stretch: the next *size* rows below where the last one ended (its last row
            # is where the next starts; none: the walk reaches the end), the range of their
            # ids for the index, then the rows it holds.
            last = self.fetchall(
                f"SELECT {when}, s.{key} FROM {table} s WHERE ({when}, s.{key}) < (?, ?){walk}"
                f" ORDER BY {newest_first(table)} LIMIT 1 OFFSET ?",
                [*below, *params, size - 1],
            )
            end: tuple[str, int] = (str(last[0][0]), int(last[0][1])) if last else ("", 0)
            window = f"({when}, s.{key}) < (?, ?) AND ({when}, s.{key}) >= (?, ?){walk}"
            lo, hi = self.fetchall(
                f"SELECT min(s.{key}), max(s.{key}) FROM {table} s WHERE {window}",
                [*below, *end, *params],
            )[0]
            if lo is None:
                break
            sub, values = matching(int(lo), int(hi))
            found += self.fetchall(
                f"SELECT {hit_columns(table)}, s.content, NULL AS score FROM {table} s"
                f" WHERE {window} AND +s.{key} IN ({sub})"
                f" ORDER BY {newest_first(table)} LIMIT ?",
                [*below, *end, *params, *values, limit - len(found)],
            )
            if not last:
                break
            below = end
            size = min(size * 4, WALK_MAX_ROWS)
        return found

    def _contains_where(self, table: str, needle: str, run: str) -> tuple[str, list[Any], str]:
        # Only the run, and in a LIKE without ESCAPE: see SearchStore.substring_search.
        return f"s.{key_column(table)} IN ({_trigram_rows(table)})", _trigram_args(table, run), run

    def _rows_containing(
        self, table: str, needle: str, run: str, scope: SearchScope, limit: int
    ) -> list[tuple[Any, ...]]:
        # The trigram index finds every candidate at once (FTS5 cannot stop early on LIKE):
        # a few are looked up and sorted by time; many are kept while the time index is
        # walked newest first ("+": not looked up), so a common piece of a word costs its
        # candidates and the rows walked, not a lookup and a sort of each.
        key = key_column(table)
        fetch = limit if run == needle else limit * 4
        ids = self.fetchall(
            f"SELECT * FROM ({_trigram_rows(table)}) LIMIT {SORTED_CANDIDATES + 1}",
            _trigram_args(table, run),
        )
        if not ids:
            return []
        where, params = scope_sql(table, scope)
        if len(ids) <= SORTED_CANDIDATES:
            return self.fetchall(
                f"SELECT {hit_columns(table)}, s.content FROM {table} s"
                f" WHERE s.{key} IN (SELECT value FROM json_each(?)){by_key(where)}"
                f" ORDER BY {newest_first(table)} LIMIT ?",
                [json.dumps([int(r[0]) for r in ids]), *params, fetch],
            )
        return self.fetchall(
            f"SELECT {hit_columns(table)}, s.content FROM {table} s"
            f" WHERE +s.{key} IN ({_trigram_rows(table)}){by_time(where, scope)}"
            f" ORDER BY {newest_first(table)} LIMIT ?",
            [*_trigram_args(table, run), *params, fetch],
        )

    def _literal_where(self, table: str, literal: str) -> tuple[str, list[Any]]:
        return f"s.{key_column(table)} IN ({_trigram_rows(table)})", _trigram_args(table, literal)


def _by_score(rows: list[tuple[Any, ...]], score: dict[int, float]) -> list[tuple[Any, ...]]:
    """Hit rows (their key last) best score first, ties newest first, each with its score
    in place of the key."""
    ranked = sorted(rows, key=lambda r: (score[int(r[7])], -int(r[7])))
    return [(*r[:7], score[int(r[7])]) for r in ranked]


def _idf(holding: int, rows: int) -> float:
    """BM25's weight of a word held by *holding* of *rows* rows (FTS5's form, floored)."""
    return max(1e-6, math.log((rows - holding + 0.5) / (holding + 0.5) + 1))


def _trigram_rows(table: str) -> str:
    """The rows whose text may contain a LIKE pattern (the parameters:
    :func:`_trigram_args`): what the trigram index finds, the rows holding a NUL character,
    past which it cannot see, and, of the messages a large batch left for
    :meth:`~.sqlite.SQLiteStore.catch_up_indexes` (above its mark), those the pattern
    matches: a search reads them rather than waiting for the index to catch up."""
    key = key_column(table)
    rows = (
        f"SELECT rowid FROM {table}_trigram WHERE content LIKE ?"
        f" UNION ALL SELECT {key} FROM {table} WHERE instr(content, char(0)) > 0"
    )
    if table == "messages":
        rows += (
            f" UNION ALL SELECT message_id FROM messages WHERE message_id > {_CAUGHT_UP}"
            " AND content LIKE ?"
        )
    return rows


def _trigram_args(table: str, run: str) -> list[Any]:
    """The parameters of :func:`_trigram_rows` for rows holding *run* (no wildcards)."""
    return [f"%{run}%"] * (2 if table == "messages" else 1)
