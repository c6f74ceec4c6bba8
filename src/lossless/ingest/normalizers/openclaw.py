"""The messages inside OpenClaw/pi session files (``toolCall`` blocks, the ``toolResult`` and
``bashExecution`` roles)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...codec import SCALAR, WHOLE
from ...model import NormalizedMessage, NormalizedPart
from ...timestamps import parse_ts
from .blocks import (
    BlockTable,
    clean_str,
    content_parts,
    envelope,
    generic_block,
    join_text,
    require_role,
    table_block,
)

#: OpenClaw roles → stored roles.
ROLES = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "toolResult": "tool",
    "bashExecution": "user",
    "custom": "user",
    "hookMessage": "user",
}

_BLOCKS: BlockTable = {
    "text": ("text", "text"),
    "thinking": ("reasoning", "thinking"),
    "image": ("image", None),
}


def _block(raw: Any) -> NormalizedPart:
    simple = table_block(raw, _BLOCKS)
    if simple is not None:
        return simple
    kind = raw.get("type")
    if kind == "toolCall":
        return NormalizedPart(
            slot="",
            type="tool_call",
            tool_call_id=clean_str(raw.get("id")),
            tool_name=clean_str(raw.get("name")),
            tool_input=raw.get("arguments"),
            raw=raw,
        )
    return generic_block(raw)


def normalize(data: Mapping[str, Any]) -> NormalizedMessage:
    """An OpenClaw message; a bash execution is one tool result kept whole."""
    role = require_role(data, ROLES, "OpenClaw")
    source_role = data.get("role")
    parts, slots = content_parts(data, _block, fmt="OpenClaw")
    if source_role == "toolResult":
        for p in parts:
            p.tool_call_id = clean_str(data.get("toolCallId"))
            p.tool_name = clean_str(data.get("toolName"))
            p.is_error = bool(data.get("isError", False))
            if p.type == "text":
                p.type = "tool_result"
                p.tool_output = p.text
    elif source_role == "bashExecution":
        command = clean_str(data.get("command")) or ""
        output = clean_str(data.get("output")) or ""
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
            content=join_text(parts),
            token_count=0,
            parts=parts,
            source_format="openclaw",
            envelope={"f": {}, "s": {WHOLE: SCALAR}},
            created_at=parse_ts(data.get("timestamp")),
        )
    return NormalizedMessage(
        role=role,
        content=join_text(parts),
        token_count=0,
        parts=parts,
        source_format="openclaw",
        envelope=envelope(data, slots),
        created_at=parse_ts(data.get("timestamp")),
    )
