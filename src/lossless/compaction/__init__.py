"""Compaction: leaf passes, condensed passes, and the three modes that drive them.

* **Leaf pass** — the oldest contiguous run of raw messages outside the fresh tail, capped at
  ``leaf_chunk_tokens`` and never cutting a tool call from its result, becomes one leaf
  summary (depth 0) linked to its messages; the run is replaced in the context by it.
* **Condensed pass** — the shallowest depth with enough contiguous same-depth summaries
  (``leaf_min_fanout`` at depth 0, ``condensed_min_fanout`` above) becomes one summary at the
  next depth, linked to the summaries it was made from.
* **Modes** — *incremental* after a turn (a leaf pass when the raw tokens outside the tail
  exceed ``leaf_chunk_tokens``, then condensation up to ``incremental_max_depth``); *full
  sweep* (leaf passes until none is eligible, then condensation from the shallowest depth);
  *until under* a token target (up to ``max_rounds`` sweeps, with the hard fanout floor).

The summarizer is called outside any transaction; each pass then writes in one transaction,
checking that the context it read is still there. A pass that would not save tokens writes
nothing, so every written pass makes progress, and the summarizer is called at most a few times
per chunk of new material (never for history already summarized).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..resume import warm as warm_resume
from .chunks import fresh_tail_start
from .compactor import Compactor
from .report import CompactionReport, PassResult

if TYPE_CHECKING:
    from ..services import Services

logger = logging.getLogger(__name__)

__all__ = [
    "CompactionPlan",
    "CompactionReport",
    "Compactor",
    "PassResult",
    "after_turn_compaction",
    "compact",
    "fresh_tail_start",
    "plan",
]


def compact(
    services: Services,
    conversation_id: int,
    *,
    mode: str = "full",
    until: int | None = None,
    budget: int | None = None,
    deadline: float | None = None,
    if_free: bool = False,
    force: bool = False,
    instructions: str | None = None,
    stop: threading.Event | None = None,
    provisional: bool | None = None,
    progress: Callable[[PassResult], None] | None = None,
) -> CompactionReport:
    """Compact a conversation's active context (see :meth:`lossless.engine.Engine.compact`):
    one process at a time per conversation (on PostgreSQL, across hosts); with *if_free* a
    run elsewhere is left to finish the work, and the report has no passes.

    With a model summarizer and *provisional* (default: ``provisional_summaries``) the passes
    are written at once by the offline summarizer, and finishing them with the model's
    summaries is handed to ``services.finish_later`` (off the turn)."""
    if provisional is None:
        provisional = services.config.provisional_summaries
    compactor = Compactor(
        services,
        budget=budget,
        deadline=deadline,
        instructions=instructions,
        stop=stop,
        provisional=provisional,
        progress=progress,
    )
    store = services.store
    here = services.compacting.get(conversation_id)
    if not here.acquire(blocking=not if_free):
        return _left_to_another(services, conversation_id, mode)
    try:
        with store.compaction_lock(conversation_id, wait=not if_free) as mine:
            if not mine:
                return _left_to_another(services, conversation_id, mode)
            return _compact_held(compactor, services, conversation_id, mode, until, force)
    finally:
        here.release()


def log_run(report: CompactionReport, why: str) -> None:
    """One log line (INFO, ``lossless.compaction``) for a compaction run that wrote passes:
    what asked for it (``turn``, ``host``), its passes, the tokens before and after."""
    if report.passes:
        logger.info(
            "conversation %s: %s compaction, %d pass(es), %d -> %d tokens%s",
            report.conversation_id,
            why,
            len(report.passes),
            report.tokens_before,
            report.tokens_after,
            "" if report.target is None else f" (target {report.target})",
        )


def _left_to_another(services: Services, conversation_id: int, mode: str) -> CompactionReport:
    """The report of a run left to the compaction already under way: no passes."""
    tokens = sum(i.tokens for i in services.store.context(conversation_id))
    return CompactionReport(conversation_id, mode, tokens, tokens)


def _compact_held(
    compactor: Compactor,
    services: Services,
    conversation_id: int,
    mode: str,
    until: int | None,
    force: bool = False,
) -> CompactionReport:
    if until is not None:
        report = compactor.until_under(conversation_id, until, force=force)
    elif mode == "incremental":
        report = compactor.incremental(conversation_id)
    elif mode == "full":
        report = compactor.full_sweep(conversation_id)
    else:
        raise ValueError(f"unknown compaction mode {mode!r}; use full or incremental")
    if report.provisional and services.finish_later is not None:
        services.finish_later(conversation_id)
    if report.passes and services.config.resume.inject:
        # Off the turn: the summary is for the next assembly, which builds it itself if it
        # comes first; built here, it was a third of a PostgreSQL turn that compacts.
        services.background.submit(
            ("resume", conversation_id),
            functools.partial(warm_resume, services, conversation_id),
            again=True,
        )
    return report


def nothing_due(
    services: Services, conversation_id: int, token_budget: int | None
) -> CompactionReport | None:
    """The report of a turn that leaves nothing to compact (no pass is due), or ``None``
    when :func:`after_turn_compaction` has work to do. Most turns need nothing: it is said
    from the context the store keeps as the turn's own write left it (no read at all;
    compaction reads it again under its lock), without taking the compaction locks (on
    PostgreSQL, two round trips each), and without handing the turn to a worker."""
    cfg = services.config
    items = services.store.context(conversation_id, as_written=True)
    tokens = sum(i.tokens for i in items)
    raw = Compactor(services, budget=token_budget).raw_tokens_outside_tail(items)
    if raw <= cfg.leaf_chunk_tokens and (
        token_budget is None or tokens <= int(token_budget * cfg.context_threshold)
    ):
        return CompactionReport(conversation_id, "incremental", tokens, tokens)
    return None


def after_turn_compaction(
    services: Services, conversation_id: int, token_budget: int | None
) -> CompactionReport:
    """What a turn compacts: incrementally, then, when the context passed
    ``context_threshold`` of *token_budget*, down to ``compaction_target`` of it (so the next
    turns have headroom instead of triggering a small compaction each). One deadline
    (``guards.run_seconds``) for the whole turn."""
    cfg = services.config
    idle = nothing_due(services, conversation_id, token_budget)
    if idle is not None:
        return idle
    run = cfg.guards.run_seconds
    deadline = None if run is None else time.monotonic() + run
    report = compact(
        services,
        conversation_id,
        mode="incremental",
        budget=token_budget,
        deadline=deadline,
        if_free=True,
    )
    if token_budget is not None:
        threshold = int(token_budget * cfg.context_threshold)
        target = int(token_budget * min(cfg.compaction_target, cfg.context_threshold))
        if report.tokens_after > threshold and not report.out_of_time:
            over = compact(
                services,
                conversation_id,
                until=target,
                budget=token_budget,
                deadline=deadline,
                if_free=True,
            )
            report.passes.extend(over.passes)
            report.rounds = over.rounds
            report.target = target
            report.tokens_after = over.tokens_after
            report.out_of_time = over.out_of_time
    log_run(report, "turn")
    return report


@dataclass(frozen=True)
class CompactionPlan:
    """What compacting a conversation would do now (``lossless compact --dry-run``)."""

    conversation_id: int
    context_items: int
    context_tokens: int
    fresh_tail_items: int
    fresh_tail_tokens: int
    raw_tokens_outside_tail: int
    leaf_passes_about: int
    next_leaf_messages: int
    next_leaf_tokens: int
    next_condensation_summaries: int
    next_condensation_depth: int | None
    incremental_would_run: bool


def plan(services: Services, conversation_id: int) -> CompactionPlan:
    """The dry run: the context's shape and the next passes, nothing written."""
    compactor = Compactor(services)
    items = services.store.context(conversation_id)
    tail = compactor.tail_start(items)
    raw_outside = compactor.raw_tokens_outside_tail(items)
    chunk = compactor.leaf_chunk(items)
    condensed = compactor.condensed_chunk(items)
    per_pass = services.config.leaf_chunk_tokens
    return CompactionPlan(
        conversation_id=conversation_id,
        context_items=len(items),
        context_tokens=sum(i.tokens for i in items),
        fresh_tail_items=len(items) - tail,
        fresh_tail_tokens=sum(i.tokens for i in items[tail:]),
        raw_tokens_outside_tail=raw_outside,
        leaf_passes_about=-(-raw_outside // per_pass) if raw_outside else 0,
        next_leaf_messages=len(chunk),
        next_leaf_tokens=sum(i.tokens for i in chunk),
        next_condensation_summaries=len(condensed),
        next_condensation_depth=condensed[0].depth if condensed else None,
        incremental_would_run=raw_outside > per_pass,
    )
