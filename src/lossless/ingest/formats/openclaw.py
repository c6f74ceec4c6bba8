"""OpenClaw / pi session files, and the trajectory traces OpenClaw writes beside them.

A session file (``~/.openclaw/agents/<agent>/sessions/<session>.jsonl``, version 3) opens with
a ``session`` header line; then entries with ``id``/``parentId`` form a tree. ``message``
entries carry user, assistant and ``toolResult`` messages; every other entry type (model
changes, the host's own compaction summaries, labels, ...) is skipped and counted, but still
links the tree. Version 1 files (no ids) are read as a linear history.

A trajectory (``<session>.trajectory.jsonl``, every line marked ``traceSchema:
"openclaw-trajectory"``) is a trace of model calls that repeats the whole conversation at
each turn: it is recognised, and not imported (the session file holds the conversation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...codec import safe_id
from ...timestamps import parse_ts
from ..entries import Entry, FileIdentity, Line, TranscriptFormat, text_field

__all__ = ["OpenClawFormat", "OpenClawTrajectoryFormat"]


class OpenClawFormat(TranscriptFormat):
    """OpenClaw / pi session JSONL."""

    name = "openclaw"

    def sniff(self, first: Any) -> bool:
        return isinstance(first, Mapping) and first.get("type") == "session"

    def owns(self, value: Any) -> bool:
        return isinstance(value, Mapping) and (
            "parentId" in value or value.get("type") in ("session", "message")
        )

    def claims(self, value: Any) -> bool:
        message = value.get("message") if isinstance(value, Mapping) else None
        return (
            isinstance(message, Mapping)
            and value.get("type") == "message"
            and "role" in message
            and self._is_message(value)
        )

    def identify(self, path: Path, head: Sequence[Any]) -> FileIdentity:
        first = head[0] if head else None
        header = text_field(first.get("id")) if isinstance(first, Mapping) else None
        return FileIdentity(self.name, header or safe_id(path.stem), header)

    def entry(self, line: Line) -> Entry:
        obj = line.value
        if not isinstance(obj, Mapping):
            raise ValueError("an OpenClaw entry must be a JSON object")
        kind = obj.get("type")
        entry_id = text_field(obj.get("id"))
        parent = text_field(obj.get("parentId"))
        entry = Entry(line.line_no, line.start, line.end, entry_id, parent)
        if kind == "session":
            entry.skip = "session header"
            entry.entry_id = None
        elif kind == "message":
            if entry_id is None:  # version 1: no ids, a linear history keyed by line
                entry.entry_id = f"line:{line.line_no}"
            message = obj.get("message")
            if not isinstance(message, Mapping):
                raise ValueError("message entry without a 'message' object")
            entry.message = message
            entry.shape = "openclaw"
            entry.created_at = parse_ts(obj.get("timestamp")) or parse_ts(message.get("timestamp"))
            entry.metadata = {"entry": {k: v for k, v in obj.items() if k != "message"}}
        else:
            entry.skip = str(kind) if isinstance(kind, str) else "entry without a type"
            if kind == "session_info":
                entry.title = text_field(obj.get("name"))
        return entry


class OpenClawTrajectoryFormat(TranscriptFormat):
    """OpenClaw's trajectory traces: recognised, never imported (see the module doc)."""

    name = "openclaw_trajectory"
    tree = False
    not_a_transcript = (
        "an OpenClaw trajectory (a trace of model calls, not a transcript); import the"
        " session file beside it (<session>.jsonl)"
    )

    def sniff(self, first: Any) -> bool:
        schema = first.get("traceSchema") if isinstance(first, Mapping) else None
        return isinstance(schema, str) and schema.startswith("openclaw-trajectory")

    def identify(self, path: Path, head: Sequence[Any]) -> FileIdentity:
        first = head[0] if head else None
        session = text_field(first.get("sessionId")) if isinstance(first, Mapping) else None
        return FileIdentity(self.name, session or safe_id(path.stem), session)

    def entry(self, line: Line) -> Entry:
        entry = Entry(line.line_no, line.start, line.end, None, None)
        entry.skip = "trajectory event"
        return entry
