"""Message shapes → one plain-text message plus ordered parts, and back again exactly.

Supported shapes (``source_format``):

* ``openai_chat`` — OpenAI Chat Completions messages (``tool_calls``, ``tool`` role, list content)
* ``openai_responses`` — OpenAI Responses input/output items (messages, function calls and
  outputs, reasoning, hosted-tool calls)
* ``anthropic`` — Anthropic Messages (text, image, document, tool_use, tool_result,
  thinking, redacted_thinking, server tool blocks)
* ``openclaw`` — the messages inside OpenClaw/pi session files (``toolCall`` blocks,
  ``toolResult`` role)
* ``lossless`` — the project's own :class:`~lossless.model.Message`
* ``unknown`` — any other item that names a ``type`` or a ``role`` (a new SDK release's item,
  a host's own record): stored whole and read back exactly, never refused

How the round trip stays exact: the message is split into an *envelope* (every key, with the
block-carrying keys — the *slots* — left as placeholders) and parts (one per block, each with
its raw JSON). :meth:`~lossless.model.StoredMessage.to_source` puts the raw blocks back into
their slots. The format-specific code (one module per format in :mod:`.normalizers`) only
decides roles, plain text and the typed columns of each part; it never has to re-create a
block. Unknown block types are kept whole as ``other`` parts.

This module is the entry point: detection, :func:`normalize` (with its fast path for a plain
text message) and the finishing touches every format shares (ids, times, token counts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..codec import CONTENT, SCALAR, has_lone_surrogates, safe_id
from ..errors import UnknownShapeError
from ..model import Message, NormalizedMessage, NormalizedPart
from ..tokens import TokenCounter, estimate_tokens
from .normalizers import (
    anthropic,
    chat,
    langchain,
    llama_index,
    lossless,
    openclaw,
    pydantic_ai,
    responses,
    unknown,
)
from .normalizers.blocks import ATTACHMENTS

__all__ = ["FORMATS", "detect_format", "keep_text_in_parts", "normalize"]

FORMATS: tuple[str, ...] = (
    "openai_chat",
    "openai_responses",
    "anthropic",
    "openclaw",
    "langchain",
    "pydantic_ai",
    "llama_index",
    "lossless",
    "unknown",
)

#: Tokens charged for an image or other binary attachment (its bytes are not text).
ATTACHMENT_TOKENS = 1_000

# --- detection -----------------------------------------------------------------------------

_RESPONSES_TYPES = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "item_reference",
        "compaction",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
    }
)
_ANTHROPIC_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "server_tool_use", "document"}
)
_OPENCLAW_BLOCKS = frozenset({"toolCall"})
_OPENCLAW_ROLES = frozenset({"toolResult", "bashExecution", "custom", "hookMessage"})


def _is_responses_type(kind: object) -> bool:
    return isinstance(kind, str) and (
        kind in _RESPONSES_TYPES or kind.endswith(("_call", "_call_output", "_output"))
    )


def _as_data(message: Any) -> Any:
    """SDK objects (pydantic models) become their JSON data; everything else is returned as is."""
    dump = getattr(message, "model_dump", None)
    if callable(dump) and not isinstance(message, Mapping):
        return dump(mode="json", exclude_unset=True)
    return message


#: Keys only OpenAI chat messages carry; with any of them a message is not OpenClaw's.
_CHAT_ONLY_KEYS = frozenset({"tool_calls", "function_call", "tool_call_id", "name", "type"})
_OPENCLAW_BLOCK_TYPES = frozenset({"text", "thinking", "image", "toolCall"})


def _looks_openclaw(message: Mapping[str, Any]) -> bool:
    """A pi/OpenClaw user or assistant message: an assistant one has ``stopReason``; both
    carry an epoch ``timestamp`` and hold only text/thinking/image/toolCall blocks."""
    content = message.get("content")
    if "stopReason" in message and "api" in message and isinstance(content, list):
        return True
    ts = message.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return False
    if any(key in message for key in _CHAT_ONLY_KEYS):
        return False
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(b, Mapping) and b.get("type") in _OPENCLAW_BLOCK_TYPES for b in content
    )


def detect_format(message: Any) -> str:
    """Guess the shape of *message*; raises :class:`UnknownShapeError` if none fits."""
    if isinstance(message, Message):
        return "lossless"
    message = _as_data(message)
    if not isinstance(message, Mapping):
        raise UnknownShapeError(
            f"a message must be a mapping or a lossless.Message, not {type(message).__name__}; "
            f"pass dicts shaped like OpenAI, Anthropic or Responses messages"
        )
    if langchain.is_langchain(message):
        return "langchain"
    if pydantic_ai.is_pydantic_ai(message):
        return "pydantic_ai"
    if llama_index.is_llama_index(message):
        return "llama_index"
    kind = message.get("type")
    role = message.get("role")
    if not isinstance(role, str):
        role = None  # an unhashable role (list, dict) must not break the lookups below
    if "role" not in message and _is_responses_type(kind):
        return "openai_responses"
    if kind == "message" and isinstance(message.get("content"), list | str):
        return "openai_responses"
    if role in _OPENCLAW_ROLES or (role in ("user", "assistant") and _looks_openclaw(message)):
        return "openclaw"
    content = message.get("content")
    if isinstance(content, list):
        types = {
            t for b in content if isinstance(b, Mapping) and isinstance(t := b.get("type"), str)
        }
        if types & _OPENCLAW_BLOCKS:
            return "openclaw"
        if types & _ANTHROPIC_BLOCKS:
            return "anthropic"
        if types & {"input_text", "output_text", "input_image", "input_file"}:
            return "openai_responses"
        if any(
            isinstance(b, Mapping) and b.get("type") == "image" and "source" in b for b in content
        ):
            return "anthropic"
    if role in chat.ROLES:
        return "openai_chat"
    if isinstance(kind, str) or role is not None:
        return "unknown"  # an item of a kind lossless does not know yet: kept verbatim
    raise UnknownShapeError(
        f"unknown message shape (keys: {', '.join(sorted(map(str, message))) or 'none'}): it"
        f" has no 'role' and no 'type'; expected an OpenAI chat message (role + content), a"
        f" Responses item (type), an Anthropic message (role + content blocks) or a"
        f" lossless.Message"
    )


# --- normalization -------------------------------------------------------------------------


def normalize(
    message: Any,
    *,
    format: str | None = None,
    external_id: str | None = None,
    created_at: datetime | None = None,
    metadata: Mapping[str, Any] | None = None,
    counter: TokenCounter | None = None,
) -> NormalizedMessage:
    """Turn one message of any supported shape into a :class:`NormalizedMessage`."""
    if (
        type(message) is dict
        and len(message) == 2
        and format in (None, "openai_chat", "anthropic", "openai_responses")
    ):
        fast = _plain_message(message, format or "openai_chat")
        if fast is not None:
            return _finish(fast, external_id, created_at, metadata, counter)
    fmt = format or detect_format(message)
    if fmt not in _NORMALIZERS:
        raise UnknownShapeError(f"unknown format {fmt!r}; use one of: {', '.join(FORMATS)}")
    data = message if isinstance(message, Message) else _as_data(message)
    if fmt != "lossless" and not isinstance(data, Mapping):
        raise UnknownShapeError(f"a {fmt} message must be a mapping, not {type(data).__name__}")
    try:
        norm = _NORMALIZERS[fmt](data)
    except UnknownShapeError:
        if (
            format is not None
            or not isinstance(data, Mapping)
            or not unknown.keeps_as_unknown(data)
        ):
            raise  # a format the caller named must fit
        norm = unknown.normalize(data)
    _fold_plain_text(norm)
    return _finish(norm, external_id, created_at, metadata, counter)


_PLAIN_ROLES = {"user": "user", "assistant": "assistant", "system": "system"}


def _plain_message(message: dict[str, Any], fmt: str) -> NormalizedMessage | None:
    """The common ``{"role": ..., "content": "text"}`` message, without the general machinery."""
    content = message.get("content")
    source_role = message.get("role")
    role = _PLAIN_ROLES.get(source_role) if type(source_role) is str else None
    if role is None or type(content) is not str:
        return None
    if has_lone_surrogates(content):
        return None
    return NormalizedMessage(
        role=role,
        content=content,
        token_count=0,
        parts=[],
        source_format=fmt,
        envelope=None,  # None: exactly {"role": role, "content": content}
    )


def _finish(
    norm: NormalizedMessage,
    external_id: str | None,
    created_at: datetime | None,
    metadata: Mapping[str, Any] | None,
    counter: TokenCounter | None,
) -> NormalizedMessage:
    if external_id is not None:
        norm.external_id = external_id
    if isinstance(norm.external_id, str):
        norm.external_id = safe_id(norm.external_id)
    if created_at is not None:
        norm.created_at = created_at
    if metadata:
        norm.metadata = {**(norm.metadata or {}), **metadata}
    text = norm.content
    tokens = counter.count(text) if counter is not None else estimate_tokens(text)
    if norm.parts:
        tokens += ATTACHMENT_TOKENS * sum(1 for p in norm.parts if p.type in ATTACHMENTS)
    norm.token_count = tokens
    return norm


def keep_text_in_parts(norm: NormalizedMessage) -> None:
    """Before ``content`` is rewritten (large files): move a text kept only there into a part,
    so the message still reads back exactly."""
    if norm.envelope is None:
        norm.envelope = {"f": {"role": norm.role, "content": None}, "s": {"content": SCALAR}}
        norm.parts = [
            NormalizedPart(slot="content", type="text", text=norm.content, raw_is_text=True)
        ]
        return
    slots = norm.envelope.get("s", {})
    for key, kind in list(slots.items()):
        if kind == CONTENT:
            slots[key] = SCALAR
            norm.parts = [
                NormalizedPart(slot=key, type="text", text=norm.content, raw_is_text=True)
            ]


def _fold_plain_text(norm: NormalizedMessage) -> None:
    """A message that is one plain string keeps it only in ``content`` (no part row)."""
    if len(norm.parts) != 1:
        return
    part = norm.parts[0]
    if norm.envelope is None:
        return
    slots = norm.envelope.get("s", {})
    if (
        part.type == "text"
        and part.raw_is_text
        and slots.get(part.slot) == SCALAR
        and part.text == norm.content
    ):
        slots[part.slot] = CONTENT
        norm.parts = []


_NORMALIZERS: dict[str, Callable[[Any], NormalizedMessage]] = {
    "openai_chat": chat.normalize,
    "openai_responses": responses.normalize,
    "anthropic": anthropic.normalize,
    "openclaw": openclaw.normalize,
    "langchain": langchain.normalize,
    "pydantic_ai": pydantic_ai.normalize,
    "llama_index": llama_index.normalize,
    "lossless": lossless.normalize,
    "unknown": unknown.normalize,
}
