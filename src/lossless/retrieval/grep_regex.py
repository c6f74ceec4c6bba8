"""``lcm_grep``'s regular-expression mode and its search of large files: bounded scans,
narrowed by the trigram index to the rows holding the literal every match requires."""

from __future__ import annotations

import importlib
import re
import time
import warnings
from typing import TYPE_CHECKING, Any, Literal

import regex

from ..store.search import SearchScope
from .grep_text import _WORD, GrepError, GrepHit, GrepResult, _hit, _snippet

if TYPE_CHECKING:
    from ..store.base import Store

Scope = Literal["messages", "summaries", "both", "files"]


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
