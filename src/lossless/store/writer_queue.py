"""The writers' queue of a SQLite store: each writer, in any process or thread, waits here for
its turn before ``BEGIN IMMEDIATE``."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: SQLite's busy handler alone
    fcntl = None  # type: ignore[assignment]

from ..errors import StoreError
from .core import BUSY_TIMEOUT_MS

__all__ = ["WriterQueue", "busy_hint"]


def busy_hint(error: str) -> str:
    return (
        ": another process held the write lock past the busy timeout; try again when it is"
        " done (a long import or compaction), or stop the process holding it"
        if "locked" in error
        else ""
    )


class WriterQueue:
    """The writers of one database, in every process and thread, wait for their turn here
    before ``BEGIN IMMEDIATE``: an exclusive ``flock`` on a file beside the database, which
    the kernel hands on as it is released. Left to SQLite's busy handler alone, a waiting
    writer sleeps and polls (for longer and longer), so whoever asks just as the lock comes
    free wins it, and with many writers some wait seconds while others go again and again.

    The wait is bounded by the busy timeout, as SQLite's is. Where files cannot be locked
    (no ``fcntl``, a file system without ``flock``) writers fall back to the busy handler;
    so do other programs writing the database, which never see the queue."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    @contextmanager
    def turn(self, timeout: float = BUSY_TIMEOUT_MS / 1000) -> Iterator[None]:
        """Hold this writer's turn for the block."""
        fd = self._take(timeout)
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)  # closing the file ends the lock

    def _open(self) -> int | None:
        """The queue's file, opened (each turn locks an open file of its own), or ``None``
        where files cannot be locked."""
        if self.path is None or fcntl is None:
            return None
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None

    def _take(self, timeout: float) -> int | None:
        fd = self._open()
        if fd is None:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        except OSError:
            os.close(fd)
            return None
        # Taken: wait in a thread (flock has no timeout), up to the busy timeout.
        state = {"held": False, "gave_up": False, "failed": False}
        came = threading.Event()
        guard = threading.Lock()

        def wait() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                state["failed"] = True
            with guard:
                if state["gave_up"]:
                    os.close(fd)
                    return
                state["held"] = not state["failed"]
                came.set()

        try:
            threading.Thread(target=wait, name="lossless-writer-turn", daemon=True).start()
        except RuntimeError:  # no new thread as the interpreter exits: the busy handler waits
            os.close(fd)
            return None
        came.wait(timeout)
        with guard:
            if state["held"]:
                return fd
            if came.is_set():  # flock failed: the busy handler decides
                os.close(fd)
                return None
            state["gave_up"] = True
        database = str(self.path).removesuffix("-writers")
        raise StoreError(
            f"cannot start a write on {database}: database is locked{busy_hint('locked')}"
        )
