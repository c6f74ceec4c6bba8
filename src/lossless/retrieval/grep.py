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
import importlib
import itertools
import os
import re
import time
import warnings
from collections.abc import Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import regex

from ..codec import clean_text, loads
from ..errors import LosslessError
from ..store.search import SearchScope, TextRow, WordOrder
from ..timestamps import format_ts, parse_ts
from .tools import MAX_REACH

if TYPE_CHECKING:
    from ..store.base import Store

__all__ = ["GrepError", "GrepHit", "GrepResult", "grep", "match_spans"]

Mode = Literal["full_text", "regex"]
Scope = Literal["messages", "summaries", "both", "files"]
Sort = Literal["recency", "relevance"]

MAX_LIMIT = 200
#: A snippet's window is chosen among those starting at the first this many matches (a long
#: summary can hold thousands of them).
SNIPPET_CANDIDATES = 24
#: How much of a text the snippet's window is looked for in, in characters.
SNIPPET_SCAN = 8_000
#: The longest pattern a search takes, in characters: longer text is not something said to
#: find a message by, and the regex engine's time limit does not bound long literals.
MAX_PATTERN_CHARS = 2_000
_CJK = re.compile("[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_REGEX_HINTS = re.compile(r"\.\*|\.\+|\\[dwsbDWSB]|\[[^\]]+\]|\(\?|[^\\]\|[^|]|^\^|\$$|\{\d")
_WORD = re.compile(r"\w+", re.UNICODE)
_PHRASE = re.compile(r'"([^"]+)"')
_JOINED = re.compile(r"\w[-./:@#+]\w")
_EDGES = re.compile(r"^\W+|\W+$")
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


def check_length(text: str, name: str) -> None:
    """Refuse search text over :data:`MAX_PATTERN_CHARS` characters, saying what to do."""
    if len(text) > MAX_PATTERN_CHARS:
        raise GrepError(
            f"the {name} is {len(text):,} characters; a search takes at most"
            f" {MAX_PATTERN_CHARS:,}: search for a distinctive part of it"
        )


def time_bound(value: str | None, name: str) -> str | None:
    """A ``since``/``before`` bound as the store compares it (UTC, ISO-8601); text that is
    not a time is a :class:`GrepError` (compared as text it would match nothing, or all)."""
    if value is None or not value.strip():
        return None
    parsed = parse_ts(clean_text(value).strip())
    if parsed is None:
        raise GrepError(
            f"{name} must be an ISO-8601 time, e.g. 2026-03-02 or 2026-03-02T09:30Z, not"
            f" {value[:40]!r}"
        )
    return format_ts(parsed)


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
    #: For a summary: the messages below it (how many, the first and last), the way back to
    #: the exact originals.
    covers: str | None = None
    #: The row's text and what its snippet is made around, until the snippet is made (only
    #: the hits a search returns get one).
    text: str | None = dataclasses.field(default=None, repr=False, compare=False)
    around: str | None = dataclasses.field(default=None, repr=False, compare=False)
    literal: bool = dataclasses.field(default=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``covers`` only for summaries). Every field is a plain value: read
        one by one, not deep-copied (``asdict`` took 40% of a search's time)."""
        out = {name: getattr(self, name) for name in _HIT_FIELDS}
        if out["covers"] is None:
            del out["covers"]
        return out

    def snipped(self) -> GrepHit:
        """This hit with its snippet made (once the search has chosen it)."""
        if self.text is None:
            return self
        snippet = _snippet(self.text, self.around, literal=self.literal)
        # Its fields copied with three changed (dataclasses.replace, which reads every field's
        # definition and runs the frozen __init__, was an eighth of a small search in a profile).
        made = object.__new__(GrepHit)
        made.__dict__.update(self.__dict__, snippet=snippet, text=None, around=None)
        return made


#: What a hit's JSON form holds: its fields but the text and what its snippet is made around.
_HIT_FIELDS = tuple(
    f.name for f in dataclasses.fields(GrepHit) if f.name not in ("text", "around", "literal")
)


@dataclass(frozen=True)
class GrepResult:
    """Matches, whether a bound stopped the search early, and whether more hits follow this
    page (ask again with ``offset=next_offset``)."""

    hits: list[GrepHit]
    truncated: bool = False
    scanned: int = 0
    more: bool = False
    next_offset: int | None = None


def _split(pattern: str) -> tuple[list[str], list[str], list[str]]:
    """A search's "phrases", its words and the pieces of its joined words, each once. Words
    joined by ``-./:@#+`` (``OPS-01234``, ``cursor-based``, ``v2.3``) are a phrase as typed
    (each index then splits it as it split the text; the pieces alone would find every
    ``OPS``), and their pieces count as words only where any word will do."""
    phrases = [p for p in _PHRASE.findall(pattern) if p.strip()]
    words: list[str] = []
    pieces: list[str] = []
    for chunk in _PHRASE.sub(" ", pattern).split():
        found = _WORD.findall(chunk)
        if len(found) > 1 and _JOINED.search(chunk):
            phrases.append(_EDGES.sub("", chunk.replace('"', " ")))  # (a stray quote)
            pieces += found
        else:
            words += found
    return list(dict.fromkeys(phrases)), words, pieces


def _terms(pattern: str) -> tuple[list[str], list[str]]:
    """What a search looks for: its "phrases", and its words, each once — stop words left out
    when it has anything else (a question's "the" and "did" say nothing of what is asked)."""
    phrases, words, _ = _split(pattern)
    content = [w for w in words if w.lower() not in STOP_WORDS]
    return phrases, list(dict.fromkeys(content or ([] if phrases else words)))


def _quoted(pattern: str, *, any_word: bool = True) -> list[str]:
    """The search's terms quoted for the word index (user text never reaches its syntax);
    with *any_word*, the pieces of its joined words too."""
    phrases, words = _terms(pattern)
    if any_word:
        _, _, pieces = _split(pattern)
        words = list(dict.fromkeys([*words, *(p for p in pieces if p.lower() not in STOP_WORDS)]))
    terms = [f'"{p}"' for p in phrases] + [f'"{w}"' for w in words]
    if not terms:
        raise GrepError(f"nothing to search for in {pattern!r}; give some words")
    return terms


def _fts_query(pattern: str, *, any_word: bool) -> str:
    """A safe word-index query: quoted words and "phrases", any or all of them."""
    return (" OR " if any_word else " AND ").join(_quoted(pattern, any_word=any_word))


@functools.lru_cache(maxsize=64)
def _needles(pattern: str | None) -> tuple[tuple[str, bool], ...]:
    """What a search's words (:func:`_terms`) look like in a text, lowercased: each quoted
    phrase as it is, and each word as the start of the forms that share its stem (``deploy``
    finds ``deployed``; the flag says it must start a word)."""
    if not pattern:
        return ()
    phrases, words = _terms(pattern)
    words += _split(pattern)[2]
    out = [(" ".join(p.split()).lower(), False) for p in phrases]
    for word in dict.fromkeys(w.lower() for w in words):
        out.append((word[: max(4, len(word) - 3)] if len(word) > 5 else word, True))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _matcher(pattern: str | None) -> regex.Pattern[str] | None:
    """Where a search's words occur in a text (see :func:`_needles`), case-insensitively.
    Made once per search, not per hit."""
    needles = _needles(pattern)
    alternatives = [
        rf"\b{regex.escape(text)}\w*" if word else regex.escape(text) for text, word in needles
    ]
    return regex.compile("|".join(alternatives), regex.IGNORECASE) if alternatives else None


def _found(flat: str, pattern: str | None, upto: int, most: int) -> list[tuple[int, str]]:
    """Where the search's words occur in *flat* before *upto*, at most *most* of each, as
    (position, the matched text lowercased), in order: plain substring finds on the
    lowercased text (a regular expression of alternatives reads a long text several times
    slower)."""
    low = flat.lower()
    if len(low) != len(flat):  # lowercasing moved characters: let the matcher find them
        found = _matcher(pattern)
        matches = itertools.islice(found.finditer(flat, 0, upto), most) if found else ()
        return [(m.start(), m.group().lower()) for m in matches]
    spans: list[tuple[int, str]] = []
    for text, word in _needles(pattern):
        at, taken = low.find(text, 0, upto), 0
        while at >= 0 and taken < most:
            if not word or at == 0 or not (low[at - 1].isalnum() or low[at - 1] == "_"):
                end = at + len(text)
                while word and end < len(low) and (low[end].isalnum() or low[end] == "_"):
                    end += 1
                spans.append((at, low[at:end]))
                taken += 1
            at = low.find(text, at + 1, upto)
    return sorted(spans)


def match_spans(text: str, pattern: str | None) -> list[tuple[int, int]]:
    """The spans of *text* where the search's words (see :func:`_matcher`) occur: what a
    shell highlights in a snippet."""
    found = _matcher(pattern)
    return [m.span() for m in found.finditer(text)] if found else []


def _snippet(text: str, pattern: str | None, width: int = 160, *, literal: bool = False) -> str:
    """About *width* characters of *text* around its best match: the window holding the most
    of the search's different words (then the most matches), not the first word's first
    occurrence."""
    # The window is chosen among the matches in the first SNIPPET_SCAN characters (a long
    # tool output or summary is not read whole for 160 of them); past them, the first match.
    head = SNIPPET_SCAN + 2 * width
    cut = len(text) > head  # only the start is read while a match is found there
    flat = " ".join((text[:head] if cut else text).split())
    found = None if literal else _matcher(pattern)
    spans: list[tuple[int, str]] = []
    if found:
        spans = _found(flat, pattern, SNIPPET_SCAN, 2 * SNIPPET_CANDIDATES)
        if not spans and cut:
            flat, cut = " ".join(text.split()), False
            later = found.search(flat, SNIPPET_SCAN)
            spans = [(later.start(), later.group().lower())] if later else []
    if not spans and cut:
        flat, cut = " ".join(text.split()), False
    if not spans and pattern:  # a substring inside a word (or CJK): where it first occurs
        at = flat.lower().find(" ".join(pattern.replace('"', " ").split()).lower())
        spans = [(at, pattern.lower())] if at >= 0 else []
    if not spans or len(flat) <= width:
        return flat[:width] + ("…" if len(flat) > width or cut else "")
    best, best_score = 0, (-1, -1)
    lead = width // 4
    spans.sort()
    j = 0
    for at, _ in spans[:SNIPPET_CANDIDATES]:  # (windows in order: the matches in each slide)
        start = max(0, min(at - lead, len(flat) - width))
        while j < len(spans) and spans[j][0] < start:
            j += 1
        inside = []
        for a, w in spans[j:]:
            if a + len(w) > start + width:
                break
            inside.append(w)
        score = (len({w[:5] for w in inside}), len(inside))
        if score > best_score:
            best, best_score = start, score
    start = best
    if start:  # begin at a word
        space = flat.find(" ", start, start + 20)
        start = space + 1 if space >= 0 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", end - 20, end)
        end = space if space > start else end
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) or cut else "")


def _hit(row: TextRow, pattern: str | None, *, literal: bool = False) -> GrepHit:
    """A hit; with *literal*, the snippet is around where *pattern* (a regex's match) first
    occurs, as it is, not around the words it holds."""
    return GrepHit(
        row.id,
        row.kind,
        row.conversation_id,
        row.created_at,
        row.role,
        row.depth,
        "",
        row.score,
        text=row.content,
        around=pattern,
        literal=literal,
    )


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
    needle = pattern.replace('"', " ").strip()

    def search(table: str) -> tuple[list[GrepHit], bool]:
        found: list[GrepHit] = []
        cut = False
        if not cjk:
            if sort == "recency":
                found = _newest(store, table, pattern, within, limit)
            else:
                found = _fair(store, table, pattern, _ranked(store, table, pattern, within, limit))
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
    store: Store, table: str, pattern: str, within: SearchScope, limit: int
) -> list[GrepHit]:
    """A relevance search: documents matching some of the words, ranked by BM25, a message
    found through what surrounds it too.

    A question's stop words are left out when it has other words. On a large index this is
    done in tiers, so that common words never make the whole index the candidate set: first
    the documents holding every word themselves, ranked by their own words; then, if they are
    fewer than the limit, those matching any of the rare words (in at most 1% of the rows),
    ranked with their surroundings, after them. A small index ranks one OR query over all
    the words, with the surroundings.
    """
    phrases, content = _terms(pattern)
    terms = _quoted(pattern)
    counts, rows = store.term_documents(table, [])
    if rows <= TIERED_ABOVE or len(terms) == 1:
        return _fts(store, table, " OR ".join(terms), pattern, within, limit, "context")
    # Every word, each where it was said (the own-words index: counting a common word's rows
    # for BM25 there costs a fifth of what it does with the surroundings).
    first = _fts(store, table, _fts_query(pattern, any_word=False), pattern, within, limit, "rank")
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
        for h in _fts(store, table, " OR ".join(rare), pattern, within, limit, "context")
        if h.id not in seen
    ]
    return first + second


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


def _files(store: Store, pattern: str, within: SearchScope, limit: int) -> list[GrepHit]:
    words = [w.lower() for w in _WORD.findall(pattern)]
    ids = within.conversation_ids
    left_out = (
        set() if ids is not None or within.archived else set(store.archived_conversation_ids())
    )
    out = []
    for record in store.large_files():
        if (ids is not None and record.conversation_id not in ids) or (
            record.conversation_id in left_out
        ):
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
                    _snippet(record.exploration_summary or "", pattern),
                )
            )
    return out[:limit]


def _regex(
    store: Store,
    pattern: str,
    within: SearchScope,
    scope: Scope,
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
        pages = store.scan_newest(table, within, containing=literal)
        while len(hits) < limit:
            if time.monotonic() >= deadline:
                truncated = True
                break
            rows = next(pages, None)
            if not rows:
                break
            for r in rows:
                scanned += 1
                left = deadline - time.monotonic()
                if scanned > max_rows or left <= 0:
                    truncated = True
                    break
                try:
                    found = compiled.search(r.content, timeout=min(left, 0.5))
                except TimeoutError:
                    truncated = True
                    continue
                if found:
                    hits.append(_hit(r, found.group(0)[:80], literal=True))
                    if len(hits) >= limit:
                        break
            if truncated:
                break
    return GrepResult(hits[:limit], truncated=truncated, scanned=scanned)
