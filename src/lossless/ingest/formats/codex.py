"""Codex CLI rollouts (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session>.jsonl``).

Each line is ``{"timestamp", "ordinal", "type", "payload"}``; the first is ``session_meta``,
whose ``payload.id`` is the session (the id in the file name, the id Codex's hooks pass). The
conversation is the ``response_item`` lines: each payload is an OpenAI Responses item
(messages, reasoning, function calls and their outputs), stored exactly. ``event_msg`` lines
repeat what ``response_item`` lines hold (the user's message, the reply, a command's run) and
are skipped, so each is stored once. Codex appends to a rollout and never rewrites it, and
``ordinal`` counts its lines, so ``codex:<ordinal>`` (the line number in older rollouts) is a
stable id: importing again, or a file that grew, never stores a line twice.

What Codex itself put into the window is kept and marked as the host's (``host_meta``): its
developer instructions, the environment context, what hooks added, and its compaction
summaries (the assistant item it marks ``compaction_output``; older rollouts hold the summary
only in the ``compacted`` line, which is then stored). Codex's ids cannot be keys of their own:
assistant and reasoning ids are whatever the model server sent, and may repeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...codec import safe_id
from ...timestamps import parse_ts
from ..entries import Entry, FileIdentity, Line, TranscriptFormat, text_field

__all__ = ["CodexFormat"]

#: Codex's own labels of what a message is (``content_item_kinds``) → the host record kind.
_KINDS = {
    "hooks.additional_context": "hook_output",
    "environments.environment_context": "attachment",
    "compaction.summary": "host_summary",
}
#: How the text of a message Codex wrote itself starts (rollouts without those labels).
_PREFIXES = (
    ("<environment_context>", "attachment"),
    ("<user_instructions>", "system"),
    ("<permissions instructions>", "system"),
)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                return str(block["text"])
    return ""


def _meta_kind(item: Mapping[str, Any], line_meta: Any) -> str | None:
    """What kind of host record a rollout item is, or ``None`` for the conversation."""
    if isinstance(line_meta, Mapping) and line_meta.get("compaction_output"):
        return "host_summary"
    passthrough = item.get("internal_chat_message_metadata_passthrough")
    kinds = passthrough.get("content_item_kinds") if isinstance(passthrough, Mapping) else None
    for kind in kinds if isinstance(kinds, list) else ():
        if kind in _KINDS:
            return _KINDS[kind]
        if isinstance(kind, str) and kind.startswith(("host_skills.", "permissions.")):
            return "system"
    if item.get("type") not in (None, "message"):
        return None
    if item.get("role") == "developer":
        return "system"  # Codex writes its developer messages itself
    text = _text(item.get("content")).lstrip()
    for prefix, kind in _PREFIXES:
        if text.startswith(prefix):
            return kind
    return None


class CodexFormat(TranscriptFormat):
    """Codex CLI rollout files (see the module doc)."""

    name = "codex"
    tree = False

    def sniff(self, first: Any) -> bool:
        return (
            isinstance(first, Mapping)
            and first.get("type") == "session_meta"
            and isinstance(first.get("payload"), Mapping)
        )

    def owns(self, value: Any) -> bool:
        return isinstance(value, Mapping) and (
            "payload" in value
            or value.get("type")
            in ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
        )

    def claims(self, value: Any) -> bool:
        return (
            isinstance(value, Mapping)
            and value.get("type") == "response_item"
            and isinstance(value.get("payload"), Mapping)
            and self._is_message(value)
        )

    def identify(self, path: Path, head: Sequence[Any]) -> FileIdentity:
        payload = head[0].get("payload") if head and isinstance(head[0], Mapping) else None
        session = None
        if isinstance(payload, Mapping):
            session = text_field(payload.get("id")) or text_field(payload.get("session_id"))
        if session is None:  # the file name ends with it: rollout-<time>-<session>
            session = safe_id(path.stem[-36:] if len(path.stem) > 36 else path.stem)
        return FileIdentity(self.name, session, session)

    def entry(self, line: Line) -> Entry:
        obj = line.value
        if not isinstance(obj, Mapping):
            raise ValueError("a Codex rollout line must be a JSON object")
        ordinal = obj.get("ordinal")
        ident = (
            f"codex:{ordinal}"
            if isinstance(ordinal, int) and not isinstance(ordinal, bool)
            else f"line:{line.line_no}"
        )
        entry = Entry(line.line_no, line.start, line.end, ident, None)
        entry.created_at = parse_ts(obj.get("timestamp"))
        kind = obj.get("type")
        payload = obj.get("payload")
        if kind == "response_item":
            if not isinstance(payload, Mapping):
                raise ValueError("a response_item line without a 'payload' object")
            entry.message = payload
            entry.host_meta = _meta_kind(payload, obj.get("metadata"))
            entry.metadata = {"entry": {k: v for k, v in obj.items() if k != "payload"}}
        elif kind == "compacted" and isinstance(payload, Mapping):
            entry.host_compaction = {
                "line": line.line_no,
                "timestamp": obj.get("timestamp"),
                "window_id": payload.get("window_id"),
            }
            summary = payload.get("message")
            if "replacement_history" in payload or not isinstance(summary, str):
                entry.skip = "compacted (its summary is the compaction_output item)"
            else:  # an older rollout: the summary is only here
                entry.message = {"role": "user", "content": summary}
                entry.host_meta = "host_summary"
                entry.metadata = {"entry": {k: v for k, v in obj.items() if k != "payload"}}
        elif kind == "event_msg" and isinstance(payload, Mapping):
            entry.skip = f"event_msg {payload.get('type')}"
        else:
            entry.skip = str(kind) if isinstance(kind, str) else "line without a type"
        return entry
