"""``lcm_grep``: search stored messages, summaries and large files.

* ``full_text`` — the porter FTS index, ranked by BM25 (``relevance``) or newest first
  (``recency``). User text never reaches FTS syntax raw: words are quoted,
  ``"phrases"`` kept, and a question's stop words left out when it has other words. A document
  matching any of the words is found: ranked, a message is also found through the messages
  around it (see :mod:`lossless.store.search`); newest first, the words must be in the
  message itself. Regex syntax in this mode is refused with an explanation of the two modes.
  Text with CJK characters, and substrings the word index cannot find, go through the trigram
  index.
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
import functools
import os
import re
from collections.abc import Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Literal

import regex

from ..codec import clean_text, loads
from ..store.search import SearchScope, TextRow, WordOrder
from .grep_regex import Scope, _files, _regex
from .grep_text import (
    _PHRASE,
    GrepError,
    GrepHit,
    GrepResult,
    _fts_query,
    _hit,
    _quoted,
    _terms,
    check_length,
    match_spans,
    named_time,
    time_bound,
)
from .tools import MAX_REACH

if TYPE_CHECKING:
    from ..store.base import Store

__all__ = [
    "GrepError",
    "GrepHit",
    "GrepResult",
    "Mode",
    "Scope",
    "Sort",
    "grep",
    "match_spans",
]

Mode = Literal["full_text", "regex"]
Sort = Literal["recency", "relevance"]

MAX_LIMIT = 200
_CJK = re.compile("[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_REGEX_HINTS = re.compile(r"\.\*|\.\+|\\[dwsbDWSB]|\[[^\]]+\]|\(\?|[^\\]\|[^|]|^\^|\$$|\{\d")
#: Above this many indexed rows, a relevance search ranks in tiers (see :func:`_ranked`).
TIERED_ABOVE = 20_000
#: A word in at most this share of the rows (or this many) is rare enough to rank alone.
RARE_SHARE = 0.01
RARE_ROWS = 1_000


def _scope(
    ids: Sequence[int] | None,
    since: str | None = None,
    before: str | None = None,
    archived: bool = True,
) -> SearchScope:
    return SearchScope(None if ids is None else tuple(ids), since, before, archived)


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
    offset: int = 0,
    reveal: bool = False,
    archived: bool = True,
) -> GrepResult:
    """Search the store; see the module docstring for the modes and their bounds. *offset*
    skips that many hits (the pages of one search); the result says whether more follow.
    With *reveal*, the originals of messages whose secrets were masked are searched too
    (their matches first, snipped from the original): a secret's value is found only so.
    With *archived* false, a search of the whole store (no *conversation_ids*) leaves out
    the archived conversations; conversations named are searched whatever their status."""
    if offset < 0 or offset + limit > MAX_REACH:
        raise GrepError(
            f"offset must be from 0, and offset + limit at most {MAX_REACH:,}: narrow the"
            " search (other words, since/before, a conversation) rather than page that far"
        )
    found = _search(
        store,
        pattern,
        conversation_ids=conversation_ids,
        mode=mode,
        scope=scope,
        since=since,
        before=before,
        limit=offset + limit + 1,
        sort=sort,
        max_rows=max_rows,
        max_seconds=max_seconds,
        page=limit,
        archived=archived,
    )
    if reveal and scope in ("messages", "both"):
        bounds = _scope(conversation_ids, time_bound(since, "since"), time_bound(before, "before"))
        exact = _revealed(store, clean_text(pattern), mode, bounds)
        ids = {h.id for h in exact}
        found = dataclasses.replace(found, hits=exact + [h for h in found.hits if h.id not in ids])
    page = found.hits[offset : offset + limit]
    more = len(found.hits) > offset + limit
    return dataclasses.replace(
        found,
        hits=_lead_back(store, page),
        more=more,
        next_offset=offset + limit if more else None,
    )


def _search(
    store: Store,
    pattern: str,
    *,
    conversation_ids: Sequence[int] | None,
    mode: Mode,
    scope: Scope,
    since: str | None,
    before: str | None,
    limit: int,
    sort: Sort,
    max_rows: int,
    max_seconds: float,
    page: int,
    archived: bool,
) -> GrepResult:
    """:func:`grep`'s first *limit* hits, unsnipped (the page is made from them)."""
    if mode not in ("full_text", "regex"):
        raise GrepError(f"unknown mode {mode!r}; use full_text or regex")
    if scope not in ("messages", "summaries", "both", "files"):
        raise GrepError(f"unknown scope {scope!r}; use messages, summaries, both or files")
    if sort == "hybrid":  # type: ignore[comparison-overlap]  # (a caller may still send it)
        raise GrepError(
            "sort=hybrid is gone: fusing a dense (embedding) ranking with relevance found less"
            " than relevance alone when measured (docs/benchmarks.md); use relevance (the"
            " default) or recency"
        )
    if sort not in ("recency", "relevance"):
        raise GrepError(f"unknown sort {sort!r}; use relevance or recency")
    if not 1 <= page <= MAX_LIMIT:
        raise GrepError(f"limit must be from 1 to {MAX_LIMIT}")
    if not pattern or not pattern.strip():
        raise GrepError("the pattern is empty; give words (full_text) or a regular expression")
    check_length(pattern, "pattern")
    # Stored text has no lone surrogates (they become U+FFFD), and SQLite cannot take them.
    pattern = clean_text(pattern)
    since, before = time_bound(since, "since"), time_bound(before, "before")
    within = _scope(conversation_ids, since, before, archived)
    if mode == "regex":
        return _regex(store, pattern, within, scope, limit, max_rows, max_seconds)
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
        return GrepResult(_files(store, pattern, within, limit))
    cjk = bool(_CJK.search(pattern))
    named = named_time(pattern) if sort == "relevance" else None
    needle = pattern.replace('"', " ").strip()

    def search(table: str) -> tuple[list[GrepHit], bool]:
        found: list[GrepHit] = []
        cut = False
        if not cjk:
            if sort == "recency":
                found = _newest(store, table, pattern, within, limit)
            else:
                found = _relevant(store, table, pattern, within, limit, named)
        # Substrings the word index cannot see (inside a word, CJK): one token, or nothing
        # found by its words. Not for a longer run of words with whole words inside it (a
        # question): text holding it as written holds those words, which the index was asked
        # for; looking for the whole run as one substring would cost a read of every row
        # holding its common trigrams, to find nothing. Summaries (long texts, each checked
        # in full) are searched so for a token only when its words found none.
        tokens = needle.split()
        few = not found if table == "summaries" else len(found) < limit
        if cjk or (few and len(tokens) == 1) or (not found and not _worded(store, tokens)):
            seen = {h.id for h in found}
            rows, cut = store.substring_search(table, needle, within, limit)
            found += [h for h in (_hit(r, needle) for r in rows) if h.id not in seen]
        return found, cut

    # Both tables at once: the summaries in a thread of the search's own while this one
    # searches the messages (each waits on its database, not on Python), unless this thread
    # is in a transaction, which another thread would not see.
    hits: list[GrepHit] = []
    truncated = False
    later = None
    names = tables[scope]
    if len(names) > 1 and not store.in_transaction():
        later = _searching().submit(search, names[-1])
        names = names[:-1]
    try:
        for table in names:
            found, cut = search(table)
            hits += found
            truncated |= cut
    except BaseException:
        if later is not None:
            # The summaries' search reads this store too: it ends before the error goes up,
            # or a caller that closes the store on it closes a connection in use (a crash).
            futures.wait([later])
        raise
    if later is not None:
        found, cut = later.result()
        hits += found
        truncated |= cut
    if sort == "recency":  # newest first, those with every word before the others
        hits.sort(key=lambda h: h.created_at, reverse=True)
        hits.sort(key=lambda h: h.tier)
    else:
        # Stable: ties keep the order the index gave them (newest first), page after page.
        hits.sort(key=lambda h: (h.tier, h.score if h.score is not None else 1e9))
    return GrepResult(hits[:limit], truncated=truncated)


#: Threads searching summaries beside the messages, for all searches of the process.
SEARCH_THREADS = 4


@functools.cache
def _searching() -> ThreadPoolExecutor:
    """The threads a search of messages and summaries searches the summaries in (this
    process's own: a forked child has none of its parent's threads, and makes its own)."""
    return ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="lossless-grep")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_searching.cache_clear)


#: A run of at least this many words is found through its words alone (see :func:`_search`).
WORDED_RUN = 4


def _worded(store: Store, tokens: list[str]) -> bool:
    """Whether a run of *tokens* is long enough, with words the index keeps inside it (its
    first and last tokens may be pieces of longer words), to be found through its words."""
    return len(tokens) >= WORDED_RUN and bool(store.index_terms(" ".join(tokens[1:-1])))


def _fair(store: Store, table: str, pattern: str, hits: list[GrepHit]) -> list[GrepHit]:
    """*hits* of *table* with their scores on the messages' scale, so summaries and messages
    are ranked against each other fairly (see ``score_scale`` of the store)."""
    phrases, words = _terms(pattern)
    scale = store.score_scale(table, store.index_terms(" ".join([*phrases, *words])))
    if scale == 1.0:
        return hits
    return [
        dataclasses.replace(h, score=h.score * scale) if h.score is not None else h for h in hits
    ]


def _revealed(store: Store, pattern: str, mode: Mode, within: SearchScope) -> list[GrepHit]:
    """The messages in *within* whose kept originals (secrets masked) match *pattern*: every
    word of it (full text, any case) or the regular expression; newest first."""
    words = [w.lower() for w in pattern.replace('"', " ").split()]
    compiled = regex.compile(pattern) if mode == "regex" else None
    matched: dict[int, str] = {}
    for message_id, original in store.masked_originals():
        text = str(loads(original.decode("utf-8")).get("content", ""))
        if compiled is not None:
            if compiled.search(text):
                matched[message_id] = text
        elif all(w in text.lower() for w in words):
            matched[message_id] = text
    hits = []
    for m in store.get_messages_by_id(list(matched)):
        if within.conversation_ids is not None and m.conversation_id not in within.conversation_ids:
            continue
        if (within.since and m.created_at < within.since) or (
            within.before and m.created_at >= within.before
        ):
            continue
        row = TextRow(
            f"msg#{m.message_id}",
            "message",
            m.conversation_id,
            m.created_at,
            m.role,
            None,
            matched[m.message_id],
        )
        hits.append(_hit(row, pattern, literal=True))
    return sorted(hits, key=lambda h: h.created_at, reverse=True)


def _lead_back(store: Store, hits: list[GrepHit]) -> list[GrepHit]:
    """The summary hits with the messages each covers named: where ``lcm_describe`` and
    ``lcm_expand`` lead from it."""
    covered = store.covered_messages([h.id for h in hits if h.kind == "summary"])
    out = []
    for hit in (h.snipped() for h in hits):
        if hit.id in covered:
            count, first, last = covered[hit.id]
            span = f"msg#{first}" if first == last else f"msg#{first}..msg#{last}"
            hit = dataclasses.replace(hit, covers=f"{count} message(s), {span}")
        out.append(hit)
    return out


def _newest(
    store: Store, table: str, pattern: str, within: SearchScope, limit: int
) -> list[GrepHit]:
    """Newest first: the rows holding every word (in their own text), then, when they are
    fewer than *limit*, those holding some of them (tier 1), newest first too."""
    first = _fts(
        store, table, _fts_query(pattern, any_word=False), pattern, within, limit, "recency"
    )
    if len(first) >= limit or len(_quoted(pattern)) == 1:
        return first
    seen = {h.id for h in first}
    more = _fts(store, table, _fts_query(pattern, any_word=True), pattern, within, limit, "recency")
    return (
        first
        + [dataclasses.replace(h, tier=1) for h in more if h.id not in seen][: limit - len(first)]
    )


def _ranked(
    store: Store,
    table: str,
    pattern: str,
    within: SearchScope,
    limit: int,
    pool: int | None = None,
) -> list[GrepHit]:
    """A relevance search: documents matching some of the words, ranked by BM25, a message
    found through what surrounds it too.

    A question's stop words are left out when it has other words. On a large index this is
    done in tiers, so that common words never make the whole index the candidate set: first
    the documents holding every word themselves, ranked by their own words; then, if they are
    fewer than the limit, those matching any of the rare words (in at most 1% of the rows),
    ranked with their surroundings, after them. A small index ranks one OR query over all
    the words, with the surroundings. With *pool*, each query returns that many (the tiers
    are still chosen by *limit*: the rare words are looked for only when fewer than *limit*
    hold every word).
    """
    phrases, content = _terms(pattern)
    terms = _quoted(pattern)
    counts, rows = store.term_documents(table, [])
    if rows <= TIERED_ABOVE or len(terms) == 1:
        return _fts(store, table, " OR ".join(terms), pattern, within, pool or limit, "context")
    # Every word, each where it was said (the own-words index: counting a common word's rows
    # for BM25 there costs a fifth of what it does with the surroundings).
    query = _fts_query(pattern, any_word=False)
    first = _fts(store, table, query, pattern, within, pool or limit, "rank")
    if len(first) >= limit:
        return first
    rare_limit = max(RARE_ROWS, int(rows * RARE_SHARE))
    rare = [f'"{p}"' for p in phrases]
    for word in content:
        stems = store.index_terms(word)
        counts, _ = store.term_documents(table, stems)
        if stems and max(counts[t] for t in stems) <= rare_limit:
            rare.append(f'"{word}"')
    if not rare:
        return first
    seen = {h.id for h in first}
    second = [
        dataclasses.replace(h, tier=1)
        for h in _fts(store, table, " OR ".join(rare), pattern, within, pool or limit, "context")
        if h.id not in seen
    ]
    return first + second


#: How many hits a relevance search ranks before it keeps the best: the replies to the
#: questions among them, and what was said at a time it names, move up from there.
CANDIDATES = 50
#: A message that ends asking a question passes this share of its score to the reply after
#: it: what a search finds a question about is answered in the next message, in other words.
ANSWER_SHARE = 0.5
#: A message that asks at its end (a "?" followed by nothing but spaces, quotes, emoji...):
#: one that asks and then says something else is not waiting for a reply.
_ASKS = re.compile(r"\?\W*$")
#: How far up a hit said at the time a search names moves: by this share of the best hit's
#: score (a hit of the named day with half the best score ranks beside the best).
DATE_BONUS = 0.5


def _relevant(
    store: Store,
    table: str,
    pattern: str,
    within: SearchScope,
    limit: int,
    named: tuple[str, str] | None,
) -> list[GrepHit]:
    """The best *limit* hits of *table* for *pattern*, ranked by relevance (:func:`_ranked`):
    among the first :data:`CANDIDATES`, a message's reply to a question found moved up
    (:func:`_answered`) and what was said at a time the search names (:func:`_dated`); past
    them, the index's order. The first candidates are the same for every page of a search,
    so its pages follow on without repeats or gaps."""
    ranked = _fair(
        store, table, pattern, _ranked(store, table, pattern, within, limit, max(limit, CANDIDATES))
    )
    head = ranked[:CANDIDATES]
    then = _then(within, named)
    if then is not None:
        seen = {h.id for h in head}
        more = _fair(store, table, pattern, _ranked(store, table, pattern, then, limit, CANDIDATES))
        head += [h for h in more if h.id not in seen]
    if table == "messages":
        head = _answered(store, pattern, head, within)
        # A reply found only through its question ranks no lower than the candidates: every
        # hit of the first ones stays ahead of what lies past them, on every page.
        worst = max((h.score for h in ranked[:CANDIDATES] if h.score is not None), default=None)
        if worst is not None:
            head = [
                dataclasses.replace(h, score=worst)
                if h.score is not None and h.score > worst
                else h
                for h in head
            ]
    if then is not None:
        head = _dated(head, then)
    # Stable: ties keep the order the index gave them (newest first), page after page.
    head.sort(key=lambda h: (h.tier, h.score if h.score is not None else 1e9))
    shown = {h.id for h in head}
    return [*head, *(h for h in ranked[CANDIDATES:] if h.id not in shown)][:limit]


def _answered(
    store: Store, pattern: str, hits: list[GrepHit], within: SearchScope
) -> list[GrepHit]:
    """*hits* with the reply to each question among them (the next message of its
    conversation, in *within*) given :data:`ANSWER_SHARE` of the question's score on top of
    its own: found so even where it shares none of the search's words."""
    asking = {
        int(h.id[4:]): h
        for h in hits
        if h.kind == "message" and h.score is not None and h.text and _ASKS.search(h.text[-200:])
    }
    if not asking:
        return hits
    by_id = {h.id: h for h in hits}
    for asked, row in store.replies(list(asking), within).items():
        question = asking[asked]
        reply = by_id.get(row.id)
        if reply is None:
            reply = dataclasses.replace(_hit(row, pattern), score=0.0, tier=question.tier)
        by_id[row.id] = dataclasses.replace(
            reply, score=(reply.score or 0.0) + ANSWER_SHARE * (question.score or 0.0)
        )
    return list(by_id.values())


def _then(within: SearchScope, named: tuple[str, str] | None) -> SearchScope | None:
    """*within* narrowed to the time a search names; ``None`` when it names none, or one
    outside the range it was given."""
    if named is None:
        return None
    since = max(filter(None, (within.since, named[0])))
    before = min(filter(None, (within.before, named[1])))
    return dataclasses.replace(within, since=since, before=before) if since < before else None


def _dated(hits: list[GrepHit], then: SearchScope) -> list[GrepHit]:
    """*hits* with those said at the time the search names (:func:`named_time`: "on 9
    November 2022", "in May 2023") moved up by :data:`DATE_BONUS` of the best score: what
    was said then, about those words, is what a search naming a date asks for."""
    best = min((h.score for h in hits if h.score is not None), default=None)
    if best is None:
        return hits
    bonus = DATE_BONUS * abs(best)
    since, before = then.since or "", then.before or "\uffff"
    return [
        dataclasses.replace(h, score=h.score - bonus)
        if h.score is not None and since <= h.created_at < before
        else h
        for h in hits
    ]


def _fts(
    store: Store,
    table: str,
    query: str,
    pattern: str,
    within: SearchScope,
    limit: int,
    order: WordOrder,
) -> list[GrepHit]:
    rows = store.word_search(table, query, within, limit, order=order)
    return [_hit(r, pattern) for r in rows]
