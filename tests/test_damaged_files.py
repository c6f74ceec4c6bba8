"""Every command on a damaged database file says what is wrong, never a traceback (split
from test_faults.py)."""

from __future__ import annotations

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
