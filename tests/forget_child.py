"""A ``lossless`` command for tests/test_forget_kill.py to kill at a chosen moment.

Run as ``python forget_child.py POINT -- LOSSLESS-ARGS...``: the CLI runs with LOSSLESS-ARGS and
the process sends itself SIGKILL at POINT, one of

* ``in-transaction``: the forget's writes are all done, its transaction not committed;
* ``committed``: the forget committed, its scrub not begun;
* ``claimed``: the scrub is claimed by this process, nothing of it done;
* ``purging``: the large files are deleted, the freed space not scrubbed;
* ``purged``: the freed space is scrubbed, the scrub not recorded done;
* ``vm:N`` (SQLite): inside the scrub's statements (index merges, VACUUM, checkpoints), after
  N hundred of SQLite's virtual-machine steps;
* ``archive-written`` (``lossless prune``): a batch's archive file is written and flushed,
  its transaction not begun;
* ``archive-committed`` (``lossless prune``): the first batch committed, the next not begun;
* ``after:SECONDS``: wherever the command is after that long;
* ``fsize:BYTES``: not a kill: no file may grow past BYTES (``RLIMIT_FSIZE``; a write past it
  fails as on a full disk).

Each named point is where the code is, not a guess at timing: a kill lands there every run.
"""

from __future__ import annotations

import functools
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from lossless import forget as forget_module
from lossless import retention as retention_module
from lossless.cli.main import main
from lossless.store.archive import ArchiveStore
from lossless.store.forget import ForgetStore
from lossless.store.postgres import PostgresStore
from lossless.store.sqlite import SQLiteStore


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def killing_after(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        fn(*args, **kwargs)
        die()

    return wrapper


def killing_before(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        die()
        return fn(*args, **kwargs)

    return wrapper


def arm(point: str) -> None:
    stores = (SQLiteStore, PostgresStore)
    if point == "in-transaction":
        for cls in stores:
            cls._forgotten = killing_after(cls._forgotten)  # type: ignore[method-assign]
    elif point == "committed":
        finish = forget_module.finish_scrubs

        def after_commit(services: Any) -> Any:
            if services.store.scrubs_due():  # called by the forget after its commit
                die()
            return finish(services)  # called by the store's opening: nothing due yet

        forget_module.finish_scrubs = after_commit
    elif point == "claimed":
        ForgetStore.claim_scrubs = killing_after(ForgetStore.claim_scrubs)  # type: ignore[method-assign]
    elif point == "purging":
        for cls in stores:
            cls.purge_freed = killing_before(cls.purge_freed)  # type: ignore[method-assign]
    elif point == "purged":
        ForgetStore.scrubs_done = killing_before(ForgetStore.scrubs_done)  # type: ignore[method-assign]
    elif point.startswith("vm:"):
        steps = int(point[3:])
        purge = SQLiteStore.purge_freed

        def counting(self: SQLiteStore) -> list[str]:
            seen = [0]

            def tick() -> int:
                seen[0] += 1
                if seen[0] >= steps:
                    die()
                return 0

            self._conn().set_progress_handler(tick, 100)
            return purge(self)

        SQLiteStore.purge_freed = counting  # type: ignore[method-assign]
    elif point == "archive-written":
        retention_module.write_archive = killing_after(retention_module.write_archive)
    elif point == "archive-committed":
        ArchiveStore.commit_archive = killing_after(ArchiveStore.commit_archive)  # type: ignore[method-assign]
    elif point.startswith("fsize:"):
        limit = int(point[6:])
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    elif point.startswith("after:"):
        timer = threading.Timer(float(point[6:]), die)
        timer.daemon = True
        timer.start()
    else:
        raise SystemExit(f"unknown kill point {point!r}")


if __name__ == "__main__":
    point, sep, *args = sys.argv[1:]
    assert sep == "--", "usage: forget_child.py POINT -- LOSSLESS-ARGS..."
    arm(point)
    sys.argv = ["lossless", *args]
    main()
