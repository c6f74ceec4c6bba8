"""What a search looks for and what it shows: a pattern's words and "phrases" as the word
index is asked for them, the hits (:class:`GrepHit`) and their snippets; and the errors a
search gives (:class:`GrepError`). Shared by :mod:`.grep`, :mod:`.grep_regex` and
:mod:`.context_query`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import itertools
import re
from dataclasses import dataclass
from typing import Any

import regex

from ..codec import clean_text
from ..errors import LosslessError
from ..store.search import TextRow
from ..timestamps import format_ts, parse_ts

#: A snippet's window is chosen among those starting at the first this many matches (a long
#: summary can hold thousands of them).
SNIPPET_CANDIDATES = 24
#: How much of a text the snippet's window is looked for in, in characters.
SNIPPET_SCAN = 8_000
#: The longest pattern a search takes, in characters: longer text is not something said to
#: find a message by, and the regex engine's time limit does not bound long literals.
MAX_PATTERN_CHARS = 2_000
#: A word as the word indexes see one: letters, digits, and the code points no Unicode
#: version the search engine knows has assigned (they are word characters to it, not
#: separators), or private-use ones.
_WORD = regex.compile(r"[\w\p{Cn}\p{Co}]+")
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
    # A NUL ends a query string for the word indexes: in words it separates, as a space
    # does (the substring search looks for the text as given, NUL and all).
    pattern = pattern.replace("\x00", " ")
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


_MONTHS = {
    name: n
    for n, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
#: The dates a search may name: "9 November 2022", "November 9th, 2022", "2022-11-09",
#: "November 2022", "2022-11" (a day or a month, always with its year).
_DATES = (
    ("day", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE), (3, 2, 1)),
    ("day", re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE), (3, 1, 2)),
    ("day", re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)(?!\d)"), (1, 2, 3)),
    ("month", re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE), (2, 1, 0)),
    ("month", re.compile(r"\b((?:19|20)\d\d)-(\d\d)\b(?!-)"), (1, 2, 0)),
)
#: How far either side of a day or month it names a search reaches: a day said in another
#: time zone than the store's UTC.
DATE_SLACK = dt.timedelta(days=1)


def named_time(pattern: str) -> tuple[str, str] | None:
    """The time a search names, as a (since, before) range in the store's UTC form: the day
    or month of the first date it holds with its year, a day's slack either side; ``None``
    when it names none (or names one that is not on the calendar)."""
    for kind, found, (y, m, d) in _DATES:
        match = found.search(pattern)
        if match is None:
            continue
        month = match[m]
        number = int(month) if month.isdigit() else _MONTHS[month.lower()]
        try:
            if kind == "day":
                start = dt.datetime(int(match[y]), number, int(match[d]), tzinfo=dt.UTC)
                end = start + dt.timedelta(days=1)
            else:
                start = dt.datetime(int(match[y]), number, 1, tzinfo=dt.UTC)
                end = (start + dt.timedelta(days=32)).replace(day=1)
        except ValueError:  # 31 February, month 13
            continue
        return format_ts(start - DATE_SLACK), format_ts(end + DATE_SLACK)
    return None


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
