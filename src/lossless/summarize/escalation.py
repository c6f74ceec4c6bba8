"""Three-level escalation: normal → aggressive → deterministic fallback.

1. *Normal*: the standard prompt at temperature 0.2.
2. *Aggressive*: if the normal call fails, or its summary is not smaller than its input, the
   tighter prompt at temperature 0.1 and a lower target.
3. *Fallback*: if that fails too, deterministic truncation of the source to about
   ``fallback_max_tokens`` with a visible marker (to the target, at most half the input, when
   the input is not larger than ``fallback_max_tokens``).

So a compaction pass always makes progress, whatever the model does. A summary far above its
target (more than 3×) is cut down to 3× the target.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from ..codec import clean_text
from ..tokens import TokenCounter, estimate_tokens
from .base import Level, Summarizer, SummaryRequest, SummaryResult

__all__ = [
    "TRUNCATION_MARKER",
    "Outcome",
    "climb",
    "escalate",
    "rungs",
    "truncate_to_tokens",
]

logger = logging.getLogger(__name__)

TRUNCATION_MARKER = "[Truncated for context management]"
NORMAL_TEMPERATURE = 0.2
AGGRESSIVE_TEMPERATURE = 0.1
AGGRESSIVE_TARGET_SHARE = 0.5
CAP_FACTOR = 3


@dataclass(frozen=True)
class Outcome:
    """The summary escalation settled on, and how it got there."""

    text: str
    tokens: int
    level: Literal["normal", "aggressive", "fallback"]
    model: str | None
    errors: tuple[str, ...] = ()
    capped: bool = False


def truncate_to_tokens(text: str, max_tokens: int, counter: TokenCounter | None = None) -> str:
    """Cut *text* to about *max_tokens* (at a line or word boundary) and add the marker."""
    count = counter.count if counter is not None else estimate_tokens
    if count(text) <= max_tokens:
        return text
    suffix = "\n" + TRUNCATION_MARKER
    # Characters per token of this text, to find the cut without counting every prefix.
    ratio = len(text) / max(count(text), 1)
    limit = max(1, int((max_tokens - count(suffix)) * ratio))
    cut = text[:limit]
    boundary = max(cut.rfind("\n"), cut.rfind(" "))
    if boundary > limit // 2:
        cut = cut[:boundary]
    return cut.rstrip() + suffix


def _fallback(source_text: str, max_tokens: int, counter: TokenCounter | None) -> str:
    """The deterministic summary: the source cut to about *max_tokens*, always marked (so
    doctor and readers can tell summaries that no model wrote)."""
    text = truncate_to_tokens(source_text, max_tokens, counter)
    if not text.endswith(TRUNCATION_MARKER):
        text = text.rstrip() + "\n" + TRUNCATION_MARKER
    return text


T = TypeVar("T")
#: What an accepted reply yields, or the reason it was not accepted.
Accepted = tuple[T | None, str]


def rungs(target_tokens: int, *, floor: int = 16) -> list[tuple[Level, int, float]]:
    """The ladder's model rungs: (level, target tokens, temperature), normal then aggressive."""
    return [
        ("normal", target_tokens, NORMAL_TEMPERATURE),
        (
            "aggressive",
            max(floor, int(target_tokens * AGGRESSIVE_TARGET_SHARE)),
            AGGRESSIVE_TEMPERATURE,
        ),
    ]


def climb(
    summarizer: Summarizer,
    make_request: Callable[[Level, int, float], SummaryRequest],
    accept: Callable[[SummaryResult, Level, int], Accepted[T]],
    *,
    target_tokens: int,
    floor: int = 16,
    quiet: bool = False,
) -> tuple[T | None, Level | None, str | None, list[str]]:
    """Try the ladder's model rungs in order: the first reply *accept* takes, as (value,
    level, model, errors); ``(None, None, None, errors)`` when every rung failed, for the
    caller's own deterministic fallback. A summarizer's failure leads to the next rung,
    never up to the caller. *quiet*: failures are logged at debug level (the caller says
    them once itself)."""
    errors: list[str] = []
    say = logger.debug if quiet else logger.warning
    for level, target, temperature in rungs(target_tokens, floor=floor):
        request = make_request(level, target, temperature)
        try:
            result = summarizer.summarize(request)
        except Exception as exc:  # any provider's failure leads to the next level, never up
            # One line; the traceback only when debugging (`lossless --debug`).
            say("summarizer %s failed (%s): %s", summarizer.name, level, exc)
            logger.debug("summarizer %s failed (%s)", summarizer.name, level, exc_info=exc)
            errors.append(f"{level}: {type(exc).__name__}: {exc}")
            continue
        value, why = accept(result, level, target)
        if value is None:
            errors.append(f"{level}: {why}")
            continue
        return value, level, result.model or summarizer.model, errors
    return None, None, None, errors


def escalate(
    summarizer: Summarizer,
    make_request: Callable[[Level, int, float], SummaryRequest],
    *,
    input_tokens: int,
    target_tokens: int,
    source_text: str,
    fallback_max_tokens: int,
    counter: TokenCounter | None = None,
    quiet: bool = False,
) -> Outcome:
    """Run the escalation for one summary; never raises for a summarizer's failure."""
    count = counter.count if counter is not None else estimate_tokens

    def accept(result: SummaryResult, level: Level, target: int) -> Accepted[Outcome]:
        # A reply may hold lone surrogates (a JSON "\\ud83d" escape decodes to one); they
        # cannot be stored as UTF-8, so they become U+FFFD as in ingested messages.
        text = clean_text((result.text or "").strip())
        if not text:
            return None, "empty summary"
        tokens = count(text)
        if tokens >= input_tokens:
            return None, f"summary of {tokens} tokens is not smaller than its input"
        capped = False
        if tokens > CAP_FACTOR * target:
            text = truncate_to_tokens(text, CAP_FACTOR * target, counter)
            tokens = count(text)
            capped = True
        return Outcome(text, tokens, level, result.model, (), capped), ""

    found, _, model, errors = climb(
        summarizer, make_request, accept, target_tokens=target_tokens, quiet=quiet
    )
    if found is not None:
        return Outcome(found.text, found.tokens, found.level, model, tuple(errors), found.capped)
    text = _fallback(source_text, fallback_max_tokens, counter)
    if input_tokens > 0 and count(text) >= input_tokens:
        # The input is not larger than the fallback size (small chunks): cut to the target
        # instead (at most half the input), so that the pass still makes progress.
        text = _fallback(source_text, max(16, min(target_tokens, input_tokens // 2)), counter)
    return Outcome(text, count(text), "fallback", None, tuple(errors))
