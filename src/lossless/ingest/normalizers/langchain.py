"""LangChain messages, in LangChain's own serialized form (``message_to_dict``: ``{"type":
"human" | "ai" | "system" | "tool" | ..., "data": {...}}``), which ``messages_from_dict`` turns
back into the same objects. The whole dict is kept as it came (read back exactly: content
blocks, ``additional_kwargs``, ``response_metadata``, ids, usage); its tool calls and a tool
message's result are also parts of their own, so tool calls pair with their results and land in
the tool-execution log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...codec import SCALAR, WHOLE, clean_text
from ...errors import UnknownShapeError
from ...model import NormalizedMessage, NormalizedPart
from .blocks import clean_str, join_text

__all__ = ["ROLES", "is_langchain", "normalize"]

#: LangChain message types → stored roles.
ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
    "developer": "system",
    "HumanMessageChunk": "user",
    "AIMessageChunk": "assistant",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
    "FunctionMessageChunk": "tool",
}
_CHAT_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant"}


def is_langchain(message: Mapping[str, Any]) -> bool:
    """``{"type": <a LangChain message type>, "data": {...}}`` and nothing else."""
    kind = message.get("type")
    return (
        set(message) == {"type", "data"}
        and isinstance(message.get("data"), Mapping)
        and (kind in ROLES or kind in ("chat", "ChatMessageChunk"))
    )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return clean_text(content)
    if isinstance(content, list):
        texts = []
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                texts.append(block["text"])
        return clean_text("\n".join(texts))
    return ""


def normalize(data: Mapping[str, Any]) -> NormalizedMessage:
    """A LangChain message dict (see the module docstring)."""
    if not is_langchain(data):
        raise UnknownShapeError(
            "a LangChain message is {'type': 'human'|'ai'|'system'|'tool'|..., 'data': {...}}"
            " (langchain_core.messages.message_to_dict)"
        )
    kind = data["type"]
    body: Mapping[str, Any] = data["data"]
    role = ROLES.get(kind) or _CHAT_ROLES.get(str(body.get("role")), "user")
    text = _text(body.get("content"))
    whole = NormalizedPart(slot=WHOLE, type="text", text=text or None, raw=dict(data))
    parts = [whole]
    if role == "tool":
        whole.type = "tool_result"
        whole.tool_call_id = clean_str(body.get("tool_call_id"))
        whole.tool_name = clean_str(body.get("name"))
        whole.tool_output = text
        whole.is_error = body.get("status") == "error"
    for call in body.get("tool_calls") or []:
        if isinstance(call, Mapping):
            parts.append(
                NormalizedPart(
                    slot="tool_calls",
                    type="tool_call",
                    tool_call_id=clean_str(call.get("id")),
                    tool_name=clean_str(call.get("name")),
                    tool_input=call.get("args"),
                    raw=dict(call),
                )
            )
    return NormalizedMessage(
        role=role,
        content=join_text(parts),
        token_count=0,
        parts=parts,
        source_format="langchain",
        envelope={"f": {}, "s": {WHOLE: SCALAR}},
    )
