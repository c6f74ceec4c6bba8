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

The commonest blocks are nothing but the part's columns in a fixed shape (a text block, a
tool call, a tool result): such a block is stored as ``~t1~`` and a letter naming the shape
(:data:`_SHAPES`), when the shape made from the columns is the block's own JSON exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..codec import dumps, loads

__all__ = ["Columns", "pack", "unpack"]

_PREFIX = "~r1~"
_SHAPED = "~t1~"
_REF = "\u0000"
#: Values shorter than this are left in place: a reference would save nothing.
_SHORTEST = 24


@dataclass(frozen=True)
class Columns:
    """A part's columns a block may repeat (the input as stored: JSON text)."""

    text: str | None = None
    tool_output: str | None = None
    tool_input: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


#: The blocks made of nothing but a part's columns, by the letter that names each when stored
#: (version 1: a letter's shape never changes once written). Each makes the block from the
#: columns, or ``None`` when a column it needs is missing.
_SHAPES: dict[str, Callable[[Columns], dict[str, Any] | None]] = {
    "t": lambda c: None if c.text is None else {"type": "text", "text": c.text},
    "u": lambda c: (
        None
        if c.tool_call_id is None or c.tool_name is None or c.tool_input is None
        else {
            "type": "tool_use",
            "id": c.tool_call_id,
            "name": c.tool_name,
            "input": loads(c.tool_input),
        }
    ),
    "r": lambda c: (
        None
        if c.tool_call_id is None or c.tool_output is None
        else {
            "type": "tool_result",
            "tool_use_id": c.tool_call_id,
            "content": c.tool_output,
            "is_error": c.is_error,
        }
    ),
    "s": lambda c: (
        None
        if c.tool_call_id is None or c.tool_output is None
        else {"type": "tool_result", "tool_use_id": c.tool_call_id, "content": c.tool_output}
    ),
}
#: The shapes worth trying for a block of each ``type``.
_SHAPES_OF = {"text": "t", "tool_use": "u", "tool_result": "rs"}


def _columns(c: Columns) -> dict[str, Any]:
    return {"text": c.text, "tool_output": c.tool_output, "tool_input": c.tool_input}


def pack(raw: Any, columns: Columns) -> str:
    """The stored text of the block *raw* of a part whose columns are *columns*."""
    plain = dumps(raw)
    kind = raw.get("type") if isinstance(raw, dict) else None
    if isinstance(kind, str) and _as_stored(columns):
        for letter in _SHAPES_OF.get(kind, ""):
            made = _SHAPES[letter](columns)
            if made is not None and dumps(made) == plain:
                return _SHAPED + letter
    return _referring(raw, plain, columns)


def _as_stored(c: Columns) -> bool:
    """Whether the columns read back as they are here (text as ``str``, the error flag as a
    ``bool``): a shape is made again from what the store gives back, so only then is it the
    block exactly (a part built by hand may carry an id as a number, the flag as 1)."""
    texts = (c.text, c.tool_output, c.tool_input, c.tool_call_id, c.tool_name)
    return all(v is None or type(v) is str for v in texts) and type(c.is_error) is bool


def _referring(raw: Any, plain: str, c: Columns) -> str:
    """*raw* with the columns' long values replaced by references, when that is shorter."""
    columns = {
        name: value
        for name, value in _columns(c).items()
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
        if len(stored) >= len(plain) or dumps(unpack(stored, c)) != plain:
            return plain
    except RecursionError:  # a block nested too deep to walk: kept whole
        return plain
    return stored


def unpack(stored: str, columns: Columns) -> Any:
    """The block a stored text stands for, its values put back from the part's columns."""
    if stored.startswith(_SHAPED):
        made = _SHAPES[stored[len(_SHAPED) :]](columns)
        if made is None:
            raise ValueError(f"a stored block {stored!r} whose part lacks the columns it names")
        return made
    if not stored.startswith(_PREFIX):
        return loads(stored)
    return _restore(loads(stored[len(_PREFIX) :]), _columns(columns))


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
