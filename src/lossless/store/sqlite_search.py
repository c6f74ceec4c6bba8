"""SQLite's side of :class:`~.search.SearchStore`: the porter FTS5 tables (``messages_fts``,
``summaries_fts``: ``MATCH``, ``bm25()``) and the trigram tables beside them
(``messages_trigram``, ``summaries_trigram``) that serve substring ``LIKE``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .core import in_chunks
from .search import (
    ABOUT_WEIGHT,
    FAR_WEIGHT,
    NEXT_WEIGHT,
    PREV_WEIGHT,
    SearchStore,
    WordOrder,
    by_key,
    hit_columns,
    key_column,
)

__all__ = ["SQLiteSearch"]

#: Candidates ranked inside the index before their rows are read (then the full join).
RANK_CANDIDATES_MAX = 100_000


class SQLiteSearch(SearchStore):
    """Search through SQLite's FTS5 word and trigram indexes."""

    if TYPE_CHECKING:  # the store's (RecordStore's): how many rows hold each term

        def term_documents(
            self, table: str, terms: Sequence[str]
        ) -> tuple[dict[str, int], int]: ...

    def score_scale(self, table: str, terms: Sequence[str]) -> float:
        """BM25 weighs a word by how rare it is in its own index, and the summary DAG says
        each thing again level after level in few rows: a summary scores below a message
        saying the same. Its scores are scaled by the words' rarity among the messages (as
        the index that ranks them with their surroundings counts it) over their rarity among
        the summaries."""
        if table == "messages" or not terms:
            return 1.0
        mine, rows = self.term_documents(table, terms)
        said, messages = self.term_documents("messages_ctx", terms)
        own = sum(_idf(mine[t], rows) for t in terms if mine[t])
        theirs = sum(_idf(said[t], messages) for t in terms if mine[t])
        return theirs / own if own > 0 and theirs > 0 else 1.0

    _match_ids_sql = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
    _like = "LIKE"
    _find = "instr"

    def _word_query(self, query: str) -> str:
        """The quoted terms, in the message's (or summary's) own text: a filter or a newest-
        first search means words said there, not beside it."""
        return f"content : ({query})"

    @staticmethod
    def _index(table: str, order: WordOrder) -> tuple[str, str]:
        """The word index a search of *table* in *order* reads, and its BM25 expression: a
        message's own words (``messages_fts``), or with what surrounds it counting for less
        (``messages_ctx_fts``: columns content, prev, next, far, about)."""
        if table == "messages" and order == "context":
            w = (1.0, PREV_WEIGHT, NEXT_WEIGHT, FAR_WEIGHT, ABOUT_WEIGHT)
            return "messages_ctx_fts", f"bm25(messages_ctx_fts, {', '.join(map(str, w))})"
        return f"{table}_fts", f"bm25({table}_fts)"

    def _word_rows(
        self,
        table: str,
        query: str,
        where: str,
        params: list[Any],
        limit: int,
        order: WordOrder,
    ) -> list[tuple[Any, ...]]:
        key = key_column(table)
        index, rank = self._index(table, order)
        if index == "messages_ctx_fts":  # large batches leave it behind: caught up first
            self.catch_up_indexes()
        if order == "recency":
            # Newest first by row id: the index's own order, so no sort of every match; no
            # BM25 either (its weights would count each word's rows in the whole index).
            sql = (
                f"SELECT {hit_columns(table)}, s.content, NULL AS score"
                f" FROM {index} f JOIN {table} s ON s.{key} = f.rowid"
                f" WHERE {index} MATCH ?{where} ORDER BY f.rowid DESC LIMIT ?"
            )
            return self.fetchall(sql, [self._word_query(query), *params, limit])
        sql = (
            f"SELECT {hit_columns(table)}, s.content, {rank} AS score"
            f" FROM {index} f JOIN {table} s ON s.{key} = f.rowid"
            f" WHERE {index} MATCH ?{where} ORDER BY score, f.rowid DESC LIMIT ?"
        )
        return self._best_ranked(table, index, rank, query, where, params, limit, sql)

    def _best_ranked(
        self,
        table: str,
        index: str,
        rank: str,
        query: str,
        where: str,
        params: list[Any],
        limit: int,
        plain_sql: str,
    ) -> list[tuple[Any, ...]]:
        """The best-ranked matches, ranked inside the index first: only the top candidates are
        checked against the scope and only the winners' rows are read (reading every
        candidate's row before sorting is what costs). When the scope leaves fewer than
        *limit* of the candidates and the index has more, it is asked for eight times more, at
        last for all (*plain_sql*: the full join, ranked)."""
        key = key_column(table)
        inner = limit * 4
        by_row = by_key(where)  # rowid lookups
        while inner <= RANK_CANDIDATES_MAX:
            candidates = self.fetchall(
                f"SELECT rowid, {rank} AS score FROM {index} WHERE {index} MATCH ?"
                " ORDER BY score, rowid DESC LIMIT ?",
                [query, inner],
            )
            score = {int(r[0]): float(r[1]) for r in candidates}
            kept: list[int] = []
            ids = list(score)
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
                return [
                    (*r[:7], score[int(r[7])])
                    for r in sorted(rows, key=lambda r: (score[int(r[7])], -int(r[7])))
                ]
            inner *= 8
        return self.fetchall(plain_sql, [query, *params, limit])

    def _contains_where(self, table: str, needle: str, run: str) -> tuple[str, list[Any], str]:
        # Only the run, and in a LIKE without ESCAPE: see SearchStore.substring_search.
        return f"s.{key_column(table)} IN ({_trigram_rows(table)})", [f"%{run}%"], run

    def _literal_where(self, table: str, literal: str) -> tuple[str, list[Any]]:
        if table == "messages":
            self.catch_up_indexes()
        return f"s.{key_column(table)} IN ({_trigram_rows(table)})", [f"%{literal}%"]


def _idf(holding: int, rows: int) -> float:
    """BM25's weight of a word held by *holding* of *rows* rows (FTS5's form, floored)."""
    return max(1e-6, math.log((rows - holding + 0.5) / (holding + 0.5) + 1))


def _trigram_rows(table: str) -> str:
    """The rows whose text may contain a LIKE pattern (one ``?``): what the trigram index
    finds, and the rows holding a NUL character, past which it cannot see."""
    key = key_column(table)
    return (
        f"SELECT rowid FROM {table}_trigram WHERE content LIKE ?"
        f" UNION ALL SELECT {key} FROM {table} WHERE instr(content, char(0)) > 0"
    )
