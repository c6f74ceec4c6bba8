"""``lcm_grep``: search stored messages, summaries and large files.

* ``full_text`` — the porter FTS index, ranked by BM25 (``relevance``), newest first
  (``recency``) or both (``hybrid``). User text never reaches FTS syntax raw: words are quoted,
  ``"phrases"`` kept; with ``relevance``/``hybrid`` a document matching some of the words is
  found and ranked (OR), with ``recency`` all words must match (AND). Regex syntax in this mode
  is refused with an explanation of the two modes. Text with CJK characters, and substrings the
  word index cannot find, go through the trigram index.
* ``regex`` — a regular expression over the text, newest first, bounded: at most
  ``max_rows`` rows scanned, ``max_seconds`` in all, and a time limit on each match, so a
  catastrophic pattern cannot hang the caller. A pattern that requires a literal of three or
  more characters (``OPS-0012\\d`` requires ``OPS-0012``) scans only the rows the trigram
  index says contain it (SQLite's trigram table, PostgreSQL's ``pg_trgm``), so such a search
  reaches back through all of history instead of the newest rows only.

The conversation scope is a list of conversation ids (the engine defaults it to the current
conversation's family); results carry ids (``msg#``, ``sum_``, ``file_``), conversation, time,
role or kind and a snippet.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import regex

from ..codec import clean_text
from ..errors import LosslessError
from ..store.base import in_chunks

if TYPE_CHECKING:
    from ..store.base import Store

__all__ = ["GrepError", "GrepHit", "GrepResult", "grep"]

Mode = Literal["full_text", "regex"]
Scope = Literal["messages", "summaries", "both", "files"]
Sort = Literal["recency", "relevance", "hybrid"]

MAX_LIMIT = 200
#: A query whose rarest word is in at most this share of the rows (or this many rows) is
#: answered from the word index and sorted, rather than by walking rows newest first.
SELECTIVE_SHARE = 0.02
SELECTIVE_ROWS = 2_000
_CJK = re.compile("[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_REGEX_HINTS = re.compile(r"\.\*|\.\+|\\[dwsbDWSB]|\[[^\]]+\]|\(\?|[^\\]\|[^|]|^\^|\$$|\{\d")
_WORD = re.compile(r"\w+", re.UNICODE)
_PHRASE = re.compile(r'"([^"]+)"')
#: Words a relevance search leaves out of a question when it has others: they match most
#: documents, cost the most to rank, and say nothing about what is asked.
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "after",
        "again",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "been",
        "before",
        "being",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "done",
        "for",
        "from",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "just",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
    ]
)
#: Above this many indexed rows, a relevance search ranks in tiers (see :func:`_ranked`).
TIERED_ABOVE = 20_000
#: A word in at most this share of the rows (or this many) is rare enough to rank alone.
RARE_SHARE = 0.01
RARE_ROWS = 1_000
#: Candidates ranked inside the index before their rows are read (then the full join).
RANK_CANDIDATES_MAX = 100_000
#: Short needles (one or two characters) are searched in at most this many newest rows.
SHORT_NEEDLE_ROWS = 20_000


class GrepError(LosslessError):
    """A search that cannot run as given (the message says how to fix it)."""

    exit_code = 2


@dataclass(frozen=True)
class GrepHit:
    """One match."""

    id: str
    kind: str  # message | summary | file
    conversation_id: int
    created_at: str
    role: str | None
    depth: int | None
    snippet: str
    score: float | None = None
    #: With relevance: 0 for documents matching every word, 1 for those matching rare ones.
    tier: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass(frozen=True)
class GrepResult:
    """Matches, and whether a bound stopped the search early."""

    hits: list[GrepHit]
    truncated: bool = False
    scanned: int = 0


def _fts_query(pattern: str, *, any_word: bool) -> str:
    """A safe FTS5 query: quoted words and "phrases"; stop words are left out when there
    are other words (a question's "the" and "did" only slow the search down)."""
    phrases = _PHRASE.findall(pattern)
    rest = _PHRASE.sub(" ", pattern)
    terms = [f'"{p.replace(chr(34), "")}"' for p in phrases if p.strip()]
    words = _WORD.findall(rest)
    content = [w for w in words if w.lower() not in STOP_WORDS]
    terms += [f'"{w}"' for w in dict.fromkeys(content if content or terms else words)]
    if not terms:
        raise GrepError(f"nothing to search for in {pattern!r}; give some words")
    return (" OR " if any_word else " AND ").join(terms)


def _snippet(text: str, needle: str | None, width: int = 160) -> str:
    flat = " ".join(text.split())
    at = flat.lower().find(needle.lower()) if needle else -1
    if at < 0:
        return flat[:width] + ("…" if len(flat) > width else "")
    start = max(0, at - width // 3)
    end = min(len(flat), start + width)
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")


def _in(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    return f"{column} IN ({','.join('?' * len(values))})", list(values)


def grep(
    store: Store,
    pattern: str,
    *,
    conversation_ids: Sequence[int] | None = None,
    mode: Mode = "full_text",
    scope: Scope = "both",
    since: str | None = None,
    before: str | None = None,
    limit: int = 50,
    sort: Sort = "recency",
    max_rows: int = 200_000,
    max_seconds: float = 2.0,
) -> GrepResult:
    """Search the store; see the module docstring for the modes and their bounds."""
    if mode not in ("full_text", "regex"):
        raise GrepError(f"unknown mode {mode!r}; use full_text or regex")
    if scope not in ("messages", "summaries", "both", "files"):
        raise GrepError(f"unknown scope {scope!r}; use messages, summaries, both or files")
    if sort not in ("recency", "relevance", "hybrid"):
        raise GrepError(f"unknown sort {sort!r}; use recency, relevance or hybrid")
    if not 1 <= limit <= MAX_LIMIT:
        raise GrepError(f"limit must be from 1 to {MAX_LIMIT}")
    if not pattern or not pattern.strip():
        raise GrepError("the pattern is empty; give words (full_text) or a regular expression")
    # Stored text has no lone surrogates (they become U+FFFD), and SQLite cannot take them.
    pattern = clean_text(pattern)
    since = clean_text(since) if since else since
    before = clean_text(before) if before else before
    if mode == "regex":
        return _regex(
            store, pattern, conversation_ids, scope, since, before, limit, max_rows, max_seconds
        )
    if _REGEX_HINTS.search(pattern) and not _PHRASE.fullmatch(pattern.strip()):
        raise GrepError(
            f"{pattern!r} looks like a regular expression, but the mode is full_text (words and "
            '"phrases", matched by the search index). Use mode=regex (--mode regex) to match a '
            "regular expression, or give plain words."
        )
    tables = {
        "messages": ["messages"],
        "summaries": ["summaries"],
        "both": ["messages", "summaries"],
    }
    if scope == "files":
        return GrepResult(_files(store, pattern, conversation_ids, limit))
    hits: list[GrepHit] = []
    truncated = False
    cjk = bool(_CJK.search(pattern))
    needle = pattern.replace('"', " ").strip()
    for table in tables[scope]:
        found: list[GrepHit] = []
        if not cjk:
            scope_args = (conversation_ids, since, before, limit)
            if sort == "recency":
                query = _fts_query(pattern, any_word=False)
                found = _fts(store, table, query, pattern, *scope_args, sort)
            else:
                found = _ranked(store, table, pattern, scope_args, sort)
        if cjk or len(found) < limit:
            seen = {h.id for h in found}
            more, cut = _substring(store, table, needle, conversation_ids, since, before, limit)
            found += [h for h in more if h.id not in seen]
            truncated |= cut
        hits += found
    if sort == "recency":
        hits.sort(key=lambda h: h.created_at, reverse=True)
    else:
        hits.sort(key=lambda h: (h.tier, h.score if h.score is not None else 1e9, h.created_at))
    return GrepResult(hits[:limit], truncated=truncated)


def _ranked(
    store: Store,
    table: str,
    pattern: str,
    scope_args: tuple[Sequence[int] | None, str | None, str | None, int],
    sort: Sort,
) -> list[GrepHit]:
    """A relevance search: documents matching some of the words, ranked by BM25.

    A question's stop words are left out when it has other words. On a large index this is
    done in tiers, so that common words never make the whole index the candidate set: first
    the documents matching every word, ranked; then, if they are fewer than the limit, those
    matching any of the rare words (in at most 1% of the rows), ranked, after them. A small
    index ranks one OR query over all the words.
    """
    limit = scope_args[3]
    phrases = [f'"{p}"' for p in _PHRASE.findall(pattern) if p.strip()]
    words = list(_WORD.findall(_PHRASE.sub(" ", pattern)))
    content = [w for w in words if w.lower() not in STOP_WORDS] or words
    if not phrases and not content:
        raise GrepError(f"nothing to search for in {pattern!r}; give some words")
    terms = phrases + [f'"{w}"' for w in dict.fromkeys(content)]
    counts, rows = store.term_documents(table, [])
    if rows <= TIERED_ABOVE or len(terms) == 1:
        return _fts(store, table, " OR ".join(terms), pattern, *scope_args, sort)
    first = _fts(store, table, " AND ".join(terms), pattern, *scope_args, sort)
    if len(first) >= limit:
        return first
    rare_limit = max(RARE_ROWS, int(rows * RARE_SHARE))
    rare = list(phrases)
    for word in dict.fromkeys(content):
        stems = store.index_terms(word)
        counts, _ = store.term_documents(table, stems)
        if stems and max(counts[t] for t in stems) <= rare_limit:
            rare.append(f'"{word}"')
    if not rare:
        return first
    seen = {h.id for h in first}
    second = [
        dataclasses.replace(h, tier=1)
        for h in _fts(store, table, " OR ".join(rare), pattern, *scope_args, sort)
        if h.id not in seen
    ]
    return first + second


def _hit_columns(message: bool) -> str:
    """The columns of a hit (id, kind, conversation, time, role, depth), from alias ``s``."""
    if message:
        return "'msg#' || s.message_id, 'message', s.conversation_id, s.created_at, s.role, NULL"
    return (
        "s.summary_id, 'summary', s.conversation_id, coalesce(s.latest_at, s.created_at),"
        " NULL, s.depth"
    )


def _scope_sql(
    alias: str, ids: Sequence[int] | None, since: str | None, before: str | None, time_col: str
) -> tuple[str, list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if ids is not None:
        clause, values = _in(f"{alias}.conversation_id", ids or [-1])
        where.append(clause)
        params += values
    if since:
        where.append(f"{alias}.{time_col} >= ?")
        params.append(since)
    if before:
        where.append(f"{alias}.{time_col} < ?")
        params.append(before)
    if time_col == "latest_at":  # summaries: retired ones (rewritten, dissolved) are not found
        where.append(f"{alias}.retired_at IS NULL")
    return "".join(f" AND {w}" for w in where), params


def _fts(
    store: Store,
    table: str,
    query: str,
    pattern: str,
    ids: Sequence[int] | None,
    since: str | None,
    before: str | None,
    limit: int,
    sort: Sort,
) -> list[GrepHit]:
    message = table == "messages"
    key = "message_id" if message else "rowid"
    time_col = "created_at" if message else "latest_at"
    extra, params = _scope_sql("s", ids, since, before, time_col)
    # Newest first by row id: the index's own order, so no sort of every match is needed.
    order = {"recency": "f.rowid DESC", "relevance": "score", "hybrid": "score"}[sort]
    cols = _hit_columns(message)
    sql = (
        f"SELECT {cols}, s.content, bm25({table}_fts) AS score FROM {table}_fts f"
        f" JOIN {table} s ON s.{key} = f.rowid WHERE {table}_fts MATCH ?{extra}"
        f" ORDER BY {order} LIMIT ?"
    )
    words = _WORD.findall(pattern)
    if store.backend == "postgresql":
        # The word index is the tsvector column: the same quoted terms, in the syntax of
        # websearch_to_tsquery (which never fails on user text); ts_rank_cd, negated so
        # that, as with bm25(), lower is better.
        if sort == "recency":
            # Newest first by walking the key backwards suits words in many rows; for a
            # selective query that walk reads the whole table to find a few matches (the
            # planner cannot tell: it guesses a word's share), so the word index is used
            # and its few matches sorted ("+ 0" keeps the key's index out of the plan).
            order = f"s.{key} + 0 DESC" if _selective(store, table, query) else f"s.{key} DESC"
        sql = (
            f"SELECT {cols}, s.content, -ts_rank_cd(s.content_tsv, q) AS score FROM {table} s,"
            f" websearch_to_tsquery('english'::regconfig, ?) q WHERE s.content_tsv @@ q{extra}"
            f" ORDER BY {order} LIMIT ?"
        )
        rows = store.fetchall(sql, [store.word_query(query), *params, limit])
    elif sort == "recency":
        rows = store.fetchall(sql, [query, *params, limit])
    else:
        rows = _best_ranked(store, table, key, cols, query, extra, params, limit, sql)
    return [
        GrepHit(
            r[0], r[1], r[2], r[3], r[4], r[5], _snippet(r[6], words[0] if words else None), r[7]
        )
        for r in rows
    ]


def _selective(store: Store, table: str, query: str) -> bool:
    """Whether an all-words query matches few rows: at most :data:`SELECTIVE_SHARE` of them
    by the words' counts (from the store, cached), taken as independent; a phrase always
    is (each row's positions must be checked, which only the index narrows cheaply)."""
    if any(" " in term.strip() for term in _PHRASE.findall(query)):
        return True
    words = _WORD.findall(query)
    stems = store.index_terms(" ".join(words)) if words else []
    if not stems:
        return False
    counts, rows = store.term_documents(table, stems)
    if rows <= 0:
        return True
    expected = float(rows)
    for stem in stems:
        expected *= min(1.0, counts[stem] / rows)
    return expected <= max(SELECTIVE_ROWS, rows * SELECTIVE_SHARE)


def _best_ranked(
    store: Store,
    table: str,
    key: str,
    cols: str,
    query: str,
    extra: str,
    params: list[Any],
    limit: int,
    plain_sql: str,
) -> list[tuple[Any, ...]]:
    """The best-ranked matches, ranked inside the index first: only the top candidates are
    checked against the scope and only the winners' rows are read (reading every candidate's
    row before sorting is what costs). When the scope leaves fewer than *limit* of the
    candidates and the index has more, it is asked for eight times more, at last for all."""
    inner = limit * 4
    by_row = extra.replace("s.conversation_id IN", "+s.conversation_id IN")  # rowid lookups
    while inner <= RANK_CANDIDATES_MAX:
        candidates = store.fetchall(
            f"SELECT rowid, bm25({table}_fts) AS score FROM {table}_fts"
            f" WHERE {table}_fts MATCH ? ORDER BY score LIMIT ?",
            [query, inner],
        )
        score = {int(r[0]): float(r[1]) for r in candidates}
        kept: list[int] = []
        ids = list(score)
        for chunk, marks in in_chunks(ids):
            kept += [
                int(r[0])
                for r in store.fetchall(
                    f"SELECT s.{key} FROM {table} s WHERE s.{key} IN ({marks}){by_row}",
                    [*chunk, *params],
                )
            ]
        if len(kept) >= limit or len(candidates) < inner:
            best = sorted(kept, key=lambda k: score[k])[:limit]
            if not best:
                return []
            marks = ",".join("?" * len(best))
            rows = store.fetchall(
                f"SELECT {cols}, s.content, s.{key} FROM {table} s WHERE s.{key} IN ({marks})",
                best,
            )
            return sorted(((*r[:7], score[int(r[7])]) for r in rows), key=lambda r: float(r[7]))
        inner *= 8
    return store.fetchall(plain_sql, [query, *params, limit])


def _substring(
    store: Store,
    table: str,
    needle: str,
    ids: Sequence[int] | None,
    since: str | None,
    before: str | None,
    limit: int,
) -> tuple[list[GrepHit], bool]:
    """Rows whose text contains *needle* (case-insensitive), newest first, through the
    trigram index; needles of one or two characters (too short for trigrams: a two-character
    CJK word) are looked for in the newest rows only, and the result says if it stopped
    there. Returns the hits and whether the search was bounded."""
    if not needle:
        return [], False
    message = table == "messages"
    if message:
        store.catch_up_indexes()
    key = "message_id" if message else "rowid"
    time_col = "created_at" if message else "latest_at"
    extra, params = _scope_sql("s", ids, since, before, time_col)
    extra = extra.replace("s.conversation_id IN", "+s.conversation_id IN")  # keep the key plan
    cols = _hit_columns(message)
    bounded = False
    # The index is asked for the longest run of the needle without LIKE's wildcards: no ESCAPE
    # clause (with one, SQLite does not use the trigram index), and no % or _ at all, since a
    # wildcard beside non-ASCII text crashes SQLite 3.40's trigram LIKE (detail='none'). The
    # exact check below keeps only the rows that hold the whole needle.
    # (NUL too: SQLite reads a pattern only up to its first NUL.)
    run = max(re.split(r"[%_\x00]", needle), key=len)
    if store.backend == "postgresql" and len(run) >= 3:
        # pg_trgm's GIN index serves ILIKE (any needle: its wildcards are escaped).
        run = needle
        where = "s.content ILIKE ?"
        args: list[Any] = ["%" + re.sub(r"([\\%_])", r"\\\1", needle) + "%"]
    elif len(run) >= 3:
        where = f"s.{key} IN ({_trigram_rows(table)})"
        args = [f"%{run}%"]
    else:
        (newest,) = store.fetchall(f"SELECT coalesce(max({key}), 0) FROM {table}")[0]
        bounded = newest > SHORT_NEEDLE_ROWS
        find = "strpos" if store.backend == "postgresql" else "instr"
        probe = run or needle
        if probe.lower() == probe.upper():  # CJK and digits have no case: no lower() per row
            where = f"s.{key} > ? AND {find}(s.content, ?) > 0"
        else:
            where = f"s.{key} > ? AND {find}(lower(s.content), lower(?)) > 0"
        args = [newest - SHORT_NEEDLE_ROWS, run or needle]
    wanted = needle.lower()
    fetch = limit if run == needle else limit * 4
    rows = store.fetchall(
        f"SELECT {cols}, s.content FROM {table} s WHERE {where}{extra}"
        f" ORDER BY s.{key} DESC LIMIT ?",
        [*args, *params, fetch],
    )
    hits = [
        GrepHit(r[0], r[1], r[2], r[3], r[4], r[5], _snippet(r[6], needle))
        for r in rows
        if wanted in r[6].lower()
    ]
    return hits[:limit], bounded


def _trigram_rows(table: str) -> str:
    """SQLite: the rows whose text may contain a LIKE pattern (one ``?``): what the trigram
    index finds, and the rows holding a NUL character, past which it cannot see."""
    key = "message_id" if table == "messages" else "rowid"
    return (
        f"SELECT rowid FROM {table}_trigram WHERE content LIKE ?"
        f" UNION ALL SELECT {key} FROM {table} WHERE instr(content, char(0)) > 0"
    )


def required_literal(pattern: str) -> str | None:
    """The longest run of literal text every match of *pattern* contains (at least three
    characters, without LIKE's wildcards or NUL), or ``None``: then the search scans rows.

    Read from Python's own parse of the pattern (the ``regex`` module's extra syntax makes it
    fail, and so gives ``None``). Case-insensitive patterns give ``None`` (Unicode case
    folding differs between the engines' LIKE and the pattern's matching), so the index only
    ever narrows to rows that really hold the text."""
    sre_parse: Any = importlib.import_module("re._parser")  # the stdlib's own parser

    try:
        with warnings.catch_warnings():  # its FutureWarnings are about re's syntax, not ours
            warnings.simplefilter("ignore")
            parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - any pattern Python cannot read: no shortcut
        return None
    if parsed.state.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    runs: list[str] = []

    def walk(items: Any) -> None:
        run: list[str] = []
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                run.append(chr(arg))
                continue
            runs.append("".join(run))
            run = []
            if name == "SUBPATTERN" and arg[1] == 0 and arg[2] == 0:  # a plain group
                walk(arg[3])
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and arg[0] >= 1:
                walk(arg[2])  # repeated at least once: its literals are required
            elif name == "ATOMIC_GROUP":
                walk(arg)
        runs.append("".join(run))

    walk(parsed)
    pieces = [p for run in runs for p in re.split(r"[%_\x00]", run) if len(p) >= 3]
    return max(pieces, key=len) if pieces else None


def _files(store: Store, pattern: str, ids: Sequence[int] | None, limit: int) -> list[GrepHit]:
    words = [w.lower() for w in _WORD.findall(pattern)]
    out = []
    for record in store.large_files():
        if ids is not None and record.conversation_id not in ids:
            continue
        text = f"{record.file_name or ''} {record.exploration_summary or ''}".lower()
        if all(w in text for w in words):
            out.append(
                GrepHit(
                    record.file_id,
                    "file",
                    record.conversation_id,
                    record.created_at or "",
                    None,
                    None,
                    _snippet(record.exploration_summary or "", words[0] if words else None),
                )
            )
    return out[:limit]


def _regex(
    store: Store,
    pattern: str,
    ids: Sequence[int] | None,
    scope: Scope,
    since: str | None,
    before: str | None,
    limit: int,
    max_rows: int,
    max_seconds: float,
) -> GrepResult:
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        raise GrepError(f"not a valid regular expression ({exc}); check the pattern") from exc
    except (RecursionError, OverflowError, MemoryError) as exc:
        raise GrepError("the regular expression is nested too deeply or too large") from exc
    deadline = time.monotonic() + max_seconds
    hits: list[GrepHit] = []
    scanned = 0
    truncated = False
    tables = {
        "messages": ["messages"],
        "summaries": ["summaries"],
        "both": ["messages", "summaries"],
        "files": [],
    }[scope]
    literal = required_literal(pattern)
    for table in tables:
        message = table == "messages"
        key = "message_id" if message else "rowid"
        time_col = "created_at" if message else "latest_at"
        extra, params = _scope_sql("s", ids, since, before, time_col)
        extra = extra.replace("s.conversation_id IN", "+s.conversation_id IN")
        if literal is not None:
            if store.backend == "postgresql":
                extra += " AND s.content LIKE ?"  # pg_trgm serves LIKE
                escaped = literal.replace("\\", "\\\\")
                params = [*params, f"%{escaped}%"]
            else:
                if message:
                    store.catch_up_indexes()
                extra += f" AND s.{key} IN ({_trigram_rows(table)})"
                params = [*params, f"%{literal}%"]
        cols = _hit_columns(message)
        below = 1 << 62  # newest first, a page at a time by row id: no sort, no OFFSET
        while len(hits) < limit:
            if time.monotonic() >= deadline:
                truncated = True
                break
            rows = store.fetchall(
                f"SELECT {cols}, s.content, s.{key} FROM {table} s WHERE s.{key} < ?{extra}"
                f" ORDER BY s.{key} DESC LIMIT 500",
                [below, *params],
            )
            if not rows:
                break
            below = rows[-1][7]
            for r in rows:
                scanned += 1
                left = deadline - time.monotonic()
                if scanned > max_rows or left <= 0:
                    truncated = True
                    break
                try:
                    found = compiled.search(r[6], timeout=min(left, 0.5))
                except TimeoutError:
                    truncated = True
                    continue
                if found:
                    hits.append(
                        GrepHit(r[0], r[1], r[2], r[3], r[4], r[5], _snippet(r[6], found.group(0)))
                    )
                    if len(hits) >= limit:
                        break
            if truncated:
                break
    return GrepResult(hits[:limit], truncated=truncated, scanned=scanned)
