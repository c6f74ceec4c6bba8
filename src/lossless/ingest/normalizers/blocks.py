"""What every format's normalizer shares: the envelope, content blocks → parts, plain text."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...codec import LIST, SCALAR, clean_text, dumps
from ...errors import UnknownShapeError
from ...model import NormalizedPart

#: Part types whose bytes are not text (an attachment: charged a flat token count).
ATTACHMENTS = frozenset({"image", "document", "audio", "file"})


def envelope(data: Mapping[str, Any], slots: Mapping[str, str]) -> dict[str, Any]:
    """Every key of *data*, the block-carrying ones (the *slots*) left as placeholders."""
    fields = {k: (None if k in slots else v) for k, v in data.items()}
    return {"f": fields, "s": dict(slots)}


def join_text(parts: Iterable[NormalizedPart]) -> str:
    """The plain text of a message: each part's text, one per line."""
    return "\n".join(t for t in (_part_text(p) for p in parts) if t)


def _part_text(part: NormalizedPart) -> str:
    if part.type == "tool_call":
        args = part.tool_input
        rendered = args if isinstance(args, str) else dumps(args) if args is not None else ""
        return clean_text(f"[tool call {part.tool_name or ''}] {rendered}".rstrip())
    if part.type == "tool_result":
        return part.tool_output or ""
    if part.type in ATTACHMENTS:
        return f"[{part.type}]"
    if part.type == "redacted_reasoning":
        return "[redacted reasoning]"
    return part.text or ""


def clean_str(value: Any) -> str | None:
    """*value* as storable text when it is a string, else ``None``."""
    return clean_text(value) if isinstance(value, str) else None


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _finite_float(token: str) -> float:
    number = float(token)
    if not math.isfinite(number):
        raise ValueError(f"{token} is not a finite number")
    return number


def parse_args(value: Any) -> Any:
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


def raw_id(value: Any) -> str | None:
    """An id as given (made storable by :func:`safe_id` when the message is finished)."""
    return value if isinstance(value, str) else None


def text_of_blocks(blocks: Any) -> str:
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


def require_role(data: Mapping[str, Any], allowed: Mapping[str, str], fmt: str) -> str:
    """The stored role for *data*'s role, which must be one of *allowed*."""
    role = data.get("role")
    if not isinstance(role, str) or role not in allowed:
        raise UnknownShapeError(
            f"{fmt} message has role {role!r}; expected one of {', '.join(allowed)}"
        )
    return allowed[role]


def content_parts(
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


def generic_block(raw: Any) -> NormalizedPart:
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


def table_block(raw: Any, table: BlockTable) -> NormalizedPart | None:
    """The part for a block whose kind the table knows; ``None`` for anything else."""
    if not isinstance(raw, Mapping):
        return generic_block(raw)
    kind = raw.get("type")
    entry = table.get(kind) if isinstance(kind, str) else None
    if entry is None:
        return None
    part_type, text_key = entry
    text = clean_str(raw.get(text_key)) if text_key else None
    return NormalizedPart(slot="", type=part_type, text=text, raw=raw)


#: Keys of an item whose strings are labels, not text.
_LABEL_KEYS = frozenset({"type", "id", "call_id", "role", "status", "object", "signature"})


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


def item_text(data: Mapping[str, Any]) -> str:
    """Every string an item holds, labels left out, one per line."""
    texts: list[str] = []
    _loose_text(data, texts)
    return "\n".join(texts)
