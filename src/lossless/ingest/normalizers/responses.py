"""OpenAI Responses items: messages, function calls and outputs, reasoning, hosted-tool calls."""

from __future__ import annotations

import json
import re
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
        part.is_error = data.get("status") == "failed" or _exited_badly(part.tool_output)
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


#: How Codex heads a command's output: ``Process exited with code N`` before ``Output:``.
_EXIT_LINE = re.compile(r"^Process exited with code (-?\d+)$", re.M)


def _exited_badly(output: str | None) -> bool:
    """Whether a tool's output says its command ended with a non-zero exit status: Codex's
    ``exec_command`` header (``Process exited with code 2``), or the older shell tool's JSON
    (``{"output": ..., "metadata": {"exit_code": 1}}``)."""
    if not output:
        return False
    head = output[: output.find("\nOutput:")] if "\nOutput:" in output[:400] else output[:400]
    found = _EXIT_LINE.search(head)
    if found is not None:
        return int(found.group(1)) != 0
    if output.startswith("{") and '"exit_code"' in output:
        try:
            meta = json.loads(output).get("metadata")
        except (ValueError, AttributeError):
            return False
        code = meta.get("exit_code") if isinstance(meta, dict) else None
        return isinstance(code, int) and code != 0
    return False
