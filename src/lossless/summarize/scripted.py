"""A scripted summarizer for tests: queued outputs, failures and delays; every request kept.

It is a real registered provider, public in the package, so tests (yours too) exercise the
same code paths as a model would, without patching anything.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .base import Summarizer, SummarizerTimeout, SummaryRequest, SummaryResult
from .registry import register

__all__ = ["Delay", "ScriptedSummarizer"]


@dataclass(frozen=True)
class Delay:
    """Queue entry: sleep *seconds*, then answer *then* (a text, an exception, or a Delay)."""

    seconds: float
    then: str | BaseException = "delayed summary"


Step = str | BaseException | Delay | Callable[[SummaryRequest], str]


@register("scripted")
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
    ) -> None:
        self._queue: deque[Step] = deque(outputs)
        self.default: Step | None = default
        self.model = model
        self.requests: list[SummaryRequest] = []
        self._lock = threading.Lock()

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
