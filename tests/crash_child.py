"""A process for tests/test_crash.py to kill: one operation on a store, reporting as it goes.

Run as ``python crash_child.py OPERATION DB [ARG] [--hold N]``. The child prints, one line at a
time and flushed at once (so the parent sees each when it happens):

* ``ready`` when the operation is about to start (for ``migrate``: before opening the store,
  since opening is the operation);
* ``tick`` as the operation progresses (import progress, each summarizer call of a
  compaction pass);
* ``ack N`` after each ingest call returned, that is after batch N was committed: an
  acknowledged batch must survive any crash;
* ``holding`` with ``--hold N``: the N-th write transaction of the operation has done all of
  its writes and waits, uncommitted, to be killed (the parent kills it there, so a kill lands
  inside an open transaction every time, not only when the timing happens to); for
  ``backup`` and ``restore``, which write files rather than transactions, the N-th of their
  steps has finished;
* ``done`` when the operation finished.

The same module gives the parent the configurations, the summarizer and the operations, so it
re-runs exactly the command it interrupted.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless import backup as backup_module
from lossless.backup import restore
from lossless.store import SQLiteStore, is_postgres_url
from lossless.store import migrations as migrations_module
from lossless.store.postgres import PostgresStore
from lossless.summarize import ScriptedSummarizer, SummaryRequest

#: ``ingest``: batches of BATCH_SIZE messages; odd batches go through after_turn (which
#: compacts with the offline extractive summarizer), even ones through ingest_batch.
BATCHES = 120
BATCH_SIZE = 5
INGEST_BUDGET = 1_500
INGEST_CONFIG = Config().replace(
    fresh_tail_count=8, leaf_chunk_tokens=400, leaf_min_fanout=3, condensed_min_fanout=2
)

#: ``leaf`` and ``condensed``: the same chunking, so the leaf run's result is the condensed
#: run's start. The leaf run cannot condense (its fanout is out of reach).
COMPACTION = Config().replace(
    fresh_tail_count=8,
    leaf_chunk_tokens=600,
    leaf_target_tokens=150,
    condensed_target_tokens=150,
    condensed_min_fanout=2,
)
LEAF_CONFIG = COMPACTION.replace(leaf_min_fanout=100_000)
CONDENSED_CONFIG = COMPACTION.replace(leaf_min_fanout=3)
#: How long the child's summarizer "thinks" per call: the window a random kill lands in.
SUMMARIZER_DELAY = 0.03

#: ``transplant``: the source and target session ids, and the source's (coarse) compaction.
SOURCE, TARGET = "source", "target"
TRANSPLANT_CONFIG = Config().replace(
    leaf_chunk_tokens=20_000, leaf_target_tokens=400, leaf_min_fanout=3, condensed_min_fanout=3
)

HOLD_SECONDS = 120.0


def emit(line: str) -> None:
    """One line to the parent, now."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def summary_text(request: SummaryRequest) -> str:
    """A deterministic summary about two thirds of the target: the same sources always give
    the same text, whatever their ids, so an interrupted and resumed compaction ends in the
    same DAG shape as an uninterrupted one."""
    words = max(4, request.target_tokens * 2 // 3)
    return f"Summary of {len(request.sources)} items: " + " ".join(["decision"] * words)


def slow_summarizer(delay: float = SUMMARIZER_DELAY) -> ScriptedSummarizer:
    """The child's summarizer: reports each call (``tick``), then thinks for *delay*."""

    def answer(request: SummaryRequest) -> str:
        emit("tick")
        time.sleep(delay)
        return summary_text(request)

    return ScriptedSummarizer(default=answer)


def batch(i: int) -> list[dict[str, str]]:
    """Batch *i* of the ``ingest`` operation."""
    return [
        {"role": "user" if j % 2 == 0 else "assistant", "content": f"batch {i} message {j} " * 12}
        for j in range(BATCH_SIZE)
    ]


def batch_ids(i: int) -> list[str]:
    """The external ids of batch *i* (what makes re-running the loop safe)."""
    return [f"b{i}-m{j}" for j in range(BATCH_SIZE)]


def ingest_all(engine: Engine, ack: Callable[[int], None] = lambda i: None) -> None:
    """The ``ingest`` operation: every batch, acknowledged once its call returned."""
    for i in range(BATCHES):
        norms = [
            engine.normalize(m, external_id=eid)
            for m, eid in zip(batch(i), batch_ids(i), strict=True)
        ]
        if i % 2:
            engine.after_turn("s", norms, token_budget=INGEST_BUDGET)
        else:
            engine.ingest_batch("s", norms)
        ack(i)


def hold_at(name: str, n: int, owner: Any = SQLiteStore) -> None:
    """Make the *n*-th call of ``owner.name`` (a step inside a write transaction) report
    ``holding`` after it ran and wait there to be killed."""
    original = getattr(owner, name)
    calls = 0

    def step(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        result = original(*args, **kwargs)
        calls += 1
        if calls == n:
            emit("holding")
            time.sleep(HOLD_SECONDS)
        return result

    static = isinstance(inspect.getattr_static(owner, name), staticmethod)
    setattr(owner, name, staticmethod(step) if static else step)


class Ticker:
    """Import progress as ``tick`` lines: one per *steps*-th of the file, in each pass."""

    def __init__(self, steps: int = 20) -> None:
        self.steps = steps
        self.mark = 0
        self.last = 0

    def __call__(self, done: int, total: int) -> None:
        if done < self.last:  # the second pass starts at the beginning again
            self.mark = 0
        self.last = done
        while total and done * self.steps >= self.mark * total and self.mark <= self.steps:
            emit("tick")
            self.mark += 1


#: Which step of each operation ``--hold`` stops in (all inside a write transaction).
HOLD_STEPS = {
    "import": ("_place_messages", SQLiteStore),
    "ingest": ("_place_messages", SQLiteStore),
    "leaf": ("_place_summary", SQLiteStore),
    "condensed": ("_place_summary", SQLiteStore),
    "transplant": ("_index_messages", SQLiteStore),
    "migrate": ("record_tool_executions", migrations_module),
}

#: The steps of the file operations, in order: ``--hold N`` stops after the N-th (each one
#: ends a window a kill can land in).
STEPS: dict[str, list[tuple[str, Any]]] = {
    "backup": [("backup_to", SQLiteStore), ("_check", backup_module)],
    "restore": [
        ("_copy", backup_module),
        ("_settle", backup_module),
        ("_link_tree", backup_module),
        ("_merge_files", backup_module),
        ("_keep_aside", backup_module),
    ],
}


def main(argv: list[str]) -> None:
    operation, db = argv[0], argv[1]
    rest = argv[2:]
    if "--hold" in rest:
        at = rest.index("--hold")
        n = int(rest[at + 1])
        if operation in STEPS:  # no write transaction: stop after the n-th of its steps
            name, owner = STEPS[operation][n - 1]
            hold_at(name, 1, owner)
        else:
            name, owner = HOLD_STEPS[operation]
            if owner is SQLiteStore and is_postgres_url(db):
                owner = PostgresStore
            hold_at(name, n, owner)
        rest = rest[:at] + rest[at + 2 :]
    if operation == "migrate":
        emit("ready")
        Engine.open(db, config=Config()).close()
    elif operation == "import":
        with Engine.open(db, config=Config()) as engine:
            emit("ready")
            engine.import_path(Path(rest[0]), progress=Ticker())
    elif operation == "ingest":
        with Engine.open(db, config=INGEST_CONFIG) as engine:
            emit("ready")
            ingest_all(engine, ack=lambda i: emit(f"ack {i}"))
    elif operation in ("leaf", "condensed"):
        config = LEAF_CONFIG if operation == "leaf" else CONDENSED_CONFIG
        with Engine.open(db, config=config, summarizer=slow_summarizer()) as engine:
            emit("ready")
            engine.compact("s")
    elif operation == "backup":
        with Engine.open(db, config=Config()) as engine:
            emit("ready")
            engine.backup(Path(rest[0]))
    elif operation == "restore":
        emit("ready")
        restore(Path(rest[0]), Path(db), Path(f"{db}-files"))
    elif operation == "transplant":
        with Engine.open(db, config=TRANSPLANT_CONFIG) as engine:
            emit("ready")
            engine.transplant(SOURCE, TARGET, apply=True)
    else:
        raise SystemExit(f"unknown operation {operation!r}")
    emit("done")


if __name__ == "__main__":
    main(sys.argv[1:])
