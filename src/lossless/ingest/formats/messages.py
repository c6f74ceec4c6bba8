"""Plain message lists: a JSON array or JSONL of messages in any shape lossless reads
(OpenAI chat, Responses items, Anthropic). Entries are keyed by their position."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...codec import safe_id
from ...errors import UnknownShapeError
from ...timestamps import parse_ts
from ..entries import Entry, FileIdentity, Line, TranscriptFormat
from ..shapes import detect_format

__all__ = ["MessagesFormat"]

_ROLES = ("system", "developer", "user", "assistant", "tool")


class MessagesFormat(TranscriptFormat):
    """A JSON array or JSONL file of messages in any supported shape."""

    name = "messages"
    tree = False

    def sniff(self, first: Any) -> bool:
        return isinstance(first, Mapping) and ("role" in first or "type" in first)

    def identify(self, path: Path, head: Sequence[Any]) -> FileIdentity:
        return FileIdentity(self.name, safe_id(path.stem), None)

    def claims(self, value: Any) -> bool:
        # Every object is a message here (an unknown kind is kept verbatim): only a chat
        # message with a role and content is unmistakable (a bare item type such as
        # "compaction" is also a host's bookkeeping record).
        if not isinstance(value, Mapping) or value.get("role") not in _ROLES:
            return False
        if "content" not in value:
            return False
        try:
            return detect_format(value) not in ("unknown", "lossless")
        except UnknownShapeError:
            return False

    def entry(self, line: Line) -> Entry:
        obj = line.value
        entry = Entry(line.line_no, line.start, line.end, f"pos:{line.line_no}", None)
        entry.message = obj
        if isinstance(obj, Mapping):
            entry.created_at = parse_ts(obj.get("timestamp") or obj.get("created_at"))
        return entry
