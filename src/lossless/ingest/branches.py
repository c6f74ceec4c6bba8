"""The active branch of a transcript whose entries form a tree (id and parent id).

A host that lets the user edit a message, rewind, or retry writes the new turns as a new
branch beside the old; the conversation is the path from the newest entry back to the root.
:func:`active_path` finds it, bridging what a host's compaction or a damaged line cut, and
joins the side branches a host writes for parallel tool calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .entries import Entry

__all__ = ["Branch", "Skeleton", "active_path"]


@dataclass(slots=True)
class Skeleton:
    """What the first pass keeps of an entry: where it is, its ids, and what places it."""

    line_no: int
    start: int
    end: int
    entry_id: str | None
    parent_id: str | None
    is_message: bool
    entry: Entry | None = None
    answers: tuple[str, ...] = ()
    group: str | None = None
    bridge: bool = False


@dataclass
class Branch:
    """The active branch of a scan (file order), the id it hangs from outside the scan, the
    messages off it, and whether one of those hangs from outside the scan."""

    path: list[Skeleton]
    junction: str | None = None
    off: list[Skeleton] = field(default_factory=list)
    detached: bool = False


def active_path(entries: list[Skeleton], tree: bool, broken: Sequence[int] = ()) -> Branch:
    """The active branch: from the last entry back to the root through parent ids.

    A parent that is missing because its line could not be read (a line of *broken* between
    the entry and the one before it) is bridged: the branch goes on from the entry before the
    broken line. So is the missing parent of a host's compaction boundary (``bridge``): the
    halves on either side of a compaction are one conversation, and an entry written after a
    compaction that hangs from the entry before it goes on from the compaction
    (:func:`_after_compactions`).
    """
    if not entries:
        return Branch([])
    entries = _after_compactions(entries)
    linear = not tree or all(e.parent_id is None for e in entries)
    if linear:
        return Branch(entries)
    by_id = {e.entry_id: e for e in entries if e.entry_id is not None}
    leaf = next((e for e in reversed(entries) if e.entry_id is not None), None)
    if leaf is None:
        return Branch([e for e in entries if e.is_message])
    on_path: set[str] = set()
    node: Skeleton | None = leaf
    junction: str | None = None
    order = {id(e): n for n, e in enumerate(entries)}
    while node is not None and node.entry_id is not None and node.entry_id not in on_path:
        on_path.add(node.entry_id)
        parent = node.parent_id
        if parent is None and not node.bridge:
            break
        child, node = node, by_id.get(parent) if parent is not None else None
        if node is None and (broken or child.bridge):
            before = next(
                (e for e in reversed(entries[: order[id(child)]]) if e.entry_id is not None), None
            )
            low = before.line_no if before is not None else 0
            if child.bridge or any(low < line < child.line_no for line in broken):
                node = before
        if node is None:
            junction = parent
    _join_parallel_branches(entries, on_path)
    path = [e for e in entries if e.entry_id in on_path]
    off = [e for e in entries if e.is_message and e.entry_id not in on_path]
    detached = any(e.parent_id is not None and e.parent_id not in by_id for e in off)
    return Branch(path, junction, off, detached)


def _after_compactions(entries: list[Skeleton]) -> list[Skeleton]:
    """*entries* with those written after a host's compaction boundary that hang from the
    boundary's own parent (the last entry before the compaction) hung from the newest entry
    on the compaction's side instead.

    Claude Code hangs the compaction summary from the boundary, and the boundary names the
    entry before it (its ``logicalParentUuid``); an interactive ``/compact`` then hangs the
    entries it writes next (the command's caveat, its output) from that same entry before
    the compaction, beside the boundary. Read as a tree, the boundary and summary would be
    an abandoned branch, yet the conversation went on after them: a compaction cannot be
    rewound, so what follows it follows it.
    """
    after: dict[str, str] = {}  # the entry before a compaction -> the newest entry after it
    side: dict[str, str] = {}  # an entry after a compaction -> the entry before that compaction
    out: list[Skeleton] = []
    for e in entries:
        own, parent = e.entry_id, e.parent_id
        if own is not None and parent is not None:
            if e.bridge:
                after[parent] = own
                side[own] = parent
            else:
                if parent in after:
                    parent = after[parent]
                    e = replace(e, parent_id=parent)
                before = side.get(parent)
                if before is not None:
                    side[own] = before
                    after[before] = own
        out.append(e)
    return out


def _join_parallel_branches(entries: list[Skeleton], on_path: set[str]) -> None:
    """Put the side branches of parallel tool calls on the path.

    Claude Code writes a response with several tool calls one line per block, each line the
    child of the previous one, and hangs each tool result from the line of its own call:
    every result but the last sits on a side branch (and, while a response is still being
    written, so can a call). Such a sibling belongs to the path when its parent does and it
    is another line of a response on the path, or results for calls not answered on it.
    """
    groups = {e.group for e in entries if e.group is not None and e.entry_id in on_path}
    answered = {a for e in entries if e.answers and e.entry_id in on_path for a in e.answers}
    for e in entries:  # file order: a parent comes before its children
        if (
            e.entry_id is None
            or e.entry_id in on_path
            or not e.is_message
            or e.parent_id not in on_path
        ):
            continue
        if e.group is not None and e.group in groups:
            on_path.add(e.entry_id)
        elif e.answers and answered.isdisjoint(e.answers):
            on_path.add(e.entry_id)
            answered.update(e.answers)
