"""How an FTS5 index is laid out in segments: read from its structure record, so the store's
index upkeep can tell a level nearing FTS5's own *crisis merge* (16 segments on one level,
merged whole inside the write that adds the 16th) before a writer meets it.

The record is the blob at ``id = 10`` of the index's ``<table>_data``: a 4-byte cookie, an
optional version marker, then varints — the number of levels and of segments, a write
counter, and for each level the segments being merged into it, its number of segments and
each segment's id and first and last page (five more varints each in the second version of
the record, SQLite 3.44 on).
"""

from __future__ import annotations

__all__ = ["STRUCTURE_ROWID", "segments_per_level"]

#: The row of ``<table>_data`` holding the structure record.
STRUCTURE_ROWID = 10
_V2_MARKER = b"\xff\x00\x00\x01"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint at *at*: its value and the offset after it (big-endian groups of seven
    bits, the high bit saying another byte follows; a ninth byte gives all eight bits)."""
    value = 0
    for n in range(8):
        byte = data[at + n]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + n + 1
    return (value << 8) | data[at + 8], at + 9


def segments_per_level(record: bytes) -> list[int]:
    """The number of segments on each level of the index whose structure record is *record*
    (level 0 first). Raises ``ValueError`` on a record this reader does not understand."""
    try:
        at = 4  # the cookie
        per_segment = 3
        if record[at : at + 4] == _V2_MARKER:
            at += 4
            per_segment = 8
        levels, at = _varint(record, at)
        _, at = _varint(record, at)  # segments in all
        _, at = _varint(record, at)  # the write counter
        counts = []
        for _level in range(levels):
            _, at = _varint(record, at)  # segments being merged into the level
            segments, at = _varint(record, at)
            for _ in range(segments * per_segment):
                _, at = _varint(record, at)
            counts.append(segments)
    except IndexError as exc:
        raise ValueError("an FTS5 structure record shorter than it says") from exc
    if at > len(record):
        raise ValueError("an FTS5 structure record shorter than it says")
    return counts
