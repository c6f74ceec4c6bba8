"""Pydantic AI's ``ModelMessage``s, as its own ``ModelMessagesTypeAdapter`` dumps them
(``mode="json"``): a request (``kind: "request"``: system prompt, user prompt, tool return and
retry parts) or a response (``kind: "response"``: text, thinking and tool call parts). The whole
dict is kept as it came (read back exactly); tool calls and tool returns are also parts of their
own, so they pair and land in the tool-execution log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...codec import SCALAR, WHOLE, clean_text, dumps
from ...errors import UnknownShapeError
from ...model import NormalizedMessage, NormalizedPart
from .blocks import clean_str, join_text

__all__ = ["is_pydantic_ai", "normalize"]

_KINDS = ("request", "response")


def is_pydantic_ai(message: Mapping[str, Any]) -> bool:
    """A request or response with a list of parts that each name their ``part_kind``."""
    parts = message.get("parts")
    return (
        message.get("kind") in _KINDS
        and isinstance(parts, list)
        and all(isinstance(p, Mapping) and isinstance(p.get("part_kind"), str) for p in parts)
    )


def _content(value: Any) -> str:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return clean_text("\n".join(v for v in value if isinstance(v, str)))
    return "" if value is None else clean_text(dumps(value))


def normalize(data: Mapping[str, Any]) -> NormalizedMessage:
    """A Pydantic AI message dict (see the module docstring)."""
    if not is_pydantic_ai(data):
        raise UnknownShapeError(
            "a Pydantic AI message is {'kind': 'request'|'response', 'parts': [...]}"
            " (ModelMessagesTypeAdapter.dump_python(..., mode='json'))"
        )
    request = data["kind"] == "request"
    parts: list[NormalizedPart] = []
    texts: list[str] = []
    for raw in data["parts"]:
        kind = raw["part_kind"]
        if kind == "tool-call":
            parts.append(
                NormalizedPart(
                    slot="parts",
                    type="tool_call",
                    tool_call_id=clean_str(raw.get("tool_call_id")),
                    tool_name=clean_str(raw.get("tool_name")),
                    tool_input=raw.get("args"),
                    raw=dict(raw),
                )
            )
        elif kind in ("tool-return", "retry-prompt") and raw.get("tool_call_id"):
            output = _content(raw.get("content"))
            parts.append(
                NormalizedPart(
                    slot="parts",
                    type="tool_result",
                    tool_call_id=clean_str(raw.get("tool_call_id")),
                    tool_name=clean_str(raw.get("tool_name")),
                    tool_output=output,
                    is_error=kind == "retry-prompt",
                    raw=dict(raw),
                )
            )
        elif kind in ("user-prompt", "system-prompt", "text", "thinking", "retry-prompt"):
            texts.append(_content(raw.get("content")))
    results = [p for p in parts if p.type == "tool_result"]
    if request:
        only_results = bool(results) and len(results) == len(data["parts"])
        role = "tool" if only_results else "system" if _all_system(data["parts"]) else "user"
    else:
        role = "assistant"
    text = "\n".join(t for t in texts if t)
    whole = NormalizedPart(slot=WHOLE, type="text", text=text or None, raw=dict(data))
    everything = [whole, *parts]
    return NormalizedMessage(
        role=role,
        content=join_text(everything),
        token_count=0,
        parts=everything,
        source_format="pydantic_ai",
        envelope={"f": {}, "s": {WHOLE: SCALAR}},
    )


def _all_system(parts: list[Any]) -> bool:
    return bool(parts) and all(p.get("part_kind") == "system-prompt" for p in parts)
