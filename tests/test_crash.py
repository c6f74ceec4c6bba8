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

import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import crash_child as child
from crash_support import (
    LEAF_TURNS,
    SEEDS,
    TRANSPLANT_TURNS,
    ImportCase,
    assert_whole,
    copy_db,
    fast_summarizer,
    holding,
    is_hold,
    kill_child,
    messages_of,
    nth,
    nth_ack,
    place,
    shape,
)
from lossless import Config, Engine
from lossless.ingest.reconcile import BATCH_MESSAGES
from lossless.sample import write_session
from lossless.transplant import TransplantError


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
