"""Guards around a summarizer: a per-call time limit, a spend guard and a circuit breaker.

:func:`guard` wraps any :class:`~.base.Summarizer` (``build_summarizer`` does it for every
model provider) in a :class:`GuardedSummarizer` that, on each call, in this order:

1. **circuit breaker** — after ``breaker_threshold`` consecutive :class:`~.base.AuthError`
   the breaker opens for ``breaker_cooldown_seconds``: calls raise :class:`CircuitOpenError`
   (an ``AuthError``) at once, without reaching the provider. After the cooldown one trial
   call goes through (half-open): success closes the breaker, another auth failure reopens it.
2. **spend guard** — at most ``max_calls`` calls are started per ``window_seconds`` (a sliding
   window); one more raises :class:`SpendLimitError`, so escalation falls back to the
   deterministic summary instead of calling.
3. **time limit** — the call runs in a worker thread and the caller waits at most
   ``timeout_seconds``; past that it gets :class:`~.base.SummarizerTimeout` (the abandoned
   call finishes in the background and its answer is dropped). Providers also give the limit
   to their SDK, so the HTTP request itself ends too.

:meth:`GuardedSummarizer.state` returns all of it as plain data (for ``lossless stats``).
Windows and cooldowns read an injectable clock, so tests never sleep for them.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import ClassVar, Literal, TypeVar, cast

from ..config import GuardsConfig
from .base import (
    AgentRequest,
    AgentStep,
    AuthError,
    Summarizer,
    SummarizerError,
    SummarizerTimeout,
    SummaryRequest,
    SummaryResult,
)

__all__ = [
    "CircuitOpenError",
    "Clock",
    "GuardedSummarizer",
    "SpendLimitError",
    "guard",
    "guard_state",
]

logger = logging.getLogger(__name__)

#: A source of seconds: ``time.monotonic`` for windows and cooldowns, ``time.time`` for the
#: wall-clock times shown in :meth:`GuardedSummarizer.state`.
Clock = Callable[[], float]

BreakerState = Literal["closed", "open", "half-open"]

T = TypeVar("T")


class SpendLimitError(SummarizerError):
    """The spend guard refused a call: too many calls in the current window."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CircuitOpenError(AuthError):
    """The circuit breaker is open after repeated auth failures: no call was made."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class GuardedSummarizer(Summarizer):
    """A summarizer with a time limit, a spend guard and a circuit breaker around it.

    Prefer :func:`guard`, which also carries the wrapped summarizer's name and capability
    flags over. Thread-safe: background compaction may call it from several threads.
    """

    name: ClassVar[str] = "guarded"

    def __init__(
        self,
        inner: Summarizer,
        settings: GuardsConfig | None = None,
        *,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
    ) -> None:
        self.inner = inner
        self.settings = settings or GuardsConfig()
        self.model = inner.model
        self.tool_calling = inner.tool_calling
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._started: deque[float] = deque()  # start times of admitted calls in the window
        self._auth_failures = 0  # consecutive
        self._open_until: float | None = None  # None: closed; past: half-open
        self._trial_running = False
        self._last_error_kind: str | None = None
        self._last_error_at: float | None = None  # wall clock
        self._counts = {
            "calls": 0,
            "succeeded": 0,
            "failed": 0,
            "timed_out": 0,
            "refused_by_spend_guard": 0,
            "refused_by_breaker": 0,
        }

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"GuardedSummarizer({self.inner!r}, timeout={s.timeout_seconds:g}s,"
            f" max_calls={s.max_calls}/{s.window_seconds:g}s,"
            f" breaker={s.breaker_threshold}x/{s.breaker_cooldown_seconds:g}s)"
        )

    # --- the call --------------------------------------------------------------------------

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Admit the call (breaker, spend guard), then run it within the time limit."""
        return self._guarded(lambda: self.inner.summarize(request))

    def agent_step(self, request: AgentRequest) -> AgentStep:
        """A tool-calling step of the inner model, under the same guards as a summary."""
        return self._guarded(lambda: self.inner.agent_step(request))

    def _guarded(self, call: Callable[[], T]) -> T:
        trial = self._admit()
        try:
            result = self._call_within_limit(call)
        except BaseException as exc:
            self._record_failure(exc, trial)
            raise
        self._record_success(trial)
        return result

    def _admit(self) -> bool:
        """Check the breaker and the spend guard; returns whether this is a half-open trial."""
        s = self.settings
        with self._lock:
            now = self._clock()
            state = self._breaker_state(now)
            if state == "open" or (state == "half-open" and self._trial_running):
                self._counts["refused_by_breaker"] += 1
                wait = max(0.0, (self._open_until or now) - now)
                raise CircuitOpenError(
                    f"circuit breaker open after {self._auth_failures} consecutive auth"
                    f" failures of summarizer {self.inner.name!r}; no call made, next try in"
                    f" {wait:.0f} s. Fix the API key (or its profile), or wait",
                    retry_after=wait,
                )
            self._prune(now)
            if len(self._started) >= s.max_calls:
                self._counts["refused_by_spend_guard"] += 1
                wait = max(0.0, self._started[0] + s.window_seconds - now)
                raise SpendLimitError(
                    f"spend guard: {len(self._started)} calls of summarizer"
                    f" {self.inner.name!r} in the last {s.window_seconds:g} s already (limit"
                    f" guards.max_calls = {s.max_calls}); not calling, next call allowed in"
                    f" {wait:.1f} s. Raise guards.max_calls or guards.window_seconds if this"
                    " is expected",
                    retry_after=wait,
                )
            self._started.append(now)
            self._counts["calls"] += 1
            trial = state == "half-open"
            if trial:
                self._trial_running = True
            return trial

    def _call_within_limit(self, call: Callable[[], T]) -> T:
        limit = self.settings.timeout_seconds
        done = threading.Event()
        outcome: list[T | BaseException] = []

        def run() -> None:
            try:
                outcome.append(call())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller, who raises it
                outcome.append(exc)
            finally:
                done.set()

        worker = threading.Thread(
            target=run, name=f"lossless-summarizer-{self.inner.name}", daemon=True
        )
        worker.start()
        if not done.wait(limit):
            raise SummarizerTimeout(
                f"summarizer {self.inner.name!r} did not answer within {limit:g} s"
                " (guards.timeout_seconds); raise it for slow models or check the endpoint"
            )
        answer = outcome[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    # --- bookkeeping -----------------------------------------------------------------------

    def _record_success(self, trial: bool) -> None:
        with self._lock:
            self._counts["succeeded"] += 1
            self._close_breaker()
            if trial:
                self._trial_running = False

    def _record_failure(self, exc: BaseException, trial: bool) -> None:
        s = self.settings
        with self._lock:
            self._counts["failed"] += 1
            self._last_error_kind = type(exc).__name__
            self._last_error_at = self._wall_clock()
            if trial:
                self._trial_running = False
            if isinstance(exc, AuthError):
                self._auth_failures += 1
                if self._auth_failures >= s.breaker_threshold:
                    self._open_until = self._clock() + s.breaker_cooldown_seconds
                    logger.warning(
                        "circuit breaker of summarizer %s opened for %g s after %d"
                        " consecutive auth failures; fix the API key",
                        self.inner.name,
                        s.breaker_cooldown_seconds,
                        self._auth_failures,
                    )
            elif isinstance(exc, SummarizerTimeout):
                self._counts["timed_out"] += 1  # says nothing about the key: breaker unchanged
            else:
                self._close_breaker()  # the provider answered past authentication

    def _close_breaker(self) -> None:
        self._auth_failures = 0
        self._open_until = None

    def _breaker_state(self, now: float) -> BreakerState:
        if self._open_until is None:
            return "closed"
        return "open" if now < self._open_until else "half-open"

    def _prune(self, now: float) -> None:
        horizon = now - self.settings.window_seconds
        while self._started and self._started[0] <= horizon:
            self._started.popleft()

    def _iso(self, wall: float) -> str:
        return datetime.fromtimestamp(wall, UTC).isoformat(timespec="seconds")

    # --- state -----------------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        """Every guard's state as plain data: limits, calls in the window, the breaker (and
        until when it stays open), the last error kind, and counters since start."""
        s = self.settings
        with self._lock:
            now = self._clock()
            wall = self._wall_clock()
            self._prune(now)
            breaker = self._breaker_state(now)
            open_for = (
                max(0.0, self._open_until - now)
                if breaker == "open" and self._open_until is not None
                else None
            )
            return {
                "summarizer": self.inner.name,
                "model": self.model,
                "timeout_seconds": s.timeout_seconds,
                "spend": {
                    "calls_in_window": len(self._started),
                    "max_calls": s.max_calls,
                    "window_seconds": s.window_seconds,
                },
                "breaker": {
                    "state": breaker,
                    "consecutive_auth_failures": self._auth_failures,
                    "threshold": s.breaker_threshold,
                    "cooldown_seconds": s.breaker_cooldown_seconds,
                    "open_until": None if open_for is None else self._iso(wall + open_for),
                    "retry_in_seconds": None if open_for is None else round(open_for, 3),
                },
                "last_error_kind": self._last_error_kind,
                "last_error_at": (
                    None if self._last_error_at is None else self._iso(self._last_error_at)
                ),
                "counts": dict(self._counts),
            }


@functools.cache
def _guarded_type(inner_type: type[Summarizer]) -> type[GuardedSummarizer]:
    """A GuardedSummarizer subclass that carries *inner_type*'s name and capability flags."""
    made = type(
        f"Guarded{inner_type.__name__}",
        (GuardedSummarizer,),
        {
            "name": inner_type.name or GuardedSummarizer.name,
            "offline": inner_type.offline,
            "deterministic": inner_type.deterministic,
            "__module__": __name__,
        },
    )
    return cast(type[GuardedSummarizer], made)


def guard(
    inner: Summarizer,
    settings: GuardsConfig | None = None,
    *,
    clock: Clock = time.monotonic,
    wall_clock: Clock = time.time,
) -> GuardedSummarizer:
    """Wrap *inner* in the guards of *settings* (``[guards]``; the defaults without it).

    The wrapper has *inner*'s name, model and capability flags, so logs and recorded summaries
    read the same as without it. *clock* (monotonic seconds) drives the spend window and the
    breaker cooldown; *wall_clock* (epoch seconds) only the times shown by ``state()``.
    """
    return _guarded_type(type(inner))(inner, settings, clock=clock, wall_clock=wall_clock)


def guard_state(summarizer: Summarizer) -> dict[str, object] | None:
    """The guard state of *summarizer* (``None`` when it is not guarded)."""
    return summarizer.state() if isinstance(summarizer, GuardedSummarizer) else None
