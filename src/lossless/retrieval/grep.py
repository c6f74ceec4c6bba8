"""``lcm_grep``: search stored messages, summaries and large files.

* ``full_text`` — the porter FTS index, ranked by BM25 (``relevance``), newest first
  (``recency``) or both (``hybrid``). User text never reaches FTS syntax raw: words are quoted,
  ``"phrases"`` kept; with ``relevance``/``hybrid`` a document matching some of the words is
  found and ranked (OR), with ``recency`` all words must match (AND). Regex syntax in this mode
  is refused with an explanation of the two modes. Text with CJK characters, and substrings the
  word index cannot find, go through the trigram index.
* ``regex`` — a regular expression over the text, newest first, bounded: at most
  ``max_rows`` rows scanned, ``max_seconds`` in all, and a time limit on each match, so a
  catastrophic pattern cannot hang the caller.

The conversation scope is a list of conversation ids (the engine defaults it to the current
conversation's family); results carry ids (``msg#``, ``sum_``, ``file_``), conversation, time,
role or kind and a snippet.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import regex

from ..errors import LosslessError

if TYPE_CHECKING:
    from ..store.sqlite import SQLiteStore

__all__ = ["GrepError", "GrepHit", "GrepResult", "grep"]

Mode = Literal["full_text", "regex"]
Scope = Literal["messages", "summaries", "both", "files"]
Sort = Literal["recency", "relevance", "hybrid"]

MAX_LIMIT = 200
_CJK = re.compile("[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_REGEX_HINTS = re.compile(r"\.\*|\.\+|\\[dwsbDWSB]|\[[^\]]+\]|\(\?|[^\\]\|[^|]|^\^|\$$|\{\d")
_WORD = re.compile(r"\w+", re.UNICODE)
_PHRASE = re.compile(r'"([^"]+)"')


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
    phrases = _PHRASE.findall(pattern)
    rest = _PHRASE.sub(" ", pattern)
    terms = [f'"{p.replace(chr(34), "")}"' for p in phrases if p.strip()]
    terms += [f'"{w}"' for w in _WORD.findall(rest)]
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
    store: SQLiteStore,
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
    any_word = sort != "recency"
    cjk = bool(_CJK.search(pattern))
    for table in tables[scope]:
        if not cjk:
            hits += _fts(
                store,
                table,
                _fts_query(pattern, any_word=any_word),
                pattern,
                conversation_ids,
                since,
                before,
                limit,
                sort,
            )
        if cjk or len(hits) < limit:
            seen = {h.id for h in hits}
            hits += [
                h
                for h in _substring(
                    store, table, pattern.strip(), conversation_ids, since, before, limit
                )
                if h.id not in seen
            ]
    if sort == "recency":
        hits.sort(key=lambda h: h.created_at, reverse=True)
    else:
        hits.sort(key=lambda h: (h.score if h.score is not None else 1e9, h.created_at))
    return GrepResult(hits[:limit])


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
    return "".join(f" AND {w}" for w in where), params


def _fts(
    store: SQLiteStore,
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
    order = {"recency": f"s.{time_col} DESC", "relevance": "score", "hybrid": "score"}[sort]
    cols = _hit_columns(message)
    sql = (
        f"SELECT {cols}, s.content, bm25({table}_fts) AS score FROM {table}_fts f"
        f" JOIN {table} s ON s.{key} = f.rowid WHERE {table}_fts MATCH ?{extra}"
        f" ORDER BY {order} LIMIT ?"
    )
    words = _WORD.findall(pattern)
    rows = store.fetchall(sql, [query, *params, limit])
    return [
        GrepHit(
            r[0], r[1], r[2], r[3], r[4], r[5], _snippet(r[6], words[0] if words else None), r[7]
        )
        for r in rows
    ]


def _substring(
    store: SQLiteStore,
    table: str,
    needle: str,
    ids: Sequence[int] | None,
    since: str | None,
    before: str | None,
    limit: int,
) -> list[GrepHit]:
    if len(needle) < 3:
        return []  # the trigram index needs three characters
    message = table == "messages"
    if message:
        store.catch_up_indexes()
    key = "message_id" if message else "rowid"
    time_col = "created_at" if message else "latest_at"
    extra, params = _scope_sql("s", ids, since, before, time_col)
    like = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    cols = _hit_columns(message)
    sql = (
        f"SELECT {cols}, s.content FROM {table}_trigram t JOIN {table} s ON s.{key} = t.rowid"
        f" WHERE t.content LIKE ? ESCAPE '\\'{extra} ORDER BY s.{time_col} DESC LIMIT ?"
    )
    rows = store.fetchall(sql, [like, *params, limit])
    return [GrepHit(r[0], r[1], r[2], r[3], r[4], r[5], _snippet(r[6], needle)) for r in rows]


def _files(
    store: SQLiteStore, pattern: str, ids: Sequence[int] | None, limit: int
) -> list[GrepHit]:
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
    store: SQLiteStore,
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
    for table in tables:
        message = table == "messages"
        time_col = "created_at" if message else "latest_at"
        extra, params = _scope_sql("s", ids, since, before, time_col)
        cols = _hit_columns(message)
        offset = 0
        while len(hits) < limit:
            rows = store.fetchall(
                f"SELECT {cols}, s.content FROM {table} s WHERE 1 = 1{extra}"
                f" ORDER BY s.{time_col} DESC LIMIT 500 OFFSET ?",
                [*params, offset],
            )
            if not rows:
                break
            offset += len(rows)
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
