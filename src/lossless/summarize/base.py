"""The summarizer interface: one method, a few capability flags.

A summarizer turns a :class:`SummaryRequest` (the source items, the rendered prompts, the
target size) into a :class:`SummaryResult`. Providers that call a model raise the
:class:`SummarizerError` kinds below, so that escalation and the guards can tell a timeout from
a bad key; escalation catches what a third-party summarizer raises as well.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ..errors import LosslessError

__all__ = [
    "AgentRequest",
    "AgentStep",
    "AgentTurn",
    "AuthError",
    "RateLimitedError",
    "SourceItem",
    "Summarizer",
    "SummarizerError",
    "SummarizerTimeout",
    "SummaryRequest",
    "SummaryResult",
    "ToolCall",
    "ToolSpec",
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
    role: str  # user / assistant / tool / system, "host" (a host's own record) or "summary"
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
    #: What the host asked the summary to keep in view (already in ``prompt`` for models).
    instructions: str | None = None


@dataclass(frozen=True)
class SummaryResult:
    """A summary and what wrote it."""

    text: str
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    extra: dict[str, object] = field(default_factory=dict)


# --- tool calling (the expand_query sub-agent) ---------------------------------------------


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model: its name, description and JSON Schema of arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model made. ``error`` says why its arguments could not be read."""

    id: str
    name: str
    arguments: dict[str, Any]
    error: str | None = None


@dataclass(frozen=True)
class AgentTurn:
    """One turn of a tool-calling exchange, in a provider-neutral form.

    ``user``: ``text``. ``assistant``: ``text`` and ``tool_calls``, and ``raw``, the
    provider's own message, sent back as it came so that reasoning blocks survive. ``tool``:
    the result ``text`` of the call ``call_id`` (``is_error`` when it was refused).
    """

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    call_id: str | None = None
    is_error: bool = False
    raw: Any = None


@dataclass(frozen=True)
class AgentRequest:
    """A request to a tool-calling model. ``tool_choice="none"`` asks for a final answer."""

    system: str
    turns: tuple[AgentTurn, ...]
    tools: tuple[ToolSpec, ...]
    max_output_tokens: int
    temperature: float = 0.0
    tool_choice: Literal["auto", "none"] = "auto"


@dataclass(frozen=True)
class AgentStep:
    """The model's reply: text, tool calls (none: the text is the final answer), and the
    provider's own message to send back in the next request."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    raw: Any = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


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
    #: Can drive a tool-calling sub-agent (used by expand_query): implements agent_step.
    tool_calling: bool = False

    #: The model that writes the summaries (recorded on each summary).
    model: str | None = None

    @abstractmethod
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize ``request.sources`` in about ``request.target_tokens`` tokens."""

    def agent_step(self, request: AgentRequest) -> AgentStep:
        """One model call with tools (only when :attr:`tool_calling` is true)."""
        raise SummarizerError(f"summarizer {self.name!r} cannot call tools")
