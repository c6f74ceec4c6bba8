"""Anthropic Messages: text, image, document, tool_use, tool_result, thinking,
redacted_thinking and server tool blocks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...model import NormalizedMessage, NormalizedPart
from .blocks import (
    BlockTable,
    clean_str,
    content_parts,
    envelope,
    generic_block,
    join_text,
    require_role,
    table_block,
    text_of_blocks,
)

_ROLES = {"user": "user", "assistant": "assistant", "system": "system"}

_BLOCKS: BlockTable = {
    "text": ("text", "text"),
    "image": ("image", None),
    "document": ("document", None),
    "thinking": ("reasoning", "thinking"),
    "redacted_thinking": ("redacted_reasoning", None),
}


def _block(raw: Any) -> NormalizedPart:
    simple = table_block(raw, _BLOCKS)
    if simple is not None:
        return simple
    kind = raw.get("type")
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        return NormalizedPart(
            slot="",
            type="tool_call",
            tool_call_id=clean_str(raw.get("id")),
            tool_name=clean_str(raw.get("name")),
            tool_input=raw.get("input"),
            raw=raw,
        )
    if isinstance(kind, str) and kind.endswith("tool_result"):
        return NormalizedPart(
            slot="",
            type="tool_result",
            tool_call_id=clean_str(raw.get("tool_use_id")),
            tool_output=text_of_blocks(raw.get("content")),
            is_error=bool(raw.get("is_error", False)),
            raw=raw,
        )
    return generic_block(raw)


def normalize(data: Mapping[str, Any]) -> NormalizedMessage:
    """An Anthropic message; a user message of tool results only is stored as a tool one."""
    role = require_role(data, _ROLES, "Anthropic")
    parts, slots = content_parts(data, _block, fmt="Anthropic")
    if role == "user" and parts and all(p.type == "tool_result" for p in parts):
        role = "tool"
    return NormalizedMessage(
        role=role,
        content=join_text(parts),
        token_count=0,
        parts=parts,
        source_format="anthropic",
        envelope=envelope(data, slots),
    )
