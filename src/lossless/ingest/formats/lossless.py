"""lossless's own export (``lossless export --format jsonl``): conversations as they are
stored, read back into any store exactly.

The first line is the header: ``{"type": "lossless_export", "version": 1, "conversations":
[{"conversation_id", "session_id", "session_key"}, ...]}``, every conversation of the file.
Each conversation's lines follow: a ``conversation`` line (its title, status, times and
metadata), then one line per message in order::

    {"conversation_id": 1, "seq": 1, "external_id": "...", "created_at": "...",
     "format": "anthropic", "host_meta": null, "metadata": null, "message": {...}}

``message`` is the message exactly as it was ingested (``StoredMessage.to_source()``), in the
shape ``format`` names, so importing it normalizes it again into the same row and parts. A
forgotten message's line says when (``"forgotten_at"``) and holds only its role: it is
stored again as a tombstone, in its place, so the messages after it keep their numbers.
Entries are keyed by the message's own external id (none for a message stored without one).
Each conversation is a lane of the file, read into the conversation of its session id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...codec import safe_id
from ...errors import ImportProblem
from ...model import HOST_META
from ...timestamps import format_ts, parse_ts
from ..entries import Entry, FileIdentity, Line, TranscriptFormat, text_field
from ..shapes import FORMATS as SHAPES

__all__ = ["CONVERSATION", "HEADER", "VERSION", "LosslessFormat", "lane"]

#: The ``type`` of the header line, and of each conversation's line.
HEADER = "lossless_export"
CONVERSATION = "conversation"
#: The version this module writes and reads (a newer file is refused, saying so).
VERSION = 1


def lane(conversation_id: object) -> str:
    """The lane of a conversation's lines (its id in the exporting store)."""
    return f"conversation:{conversation_id}"


class LosslessFormat(TranscriptFormat):
    """A file written by ``lossless export``: one or more conversations."""

    name = "lossless"
    tree = False
    names_lanes = True

    def sniff(self, first: Any) -> bool:
        return isinstance(first, Mapping) and first.get("type") == HEADER

    def owns(self, value: Any) -> bool:
        return isinstance(value, Mapping) and (
            value.get("type") in (HEADER, CONVERSATION) or "message" in value
        )

    def claims(self, value: Any) -> bool:
        return (
            isinstance(value, Mapping)
            and {"conversation_id", "format", "message"} <= value.keys()
            and self._is_message(value)
        )

    def identify(self, path: Path, head: Sequence[Any]) -> FileIdentity:
        first = head[0] if head else None
        if not isinstance(first, Mapping) or first.get("type") != HEADER:
            return FileIdentity(self.name, safe_id(path.stem), None)
        version = first.get("version")
        if not isinstance(version, int) or version > VERSION:
            raise ImportProblem(
                str(path),
                1,
                f"a lossless export of version {version!r}, newer than this lossless reads"
                f" ({VERSION}): upgrade lossless to import it",
            )
        found = first.get("conversations")
        sessions = [
            (lane(c.get("conversation_id")), session, text_field(c.get("session_key")))
            for c in (found if isinstance(found, list) else [])
            if isinstance(c, Mapping) and (session := text_field(c.get("session_id")))
        ]
        if not sessions:
            return FileIdentity(self.name, safe_id(path.stem), None)
        (main, session, key), *others = sessions
        return FileIdentity(
            self.name,
            session,
            session,
            session_key=key,
            lane=main,
            lane_sessions={name: (sid, skey) for name, sid, skey in others},
        )

    def entry(self, line: Line) -> Entry:
        obj = line.value
        if not isinstance(obj, Mapping):
            raise ValueError("a line of a lossless export must be a JSON object")
        entry = Entry(line.line_no, line.start, line.end, None, None)
        kind = obj.get("type")
        if kind == HEADER:
            entry.lane = ""  # the file's, no conversation's
            return entry
        entry.lane = lane(obj.get("conversation_id"))
        if kind == CONVERSATION:
            entry.title = text_field(obj.get("title"))
            status = obj.get("status")
            entry.status = status if status in ("active", "archived") else None
            return entry
        shape = obj.get("format")
        if shape not in SHAPES:
            raise ValueError(
                f"a message line needs a 'format' naming its shape ({', '.join(SHAPES)}),"
                f" not {shape!r}"
            )
        if obj.get("message") is None:
            raise ValueError("a message line without its 'message'")
        external_id = obj.get("external_id")
        entry.entry_id = safe_id(external_id) if isinstance(external_id, str) else None
        entry.message = obj["message"]
        entry.shape = shape
        entry.created_at = parse_ts(obj.get("created_at"))
        metadata = obj.get("metadata")
        entry.metadata = dict(metadata) if isinstance(metadata, Mapping) else None
        host_meta = obj.get("host_meta")
        entry.host_meta = host_meta if host_meta in HOST_META else None
        forgotten = parse_ts(obj.get("forgotten_at"))
        entry.forgotten_at = format_ts(forgotten) if forgotten is not None else None
        return entry
