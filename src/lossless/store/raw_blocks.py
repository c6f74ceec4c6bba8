"""A block as it came (``message_parts.raw``), stored without the text the part's own columns
hold already.

A tool result's block carries its output, a text block its text, a tool call its input: the
part's ``text``, ``tool_output`` and ``tool_input`` columns hold the same values, so storing
the block whole would store them twice. :func:`pack` puts a reference where such a value
was (``{"\\u0000": "text"}``) and writes ``~r1~`` before the block's JSON; :func:`unpack`
puts the values back from the columns. A stored JSON text never starts with ``~``, so rows
written before (or left whole) read as they always did. A block is packed only when the
packed text is shorter and reads back as the block's own JSON (checked on each write), and
never when it holds a key starting with ``"\\u0000"`` itself (so every such key in a packed
block is a reference) or nests past what the check can walk.
"""

from __future__ import annotations

from typing import Any

from ..codec import dumps, loads

__all__ = ["pack", "unpack"]

_PREFIX = "~r1~"
_REF = "\u0000"
#: Values shorter than this are left in place: a reference would save nothing.
_SHORTEST = 24


def _columns(text: str | None, tool_output: str | None, tool_input: str | None) -> dict[str, Any]:
    return {"text": text, "tool_output": tool_output, "tool_input": tool_input}


def pack(raw: Any, text: str | None, tool_output: str | None, tool_input: str | None) -> str:
    """The stored text of the block *raw* of a part whose columns hold *text*,
    *tool_output* and *tool_input* (the input as stored: JSON text)."""
    plain = dumps(raw)
    columns = {
        name: value
        for name, value in _columns(text, tool_output, tool_input).items()
        if value is not None and len(value) >= _SHORTEST
    }
    if not columns:
        return plain
    try:
        if _holds_ref_key(raw):
            return plain
        replaced = [False]
        packed = _replace(raw, columns, replaced, 0)
        if not replaced[0]:
            return plain
        stored = _PREFIX + dumps(packed)
        if (
            len(stored) >= len(plain)
            or dumps(unpack(stored, text, tool_output, tool_input)) != plain
        ):
            return plain
    except RecursionError:  # a block nested too deep to walk: kept whole
        return plain
    return stored


def unpack(stored: str, text: str | None, tool_output: str | None, tool_input: str | None) -> Any:
    """The block a stored text stands for, its values put back from the columns."""
    if not stored.startswith(_PREFIX):
        return loads(stored)
    return _restore(loads(stored[len(_PREFIX) :]), _columns(text, tool_output, tool_input))


def _holds_ref_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(
            (isinstance(k, str) and k.startswith(_REF)) or _holds_ref_key(v)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return any(_holds_ref_key(v) for v in value)
    return False


def _replace(value: Any, columns: dict[str, Any], replaced: list[bool], depth: int) -> Any:
    if isinstance(value, str):
        for name in ("text", "tool_output"):
            if columns.get(name) == value:
                replaced[0] = True
                return {_REF: name}
        return value
    if isinstance(value, dict | list | tuple):
        # (a call's input is the block's own field: looked for near the top only, where
        # serializing a node to compare costs no more than the block itself)
        if depth <= 2 and "tool_input" in columns and dumps(value) == columns["tool_input"]:
            replaced[0] = True
            return {_REF: "tool_input"}
        if isinstance(value, dict):
            return {k: _replace(v, columns, replaced, depth + 1) for k, v in value.items()}
        return [_replace(v, columns, replaced, depth + 1) for v in value]
    return value


def _restore(value: Any, columns: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _REF in value:
            name = value[_REF]
            column = columns[name]
            return loads(column) if name == "tool_input" else column
        return {k: _restore(v, columns) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, columns) for v in value]
    return value
