"""An import's progress: one scale over a file's three steps (reading, storing, indexing),
so a bar over it only goes forward and its time left is an estimate of the whole."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["INDEX_PERCENT", "SCAN_PERCENT", "Progress", "forward", "indexing", "read_so_far"]

#: The shares of an import's time its three steps over a file take: a first pass reading what
#: it holds, a second storing it, then the search indexes that large batches leave for the
#: end (their trigram entries). Measured 12% / 74% / 14% for a 38 MB
#: transcript (12,000 turns). Progress counts a file's bytes through the three on one
#: scale, so it only goes forward and its remaining time is an estimate of the whole.
SCAN_PERCENT = 12
INDEX_PERCENT = 14

#: ``progress(bytes_done, bytes_total)`` — called while a file is read, stored and indexed
#: (see :data:`SCAN_PERCENT`); it never goes back.
Progress = Callable[[int, int], None]


def read_so_far(position: int, start: int, size: int, *, storing: bool) -> int:
    """Where a pass at byte *position* of a file read from *start* is, on the one scale both
    passes share (:data:`SCAN_PERCENT`): a byte position between *start* and *size*."""
    span = size - start
    done = position - start
    if storing:
        stored = 100 - SCAN_PERCENT - INDEX_PERCENT
        return start + (span * SCAN_PERCENT + done * stored) // 100
    return start + done * SCAN_PERCENT // 100


def forward(progress: Progress | None) -> Progress | None:
    """*progress* that is never told less than it was told already (a file's second lane is
    read again from its start)."""
    if progress is None:
        return None
    most = 0

    def forward(done: int, total: int) -> None:
        nonlocal most
        most = max(most, done)
        progress(most, total)

    return forward


def indexing(progress: Progress | None, start: int, size: int) -> Progress | None:
    """Progress for the indexes' catch-up after a file's batches (rows done of rows behind),
    on the file's scale: its last :data:`INDEX_PERCENT`."""
    if progress is None:
        return None
    base = size - (size - start) * INDEX_PERCENT // 100

    def indexed(rows: int, behind: int) -> None:
        progress(base + (size - base) * rows // max(behind, 1), size)

    return indexed
