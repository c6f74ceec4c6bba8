"""Claude Code transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

``user``/``assistant`` entries carry the conversation, linked by ``uuid``/``parentUuid``; one
assistant line per content block. The session is the ``sessionId`` the entries carry (never
the file name, so a copied or renamed transcript is the same conversation); sidechain
(sub-agent) entries form a conversation of their own in the session's family.

Claude Code writes much besides the conversation, and all of it that a model saw is kept,
marked as the host's own (``host_meta``) so that it is never read as the user's words:
slash commands (``<command-name>``), the caveats it marks ``isMeta``, local commands' output,
what hooks added (``hook_additional_context`` attachments), replies it made up itself (model
``<synthetic>``), its compaction summaries (``isCompactSummary``) and the ``compact_boundary``
where it compacted. A boundary names the entry before it in ``logicalParentUuid`` (or
``compactMetadata.preservedSegment.tailUuid``); when that entry is not in the file the boundary
hangs from the entry before it, so the halves on either side stay one branch. Bookkeeping
lines (``queue-operation``, ``last-prompt``, ``mode``, ``cost-state``, ``api-request*``,
listing attachments, ...) are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...codec import dumps, safe_id
from ...model import HOST_RECORD
from ...timestamps import parse_ts
from ..entries import Entry, FileIdentity, Line, TranscriptFormat, text_field

__all__ = ["ClaudeCodeFormat"]

#: How a user line's text starts when Claude Code wrote it, not the user.
_META_PREFIXES = (
    ("<command-name>", "command"),
    ("<command-message>", "command"),
    ("<local-command-stdout>", "command_output"),
    ("<local-command-stderr>", "command_output"),
    ("<local-command-caveat>", "caveat"),
    ("<user-prompt-submit-hook>", "hook_output"),
)
#: Attachments that only list what the session has (tools, skills, agents, the environment,
#: the system prompt) or repeat a hook's raw output: bookkeeping, skipped. Any other kind
#: (a file read back, a reminder, a hook's added context) is what the model saw, and kept.
_LISTINGS = frozenset(
    {
        "hook_success",
        "environment",
        "model",
        "date",
        "deferred_tools_delta",
        "agent_listing_delta",
        "skill_listing",
        "prompt_snapshot",
        "session_context",
        "command_permissions",
        "remote_session_change",
    }
)
#: Attachments that record the host's own state, in a form that changes across versions (a
#: user row of raw JSON, or a system row of rendered text): kept as host records, never as
#: the user's words, a context's or a search's.
_HOST_RECORDS = frozenset({"deferred_tools_record", "mcp_instructions_delta"})


def _first_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                return str(block["text"])
    return ""


def _meta_kind(obj: Mapping[str, Any], message: Mapping[str, Any]) -> str | None:
    """What kind of host record a user or assistant line is, or ``None`` for the
    conversation's own words."""
    if obj.get("isCompactSummary"):
        return "host_summary"
    if message.get("model") == "<synthetic>":
        return "synthetic"
    text = _first_text(message.get("content")).lstrip()
    for prefix, kind in _META_PREFIXES:
        if text.startswith(prefix):
            return kind
    return "caveat" if obj.get("isMeta") else None


def _tool_results(content: Any) -> tuple[str, ...]:
    """The tool_use ids a user message answers, if it is made of tool results only."""
    if not isinstance(content, list) or not content:
        return ()
    ids: list[str] = []
    for block in content:
        if not isinstance(block, Mapping) or block.get("type") != "tool_result":
            return ()
        tool_id = text_field(block.get("tool_use_id"))
        if tool_id is None:
            return ()
        ids.append(tool_id)
    return tuple(ids)


def _without(obj: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


#: Keys only Claude Code's lines carry, and the kinds of line it writes without them.
_OWN_KEYS = ("uuid", "sessionId", "parentUuid", "leafUuid", "isSidechain", "userType")
_OWN_TYPES = ("user", "assistant", "system", "summary", "file-history-snapshot", "progress")


class ClaudeCodeFormat(TranscriptFormat):
    """Claude Code session transcripts (see the module doc)."""

    name = "claude_code"

    def sniff(self, first: Any) -> bool:
        if not isinstance(first, Mapping) or "traceSchema" in first:
            return False
        if "sessionId" in first or "parentUuid" in first or "leafUuid" in first:
            return True
        return first.get("type") in ("summary", "file-history-snapshot") and "role" not in first

    def owns(self, value: Any) -> bool:
        return isinstance(value, Mapping) and (
            any(key in value for key in _OWN_KEYS) or value.get("type") in _OWN_TYPES
        )

    def claims(self, value: Any) -> bool:
        return (
            isinstance(value, Mapping)
            and value.get("type") in ("user", "assistant")
            and "uuid" in value
            and isinstance(value.get("message"), Mapping)
            and self._is_message(value)
        )

    def identify(self, path: Path, head: Sequence[Any]) -> FileIdentity:
        carrier = next(
            (v for v in head if isinstance(v, Mapping) and text_field(v.get("sessionId"))), None
        )
        if carrier is None:
            # Only lines that name no session (old files open with summary lines): the file
            # name is the session id in Claude Code's layout (made storable: it need not be
            # UTF-8).
            session = safe_id(path.stem)
            agent, sidechain_file = None, False
        else:
            session = text_field(carrier.get("sessionId")) or safe_id(path.stem)
            agent = text_field(carrier.get("agentId"))
            sidechain_file = bool(carrier.get("isSidechain"))
        if sidechain_file:
            # A sub-agent's own file: its conversation sits in the parent session's family.
            sub = f"{session}:agent-{agent or safe_id(path.stem).removeprefix('agent-')}"
            return FileIdentity(self.name, sub, session, session_key=session)
        return FileIdentity(
            self.name,
            session,
            session,
            session_key=session,
            lane_sessions={"sidechain": (f"{session}:sidechain", session)},
        )

    def entry(self, line: Line) -> Entry:
        obj = line.value
        if not isinstance(obj, Mapping):
            raise ValueError("a Claude Code entry must be a JSON object")
        kind = obj.get("type")
        entry_id = text_field(obj.get("uuid"))
        parent = text_field(obj.get("parentUuid")) or text_field(obj.get("logicalParentUuid"))
        entry = Entry(line.line_no, line.start, line.end, entry_id, parent)
        entry.lane = "sidechain" if obj.get("isSidechain") else "main"
        entry.created_at = parse_ts(obj.get("timestamp"))
        if kind in ("user", "assistant"):
            self._message(entry, obj, str(kind))
        elif kind == "system":
            self._system(entry, obj)
        elif kind == "attachment":
            self._attachment(entry, obj)
        else:
            entry.skip = str(kind) if isinstance(kind, str) else "entry without a type"
            if kind in ("summary", "ai-title"):
                entry.title = text_field(obj.get("summary")) or text_field(obj.get("aiTitle"))
            if entry.entry_id is None:
                entry.parent_id = None
        return entry

    @staticmethod
    def _message(entry: Entry, obj: Mapping[str, Any], kind: str) -> None:
        message = obj.get("message")
        if not isinstance(message, Mapping):
            raise ValueError(f"{kind} entry without a 'message' object")
        entry.message = message
        entry.shape = "anthropic"
        entry.host_meta = _meta_kind(obj, message)
        if obj.get("isCompactSummary"):
            entry.host_compaction = {
                "summary_uuid": entry.entry_id,
                "boundary_uuid": entry.parent_id,
                "timestamp": obj.get("timestamp"),
                "line": entry.line_no,
            }
        if kind == "assistant":
            entry.group = text_field(message.get("id"))
        else:
            entry.answers = _tool_results(message.get("content"))
        entry.metadata = {"entry": _without(obj, "message")}

    @staticmethod
    def _system(entry: Entry, obj: Mapping[str, Any]) -> None:
        subtype = obj.get("subtype")
        content = obj.get("content")
        if subtype == "compact_boundary":
            meta = obj.get("compactMetadata")
            segment = meta.get("preservedSegment") if isinstance(meta, Mapping) else None
            tail = segment.get("tailUuid") if isinstance(segment, Mapping) else None
            entry.parent_id = (
                text_field(obj.get("logicalParentUuid"))
                or text_field(tail)
                or text_field(obj.get("parentUuid"))
            )
            entry.bridge = True
            entry.host_meta = "compact_boundary"
            content = content if isinstance(content, str) else "Conversation compacted"
        elif not isinstance(content, str) or not content:
            entry.skip = f"system {subtype}" if isinstance(subtype, str) else "system"
            return
        else:
            local = subtype == "local_command" or content.startswith("<local-command-")
            entry.host_meta = "command_output" if local else "system"
        entry.message = {"role": "system", "content": content}
        entry.shape = "anthropic"
        entry.metadata = {"entry": _without(obj, "content")}

    @staticmethod
    def _attachment(entry: Entry, obj: Mapping[str, Any]) -> None:
        attachment = obj.get("attachment")
        kind = attachment.get("type") if isinstance(attachment, Mapping) else None
        if not isinstance(kind, str) or kind in _LISTINGS:
            entry.skip = f"attachment {kind}" if isinstance(kind, str) else "attachment"
            return
        assert isinstance(attachment, Mapping)
        rendered = obj.get("rendered")
        texts = [
            str(r["content"])
            for r in (rendered if isinstance(rendered, list) else [])
            if isinstance(r, Mapping) and isinstance(r.get("content"), str)
        ]
        added = attachment.get("content")
        if kind == "hook_additional_context" and isinstance(added, list):
            texts = [str(t) for t in added if isinstance(t, str)] or texts
        entry.shape = "anthropic"
        if kind in _HOST_RECORDS:
            entry.message = {"role": "system", "content": "\n".join(texts) or dumps(attachment)}
            entry.host_meta = HOST_RECORD
            entry.metadata = {"entry": _without(obj, "rendered")}
            return
        role = "system" if obj.get("renderedRole") == "system" else "user"
        entry.message = {"role": role, "content": "\n".join(texts) or dumps(attachment)}
        entry.host_meta = "hook_output" if kind.startswith("hook_") else "attachment"
        entry.metadata = {"entry": _without(obj, "rendered")}
