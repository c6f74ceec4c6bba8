"""Hermes Agent sessions, as :mod:`lossless.ingest.host_stores` reads them out of Hermes's
``state.db``: a ``hermes_session`` header, then one line per stored message row (``row``,
``timestamp`` in epoch seconds, ``message``: an OpenAI chat message). Entries are keyed by the
row id, so a re-import stores nothing twice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...codec import SUMMARY_MESSAGE_LEAD, safe_id
from ...timestamps import parse_ts
from ..entries import Entry, FileIdentity, Line, TranscriptFormat, text_field

__all__ = ["HermesFormat", "hermes_artefact"]

#: How Hermes's own compressor starts the summary message it writes (its current marker and
#: its older ones), and the note it adds to carry the task list across a compression.
_SUMMARY_LEADS = ("[CONTEXT COMPACTION", "[CONTEXT SUMMARY]:")
_TASK_NOTE = "[Your active task list was preserved across context compression]"


def hermes_artefact(content: Any) -> str | None:
    """The host-record kind of a message Hermes's own compressor wrote (its summary:
    ``host_summary``; its task-list note: ``caveat``), or ``None`` for a message said."""
    if not isinstance(content, str):
        return None
    if content.startswith(_SUMMARY_LEADS):
        return "host_summary"
    if content.startswith(_TASK_NOTE):
        return "caveat"
    return None


class HermesFormat(TranscriptFormat):
    """A Hermes Agent session read out of its database."""

    name = "hermes"
    tree = False

    def sniff(self, first: Any) -> bool:
        return isinstance(first, Mapping) and first.get("type") == "hermes_session"

    def owns(self, value: Any) -> bool:
        return isinstance(value, Mapping) and (
            "row" in value or value.get("type") == "hermes_session"
        )

    def claims(self, value: Any) -> bool:
        message = value.get("message") if isinstance(value, Mapping) else None
        return (
            isinstance(message, Mapping)
            and "row" in value
            and "role" in message
            and self._is_message(value)
        )

    def identify(self, path: Path, head: Sequence[Any]) -> FileIdentity:
        first = head[0] if head else None
        session = text_field(first.get("id")) if isinstance(first, Mapping) else None
        return FileIdentity(self.name, session or safe_id(path.stem), session)

    def entry(self, line: Line) -> Entry:
        obj = line.value
        if not isinstance(obj, Mapping):
            raise ValueError("a Hermes session line must be a JSON object")
        entry = Entry(line.line_no, line.start, line.end, None, None)
        if obj.get("type") == "hermes_session":
            entry.skip = "session header"
            entry.title = text_field(obj.get("title"))
            return entry
        message = obj.get("message")
        if not isinstance(message, Mapping):
            raise ValueError("a Hermes message line without a 'message' object")
        entry.entry_id = f"row:{obj.get('row')}"
        content = message.get("content")
        if isinstance(content, str) and content.startswith(SUMMARY_MESSAGE_LEAD):
            entry.skip = "lossless's own summaries"  # lossless's output, not the conversation's
            return entry
        entry.message = message
        entry.host_meta = hermes_artefact(content)
        entry.shape = "openai_chat"
        entry.created_at = parse_ts(obj.get("timestamp"))
        return entry
