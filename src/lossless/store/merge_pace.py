"""When the SQLite store's thread may begin a full-text merge step.

A merge step holds the database's one write lock for as long as it runs, and FTS5 cannot stop
one once begun: it merges a word's whole posting list at once, so on a store of a million
messages one step of the context index can take a few hundred milliseconds. A host's turn that
arrives during such a step waits for it. A host writes in bursts (a turn) with pauses between
them (the model's time, the user's); the thread merges in the pauses. :class:`MergePace`
remembers the recent pauses and the recent steps of each index, and lets a step begin only
when it should be done before the next write is due — a pause of the usual length, judged
from the shorter pauses of late.
"""

from __future__ import annotations

import threading
from collections import deque

#: A quiet moment shorter than this between two commits is the same burst (one turn's
#: several writes), not a pause.
BURST_SECONDS = 0.02
#: How many pauses (and steps of each index) are remembered.
REMEMBERED = 8
#: The part of a usual pause a step may fill, counted from the pause's start.
SHARE = 0.8
#: Once the quiet has lasted this many usual pauses, the writes have stopped for now: steps
#: begin whatever their length.
IDLE_PAUSES = 2.0


class MergePace:
    """The recent rhythm of a store's writes and of its merge steps (times in seconds, from
    one monotonic clock the caller reads). The writers' threads and the store's thread share
    one; each method holds its lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_write: float | None = None
        self._pauses: deque[float] = deque(maxlen=REMEMBERED)
        self._steps: dict[str, deque[float]] = {}
        self._stepped: set[str] = set()  # the indexes that took a step in this pause

    def wrote(self, now: float) -> None:
        """A commit at *now*: a pause ends if the quiet before it was long enough."""
        with self._lock:
            if self._last_write is not None and now - self._last_write >= BURST_SECONDS:
                self._pauses.append(now - self._last_write)
            self._last_write = now
            self._stepped.clear()

    def stepped(self, index: str, seconds: float) -> None:
        """A merge step of *index* took *seconds*."""
        with self._lock:
            self._steps.setdefault(index, deque(maxlen=REMEMBERED)).append(seconds)
            self._stepped.add(index)

    def usual_pause(self) -> float | None:
        """A pause most recent ones were at least as long as (their lower quartile), or
        ``None`` before two were seen."""
        with self._lock:
            pauses = sorted(self._pauses)
        return pauses[len(pauses) // 4] if len(pauses) >= 2 else None

    def may_begin(self, index: str, now: float) -> bool:
        """Whether a merge step of *index* may begin at *now*: it is expected (as long as the
        longest of its recent steps) to end within :data:`SHARE` of a usual pause; or the
        writes have stopped (:data:`IDLE_PAUSES` usual pauses of quiet); or no step of it
        could ever fit and none of this index has run in this pause yet (one a pause for each
        index, so merging keeps up with the writes)."""
        pause = self.usual_pause()
        with self._lock:
            last, stepped = self._last_write, index in self._stepped
            expected = max(self._steps.get(index, ()), default=0.0)
        if pause is None or last is None:
            return True
        quiet, room = now - last, SHARE * pause
        if quiet >= IDLE_PAUSES * pause or quiet + expected <= room:
            return True
        # No pause holds it (a step begins once a burst has settled, BURST_SECONDS in)
        return expected > room - BURST_SECONDS and not stepped

    def idle_in(self, now: float) -> float | None:
        """Seconds until the writes count as stopped (when the steps held back may begin), or
        ``None`` when nothing is known of the pauses."""
        pause = self.usual_pause()
        with self._lock:
            last = self._last_write
        if pause is None or last is None:
            return None
        return max(0.0, last + IDLE_PAUSES * pause - now)
