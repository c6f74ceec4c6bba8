"""OpenAI Responses items: messages, function calls and outputs, reasoning, hosted-tool calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...codec import SCALAR, WHOLE, clean_text, dumps
from ...errors import UnknownShapeError
from ...model import NormalizedMessage, NormalizedPart
from .blocks import (
    BlockTable,
    clean_str,
    content_parts,
    envelope,
    generic_block,
    item_text,
    join_text,
    parse_args,
    raw_id,
    require_role,
    table_block,
    text_of_blocks,
)

_ROLES = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}

_BLOCKS: BlockTable = {
    **dict.fromkeys(("input_text", "output_text", "text"), ("text", "text")),
    **dict.fromkeys(("summary_text", "reasoning_text"), ("text", "text")),
    "refusal": ("refusal", "refusal"),
    "input_image": ("image", None),
    "input_file": ("file", None),
    "input_audio": ("audio", None),
}


def _block(raw: Any) -> NormalizedPart:
    return table_block(raw, _BLOCKS) or generic_block(raw)


def normalize(data: Mapping[str, Any]) -> NormalizedMessage:
    """A Responses item: a message of content blocks, or one item kept whole as one part."""
    kind = data.get("type")
    ext = raw_id(data.get("id"))
    raw_call_id = raw_id(data.get("call_id"))
    call_id = clean_str(raw_call_id)
    if kind in (None, "message"):
        role = require_role(data, _ROLES, "Responses message")
        parts, slots = content_parts(data, _block, fmt="Responses message")
        return NormalizedMessage(
            role=role,
            content=join_text(parts),
            token_count=0,
            parts=parts,
            source_format="openai_responses",
            envelope=envelope(data, slots),
        )
    if not isinstance(kind, str):
        raise UnknownShapeError("a Responses item needs a string 'type'")
    part = NormalizedPart(slot=WHOLE, type="other", raw=data)
    role = "assistant"
    if kind == "reasoning":
        texts = [text_of_blocks(data.get(key)) for key in ("summary", "content") if data.get(key)]
        part.type = "reasoning"
        part.text = "\n".join(t for t in texts if t) or None
    elif kind.endswith("_output"):
        role = "tool"
        output = data.get("output")
        part.type = "tool_result"
        part.tool_call_id = call_id
        part.tool_output = dumps(output) if isinstance(output, Mapping) else text_of_blocks(output)
        part.is_error = data.get("status") == "failed"
    elif kind.endswith("_call"):
        part.type = "tool_call"
        part.tool_call_id = call_id or clean_str(ext)
        part.tool_name = clean_str(data.get("name")) or clean_text(kind.removesuffix("_call"))
        raw_input = data.get("arguments", data.get("input", data.get("action")))
        part.tool_input = parse_args(raw_input)
    else:
        part.text = clean_str(data.get("text"))
    return NormalizedMessage(
        role=role,
        # An item whose own fields say nothing in words (a tool search's output, ...) is
        # still searched and counted by the strings it holds.
        content=join_text([part]) or item_text(data),
        token_count=0,
        parts=[part],
        source_format="openai_responses",
        envelope={"f": {}, "s": {WHOLE: SCALAR}},
    )
