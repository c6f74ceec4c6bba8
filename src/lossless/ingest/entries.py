"""What a transcript format reads a line into: the shared vocabulary of the importers.

A :class:`TranscriptFormat` turns each parsed :class:`Line` of a file into an :class:`Entry`:
a message to store (with its stable id, its parent in the entry tree, its time and, for a
host's own records, the kind of record), or a line that is skipped but may still link the
tree. :class:`FileIdentity` says which conversation a file feeds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..codec import safe_id

__all__ = ["Entry", "FileIdentity", "Line", "TranscriptFormat", "text_field"]


@dataclass
class Line:
    """A complete line of a JSONL file: its number, byte span and parsed value (or error)."""

    line_no: int
    start: int
    end: int
    raw: bytes
    value: Any = None
    error: str | None = None


@dataclass
class Entry:
    """One transcript entry: a message to import, or a skipped line that may link the tree."""

    line_no: int
    start: int
    end: int
    entry_id: str | None
    parent_id: str | None
    message: Any = None
    shape: str | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] | None = None
    skip: str | None = None
    lane: str = "main"
    title: str | None = None
    #: The conversation's status the file states (``active`` / ``archived``: an export's).
    status: str | None = None
    host_compaction: dict[str, Any] | None = None
    #: Tool call ids this entry answers, when it holds nothing but tool results.
    answers: tuple[str, ...] = ()
    #: The model response this entry is a part of (Claude Code writes one line per block).
    group: str | None = None
    #: A host's own record rather than the conversation (see ``lossless.model.HOST_META``).
    host_meta: str | None = None
    #: A forgotten message's tombstone (an export's): when it was forgotten.
    forgotten_at: str | None = None
    #: Where the host compacted: when the parent it names is not in the file, the entry
    #: hangs from the entry before it (the halves of the transcript stay one branch).
    bridge: bool = False

    @property
    def is_message(self) -> bool:
        """Whether this entry becomes a stored message."""
        return self.skip is None and self.message is not None


@dataclass
class FileIdentity:
    """What identifies one transcript file (its session and, for rotation checks, its head)."""

    format: str
    session_id: str
    header_id: str | None
    session_key: str | None = None
    #: The lane (see :attr:`Entry.lane`) of this session's entries; the other lanes' sessions
    #: (and their family keys) are in :attr:`lane_sessions`.
    lane: str = "main"
    lane_sessions: dict[str, tuple[str, str | None]] = field(default_factory=dict)


class TranscriptFormat(ABC):
    """How one transcript format maps lines to entries."""

    name: str = ""
    #: Entries form an id/parent tree whose active branch is imported.
    tree: bool = True
    #: A file this format recognises but that holds no conversation to import (a trace, an
    #: index): detection names it, and importing it says why nothing is taken.
    not_a_transcript: str | None = None
    #: Its files name every lane they hold (:attr:`FileIdentity.lane_sessions`): a message in
    #: a lane the file does not name is a problem, not a lane to pass over.
    names_lanes: bool = False

    @abstractmethod
    def sniff(self, first: Any) -> bool:
        """Whether the first parsed line looks like this format."""

    @abstractmethod
    def identify(self, path: Path, head: Sequence[Any]) -> FileIdentity:
        """The session this file belongs to, from its first lines (*head*, parsed; the first
        is the one :meth:`sniff` saw) and, when they do not say, its name."""

    @abstractmethod
    def entry(self, line: Line) -> Entry:
        """Classify one parsed line."""

    def owns(self, value: Any) -> bool:
        """Whether one parsed line could be this format's own, message or bookkeeping (so a
        line the format skips is its own choice, not a line of another format). Broad: by
        default every line."""
        return True

    def claims(self, value: Any) -> bool:
        """Whether one parsed line, wherever it is found, is unmistakably one of this
        format's messages (so a file of another format that holds it has been mixed).
        Strict: by default no line."""
        return False

    def _is_message(self, value: Any) -> bool:
        """Whether :meth:`entry` makes a message of *value* (a damaged line does not)."""
        try:
            return self.entry(Line(0, 0, 0, b"", value)).is_message
        except ValueError:
            return False


def text_field(value: Any) -> str | None:
    """A non-empty string field; lone surrogates spelled out so it can be stored as an id."""
    return safe_id(value) if isinstance(value, str) and value else None
