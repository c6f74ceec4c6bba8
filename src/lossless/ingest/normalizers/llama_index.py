"""LlamaIndex ``ChatMessage``s, as their own ``model_dump(mode="json")`` writes them: a
``role``, ``blocks`` (``{"block_type": "text", "text": ...}``, tool calls as
``{"block_type": "tool_call", ...}``, images, ...) and ``additional_kwargs`` (where older
OpenAI-style ``tool_calls`` and a tool message's ``tool_call_id`` live). The whole dict is kept
as it came (``ChatMessage.model_validate`` reads it back equal); tool calls and a tool
message's result are also parts of their own, so they pair and land in the tool-execution
log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...codec import SCALAR, WHOLE, clean_text, loads
from ...errors import UnknownShapeError
from ...model import NormalizedMessage, NormalizedPart
from .blocks import clean_str, join_text

__all__ = ["ROLES", "is_llama_index", "normalize"]

#: LlamaIndex roles → stored roles.
ROLES = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
    "chatbot": "assistant",
    "model": "assistant",
}


def is_llama_index(message: Mapping[str, Any]) -> bool:
    """A role and a list of blocks that each name their ``block_type``."""
    blocks = message.get("blocks")
    return (
        isinstance(message.get("role"), str)
        and isinstance(blocks, list)
        and all(isinstance(b, Mapping) and isinstance(b.get("block_type"), str) for b in blocks)
        and "content" not in message
    )


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return loads(raw)
        except ValueError:
            return raw
    return raw


def normalize(data: Mapping[str, Any]) -> NormalizedMessage:
    """A LlamaIndex chat message dict (see the module docstring)."""
    if not is_llama_index(data):
        raise UnknownShapeError(
            "a LlamaIndex message is {'role': ..., 'blocks': [{'block_type': ...}], ...}"
            " (ChatMessage.model_dump(mode='json'))"
        )
    role = ROLES.get(data["role"], "user")
    extra = data.get("additional_kwargs")
    extra = extra if isinstance(extra, Mapping) else {}
    text = clean_text(
        "\n".join(
            b["text"]
            for b in data["blocks"]
            if b.get("block_type") == "text" and isinstance(b.get("text"), str)
        )
    )
    whole = NormalizedPart(slot=WHOLE, type="text", text=text or None, raw=dict(data))
    parts = [whole]
    if role == "tool":
        whole.type = "tool_result"
        whole.tool_call_id = clean_str(extra.get("tool_call_id"))
        whole.tool_name = clean_str(extra.get("name"))
        whole.tool_output = text
    for block in data["blocks"]:
        if block.get("block_type") == "tool_call":
            parts.append(
                NormalizedPart(
                    slot="tool_calls",
                    type="tool_call",
                    tool_call_id=clean_str(block.get("tool_call_id")),
                    tool_name=clean_str(block.get("tool_name")),
                    tool_input=_arguments(block.get("tool_kwargs")),
                    raw=dict(block),
                )
            )
    for call in extra.get("tool_calls") or []:
        if not isinstance(call, Mapping):
            continue
        found = call.get("function")
        function: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        parts.append(
            NormalizedPart(
                slot="tool_calls",
                type="tool_call",
                tool_call_id=clean_str(call.get("id") or call.get("tool_id")),
                tool_name=clean_str(function.get("name") or call.get("tool_name")),
                tool_input=_arguments(function.get("arguments", call.get("tool_kwargs"))),
                raw=dict(call),
            )
        )
    return NormalizedMessage(
        role=role,
        content=join_text(parts),
        token_count=0,
        parts=parts,
        source_format="llama_index",
        envelope={"f": {}, "s": {WHOLE: SCALAR}},
    )
