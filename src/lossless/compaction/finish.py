"""Finishing provisional summaries: the model's summary put in place of the offline one.

A compaction a turn needs now does not wait for a model: with a model summarizer its passes
are written at once by the offline summarizer and marked provisional (model
:data:`~lossless.model.PROVISIONAL`). :func:`finish` then asks the model for each one's
summary, from the same sources, and puts its text in place of the provisional text in one
transaction (:meth:`~lossless.store.Store.finish_summary`: same id, same edges, same place in
the context), so the DAG, grants, ``describe`` and ``expand`` are the same at every step and a
crash leaves either text, never none.

* Leaves are independent: up to ``guards.concurrency`` calls run at once. A condensed summary
  waits until every summary it was made from is final (its model summary is made from their
  final text).
* A provider's "slow down" (HTTP 429 with ``retry-after``, or the spend guard) pauses new
  calls until then; the summary is tried again, not counted as a failure.
* ``guards.failures_before_fallback`` failures in a row end the run: the summaries still
  provisional in it are kept as the offline summarizer wrote them (final, named after it),
  with one warning, and the conversation records why (``lossless status`` shows it).
* A time limit (*deadline*, or ``guards.run_seconds``), *stop* or the engine closing ends the
  run between calls: what is left stays provisional for the next run.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model import Summary
from ..summarize.base import RateLimitedError, Summarizer, SummaryRequest, SummaryResult
from ..summarize.extractive import ExtractiveSummarizer
from ..timestamps import format_ts, now
from .compactor import Compactor, stored_sources

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["FELL_BACK_KEY", "FinishProgress", "FinishReport", "finish"]

logger = logging.getLogger(__name__)

#: Where a conversation records the run whose model failed and whose provisional summaries
#: were kept as the offline summarizer wrote them.
FELL_BACK_KEY = "summaries_fell_back"

#: Seconds new calls wait after a "slow down" that said no time.
RATE_LIMIT_WAIT = 5.0

#: Progress: (summaries finished or kept so far, summaries the run started with).
FinishProgress = Callable[[int, int], None]


@dataclass
class FinishReport:
    """What a run that finishes provisional summaries did."""

    pending: int = 0
    finished: int = 0
    #: Kept as the offline summarizer wrote them (the model kept failing, or is offline).
    kept_offline: int = 0
    #: Still provisional when the run ended (time, stop, failures of single summaries).
    left: int = 0
    calls: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    out_of_time: bool = False
    stopped: bool = False

    def merge(self, other: FinishReport) -> None:
        """Add *other* (a later run) to this report."""
        if not self.pending:
            self.pending = other.pending
        self.finished += other.finished
        self.kept_offline += other.kept_offline
        self.left = other.left
        self.calls += other.calls
        self.errors += other.errors
        self.seconds += other.seconds
        self.out_of_time = other.out_of_time
        self.stopped = other.stopped

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "pending": self.pending,
            "finished": self.finished,
            "kept_offline": self.kept_offline,
            "left": self.left,
            "calls": self.calls,
            "errors": self.errors[-5:],
            "seconds": round(self.seconds, 3),
            "out_of_time": self.out_of_time,
            "stopped": self.stopped,
        }


class _Watched(Summarizer):
    """The summarizer of one call, remembering a "slow down" answer's wait."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.model = inner.model
        self.retry_after: float | None = None

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            return self.inner.summarize(request)
        except Exception as exc:
            wait = getattr(exc, "retry_after", None)
            if wait is None and isinstance(exc, RateLimitedError):
                wait = RATE_LIMIT_WAIT  # a 429 that did not say how long
            if isinstance(wait, int | float):
                self.retry_after = max(float(wait), self.retry_after or 0.0)
            raise


@dataclass(frozen=True)
class _Answer:
    text: str
    tokens: int
    model: str | None
    calls: int
    error: str | None
    retry_after: float | None


class _Run:
    def __init__(
        self,
        services: Services,
        report: FinishReport,
        *,
        deadline: float | None,
        stop: threading.Event | None,
        concurrency: int | None,
        progress: FinishProgress | None,
    ) -> None:
        self.services = services
        self.store = services.store
        self.report = report
        guards = services.config.guards
        self.deadline = deadline
        if deadline is None and guards.run_seconds is not None:
            self.deadline = time.monotonic() + guards.run_seconds
        self.stop = stop
        self.concurrency = max(1, concurrency or guards.concurrency)
        self.progress = progress
        self.paused_until = 0.0
        self.failures_in_row = 0

    def ended(self) -> bool:
        r = self.report
        if (self.stop is not None and self.stop.is_set()) or self.services.closing.is_set():
            r.stopped = True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            r.out_of_time = True
        return r.stopped or r.out_of_time

    def ask(self, summary: Summary) -> _Answer:
        """The model's summary of *summary*'s sources (run in a worker thread)."""
        sources, from_summaries = stored_sources(self.store, summary)
        watched = _Watched(self.services.summarizer)
        # One compactor a call (calls run in several threads); untimed: the run's deadline
        # is checked before each call, and one call is bounded by guards.timeout_seconds.
        compactor = Compactor(self.services, watched, deadline=float("inf"))
        compactor.quiet = True  # a failure is counted here, and said once if they go on
        compactor.fall_back_offline = False  # the provisional text stays until the model's
        made, outcome, calls = compactor.summarize(
            summary.conversation_id,
            "leaf" if summary.kind == "leaf" else "condensed",
            summary.depth,
            sources,
            None,
            descendants=summary.descendant_count,
            file_ids=summary.file_ids,
            from_summaries=from_summaries,
        )
        if outcome.level == "fallback" or made.model in (None, "fallback"):
            error = outcome.errors[-1] if outcome.errors else "the model gave no usable summary"
            return _Answer("", 0, None, calls, error, watched.retry_after)
        return _Answer(outcome.text, outcome.tokens, made.model, calls, None, None)


def finish(
    services: Services,
    conversation_id: int | None = None,
    *,
    deadline: float | None = None,
    stop: threading.Event | None = None,
    concurrency: int | None = None,
    progress: FinishProgress | None = None,
) -> FinishReport:
    """Finish the provisional summaries of *conversation_id* (or of the whole store) with
    the model's (see the module doc)."""
    began = time.monotonic()
    pending = services.store.provisional_summaries(conversation_id)
    report = FinishReport(pending=len(pending))
    if not pending:
        return report
    summarizer = services.summarizer
    if summarizer.offline:
        # No model to wait for (the configuration changed since): the offline text is final.
        name = summarizer.name
        for s in pending:
            if services.store.finish_summary(s.summary_id, s.content, s.token_count, name):
                report.kept_offline += 1
        report.seconds = time.monotonic() - began
        return report
    run = _Run(
        services,
        report,
        deadline=deadline,
        stop=stop,
        concurrency=concurrency,
        progress=progress,
    )
    _drive(run, pending)
    report.left = services.store.pending_summaries(conversation_id).summaries
    report.seconds = time.monotonic() - began
    failed = len(report.errors)
    if failed and not report.kept_offline:
        # Said once a run (each call's failure was logged at debug level only).
        logger.warning(
            "summarizer %s failed for %d summar%s (last: %s); %s provisional, the next run"
            " tries again",
            summarizer.name,
            failed,
            "y" if failed == 1 else "ies",
            report.errors[-1].split(": ", 1)[-1],
            "it stays" if failed == 1 else "they stay",
        )
    return report


def _drive(run: _Run, pending: list[Summary]) -> None:
    """Ask for the summaries, up to ``run.concurrency`` at once, and write each answer as it
    comes. The calls run in daemon threads: a stop, or the engine closing, returns at once
    and drops the answers still on their way (those summaries stay provisional); a run out
    of time starts no new call but writes the answers of those in flight."""
    store, report = run.store, run.report
    todo: dict[str, Summary] = {s.summary_id: s for s in pending}
    parents = store.parents_of([s.summary_id for s in pending if s.kind != "leaf"])
    failed: dict[str, Summary] = {}
    running: dict[str, Summary] = {}
    answers: queue.Queue[tuple[str, _Answer]] = queue.Queue()
    done = 0

    def start(summary: Summary) -> None:
        def call() -> None:
            try:
                answer = run.ask(summary)
            except Exception as exc:  # noqa: BLE001 - a thread's top: the failure is the answer
                answer = _Answer("", 0, None, 0, f"{type(exc).__name__}: {exc}", None)
            answers.put((summary.summary_id, answer))

        running[summary.summary_id] = summary
        threading.Thread(target=call, name="lossless-finish", daemon=True).start()

    while todo or running:
        if run.ended() and run.report.stopped:
            return  # stopped or closing: the answers on their way are dropped
        if not run.ended() and time.monotonic() >= run.paused_until:
            waiting = set(todo) | set(failed) | set(running)
            for sid, s in list(todo.items()):
                if len(running) >= run.concurrency:
                    break
                if any(p in waiting for p in parents.get(sid, ())):
                    continue  # made from a summary not final yet
                del todo[sid]
                start(s)
        if not running:
            if run.ended() or not todo:
                return
            if time.monotonic() < run.paused_until:
                time.sleep(min(0.5, run.paused_until - time.monotonic()))
                continue
            return  # what is left waits on summaries that failed in this run
        try:
            sid, answer = answers.get(timeout=0.5)
        except queue.Empty:
            continue
        summary = running.pop(sid)
        report.calls += answer.calls
        if answer.error is None:
            run.failures_in_row = 0
            if store.finish_summary(sid, answer.text, answer.tokens, answer.model or "model"):
                report.finished += 1
        elif answer.retry_after is not None:
            # "Slow down": not the summary's fault; tried again after the wait.
            run.paused_until = max(run.paused_until, time.monotonic() + answer.retry_after)
            todo[sid] = summary
            continue
        else:
            run.failures_in_row += 1
            failed[sid] = summary
            report.errors.append(f"{sid}: {answer.error}")
        done += 1
        if run.progress is not None:
            run.progress(done, report.pending)
        if run.failures_in_row >= run.services.config.guards.failures_before_fallback:
            # The calls in flight end on their own; their answers are dropped.
            _keep_offline(run, [*failed.values(), *running.values(), *todo.values()])
            return


def _keep_offline(run: _Run, summaries: list[Summary]) -> None:
    """The model kept failing: the run's provisional summaries become final as the offline
    summarizer wrote them, said once in the log and recorded in each conversation."""
    store, report = run.store, run.report
    offline = ExtractiveSummarizer.name
    for s in summaries:
        if store.finish_summary(s.summary_id, s.content, s.token_count, offline):
            report.kept_offline += 1
    reason = report.errors[-1] if report.errors else "the model failed"
    name = run.services.summarizer.name
    logger.warning(
        "summarizer %s failed %d times in a row (last: %s); %d provisional summaries are kept"
        " as the %s summarizer wrote them. Check the provider (`lossless status`), then"
        " `lossless rewrite` can make them again with the model",
        name,
        run.failures_in_row,
        reason,
        report.kept_offline,
        offline,
    )
    at = format_ts(now())
    for conv in sorted({s.conversation_id for s in summaries}):
        kept = sum(s.conversation_id == conv for s in summaries)
        store.update_conversation(
            conv,
            metadata={
                FELL_BACK_KEY: {
                    "at": at,
                    "summarizer": name,
                    "reason": reason[:500],
                    "summaries": kept,
                }
            },
        )
