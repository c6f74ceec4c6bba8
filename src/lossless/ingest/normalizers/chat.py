"""OpenAI Chat Completions messages (``tool_calls``, the ``tool`` role, list content)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...codec import LIST, SCALAR
from ...model import NormalizedMessage, NormalizedPart
from .blocks import (
    BlockTable,
    clean_str,
    content_parts,
    envelope,
    generic_block,
    join_text,
    parse_args,
    require_role,
    table_block,
)

#: Chat roles → stored roles.
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}

_BLOCKS: BlockTable = {
    "text": ("text", "text"),
    "refusal": ("refusal", "refusal"),
    "image_url": ("image", None),
    "input_audio": ("audio", None),
    "file": ("file", None),
}


def _block(raw: Any) -> NormalizedPart:
    return table_block(raw, _BLOCKS) or generic_block(raw)


def _tool_call(raw: Any) -> NormalizedPart:
    if isinstance(raw, Mapping):
        fn = raw.get("function") if isinstance(raw.get("function"), Mapping) else None
        custom = raw.get("custom") if isinstance(raw.get("custom"), Mapping) else None
        spec = fn or custom or {}
        args = spec.get("arguments", spec.get("input"))
        return NormalizedPart(
            slot="tool_calls",
            type="tool_call",
            tool_call_id=clean_str(raw.get("id")),
            tool_name=clean_str(spec.get("name")),
            tool_input=parse_args(args),
            raw=raw,
        )
    return generic_block(raw)


def normalize(data: Mapping[str, Any]) -> NormalizedMessage:
    """An OpenAI chat message: content blocks, tool calls and a legacy ``function_call``."""
    role = require_role(data, ROLES, "OpenAI chat")
    is_tool = role == "tool"
    parts, slots = content_parts(
        data, _block, fmt="OpenAI chat", scalar_type="tool_result" if is_tool else "text"
    )
    if is_tool:
        call_id = clean_str(data.get("tool_call_id")) or clean_str(data.get("name"))
        for p in parts:
            p.tool_call_id = call_id
            p.tool_name = clean_str(data.get("name"))
            if p.type in ("text", "tool_result"):
                p.type = "tool_result"
                p.tool_output = p.text
    calls = data.get("tool_calls")
    if isinstance(calls, list):
        call_parts = [_tool_call(c) for c in calls]
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
                tool_name=clean_str(legacy.get("name")),
                tool_input=parse_args(legacy.get("arguments")),
                raw=legacy,
            )
        )
        slots["function_call"] = SCALAR
    return NormalizedMessage(
        role=role,
        content=join_text(parts),
        token_count=0,
        parts=parts,
        source_format="openai_chat",
        envelope=envelope(data, slots),
    )
