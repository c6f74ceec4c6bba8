"""The session summary being built: the overview, the four lists and their caps."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..model import SessionSummary

#: The most items each list keeps. When new items push a list over its cap, the items that
#: were neither new nor mentioned again for the longest time leave first.
MAX_TOPICS = 12
MAX_DECISIONS = 30
MAX_CODE_REFERENCES = 50
MAX_KEY_POINTS = 30
#: Longest list item, in characters (longer ones are cut at a word with " …").
MAX_ITEM_CHARS = 300


@dataclass
class SessionDraft:
    """A session summary being built: the overview and the four lists."""

    overview: str
    topics: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    code_references: list[str] = field(default_factory=list)
    key_points: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, summary: SessionSummary) -> SessionDraft:
        """The draft a stored version continues from."""
        return cls(
            summary.summary,
            list(summary.topics),
            list(summary.decisions),
            list(summary.code_references),
            list(summary.key_points),
        )

    def to_json(self) -> str:
        """The draft as the JSON object a model is asked to reply with."""
        return json.dumps(
            {
                "overview": self.overview,
                "topics": self.topics,
                "decisions": self.decisions,
                "code_references": self.code_references,
                "key_points": self.key_points,
            },
            ensure_ascii=False,
            indent=1,
        )


def clip(text: str) -> str:
    """*text* on one line, cut at a word with " …" past :data:`MAX_ITEM_CHARS`."""
    text = " ".join(text.split())
    if len(text) <= MAX_ITEM_CHARS:
        return text
    cut = text[:MAX_ITEM_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > MAX_ITEM_CHARS // 2 else cut) + " …"


def _norm(item: str) -> str:
    return re.sub(r"\W+", " ", item.lower()).strip()


def dedup(items: Iterable[str]) -> list[str]:
    """*items* stripped and clipped, each once (the first time it is said; case and
    punctuation aside)."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        item = item.strip()
        key = _norm(item) or item
        if item and key not in seen:
            seen.add(key)
            out.append(clip(item))
    return out


def merge(old: Sequence[str], new: Sequence[str], cap: int) -> list[str]:
    """*old* then *new*, each item once at the place it was last said; past *cap* the
    items said longest ago go."""
    return dedup([*old, *new][::-1])[::-1][-cap:]
