"""A message's rows as the store reads them, turned into :class:`~lossless.model.StoredMessage`:
the one place the columns are read back, for the live tables and for an archive's lines
(:mod:`.archive` keeps the same columns), so both give the same message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model import StoredMessage, StoredPart
from . import packed_json, raw_blocks
from .core import _loads

__all__ = ["MSG_COLS", "PART_COLS", "message_from_row", "part_from_row"]

#: A message's columns, in the order :func:`message_from_row` reads them.
MSG_COLS = (
    "message_id, conversation_id, seq, role, content, token_count, created_at, external_id,"
    " source_format, envelope, metadata, host_meta, forgotten_at, archived_at"
)

#: A part's columns, in the order :func:`part_from_row` reads them.
PART_COLS = (
    "part_id, message_id, ordinal, slot, part_type, text, tool_call_id, tool_name, tool_input,"
    " tool_output, is_error, raw"
)


def part_from_row(p: Sequence[Any]) -> StoredPart:
    """A ``message_parts`` row (:data:`PART_COLS`) as a part, its block read back whole."""
    return StoredPart(
        part_id=p[0],
        message_id=p[1],
        ordinal=p[2],
        slot=p[3],
        type=p[4],
        text=p[5],
        tool_call_id=p[6],
        tool_name=p[7],
        tool_input=_loads(p[8]),
        tool_output=p[9],
        is_error=bool(p[10]),
        raw=p[5]
        if p[11] is None
        else raw_blocks.unpack(
            p[11], raw_blocks.Columns(p[5], p[9], p[8], p[6], p[7], bool(p[10]))
        ),
    )


def message_from_row(r: Sequence[Any], parts: Sequence[StoredPart]) -> StoredMessage:
    """A ``messages`` row (:data:`MSG_COLS`) and its parts as a message."""
    return StoredMessage(
        message_id=r[0],
        conversation_id=r[1],
        seq=r[2],
        role=r[3],
        content=r[4],
        token_count=r[5],
        created_at=r[6],
        external_id=r[7],
        source_format=r[8],
        envelope=None if r[9] is None else _loads(packed_json.unpack(r[9])),
        metadata=None if r[10] is None else _loads(packed_json.unpack(r[10])),
        parts=tuple(parts),
        host_meta=r[11],
        forgotten_at=r[12],
    )
