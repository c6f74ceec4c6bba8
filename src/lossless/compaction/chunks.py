"""Where passes take their material: the fresh tail, the next leaf chunk (tool calls never cut
from their results) and the next run of summaries to condense."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model import ContextItem

if TYPE_CHECKING:
    from ..config import Config
    from ..store import Store

#: Context items after a leaf chunk whose tool links a pass reads first (widened, doubling,
#: while a call in the chunk is still unanswered at the window's edge).
PAIR_WINDOW = 64


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


class ChunkPlanner:
    """The planning half of :class:`~lossless.compaction.compactor.Compactor`: what the next
    pass would take from a context (nothing is read but tool links, nothing written)."""

    config: Config
    store: Store
    tail_max_tokens: int | None

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
