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

import bisect
import contextlib
import functools
import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .errors import ConflictError
from .model import ContextItem, MessageText, Summary
from .resume import warm as warm_resume
from .summarize.base import (
    Level,
    SourceItem,
    Summarizer,
    SummarizerTimeout,
    SummaryRequest,
    SummaryResult,
)
from .summarize.escalation import Outcome, escalate
from .summarize.prompts import render_sources, system_prompt, user_prompt
from .timestamps import format_ts, now

if TYPE_CHECKING:
    from .config import Config
    from .services import Services

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

#: Times a pass is tried when another process changes the context under it.
CONFLICT_RETRIES = 5
#: Context items after a leaf chunk whose tool links a pass reads first (widened, doubling,
#: while a call in the chunk is still unanswered at the window's edge).
PAIR_WINDOW = 64

#: A pass aims for at most this share of its input (the configured target caps it too).
CHUNK_TARGET_SHARE = 0.75


@dataclass(frozen=True)
class PassResult:
    """One written pass."""

    kind: Literal["leaf", "condensed"]
    summary_id: str
    depth: int
    sources: int
    tokens_before: int
    tokens_after: int
    level: str
    calls: int

    @property
    def saved(self) -> int:
        """Tokens the pass took out of the active context."""
        return self.tokens_before - self.tokens_after


@dataclass
class CompactionReport:
    """What a compaction run did."""

    conversation_id: int
    mode: str
    tokens_before: int
    tokens_after: int = 0
    passes: list[PassResult] = field(default_factory=list)
    target: int | None = None
    rounds: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def summarizer_calls(self) -> int:
        """Summarizer calls made (escalation can make two per pass)."""
        return sum(p.calls for p in self.passes)

    @property
    def reached_target(self) -> bool | None:
        """For ``until`` runs: whether the context ended at or under the target."""
        return None if self.target is None else self.tokens_after <= self.target

    def by_depth(self) -> dict[int, int]:
        """Summaries written, by depth."""
        out: dict[int, int] = {}
        for p in self.passes:
            out[p.depth] = out.get(p.depth, 0) + 1
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "conversation_id": self.conversation_id,
            "mode": self.mode,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "target": self.target,
            "reached_target": self.reached_target,
            "rounds": self.rounds,
            "summarizer_calls": self.summarizer_calls,
            "summaries_by_depth": {str(k): v for k, v in self.by_depth().items()},
            "passes": [
                {
                    "kind": p.kind,
                    "summary_id": p.summary_id,
                    "depth": p.depth,
                    "sources": p.sources,
                    "tokens_before": p.tokens_before,
                    "tokens_after": p.tokens_after,
                    "level": p.level,
                }
                for p in self.passes
            ],
            "errors": self.errors,
        }


def fresh_tail_start(
    items: Sequence[ContextItem], count: int, max_tokens: int | None = None
) -> int:
    """Index of the first item of the fresh tail (``len(items)`` when the tail is empty).

    The tail is the last *count* raw messages, moved back to the start of their user turn so
    that a turn is not split from its assistant and tool messages (when the turn start is
    within another *count* messages; an autonomous run longer than that is cut where no tool
    result is separated from its call). With *max_tokens*, whole turns leave the front of the
    tail while it is larger than that, down to the last turn.
    """
    if count <= 0:
        return len(items)
    # The count-th raw message from the end (or the first, when there are fewer): read from
    # the end, so a long compacted history costs nothing here.
    start, seen = -1, 0
    for i in range(len(items) - 1, -1, -1):
        if items[i].item_type == "message":
            start, seen = i, seen + 1
            if seen == count:
                break
    if start < 0:
        return len(items)
    limit = max(0, start - count)
    back = start
    while back > limit and items[back].role != "user" and items[back - 1].item_type == "message":
        back -= 1
    if items[back].role == "user":
        start = back
    else:
        while start > 0 and items[start].role == "tool" and items[start - 1].item_type == "message":
            start -= 1
    if max_tokens is not None:
        size = sum(it.tokens for it in items[start:])
        while size > max_tokens:
            nxt = next((i for i in range(start + 1, len(items)) if items[i].role == "user"), None)
            if nxt is None:
                break
            size -= sum(it.tokens for it in items[start:nxt])
            start = nxt
    return start


def message_sources(messages: Sequence[MessageText]) -> tuple[SourceItem, ...]:
    """Messages as the source items of a leaf summary."""
    return tuple(
        SourceItem(f"msg#{mid}", speaker, text, at, at, tokens)
        for mid, speaker, text, at, tokens in messages
    )


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


class Compactor:
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
    ) -> None:
        self.services = services
        self.store = services.store
        self.config = config or services.config
        summarizer = summarizer or services.summarizer
        run = self.config.guards.run_seconds
        if deadline is None and run is not None:
            deadline = time.monotonic() + run
        # Past the run's deadline no model is called: escalation falls back at once.
        self.summarizer = summarizer if deadline is None else _Deadline(summarizer, deadline)
        # With a known budget the tail may take at most its share of it (the spec's defaults
        # were made for very large windows; 64 messages can be a third of a small one).
        caps = [c for c in (self.config.fresh_tail_max_tokens,) if c is not None]
        if budget is not None:
            caps.append(max(1, int(budget * self.config.fresh_tail_budget_share)))
        self.tail_max_tokens: int | None = min(caps) if caps else None
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

    # --- planning --------------------------------------------------------------------------

    def tail_start(self, items: Sequence[ContextItem]) -> int:
        """Where the protected fresh tail begins."""
        return fresh_tail_start(items, self.config.fresh_tail_count, self.tail_max_tokens)

    def raw_tokens_outside_tail(self, items: Sequence[ContextItem]) -> int:
        """Tokens of raw messages that a leaf pass could take."""
        tail = self.tail_start(items)
        return sum(it.tokens for it in items[:tail] if it.item_type == "message")

    def leaf_chunk(self, items: Sequence[ContextItem]) -> list[ContextItem]:
        """The next leaf chunk: oldest raw run outside the tail, capped, tool pairs whole."""
        tail = self.tail_start(items)
        first = next((i for i in range(tail) if items[i].item_type == "message"), None)
        if first is None:
            return []
        # The chunk is capped: only what it takes of the raw run is read (a long backlog's
        # run reaches to the tail, and each pass would walk it all).
        cap = self.config.leaf_chunk_tokens
        end, used = first, 0
        while (
            end < tail
            and items[end].item_type == "message"
            and (end == first or used + items[end].tokens <= cap)
        ):
            used += items[end].tokens
            end += 1
        return list(items[first : self._pair_tools(items, first, end, tail)])

    def _pair_tools(self, items: Sequence[ContextItem], first: int, end: int, tail: int) -> int:
        """Move the chunk end so that no tool call in it has its result outside it.

        Calls are matched to the results that follow them, in order (so an id reused by a
        later turn is a new call). A call with no result after it (a run that died mid-call)
        cannot be split from one and does not hold the chunk back. When the oldest message is
        a call whose result is only in the fresh tail (a user message came in between), the
        chunk is empty: the call waits until its result can go with it.

        The links are read for a window after the chunk, widened only while a call in the
        chunk is still unanswered at its edge: a pass reads what it needs, not the rest of the
        context (a full compaction of a long backlog stays linear).
        """
        horizon = min(len(items), end + PAIR_WINDOW)
        run_end = end  # where the raw run ends (at the tail at most), read as far as the window
        while True:
            while run_end < min(tail, horizon) and items[run_end].item_type == "message":
                run_end += 1
            found, complete = self._pair_within(items, first, end, run_end, horizon)
            if complete or horizon >= len(items):
                return found
            horizon = min(len(items), first + 2 * (horizon - first))

    def _pair_within(
        self, items: Sequence[ContextItem], first: int, end: int, run_end: int, horizon: int
    ) -> tuple[int, bool]:
        """:meth:`_pair_tools` over ``items[first:horizon]``: the end, and whether the window
        was wide enough (no call before that end unanswered at its edge)."""
        ids = [
            it.message_id
            for it in items[first:horizon]
            if it.item_type == "message" and it.message_id is not None
        ]
        links = self.store.tool_links(ids)
        pairs: list[tuple[int, int]] = []  # (index of the call, index of its result)
        open_calls: dict[str, int] = {}
        for i in range(first, horizon):
            calls, results = links.get(items[i].message_id or -1, (set(), set()))
            for r in results:
                call_at = open_calls.pop(r, None)
                if call_at is not None:
                    pairs.append((call_at, i))
            for c in calls:
                open_calls[c] = i

        def split(stop: int) -> list[tuple[int, int]]:
            return [(c, r) for c, r in pairs if c < stop <= r]

        cut = split(end)
        while cut and end < min(run_end, horizon):
            # Take the results that follow, if they are in this run.
            calls, results = links.get(items[end].message_id or -1, (set(), set()))
            if not results and not calls and items[end].role != "tool":
                break
            end += 1
            cut = split(end)
        while cut:
            # The results are beyond the run: end the chunk before the call (an empty chunk
            # when that call is the oldest message).
            end = min(c for c, _ in cut)
            cut = split(end)
        complete = end < horizon and not any(at < end for at in open_calls.values())
        return end, complete

    def condensed_chunk(
        self,
        items: Sequence[ContextItem],
        *,
        max_depth: int | None = None,
        hard: bool = False,
    ) -> list[ContextItem]:
        """The oldest run of same-depth summaries at the shallowest eligible depth (and, when
        *hard* and nothing else qualifies, of adjacent summaries of mixed depths)."""
        tail = self.tail_start(items)
        runs: list[tuple[int, int, int]] = []  # (depth, start, end)
        i = 0
        while i < tail:
            it = items[i]
            if it.item_type != "summary" or it.depth is None:
                i += 1
                continue
            j = i
            while j < tail and items[j].item_type == "summary" and items[j].depth == it.depth:
                j += 1
            runs.append((it.depth, i, j))
            i = j
        cfg = self.config
        for depth in sorted({d for d, _, _ in runs}):
            if max_depth is not None and max_depth >= 0 and depth + 1 > max_depth:
                continue
            if hard:
                fanout = cfg.condensed_min_fanout_hard
            else:
                fanout = cfg.leaf_min_fanout if depth == 0 else cfg.condensed_min_fanout
            for d, start, end in runs:
                if d != depth or end - start < fanout:
                    continue
                stop, used = start, 0
                while stop < end and (
                    stop - start < fanout or used + items[stop].tokens <= cfg.leaf_chunk_tokens
                ):
                    used += items[stop].tokens
                    stop += 1
                return list(items[start:stop])
        if hard and max_depth is None:
            return self._mixed_chunk(items, tail)
        return []

    def _mixed_chunk(self, items: Sequence[ContextItem], tail: int) -> list[ContextItem]:
        """Under pressure, when no same-depth run is long enough: the oldest run of adjacent
        summaries of any depths (each level can hold one summary, so without this a long
        conversation keeps one summary per depth and cannot get under a small budget)."""
        cfg = self.config
        i = 0
        while i < tail:
            if items[i].item_type != "summary":
                i += 1
                continue
            j = i
            while j < tail and items[j].item_type == "summary":
                j += 1
            if j - i >= cfg.condensed_min_fanout_hard:
                stop, used = i, 0
                while stop < j and (
                    stop - i < cfg.condensed_min_fanout_hard
                    or used + items[stop].tokens <= cfg.leaf_chunk_tokens
                ):
                    used += items[stop].tokens
                    stop += 1
                return list(items[i:stop])
            i = j
        return []

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
        sources = summary_sources(parents)
        depth = max(p.depth for p in parents) + 1
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
        )

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
    ) -> PassResult | None:
        summary, outcome, calls = self.summarize(
            conversation_id,
            kind,
            depth,
            sources,
            previous,
            descendants=descendants,
            file_ids=file_ids,
        )
        input_tokens = sum(s.tokens for s in sources)
        if outcome.tokens >= input_tokens:
            return None
        self.store.write_summary(summary, chunk)
        self._placed(conversation_id, chunk, summary)
        return PassResult(
            kind=kind,
            summary_id=summary.summary_id,
            depth=depth,
            sources=len(chunk),
            tokens_before=input_tokens,
            tokens_after=outcome.tokens,
            level=outcome.level,
            calls=calls,
        )

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
    ) -> tuple[Summary, Outcome, int]:
        """Summarize *sources* (with escalation) into a new, unwritten summary; returns it,
        the escalation outcome and the number of summarizer calls."""
        cfg = self.config
        condensed = kind == "condensed"
        input_tokens = sum(s.tokens for s in sources)
        # A chunk smaller than the configured target would come back whole (not smaller than
        # its input), escalate, and end truncated: aim for at most half of what goes in.
        configured = cfg.condensed_target_tokens if condensed else cfg.leaf_target_tokens
        target = max(16, min(configured, int(input_tokens * CHUNK_TARGET_SHARE)))
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
                ),
                previous_context=previous,
                max_output_tokens=3 * target_tokens,
            )

        outcome = escalate(
            self.summarizer,
            make,
            input_tokens=input_tokens,
            target_tokens=target,
            source_text=rendered,
            fallback_max_tokens=cfg.fallback_max_tokens,
            counter=self.services.tokens,
        )
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
            model=outcome.model if outcome.level != "fallback" else "fallback",
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
            if self.raw_tokens_outside_tail(items) > self.config.leaf_chunk_tokens:
                result = self.leaf_pass(conversation_id)
                if result is not None:
                    report.passes.append(result)
                    max_depth = self.config.incremental_max_depth
                    while max_depth != 0:
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
        while True:
            result = self.leaf_pass(conversation_id)
            if result is None or result.saved <= 0:
                break
            report.passes.append(result)
            progressed = True
        while True:
            result = self.condensed_pass(conversation_id, hard=hard)
            if result is None or result.saved <= 0:
                break
            report.passes.append(result)
            progressed = True
        return progressed

    def until_under(self, conversation_id: int, target: int) -> CompactionReport:
        """Up to ``max_rounds`` sweeps until the context is at or under *target* tokens.

        Under pressure the hard fanout floor applies, and adjacent summaries of mixed depths
        are merged when no same-depth run is long enough: reaching the target every time keeps
        the room for new turns, and so the compaction rate, constant.
        """
        with self._run():
            report = CompactionReport(
                conversation_id, "until", self._tokens(conversation_id), target=target
            )
            hard = False
            for _ in range(self.config.max_rounds):
                if self._tokens(conversation_id) <= target:
                    break
                report.rounds += 1
                if self._sweep(conversation_id, report, hard=hard):
                    continue
                if hard:
                    break  # nothing more can be compacted
                # Under pressure: condense with the hard fanout floor, in this same round.
                hard = True
                if not self._sweep(conversation_id, report, hard=True):
                    break
        report.tokens_after = self._tokens(conversation_id)
        return report


def compact(
    services: Services,
    conversation_id: int,
    *,
    mode: str = "full",
    until: int | None = None,
    budget: int | None = None,
    deadline: float | None = None,
    if_free: bool = False,
) -> CompactionReport:
    """Compact a conversation's active context (see :meth:`lossless.engine.Engine.compact`):
    one process at a time per conversation (on PostgreSQL, across hosts); with *if_free* a
    run elsewhere is left to finish the work, and the report has no passes."""
    compactor = Compactor(services, budget=budget, deadline=deadline)
    store = services.store
    here = services.compacting.get(conversation_id)
    if not here.acquire(blocking=not if_free):
        return _left_to_another(services, conversation_id, mode)
    try:
        with store.compaction_lock(conversation_id, wait=not if_free) as mine:
            if not mine:
                return _left_to_another(services, conversation_id, mode)
            return _compact_held(compactor, services, conversation_id, mode, until)
    finally:
        here.release()


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
) -> CompactionReport:
    if until is not None:
        report = compactor.until_under(conversation_id, until)
    elif mode == "incremental":
        report = compactor.incremental(conversation_id)
    elif mode == "full":
        report = compactor.full_sweep(conversation_id)
    else:
        raise ValueError(f"unknown compaction mode {mode!r}; use full or incremental")
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
        if report.tokens_after > threshold:
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
