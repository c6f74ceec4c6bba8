"""The summarizer interface: one method, a few capability flags.

A summarizer turns a :class:`SummaryRequest` (the source items, the rendered prompts, the
target size) into a :class:`SummaryResult`. Providers that call a model raise the
:class:`SummarizerError` kinds below, so that escalation and the guards can tell a timeout from
a bad key; escalation catches what a third-party summarizer raises as well.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ..errors import LosslessError

__all__ = [
    "AuthError",
    "RateLimitedError",
    "SourceItem",
    "Summarizer",
    "SummarizerError",
    "SummarizerTimeout",
    "SummaryRequest",
    "SummaryResult",
]

Level = Literal["normal", "aggressive"]


class SummarizerError(LosslessError):
    """A summarizer could not produce a summary (compaction escalates and carries on)."""


class SummarizerTimeout(SummarizerError):
    """The summarizer did not answer within its time limit."""


class AuthError(SummarizerError):
    """The provider refused the credentials (repeated ones open the circuit breaker)."""


class RateLimitedError(SummarizerError):
    """The provider asked to slow down; ``retry_after`` is in seconds when it said."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class SourceItem:
    """One thing being summarized: a message (leaf) or a summary (condensed)."""

    ref: str  # msg#<id> or sum_<16 hex>
    role: str  # user / assistant / tool / system, or "summary"
    text: str
    earliest_at: str
    latest_at: str
    tokens: int


@dataclass(frozen=True)
class SummaryRequest:
    """Everything a summarizer may use. Model providers send ``system``/``prompt``; the
    offline extractive summarizer reads ``sources`` directly."""

    kind: Literal["leaf", "condensed", "session"]
    depth: int
    level: Level
    sources: tuple[SourceItem, ...]
    target_tokens: int
    temperature: float
    system: str
    prompt: str
    previous_context: str | None = None
    max_output_tokens: int | None = None


@dataclass(frozen=True)
class SummaryResult:
    """A summary and what wrote it."""

    text: str
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    extra: dict[str, object] = field(default_factory=dict)


class Summarizer(ABC):
    """Base class of every summarizer (built-in or third-party).

    Register a subclass with :func:`lossless.summarize.register` or the
    ``lossless.summarizers`` entry-point group to make it selectable by name.
    """

    #: Registry name (``extractive``, ``openai``, ...).
    name: ClassVar[str] = ""
    #: Works with no network and no key.
    offline: ClassVar[bool] = False
    #: The same request always gives the same summary.
    deterministic: ClassVar[bool] = False
    #: Can drive a tool-calling sub-agent (used by expand_query).
    tool_calling: ClassVar[bool] = False

    #: The model that writes the summaries (recorded on each summary).
    model: str | None = None

    @abstractmethod
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize ``request.sources`` in about ``request.target_tokens`` tokens."""
