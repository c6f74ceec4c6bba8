"""Every command on a damaged database file says what is wrong, never a traceback (split
from test_faults.py)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine


@pytest.fixture(scope="module")
def sound_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of 400 messages, closed (a WAL-less single file), to damage copies of."""
    db = tmp_path_factory.mktemp("sound") / "sound.db"
    with Engine.open(db, config=Config()) as engine:
        for i in range(400):
            engine.ingest("s", {"role": "user", "content": f"message {i} " + "words " * 40})
    return db


def _damage_file(db: Path, kind: str, seed: int) -> None:
    import random

    rnd = random.Random(seed)
    size = db.stat().st_size
    with db.open("r+b") as handle:
        if kind == "stripes":  # garbage over a stretch of pages
            for offset in range(size // 4, size, 4_096):
                handle.seek(offset + 100)
                handle.write(rnd.randbytes(2_000))
        elif kind == "zeroed pages":
            for _ in range(8):
                handle.seek(rnd.randrange(1, size // 4_096) * 4_096)
                handle.write(bytes(4_096))
        elif kind == "truncated":
            handle.truncate(rnd.randrange(4_096, size))
        elif kind == "stray bytes":
            for _ in range(200):
                handle.seek(rnd.randrange(size))
                handle.write(bytes([rnd.randrange(256)]))
        else:  # "header": four bytes of the file's first hundred
            handle.seek(rnd.randrange(16, 100))
            handle.write(rnd.randbytes(4))


@pytest.mark.parametrize(
    ("kind", "seed"),
    [
        ("stripes", 57),  # damage over the schema's names: an error text that is not text
        ("zeroed pages", 3),
        ("truncated", 5),
        ("stray bytes", 8),
        ("stray bytes", 79),  # a stored text that is not UTF-8 any more
        ("stray bytes", 1169),  # an index's error message quoting bytes that are not text
        ("zeroed pages", 84),  # the migrations table unreadable as the store opens
        ("header", 60),  # reads work; a large write fails as it commits
    ],
)
def test_every_command_on_a_damaged_file_says_what_is_wrong_never_a_traceback(
    sound_store: Path, tmp_path: Path, run_cli: Any, kind: str, seed: int
) -> None:
    db = tmp_path / "damaged.db"
    db.write_bytes(sound_store.read_bytes())
    _damage_file(db, kind, seed)
    line = tmp_path / "one.jsonl"
    line.write_text('{"role": "user", "content": "more"}\n')
    commands = [
        ["stats"],
        ["doctor"],
        ["grep", "message"],
        ["grep", "words", "--mode", "substring"],
        ["import", str(line)],
        ["export", "s"],
        ["context", "s"],
        ["compact", "s"],
        ["show", "s"],
        ["reveal", "msg#3"],
        ["conversations"],
        ["resume", "s"],
        ["backup", str(tmp_path / "copy.db")],
    ]
    failed = 0
    for args in commands:
        done = run_cli("--db", str(db), *args)
        assert "Traceback" not in done.err, (args, done.err)
        if done.code != 0:
            failed += 1
            # A failure always says what was wrong: on stderr, or, for doctor, in its report.
            reported = args == ["doctor"] and "database file" in done.out
            assert done.err.strip() or reported, (args, done)
    assert failed, "no command noticed the damage"


def test_a_damaged_database_is_reported_not_a_traceback_and_nothing_is_written(
    tmp_path: Path, run_cli: Any
) -> None:
    import os

    db = tmp_path / "damaged.db"
    with Engine.open(db, config=Config()) as engine:
        for i in range(400):
            engine.ingest("s", {"role": "user", "content": f"message {i} " + "words " * 40})
        engine.backup(tmp_path / "latest.db")  # the way back
    size = db.stat().st_size
    with db.open("r+b") as handle:  # garbage over a stretch of pages in the middle
        for offset in range(size // 4, size, 4_096):
            handle.seek(offset + 100)
            handle.write(os.urandom(2_000))
    damaged = db.read_bytes()
    line = tmp_path / "one.jsonl"
    line.write_text('{"role": "user", "content": "more"}\n')
    for args in (["stats"], ["doctor"], ["grep", "message"], ["import", str(line)]):
        done = run_cli("--db", str(db), *args)
        assert done.code != 0, (args, done)
        assert "is damaged" in done.err and "Traceback" not in done.err, (args, done.err)
    backup = tmp_path / "copy.db"
    done = run_cli("--db", str(db), "backup", str(backup))
    assert done.code != 0 and "is damaged" in done.err and not backup.exists()
    # The documented way out: restore the latest backup; the damaged file is kept aside.
    restored = run_cli("--db", str(db), "restore", str(tmp_path / "latest.db"), "--yes")
    assert restored.code == 0, restored
    assert run_cli("--db", str(db), "doctor").code == 0
    with Engine.open(db, config=Config()) as engine:
        assert len(engine.messages("s")) == 400
    [kept] = tmp_path.glob("damaged.db.before-restore-*[0-9]")
    assert kept.read_bytes() == damaged  # kept as it was, for sqlite3 .recover


def test_a_schema_whose_names_are_not_text_is_reported_as_damage(
    tmp_path: Path, run_cli: Any
) -> None:
    """Damaged bytes in the schema's names make SQLite's own error text undecodable; the
    store still says the file is damaged and what to do, never a traceback."""
    db = tmp_path / "names.db"
    backup = tmp_path / "names-backup.db"
    with Engine.open(db, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "kept"})
        engine.backup(backup)
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = CAST(X'435245415445205441424C4520FF' AS TEXT),"
            " name = CAST(X'6DFF6573' AS TEXT) WHERE name = 'messages'"
        )
        conn.commit()
    for args in (["stats"], ["doctor"], ["grep", "kept"]):
        done = run_cli("--db", str(db), *args)
        assert done.code != 0, (args, done)
        assert "is damaged" in done.err and "Traceback" not in done.err, (args, done.err)
        assert "lossless restore" in done.err, done.err
    # The way out it names works on such a file too (settling its log read the damaged names).
    restored = run_cli("--db", str(db), "restore", str(backup), "--yes")
    assert restored.code == 0, restored
    assert run_cli("--db", str(db), "grep", "kept").code == 0


def test_a_schema_that_lost_a_column_is_reported_as_damage_and_a_wrong_statement_is_not(
    tmp_path: Path, run_cli: Any
) -> None:
    """A stray byte in the stored schema can rename a column: every statement naming it fails
    with "no such column". The store says the file is damaged, naming what its schema lacks
    of what lossless made, never a traceback. A statement naming a column no store has is a
    mistake in the statement, and stays one."""
    db = tmp_path / "column.db"
    with Engine.open(db, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "kept"})
        with pytest.raises(sqlite3.OperationalError, match="no such column: nothing_here"):
            engine.store.fetchall("SELECT nothing_here FROM conversations")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = replace(sql, 'metadata', 'metadatx')"
            " WHERE name = 'conversations'"
        )
        conn.commit()
    for args in (["stats"], ["conversations"]):
        done = run_cli("--db", str(db), *args)
        assert done.code != 0, (args, done)
        assert "is damaged" in done.err and "Traceback" not in done.err, (args, done.err)
        assert "lacks the column metadata of conversations" in done.err, done.err
        assert "lossless restore" in done.err, done.err


def test_a_write_whose_commit_meets_a_damaged_header_is_reported_as_damage(
    tmp_path: Path, run_cli: Any
) -> None:
    """Bytes 55-58 of the file's header (the end of the auto-vacuum root page number and the
    text encoding) overwritten: reads still work, and a large write fails only as it commits.
    That failure says the file is damaged and what to do, and nothing of the write is kept.
    (A store made before incremental auto-vacuum, whose root page number there is 0: in a
    store made now those bytes hold a real page number, and SQLite reads the change
    differently.)"""
    db = tmp_path / "header.db"
    with sqlite3.connect(db) as conn:  # a file that existed first keeps auto_vacuum off
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE older (x)")
    with Engine.open(db, config=Config()) as engine:
        for i in range(40):
            engine.ingest("s", {"role": "user", "content": f"message {i} " + "words " * 40})
    with db.open("r+b") as handle:
        handle.seek(55)
        handle.write(bytes.fromhex("f9448e48"))
    line = tmp_path / "one.jsonl"
    line.write_text('{"role": "user", "content": "more"}\n')
    done = run_cli("--db", str(db), "import", str(line))
    assert done.code != 0, done
    assert "is damaged" in done.err and "Traceback" not in done.err, done.err
    assert "lossless restore" in done.err, done.err
    stats = run_cli("--db", str(db), "stats", "--json")
    assert stats.code == 0, stats
    assert (json.loads(stats.out)["conversations"], json.loads(stats.out)["messages"]) == (1, 40)
