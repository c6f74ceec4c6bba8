"""What fits the budget: the essentials in order — the newest request, the newest summary, the
turn under way, the other summaries, the fresh tail, the resume summary, the older messages —
a message too large for its place shown clipped (:func:`_fit`); the room left spent on detail
(:func:`_fill`); date marks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..model import ContextItem, StoredMessage
from ..summarize.escalation import truncate_to_tokens
from ..timestamps import parse_ts
from .summaries import _Shown

if TYPE_CHECKING:
    from ..services import Services

#: The messages shown from below the summaries start at a seq that is a multiple of this, so
#: the start moves in steps as the conversation grows, not at every turn (a provider's prompt
#: cache keeps the prefix between steps).
FILL_STEP = 16


#: A message is shown clipped (its head and where to read it whole) only in at least this
#: much room; in less, it is left out.
MIN_CLIP_ROOM = 64


@dataclass
class _Fit:
    """Which context items go to the model (indices, in order), whether the resume summary
    does, and the messages shown clipped (index → the room for its head and note)."""

    indices: list[int]
    resume: bool
    clipped: dict[int, int] = field(default_factory=dict)
    #: The newest user request (its index), when the assembly shows it.
    request: int | None = None


def _units(items: Sequence[ContextItem], start: int, end: int) -> list[tuple[int, int]]:
    """``items[start:end]`` as units, newest first: a message with the tool results that
    follow it (a result never starts a unit: its call stays with it)."""
    out: list[tuple[int, int]] = []
    stop = end
    for i in range(end - 1, start - 1, -1):
        if items[i].role != "tool" or i == start:
            out.append((i, stop))
            stop = i
    return out


def _take_whole(
    items: Sequence[ContextItem],
    units: list[tuple[int, int]],
    room: int,
    take: set[int],
    *,
    skip_summaries: bool = False,
) -> tuple[int, bool]:
    """Take *units* into *take* in order while each fits *room* whole (with *skip_summaries*,
    without their summaries: placed already); the room left, and whether every unit fit."""
    for start, stop in units:
        ids = [
            i
            for i in range(start, stop)
            if not (skip_summaries and items[i].summary_id is not None)
        ]
        cost = sum(items[i].tokens for i in ids)
        if cost > room:
            return room, False
        take.update(ids)
        room -= cost
    return room, True


def _fit(
    items: Sequence[ContextItem],
    tail: int,
    budget: int,
    resume_tokens: int,
    *,
    prompted: bool = False,
) -> _Fit:
    """The budget is a cap, spent on the essentials first, in this order:

    1. the newest user request, whole (alone over the budget: its head and where to read it)
       — unless *prompted*: the host sends the request itself, after these messages;
    2. the newest summary;
    3. what followed the request (the turn under way), newest first, a message too large for
       what is left shown clipped;
    4. the other summaries, newest first;
    5. the fresh tail before the request, newest first, whole units (a tool result stays
       with its call);
    6. the resume summary;
    7. the older messages, newest first.

    Each step stops at the first item that does not fit, so what is shown of the
    conversation's end is one unbroken run."""
    n = len(items)
    room = budget
    take: set[int] = set()
    clipped: dict[int, int] = {}
    request = None
    if not prompted:
        request = next(
            (
                i
                for i in range(n - 1, -1, -1)
                if items[i].item_type == "message" and items[i].role == "user"
            ),
            None,
        )
    summaries = [i for i in range(n - 1, -1, -1) if items[i].summary_id is not None]
    if request is not None:
        if items[request].tokens <= room:
            take.add(request)
            room -= items[request].tokens
        else:
            # Alone over the budget: its head and where to read it whole, leaving the newest
            # summary its room when that takes at most half the budget (a request with
            # summaries stored never goes without one).
            keep = items[summaries[0]].tokens if summaries else 0
            if keep > budget // 2 or budget - keep < MIN_CLIP_ROOM:
                keep = 0
            clipped[request] = room - keep
            room = keep
    if summaries and items[summaries[0]].tokens <= room:
        take.add(summaries[0])
        room -= items[summaries[0]].tokens
    # The turn under way (after the request; without one, the fresh tail).
    whole = True
    for start, stop in _units(items, tail if request is None else request + 1, n):
        cost = sum(items[i].tokens for i in range(start, stop))
        if cost <= room:
            take.update(range(start, stop))
            room -= cost
            continue
        big = max(range(start, stop), key=lambda i: items[i].tokens)
        rest = cost - items[big].tokens
        if room - rest >= MIN_CLIP_ROOM:
            take.update(i for i in range(start, stop) if i != big)
            clipped[big] = room - rest
            room = 0
        whole = False
        break
    for i in summaries[1:]:
        if items[i].tokens > room:
            break
        take.add(i)
        room -= items[i].tokens
    if whole and request is not None:
        room, whole = _take_whole(items, _units(items, min(tail, request), request), room, take)
    resume = bool(resume_tokens) and resume_tokens <= room
    room -= resume_tokens if resume else 0
    if whole:
        older = min(tail, request if request is not None else tail)
        _take_whole(items, _units(items, 0, older), room, take, skip_summaries=True)
    return _Fit(sorted(take | set(clipped)), resume, clipped, request)


def _below(services: Services, summary_id: str) -> Iterator[list[int]]:
    """The messages below a summary, newest first, a leaf's worth at a time (the DAG is
    walked only as far as the caller reads)."""
    parents, messages = services.store.summary_sources(summary_id)
    if messages:
        yield messages[::-1]
    for parent in reversed(parents):
        yield from _below(services, parent)


def _unfold(
    services: Services, shown: _Shown, chosen: list[ContextItem], room: int
) -> tuple[list[ContextItem], int]:
    """*chosen* with its summaries replaced by the summaries they were made from (a leaf
    folded under pressure: the leaves it took the place of) while those fit in *room* (the
    newest first, again and again: the deepest detail the room holds), and the room left."""
    done: set[str] = set()  # leaves, and summaries whose sources did not fit
    while True:
        pos = next(
            (
                n
                for n in range(len(chosen) - 1, -1, -1)
                if chosen[n].summary_id is not None and chosen[n].summary_id not in done
            ),
            None,
        )
        if pos is None:
            return chosen, room
        summary_id = str(chosen[pos].summary_id)
        done.add(summary_id)
        known = shown.found.get(summary_id)  # (its parents were read as it was loaded)
        parents = known[1] if known else services.store.summary_sources(summary_id)[0]
        if not parents:
            # A leaf folded under pressure took the place of several leaves: it unfolds into
            # them (a summary rewritten took the place of one, over the same messages: no).
            parents = services.store.replaced_by(summary_id)
            if len(parents) < 2:
                continue
        sources = services.store.get_summaries(parents)
        shown.load(sources)
        cost = sum(shown.costs[s.summary_id] for s in sources) - chosen[pos].tokens
        if cost > room:
            continue
        room -= cost
        instead = [ContextItem.of_summary(s, -1, tokens=shown.costs[s.summary_id]) for s in sources]
        chosen = chosen[:pos] + instead + chosen[pos + 1 :]


def _fill(
    services: Services,
    shown: _Shown,
    chosen: list[ContextItem],
    room: int,
    taken: frozenset[int] = frozenset(),
) -> list[ContextItem]:
    """*chosen* with the *room* left under the budget used for detail, as it was stored:
    first its summaries are unfolded into what they were made from while that fits
    (:func:`_unfold`); then the messages below the newest summaries are shown, newest first,
    from a seq that is a multiple of :data:`FILL_STEP` and never from a tool result — a
    summary all of whose messages are shown gives its place (and tokens) to them. The
    messages *taken* for the request are shown elsewhere (they are passed over here)."""
    chosen, room = _unfold(services, shown, chosen, room)
    present = {i.message_id for i in chosen if i.message_id is not None} | taken
    # The messages below the summaries, newest first (with the summary each is below), while
    # they fit: a summary all of whose messages are taken would give its tokens back.
    run: list[tuple[int, int, ContextItem]] = []  # (seq, summary position, item)
    below: dict[int, int] = {}  # summary position → how many messages are below it
    spent = freed = 0
    for pos in (n for n in range(len(chosen) - 1, -1, -1) if chosen[n].summary_id):
        count, complete = 0, True
        for batch in _below(services, str(chosen[pos].summary_id)):
            sizes = services.store.message_sizes(batch)
            for mid in batch:
                if mid in present or mid not in sizes:
                    continue
                seq, tokens, role = sizes[mid]
                if spent + tokens > room + freed + chosen[pos].tokens:
                    complete = False
                    break
                spent += tokens
                count += 1
                run.append(
                    (seq, pos, ContextItem(-1, "message", mid, None, tokens, role, None, "", ""))
                )
            if not complete:
                break
        below[pos] = count if complete else -1
        if not complete:
            break
        freed += chosen[pos].tokens
    # Unless it reaches back to the first summary's start, the run starts at a seq that is a
    # multiple of FILL_STEP, never on a tool result, and within the room once the summaries
    # it does not show whole are counted again.
    summaries = [n for n, item in enumerate(chosen) if item.summary_id]
    everything = all(below.get(n, -1) >= 0 for n in summaries)
    while run:
        while run and not everything and (run[-1][0] % FILL_STEP or run[-1][2].role == "tool"):
            run.pop()
        shown_below = Counter(pos for _, pos, _ in run)
        whole = {pos for pos, count in below.items() if count >= 0 and shown_below[pos] == count}
        if sum(i.tokens for _, _, i in run) - sum(chosen[p].tokens for p in whole) <= room:
            break
        run.pop()
        everything = False
    else:
        return chosen
    out: list[ContextItem] = []
    for pos, item in enumerate(chosen):
        if pos not in whole:
            out.append(item)
        out += [i for _, p, i in reversed(run) if p == pos]
    return out


def date_mark(stamp: str) -> str:
    """The mark a message said on a new day carries: ``[Tuesday 9 May 2023]``."""
    moment = parse_ts(stamp)
    if moment is None:
        return ""
    return f"[{moment:%A} {moment.day} {moment:%B %Y}]"


def _date_marks(
    services: Services,
    chosen: list[ContextItem],
    messages: dict[int, StoredMessage],
    shown: _Shown,
    room: int,
) -> dict[int, str]:
    """Which of *chosen* (by position) carry a date mark, and its text: a user message said
    on another day (UTC) than the user message or summary before it (a summary's day is the
    day it ends), the newest first while the marks fit in *room* — so "when did we…" can be
    answered from the context: a message's day is that of the last mark or summary before
    it (or of the first message, which has nothing before it to differ from)."""
    marks: dict[int, str] = {}
    changed: list[int] = []
    day = None
    for n, item in enumerate(chosen):
        if item.summary_id is not None:
            summary = shown.found[item.summary_id][0]
            day = (summary.latest_at or summary.created_at)[:10]
        elif item.role == "user":
            said = messages[int(item.message_id or 0)].created_at[:10]
            if day is not None and said != day:
                changed.append(n)
            day = said
    for n in reversed(changed):
        mark = date_mark(messages[int(chosen[n].message_id or 0)].created_at)
        cost = services.tokens.count(mark)
        if not mark or cost > room:
            break
        marks[n] = mark
        room -= cost
    return marks


def _clip(services: Services, message: StoredMessage, room: int) -> str | None:
    """A message over the budget on its own as its start within *room* tokens and a note
    saying where the rest is (``None`` when not even the note fits)."""
    message_id = message.message_id
    count = services.tokens.count
    note = (
        f"[msg#{message_id} is ~{message.token_count:,} tokens, more than this context can"
        f" hold; its start follows, and lcm_describe msg#{message_id} reads it whole]"
    )
    if count(note) > room:
        return None
    head = truncate_to_tokens(message.content, room - count(note) - 1, services.tokens)
    stub = f"{note}\n{head}"
    while count(stub) > room and head:  # a counter that disagrees with the estimate
        head = head[: len(head) * 3 // 4]
        stub = f"{note}\n{head}"
    return stub if count(stub) <= room else note
