"""A forget killed with SIGKILL at any moment: after the next ``lossless`` command, no byte of
the forgotten text is left in any file of the store (issue 45, point 1).

The child (tests/forget_child.py) runs ``lossless forget --matching PHRASE --yes`` and kills
itself at a named point of the code (inside the transaction, after the commit, inside the
scrub, ...) or after a delay. The next command is what its user would run: ``lossless grep``
to see where things stand, and, when the forget had not committed (grep still finds the
text), the forget again. Then every file is read: on SQLite the database, its log, its shared
memory and the large files; on PostgreSQL the store's table, index and TOAST files in the
server's data directory (after a CHECKPOINT), and the large files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lossless import Config, Engine

CHILD = Path(__file__).with_name("forget_child.py")
PHRASE = "vexillum quokkaplinth"
TOKENS = [b"vexillum", b"quokkaplinth", b"Vexillum", b"QUOKKAPLINTH"]
CONFIG = Config().replace(large_file_token_threshold=300)
NAMED = ["in-transaction", "committed", "claimed", "purging", "purged"]
#: Where the timed kills land, as fractions of an uninterrupted forget's run.
FRACTIONS = [0.35, 0.6, 0.85]


def fill(target: str, data_dir: Path) -> None:
    """600 messages of one conversation, 30 holding the phrase (one of them a large file),
    a few more in another conversation."""
    config = CONFIG.replace(data_dir=str(data_dir))
    with Engine.open(target, config=config) as engine:
        batch = []
        for i in range(600):
            words = f"note {i} about the harbour crane schedule and berth {i % 17}"
            if i % 20 == 7:
                words = f"{words}; the vault word is {PHRASE.upper() if i % 40 == 7 else PHRASE}"
            batch.append({"role": "user" if i % 2 == 0 else "assistant", "content": words})
        engine.ingest_batch("harbour", batch)
        body = "\n".join(f"row {i}: {PHRASE} stored in the manifest" for i in range(200))
        engine.ingest("harbour", {"role": "user", "content": f'<file name="m.txt">{body}</file>'})
        engine.ingest("other", {"role": "user", "content": "an unrelated conversation"})


def lossless(
    db: str, home: Path, *args: str, point: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "LOSSLESS_DATA_DIR": str(home / "data")}
    env.pop("LOSSLESS_DB", None)
    prefix = (
        [sys.executable, str(CHILD), point, "--"] if point else [sys.executable, "-m", "lossless"]
    )
    return subprocess.run(
        [*prefix, "--db", db, *args], capture_output=True, text=True, env=env, timeout=300
    )


def found_in(paths: list[Path]) -> list[str]:
    """Which files hold a token of the phrase."""
    hits = []
    for path in paths:
        data = path.read_bytes()
        hits += [f"{path.name}: {t.decode()}" for t in TOKENS if t in data]
    return hits


def sqlite_files(home: Path) -> list[Path]:
    return [p for p in home.rglob("*") if p.is_file()]


def postgres_files(target: str, home: Path) -> list[Path]:
    """The store's relation files (tables, indexes, TOAST) after a CHECKPOINT, and its large
    files."""
    import psycopg

    from lossless.store import open_store

    store = open_store(target)
    schema = store.fetchall("SELECT current_schema()")[0][0]
    store.close()
    base = target.split("?")[0]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        data_dir = Path(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
        rows = conn.execute(
            "WITH own AS (SELECT c.oid, c.reltoastrelid FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s),"
            " toast AS (SELECT reltoastrelid AS oid FROM own WHERE reltoastrelid <> 0),"
            " toast_idx AS (SELECT indexrelid AS oid FROM pg_index"
            " WHERE indrelid IN (SELECT oid FROM toast))"
            " SELECT pg_relation_filepath(oid) FROM (SELECT oid FROM own UNION"
            " SELECT oid FROM toast UNION SELECT oid FROM toast_idx) r"
            " WHERE pg_relation_filepath(oid) IS NOT NULL",
            (schema,),
        ).fetchall()
    if not os.access(data_dir, os.R_OK | os.X_OK):
        pytest.skip(f"the PostgreSQL data directory {data_dir} is not readable by this user")
    files = []
    for (relative,) in rows:
        main = data_dir / relative
        files += [p for p in main.parent.glob(main.name + "*") if p.is_file()]
    assert files, "no relation file of the store was found"
    return files + sqlite_files(home)


@pytest.fixture
def store(
    backend: str, new_db: Callable[[], str], tmp_path: Path
) -> Callable[[str], tuple[str, Path]]:
    """``store(name)``: a filled store of its own (and its home folder) for one kill."""
    template = tmp_path / "template"
    if backend == "sqlite":
        fill(str(template / "t.db"), template / "data")

    def make(name: str) -> tuple[str, Path]:
        home = tmp_path / name
        if backend == "sqlite":
            shutil.copytree(template, home)
            return str(home / "t.db"), home
        home.mkdir()
        target = new_db()
        fill(target, home / "data")
        return target, home

    return make


def test_a_forget_killed_anywhere_leaves_no_byte_after_the_next_command(
    backend: str, store: Callable[[str], tuple[str, Path]]
) -> None:
    files = sqlite_files if backend == "sqlite" else None

    def on_disk(target: str, home: Path) -> list[str]:
        return found_in(sqlite_files(home) if files else postgres_files(target, home))

    # An uninterrupted forget: how long it takes (the timed kills' scale), and that the
    # check can fail (the phrase is on disk before).
    target, home = store("whole")
    assert on_disk(target, home), "the phrase is not on disk before the forget"
    began = time.monotonic()
    done = lossless(target, home, "forget", "--matching", PHRASE, "--yes")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert on_disk(target, home) == []

    points = NAMED + (["vm:2", "vm:120", "vm:250"] if backend == "sqlite" else [])
    points += [f"after:{took * f:.3f}" for f in FRACTIONS]
    for point in points:
        target, home = store(point.replace(":", "-"))
        killed = lossless(target, home, "forget", "--matching", PHRASE, "--yes", point=point)
        if point in NAMED or point.startswith("vm:"):
            assert killed.returncode == -9, (point, killed.stdout, killed.stderr)
        seen = lossless(target, home, "grep", PHRASE, "--json")
        assert seen.returncode == 0, (point, seen.stderr)
        if json.loads(seen.stdout)["hits"]:
            # Killed before the commit: nothing was forgotten; the user forgets again.
            assert point in ("in-transaction", *[p for p in points if p.startswith("after:")])
            again = lossless(target, home, "forget", "--matching", PHRASE, "--yes")
            assert again.returncode == 0, (point, again.stderr)
        elif point not in ("in-transaction",):
            # Committed: the grep's opening finished the scrub, and said so when it did.
            assert "finished the scrub" in seen.stderr or point.startswith("after:"), (
                point,
                seen.stderr,
            )
        assert on_disk(target, home) == [], point
        doctor = lossless(target, home, "doctor")
        assert doctor.returncode == 0, (point, doctor.stdout)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``small_disk(bytes)``: a tmpfs of that size (root, as on the machine CI runs on),
    unmounted after the test (:func:`resize` makes it larger)."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        point = tmp_path / "disk"
        point.mkdir()
        made = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            pytest.skip(f"cannot mount a small file system here: {made.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=False)


def resize(point: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(point)], check=True)


def test_a_forget_on_a_full_disk_says_what_was_done_and_finishes_later(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    """Issue 45, point 2: on a nearly full disk the forget commits and its scrub cannot
    (VACUUM needs room for a copy of the database). The error says the messages were
    forgotten and the scrub was not; doctor reports the scrub as due; once there is room,
    ``forget --finish`` finishes it and no byte is left."""
    built = tmp_path / "built"
    fill(str(built / "t.db"), built / "data")
    size = (built / "t.db").stat().st_size
    home = small_disk((size + size * 6 // 10 + 65536) // 4096 * 4096)
    shutil.copytree(built, home, dirs_exist_ok=True)
    db = str(home / "t.db")
    done = lossless(db, home, "forget", "--matching", PHRASE, "--yes")
    said = " ".join(done.stderr.split())
    assert done.returncode == 5, (done.stdout, said)
    assert "forgot 31 message(s)" in said and "did not finish" in said, said
    assert "disk is full" in said and "lossless forget --finish" in said, said
    assert "nothing of this write was stored" not in said, said
    # The forget was not undone: its text is no longer served ...
    seen = lossless(db, home, "grep", PHRASE, "--json")
    assert seen.returncode == 0 and json.loads(seen.stdout)["hits"] == [], seen
    assert "forget --finish" in seen.stderr, seen.stderr  # the opening tried, and said so
    # ... doctor says what is still to do ...
    doctor = lossless(db, home, "doctor")
    assert doctor.returncode == 1 and "unfinished forget" in doctor.stdout, doctor
    assert "lossless forget --finish" in " ".join(doctor.stdout.split())
    assert found_in(sqlite_files(home)), "the check can fail: the bytes are still there"
    # ... and with room again, finishing it leaves no byte behind.
    resize(home, size * 4)
    finished = lossless(db, home, "forget", "--finish")
    assert finished.returncode == 0, finished.stderr
    assert "finished the scrub" in finished.stdout + finished.stderr
    assert found_in(sqlite_files(home)) == []
    assert lossless(db, home, "doctor").returncode == 0
