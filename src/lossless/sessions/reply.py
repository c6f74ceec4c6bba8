"""Reading a model's reply leniently: the JSON object asked for (in code fences, in prose,
keys in other spellings), or the same fields as headed sections."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ..summarize.prompts import SESSION_FIELDS
from .draft import SessionDraft, dedup

_KEY_ALIASES = {
    "overview": "overview",
    "summary": "overview",
    "session_summary": "overview",
    "updated_summary": "overview",
    "topics": "topics",
    "topic": "topics",
    "decisions": "decisions",
    "decision": "decisions",
    "decisions_made": "decisions",
    "code_references": "code_references",
    "code_reference": "code_references",
    "code_refs": "code_references",
    "code": "code_references",
    "references": "code_references",
    "files": "code_references",
    "key_points": "key_points",
    "key_point": "key_points",
    "keypoints": "key_points",
    "key_facts": "key_points",
    "facts": "key_points",
    "notes": "key_points",
}
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.S)
_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\*\*|__)?\s*([A-Za-z][A-Za-z _-]{2,30}?)\s*(?:\*\*|__)?\s*"
    r"(?::\s*(?:\*\*|__)?\s*(.*)|)$"
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def parse_reply(text: str) -> SessionDraft | None:
    """A model's reply as a draft, or ``None`` when it cannot be read as one.

    Accepted: the JSON object asked for (inside code fences or prose too, keys in other
    spellings — ``summary`` for ``overview``, ``Code references``, ...; list items as strings,
    numbers or small objects; a list given as one string of lines), or the same fields as
    headed sections (``Overview:`` / ``## Topics`` followed by text or bullets). A reply
    without an overview is unreadable.
    """
    for candidate in _json_candidates(text):
        draft = _from_mapping(candidate)
        if draft is not None:
            return draft
    return _from_sections(text)


def _json_candidates(text: str) -> Iterator[dict[str, Any]]:
    blocks = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for block in blocks:
        start = block.find("{")
        while start != -1:
            try:
                value, end = decoder.raw_decode(block, start)
            except ValueError:
                start = block.find("{", start + 1)
                continue
            if isinstance(value, dict):
                yield value
                # An object that wraps the summary: {"summary": {"overview": ...}}.
                for inner in value.values():
                    if isinstance(inner, dict):
                        yield inner
            start = block.find("{", end)


def _key(name: str) -> str | None:
    return _KEY_ALIASES.get(re.sub(r"[\s-]+", "_", name.strip().lower()))


def _from_mapping(data: dict[str, Any]) -> SessionDraft | None:
    fields: dict[str, Any] = {}
    for name, value in data.items():
        key = _key(str(name))
        if key is not None and key not in fields:
            fields[key] = value
    overview = fields.get("overview")
    if isinstance(overview, list):
        overview = " ".join(_items(overview))
    if not isinstance(overview, str) or not overview.strip():
        return None
    return SessionDraft(
        overview.strip(),
        *(_items(fields.get(key)) for key in SESSION_FIELDS[1:]),
    )


def _items(value: Any) -> list[str]:
    """A list field as strings: one string of lines is split, objects become ``k: v``."""
    if value is None:
        return []
    if isinstance(value, str):
        lines = [_BULLET.sub("", line).strip() for line in value.splitlines()]
        return dedup(line for line in lines if line)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return dedup([str(value)])
    out: list[str] = []
    for item in value:
        if isinstance(item, dict):
            text = "; ".join(f"{k}: {v}" for k, v in item.items() if v not in (None, ""))
        elif isinstance(item, list):
            text = ", ".join(str(x) for x in item)
        else:
            text = str(item)
        if text.strip():
            out.append(text)
    return dedup(out)


def _from_sections(text: str) -> SessionDraft | None:
    """The fields written as headed sections instead of JSON."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        heading = _HEADING.match(line) if not _BULLET.match(line) else None
        key = _key(heading.group(1)) if heading else None
        if key is not None and heading is not None:
            current = key
            rest = (heading.group(2) or "").strip().strip("*_").strip()
            sections.setdefault(key, [])
            if rest:
                sections[key].append(rest)
            continue
        if current is not None and line.strip():
            sections[current].append(line)
    overview = " ".join(line.strip() for line in sections.get("overview", []))
    if not overview:
        return None
    return SessionDraft(
        overview,
        *(_items("\n".join(sections.get(key, []))) for key in SESSION_FIELDS[1:]),
    )
