"""Text search over messages and summaries: word index, substring (trigram) and bounded row
scans; and the frame and tool-execution filters of ``chat_context_query``.

The queries are written once here; each back end supplies its own index syntax through the
hooks at the end of :class:`SearchStore` (:mod:`.sqlite_search`: FTS5 with BM25 and a trigram
table; :mod:`.pg_search`: a ``tsvector`` column and ``pg_trgm``). What to look for is the
caller's to decide (``retrieval.grep`` quotes user text into a *word query* — quoted terms and
``"phrases"`` joined by `` AND `` or `` OR ``, nothing else reaches a word index — and checks
regular expressions itself); rows come back as plain tuples: :class:`TextRow`,
:class:`FrameRow`, :class:`ExecutionRow`.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..model import HOST_RECORD
from .archive_files import archived_tools, read_archived
from .core import StoreCore, in_chunks
from .toollog import INPUT_SQL, OUTPUT_SQL

#: How much of each neighbour a message's word-index entry carries: the start of the message
#: before it (prev), of the one after (next) and of the one before that (far): an answer is
#: found through the question before it, and through the exchange that led to it.
NEIGHBOUR_CHARS = 300
#: How much a word in the neighbours counts beside the same word in the message itself (far
#: weighs as next does: PostgreSQL ranks with four weight classes, and they share one).
PREV_WEIGHT = 0.6
NEXT_WEIGHT = 0.3
FAR_WEIGHT = NEXT_WEIGHT
#: How much a word of the entry's *about* field counts: its conversation's title and the
#: month and year it was said ("May 2023").
ABOUT_WEIGHT = 0.2
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def about_sql(message: str, conversation: str) -> str:
    """The *about* words of a message's word-index entry, in SQL both engines read, for the
    row *message* of messages and *conversation* of conversations: the conversation's title,
    then the month and year of the message's time (the store's fixed-width UTC text)."""
    months = " ".join(f"WHEN '{n:02d}' THEN '{name}'" for n, name in enumerate(_MONTHS, 1))
    when = (
        f"CASE substr({message}.created_at, 6, 2) {months} END"
        f" || ' ' || substr({message}.created_at, 1, 4)"
    )
    return f"trim(coalesce({conversation}.title, '') || ' ' || coalesce({when}, ''))"


__all__ = [
    "ABOUT_WEIGHT",
    "FAR_WEIGHT",
    "NEIGHBOUR_CHARS",
    "NEXT_WEIGHT",
    "PREV_WEIGHT",
    "CallFilter",
    "ExecutionRow",
    "FrameRow",
    "SearchScope",
    "SearchStore",
    "TextRow",
    "WordOrder",
    "about_sql",
    "newest_first",
    "time_column",
]

#: ``recency``: newest first; ``rank``: best-ranked first by a row's own words; ``context``:
#: best-ranked first, a message's surroundings counting too (for summaries, as ``rank``).
WordOrder = Literal["recency", "rank", "context"]

#: Short needles (one or two characters) are searched in at most this many newest rows of
#: each table (a summary's text is some twenty messages' long: about as much text is read).
SHORT_NEEDLE_ROWS = {"messages": 20_000, "summaries": 1_000}
_WORD = re.compile(r"\w+", re.UNICODE)
_PHRASE = re.compile(r'"([^"]+)"')


class TextRow(NamedTuple):
    """A message or summary a search found."""

    id: str  # msg#N, or the summary id
    kind: str  # message | summary
    conversation_id: int
    created_at: str  # a summary's: the time of the latest message it covers
    role: str | None  # messages only
    depth: int | None  # summaries only
    content: str
    #: A word search's rank, lower is better (``None`` from the other searches).
    score: float | None = None


class FrameRow(NamedTuple):
    """A stored message, as ``chat_context_query`` lists it."""

    message_id: int
    conversation_id: int
    seq: int
    role: str
    created_at: str
    content: str


class ExecutionRow(NamedTuple):
    """A logged tool execution."""

    execution_id: str
    conversation_id: int
    tool_name: str | None
    status: str
    started_at: str | None
    finished_at: str | None
    duration_ms: int | None
    input: str | None
    output: str | None
    error: str | None
    call_message_id: int | None
    result_message_id: int | None
    output_file_id: str | None


@dataclass(frozen=True)
class SearchScope:
    """Where to look: these conversations (``None``: all; empty: none) and this time range
    (ISO-8601, ``since`` inclusive, ``before`` exclusive; a message's time, a summary's
    latest, an execution's start or else its finish). With ``archived`` false, a search of
    the whole store (no ``conversation_ids``) leaves out the archived conversations; named
    conversations are searched whatever their status."""

    conversation_ids: tuple[int, ...] | None = None
    since: str | None = None
    before: str | None = None
    archived: bool = True
    #: Whether the hosts' records of themselves (:data:`~lossless.model.HOST_RECORD`) are
    #: searched too (a default search leaves them out).
    host_records: bool = False


@dataclass(frozen=True)
class CallFilter:
    """Tool executions by tool name, call id and status (``None``: any)."""

    tool_name: str | None = None
    execution_id: str | None = None
    status: str | None = None


def key_column(table: str) -> str:
    """The integer key of a searchable table (the row id its indexes are keyed by)."""
    if table == "messages":
        return "message_id"
    if table == "summaries":
        return "rowid"
    raise ValueError(f"no text search over {table!r}")


def time_column(table: str) -> str:
    """The time a row of a searchable table (alias ``s``) is newest first by: a message's,
    a summary's latest message's (when it was made, without one), as its hit shows it."""
    if key_column(table) == "message_id":
        return "s.created_at"
    return "coalesce(s.latest_at, s.created_at)"


def newest_first(table: str) -> str:
    """An ``ORDER BY`` of *table* (alias ``s``) newest first: by time, the row id breaking
    ties (the order of the time indexes, ``m013``)."""
    return f"{time_column(table)} DESC, s.{key_column(table)} DESC"


def hit_columns(table: str) -> str:
    """The columns of a :class:`TextRow` before ``content`` (id, kind, conversation, time,
    role, depth), from alias ``s``."""
    if key_column(table) == "message_id":
        return "'msg#' || s.message_id, 'message', s.conversation_id, s.created_at, s.role, NULL"
    return (
        "s.summary_id, 'summary', s.conversation_id, coalesce(s.latest_at, s.created_at),"
        " NULL, s.depth"
    )


def in_conversations(alias: str, ids: Sequence[int] | None) -> tuple[str, list[Any]]:
    """`` AND alias.conversation_id IN (...)`` and its parameters ("" for all)."""
    if ids is None:
        return "", []
    values = list(ids) or [-1]
    return f" AND {alias}.conversation_id IN ({','.join('?' * len(values))})", values


def scope_sql(table: str, scope: SearchScope) -> tuple[str, list[Any]]:
    """The conditions (each after `` AND ``) that keep a search of *table* (alias ``s``) in
    *scope*; retired summaries (rewritten, dissolved) are never found."""
    where, params = in_conversations("s", scope.conversation_ids)
    if scope.conversation_ids is None and not scope.archived:
        where += (
            " AND s.conversation_id NOT IN"
            " (SELECT conversation_id FROM conversations WHERE status = 'archived')"
        )
    time_col = "created_at" if table == "messages" else "latest_at"
    if table == "messages" and not scope.host_records:
        where += f" AND (s.host_meta IS NULL OR s.host_meta <> '{HOST_RECORD}')"
    if scope.since:
        where += f" AND s.{time_col} >= ?"
        params.append(scope.since)
    if scope.before:
        where += f" AND s.{time_col} < ?"
        params.append(scope.before)
    if time_col == "latest_at":
        where += " AND s.retired_at IS NULL"
    return where, params


def by_key(where: str) -> str:
    """*where* with its conversation filter kept out of index choice (``+`` makes it an
    expression): the plan walks the table's key, newest first, or looks rows up by it."""
    return where.replace("s.conversation_id IN", "+s.conversation_id IN")


def by_time(where: str, scope: SearchScope) -> str:
    """*where* for a walk newest first by time: one conversation's walk goes through its own
    time index; several conversations' (or the store's) through the store's, their filter
    kept out of index choice."""
    ids = scope.conversation_ids
    return where if ids is not None and len(ids) == 1 else by_key(where)


def calls_sql(alias: str, calls: CallFilter) -> tuple[str, list[Any]]:
    """The conditions (each after `` AND ``) on ``tool_executions`` as *alias* that keep the
    executions *calls* selects."""
    where = ""
    params: list[Any] = []
    for column, value in (
        ("tool_name", calls.tool_name),
        ("execution_id", calls.execution_id),
        ("status", calls.status),
    ):
        if value is not None:
            where += f" AND {alias}.{column} = ?"
            params.append(value)
    return where, params


def _like_literal(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class SearchStore(StoreCore):
    """Text search over messages and summaries, and the frame and execution filters."""

    if TYPE_CHECKING:  # the store's (RecordStore's): how many rows hold each term

        def term_documents(
            self, table: str, terms: Sequence[str]
        ) -> tuple[dict[str, int], int]: ...

    def _walk_first(self, table: str, query: str, limit: int, sorted_cost: float) -> int:
        """Newest first: 0 when sorting a word query's matches by time costs less than
        walking the time index to *limit* of them (E matches cost E * *sorted_cost* rows
        walked; a walk about limit * rows / E), else how many of the newest rows a walk
        should read first (twice what should hold *limit* matches)."""
        expected, rows = self._expected_rows(table, query)
        if expected * expected * sorted_cost <= limit * rows:
            return 0
        return int(limit * 2 * rows / max(expected, 1.0))

    def _expected_rows(self, table: str, query: str) -> tuple[float, int]:
        """How many rows of *table* a word query is expected to match, from its terms'
        counts (the store's, cached) — every term (taken as independent: the rows times each
        share) or any (the counts added; a phrase's, its rarest word's) — and how many rows
        the index has. A phrase among every-word terms makes it none: each row's positions
        must be checked, which only the index narrows cheaply."""
        terms = [t for t in _PHRASE.findall(query) if _WORD.search(t)]
        any_term = " OR " in query
        phrases = [t for t in terms if len(_WORD.findall(t)) > 1]
        if not terms or (phrases and not any_term):
            return 0.0, 0
        words = [t for t in terms if t not in phrases]
        stems = self.index_terms(" ".join(words)) if words else []
        of_phrase = [self.index_terms(p) for p in phrases]
        counts, rows = self.term_documents(
            table, sorted({*stems, *(x for found in of_phrase for x in found)})
        )
        if rows <= 0:
            return 0.0, 0
        if any_term:
            rarest = [min(counts[x] for x in found) for found in of_phrase if found]
            return float(sum(counts[x] for x in stems) + sum(rarest)), rows
        expected = float(rows)
        for stem in stems:
            expected *= min(1.0, counts[stem] / rows)
        return expected, rows

    def word_search(
        self,
        table: str,
        query: str,
        scope: SearchScope,
        limit: int,
        *,
        order: WordOrder = "recency",
    ) -> list[TextRow]:
        """Up to *limit* rows of *table* (``messages`` or ``summaries``) whose words match
        *query*, a word query (quoted terms and phrases joined by `` AND `` or `` OR ``),
        newest first (``recency``: the words in the row's own text) or best-ranked first
        (``rank``: by the row's own words; ``context``: a message is also found through the
        messages around it and its conversation's title and month). Each row's ``score`` is
        its rank, lower is better (``None`` newest first): BM25 on SQLite, a weighted
        ``ts_rank_cd`` negated on PostgreSQL."""
        return [TextRow(*r) for r in self._word_rows(table, query, scope, limit, order)]

    def replies(self, message_ids: Sequence[int], scope: SearchScope) -> dict[int, TextRow]:
        """The message right after each of *message_ids* in its conversation (the reply to
        it), where that one is in *scope* and not forgotten: keyed by the earlier message's
        id."""
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            return {}
        where, params = scope_sql("messages", scope)
        rows = self.fetchall(
            f"SELECT m.message_id, {hit_columns('messages')}, s.content FROM messages m"
            " JOIN messages s ON s.conversation_id = m.conversation_id AND s.seq = m.seq + 1"
            f" WHERE m.message_id IN ({','.join('?' * len(ids))}) AND s.forgotten_at IS NULL"
            f"{where}",
            [*ids, *params],
        )
        return {int(r[0]): TextRow(*r[1:]) for r in rows}

    def substring_search(
        self, table: str, needle: str, scope: SearchScope, limit: int
    ) -> tuple[list[TextRow], bool]:
        """Up to *limit* rows of *table* whose text contains *needle* (case-insensitive),
        newest first (by time), through the trigram index; needles of one or two characters
        (too short for trigrams: a two-character CJK word) are looked for in the newest
        :data:`SHORT_NEEDLE_ROWS` rows of the table only. Returns the rows and whether the
        search stopped there (was bounded)."""
        if not needle:
            return [], False
        key = key_column(table)
        extra, params = scope_sql(table, scope)
        extra = by_key(extra)  # keep the key plan
        # The index is asked for the longest run of the needle without LIKE's wildcards: no
        # ESCAPE clause (with one, SQLite does not use the trigram index), and no % or _ at
        # all, since a wildcard beside non-ASCII text crashes SQLite 3.40's trigram LIKE
        # (detail='none'). The exact check below keeps only the rows that hold the whole
        # needle. (NUL too: SQLite reads a pattern only up to its first NUL.)
        run = max(re.split(r"[%_\x00]", needle), key=len)
        wanted = needle.lower()
        if len(run) >= 3:
            rows = self._rows_containing(table, needle, run, scope, limit)
            return [TextRow(*r) for r in rows if wanted in r[6].lower()][:limit], False
        (newest,) = self.fetchall(f"SELECT coalesce(max({key}), 0) FROM {table}")[0]
        window = SHORT_NEEDLE_ROWS[table]
        bounded = newest > window
        probe = run or needle
        if probe.lower() == probe.upper():  # CJK and digits have no case: no lower() per row
            where = f"s.{key} > ? AND {self._find}(s.content, ?) > 0"
        else:
            where = f"s.{key} > ? AND {self._find}(lower(s.content), lower(?)) > 0"
        # The window's few matches sorted by time ("|| ''" keeps the time index out of the
        # plan: the window is the newest rows by id).
        rows = self._search_rows(
            f"SELECT {hit_columns(table)}, s.content FROM {table} s WHERE {where}{extra}"
            f" ORDER BY ({time_column(table)} || '') DESC, s.{key} DESC LIMIT ?",
            [newest - window, probe, *params, limit if run == needle else limit * 4],
        )
        return [TextRow(*r) for r in rows if wanted in r[6].lower()][:limit], bounded

    def _rows_containing(
        self, table: str, needle: str, run: str, scope: SearchScope, limit: int
    ) -> list[tuple[Any, ...]]:
        """Rows of *table* in *scope* that the substring index says may hold *needle* (its
        longest piece *run* without LIKE's wildcards or NUL), newest first by time: *limit*
        of them, or four times as many when only a piece was looked for (some hold only
        that). As :func:`hit_columns` and ``content``."""
        where, args, looked = self._contains_where(table, needle, run)
        extra, params = scope_sql(table, scope)
        return self._search_rows(
            f"SELECT {hit_columns(table)}, s.content FROM {table} s WHERE {where}{by_key(extra)}"
            f" ORDER BY {newest_first(table)} LIMIT ?",
            [*args, *params, limit if looked == needle else limit * 4],
            substring=True,
        )

    def scan_newest(
        self,
        table: str,
        scope: SearchScope,
        *,
        containing: str | None = None,
        page: int = 500,
    ) -> Iterator[list[TextRow]]:
        """The rows of *table* in *scope*, newest first, a page of *page* rows at a time (the
        caller stops when its own bounds say so: each page is read as it is asked for).

        With *containing* — a literal of three or more characters, none of LIKE's wildcards
        nor NUL, that every wanted row holds (case-sensitive) — only rows the substring index
        says may hold it are read (it may say so of a few more: the caller checks each row),
        so a scan reaches back through all of history instead of the newest rows only."""
        key = key_column(table)
        extra, params = scope_sql(table, scope)
        extra = by_key(extra)
        if containing is not None:
            where, args = self._literal_where(table, containing)
            extra += f" AND {where}"
            params += args
        sql = (
            f"SELECT {hit_columns(table)}, s.content, s.{key} FROM {table} s"
            f" WHERE s.{key} < ?{extra} ORDER BY s.{key} DESC LIMIT {int(page)}"
        )
        return self._pages(sql, params, substring=containing is not None)

    def _pages(self, sql: str, params: list[Any], *, substring: bool) -> Iterator[list[TextRow]]:
        below = 1 << 62  # newest first, a page at a time by row id: no sort, no OFFSET
        while True:
            rows = self._search_rows(sql, [below, *params], substring=substring)
            if not rows:
                return
            below = rows[-1][7]
            yield [TextRow(*r[:7]) for r in rows]

    def executions(
        self,
        scope: SearchScope,
        calls: CallFilter | None = None,
        *,
        query: str | None = None,
        words: Sequence[str] = (),
        limit: int,
        offset: int = 0,
        newest_first: bool = True,
    ) -> list[ExecutionRow]:
        """One page of logged tool executions in *scope* (by their start, or finish when
        they have none) that *calls* selects, ordered by that time. With *query* (a word
        query), only those whose call or result message matches it and whose own input or
        output holds each of *words* (case-insensitive)."""
        where, params = in_conversations("e", scope.conversation_ids)
        if calls is not None:
            more, values = calls_sql("e", calls)
            where += more
            params += values
        at = "coalesce(e.started_at, e.finished_at)"
        for clause, value in ((f"{at} >= ?", scope.since), (f"{at} < ?", scope.before)):
            if value is not None:
                where += f" AND {clause}"
                params.append(value)
        if query is not None:
            # The index finds the messages; each word must then be in this execution's own
            # input or output (one message can carry the results of several parallel calls).
            where += (
                f" AND (e.call_message_id IN ({self._match_ids_sql})"
                f" OR e.result_message_id IN ({self._match_ids_sql}))"
            )
            params += [self._word_query(query)] * 2
            for word in words:
                where += (
                    f" AND (coalesce({INPUT_SQL}, '') || ' ' || coalesce({OUTPUT_SQL}, ''))"
                    f" {self._like} ?"
                    " ESCAPE '\\'"
                )
                params.append("%" + _like_literal(word) + "%")
        direction = "DESC" if newest_first else "ASC"
        rows = self.fetchall(
            "SELECT e.execution_id, e.conversation_id, e.tool_name, e.status, e.started_at,"
            f" e.finished_at, e.duration_ms, {INPUT_SQL}, {OUTPUT_SQL}, e.error, e.call_message_id,"
            " e.result_message_id, e.output_file_id FROM tool_executions e"
            f" WHERE 1 = 1{where} ORDER BY {at} {direction}, e.execution_id LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        found = [ExecutionRow(*r) for r in rows]
        results = [r.result_message_id for r in found if r.result_message_id is not None]
        if not results:
            return found
        with self.read() as conn:
            # An archived result's output is in its archive file (the log keeps its start).
            archived = [
                int(r[0])
                for chunk, marks in in_chunks(results)
                for r in conn.execute(
                    f"SELECT message_id FROM messages WHERE message_id IN ({marks})"
                    " AND archived_at IS NOT NULL",
                    chunk,
                )
            ]
            held = archived_tools(conn, self.archive_dir, archived)
            # (result message, call id) -> output: the log's own copy when it had one, else
            # the last result part of that message with that id (archived with it).
            outputs: dict[tuple[int, str], Any] = {}
            for mid, (_row, parts) in read_archived(conn, self.archive_dir, archived).items():
                for part in parts:  # the columns of message_rows.PART_COLS, in order
                    if part[4] == "tool_result" and part[6] is not None:
                        outputs[(mid, str(part[6]))] = part[9]
            for mid, records in held.items():
                for _conv, execution, column, value in records:
                    if column == "output" and value is not None:
                        outputs[(mid, str(execution))] = value
        return [
            r._replace(output=outputs[(r.result_message_id, r.execution_id)])
            if r.result_message_id is not None and (r.result_message_id, r.execution_id) in outputs
            else r
            for r in found
        ]

    def frames(
        self,
        scope: SearchScope,
        *,
        role: str | None = None,
        query: str | None = None,
        calls: CallFilter | None = None,
        limit: int,
        offset: int = 0,
        newest_first: bool = True,
    ) -> list[FrameRow]:
        """One page of the stored messages in *scope* (of *role*, when given), ordered by
        time: with *query* (a word query) those whose text matches it; with *calls* those
        that made or answered the tool executions it selects (in the same conversations)."""
        where, params = in_conversations("m", scope.conversation_ids)
        for clause, value in (
            ("m.role = ?", role),
            ("m.created_at >= ?", scope.since),
            ("m.created_at < ?", scope.before),
        ):
            if value is not None:
                where += f" AND {clause}"
                params.append(value)
        if query is not None:
            where += f" AND m.message_id IN ({self._match_ids_sql})"
            params.append(self._word_query(query))
        if calls is not None:  # the messages that made or answered the chosen calls
            inner, inner_params = in_conversations("e", scope.conversation_ids)
            more, values = calls_sql("e", calls)
            inner += more
            inner_params += values
            where += (
                " AND m.message_id IN (SELECT e.call_message_id FROM tool_executions e"
                f" WHERE 1 = 1{inner} UNION SELECT e.result_message_id FROM tool_executions e"
                f" WHERE 1 = 1{inner})"
            )
            params += inner_params + inner_params
        direction = "DESC" if newest_first else "ASC"
        rows = self.fetchall(
            "SELECT m.message_id, m.conversation_id, m.seq, m.role, m.created_at, m.content"
            f" FROM messages m WHERE 1 = 1{where}"
            f" ORDER BY m.created_at {direction}, m.message_id {direction} LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [FrameRow(*r) for r in rows]

    def _search_rows(
        self, sql: str, params: Sequence[Any], *, substring: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run one query of a text search; *substring*: its rows come through the substring
        index (a back end may steer how such a query is planned)."""
        return self.fetchall(sql, params)

    def score_scale(self, table: str, terms: Sequence[str]) -> float:
        """What a word search's scores of *table* are multiplied by to stand beside the
        messages' (``terms``: the query's index terms). 1.0 unless a back end's ranking
        depends on each index's own statistics."""
        return 1.0

    # --- what each back end supplies ---------------------------------------------------------

    #: Message ids whose text matches a word query (one ``?``, see :meth:`_word_query`).
    _match_ids_sql: str
    #: A case-insensitive LIKE (SQLite's LIKE folds ASCII case; PostgreSQL needs ILIKE).
    _like: str
    #: The function ``f(text, part)`` that gives where *part* starts in *text* (from 1; 0
    #: when it is not there).
    _find: str

    @abstractmethod
    def _word_query(self, query: str) -> str:
        """A word query in the syntax of this engine's word index."""

    @abstractmethod
    def _word_rows(
        self,
        table: str,
        query: str,
        scope: SearchScope,
        limit: int,
        order: WordOrder,
    ) -> list[tuple[Any, ...]]:
        """:meth:`word_search`'s rows: :func:`hit_columns`, ``content`` and the score, of the
        rows in *scope* (:func:`scope_sql`)."""

    @abstractmethod
    def _contains_where(self, table: str, needle: str, run: str) -> tuple[str, list[Any], str]:
        """A condition on alias ``s`` that the substring index serves, with its parameters,
        true at least of the rows whose text holds *needle* (case-insensitive); *run* is its
        longest piece without LIKE's wildcards or NUL (three characters or more). The third
        value is what the condition looks for: unless it is the whole needle, more rows are
        read, as some will hold only that."""

    @abstractmethod
    def _literal_where(self, table: str, literal: str) -> tuple[str, list[Any]]:
        """A condition on alias ``s`` that the substring index serves, with its parameters,
        true at least of the rows whose text holds *literal* (case-sensitive; three
        characters or more, none of LIKE's wildcards nor NUL)."""
