"""What the screens read from the engine, gathered in one call each (run in worker threads).

Only the engine's public reads are used (``context``, ``conversations``, ``store.summary_sources``,
``store.covering``, ...); nothing here writes. Each function returns plain data the UI thread
can show without touching the database again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

from ..assemble import AssembledContext
from ..engine import Engine
from ..errors import NotFoundError
from ..model import ContextItem, ConversationStats, LargeFile, StoredMessage, Summary
from .render import file_text, first_line, message_text, summary_text

__all__ = [
    "ContextRow",
    "ContextView",
    "Node",
    "context_view",
    "conversation_stats",
    "detail",
    "large_files",
    "path_to",
    "sources",
]

#: Characters of preview in tables and tree labels.
PREVIEW = 60
#: Characters of an item's text kept for the context table's content column, which shows as
#: many as the terminal's width leaves it.
ROW_TEXT = 400


@dataclass(frozen=True)
class ContextRow:
    """One item of the active context, with what the table shows about it."""

    item: ContextItem
    kind: str  # leaf | condensed for summaries, the role for messages
    preview: str


@dataclass(frozen=True)
class ContextView:
    """The active context as the model gets it, against a token budget."""

    rows: list[ContextRow]
    budget: int
    threshold: float
    assembled: AssembledContext

    @property
    def tokens(self) -> int:
        """Tokens of every context item."""
        return sum(r.item.tokens for r in self.rows)

    @property
    def summary_tokens(self) -> int:
        """Tokens of the summaries in the context."""
        return sum(r.item.tokens for r in self.rows if r.item.summary_id)

    @property
    def summaries(self) -> int:
        """How many context items are summaries."""
        return sum(1 for r in self.rows if r.item.summary_id)


@dataclass(frozen=True)
class Node:
    """A node of the summary DAG tree: a summary (expandable) or an original message."""

    ref: str  # sum_… or msg#N
    label: Text
    expandable: bool


def conversation_stats(engine: Engine, conversation_id: int) -> ConversationStats:
    """One conversation's counts (as in the conversations list)."""
    for stats in engine.conversations():
        if stats.conversation.conversation_id == conversation_id:
            return stats
    raise NotFoundError(
        f"no conversation with id {conversation_id}; list them with `lossless conversations`"
    )


def context_view(engine: Engine, conversation_id: int, budget: int) -> ContextView:
    """The context items with their kinds and previews, and the assembly within *budget*."""
    items = engine.context(conversation_id)
    summary_ids = [i.summary_id for i in items if i.summary_id]
    message_ids = [i.message_id for i in items if i.message_id is not None]
    summaries = {s.summary_id: s for s in engine.summaries(summary_ids)}
    messages = {m.message_id: m for m in engine.messages_by_id(message_ids)}
    rows = []
    for item in items:
        if item.summary_id:
            summary = summaries[item.summary_id]
            rows.append(ContextRow(item, summary.kind, first_line(summary.content, ROW_TEXT)))
        else:
            message = messages[item.message_id or 0]
            rows.append(ContextRow(item, message.role, first_line(message.content, ROW_TEXT)))
    assembled = engine.assemble(conversation_id, budget)
    return ContextView(rows, budget, engine.config.context_threshold, assembled)


def summary_node(summary: Summary) -> Node:
    """The tree node of a summary."""
    label = Text()
    label.append(summary.summary_id, style="bold")
    label.append(f" {summary.kind} d{summary.depth}", style="magenta")
    label.append(f" {summary.token_count:,}t ", style="dim")
    label.append(first_line(summary.content, PREVIEW))
    return Node(summary.summary_id, label, expandable=True)


def message_node(message: StoredMessage) -> Node:
    """The tree node of an original message."""
    label = Text()
    label.append(f"msg#{message.message_id}", style="bold")
    label.append(f" {message.role}", style="blue")
    label.append(f" {message.token_count:,}t ", style="dim")
    label.append(first_line(message.content, PREVIEW))
    return Node(f"msg#{message.message_id}", label, expandable=False)


def top_nodes(engine: Engine, conversation_id: int) -> tuple[list[Node], int]:
    """The summaries in the context, as tree nodes, and how many messages follow them."""
    items = engine.context(conversation_id)
    ids = [i.summary_id for i in items if i.summary_id]
    nodes = [summary_node(s) for s in engine.summaries(ids)]
    return nodes, len(items) - len(ids)


def sources(engine: Engine, summary_id: str) -> list[Node]:
    """What a summary was made from: the summaries of a condensed one, a leaf's messages."""
    parents, message_ids = engine.summary_sources(summary_id)
    nodes = [summary_node(s) for s in engine.summaries(parents)]
    nodes += [message_node(m) for m in engine.messages_by_id(message_ids)]
    return nodes


def detail(engine: Engine, ref: str) -> Text:
    """The full content of a summary, message or large file, for the detail pane."""
    if ref.startswith("sum_"):
        parents, message_ids = engine.summary_sources(ref)
        return summary_text(engine.summary(ref), parents, len(message_ids), engine.covering(ref))
    if ref.startswith("msg#") and ref[4:].isdigit():
        message_id = int(ref[4:])
        return message_text(engine.get_message(message_id), engine.covering(message_id))
    if ref.startswith("file_"):
        return file_text(engine.large_file(ref))
    raise NotFoundError(f"{ref!r} is not a summary, message or file id")


def file_content(engine: Engine, file_id: str) -> Text:
    """A large file's record with its content."""
    return file_text(engine.large_file(file_id), engine.read_large_file(file_id))


def large_files(engine: Engine, conversation_id: int) -> list[LargeFile]:
    """The conversation's large files, oldest first."""
    return engine.large_files(conversation_id)


def path_to(engine: Engine, conversation_id: int, ref: str) -> list[str] | None:
    """The ids from a summary in the conversation's context down to *ref* (a ``sum_`` id or
    ``msg#N``), through the summaries made from it; ``None`` when no context summary is
    above it (a message still in the context, or one of another conversation)."""
    context = {i.summary_id for i in engine.context(conversation_id) if i.summary_id}
    if ref in context:
        return [ref]
    below: dict[str, str] = {}
    queue: deque[str] = deque([ref])
    while queue:
        node = queue.popleft()
        up = node[4:] if node.startswith("msg#") else None
        for parent in engine.covering(int(up) if up and up.isdigit() else node):
            if parent in below or parent == ref:
                continue
            below[parent] = node
            if parent in context:
                path = [parent]
                while path[-1] != ref:
                    path.append(below[path[-1]])
                return path
            queue.append(parent)
    return None


def path_sources(engine: Engine, path: Sequence[str]) -> dict[str, list[Node]]:
    """The sources of every summary on *path* but the last (to open the tree along it)."""
    return {sid: sources(engine, sid) for sid in path[:-1]}
