"""A scripted summarizer for tests: queued outputs, failures and delays; every request kept.

It is a real registered provider, public in the package, so tests (yours too) exercise the
same code paths as a model would, without patching anything. Given an ``agent`` script it
also drives the tool-calling sub-agent of ``lcm_expand_query``: each step is an
:class:`AgentStep` (text and tool calls), a final answer as text, an exception, a
:class:`Delay`, or a function of the :class:`AgentRequest`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .base import (
    AgentRequest,
    AgentStep,
    Summarizer,
    SummarizerTimeout,
    SummaryRequest,
    SummaryResult,
)

__all__ = ["AgentScriptStep", "Delay", "ScriptedSummarizer"]


@dataclass(frozen=True)
class Delay:
    """Queue entry: sleep *seconds*, then answer *then* (a text, an exception, or a Delay)."""

    seconds: float
    then: str | BaseException = "delayed summary"


Step = str | BaseException | Delay | Callable[[SummaryRequest], str]
AgentScriptStep = (
    AgentStep | str | BaseException | Delay | Callable[[AgentRequest], "AgentStep | str"]
)


class ScriptedSummarizer(Summarizer):
    """Answers from a queue; when the queue is empty, from ``default`` (a text or a function).

    ``enqueue("text", TimeoutError(), Delay(2.0, "late"), lambda req: ...)``; ``requests``
    lists every request received, in order.
    """

    name = "scripted"
    offline = True
    deterministic = True

    def __init__(
        self,
        outputs: Iterable[Step] = (),
        *,
        default: Step | None = None,
        model: str = "scripted",
        agent: Iterable[AgentScriptStep] | None = None,
    ) -> None:
        self._queue: deque[Step] = deque(outputs)
        self.default: Step | None = default
        self.model = model
        self.requests: list[SummaryRequest] = []
        self._lock = threading.Lock()
        self.tool_calling = agent is not None
        self._agent: deque[AgentScriptStep] = deque(agent or ())
        self.agent_requests: list[AgentRequest] = []

    def enqueue(self, *steps: Step) -> ScriptedSummarizer:
        """Add answers to the queue (returns self for chaining)."""
        with self._lock:
            self._queue.extend(steps)
        return self

    @property
    def calls(self) -> int:
        """How many requests were received."""
        return len(self.requests)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        with self._lock:
            self.requests.append(request)
            step = self._queue.popleft() if self._queue else self.default
        return SummaryResult(text=self._play(step, request), model=self.model)

    def _play(self, step: Step | None, request: SummaryRequest) -> str:
        if step is None:
            return f"Summary of {len(request.sources)} item(s)."
        if isinstance(step, Delay):
            time.sleep(step.seconds)
            return self._play(step.then, request)
        if isinstance(step, BaseException):
            if isinstance(step, TimeoutError):
                raise SummarizerTimeout(str(step) or "scripted timeout")
            raise step
        if callable(step):
            return step(request)
        return step

    def enqueue_agent(self, *steps: AgentScriptStep) -> ScriptedSummarizer:
        """Add steps to the ``agent`` script (and turn tool calling on)."""
        with self._lock:
            self.tool_calling = True
            self._agent.extend(steps)
        return self

    def agent_step(self, request: AgentRequest) -> AgentStep:
        """The next step of the ``agent`` script (a final answer when it has run out)."""
        if not self.tool_calling:
            return super().agent_step(request)
        with self._lock:
            self.agent_requests.append(request)
            step: AgentScriptStep = (
                self._agent.popleft() if self._agent else "The script has no more steps."
            )
        return self._play_agent(step, request)

    def _play_agent(self, step: AgentScriptStep, request: AgentRequest) -> AgentStep:
        if isinstance(step, Delay):
            time.sleep(step.seconds)
            return self._play_agent(step.then, request)
        if isinstance(step, BaseException):
            if isinstance(step, TimeoutError):
                raise SummarizerTimeout(str(step) or "scripted timeout")
            raise step
        if callable(step):
            return self._play_agent(step(request), request)
        if isinstance(step, str):
            return AgentStep(text=step, model=self.model)
        return step
