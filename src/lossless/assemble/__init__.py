"""Context assembly: the message array a model sees before each turn.

The spec's steps: (1) the context items in ordinal order; (2) each resolved — a summary becomes
a user message holding the spec's ``<summary>`` XML (marked as untrusted history), a message is
rebuilt from its parts; (3) split into the evictable prefix and the protected fresh tail;
(4) the budget is a cap, spent on the essentials first (:func:`~.fit._fit`): the newest user
request whole (alone over the budget: its head and where to read it whole; left to the host
when it sends the request itself, *prompt*), the newest summary, the turn under way after the
request (a message too large for what is left shown clipped), the other summaries, the rest of
the fresh tail, the resume summary, the older messages — each step newest first, a tool call
and its results as one unit; (5) what room is still left is spent on detail (``fill_budget``):
summaries are unfolded into the
summaries they were made from while those fit, newest first, then the messages below the
newest summaries are shown as they were (newest first, from a message whose seq is a multiple
of :data:`FILL_STEP`, so the prompt's prefix stays put for several turns; a summary all of
whose messages are shown gives its place to them); (6) assistant content as block arrays;
(7) tool pairing sanitized: every tool result has its call in the output and every call its
result — an orphan of either kind is left out. A summary costs what it is shown as (its
untrusted-data note and XML), so the budget counts what the model reads.

The cost is proportional to the active context, never to the stored history. Nothing here
depends on the time of day, so two assemblies with no compaction in between give byte-identical
prefixes (provider prompt caches keep hitting).

Formats: ``anthropic`` (Messages: block arrays, roles alternating, thinking blocks passed
through), ``openai`` (Chat Completions: ``tool_calls`` and ``tool`` messages) and ``responses``
(Responses input items: function calls and outputs, reasoning items passed through). A stored
message of the requested format keeps its own blocks exactly; others are converted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..compaction import fresh_tail_start
from ..model import HOST_RECORD, ContextItem, StoredMessage, Summary
from ..resume import boundary, resume_text
from .fit import FILL_STEP, _clip, _date_marks, _fill, _fit
from .formats import _RENDER, FORMATS, _Block, _blocks, _referenced, _sanitize, blocks, render
from .relevant import Recalled, pick, place
from .summaries import UNTRUSTED_NOTE, _Shown, render_summary, summary_text

if TYPE_CHECKING:
    from ..services import Services


__all__ = [
    "FILL_STEP",
    "FORMATS",
    "UNTRUSTED_NOTE",
    "AssembledContext",
    "assemble",
    "blocks",
    "render",
    "render_summary",
    "summary_text",
]


@dataclass
class AssembledContext:
    """What :func:`assemble` produced."""

    messages: list[dict[str, Any]]
    tokens: int
    budget: int
    format: str
    summaries: int = 0
    raw_messages: int = 0
    dropped_items: int = 0
    dropped_orphans: list[str] = field(default_factory=list)
    resume_tokens: int = 0  # the resume summary's, when one was injected
    #: The context items given to the model, in order (``msg#N`` or a summary id).
    items: list[str] = field(default_factory=list)
    #: The message shown clipped because it alone was over the budget, if any (the newest
    #: request when it is one of them).
    clipped: str | None = None
    #: Every message shown clipped (its head and where to read it whole): the newest request
    #: over the budget, a message of the turn under way too large for what was left.
    clipped_all: list[str] = field(default_factory=list)
    #: The newest request and its tokens, when it alone was over the budget (shown clipped).
    clipped_request: str | None = None
    request_tokens: int | None = None

    def request_warning(self, conversation_id: int) -> str | None:
        """What to tell the host's user when the newest request was shown clipped."""
        if self.request_tokens is None:
            return None
        return (
            f"conversation {conversation_id}: the newest request, {self.clipped_request}, is"
            f" ~{self.request_tokens:,} tokens, more than the {self.budget:,} this context can"
            " give it: shown clipped (its start, and where to read it whole); a larger budget"
            " or window shows it whole"
        )

    #: Summaries and messages shown from below the context's summaries, to fill the budget.
    unfolded: int = 0
    #: The stored messages shown because a search for the next request found them (with the
    #: calls, results and replies that go with them), in the order they were taken.
    recalled: list[str] = field(default_factory=list)

    @property
    def over_budget(self) -> bool:
        """Never, since the budget became a cap (kept for callers that check it)."""
        return self.tokens > self.budget


def _turns(
    items: Sequence[ContextItem],
    messages: dict[int, StoredMessage],
    summaries: dict[str, tuple[Summary, list[str]]],
    fmt: str,
    stubs: dict[int, str] | None = None,
) -> list[tuple[str, list[_Block]]]:
    out = []
    for item in items:
        if item.summary_id is not None:
            summary, parents = summaries[item.summary_id]
            when = summary.latest_at or summary.created_at
            out.append(("user", [_Block("text", text=summary_text(summary, parents), at=when)]))
        elif stubs and int(item.message_id or 0) in stubs:
            message = messages[int(item.message_id or 0)]
            out.append(
                (message.role, _dated(_referenced(message, stubs[message.message_id]), message))
            )
        else:
            message = messages[int(item.message_id or 0)]
            out.append((message.role, _dated(_blocks(message, fmt), message)))
    return out


def _dated(blocks: list[_Block], message: StoredMessage) -> list[_Block]:
    """*blocks* with the time *message* was said on those that carry none."""
    return [b if b.at else dataclasses.replace(b, at=message.created_at) for b in blocks]


def assemble(
    services: Services,
    conversation_id: int,
    token_budget: int,
    *,
    format: str = "anthropic",
    pending_calls: bool = False,
    fill: bool | None = None,
    dates: bool | None = None,
    prompt: str | None = None,
    relevant: Sequence[int] = (),
) -> AssembledContext:
    """The model-facing messages of a conversation within *token_budget* (see module doc).

    With *pending_calls*, a tool call whose result is not stored yet is kept (a host that
    appends the result itself, such as the Agents SDK's runner, wants to see it). *fill*
    (default: ``fill_budget``) spends the room left on detail; *dates* (default:
    ``date_marks``) marks each user message said on another day than what comes before it.
    *prompt*: the request the host sends after these messages itself (OpenClaw's ``prompt``):
    the budget goes to the summaries and the turns before it first. *relevant*: the stored
    messages (ids, the best first) a search for the next request found: the room left after
    the essentials goes to them first, up to the ``prompt_share`` of it (see
    :mod:`.relevant`), then to detail."""
    if format not in FORMATS:
        raise ValueError(f"unknown context format {format!r}; use one of: {', '.join(FORMATS)}")
    items = services.store.context(conversation_id)
    cfg = services.config
    tail = fresh_tail_start(items, cfg.fresh_tail_count, cfg.fresh_tail_max_tokens)
    shown = _Shown(services)
    shown.load(services.store.get_summaries([i.summary_id for i in items if i.summary_id]))
    items = [shown.item(i) for i in items]
    resume = None
    if cfg.resume.inject:
        upto = boundary(services.store, conversation_id, items)
        if upto is not None:
            resume = resume_text(services, conversation_id, upto)
    resume_tokens = services.tokens.count(resume) if resume else 0
    fit = _fit(items, tail, token_budget, resume_tokens, prompted=prompt is not None)
    if not fit.resume:
        resume, resume_tokens = None, 0
    chosen = [items[i] for i in fit.indices]
    left_out = len(items) - len(chosen)  # by the budget (what detail replaced is not)
    stubs: dict[int, str] = {}
    request_clipped: StoredMessage | None = None
    clips = {id(items[i]): room for i, room in fit.clipped.items()}
    used = sum(item.tokens for item in chosen if id(item) not in clips) + resume_tokens
    recalled: list[Recalled] = []
    if relevant and cfg.prompt_share > 0 and not clips and used < token_budget:
        recalled = pick(services, chosen, relevant, int((token_budget - used) * cfg.prompt_share))
        used += sum(r.item.tokens for r in recalled)
    if (cfg.fill_budget if fill is None else fill) and not clips and used < token_budget:
        before = any(i.summary_id for i in chosen)
        taken = frozenset(int(r.item.message_id or 0) for r in recalled)
        chosen = _fill(services, shown, chosen, token_budget - used, taken)
        if before and not any(i.summary_id for i in chosen):
            resume, resume_tokens = None, 0  # the whole history is shown as it was
        used = sum(item.tokens for item in chosen) + resume_tokens
        used += sum(r.item.tokens for r in recalled)
    chosen = place(services, conversation_id, chosen, recalled)
    taken_ids = [r.item.message_id for r in recalled]
    message_ids = [i.message_id for i in chosen if i.message_id is not None]
    messages = {m.message_id: m for m in services.store.get_messages_by_id(message_ids)}
    records = {mid for mid, m in messages.items() if m.host_meta == HOST_RECORD}
    if records:  # the host's records of itself are kept, never shown to its model
        used -= sum(i.tokens for i in chosen if i.message_id in records and id(i) not in clips)
        chosen = [i for i in chosen if i.message_id not in records]
        message_ids = [m for m in message_ids if m not in records]
    for item in [i for i in chosen if id(i) in clips]:
        clipped = messages[int(item.message_id or 0)]
        stub = _clip(services, clipped, clips[id(item)])
        if stub is None:  # not even the note fits: it is left out
            left_out += 1
            chosen = [i for i in chosen if i is not item]
            message_ids.remove(clipped.message_id)
        else:
            stubs[clipped.message_id] = stub
            used += services.tokens.count(stub)
            if fit.request is not None and item is items[fit.request]:
                request_clipped = clipped
    summary_ids = [i.summary_id for i in chosen if i.summary_id is not None]
    turns = _turns(chosen, messages, shown.found, format, stubs)
    if cfg.date_marks if dates is None else dates:
        marks = _date_marks(services, chosen, messages, shown, token_budget - used)
        for at, mark in marks.items():
            turns[at][1].insert(0, _Block("text", text=mark))
            used += services.tokens.count(mark)
    if resume:  # right after the summaries, before the fresh tail
        at = 1 + max((n for n, i in enumerate(chosen) if i.summary_id is not None), default=-1)
        said = max((b.at for _, blocks in turns[:at] for b in blocks if b.at), default="")
        turns.insert(at, ("user", [_Block("text", text=resume, at=said)]))
    dropped = _sanitize(turns, pending_calls=pending_calls)
    out = _RENDER[format](turns)
    return AssembledContext(
        messages=out,
        tokens=used,
        budget=token_budget,
        format=format,
        summaries=len(summary_ids),
        raw_messages=len(message_ids),
        dropped_items=left_out,
        dropped_orphans=dropped,
        resume_tokens=resume_tokens,
        items=[i.ref for i in chosen],
        clipped=next((f"msg#{m}" for m in stubs), None),
        clipped_all=[f"msg#{m}" for m in stubs],
        clipped_request=None if request_clipped is None else f"msg#{request_clipped.message_id}",
        request_tokens=None if request_clipped is None else request_clipped.token_count,
        unfolded=sum(1 for i in chosen if i.ordinal < 0 and i.message_id not in taken_ids),
        recalled=[f"msg#{m}" for m in taken_ids if m in messages],
    )
