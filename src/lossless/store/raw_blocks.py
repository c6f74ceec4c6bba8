"""A block as it came (``message_parts.raw``), stored without the text the part's own columns
hold already.

A tool result's block carries its output, a text block its text, a tool call its input: the
part's ``text``, ``tool_output`` and ``tool_input`` columns hold the same values, so storing
the block whole would store them twice. :func:`pack` puts a reference where such a value
was (``{"\\u0000": "text"}``) and wraps the block as ``{"\\u0000raw": ..., "\\u0000v": 1}``;
:func:`unpack` puts the values back from the columns. A block is packed only when unpacking
gives it back exactly (checked on each write), and never when it holds a ``"\\u0000"`` key
itself; a block that happens to look like the wrapper is stored wrapped with ``"\\u0000v":
0`` (nothing to put back), so every stored form reads back as the block that came.
"""

from __future__ import annotations

from typing import Any

from ..codec import dumps, loads

__all__ = ["pack", "unpack"]

_REF = "\u0000"
_RAW = "\u0000raw"
_VERSION = "\u0000v"
#: Values shorter than this are left in place: a reference would save nothing.
_SHORTEST = 24


def _columns(text: str | None, tool_output: str | None, tool_input: str | None) -> dict[str, Any]:
    return {"text": text, "tool_output": tool_output, "tool_input": tool_input}


def pack(raw: Any, text: str | None, tool_output: str | None, tool_input: str | None) -> str:
    """The stored form of the block *raw* of a part whose columns hold *text*,
    *tool_output* and *tool_input* (the input as stored: JSON text)."""
    plain = dumps(raw)
    wrapper_like = isinstance(raw, dict) and set(raw) == {_RAW, _VERSION}
    if _holds_ref_key(raw):
        return dumps({_RAW: raw, _VERSION: 0}) if wrapper_like else plain
    columns = _columns(text, tool_output, tool_input)
    replaced = [False]
    packed = _replace(raw, columns, replaced)
    if not replaced[0]:
        return dumps({_RAW: raw, _VERSION: 0}) if wrapper_like else plain
    stored = dumps({_RAW: packed, _VERSION: 1})
    # Only values equal to a column were replaced (the input by its exact JSON), so putting
    # them back gives the block; checked all the same, as objects (no second serializing).
    if len(stored) >= len(plain) or _restore(packed, columns) != raw:
        return dumps({_RAW: raw, _VERSION: 0}) if wrapper_like else plain
    return stored


def unpack(stored: Any, text: str | None, tool_output: str | None, tool_input: str | None) -> Any:
    """The block a stored form (loaded) stands for, its values back from the columns."""
    if not (isinstance(stored, dict) and set(stored) == {_RAW, _VERSION}):
        return stored
    if stored[_VERSION] != 1:
        return stored[_RAW]
    return _restore(stored[_RAW], _columns(text, tool_output, tool_input))


def _holds_ref_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(k.startswith(_REF) or _holds_ref_key(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_ref_key(v) for v in value)
    return False


def _replace(value: Any, columns: dict[str, Any], replaced: list[bool]) -> Any:
    for name, column in columns.items():
        if column is None or len(column) < _SHORTEST:
            continue
        same = (
            value == column
            if isinstance(value, str) and name != "tool_input"
            else isinstance(value, dict | list) and name == "tool_input" and dumps(value) == column
        )
        if same:
            replaced[0] = True
            return {_REF: name}
    if isinstance(value, dict):
        return {k: _replace(v, columns, replaced) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, columns, replaced) for v in value]
    return value


def _restore(value: Any, columns: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        if set(value) == {_REF}:
            name = value[_REF]
            column = columns[name]
            return loads(column) if name == "tool_input" else column
        return {k: _restore(v, columns) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, columns) for v in value]
    return value
