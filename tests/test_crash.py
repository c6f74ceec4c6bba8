"""Crash safety with real processes: kill -9 in the middle of each long operation, then check.

A child process (``crash_child.py``) runs one operation on a copy of a prepared store — a bulk
import, an ingest loop that acknowledges each committed call, a run of leaf passes, a run of
condensed passes, a transplant of a large source, a migration of an old-schema store, a backup
and a restore (SQLite's: with their large files) — and is killed with SIGKILL. Even rounds
kill it at a random moment (after a seeded number of progress lines plus a seeded random
delay); odd rounds stop it inside its N-th write transaction (N seeded), all writes done and
the commit not yet made, and kill it there (for backup and restore, which write files, after
the N-th of their steps). After each kill:

* ``doctor`` finds nothing and SQLite's own integrity check passes;
* every acknowledged message is stored exactly once, and nothing half written is left (whole
  batches, whole passes, a whole transplant or none, each migration whole or not at all);
* re-running the interrupted command completes it, to the same result as an uninterrupted run.

``LOSSLESS_CRASH_ROUNDS`` (default 5) sets the rounds per kill point.
"""

from __future__ import annotations

import os
import queue
import random
import shutil
import signal
import sqlite3
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
from lossless.store.migrations import MIGRATIONS
from lossless.summarize import ScriptedSummarizer
from lossless.transplant import TransplantError

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


@pytest.fixture(scope="module")
def import_case(tmp_path_factory: pytest.TempPathFactory) -> ImportCase:
    root = tmp_path_factory.mktemp("import")
    transcript = write_session(root / "session.jsonl", IMPORT_TURNS, seed=11, session_id="imported")
    db = root / "reference.db"
    with Engine.open(db, config=Config()) as engine:
        engine.import_path(transcript)
        reference = messages_of(engine.store, "imported")
    assert len(reference) > 4 * BATCH_MESSAGES
    return ImportCase(transcript, reference, db)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_import_keeps_whole_batches_and_importing_again_completes_it(
    import_case: ImportCase, tmp_path: Path, seed: int, new_db: Callable[[], str]
) -> None:
    rng = random.Random(f"import:{seed}")
    db = new_db()
    reference = import_case.reference
    batches = -(-len(reference) // BATCH_MESSAGES)
    if is_hold(seed):
        n = rng.randint(1, batches)
        run = kill_child(
            tmp_path, "import", db, import_case.transcript, "--hold", str(n), when=holding
        )
        assert "holding" in run.lines
    else:
        # 21 ticks per pass over the file (two passes), then the checkpoint and the index.
        run = kill_child(
            tmp_path,
            "import",
            db,
            import_case.transcript,
            when=nth("tick", rng.randint(1, 42)),
            delay=rng.uniform(0, 0.05),
        )

    with Engine.open(db, config=Config()) as engine:
        assert_whole(engine.store)
        stored = messages_of(engine.store, "imported")
        assert stored == reference[: len(stored)], "not a prefix of the transcript"
        assert len(stored) % BATCH_MESSAGES == 0 or len(stored) == len(reference)
        print(f"import: {len(stored)} of {len(reference)} messages stored at the kill")
        if is_hold(seed):
            assert len(stored) == (n - 1) * BATCH_MESSAGES  # the open batch is gone whole

        reports = engine.import_path(import_case.transcript)
        assert reports[0].imported == len(reference) - len(stored)
        assert messages_of(engine.store, "imported") == reference
        assert_whole(engine.store)
        assert engine.import_path(import_case.transcript)[0].imported == 0


# --- ingest calls, acknowledged ---------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_ingest_loop_keeps_every_acknowledged_batch_exactly_once(
    tmp_path: Path, seed: int, new_db: Callable[[], str]
) -> None:
    rng = random.Random(f"ingest:{seed}")
    db = new_db()
    Engine.open(db, config=child.INGEST_CONFIG).close()
    if is_hold(seed):
        n = rng.randint(1, child.BATCHES)
        run = kill_child(tmp_path, "ingest", db, "--hold", str(n), when=holding)
        assert "holding" in run.lines
    else:
        run = kill_child(
            tmp_path,
            "ingest",
            db,
            when=nth_ack(rng.randint(1, child.BATCHES - 10)),
            delay=rng.uniform(0, 0.02),
        )
    acked = run.acks()
    assert acked == list(range(len(acked)))

    with Engine.open(db, config=child.INGEST_CONFIG) as engine:
        assert_whole(engine.store)
        stored = messages_of(engine.store, "s")
        ids = [eid for _, _, eid in stored]
        batches = len(ids) // child.BATCH_SIZE
        # Whole batches, in order; every acknowledged one; at most the one in flight besides.
        assert ids == [e for i in range(batches) for e in child.batch_ids(i)]
        assert batches in (len(acked), len(acked) + 1)
        if is_hold(seed):
            assert batches == len(acked) == n - 1

        child.ingest_all(engine)  # the interrupted command, run again to its end
        expected = [
            (m["role"], m["content"], eid)
            for i in range(child.BATCHES)
            for m, eid in zip(child.batch(i), child.batch_ids(i), strict=True)
        ]
        assert messages_of(engine.store, "s") == expected
        assert_whole(engine.store)


# --- leaf and condensed passes -----------------------------------------------------------------


@dataclass(frozen=True)
class CompactionCase:
    start: Path  # the store before the passes
    summaries: int  # in it
    passes: int  # how many an uninterrupted run writes
    final: list[tuple[Any, ...]]  # the context an uninterrupted run ends with
    end: Path  # the store after an uninterrupted run
    messages: list[tuple[Any, ...]]


def _compaction_case(start: Path, end: Path, config: Config) -> CompactionCase:
    copy_db(start, end)
    with Engine.open(end, config=config, summarizer=fast_summarizer()) as engine:
        messages = messages_of(engine.store, "s")
        summaries = len(engine.store.fetchall("SELECT 1 FROM summaries"))
        report = engine.compact("s")
        assert {p.level for p in report.passes} == {"normal"}
        final = shape(engine, "s")
    assert len(report.passes) >= 6
    return CompactionCase(start, summaries, len(report.passes), final, end, messages)


@pytest.fixture(scope="module")
def leaf_case(tmp_path_factory: pytest.TempPathFactory) -> CompactionCase:
    root = tmp_path_factory.mktemp("leaf")
    transcript = write_session(root / "s.jsonl", LEAF_TURNS, seed=5, session_id="s")
    with Engine.open(root / "start.db", config=child.LEAF_CONFIG) as engine:
        engine.import_path(transcript)
    return _compaction_case(root / "start.db", root / "end.db", child.LEAF_CONFIG)


@pytest.fixture(scope="module")
def condensed_case(
    leaf_case: CompactionCase, tmp_path_factory: pytest.TempPathFactory
) -> CompactionCase:
    root = tmp_path_factory.mktemp("condensed")
    start = copy_db(leaf_case.end, root / "start.db")
    return _compaction_case(start, root / "end.db", child.CONDENSED_CONFIG)


def _kill_compaction(
    case: CompactionCase,
    operation: str,
    config: Config,
    tmp_path: Path,
    seed: int,
    new_db: Callable[[], str],
) -> None:
    rng = random.Random(f"{operation}:{seed}")
    db = place(case.start, new_db)
    if is_hold(seed):
        n = rng.randint(1, case.passes)
        run = kill_child(tmp_path, operation, db, "--hold", str(n), when=holding)
        assert "holding" in run.lines
    else:
        run = kill_child(
            tmp_path,
            operation,
            db,
            when=nth("tick", rng.randint(1, case.passes - 1)),
            delay=rng.uniform(0, 1.5 * child.SUMMARIZER_DELAY),
        )

    with Engine.open(db, config=config, summarizer=fast_summarizer()) as engine:
        assert_whole(engine.store)
        assert messages_of(engine.store, "s") == case.messages
        written = len(engine.store.fetchall("SELECT 1 FROM summaries")) - case.summaries
        print(f"{operation}: {written} of {case.passes} passes written at the kill")
        if is_hold(seed):
            assert written == n - 1  # the pass held open left nothing
        assert 0 <= written <= case.passes

        report = engine.compact("s")  # the interrupted command, run again
        assert len(report.passes) == case.passes - written
        assert shape(engine, "s") == case.final
        assert_whole(engine.store)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_run_of_leaf_passes_loses_nothing_and_compacting_again_finishes_it(
    leaf_case: CompactionCase, tmp_path: Path, seed: int, new_db: Callable[[], str]
) -> None:
    _kill_compaction(leaf_case, "leaf", child.LEAF_CONFIG, tmp_path, seed, new_db)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_run_of_condensed_passes_loses_nothing_and_compacting_again_finishes_it(
    condensed_case: CompactionCase, tmp_path: Path, seed: int, new_db: Callable[[], str]
) -> None:
    _kill_compaction(condensed_case, "condensed", child.CONDENSED_CONFIG, tmp_path, seed, new_db)


# --- transplant --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransplantCase:
    start: Path
    seconds: float  # how long an uninterrupted apply takes here
    target_before: list[tuple[Any, ...]]
    target_after: list[tuple[Any, ...]]
    summaries_after: int


@pytest.fixture(scope="module")
def transplant_case(tmp_path_factory: pytest.TempPathFactory) -> TransplantCase:
    root = tmp_path_factory.mktemp("transplant")
    transcript = write_session(root / "s.jsonl", TRANSPLANT_TURNS, seed=9, session_id=child.SOURCE)
    start = root / "start.db"
    with Engine.open(start, config=child.TRANSPLANT_CONFIG, summarizer=fast_summarizer()) as eng:
        eng.import_path(transcript)
        eng.compact(child.SOURCE)
        eng.ingest_batch(
            child.TARGET, [{"role": "user", "content": f"target message {i}"} for i in range(3)]
        )
        before = messages_of(eng.store, child.TARGET)
    reference = copy_db(start, root / "reference.db")
    with Engine.open(reference, config=child.TRANSPLANT_CONFIG) as eng:
        began = time.perf_counter()
        plan = eng.transplant(child.SOURCE, child.TARGET, apply=True)
        seconds = time.perf_counter() - began
        after = messages_of(eng.store, child.TARGET)
        target = eng.conversation(child.TARGET).conversation_id
        summaries = len(
            eng.store.fetchall("SELECT 1 FROM summaries WHERE conversation_id = ?", (target,))
        )
    assert len(plan.message_ids) > 4_000 and summaries == len(plan.dag)
    return TransplantCase(start, seconds, before, after, summaries)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_transplant_is_applied_whole_or_not_at_all_and_then_exactly_once(
    transplant_case: TransplantCase, tmp_path: Path, seed: int, new_db: Callable[[], str]
) -> None:
    rng = random.Random(f"transplant:{seed}")
    db = place(transplant_case.start, new_db)
    if is_hold(seed):
        run = kill_child(tmp_path, "transplant", db, "--hold", "1", when=holding)
        assert "holding" in run.lines
    else:
        delay = rng.uniform(0, 1.25 * transplant_case.seconds)
        run = kill_child(tmp_path, "transplant", db, when=nth("ready", 1), delay=delay)

    with Engine.open(db, config=child.TRANSPLANT_CONFIG) as engine:
        assert_whole(engine.store)
        target = messages_of(engine.store, child.TARGET)
        assert target in (transplant_case.target_before, transplant_case.target_after)
        applied = target == transplant_case.target_after
        print(f"transplant: {'applied' if applied else 'not applied'} at the kill")
        if is_hold(seed):
            assert not applied

        if not applied:  # the interrupted command, run again, applies it
            engine.transplant(child.SOURCE, child.TARGET, apply=True)
        with pytest.raises(TransplantError, match="transplanted before"):
            engine.transplant(child.SOURCE, child.TARGET, apply=True)
        assert messages_of(engine.store, child.TARGET) == transplant_case.target_after
        conv = engine.conversation(child.TARGET).conversation_id
        summaries = engine.store.fetchall(
            "SELECT count(*) FROM summaries WHERE conversation_id = ?", (conv,)
        )[0][0]
        assert summaries == transplant_case.summaries_after
        assert_whole(engine.store)


# --- backup and restore (SQLite: PostgreSQL is backed up with the server's own tools) ---------

BACKUP_TURNS = 600
#: A large file per this many turns: the backup and the restore copy files as well.
FILE_EVERY = 40


def _with_files(engine: Engine, session: str, tag: str, count: int) -> None:
    for i in range(count):
        body = "\n".join(f"{tag} {i} row {j}: value={j * 7}" for j in range(6_000))
        engine.ingest(
            session, {"role": "user", "content": f'<file name="{tag}{i}.txt">{body}</file>'}
        )


@dataclass(frozen=True)
class BackupCase:
    store: Path
    seconds: float  # how long an uninterrupted backup takes here
    messages: list[tuple[Any, ...]]
    backup: Path  # a backup of an earlier state of the store
    backup_messages: list[tuple[Any, ...]]
    restore_seconds: float


@pytest.fixture(scope="module")
def backup_case(tmp_path_factory: pytest.TempPathFactory) -> BackupCase:
    root = tmp_path_factory.mktemp("backup")
    transcript = write_session(root / "s.jsonl", BACKUP_TURNS, seed=5, session_id="s")
    store = root / "store.db"
    with Engine.open(store, config=Config()) as engine:
        engine.import_path(transcript)
        _with_files(engine, "s", "early", BACKUP_TURNS // FILE_EVERY)
        engine.backup(root / "earlier.db")
        backup_messages = messages_of(engine.store, "s")
        _with_files(engine, "s", "late", 5)  # files the backup does not have
        engine.ingest_batch("s", [{"role": "user", "content": f"after {i}"} for i in range(50)])
        messages = messages_of(engine.store, "s")
        assert len(engine.store.large_files()) == BACKUP_TURNS // FILE_EVERY + 5
        began = time.perf_counter()
        engine.backup(root / "timed.db")
        seconds = time.perf_counter() - began
    scratch = copy_tree(store, root / "scratch.db")
    began = time.perf_counter()
    child.restore(root / "earlier.db", scratch, Path(f"{scratch}-files"))
    restore_seconds = time.perf_counter() - began
    return BackupCase(
        store, seconds, messages, root / "earlier.db", backup_messages, restore_seconds
    )


def copy_tree(db: Path, dest: Path) -> Path:
    """A copy of the SQLite store *db* with its large files."""
    copy_db(db, dest)
    files = Path(f"{db}-files")
    if files.is_dir():
        shutil.copytree(files, f"{dest}-files")
    return dest


def assert_store(db: Path, expected: list[tuple[Any, ...]], *, strays: bool = False) -> None:
    """*db* opens, holds exactly *expected*, and every large file it names is there (with
    *strays*, files nothing names may be left over, as doctor reports them)."""
    with Engine.open(db, config=Config()) as engine:
        assert_whole(engine.store)
        assert messages_of(engine.store, "s") == expected
        problems = engine.check()
        if strays:
            problems = [p for p in problems if p.check != "stray files"]
        assert problems == []
        for record in engine.store.large_files():
            assert engine.read_large_file(record.file_id)  # every file it names reads


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_backup_leaves_the_store_as_it_was_and_no_half_backup(
    backup_case: BackupCase, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(f"backup:{seed}")
    db = copy_tree(backup_case.store, tmp_path / "store.db")
    dest = tmp_path / "out" / "copy.db"
    dest.parent.mkdir()
    if is_hold(seed):
        step = rng.randint(1, len(child.STEPS["backup"]))
        run = kill_child(tmp_path, "backup", db, dest, "--hold", str(step), when=holding)
        assert "holding" in run.lines
    else:
        delay = rng.uniform(0, 3 * backup_case.seconds)
        run = kill_child(tmp_path, "backup", db, dest, when=nth("ready", 1), delay=delay)

    assert_store(db, backup_case.messages)
    made = dest.exists()
    print(f"backup: {'made' if made else 'not made'} at the kill")
    if is_hold(seed):
        assert not made  # killed before the last rename: nothing under the user's name
    if made:
        assert_store(dest, backup_case.messages)
    else:
        with Engine.open(db, config=Config()) as engine:
            engine.backup(dest)  # the same command again
        assert_store(dest, backup_case.messages)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["copy.db", "copy.db-files"]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_restore_leaves_one_whole_database_and_running_it_again_completes_it(
    backup_case: BackupCase, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(f"restore:{seed}")
    db = copy_tree(backup_case.store, tmp_path / "store.db")
    if is_hold(seed):
        step = rng.randint(1, len(child.STEPS["restore"]))
        run = kill_child(
            tmp_path, "restore", db, backup_case.backup, "--hold", str(step), when=holding
        )
        assert "holding" in run.lines
    else:
        delay = rng.uniform(0, 3 * backup_case.restore_seconds)
        run = kill_child(
            tmp_path, "restore", db, backup_case.backup, when=nth("ready", 1), delay=delay
        )

    with Engine.open(db, config=Config()) as engine:
        now = messages_of(engine.store, "s")
    assert now in (backup_case.messages, backup_case.backup_messages), "neither whole database"
    print(f"restore: {'swapped' if now == backup_case.backup_messages else 'not swapped'}")
    assert_store(db, now, strays=True)

    child.restore(backup_case.backup, db, Path(f"{db}-files"))  # the same command again
    assert_store(db, backup_case.backup_messages)
    [kept, *_] = sorted(tmp_path.glob("store.db.before-restore-*[0-9]"), reverse=True)
    if now == backup_case.messages:  # the first run had not swapped: the second kept it
        assert_store(kept, backup_case.messages)


# --- migration ---------------------------------------------------------------------------------


def _schema(conn: sqlite3.Connection) -> set[tuple[str, str, str | None]]:
    return {
        (kind, name, sql)
        for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master")
        if not name.startswith("sqlite_") and name != "migrations"
    }


def _objects_by_migration() -> dict[str, set[tuple[str, str, str | None]]]:
    """The schema objects each migration creates (replayed on an empty database)."""
    conn = sqlite3.connect(":memory:")
    made: dict[str, set[tuple[str, str, str | None]]] = {}
    seen: set[tuple[str, str, str | None]] = set()
    for name, fn in MIGRATIONS:
        fn(conn)
        now = _schema(conn)
        made[name] = now - seen
        seen = now
    conn.close()
    return made


def _sql_now(conn: sqlite3.Connection, name: str) -> str | None:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def _sql_before(migration: str) -> dict[str, str]:
    """Each object's SQL as the migrations before *migration* left it."""
    conn = sqlite3.connect(":memory:")
    for name, fn in MIGRATIONS:
        if name == migration:
            break
        fn(conn)
    sql = {n: s for n, s in conn.execute("SELECT name, sql FROM sqlite_master") if s}
    conn.close()
    return sql


def _columns_before(migration: str) -> dict[str, list[str]]:
    """Each table's columns as the migrations before *migration* left them."""
    conn = sqlite3.connect(":memory:")
    for name, fn in MIGRATIONS:
        if name == migration:
            break
        fn(conn)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    columns = {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    conn.close()
    return columns


@dataclass(frozen=True)
class MigrationCase:
    old: Path  # a store as the older release left it
    later: list[str]  # the migrations opening it applies
    objects: dict[str, set[tuple[str, str, str | None]]]
    tool_executions: int  # rows the backfill must end with
    seconds: float  # how long opening (migrating) it takes here
    #: The older release's schema (a later migration may make an object again as it was).
    old_schema: set[tuple[str, str, str | None]]


@pytest.fixture(scope="module")
def migration_case(
    import_case: ImportCase, tmp_path_factory: pytest.TempPathFactory
) -> MigrationCase:
    root = tmp_path_factory.mktemp("migration")
    names = [name for name, _ in MIGRATIONS]
    later = names[names.index(OLD_SCHEMA_UPTO) + 1 :]
    objects = _objects_by_migration()
    old = copy_db(import_case.reference_db, root / "old.db")
    conn = sqlite3.connect(old, isolation_level=None)
    expected_rows = conn.execute("SELECT count(*) FROM tool_executions").fetchone()[0]
    assert expected_rows > 1_000
    # Downgrade: drop what the later migrations made and forget that they ran. This is the
    # schema the older release wrote, as long as later migrations only add objects, add
    # columns to older tables (those columns are dropped, the table kept), replace a
    # full-text table or a view (the older one is made again, a full-text table rebuilt), or
    # make a table again in another form with the same columns (the older form is made again,
    # its rows copied back, then its indexes).
    conn.execute("BEGIN")
    for name in reversed(later):
        before = _columns_before(name)
        old_sql = _sql_before(name)
        # Tables the migration made go first, a full-text table before its own shadow tables
        # (it reads the view it was made over, and them), then replaced views and indexes,
        # then the tables it replaced.
        for kind, ident, _ in sorted(
            objects[name],
            key=lambda o: (
                o[0] != "table" or o[1] in old_sql,
                "VIRTUAL TABLE" not in (o[2] or "").upper(),
                o[0] == "table",
            ),
        ):
            if "VIRTUAL TABLE" in old_sql.get(ident, "").upper():
                conn.execute(f'DROP TABLE "{ident}"')
                conn.execute(old_sql[ident])
                conn.execute(f'INSERT INTO "{ident}" ("{ident}") VALUES (\'rebuild\')')
            elif kind != "table" and ident in old_sql:  # replaced: made again as it was
                conn.execute(f'DROP {kind.upper()} IF EXISTS "{ident}"')
                conn.execute(old_sql[ident])
            elif (
                kind == "table"
                and ident in old_sql
                and _sql_now(conn, ident) != old_sql[ident]
                and [r[1] for r in conn.execute(f'PRAGMA table_info("{ident}")')]
                == before.get(ident)
            ):
                conn.execute(f'ALTER TABLE "{ident}" RENAME TO "{ident}_later"')
                conn.execute(old_sql[ident])
                conn.execute(f'INSERT INTO "{ident}" SELECT * FROM "{ident}_later"')
                conn.execute(f'DROP TABLE "{ident}_later"')
                for sql in old_sql.values():  # its indexes went with the later form
                    if sql.upper().startswith("CREATE INDEX") and f" ON {ident}(" in sql:
                        conn.execute(sql.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1))
            elif kind == "table" and ident in before:
                current = [r[1] for r in conn.execute(f'PRAGMA table_info("{ident}")')]
                for column in reversed([c for c in current if c not in before[ident]]):
                    conn.execute(f'ALTER TABLE "{ident}" DROP COLUMN "{column}"')
            else:
                conn.execute(f'DROP {kind.upper()} IF EXISTS "{ident}"')
        conn.execute("DELETE FROM migrations WHERE name = ?", (name,))
    conn.execute("COMMIT")
    replay = sqlite3.connect(":memory:")
    for _, fn in MIGRATIONS[: names.index(OLD_SCHEMA_UPTO) + 1]:
        fn(replay)
    assert _schema(conn) == _schema(replay), "a later migration changes an older object"
    old_schema = _schema(conn)
    conn.close()
    replay.close()

    timed = copy_db(old, root / "timed.db")
    began = time.perf_counter()
    with Engine.open(timed, config=Config()) as engine:
        seconds = time.perf_counter() - began
        assert engine.store.applied_migrations() == names
        assert engine.store.fetchall("SELECT count(*) FROM tool_executions")[0][0] == expected_rows
    return MigrationCase(old, later, objects, expected_rows, seconds, old_schema)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_migration_applies_each_step_whole_and_opening_again_finishes_it(
    migration_case: MigrationCase, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(f"migrate:{seed}")
    db = copy_db(migration_case.old, tmp_path / "store.db")
    if is_hold(seed):
        run = kill_child(tmp_path, "migrate", db, "--hold", "1", when=holding)
        assert "holding" in run.lines
    else:
        delay = rng.uniform(0, 1.5 * migration_case.seconds)
        run = kill_child(tmp_path, "migrate", db, when=nth("ready", 1), delay=delay)

    # Before anything opens it again: each later migration is recorded and all there, or
    # neither.
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        recorded = {r[0] for r in conn.execute("SELECT name FROM migrations")}
        schema = _schema(conn)
        for n, name in enumerate(migration_case.later):
            made = migration_case.objects[name]
            if name in recorded:
                # (less what a later recorded migration made again in its own form)
                remade = {
                    ident
                    for later in migration_case.later[n + 1 :]
                    if later in recorded
                    for _, ident, _ in migration_case.objects[later]
                }
                made = {o for o in made if o[1] not in remade}
                assert made <= schema, f"{name} recorded but not all there"
            else:
                new = made - migration_case.old_schema
                assert not new & schema, f"{name} half applied: {sorted(new & schema)}"
        if "m005_tool_executions" in recorded:
            rows = conn.execute("SELECT count(*) FROM tool_executions").fetchone()[0]
            assert rows == migration_case.tool_executions
    finally:
        conn.close()
    done = len(recorded & set(migration_case.later))
    print(f"migrate: {done} of {len(migration_case.later)} migrations recorded at the kill")
    if is_hold(seed):
        assert done == 0

    with Engine.open(db, config=Config()) as engine:  # opening again migrates the rest
        assert engine.store.applied_migrations() == [name for name, _ in MIGRATIONS]
        rows = engine.store.fetchall("SELECT count(*) FROM tool_executions")[0][0]
        assert rows == migration_case.tool_executions
        assert_whole(engine.store)
