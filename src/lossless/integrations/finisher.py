"""Provisional summaries that outlive a short process: ``lossless finish`` as a process of its
own.

A hook's process, a ``lossless serve --stdio`` child that lives for one host turn, a one-shot
``hermes chat -q``: each ends long before a model has written its summaries. When one ends with
provisional summaries in the store, it starts ``lossless finish --if-free`` on the same store
(the same ``--db`` and ``--config``, or the same ``LOSSLESS_*`` variables, which the child
inherits) in a session of its own, and does not wait for it: the host's process ends at once,
and the model's summaries are put in place after it. A second one started while the first
works exits at once.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ..engine import Engine

__all__ = ["finish_if_pending", "start_finisher", "start_pruner"]

logger = logging.getLogger(__name__)


def start_finisher(options: Sequence[str] = (), *, log: Path | None = None) -> None:
    """Start ``lossless [OPTIONS] finish --if-free`` detached; its output goes to *log*
    (appended), or nowhere."""
    _start_detached([*options, "finish", "--if-free"], log)


def start_pruner(options: Sequence[str] = (), *, log: Path | None = None) -> None:
    """Start ``lossless [OPTIONS] prune --if-free`` detached (a store near its cap, with
    ``retention.at_cap``); its output goes to *log* (appended), or nowhere."""
    _start_detached([*options, "prune", "--if-free"], log)


def _start_detached(arguments: Sequence[str], log: Path | None) -> None:
    command = [sys.executable, "-m", "lossless", *arguments]
    if log is None:
        subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as out:
        subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
        )


def finish_if_pending(
    engine: Engine, options: Sequence[str] = (), *, log: Path | None = None
) -> int:
    """When the store holds provisional summaries (only with a model summarizer), start the
    process that finishes them; how many there were."""
    if engine.summarizer.offline:
        return 0
    try:
        pending = int(engine.pending_summaries()["provisional"])
    except Exception:
        logger.debug("could not count the provisional summaries", exc_info=True)
        return 0
    if pending:
        start_finisher(options, log=log)
        logger.info(
            "%d provisional summaries: `lossless finish` started to put the model's in place",
            pending,
        )
    return pending
