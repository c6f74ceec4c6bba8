"""Plain data types shared by every layer, one per stage of a message's life.

* ``Message`` and ``Part`` — the project's own message shape (what callers may ingest).
* ``NormalizedMessage`` and ``NormalizedPart`` — any message shape made ready to store (plain
  text, typed parts, the envelope that rebuilds the source), with the ``LargeFile`` records
  of what was kept outside its text.
* ``StoredMessage``, ``StoredPart``, ``Conversation``, ``Summary``, ``ContextItem``,
  ``Checkpoint``, ``Grant`` and the rest — rows as the store reads them back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from .codec import CONTENT, LIST, SCALAR, WHOLE
from .errors import ArgumentError, NotFoundError

__all__ = [
    "DEFAULT_NAMESPACE",
    "FILE_ID",
    "HOST_META",
    "MAX_SESSION_ID_CHARS",
    "NAMESPACE_SEP",
    "PROVISIONAL",
    "ROLES",
    "Checkpoint",
    "ContextItem",
    "Conversation",
    "ConversationStats",
    "Grant",
    "IngestResult",
    "LargeFile",
    "Message",
    "NormalizedMessage",
    "NormalizedPart",
    "Part",
    "Role",
    "SessionSummary",
    "StoredMessage",
    "StoredPart",
    "Summary",
    "check_file_id",
    "check_namespace",
    "check_session_id",
    "namespace_of",
    "qualify",
    "unqualify",
    "writing_namespace",
]

#: What a large file's id looks like (``file_`` and 16 hex digits).
FILE_ID = re.compile(r"^file_[0-9a-f]{16}$")

#: The ``model`` of a summary the offline summarizer wrote at once while the configured
#: model's summary of the same sources is on its way (it replaces it in place, same id).
PROVISIONAL = "provisional"

Role = Literal["user", "assistant", "system", "tool"]
ROLES: tuple[str, ...] = ("user", "assistant", "system", "tool")

#: Kinds of host records (:attr:`StoredMessage.host_meta`): what a host wrote into its
#: transcript beside the conversation. Stored and searchable like any message, but never
#: read as the user's words (not the goal, not the current task, not what leads a summary).
HOST_META: tuple[str, ...] = (
    "command",  # a slash command the user ran (/compact, /init, ...)
    "caveat",  # the host's own note to the model (Claude Code's isMeta entries)
    "command_output",  # what a local command printed
    "hook_output",  # what a hook added to the context
    "synthetic",  # a reply the host made up, not the model's
    "host_summary",  # the host's own compaction summary
    "compact_boundary",  # where the host compacted
    "attachment",  # a file, reminder or other context the host attached
    "system",  # any other system record of the host
    "host_record",  # the host's record of its own state (the tools or MCP instructions it
    # offered, ...): kept, but never assembled into a context nor found by a default search
)
#: The kind of host record kept out of every context and of a default search.
HOST_RECORD = "host_record"

#: Part types. Unknown source blocks are kept whole as ``other``.
PART_TYPES: tuple[str, ...] = (
    "text",
    "image",
    "document",
    "audio",
    "file",
    "tool_call",
    "tool_result",
    "reasoning",
    "redacted_reasoning",
    "refusal",
    "other",
)


@dataclass(frozen=True)
class Part:
    """One structured block of a message: text, a tool call, a tool result, reasoning, ..."""

    type: str
    text: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_input: Any = None
    tool_output: str | None = None
    is_error: bool = False
    raw: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The part as JSON-ready data."""
        return {
            "type": self.type,
            "text": self.text,
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "tool_input": self.tool_input,
            "tool_output": self.tool_output,
            "is_error": self.is_error,
            "raw": self.raw,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Part:
        """Inverse of :meth:`to_dict`."""
        return cls(
            type=data["type"],
            text=data.get("text"),
            tool_call_id=data.get("tool_call_id"),
            tool_name=data.get("tool_name"),
            tool_input=data.get("tool_input"),
            tool_output=data.get("tool_output"),
            is_error=bool(data.get("is_error", False)),
            raw=data.get("raw"),
        )


@dataclass(frozen=True)
class Message:
    """The project's own message shape.

    ``content`` is the plain text; ``parts`` the structured blocks (optional: a message with
    only ``content`` is stored as one text part). ``external_id`` makes ingestion idempotent.
    """

    role: Role
    content: str = ""
    parts: tuple[Part, ...] = ()
    external_id: str | None = None
    created_at: datetime | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (``created_at`` as ISO-8601 text)."""
        return {
            "role": self.role,
            "content": self.content,
            "parts": [p.to_dict() for p in self.parts],
            "external_id": self.external_id,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Inverse of :meth:`to_dict`."""
        created = data.get("created_at")
        return cls(
            role=data["role"],
            content=data.get("content", ""),
            parts=tuple(Part.from_dict(p) for p in data.get("parts", ())),
            external_id=data.get("external_id"),
            created_at=datetime.fromisoformat(created) if created else None,
            metadata=dict(data.get("metadata") or {}),
        )


def check_file_id(file_id: str) -> str:
    """*file_id* if it is well formed; a clear error otherwise (no path is ever built from
    anything else)."""
    if not isinstance(file_id, str) or not FILE_ID.match(file_id):
        raise NotFoundError(
            f"{file_id!r} is not a file id; file ids look like file_0123456789abcdef"
        )
    return file_id


@dataclass(frozen=True)
class LargeFile:
    """A file kept outside the context (one ``large_files`` row)."""

    file_id: str
    conversation_id: int
    file_name: str | None
    mime_type: str | None
    byte_size: int
    token_count: int
    sha256: str
    storage_path: str  # relative to the files directory
    exploration_summary: str
    message_id: int | None = None
    created_at: str | None = None


@dataclass
class NormalizedPart:
    """A part ready to store. ``raw`` is the original block; ``None`` means "the text"."""

    slot: str
    type: str
    text: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_input: Any = None
    tool_output: str | None = None
    is_error: bool = False
    raw: Any = None
    raw_is_text: bool = False


@dataclass
class NormalizedMessage:
    """A message ready to store."""

    role: str
    content: str
    token_count: int
    parts: list[NormalizedPart]
    source_format: str
    envelope: dict[str, Any] | None
    external_id: str | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] | None = field(default=None)
    #: Files this message's plain text refers to instead of holding (set at ingest).
    large_files: list[LargeFile] = field(default_factory=list)
    #: With masking or removal: the secrets replaced, and the original when kept (encrypted
    #: with removal, as it was with masking: ``kept_plain``).
    redactions: int = 0
    sealed: bytes | None = None
    kept_plain: bool = False
    #: A host's own record (a command, caveat, hook output, ...), not the conversation's.
    host_meta: str | None = None
    #: A tombstone read back from an export: when its message was forgotten (no text).
    forgotten_at: str | None = None


@dataclass(frozen=True)
class Conversation:
    """A conversation row: one agent session."""

    conversation_id: int
    session_id: str
    session_key: str | None
    title: str | None
    status: str
    created_at: str
    updated_at: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConversationStats:
    """A conversation with its counts, for listings."""

    conversation: Conversation
    message_count: int
    message_tokens: int
    summary_count: int
    summaries_by_depth: Mapping[int, int]
    context_items: int
    context_tokens: int
    last_message_at: str | None
    first_message_at: str | None = None
    #: Where it came from: the transcript format it was imported from (``claude_code``,
    #: ``codex``, ``openclaw``, ``hermes``, ``messages``), else its first message's shape
    #: (``anthropic``, ``openai_chat``, ``langchain``, ...); ``None`` with no message.
    source: str | None = None


@dataclass(frozen=True)
class StoredPart:
    """A ``message_parts`` row."""

    part_id: int
    message_id: int
    ordinal: int
    slot: str
    type: str
    text: str | None
    tool_call_id: str | None
    tool_name: str | None
    tool_input: Any
    tool_output: str | None
    is_error: bool
    raw: Any


def speaker_of(role: str, host_meta: str | None) -> str:
    """Who a summary should say wrote a message: its role, or ``host`` for a host's record."""
    return role if host_meta is None else "host"


class MessageText(NamedTuple):
    """What a summary is made from of a stored message: no parts, no envelope (a leaf pass
    reads hundreds of these, and the parts are already in the text)."""

    message_id: int
    speaker: str
    content: str
    created_at: str
    token_count: int


@dataclass(frozen=True)
class StoredMessage:
    """A ``messages`` row with its parts, as stored."""

    message_id: int
    conversation_id: int
    seq: int
    role: str
    content: str
    token_count: int
    created_at: str
    external_id: str | None
    source_format: str
    envelope: Any
    metadata: Mapping[str, Any] | None
    parts: tuple[StoredPart, ...]
    #: What kind of host record this is (``command``, ``caveat``, ``hook_output``, ...), or
    #: ``None`` for the conversation's own messages: see :data:`lossless.model.HOST_META`.
    host_meta: str | None = None
    #: When the owner forgot it (``lossless forget``): a tombstone, its text gone.
    forgotten_at: str | None = None

    @property
    def speaker(self) -> str:
        """Who a summary should say wrote it: its role, or ``host`` for a host's record."""
        return speaker_of(self.role, self.host_meta)

    def to_source(self) -> Any:
        """The message exactly as it was ingested, in its source format: the envelope's
        slots filled with the parts' raw blocks."""
        if self.envelope is None and self.source_format != "lossless":
            # Stored without an envelope: a plain {"role", "content": str} message.
            return {"role": self.role, "content": self.content}
        envelope = self.envelope or {"f": {}, "s": {}}
        slots: Mapping[str, str] = envelope.get("s", {})
        by_slot: dict[str, list[Any]] = {}
        for part in self.parts:
            by_slot.setdefault(part.slot, []).append(part.raw)
        if WHOLE in slots:
            return by_slot[WHOLE][0]
        out: dict[str, Any] = {}
        for key, value in envelope.get("f", {}).items():
            kind = slots.get(key)
            if kind == SCALAR:
                out[key] = by_slot[key][0]
            elif kind == CONTENT:
                out[key] = self.content
            elif kind == LIST:
                out[key] = by_slot.get(key, [])
            else:
                out[key] = value
        if self.source_format == "lossless":
            return Message.from_dict(out)
        return out


@dataclass(frozen=True)
class IngestResult:
    """What an ingest call did: the ids it stored and how many inputs were already stored."""

    conversation_id: int
    message_ids: tuple[int, ...]
    skipped: int = 0

    @property
    def inserted(self) -> int:
        """Number of messages stored by this call."""
        return len(self.message_ids)


@dataclass(frozen=True)
class ContextItem:
    """One entry of a conversation's active context, with what compaction needs to know."""

    ordinal: int
    item_type: str  # "message" | "summary"
    message_id: int | None
    summary_id: str | None
    tokens: int
    role: str | None  # messages: user/assistant/system/tool; summaries: None
    depth: int | None  # summaries only
    earliest_at: str
    latest_at: str

    @property
    def ref(self) -> str:
        """``msg#<id>`` or the summary id."""
        return f"msg#{self.message_id}" if self.message_id is not None else str(self.summary_id)

    @classmethod
    def of_summary(
        cls, summary: Summary, ordinal: int, *, tokens: int | None = None
    ) -> ContextItem:
        """*summary* as the item at *ordinal*, weighing its own tokens (or *tokens*: what it
        costs as shown)."""
        return cls(
            ordinal,
            "summary",
            None,
            summary.summary_id,
            summary.token_count if tokens is None else tokens,
            None,
            summary.depth,
            summary.earliest_at or summary.created_at,
            summary.latest_at or summary.created_at,
        )


@dataclass(frozen=True)
class Summary:
    """A node of the summary DAG."""

    summary_id: str
    conversation_id: int
    kind: str  # "leaf" | "condensed"
    depth: int
    content: str
    token_count: int
    created_at: str
    earliest_at: str | None
    latest_at: str | None
    descendant_count: int
    file_ids: tuple[str, ...]
    model: str | None
    #: ``rewritten`` or ``dissolved`` once maintenance retired it (it left the context).
    retired_reason: str | None = None
    #: The summary that replaced a rewritten one.
    superseded_by: str | None = None

    @property
    def provisional(self) -> bool:
        """Written at once by the offline summarizer; the model's summary replaces it."""
        return self.model == PROVISIONAL

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "summary_id": self.summary_id,
            "conversation_id": self.conversation_id,
            "kind": self.kind,
            "depth": self.depth,
            "content": self.content,
            "token_count": self.token_count,
            "created_at": self.created_at,
            "earliest_at": self.earliest_at,
            "latest_at": self.latest_at,
            "descendant_count": self.descendant_count,
            "file_ids": list(self.file_ids),
            "model": self.model,
            "retired_reason": self.retired_reason,
            "superseded_by": self.superseded_by,
        }


@dataclass(frozen=True)
class SessionSummary:
    """One version of a conversation's whole-session summary (``session_summaries``).

    Versions 1, 2, ... are never overwritten. Each covers the conversation's messages up to
    ``last_message_id`` (``message_count`` of them); an incremental version was made from the
    previous one and the ``messages_processed`` messages after it.
    """

    session_summary_id: str  # ss_ + 16 hex
    conversation_id: int
    version: int
    summary: str  # the overview
    topics: tuple[str, ...]
    decisions: tuple[str, ...]
    code_references: tuple[str, ...]
    key_points: tuple[str, ...]
    first_message_id: int | None
    last_message_id: int | None
    message_count: int
    messages_processed: int
    is_incremental: bool
    model: str | None
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "session_summary_id": self.session_summary_id,
            "conversation_id": self.conversation_id,
            "version": self.version,
            "summary": self.summary,
            "topics": list(self.topics),
            "decisions": list(self.decisions),
            "code_references": list(self.code_references),
            "key_points": list(self.key_points),
            "first_message_id": self.first_message_id,
            "last_message_id": self.last_message_id,
            "message_count": self.message_count,
            "messages_processed": self.messages_processed,
            "is_incremental": self.is_incremental,
            "model": self.model,
            "created_at": self.created_at,
        }

    def render(self) -> str:
        """The summary as headed plain text: the overview, then each non-empty list."""
        parts = [self.summary.strip()]
        for title, items in (
            ("Topics", self.topics),
            ("Decisions", self.decisions),
            ("Code references", self.code_references),
            ("Key points", self.key_points),
        ):
            if items:
                parts.append(f"{title}:\n" + "\n".join(f"- {item}" for item in items))
        return "\n\n".join(p for p in parts if p)


@dataclass(frozen=True)
class Grant:
    """A delegation grant as stored (``grants``): the conversations a sub-agent may expand,
    how deep it may walk the DAG and how many tokens it may take in all, until it expires or
    is revoked."""

    grant_id: str  # grant_ + 32 hex, a secret
    conversation_ids: tuple[int, ...]
    max_depth: int
    token_cap: int
    tokens_used: int
    expires_at: str
    revoked_at: str | None

    @property
    def tokens_left(self) -> int:
        """Tokens the grant still allows."""
        return max(0, self.token_cap - self.tokens_used)


@dataclass(frozen=True)
class Checkpoint:
    """How far a conversation was fed from a transcript file (``transcript_checkpoints``)."""

    conversation_id: int
    path: str
    format: str
    header_id: str | None
    head_hash: str
    size: int
    offset: int
    line_no: int
    last_line_start: int
    last_line_hash: str
    last_entry_id: str | None
    #: The lines up to ``line_no`` that could not be imported, as ``(line, kind, reason)``:
    #: an import that does not read them again still reports them.
    problems: tuple[tuple[int, str, str], ...] = ()


#: The longest session id a new conversation takes (the hosts' are UUIDs or short names).
MAX_SESSION_ID_CHARS = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_session_id(session_id: str) -> None:
    """Refuse, saying why, a session id no conversation should be made under: empty or only
    spaces, longer than :data:`MAX_SESSION_ID_CHARS`, or holding a control character (NUL,
    a line break: ids are printed, logged and put in file names)."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise ArgumentError("a session id may not be empty; give the host's id of the session")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise ArgumentError(
            f"a session id is at most {MAX_SESSION_ID_CHARS:,} characters; this one has"
            f" {len(session_id):,}"
        )
    if (bad := _CONTROL.search(session_id)) is not None:
        raise ArgumentError(
            f"a session id may not hold control characters; this one has U+{ord(bad.group()):04X}"
            f" at position {bad.start()}"
        )


# --- namespaces ---------------------------------------------------------------------------
#
# A store holds namespaces (a team, a user, an agent fleet): ``lossless serve`` gives each
# access token one, and what the token's holder does reaches only that namespace's
# conversations. The owner's conversations (everything written locally, by the hooks, the
# CLI, the stdio server or the server's own token) are the ``default`` namespace; another
# namespace's conversation is stored under its *qualified* session id, the namespace and the
# host's id joined by a control character no host's session id may hold, so two namespaces'
# "s1" are two conversations and the store's one unique key on session ids still holds.

#: The owner's namespace: conversations stored under the host's own session id.
DEFAULT_NAMESPACE = "default"
#: Joins a namespace and a host's session id (U+001F, refused in any session id).
NAMESPACE_SEP = "\x1f"
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

#: The namespace a request running now writes in (``None``: the owner's). Set by the server
#: around each request of a namespaced token, so a conversation the request creates under a
#: name it did not choose (a transcript's sub-agent lane) lands in its namespace too.
writing_namespace: ContextVar[str | None] = ContextVar("writing_namespace", default=None)


def check_namespace(namespace: str) -> str:
    """*namespace* if it is a namespace's name (a letter or digit, then up to 63 letters,
    digits, ``_``, ``.`` or ``-``); an :class:`ArgumentError` saying so otherwise."""
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise ArgumentError(
            f"{namespace!r} is not a namespace name: use 1 to 64 letters, digits, '_', '.' or"
            " '-', starting with a letter or digit (e.g. team-a)"
        )
    return namespace


def qualify(namespace: str | None, session_id: str) -> str:
    """The stored session id of the host's *session_id* in *namespace* (the host's own id in
    the default namespace, and for an id already qualified for *namespace*)."""
    if namespace is None or namespace == DEFAULT_NAMESPACE:
        return session_id
    prefix = namespace + NAMESPACE_SEP
    return session_id if session_id.startswith(prefix) else prefix + session_id


def namespace_of(session_id: str) -> str:
    """The namespace of a stored session id (``default`` for an unqualified one)."""
    head, sep, _ = session_id.partition(NAMESPACE_SEP)
    return head if sep and _NAMESPACE.match(head) else DEFAULT_NAMESPACE


def unqualify(session_id: str) -> str:
    """The host's own session id of a stored one (the stored id for the default namespace)."""
    head, sep, rest = session_id.partition(NAMESPACE_SEP)
    return rest if sep and _NAMESPACE.match(head) else session_id
