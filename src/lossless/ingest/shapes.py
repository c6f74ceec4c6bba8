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
their slots. The format-specific code only decides roles, plain text and the typed columns of
each part; it never has to re-create a block. Unknown block types are kept whole as ``other`` parts.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from ..codec import (
    CONTENT,
    LIST,
    SCALAR,
    WHOLE,
    clean_text,
    dumps,
    has_lone_surrogates,
    safe_id,
)
from ..errors import UnknownShapeError
from ..model import ROLES, Message, NormalizedMessage, NormalizedPart, Part
from ..timestamps import parse_ts
from ..tokens import TokenCounter, estimate_tokens

__all__ = ["FORMATS", "detect_format", "keep_text_in_parts", "normalize"]

FORMATS: tuple[str, ...] = (
    "openai_chat",
    "openai_responses",
    "anthropic",
    "openclaw",
    "lossless",
    "unknown",
)

logger = logging.getLogger(__name__)

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
_CHAT_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}


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
    if role in _CHAT_ROLES:
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
        if format is not None or not isinstance(data, Mapping) or not _keeps_as_unknown(data):
            raise  # a format the caller named must fit
        norm = _normalize_unknown(data)
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
        tokens += ATTACHMENT_TOKENS * sum(1 for p in norm.parts if p.type in _ATTACHMENTS)
    norm.token_count = tokens
    return norm


_ATTACHMENTS = frozenset({"image", "document", "audio", "file"})


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


def _envelope(data: Mapping[str, Any], slots: Mapping[str, str]) -> dict[str, Any]:
    fields = {k: (None if k in slots else v) for k, v in data.items()}
    return {"f": fields, "s": dict(slots)}


def _join(parts: Iterable[NormalizedPart]) -> str:
    return "\n".join(t for t in (_part_text(p) for p in parts) if t)


def _part_text(part: NormalizedPart) -> str:
    if part.type == "tool_call":
        args = part.tool_input
        rendered = args if isinstance(args, str) else dumps(args) if args is not None else ""
        return clean_text(f"[tool call {part.tool_name or ''}] {rendered}".rstrip())
    if part.type == "tool_result":
        return part.tool_output or ""
    if part.type in _ATTACHMENTS:
        return f"[{part.type}]"
    if part.type == "redacted_reasoning":
        return "[redacted reasoning]"
    return part.text or ""


def _str(value: Any) -> str | None:
    return clean_text(value) if isinstance(value, str) else None


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _finite_float(token: str) -> float:
    number = float(token)
    if not math.isfinite(number):
        raise ValueError(f"{token} is not a finite number")
    return number


def _parse_args(value: Any) -> Any:
    """Tool arguments as data when they are strict JSON, else the string itself.

    NaN, Infinity and numbers beyond double range are not JSON: such a string is kept as is
    rather than parsed into a value no JSON column can hold.
    """
    if isinstance(value, str):
        try:
            return json.loads(value, parse_constant=_not_json, parse_float=_finite_float)
        except (ValueError, RecursionError):
            return value
    return value


def _raw_id(value: Any) -> str | None:
    """An id as given (made storable by :func:`safe_id` when the message is finished)."""
    return value if isinstance(value, str) else None


def _text_of_blocks(blocks: Any) -> str:
    """Plain text of a nested tool-result content value (string or list of blocks)."""
    if isinstance(blocks, str):
        return clean_text(blocks)
    if isinstance(blocks, list):
        out = []
        for b in blocks:
            if isinstance(b, Mapping):
                t = b.get("text")
                if isinstance(t, str):
                    out.append(clean_text(t))
                elif b.get("type") in ("image", "input_image", "image_url"):
                    out.append("[image]")
            elif isinstance(b, str):
                out.append(clean_text(b))
        return "\n".join(out)
    return ""


def _require_role(data: Mapping[str, Any], allowed: Mapping[str, str], fmt: str) -> str:
    role = data.get("role")
    if not isinstance(role, str) or role not in allowed:
        raise UnknownShapeError(
            f"{fmt} message has role {role!r}; expected one of {', '.join(allowed)}"
        )
    return allowed[role]


def _content_parts(
    data: Mapping[str, Any],
    block: Callable[[Any], NormalizedPart],
    *,
    fmt: str,
    key: str = "content",
    scalar_type: str = "text",
) -> tuple[list[NormalizedPart], dict[str, str]]:
    """Parts for a ``content``-like key that holds a string or a list of blocks."""
    if key not in data:
        return [], {}
    value = data[key]
    if isinstance(value, str):
        text = clean_text(value)
        part = NormalizedPart(slot=key, type=scalar_type, text=text, raw_is_text=text == value)
        if not part.raw_is_text:
            part.raw = value
        if scalar_type == "tool_result":
            part.tool_output = text
        return [part], {key: SCALAR}
    if isinstance(value, list):
        parts = []
        for raw in value:
            p = block(raw)
            p.slot = key
            parts.append(p)
        return parts, {key: LIST}
    if value is None:
        return [], {}
    raise UnknownShapeError(
        f"{fmt} message '{key}' must be a string, a list of blocks or null, "
        f"not {type(value).__name__}"
    )


def _generic_block(raw: Any) -> NormalizedPart:
    """A block whose type lossless does not model: kept whole, its text searchable."""
    text = None
    if isinstance(raw, Mapping):
        t = raw.get("text")
        text = clean_text(t) if isinstance(t, str) else None
    elif isinstance(raw, str):
        text = clean_text(raw)
    return NormalizedPart(slot="", type="other", text=text, raw=raw)


#: Simple block kinds per format: block type → (part type, key holding its text, if any).
BlockTable = Mapping[str, tuple[str, str | None]]


def _table_block(raw: Any, table: BlockTable) -> NormalizedPart | None:
    """The part for a block whose kind the table knows; ``None`` for anything else."""
    if not isinstance(raw, Mapping):
        return _generic_block(raw)
    kind = raw.get("type")
    entry = table.get(kind) if isinstance(kind, str) else None
    if entry is None:
        return None
    part_type, text_key = entry
    text = _str(raw.get(text_key)) if text_key else None
    return NormalizedPart(slot="", type=part_type, text=text, raw=raw)


# OpenAI Chat Completions -------------------------------------------------------------------


_CHAT_BLOCKS: BlockTable = {
    "text": ("text", "text"),
    "refusal": ("refusal", "refusal"),
    "image_url": ("image", None),
    "input_audio": ("audio", None),
    "file": ("file", None),
}


def _chat_block(raw: Any) -> NormalizedPart:
    return _table_block(raw, _CHAT_BLOCKS) or _generic_block(raw)


def _chat_tool_call(raw: Any) -> NormalizedPart:
    if isinstance(raw, Mapping):
        fn = raw.get("function") if isinstance(raw.get("function"), Mapping) else None
        custom = raw.get("custom") if isinstance(raw.get("custom"), Mapping) else None
        spec = fn or custom or {}
        args = spec.get("arguments", spec.get("input"))
        return NormalizedPart(
            slot="tool_calls",
            type="tool_call",
            tool_call_id=_str(raw.get("id")),
            tool_name=_str(spec.get("name")),
            tool_input=_parse_args(args),
            raw=raw,
        )
    return _generic_block(raw)


def _normalize_openai_chat(data: Mapping[str, Any]) -> NormalizedMessage:
    role = _require_role(data, _CHAT_ROLES, "OpenAI chat")
    is_tool = role == "tool"
    parts, slots = _content_parts(
        data, _chat_block, fmt="OpenAI chat", scalar_type="tool_result" if is_tool else "text"
    )
    if is_tool:
        call_id = _str(data.get("tool_call_id")) or _str(data.get("name"))
        for p in parts:
            p.tool_call_id = call_id
            p.tool_name = _str(data.get("name"))
            if p.type in ("text", "tool_result"):
                p.type = "tool_result"
                p.tool_output = p.text
    calls = data.get("tool_calls")
    if isinstance(calls, list):
        call_parts = [_chat_tool_call(c) for c in calls]
        for p in call_parts:
            p.slot = "tool_calls"
        parts += call_parts
        slots["tool_calls"] = LIST
    legacy = data.get("function_call")
    if isinstance(legacy, Mapping):
        parts.append(
            NormalizedPart(
                slot="function_call",
                type="tool_call",
                tool_name=_str(legacy.get("name")),
                tool_input=_parse_args(legacy.get("arguments")),
                raw=legacy,
            )
        )
        slots["function_call"] = SCALAR
    return NormalizedMessage(
        role=role,
        content=_join(parts),
        token_count=0,
        parts=parts,
        source_format="openai_chat",
        envelope=_envelope(data, slots),
    )


# OpenAI Responses --------------------------------------------------------------------------

_RESPONSES_ROLES = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}


_RESPONSES_BLOCKS: BlockTable = {
    **dict.fromkeys(("input_text", "output_text", "text"), ("text", "text")),
    **dict.fromkeys(("summary_text", "reasoning_text"), ("text", "text")),
    "refusal": ("refusal", "refusal"),
    "input_image": ("image", None),
    "input_file": ("file", None),
    "input_audio": ("audio", None),
}


def _responses_block(raw: Any) -> NormalizedPart:
    return _table_block(raw, _RESPONSES_BLOCKS) or _generic_block(raw)


def _normalize_openai_responses(data: Mapping[str, Any]) -> NormalizedMessage:
    kind = data.get("type")
    ext = _raw_id(data.get("id"))
    raw_call_id = _raw_id(data.get("call_id"))
    call_id = _str(raw_call_id)
    if kind in (None, "message"):
        role = _require_role(data, _RESPONSES_ROLES, "Responses message")
        parts, slots = _content_parts(data, _responses_block, fmt="Responses message")
        return NormalizedMessage(
            role=role,
            content=_join(parts),
            token_count=0,
            parts=parts,
            source_format="openai_responses",
            envelope=_envelope(data, slots),
        )
    if not isinstance(kind, str):
        raise UnknownShapeError("a Responses item needs a string 'type'")
    part = NormalizedPart(slot=WHOLE, type="other", raw=data)
    role = "assistant"
    if kind == "reasoning":
        texts = [_text_of_blocks(data.get(key)) for key in ("summary", "content") if data.get(key)]
        part.type = "reasoning"
        part.text = "\n".join(t for t in texts if t) or None
    elif kind.endswith("_output"):
        role = "tool"
        output = data.get("output")
        part.type = "tool_result"
        part.tool_call_id = call_id
        part.tool_output = dumps(output) if isinstance(output, Mapping) else _text_of_blocks(output)
        part.is_error = data.get("status") == "failed"
    elif kind.endswith("_call"):
        part.type = "tool_call"
        part.tool_call_id = call_id or _str(ext)
        part.tool_name = _str(data.get("name")) or clean_text(kind.removesuffix("_call"))
        raw_input = data.get("arguments", data.get("input", data.get("action")))
        part.tool_input = _parse_args(raw_input)
    else:
        part.text = _str(data.get("text"))
    return NormalizedMessage(
        role=role,
        # An item whose own fields say nothing in words (a tool search's output, ...) is
        # still searched and counted by the strings it holds.
        content=_join([part]) or _item_text(data),
        token_count=0,
        parts=[part],
        source_format="openai_responses",
        envelope={"f": {}, "s": {WHOLE: SCALAR}},
    )


# Anthropic Messages ------------------------------------------------------------------------

_ANTHROPIC_ROLES = {"user": "user", "assistant": "assistant", "system": "system"}


_ANTHROPIC_BLOCK_TABLE: BlockTable = {
    "text": ("text", "text"),
    "image": ("image", None),
    "document": ("document", None),
    "thinking": ("reasoning", "thinking"),
    "redacted_thinking": ("redacted_reasoning", None),
}


def _anthropic_block(raw: Any) -> NormalizedPart:
    simple = _table_block(raw, _ANTHROPIC_BLOCK_TABLE)
    if simple is not None:
        return simple
    kind = raw.get("type")
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        return NormalizedPart(
            slot="",
            type="tool_call",
            tool_call_id=_str(raw.get("id")),
            tool_name=_str(raw.get("name")),
            tool_input=raw.get("input"),
            raw=raw,
        )
    if isinstance(kind, str) and kind.endswith("tool_result"):
        return NormalizedPart(
            slot="",
            type="tool_result",
            tool_call_id=_str(raw.get("tool_use_id")),
            tool_output=_text_of_blocks(raw.get("content")),
            is_error=bool(raw.get("is_error", False)),
            raw=raw,
        )
    return _generic_block(raw)


def _normalize_anthropic(data: Mapping[str, Any]) -> NormalizedMessage:
    role = _require_role(data, _ANTHROPIC_ROLES, "Anthropic")
    parts, slots = _content_parts(data, _anthropic_block, fmt="Anthropic")
    if role == "user" and parts and all(p.type == "tool_result" for p in parts):
        role = "tool"
    return NormalizedMessage(
        role=role,
        content=_join(parts),
        token_count=0,
        parts=parts,
        source_format="anthropic",
        envelope=_envelope(data, slots),
    )


# OpenClaw / pi session messages ------------------------------------------------------------

_OPENCLAW_ROLE_MAP = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "toolResult": "tool",
    "bashExecution": "user",
    "custom": "user",
    "hookMessage": "user",
}


_OPENCLAW_BLOCK_TABLE: BlockTable = {
    "text": ("text", "text"),
    "thinking": ("reasoning", "thinking"),
    "image": ("image", None),
}


def _openclaw_block(raw: Any) -> NormalizedPart:
    simple = _table_block(raw, _OPENCLAW_BLOCK_TABLE)
    if simple is not None:
        return simple
    kind = raw.get("type")
    if kind == "toolCall":
        return NormalizedPart(
            slot="",
            type="tool_call",
            tool_call_id=_str(raw.get("id")),
            tool_name=_str(raw.get("name")),
            tool_input=raw.get("arguments"),
            raw=raw,
        )
    return _generic_block(raw)


def _normalize_openclaw(data: Mapping[str, Any]) -> NormalizedMessage:
    role = _require_role(data, _OPENCLAW_ROLE_MAP, "OpenClaw")
    source_role = data.get("role")
    parts, slots = _content_parts(data, _openclaw_block, fmt="OpenClaw")
    if source_role == "toolResult":
        for p in parts:
            p.tool_call_id = _str(data.get("toolCallId"))
            p.tool_name = _str(data.get("toolName"))
            p.is_error = bool(data.get("isError", False))
            if p.type == "text":
                p.type = "tool_result"
                p.tool_output = p.text
    elif source_role == "bashExecution":
        command = _str(data.get("command")) or ""
        output = _str(data.get("output")) or ""
        parts = [
            NormalizedPart(
                slot=WHOLE,
                type="tool_result",
                tool_name="bash",
                tool_input={"command": command},
                tool_output=f"$ {command}\n{output}".rstrip(),
                is_error=data.get("exitCode") not in (0, None),
                raw=data,
            )
        ]
        return NormalizedMessage(
            role=role,
            content=_join(parts),
            token_count=0,
            parts=parts,
            source_format="openclaw",
            envelope={"f": {}, "s": {WHOLE: SCALAR}},
            created_at=parse_ts(data.get("timestamp")),
        )
    return NormalizedMessage(
        role=role,
        content=_join(parts),
        token_count=0,
        parts=parts,
        source_format="openclaw",
        envelope=_envelope(data, slots),
        created_at=parse_ts(data.get("timestamp")),
    )


# The project's own Message -----------------------------------------------------------------


_MESSAGE_KEYS = frozenset({"role", "content", "parts", "external_id", "created_at", "metadata"})


def _normalize_lossless(data: Any) -> NormalizedMessage:
    if isinstance(data, Mapping):
        extra = set(data) - _MESSAGE_KEYS
        if extra:
            raise UnknownShapeError(
                f"a lossless Message has no keys {', '.join(sorted(map(str, extra)))}; "
                f"it has {', '.join(sorted(_MESSAGE_KEYS))} (put anything else in metadata)"
            )
        try:
            data = Message.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnknownShapeError(f"not a lossless Message: {exc}") from exc
    if not isinstance(data, Message):
        raise UnknownShapeError("format 'lossless' takes a lossless.Message")
    if data.role not in ROLES:
        raise UnknownShapeError(
            f"lossless Message has role {data.role!r}; expected one of {', '.join(ROLES)}"
        )
    if not isinstance(data.content, str):
        raise UnknownShapeError("lossless Message content must be a string")
    for p in data.parts:
        if not isinstance(p, Part) or not isinstance(p.type, str):
            raise UnknownShapeError(
                f"lossless Message parts must be lossless.Part values with a string type, not {p!r}"
            )
    parts = [
        NormalizedPart(
            slot="parts",
            type=clean_text(p.type),
            text=_str(p.text),
            tool_call_id=_str(p.tool_call_id),
            tool_name=_str(p.tool_name),
            tool_input=p.tool_input,
            tool_output=_str(p.tool_output),
            is_error=p.is_error,
            raw=p.to_dict(),
        )
        for p in data.parts
    ]
    content = clean_text(data.content)
    payload = data.to_dict()
    slots = {"parts": LIST}
    return NormalizedMessage(
        role=data.role,
        content=content if content or not parts else _join(parts),
        token_count=0,
        parts=parts,
        source_format="lossless",
        envelope=_envelope(payload, slots),
        external_id=data.external_id,
        created_at=data.created_at,
    )


# Items lossless does not know -------------------------------------------------------------

#: Roles of any supported shape, for an unknown item that names one.
_ANY_ROLE = {**_CHAT_ROLES, **_OPENCLAW_ROLE_MAP}
#: Keys of an unknown item whose strings are labels, not text.
_LABEL_KEYS = frozenset({"type", "id", "call_id", "role", "status", "object", "signature"})
_warned: set[str] = set()


def _keeps_as_unknown(data: Any) -> bool:
    """An item that names a type or a role: kept verbatim when its shape does not fit."""
    return isinstance(data, Mapping) and (
        isinstance(data.get("type"), str) or isinstance(data.get("role"), str)
    )


def _loose_text(value: Any, out: list[str], depth: int = 0) -> None:
    """The strings of an unknown item (labels left out), depth first, for search and tokens."""
    if depth > 32:
        return
    if isinstance(value, str):
        if value:
            out.append(clean_text(value))
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            if key not in _LABEL_KEYS:
                _loose_text(inner, out, depth + 1)
    elif isinstance(value, list):
        for inner in value:
            _loose_text(inner, out, depth + 1)


def _item_text(data: Mapping[str, Any]) -> str:
    """Every string an item holds, labels left out, one per line."""
    texts: list[str] = []
    _loose_text(data, texts)
    return "\n".join(texts)


def unknown_kind(data: Mapping[str, Any]) -> str:
    """How an unknown item names itself: its type, else its role."""
    kind = data.get("type")
    return kind if isinstance(kind, str) else f"role {data.get('role')}"


def _normalize_unknown(data: Mapping[str, Any]) -> NormalizedMessage:
    """An item of a type or role lossless does not know: stored whole (read back exactly),
    its strings as its plain text; a warning names the kind once per process."""
    kind = unknown_kind(data)
    if kind not in _warned:
        _warned.add(kind)
        logger.warning(
            "stored an item of a kind lossless does not know (%s) verbatim; it reads back"
            " exactly and its text is searchable",
            clean_text(kind)[:80],
        )
    role = data.get("role")
    text = _item_text(data)
    part = NormalizedPart(slot=WHOLE, type="other", text=text or None, raw=data)
    return NormalizedMessage(
        role=_ANY_ROLE.get(role, "assistant") if isinstance(role, str) else "assistant",
        content=text or dumps(data),
        token_count=0,
        parts=[part],
        source_format="unknown",
        envelope={"f": {}, "s": {WHOLE: SCALAR}},
    )


_NORMALIZERS: dict[str, Callable[[Any], NormalizedMessage]] = {
    "openai_chat": _normalize_openai_chat,
    "openai_responses": _normalize_openai_responses,
    "anthropic": _normalize_anthropic,
    "openclaw": _normalize_openclaw,
    "lossless": _normalize_lossless,
    "unknown": _normalize_unknown,
}
