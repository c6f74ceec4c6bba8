"""Transplant: give a conversation the compacted knowledge of another.

The summaries in the source's context are copied into the target with the whole DAG beneath
them and the messages their leaves cover, as rows the target owns (new ``sum_`` ids, new
message ids and seq numbers, parts with the target's session id, full-text rows, remapped
edges), and the copies of the context summaries are prepended to the target's context. No
reference from one conversation into the other remains, so everything else — assembly,
compaction, grep, describe, expand, ``doctor`` — treats them as the target's own.

:func:`plan` reads what would be copied (the dry run); :func:`apply` copies it, in one
transaction. Refused (nothing changes): a source with no summaries in its context, a target
that already holds any of the content (by content hash — a transplant done before), and a
source whose context changed between the plan and the copy.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .codec import content_hash
from .errors import LosslessError
from .model import Conversation, Summary

if TYPE_CHECKING:
    from .services import Services
    from .store.base import Store

__all__ = ["TransplantError", "TransplantPlan", "apply", "plan"]

_PREVIEW_WORDS = 8
_PREVIEW_CHARS = 60


class TransplantError(LosslessError):
    """A transplant cannot be done (nothing was changed)."""

    exit_code = 2


@dataclass
class TransplantPlan:
    """What a transplant copies, and what it found in the way."""

    source: Conversation
    target: Conversation
    context_summaries: list[Summary]
    dag: list[Summary]
    message_ids: list[int]
    target_summary_items: int
    target_message_items: int
    already_there: list[str] = field(default_factory=list)
    applied: bool = False
    summary_map: dict[str, str] = field(default_factory=dict)

    @property
    def depth_counts(self) -> dict[int, int]:
        """Summaries to copy, by depth."""
        return dict(sorted(Counter(s.depth for s in self.dag).items()))

    @property
    def token_overhead(self) -> int:
        """Tokens the prepended summaries add to the target's context."""
        return sum(s.token_count for s in self.context_summaries)

    @property
    def problem(self) -> str | None:
        """Why this transplant would be refused, or ``None``."""
        src, tgt = self.source.conversation_id, self.target.conversation_id
        if src == tgt:
            return "the source and the target are the same conversation"
        if not self.context_summaries:
            return (
                f"conversation {src} has no summaries in its context: nothing to transplant"
                " (compact it first)"
            )
        if self.already_there:
            return (
                f"conversation {tgt} already holds the content of {len(self.already_there)}"
                f" of these summaries (e.g. {self.already_there[0]}); it was transplanted"
                " before — nothing was changed"
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        """The report as data (``--json``)."""
        return {
            "source": self.source.conversation_id,
            "target": self.target.conversation_id,
            "applied": self.applied,
            "problem": self.problem,
            "context_summaries": [
                {
                    "summary_id": s.summary_id,
                    "kind": s.kind,
                    "depth": s.depth,
                    "tokens": s.token_count,
                    "preview": preview(s.content),
                }
                for s in self.context_summaries
            ],
            "dag": {
                "summaries": len(self.dag),
                "context": len(self.context_summaries),
                "beneath": len(self.dag) - len(self.context_summaries),
                "by_depth": {str(d): n for d, n in self.depth_counts.items()},
            },
            "messages": len(self.message_ids),
            "target_context": {
                "summaries": self.target_summary_items,
                "messages": self.target_message_items,
            },
            "adds": {
                "context_items": len(self.context_summaries),
                "summaries": len(self.dag),
                "messages": len(self.message_ids),
            },
            "token_overhead": self.token_overhead,
            "summary_map": self.summary_map,
        }


def preview(text: str) -> str:
    """The first words of a summary, for the report (heading lines such as a date skipped)."""
    body = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    words = (" ".join(body) if body else text).split()
    head = " ".join(words[:_PREVIEW_WORDS])
    if len(head) > _PREVIEW_CHARS:
        return head[: _PREVIEW_CHARS - 3].rstrip() + "..."
    return head + ("..." if len(words) > _PREVIEW_WORDS else "")


def plan(store: Store, source: Conversation, target: Conversation) -> TransplantPlan:
    """What transplanting *source* into *target* would do (reads only)."""
    context = store.context_summaries(source.conversation_id)
    dag = store.summary_dag([s.summary_id for s in context])
    leaves = [s.summary_id for s in dag if s.kind == "leaf"]
    items = store.context(target.conversation_id)
    held = store.summary_hashes(target.conversation_id)
    return TransplantPlan(
        source=source,
        target=target,
        context_summaries=context,
        dag=dag,
        message_ids=store.linked_message_ids(leaves),
        target_summary_items=sum(1 for i in items if i.summary_id),
        target_message_items=sum(1 for i in items if i.message_id is not None),
        already_there=[s.summary_id for s in dag if content_hash(s.content) in held],
    )


def apply(store: Store, planned: TransplantPlan) -> TransplantPlan:
    """Carry out *planned* in one transaction; :class:`TransplantError` when it is refused."""
    if planned.problem:
        raise TransplantError(planned.problem)
    taken: set[str] = set()

    def new_id() -> str:
        while True:
            ident = "sum_" + secrets.token_hex(8)
            if ident not in taken:
                taken.add(ident)
                return ident

    summary_map, _ = store.transplant(
        planned.source.conversation_id,
        planned.target,
        [s.summary_id for s in planned.context_summaries],
        planned.dag,
        planned.message_ids,
        new_id,
    )
    planned.summary_map = summary_map
    planned.applied = True
    return planned


def render(planned: TransplantPlan) -> list[str]:
    """The report, in the spec's shape, as lines of text."""
    src, tgt = planned.source.conversation_id, planned.target.conversation_id
    lines = [f"Transplant: conversation {src} → conversation {tgt}", ""]
    lines.append(f"Source context summaries ({len(planned.context_summaries)}):")
    for s in planned.context_summaries:
        lines.append(
            f"  {s.summary_id}  {s.kind:<9}  d{s.depth}  {s.token_count:>5}t"
            f'  "{preview(s.content)}"'
        )
    beneath = len(planned.dag) - len(planned.context_summaries)
    lines += [
        "",
        f"Full DAG to copy: {len(planned.dag)} summaries"
        f" ({len(planned.context_summaries)} context + {beneath} beneath)",
    ]
    for depth, count in planned.depth_counts.items():
        kind = "leaves" if depth == 0 else "condensed"
        lines.append(f"  d{depth}: {count} {kind}")
    lines.append(f"Linked source messages to copy: {len(planned.message_ids)}")
    total = planned.target_summary_items + planned.target_message_items
    lines += [
        "",
        f"Target current context ({total} items):",
        f"  {planned.target_summary_items} summaries + {planned.target_message_items} messages",
        "",
        "After transplant:" if planned.applied else "The transplant adds:",
        f"  {len(planned.context_summaries)} new context items prepended",
        f"  {len(planned.dag)} summaries copied (new ids, owned by conversation {tgt})",
        f"  {len(planned.message_ids)} messages copied (new ids and seq numbers)",
        f"  Estimated token overhead in context: ~{planned.token_overhead:,} tokens",
    ]
    return lines


def transplant(
    services: Services, source: Conversation, target: Conversation, *, apply_it: bool = False
) -> TransplantPlan:
    """Plan copying *source*'s context summaries into *target* (and apply it with *apply_it*:
    a refused transplant raises :class:`TransplantError` and changes nothing), under both
    conversations' locks."""
    with services.lock(source.conversation_id, target.conversation_id):
        planned = plan(services.store, source, target)
        if apply_it:
            apply(services.store, planned)
    return planned
