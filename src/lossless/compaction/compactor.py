"""The compactor: leaf and condensed passes over one store with one summarizer, and the modes
that drive them (incremental, full sweep, until under a target)."""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal

from ..errors import ConflictError
from ..model import PROVISIONAL, ContextItem, MessageText, Summary
from ..summarize.base import (
    Level,
    SourceItem,
    Summarizer,
    SummarizerTimeout,
    SummaryRequest,
    SummaryResult,
)
from ..summarize.escalation import Outcome, escalate
from ..summarize.extractive import ExtractiveSummarizer
from ..summarize.prompts import render_sources, system_prompt, user_prompt
from ..timestamps import format_ts, now

if TYPE_CHECKING:
    from ..config import Config
    from ..services import Services
    from ..store import Store
from .chunks import ChunkPlanner
from .report import CompactionReport, PassResult

#: Times a pass is tried when another process changes the context under it.
CONFLICT_RETRIES = 5

#: A pass aims for at most this share of its input (the configured target caps it too).
CHUNK_TARGET_SHARE = 0.75
#: Where a conversation keeps the stretches a pass could not shrink, and how many.
UNSHRINKABLE_KEY = "unshrinkable"
UNSHRINKABLE_KEPT = 8


def message_sources(messages: Sequence[MessageText]) -> tuple[SourceItem, ...]:
    """Messages as the source items of a leaf summary."""
    return tuple(
        SourceItem(f"msg#{mid}", speaker, text, at, at, tokens)
        for mid, speaker, text, at, tokens in messages
    )


def stored_sources(
    store: Store, summary: Summary, replaced: dict[str, Summary] | None = None
) -> tuple[tuple[SourceItem, ...], bool]:
    """What a stored summary was made from, as source items, and whether they are summaries:
    a leaf's messages, a condensed summary's parents (each taken from *replaced* when it is
    there: a parent rewritten in the same run)."""
    parent_ids, message_ids = store.summary_sources(summary.summary_id)
    if summary.kind == "leaf":
        return message_sources(store.message_texts(message_ids)), False
    found = {p.summary_id: p for p in store.get_summaries(parent_ids)}
    found.update({k: v for k, v in (replaced or {}).items() if k in found})
    return summary_sources([found[p] for p in parent_ids]), True


def summary_sources(summaries: Sequence[Summary]) -> tuple[SourceItem, ...]:
    """Summaries as the source items of a condensed summary."""
    return tuple(
        SourceItem(
            ref=s.summary_id,
            role="summary",
            text=s.content,
            earliest_at=s.earliest_at or s.created_at,
            latest_at=s.latest_at or s.created_at,
            tokens=s.token_count,
        )
        for s in summaries
    )


class _Deadline(Summarizer):
    """A summarizer that refuses to start a call after *deadline* (monotonic seconds)."""

    def __init__(self, inner: Summarizer, deadline: float) -> None:
        self.inner = inner
        self.deadline = deadline
        self.name = inner.name  # type: ignore[misc]
        self.model = inner.model

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        if time.monotonic() >= self.deadline:
            raise SummarizerTimeout(
                "the compaction run reached its time limit (guards.run_seconds); the rest of"
                " this run falls back without calling the model"
            )
        return self.inner.summarize(request)


class Compactor(ChunkPlanner):
    """Runs passes over one store with one summarizer (the caller holds the right to compact
    the conversation; writers of new messages go on meanwhile)."""

    def __init__(
        self,
        services: Services,
        summarizer: Summarizer | None = None,
        *,
        budget: int | None = None,
        config: Config | None = None,
        deadline: float | None = None,
        instructions: str | None = None,
        stop: threading.Event | None = None,
        provisional: bool = False,
        progress: Callable[[PassResult], None] | None = None,
    ) -> None:
        self.services = services
        #: Told of each pass written (a progress bar).
        self.progress = progress
        #: What the host asked the summaries to keep (OpenClaw's ``customInstructions``,
        #: Hermes's ``focus_topic``): passed to the summarizer with every pass of this run.
        self.instructions = instructions.strip() if instructions and instructions.strip() else None
        #: Set by the caller to stop the run between passes (a host that gave up waiting):
        #: the pass under way finishes or is not written; nothing is left half done.
        self.stop = stop
        #: While a run compacts until a target: no pass aims above this (a summary as large
        #: as the room it should make would not make it).
        self.pass_target_cap: int | None = None
        self.store = services.store
        self.config = config or services.config
        summarizer = summarizer or services.summarizer
        run = self.config.guards.run_seconds
        if deadline is None and run is not None:
            deadline = time.monotonic() + run
        #: Past it no model call starts, and no pass is written that the deadline cut short:
        #: the run ends and what is left stays due (never a truncated placeholder).
        self.deadline = deadline
        self.out_of_time = False
        # Past the run's deadline no model is called: escalation falls back at once.
        self.summarizer = summarizer if deadline is None else _Deadline(summarizer, deadline)
        #: What writes a provisional summary, and what a model summarizer falls back to.
        self.offline: Summarizer = summarizer if summarizer.offline else ExtractiveSummarizer()
        #: Every pass of this run is written at once by the offline summarizer, marked
        #: provisional, for the model's summary to replace off the turn (only where the
        #: summarizer is a model: an offline one's summaries are final as written).
        self.provisional = provisional and not summarizer.offline
        #: A model that fails every rung gives way to the offline summarizer (not when the
        #: caller keeps the provisional summary itself: finishing them).
        self.fall_back_offline = not summarizer.offline
        #: A model's failures are logged at debug level (the caller says them once).
        self.quiet = False
        # With a known budget the tail may take at most its share of it (the spec's defaults
        # were made for very large windows; 64 messages can be a third of a small one).
        caps = [c for c in (self.config.fresh_tail_max_tokens,) if c is not None]
        if budget is not None:
            caps.append(max(1, int(budget * self.config.fresh_tail_budget_share)))
        self.tail_max_tokens: int | None = min(caps) if caps else None
        # Within a run, the stretches each conversation's passes could not shrink, read once.
        self._unshrinkables: dict[int, list[str]] = {}
        # Within a run, each conversation's context as read once and then patched after each
        # pass (a summary takes its first source's ordinal and the items after keep theirs,
        # so the patched list is what a read would give): passes read what they summarize,
        # not the whole context again. Dropped when a write finds the context changed.
        self._contexts: dict[int, list[ContextItem]] = {}

    def _context(self, conversation_id: int) -> list[ContextItem]:
        items = self._contexts.get(conversation_id)
        if items is None:
            items = self.store.context(conversation_id)
            if self._running:
                self._contexts[conversation_id] = items
        return items

    @contextlib.contextmanager
    def _run(self) -> Iterator[None]:
        """One run (a sweep, an incremental step): the context is read once for it."""
        outer = self._running
        self._running = True
        try:
            yield
        finally:
            self._running = outer
            if not outer:
                self._contexts.clear()
                self._unshrinkables.clear()

    _running = False

    def _placed(self, conversation_id: int, chunk: Sequence[ContextItem], summary: Summary) -> None:
        """The cached context with *summary* in place of *chunk* (as the store now has it)."""
        items = self._contexts.get(conversation_id)
        if items is None:
            return
        # Ordinals increase along the context: the chunk's place is found by bisection.
        start = bisect.bisect_left(items, chunk[0].ordinal, key=lambda it: it.ordinal)
        if items[start : start + len(chunk)] != list(chunk):
            self._contexts.pop(conversation_id, None)  # not what was written over: read again
            return
        items[start : start + len(chunk)] = [ContextItem.of_summary(summary, chunk[0].ordinal)]

    # --- passes ----------------------------------------------------------------------------

    def leaf_pass(self, conversation_id: int) -> PassResult | None:
        """Run one leaf pass; ``None`` when nothing is eligible or nothing would be saved."""
        return self._retrying(lambda: self._leaf_pass(conversation_id))

    def _retrying(self, run: Callable[[], PassResult | None]) -> PassResult | None:
        """Run a pass again when another process changed the context under it (its write is
        refused whole, so trying again on the fresh context is safe)."""
        for attempt in range(CONFLICT_RETRIES):
            try:
                return run()
            except ConflictError:
                self._contexts.clear()  # the context changed under the run: read it again
                if attempt == CONFLICT_RETRIES - 1:
                    raise
        return None  # pragma: no cover - the loop returns or raises

    def _leaf_pass(self, conversation_id: int) -> PassResult | None:
        items = self._context(conversation_id)
        chunk = self.leaf_chunk(items)
        if not chunk:
            return None
        message_ids = [it.message_id for it in chunk if it.message_id]
        sources = message_sources(self.store.message_texts(message_ids))
        previous = self._previous_context(items, chunk[0].ordinal, depth=0)
        files = self.store.large_files(message_ids=message_ids)
        file_ids = tuple(dict.fromkeys(f.file_id for f in files))
        return self._write(
            conversation_id, "leaf", 0, chunk, sources, previous, descendants=0, file_ids=file_ids
        )

    def condensed_pass(
        self,
        conversation_id: int,
        *,
        max_depth: int | None = None,
        hard: bool = False,
    ) -> PassResult | None:
        """Run one condensed pass; ``None`` when nothing is eligible or nothing would be saved.

        With *hard*, a run of summaries of mixed depths may be merged when no same-depth run
        qualifies.
        """
        return self._retrying(
            lambda: self._condensed_pass(conversation_id, max_depth=max_depth, hard=hard)
        )

    def _condensed_pass(
        self, conversation_id: int, *, max_depth: int | None, hard: bool
    ) -> PassResult | None:
        items = self._context(conversation_id)
        chunk = self.condensed_chunk(items, max_depth=max_depth, hard=hard)
        if not chunk:
            return None
        parents = self.store.get_summaries([it.summary_id for it in chunk if it.summary_id])
        top = max(p.depth for p in parents)
        if hard and sum(p.depth == top for p in parents) < self.config.condensed_min_fanout:
            return self._fold(conversation_id, items, chunk, parents, top)
        sources = summary_sources(parents)
        depth = top + 1
        previous = self._previous_context(items, chunk[0].ordinal, depth=depth)
        descendants = sum(1 + p.descendant_count for p in parents)
        file_ids = tuple(dict.fromkeys(f for p in parents for f in p.file_ids))
        return self._write(
            conversation_id,
            "condensed",
            depth,
            chunk,
            sources,
            previous,
            descendants=descendants,
            file_ids=file_ids,
            from_provisional=any(p.provisional for p in parents),
        )

    def _fold(
        self,
        conversation_id: int,
        items: Sequence[ContextItem],
        chunk: list[ContextItem],
        merged: Sequence[Summary],
        depth: int,
    ) -> PassResult | None:
        """Under pressure, a run with fewer than ``condensed_min_fanout`` summaries at its
        deepest depth becomes one summary at that same depth: the deepest ones are folded in
        (their own sources become the new summary's, and they are retired as rewritten, naming
        it), the shallower ones are its sources. So the DAG grows a level only when a level
        has ``condensed_min_fanout`` summaries, and its depth stays within 1 + log of the
        leaf count, however often a tight window forces a compaction."""
        folded = [p for p in merged if p.depth == depth]
        links: list[int] | list[str]
        if depth == 0:  # leaves only: one leaf over all their messages
            kind: Literal["leaf", "condensed"] = "leaf"
            links = [m for p in merged for m in self.store.summary_sources(p.summary_id)[1]]
            descendants = 0
        else:
            kind = "condensed"
            links = [
                parent
                for p in merged
                for parent in (
                    self.store.summary_sources(p.summary_id)[0]
                    if p.depth == depth
                    else [p.summary_id]
                )
            ]
            descendants = sum(1 + p.descendant_count for p in self.store.get_summaries(links))
        if not links:
            return None
        file_ids = tuple(dict.fromkeys(f for p in merged for f in p.file_ids))
        return self._write(
            conversation_id,
            kind,
            depth,
            chunk,
            summary_sources(merged),
            self._previous_context(items, chunk[0].ordinal, depth=depth),
            descendants=descendants,
            file_ids=file_ids,
            links=links,
            retire=[p.summary_id for p in folded],
            from_provisional=any(p.provisional for p in merged),
        )

    def _unshrinkable(self, conversation_id: int) -> list[str]:
        """The stretches of this conversation whose summary came back no smaller than they
        were (kept in its metadata, the newest :data:`UNSHRINKABLE_KEPT`): a pass over one of
        them is not tried again, in this run or a later one, until the stretch changes."""
        found = self._unshrinkables.get(conversation_id)
        if found is None:
            kept = self.store.get_conversation(conversation_id).metadata.get(UNSHRINKABLE_KEY)
            found = [str(k) for k in kept] if isinstance(kept, list) else []
            if self._running:
                self._unshrinkables[conversation_id] = found
        return found

    def _remember_unshrinkable(self, conversation_id: int, key: str) -> None:
        kept = [*self._unshrinkable(conversation_id), key][-UNSHRINKABLE_KEPT:]
        self.store.update_conversation(conversation_id, metadata={UNSHRINKABLE_KEY: kept})
        if self._running:
            self._unshrinkables[conversation_id] = kept

    def _previous_context(
        self, items: Sequence[ContextItem], before: int, *, depth: int
    ) -> str | None:
        # Ordinals increase along the context: start just before *before*, not at the end.
        at = bisect.bisect_left(items, before, key=lambda it: it.ordinal)
        for i in range(at - 1, -1, -1):
            it = items[i]
            if it.item_type == "summary" and it.depth == depth:
                return self.store.get_summaries([str(it.summary_id)])[0].content
        return None

    def _write(
        self,
        conversation_id: int,
        kind: Literal["leaf", "condensed"],
        depth: int,
        chunk: list[ContextItem],
        sources: tuple[SourceItem, ...],
        previous: str | None,
        *,
        descendants: int,
        file_ids: tuple[str, ...] = (),
        links: list[int] | list[str] | None = None,
        retire: Sequence[str] = (),
        from_provisional: bool = False,
    ) -> PassResult | None:
        key = f"{kind}:{depth}:{chunk[0].ordinal}-{chunk[-1].ordinal}:{len(chunk)}"
        if key in self._unshrinkable(conversation_id):
            return None  # tried before and not smaller: not again until the stretch changes
        # A summary made from a provisional one is provisional too: the model's is made from
        # its sources' final text, once they have it.
        provisional = self.provisional or from_provisional
        summary, outcome, calls = self.summarize(
            conversation_id,
            kind,
            depth,
            sources,
            previous,
            descendants=descendants,
            file_ids=file_ids,
            from_summaries=kind == "condensed" or links is not None,
            provisional=provisional,
        )
        if outcome.level == "fallback" and not provisional and self.past_deadline():
            # The run's time ran out while this pass waited for the model: the stretch stays
            # due for the next run rather than becoming a cut of its own text.
            self.out_of_time = True
            return None
        input_tokens = sum(s.tokens for s in sources)
        if outcome.tokens >= input_tokens:
            self._remember_unshrinkable(conversation_id, key)
            return None
        self.store.write_summary(summary, chunk, links=links, retire=retire)
        self._placed(conversation_id, chunk, summary)
        result = PassResult(
            kind=kind,
            summary_id=summary.summary_id,
            depth=depth,
            sources=len(chunk),
            tokens_before=input_tokens,
            tokens_after=outcome.tokens,
            level=outcome.level,
            calls=calls,
            provisional=summary.provisional,
        )
        if self.progress is not None:
            self.progress(result)
        return result

    def past_deadline(self) -> bool:
        """Whether the run's time limit (``guards.run_seconds``, or the caller's) has passed."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def summarize(
        self,
        conversation_id: int,
        kind: Literal["leaf", "condensed"],
        depth: int,
        sources: tuple[SourceItem, ...],
        previous: str | None,
        *,
        descendants: int,
        file_ids: tuple[str, ...] = (),
        from_summaries: bool | None = None,
        provisional: bool = False,
    ) -> tuple[Summary, Outcome, int]:
        """Summarize *sources* (with escalation) into a new, unwritten summary; returns it,
        the escalation outcome and the number of summarizer calls. *from_summaries*: the
        sources are summaries (the prompt says so), by default when *kind* is condensed.

        *provisional*: written at once by the offline summarizer and marked so (its model
        is :data:`~lossless.model.PROVISIONAL`). A model that fails every rung of the ladder
        gives way to the offline summarizer (a summary, not a cut of the text)."""
        cfg = self.config
        condensed = kind == "condensed" if from_summaries is None else from_summaries
        input_tokens = sum(s.tokens for s in sources)
        # A chunk smaller than the configured target would come back whole (not smaller than
        # its input), escalate, and end truncated: aim for at most half of what goes in.
        configured = cfg.condensed_target_tokens if condensed else cfg.leaf_target_tokens
        target = max(16, min(configured, int(input_tokens * CHUNK_TARGET_SHARE)))
        if self.pass_target_cap is not None:
            target = max(16, min(target, self.pass_target_cap))
        calls = 0
        # The sources as the model reads them, made once: every rung's prompt holds them, and
        # the deterministic fallback cuts them.
        rendered = render_sources(sources, condensed=condensed)

        def make(level: Level, target_tokens: int, temperature: float) -> SummaryRequest:
            nonlocal calls
            calls += 1
            return SummaryRequest(
                kind=kind,
                depth=depth,
                level=level,
                sources=sources,
                target_tokens=target_tokens,
                temperature=temperature,
                system=system_prompt(),
                prompt=user_prompt(
                    sources,
                    depth=depth,
                    level=level,
                    target_tokens=target_tokens,
                    previous_context=previous,
                    condensed=condensed,
                    rendered=rendered,
                    instructions=self.instructions,
                ),
                previous_context=previous,
                max_output_tokens=3 * target_tokens,
                instructions=self.instructions,
            )

        def ladder(summarizer: Summarizer) -> Outcome:
            return escalate(
                summarizer,
                make,
                input_tokens=input_tokens,
                target_tokens=target,
                source_text=rendered,
                fallback_max_tokens=cfg.fallback_max_tokens,
                counter=self.services.tokens,
                quiet=self.quiet,
            )

        outcome = ladder(self.offline if provisional else self.summarizer)
        model = outcome.model if outcome.level != "fallback" else "fallback"
        if provisional:
            model = PROVISIONAL
        elif outcome.level == "fallback" and self.fall_back_offline and not self.past_deadline():
            offline = ladder(self.offline)
            if offline.level != "fallback":
                outcome = Outcome(
                    offline.text, offline.tokens, "fallback", self.offline.name, outcome.errors
                )
                model = self.offline.name
        created = format_ts(now())
        # Content and time, plus what it summarizes: a message or summary is summarized only
        # once, so ids stay unique when the clock has not moved and the text repeats.
        refs = ",".join(s.ref for s in sources)
        digest = hashlib.sha256(
            f"{conversation_id}\0{kind}\0{refs}\0{created}\0{outcome.text}".encode(
                "utf-8", "surrogatepass"
            )
        ).hexdigest()
        summary = Summary(
            summary_id="sum_" + digest[:16],
            conversation_id=conversation_id,
            kind=kind,
            depth=depth,
            content=outcome.text,
            token_count=outcome.tokens,
            created_at=created,
            earliest_at=min(s.earliest_at for s in sources),
            latest_at=max(s.latest_at for s in sources),
            descendant_count=descendants,
            file_ids=file_ids,
            model=model,
        )
        return summary, outcome, calls

    # --- modes -----------------------------------------------------------------------------

    def _tokens(self, conversation_id: int) -> int:
        return sum(it.tokens for it in self._context(conversation_id))

    def incremental(self, conversation_id: int) -> CompactionReport:
        """After a turn: a leaf pass if enough raw material built up, then condensation."""
        with self._run():
            items = self._context(conversation_id)
            report = CompactionReport(conversation_id, "incremental", sum(i.tokens for i in items))
            if self.raw_tokens_outside_tail(
                items
            ) > self.config.leaf_chunk_tokens and not self.stopped(report):
                result = self.leaf_pass(conversation_id)
                if result is not None:
                    report.passes.append(result)
                    max_depth = self.config.incremental_max_depth
                    while max_depth != 0 and not self.stopped(report):
                        condensed = self.condensed_pass(conversation_id, max_depth=max_depth)
                        if condensed is None:
                            break
                        report.passes.append(condensed)
        # Nothing written: the context read above is still the context (this is every turn).
        report.tokens_after = (
            self._tokens(conversation_id) if report.passes else report.tokens_before
        )
        return report

    def full_sweep(self, conversation_id: int, *, hard: bool = False) -> CompactionReport:
        """Leaf passes until none is eligible, then condensation from the shallowest depth."""
        with self._run():
            report = CompactionReport(conversation_id, "full", self._tokens(conversation_id))
            self._sweep(conversation_id, report, hard=hard)
        report.tokens_after = self._tokens(conversation_id)
        return report

    def _sweep(
        self,
        conversation_id: int,
        report: CompactionReport,
        *,
        hard: bool,
    ) -> bool:
        progressed = False
        while not self.stopped(report):
            result = self.leaf_pass(conversation_id)
            if result is None or result.saved <= 0:
                break
            report.passes.append(result)
            progressed = True
        while not self.stopped(report):
            result = self.condensed_pass(conversation_id, hard=hard)
            if result is None or result.saved <= 0:
                break
            report.passes.append(result)
            progressed = True
        return progressed

    def stopped(self, report: CompactionReport) -> bool:
        """Whether the caller asked the run to stop, or its time ran out (recorded in
        *report*: what is left stays due for the next run)."""
        if self.stop is not None and self.stop.is_set():
            report.stopped = True
        if self.out_of_time or self.past_deadline():
            self.out_of_time = report.out_of_time = True
        return report.stopped or report.out_of_time

    def until_under(
        self, conversation_id: int, target: int, *, force: bool = False
    ) -> CompactionReport:
        """Up to ``max_rounds`` sweeps until the context is at or under *target* tokens.

        Under pressure the hard fanout floor applies, and summaries are folded together when
        no run is long enough to condense (:meth:`_fold`: the depth grows only when a level
        has ``condensed_min_fanout`` summaries): reaching the target every time keeps the
        room for new turns. No pass aims above *target* itself (a summary larger than the room
        it should make would not make it), and in a forced run no pass aims above a third of
        it. So a run that is not forced may end above *target* when what stays verbatim is
        large (the fresh tail beside summaries as large as the target), and the context then
        comes back to the threshold sooner: on a 4k budget twice as many runs as with the
        third, each keeping three times the sentences (the context without a prompt held the
        evidence for 39.0% of the dev LoCoMo questions at 4k against 31.0%); at 16k the runs
        are the same. A forced run is for a host that must fit its next request: it aims
        low, so that the request fits.

        With *force* (a host that must fit its next request), when nothing outside the fresh
        tail is left to compact, the tail gives up its oldest turns, half of it at a time, down
        to the newest exchange (the newest user message and what followed it), and those are
        compacted too.
        """
        self.pass_target_cap = max(16, target // 3 if force else target)
        tail_cap = self.tail_max_tokens  # a forced run halves it: given back after
        try:
            with self._run():
                report = CompactionReport(
                    conversation_id, "until", self._tokens(conversation_id), target=target
                )
                self._until(conversation_id, target, report, force=force)
            report.tokens_after = self._tokens(conversation_id)
            return report
        finally:
            self.pass_target_cap = None
            self.tail_max_tokens = tail_cap

    def _until(
        self, conversation_id: int, target: int, report: CompactionReport, *, force: bool
    ) -> None:
        hard = False
        for _ in range(self.config.max_rounds + (2 * self.config.max_rounds if force else 0)):
            if self._tokens(conversation_id) <= target or self.stopped(report):
                return
            report.rounds += 1
            if self._sweep(conversation_id, report, hard=hard):
                continue
            if not hard:
                # Under pressure: condense with the hard fanout floor, in this same round.
                hard = True
                if self._sweep(conversation_id, report, hard=True):
                    continue
            if not (force and self._shrink_tail(conversation_id, report)):
                return  # nothing more can be compacted

    def _shrink_tail(self, conversation_id: int, report: CompactionReport) -> bool:
        """Halve the fresh tail's cap (whole turns leave its front), down to the newest
        exchange; ``False`` when it is that already."""
        items = self._context(conversation_id)
        start = self.tail_start(items)
        newest = max((i for i in range(start, len(items)) if items[i].role == "user"), default=None)
        if newest is None or newest <= start:
            return False
        size = sum(it.tokens for it in items[start:])
        self.tail_max_tokens = max(1, size // 2)
        report.tail_tokens = sum(it.tokens for it in items[self.tail_start(items) :])
        return True
