"""What the next request needs: prompt-aware assembly.

The engine searches the store for the request (``lcm_grep``'s ranking, within the
conversation's family) and hands the ranked message ids to :func:`~lossless.assemble.assemble`.
Here each hit becomes a *unit* — its turn, from the user request it belongs to up to the
next, or when that does not fit, the request with the hit, the tool results of its call (or,
for a tool result, the call it answers) and, for a request, the reply — and the units are
taken in rank order while they fit the room given to them (:func:`pick`). A unit always
starts with its request: no answer is shown without its question, and the roles take turns
as they did (a host that keeps the list it is given never finds two of its messages run
together). Once the rest of the context is chosen, each message taken is placed where it was
said (:func:`place`): after the last item of the context that starts before it (a summary
starts where its first message does), so a summary's detail follows the summary, in order.
Messages of an earlier conversation of the family come first, as they came before."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model import ContextItem

if TYPE_CHECKING:
    from ..services import Services

#: How many seqs either side of a hit its unit may reach (a turn of many calls).
REACH = 48


@dataclass(frozen=True)
class Recalled:
    """A message taken for the request: where it was said, and its context item."""

    conversation_id: int
    seq: int
    item: ContextItem


def _units(rows: Sequence[tuple[int, int, int, str, int]], at: int) -> list[list[int]]:
    """The units of ``rows[at]`` (positions in *rows*, messages in seq order), the first to
    try first: its turn — from the user request it belongs to up to the next one —
    then the request with the least that keeps the hit whole: back to the call a tool result
    answers, on over the results of its calls, and for a request, the reply. Every unit
    starts with its request, so the roles take turns as they did (no answer without its
    question; a host that keeps the list it is given never finds two of its messages run
    together). None when the request is not within reach (:data:`REACH`)."""
    request = next((n for n in range(at, -1, -1) if rows[n][3] == "user"), None)
    if request is None:
        return []
    start = at
    while start > request and rows[start][3] == "tool":
        start -= 1
    end = at + 1
    while end < len(rows) and rows[end][3] == "tool":
        end += 1
    if start == request and end < len(rows) and rows[end][3] != "user":  # the reply
        end += 1
        while end < len(rows) and rows[end][3] == "tool":
            end += 1
    least = sorted({request, *range(start, end)})
    after = next((n for n in range(at + 1, len(rows)) if rows[n][3] == "user"), None)
    if after is None:
        return [least]
    turn = list(range(request, after))
    return [turn, least] if turn != least else [least]


def pick(
    services: Services, chosen: Sequence[ContextItem], relevant: Sequence[int], room: int
) -> list[Recalled]:
    """The messages of the units of *relevant* (message ids, the best first) that are not in
    *chosen*, unit by unit while they fit *room* (a unit too large for what is left is passed
    over for the next)."""
    present = {i.message_id for i in chosen if i.message_id is not None}
    taken: dict[int, Recalled] = {}
    for hit in relevant:
        if hit in present or hit in taken:
            continue
        rows = services.store.messages_near(hit, REACH)
        at = next((n for n, row in enumerate(rows) if row[0] == hit), None)
        if at is None:
            continue
        for positions in _units(rows, at):
            unit = [rows[n] for n in positions]
            unit = [r for r in unit if r[0] not in present and r[0] not in taken]
            cost = sum(r[2] for r in unit)
            if cost > room:
                continue
            room -= cost
            for mid, seq, tokens, role, conv in unit:
                item = ContextItem(-1, "message", mid, None, tokens, role, None, "", "")
                taken[mid] = Recalled(conv, seq, item)
            break
    return list(taken.values())


def place(
    services: Services,
    conversation_id: int,
    chosen: list[ContextItem],
    recalled: Sequence[Recalled],
) -> list[ContextItem]:
    """*chosen* with the *recalled* messages where they were said (see the module doc)."""
    if not recalled:
        return chosen
    sizes = services.store.message_sizes([i.message_id for i in chosen if i.message_id])
    seqs = {mid: seq for mid, (seq, _, _) in sizes.items()}
    starts = services.store.summary_starts([i.summary_id for i in chosen if i.summary_id])
    # Where each item of the context starts, when it is of this conversation.
    keys: list[int | None] = []
    for item in chosen:
        if item.summary_id is not None:
            conv, seq = starts.get(item.summary_id, (None, 0))
            keys.append(seq if conv == conversation_id else None)
        else:
            keys.append(seqs.get(int(item.message_id or 0)))
    earlier = sorted(
        (r for r in recalled if r.conversation_id != conversation_id),
        key=lambda r: (r.conversation_id, r.seq),
    )
    after: dict[int, list[Recalled]] = {}  # position in chosen (-1: the start) → recalled
    for r in recalled:
        if r.conversation_id != conversation_id:
            continue
        pos = max((n for n, key in enumerate(keys) if key is not None and key <= r.seq), default=-1)
        after.setdefault(pos, []).append(r)
    out = [r.item for r in earlier]
    out += [r.item for r in sorted(after.get(-1, []), key=lambda r: r.seq)]
    for n, item in enumerate(chosen):
        out.append(item)
        out += [r.item for r in sorted(after.get(n, []), key=lambda r: r.seq)]
    return out
