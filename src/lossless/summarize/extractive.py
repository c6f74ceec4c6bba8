"""The offline default summarizer: deterministic extraction, no model.

It cuts the sources into units (lines, then sentences), scores each unit for what a later
reader needs — requests and who made them, decisions and their reasons, constraints, open
tasks, file paths, identifiers, commands, error messages, numbers and dates, names — drops
chatter and repetition, and keeps the best units that fit the target, in their original order,
each with its time and speaker. It ends with ``Expand for details about: ...`` naming what was
left out, so the agent knows when to drill down.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from ..tokens import estimate_tokens
from .base import SourceItem, Summarizer, SummaryRequest, SummaryResult

__all__ = ["ExtractiveSummarizer"]

EXPAND_PREFIX = "Expand for details about:"

_DECISION = re.compile(
    r"\b(decid\w*|decision|chose|choose|chosen|agreed?|going with|will use|we'll|let's|"
    r"because|so that|instead of|rather than|must|mustn't|never|always|constraint|require[sd]?|"
    r"todo|to do|next step|next,|plan\w*|open question|blocked|pending|remaining|deadline|"
    r"important|remember|note that|fixed|resolved|root cause)\b",
    re.I,
)
_ERROR = re.compile(
    r"(error|exception|traceback|failed|failure|fatal|denied|refused|not found|timeout|"
    r"timed out|panic|segfault|assert\w*|\b[45]\d\d\b)",
    re.I,
)
_PATH = re.compile(
    r"(?:[\w.~-]+/)+[\w.-]+|\b[\w-]+\.(?:py|ts|tsx|js|jsx|json|toml|ya?ml|md|sql|rs|go|java|"
    r"kt|c|h|cc|cpp|hpp|rb|php|sh|txt|csv|html|css|ini|cfg|lock|proto)\b"
)
_IDENT = re.compile(
    r"`[^`]+`|\b[a-z]+(?:_[a-z0-9]+)+\b|\b[a-z]+[A-Z]\w+\b|\b[A-Z][a-z]+[A-Z]\w+\b|\w+\(\)"
)
_COMMAND = re.compile(
    r"^\s*\$ |\b(pytest|git (?:commit|push|pull|checkout|rebase|merge)|npm |pnpm |yarn |pip |"
    r"uv |make |docker |kubectl |curl |cargo |go (?:test|build|run)|python -m)\b"
)
_NUMBER = re.compile(r"\d")
_DATE = re.compile(
    r"\b(\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
    r"[a-z]*\.? \d{1,2}|\d{1,2} (?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*|"
    r"yesterday|today|tomorrow|last (?:week|month|year|night)|next (?:week|month|year)|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|v?\d+\.\d+(?:\.\d+)?)\b",
    re.I,
)
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][a-zA-Z]{2,}")
_FIRST_PERSON_FACT = re.compile(
    r"\b(I|we|my|our)\b[^.?!]{0,40}\b(am|was|were|have|had|got|went|go|started|joined|moved|"
    r"bought|love|like|prefer|hate|plan|planning|working|work|live|lived|made|visited|"
    r"adopted|finished|lost|won|signed|met)\b",
    re.I,
)
_CHATTER = re.compile(
    r"^(ok(ay)?|k|thanks?( you)?( so much)?|thx|great|nice|cool|sure|sounds (good|great|right)"
    r"( to me)?|yes|yep|yeah|no|nope|alright|got it|perfect|awesome|lol|haha|hi|hello|hey|"
    r"good (morning|night)|continuing( with the next item)?|carry on|go on|great, carry on)"
    r"[\s.!,:)-]*$",
    re.I,
)
_ACK_START = re.compile(
    r"^(ok|okay|thanks|thank you|great|nice|cool|sure|sounds|perfect|awesome|good|lgtm|yes|no)\b",
    re.I,
)
_DAY_HEADER = re.compile(r"^## (\d{4}-\d{2}-\d{2})$")
_ATTRIBUTED = re.compile(r"^(\d\d:\d\d msg#\d+ [a-z ]{2,20}): (.*)$")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_FOOTER_SPLIT = re.compile(r",\s*")

MAX_UNIT_CHARS = 400
DAY_HEADER_TOKENS = 4
MAX_UNITS_PER_TOOL_OUTPUT = 3


@dataclass
class _Unit:
    index: int  # position in the source order
    source: int  # which source item
    text: str
    tokens: int
    score: float
    role: str
    tool_output: bool = False
    day: str = ""  # the date the unit speaks about (YYYY-MM-DD)
    prefix: str = ""  # "HH:MM msg#N role" of a line taken from a summary


def _clip(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= MAX_UNIT_CHARS:
        return text
    cut = text[:MAX_UNIT_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > MAX_UNIT_CHARS // 2 else cut) + " …"


def _score(text: str, role: str) -> float:
    if _CHATTER.match(text):
        return -1.0
    if (
        len(text.split()) <= 6
        and _ACK_START.match(text)
        and not _NUMBER.search(text)
        and not _PATH.search(text)
    ):
        return -1.0  # "Thanks, that looks good." and the like
    score = {"user": 1.5, "assistant": 1.0, "system": 1.0, "summary": 1.0}.get(role, 0.0)
    if _DECISION.search(text):
        score += 3.0
    if _ERROR.search(text):
        score += 2.5
    if _PATH.search(text):
        score += 2.0
    if _COMMAND.search(text):
        score += 1.5
    if _IDENT.search(text):
        score += 1.0
    if _DATE.search(text):
        score += 1.5
    elif _NUMBER.search(text):
        score += 1.0
    names = len(_NAME.findall(text))
    score += min(names, 3) * 0.7
    if _FIRST_PERSON_FACT.search(text):
        score += 1.5
    if role == "user" and text.rstrip().endswith("?"):
        score += 1.0
    words = len(text.split())
    if words <= 3:
        score -= 1.5
    return score


_TERM = re.compile(r"[a-z][a-z0-9_'+-]{2,}")
_COMMON = frozenset(
    {
        "about",
        "after",
        "again",
        "also",
        "always",
        "and",
        "any",
        "are",
        "because",
        "been",
        "before",
        "being",
        "both",
        "but",
        "can",
        "could",
        "did",
        "does",
        "doing",
        "done",
        "each",
        "even",
        "every",
        "for",
        "from",
        "get",
        "got",
        "great",
        "had",
        "has",
        "have",
        "having",
        "her",
        "here",
        "him",
        "his",
        "how",
        "into",
        "its",
        "it's",
        "just",
        "know",
        "like",
        "love",
        "make",
        "many",
        "more",
        "most",
        "much",
        "need",
        "nice",
        "not",
        "now",
        "off",
        "one",
        "only",
        "other",
        "our",
        "out",
        "over",
        "really",
        "said",
        "same",
        "see",
        "should",
        "some",
        "such",
        "sure",
        "than",
        "thank",
        "thanks",
        "that",
        "that's",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "thing",
        "things",
        "think",
        "this",
        "those",
        "time",
        "too",
        "very",
        "want",
        "was",
        "way",
        "well",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "why",
        "will",
        "with",
        "would",
        "yeah",
        "yes",
        "you",
        "your",
        "you're",
        "i'm",
        "i've",
        "we're",
    }
)
FIRST_REQUEST_BONUS = 2.0
#: A unit sharing words with what the host asked the summary to focus on.
FOCUS_BONUS = 2.0
INFORMATIVENESS_WEIGHT = 2.0


def _add_informativeness(units: list[_Unit]) -> None:
    """Reward units whose words are rare in this material (IDF): specific facts outrank
    pleasantries made of common words."""
    if len(units) < 3:
        return
    terms = [{t for t in _TERM.findall(u.text.lower()) if t not in _COMMON} for u in units]
    df: Counter[str] = Counter(t for ts in terms for t in ts)
    n = len(units)
    for u, ts in zip(units, terms, strict=True):
        if u.score < 0 or not ts:
            continue
        idf = sum(math.log(n / df[t]) for t in sorted(ts))  # (a set's order varies by hash seed)
        u.score += INFORMATIVENESS_WEIGHT * idf / math.sqrt(len(ts) + 4)


_CODE_HINT = re.compile(r"[{};=]\s*$|^\s*(def |class |import |from |#include|\$ |>>> )|`")


def _looks_like_code(line: str) -> bool:
    return bool(_CODE_HINT.search(line))


def _units_of(item: SourceItem, source: int, start: int, counter: Counter[str]) -> list[_Unit]:
    """Cut one source into units; tool outputs keep only their most telling lines."""
    day = item.earliest_at[:10]
    pieces: list[tuple[str, str, str]] = []  # (day, prefix, text)
    for raw in item.text.splitlines():
        line = raw.strip()
        if not line or (item.role == "summary" and line.startswith(EXPAND_PREFIX)):
            continue
        prefix = ""
        if item.role == "summary":
            header = _DAY_HEADER.match(line)
            if header:
                day = header.group(1)  # lines of a summary carry the day of their header
                continue
            attributed = _ATTRIBUTED.match(line)
            if attributed:
                prefix, line = attributed.group(1), attributed.group(2)
        if item.role == "tool" or (_looks_like_code(line) and len(line) <= MAX_UNIT_CHARS):
            pieces.append((day, prefix, line))
            continue
        # Prose: one unit per sentence, so the informative sentence of a chatty message can
        # be kept without the pleasantries around it.
        pieces.extend((day, prefix, s) for s in _SENTENCE_SPLIT.split(line) if s.strip())
    units = []
    tool = item.role == "tool"
    for n, (piece_day, piece_prefix, piece) in enumerate(pieces):
        clipped = _clip(piece)
        score = _score(clipped, item.role)
        if tool:
            # Tool output: the first line and lines with errors or results carry the news.
            if n == 0:
                score += 1.0
            counter["tool output lines"] += 1
        units.append(
            _Unit(
                start + n,
                source,
                clipped,
                estimate_tokens(clipped),
                score,
                item.role,
                tool,
                piece_day,
                piece_prefix,
            )
        )
    if tool and len(units) > MAX_UNITS_PER_TOOL_OUTPUT:
        keep = sorted(units, key=lambda u: (-u.score, u.index))[:MAX_UNITS_PER_TOOL_OUTPUT]
        keep_ids = {u.index for u in keep}
        dropped = [u for u in units if u.index not in keep_ids]
        counter["full tool outputs"] += 1 if dropped else 0
        units = [u for u in units if u.index in keep_ids]
    return units


def _hhmm(stamp: str) -> str:
    return stamp[11:16] if len(stamp) >= 16 and stamp[10] == "T" else stamp


def _footer_items(sources: tuple[SourceItem, ...]) -> list[str]:
    """The 'Expand for details about' items of summaries being condensed."""
    items: list[str] = []
    for item in sources:
        for line in item.text.splitlines():
            if line.startswith(EXPAND_PREFIX):
                rest = line[len(EXPAND_PREFIX) :].strip().rstrip(".")
                items.extend(x.strip() for x in _FOOTER_SPLIT.split(rest) if x.strip())
    return items


class ExtractiveSummarizer(Summarizer):
    """Deterministic, offline extraction (the default)."""

    name = "extractive"
    offline = True
    deterministic = True
    model = "extractive"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        omitted: Counter[str] = Counter()
        units: list[_Unit] = []
        for s, item in enumerate(request.sources):
            units.extend(_units_of(item, s, s * 100_000, omitted))
        _add_informativeness(units)
        threshold = 1.0 if request.level == "aggressive" else 0.0
        seen: set[str] = set()
        candidates: list[_Unit] = []
        for u in units:
            key = re.sub(r"\W+", " ", u.text.lower()).strip()
            if u.score < threshold or not key:
                omitted["chatter"] += 1 if u.score < 0 else 0
                continue
            if key in seen:
                omitted["repeated lines"] += 1
                continue
            seen.add(key)
            candidates.append(u)
        # Who asked what: the first substantive unit of each user message gets a bonus (a
        # bonus, not a pass: answers and decisions compete with requests on density).
        firsts: set[int] = set()
        for u in candidates:
            if u.role == "user" and u.source not in firsts and u.score >= 3.0:
                firsts.add(u.source)
                u.score += FIRST_REQUEST_BONUS
        focus = _focus_words(request.instructions)
        if focus:
            for u in candidates:
                if focus & set(re.findall(r"\w{4,}", u.text.lower())):
                    u.score += FOCUS_BONUS
        ranked = sorted(
            candidates,
            key=lambda u: (-(u.score / math.sqrt(max(u.tokens, 4))), u.index),
        )
        target = request.target_tokens
        # The footer gets at most about a third of the target; the lines get the rest.
        footer_share = max(1, target // 3)
        reserve = estimate_tokens(self._footer(request, candidates, omitted, fit=footer_share))
        budget = max(0, target - reserve - 1)
        chosen: list[_Unit] = []
        headed: set[tuple[int, str]] = set()  # lines whose prefix is paid for
        days: set[str] = set()  # days whose "## date" header is paid for
        used = 0
        for u in ranked:
            cost = u.tokens + 1  # the separator
            if (u.source, u.prefix) not in headed:
                item = request.sources[u.source]
                if item.role != "summary":
                    cost += self._prefix_tokens(item)
                elif u.prefix:
                    cost += estimate_tokens(u.prefix + ": ")
            if u.day not in days:
                cost += DAY_HEADER_TOKENS
            if used + cost > budget:
                continue
            chosen.append(u)
            headed.add((u.source, u.prefix))
            days.add(u.day)
            used += cost
        if not chosen and ranked:
            # Not even the best line fits a small target: keep the start of it.
            best = ranked[0]
            room = budget - 2 - self._prefix_tokens(request.sources[best.source])
            if room >= 6:
                text = best.text[: room * 4 - 2].rsplit(" ", 1)[0] + " …"
                best = _Unit(best.index, best.source, text, estimate_tokens(text), best.score,
                             best.role, best.tool_output)  # fmt: skip
                ranked = [best, *ranked[1:]]
                chosen.append(best)
        # Estimates round; check the real text and drop the weakest lines until it fits.
        rank = {id(u): n for n, u in enumerate(ranked)}
        while True:
            chosen.sort(key=lambda u: u.index)
            picked = {id(u) for u in chosen}
            left_out = [u for u in candidates if id(u) not in picked]
            lines = self._render(request, chosen)
            footer = self._footer(request, left_out, omitted, fit=footer_share)
            text = "\n".join([*lines, footer])
            if not chosen or estimate_tokens(text) <= target:
                break
            chosen.remove(max(chosen, key=lambda u: rank[id(u)]))
        return SummaryResult(text=text, model=self.model)

    @staticmethod
    def _prefix_tokens(item: SourceItem) -> int:
        """Tokens of the ``HH:MM msg#N role:`` prefix of one message's line."""
        return estimate_tokens(f"\n{_hhmm(item.earliest_at)} {item.ref} assistant: ")

    @staticmethod
    def _render(request: SummaryRequest, chosen: list[_Unit]) -> list[str]:
        """Lines in time order under ``## date`` headers: ``HH:MM msg#N role: text`` for
        messages; a condensed summary keeps its sources' lines as they are."""
        lines: list[str] = []
        day = ""
        current = -1
        current_line = ""  # the summary line being continued (source and prefix)
        for u in chosen:
            item = request.sources[u.source]
            if u.day != day:
                lines.append(f"## {u.day}")
                day = u.day
                current = -1
                current_line = ""
            if item.role == "summary":
                key = f"{u.source}:{u.prefix}"
                if u.prefix and key == current_line and lines:
                    lines[-1] += " " + u.text
                else:
                    lines.append(f"{u.prefix}: {u.text}" if u.prefix else u.text)
                current_line = key if u.prefix else ""
                current = -1
            elif u.source == current:
                lines[-1] += " " + u.text
            else:
                who = "tool output" if u.tool_output else item.role
                lines.append(f"{_hhmm(item.earliest_at)} {item.ref} {who}: {u.text}")
                current = u.source
        return lines

    @staticmethod
    def _footer(
        request: SummaryRequest,
        left_out: list[_Unit],
        omitted: Counter[str],
        *,
        fit: int | None = None,
    ) -> str:
        items: list[str] = []
        errors = [u for u in left_out if _ERROR.search(u.text)]
        if errors:
            items.append("exact error messages")
        if omitted["full tool outputs"] or any(u.tool_output for u in left_out):
            items.append("full tool outputs")
        paths: list[str] = []
        for u in left_out:
            for p in _PATH.findall(u.text):
                if p not in paths:
                    paths.append(p)
        if paths:
            items.append("files " + " ".join(paths[:4]))
        if any(_COMMAND.search(u.text) for u in left_out):
            items.append("commands run")
        if omitted["chatter"]:
            items.append("small talk")
        rest = len(left_out) - len(errors)
        if rest > 0:
            items.append(f"{rest} more line(s) of discussion")
        items.extend(_footer_items(request.sources))
        unique = list(dict.fromkeys(items))[:8]
        first = request.sources[0].ref if request.sources else ""
        last = request.sources[-1].ref if request.sources else ""
        scope = f" (sources {first} … {last})" if first else ""
        while True:
            footer = f"{EXPAND_PREFIX} {', '.join(unique) or 'nothing left out'}{scope}"
            # Within *fit* tokens when it can be: the least telling items go first.
            if fit is None or len(unique) <= 1 or estimate_tokens(footer) <= fit:
                return footer
            unique.pop()


def _focus_words(instructions: str | None) -> set[str]:
    """The words of a focus (four letters or more, not the stop words)."""
    if not instructions:
        return set()
    return {w for w in re.findall(r"\w{4,}", instructions.lower()) if w not in _COMMON}
