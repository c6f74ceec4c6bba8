"""PostgreSQL's side of :class:`~.search.SearchStore`: the word index is the stored
``content_tsv`` column (``websearch_to_tsquery``, ``ts_rank_cd``), the substring index a
``pg_trgm`` GIN index on ``content`` (it serves ``LIKE`` and ``ILIKE``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from .connection import Connection
from .search import (
    ABOUT_WEIGHT,
    NEXT_WEIGHT,
    PREV_WEIGHT,
    SearchScope,
    SearchStore,
    WordOrder,
    by_time,
    hit_columns,
    key_column,
    newest_first,
    scope_sql,
    time_column,
)

__all__ = ["PgSearch"]

#: Newest first, a word query's matches are found through the word index and sorted by time
#: when that costs less than walking the time index until *limit* of them are found: E
#: matches cost E times a sorted match's cost; a walk, limit * rows / E rows walked. The cost
#: of a sorted match over that of a walked row, measured at 1M messages (25 ms for 6,329
#: sorted; 6.9 ms walking about 8,000) and 3,421 summaries (33 ms for 1,524 sorted, each
#: summary's long tsvector read out of line; 4.2 ms walking 115).
SORTED_MATCH_COST = {"messages": 4.6, "summaries": 0.6}
#: The newest rows a walk reads before the older ones are searched through the word index.
WALK_FIRST_ROWS = 256
WALK_MAX_ROWS = 1 << 16
#: How many stretches of the newest rows a newest-first search walks before it sorts the
#: older matches.
WALK_STRETCHES = 3
#: A ranked search of the summaries ranks at most this many of those that match, the newest.
SUMMARY_RANK_CANDIDATES = 400

_PHRASE = re.compile(r'"([^"]+)"')


def _as_words(query: str) -> str:
    """*query* with each phrase of several words made those words, each required."""
    return _PHRASE.sub(lambda m: " AND ".join(f'"{w}"' for w in m.group(1).split()), query)


class PgSearch(SearchStore):
    """Search through PostgreSQL's ``tsvector`` and ``pg_trgm`` indexes."""

    _match_ids_sql = (
        "SELECT message_id FROM messages"
        " WHERE content_tsv @@ websearch_to_tsquery('english'::regconfig, ?)"
    )
    _like = "ILIKE"
    _find = "strpos"

    def _word_query(self, query: str) -> str:
        """The quoted terms in ``websearch_to_tsquery``'s syntax, which never fails on user
        text: ``"a" "b"`` for all of them, ``"a" or "b"`` for any."""
        return query.replace('" AND "', '" "').replace('" OR "', '" or "')

    def _word_rows(
        self,
        table: str,
        query: str,
        scope: SearchScope,
        limit: int,
        order: WordOrder,
    ) -> list[tuple[Any, ...]]:
        # The word index is the tsvector column: the same quoted terms, in the syntax of
        # websearch_to_tsquery (which never fails on user text); ts_rank_cd, negated so
        # that, as with bm25(), lower is better.
        where, params = scope_sql(table, scope)
        key = key_column(table)
        by = f"score, s.{key} DESC"  # ties newest first, the same on every page
        walked: tuple[str, list[Any]] | None = None
        if order == "recency":
            # Newest first: a query matching few rows has them found by the word index and
            # sorted by time ("|| ''" keeps the time indexes out of the plan). One matching
            # many is looked for first among the newest rows, walking the time index, each
            # row's tsvector checked: about as many rows as should hold *limit* matches,
            # twice over. A walk is not bounded by itself (an estimate that was wrong, or
            # matches all long ago, would have it read the whole table), so when those rows
            # hold too few, the older ones are searched through the word index.
            by = f"({time_column(table)} || '') DESC, s.{key} DESC"
            # (A phrase is estimated as its words all in the row: more than hold it in
            # order, so a common phrase is walked too; the bound keeps a wrong guess cheap.)
            first = self._walk_first(table, _as_words(query), limit, SORTED_MATCH_COST[table])
            if first:
                walked = self._newest_stretch(table, scope, first)
        matches = "s.content_tsv @@ q"
        # A row's own words carry no weight class (D): ranked alone, D weighs what a row's
        # own text does (1), and no weighted copy of each candidate's tsvector is made.
        vector, weights = "s.content_tsv", "'{1, 1, 1, 1}'::float4[]"
        if table == "messages" and order == "context":
            # Ranked with its surroundings, a message's neighbours count too, for less than its
            # own words (weights {D, C, B, A}: about D, next C and far C, prev B, its own text
            # A); otherwise the words must be in the message itself.
            matches = "(s.content_tsv @@ q OR s.context_tsv @@ q)"
            vector = "setweight(s.content_tsv, 'A') || coalesce(s.context_tsv, ''::tsvector)"
            weights = f"'{{{ABOUT_WEIGHT}, {NEXT_WEIGHT}, {PREV_WEIGHT}, 1}}'::float4[]"
        terms = _PHRASE.findall(query) if order != "recency" else []
        rank, extra, values = self._weighted_rank(vector, weights, terms)
        words = self._word_query(query)
        bound, bound_params = "", []
        if table == "summaries" and order != "recency":
            # Ranking reads each candidate's tsvector (a summary's is long, stored out of
            # line): the newest SUMMARY_RANK_CANDIDATES that match are ranked, found through
            # the index alone (an ARRAY subquery, planned on its own).
            bound = (
                f" AND s.{key} = ANY(ARRAY(SELECT s.{key} FROM {table} s WHERE s.content_tsv"
                f" @@ websearch_to_tsquery('english'::regconfig, ?){where}"
                f" ORDER BY {newest_first(table)} LIMIT {SUMMARY_RANK_CANDIDATES}))"
            )
            bound_params = [words, *params]
        # Newest first has no score (nor a rank to compute for each match before the sort).
        score = "NULL" if order == "recency" else f"-{rank}"
        sql = (
            f"SELECT {hit_columns(table)}, s.content, {score} AS score"
            f" FROM {table} s, websearch_to_tsquery('english'::regconfig, ?) q{extra}"
            f" WHERE {matches}{where}{bound}"
        )
        args = [words, *values, *params, *bound_params]
        if walked is None:
            return self._search_rows(f"{sql} ORDER BY {by} LIMIT ?", [*args, limit])
        # The newest stretch walked, then the stretches before it, each eight times longer
        # (the newest rows can hold none of a common word: a host's last turns about
        # something else), at most WALK_STRETCHES in all; then, if they held too few, the
        # rows before the last sorted (every older match read: the rare case bounded last).
        stretch, edge = walked
        found = self._search_rows(
            f"{sql} AND {stretch} >= (?, ?) ORDER BY {newest_first(table)} LIMIT ?",
            [*args, *edge, limit],
        )
        size = max(first, WALK_FIRST_ROWS)
        for _ in range(WALK_STRETCHES - 1):
            if len(found) >= limit or size >= WALK_MAX_ROWS:
                break
            size = min(size * 9, WALK_MAX_ROWS)  # the rows walked so far, and 8 times more
            further = self._newest_stretch(table, scope, size)
            if further is None:
                break
            found += self._search_rows(
                f"{sql} AND {stretch} < (?, ?) AND {stretch} >= (?, ?)"
                f" ORDER BY {newest_first(table)} LIMIT ?",
                [*args, *edge, *further[1], limit - len(found)],
            )
            edge = further[1]
        if len(found) < limit:
            found += self._search_rows(
                f"{sql} AND {stretch} < (?, ?) ORDER BY {by} LIMIT ?",
                [*args, *edge, limit - len(found)],
            )
        return found

    def _newest_stretch(
        self, table: str, scope: SearchScope, size: int
    ) -> tuple[str, list[Any]] | None:
        """The newest *size* rows of *table* in *scope* (at least :data:`WALK_FIRST_ROWS`,
        at most :data:`WALK_MAX_ROWS`) as a lower bound on (time, key): the row expression
        and the last row's values; ``None`` when the scope holds no more rows than that."""
        where, params = scope_sql(table, scope)
        key, when = key_column(table), time_column(table)
        size = min(max(size, WALK_FIRST_ROWS), WALK_MAX_ROWS)
        last = self.fetchall(
            f"SELECT {when}, s.{key} FROM {table} s WHERE TRUE{by_time(where, scope)}"
            f" ORDER BY {newest_first(table)} LIMIT 1 OFFSET ?",
            [*params, size - 1],
        )
        if not last:
            return None
        return f"({when}, s.{key})", [last[0][0], last[0][1]]

    def _search_rows(
        self, sql: str, params: Sequence[Any], *, substring: bool = False
    ) -> list[tuple[Any, ...]]:
        """A substring query without sequential scans: for a small table of long texts (the
        summaries, stored out of line) the planner would rather read every row than the
        trigram index, and folding the case of every row's text for ``ILIKE`` costs far more
        than it reckons (17 ms against 1 ms for 341 summaries)."""
        if not substring:
            return self.fetchall(sql, params)
        return self._fetch_without(("seqscan", "indexscan"), sql, params)

    def _fetch_without(
        self, plans: Sequence[str], sql: str, params: Sequence[Any]
    ) -> list[tuple[Any, ...]]:
        """*sql* with the planner's *plans* (``seqscan``, ``sort``: its ``enable_`` settings)
        off for this statement alone, set back after it even inside a longer transaction."""
        with self.read() as conn:
            return self._fetch_without_in(conn, plans, sql, params)

    @staticmethod
    def _fetch_without_in(
        conn: Connection, plans: Sequence[str], sql: str, params: Sequence[Any]
    ) -> list[tuple[Any, ...]]:
        """:meth:`_fetch_without` in *conn*, a transaction already open."""
        conn.execute("SELECT " + ", ".join(f"set_config('enable_{p}', 'off', true)" for p in plans))
        rows = list(conn.execute(sql, params).fetchall())
        for plan in plans:
            conn.execute(f"RESET enable_{plan}")
        return rows

    def _weighted_rank(
        self, vector: str, weights: str, terms: Sequence[str]
    ) -> tuple[str, str, list[Any]]:
        """The rank of a row's *vector* (its classes weighted by *weights*, an array
        expression) for a query of *terms*, like BM25: each term's
        ``ts_rank_cd`` (its occurrences, weighted by where they are: a row's own text weighs 1
        in every table, so summaries and messages stand side by side), saturated (flag 32:
        r / (r + 1)), times how rare the term is among the messages — what was said, the same
        weight for a summary as for a message. ``ts_rank_cd`` alone knows nothing of rarity: a
        word in every row would count as much as one in a single row. Returns the expression,
        the FROM items it needs and their parameters."""
        if not terms:
            return f"ts_rank_cd({weights}, {vector}, q)", "", []
        lexemes = {term: self.index_terms(term) for term in terms}
        counts, rows = self.term_documents(
            "messages", sorted({x for v in lexemes.values() for x in v})
        )
        parts, froms, values = [], "", []
        for n, term in enumerate(terms):
            held = min((counts[x] for x in lexemes[term]), default=0)
            idf = math.log((rows - held + 0.5) / (held + 0.5) + 1) if rows > 0 else 1.0
            parts.append(f"{max(idf, 1e-6):.6f} * ts_rank_cd({weights}, {vector}, q{n}, 32)")
            froms += f", websearch_to_tsquery('english'::regconfig, ?) q{n}"
            values.append(f'"{term}"')
        return "(" + " + ".join(parts) + ")", froms, values

    def _contains_where(self, table: str, needle: str, run: str) -> tuple[str, list[Any], str]:
        # pg_trgm's GIN index serves ILIKE (any needle: its wildcards are escaped), so the
        # whole needle is looked for. A summary is found through that index alone: an
        # uncorrelated ARRAY(subquery) is planned on its own, with no other condition the
        # planner could serve another way (the summaries are few rows of long text, which it
        # would otherwise read row by row, folding the case of each: 17 ms for 341 rows
        # against 0.3 ms through the index).
        pattern = "%" + re.sub(r"([\\%_])", r"\\\1", needle) + "%"
        if table == "summaries":
            rows = "SELECT rowid FROM summaries WHERE content ILIKE ?"
            return f"s.rowid = ANY(ARRAY({rows}))", [pattern], needle
        return "s.content ILIKE ?", [pattern], needle

    def _literal_where(self, table: str, literal: str) -> tuple[str, list[Any]]:
        # pg_trgm serves LIKE (the literal has no wildcards; its backslashes are escaped).
        escaped = literal.replace("\\", "\\\\")
        return "s.content LIKE ?", [f"%{escaped}%"]
