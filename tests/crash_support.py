"""What the crash tests share: the child process killed at a chosen moment
(``crash_child.py``), the checks of what it left, and the stores they start from."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import crash_child as child
from lossless import Config, Engine, doctor
from lossless.ingest.reconcile import BATCH_MESSAGES
from lossless.migrate_store import migrate_store
from lossless.sample import write_session
from lossless.store import Store, is_postgres_url, open_store
from lossless.summarize import ScriptedSummarizer

ROUNDS = int(os.environ.get("LOSSLESS_CRASH_ROUNDS", "5"))
SEEDS = range(ROUNDS)
CHILD = Path(__file__).with_name("crash_child.py")
#: Longest a child may go without printing a line before the test gives up on it.
STALL_SECONDS = 60.0

IMPORT_TURNS = 600  # ~4,100 messages: five import batches
LEAF_TURNS = 60  # ~400 messages: a few dozen leaf passes
TRANSPLANT_TURNS = 600  # ~4,100 messages copied in one transaction
#: The store a pre-tool-log release wrote: migrations up to this one (the next one, the
#: tool-execution log, backfills every message, which is what takes time to migrate).
OLD_SCHEMA_UPTO = "m004_session_summaries"


def is_hold(seed: int) -> bool:
    """Odd rounds stop inside a write transaction; even rounds kill at a random moment."""
    return seed % 2 == 1


# --- running and killing a child ---------------------------------------------------------------


@dataclass
class Run:
    """What a killed (or finished) child printed and how it ended."""

    lines: list[str]
    returncode: int

    def acks(self) -> list[int]:
        return [int(line.split()[1]) for line in self.lines if line.startswith("ack ")]


def nth(word: str, n: int) -> Callable[[list[str]], bool]:
    """Kill once the child printed *word* for the *n*-th time."""
    return lambda lines: lines[-1] == word and lines.count(word) >= n


def nth_ack(n: int) -> Callable[[list[str]], bool]:
    """Kill once the child acknowledged its *n*-th batch (acks count from 0)."""
    return lambda lines: lines[-1].startswith("ack ") and int(lines[-1].split()[1]) + 1 >= n


def holding(lines: list[str]) -> bool:
    return lines[-1] == "holding"


def kill_child(
    tmp_path: Path,
    operation: str,
    *args: str | Path,
    when: Callable[[list[str]], bool],
    delay: float = 0.0,
) -> Run:
    """Start the child, SIGKILL it *delay* seconds after *when* says so (or let it finish)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    err = tmp_path / f"{operation}.stderr"
    with err.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), operation, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        out = proc.stdout
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            for line in out:
                lines.put(line.strip())
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        seen: list[str] = []
        ended = False
        try:
            while True:
                try:
                    line = lines.get(timeout=STALL_SECONDS)
                except queue.Empty:
                    pytest.fail(f"{operation} child printed nothing for {STALL_SECONDS:g} s")
                if line is None:
                    ended = True  # it finished (or died) before the kill
                    break
                seen.append(line)
                if when(seen):
                    time.sleep(delay)
                    break
        finally:
            proc.kill()
            code = proc.wait(timeout=30)
        reader.join(timeout=30)
        out.close()
    while not ended:
        line = lines.get(timeout=5)
        if line is None:
            break
        seen.append(line)  # printed before the kill landed: acknowledged all the same
    if code not in (0, -signal.SIGKILL):
        pytest.fail(f"{operation} child failed ({code}):\n{err.read_text()[-3000:]}")
    print(f"{operation}: killed={code == -signal.SIGKILL} after {len(seen)} lines")
    return Run(seen, code)


# --- checks ------------------------------------------------------------------------------------


def assert_whole(store: Store) -> None:
    """Nothing damaged, nothing written half."""
    assert doctor.check(store) == []
    if store.backend == "sqlite":
        assert store.fetchall("PRAGMA integrity_check") == [("ok",)]
    assert (
        store.fetchall(
            "SELECT conversation_id FROM messages GROUP BY conversation_id"
            " HAVING min(seq) <> 1 OR max(seq) <> count(*)"
        )
        == []
    ), "seq numbers with gaps"
    assert (
        store.fetchall(
            "SELECT conversation_id, external_id FROM messages WHERE external_id IS NOT NULL"
            " GROUP BY conversation_id, external_id HAVING count(*) > 1"
        )
        == []
    ), "a message stored twice"
    assert (
        store.fetchall(
            "SELECT summary_id FROM summaries s WHERE retired_at IS NULL"
            " AND NOT EXISTS (SELECT 1 FROM context_items ci WHERE ci.summary_id = s.summary_id)"
            " AND NOT EXISTS"
            "  (SELECT 1 FROM summary_parents sp WHERE sp.parent_summary_id = s.summary_id)"
        )
        == []
    ), "a summary neither in the context nor under a summary in it"
    assert (
        store.fetchall(
            "SELECT message_id FROM summary_messages GROUP BY message_id HAVING count(*) > 1"
        )
        == []
    ), "a message summarized twice"


def messages_of(store: Store, session: str) -> list[tuple[Any, ...]]:
    """(role, content, external id) of a conversation's messages in order ([] if none)."""
    conv = store.find_conversation(session)
    if conv is None:
        return []
    return store.fetchall(
        "SELECT role, content, external_id FROM messages WHERE conversation_id = ? ORDER BY seq",
        (conv.conversation_id,),
    )


_BELOW = """
WITH RECURSIVE below(id) AS (
  SELECT ? UNION SELECT sp.parent_summary_id FROM summary_parents sp JOIN below b
  ON sp.summary_id = b.id)
SELECT sm.message_id FROM summary_messages sm JOIN below b ON sm.summary_id = b.id
ORDER BY sm.message_id
"""


def shape(engine: Engine, session: str) -> list[tuple[Any, ...]]:
    """The context as ids: messages, and summaries by depth and the messages below them."""
    out: list[tuple[Any, ...]] = []
    for item in engine.context(session):
        if item.item_type == "message":
            out.append(("message", item.message_id))
        else:
            below = tuple(r[0] for r in engine.store.fetchall(_BELOW, (item.summary_id,)))
            out.append(("summary", item.depth, below))
    return out


def copy_db(src: Path, dest: Path) -> Path:
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dest}{suffix}")
    return dest


def place(src: Path, new_db: Callable[[], str]) -> str:
    """A fresh store on the back end under test holding what the SQLite store *src* holds
    (a file copy, or ``migrate-store`` into a PostgreSQL schema of its own)."""
    target = new_db()
    if not is_postgres_url(target):
        return str(copy_db(src, Path(target)))
    source, copy = open_store(src), open_store(target)
    try:
        migrate_store(source, copy)
    finally:
        source.close()
        copy.close()
    return target


def fast_summarizer() -> ScriptedSummarizer:
    return ScriptedSummarizer(default=child.summary_text)


# --- bulk import ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportCase:
    transcript: Path
    reference: list[tuple[Any, ...]]
    reference_db: Path


def make_import_case(tmp_path_factory: pytest.TempPathFactory) -> ImportCase:
    """A Claude Code session imported into a reference store (what the import and migration
    kills start from)."""
    root = tmp_path_factory.mktemp("import")
    transcript = write_session(root / "session.jsonl", IMPORT_TURNS, seed=11, session_id="imported")
    db = root / "reference.db"
    with Engine.open(db, config=Config()) as engine:
        engine.import_path(transcript)
        reference = messages_of(engine.store, "imported")
    assert len(reference) > 4 * BATCH_MESSAGES
    return ImportCase(transcript, reference, db)
