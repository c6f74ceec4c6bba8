"""Online backup while writers run, and restores checked before anything is replaced."""

from __future__ import annotations

import json
import queue
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.backup import BackupError
from lossless.doctor import check
from lossless.summarize import ScriptedSummarizer

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
    large_file_token_threshold=200,
)
WRITER = """
import sys
from lossless import Engine, Config
with Engine.open(sys.argv[1], config=Config()) as engine:
    print("ready", flush=True)
    n = 0
    while True:
        engine.ingest_batch("live", [{"role": "user", "content": f"live write {n} {k}"}
                                     for k in range(50)])
        print(f"committed {n}", flush=True)
        n += 1
"""
#: Longest wait for the writer's next line; it commits a batch every few milliseconds.
STALL_SECONDS = 60


class Writer:
    """The WRITER child process; its lines (one per committed batch) in a queue."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)  # it ended

    def next_line(self) -> str:
        """The writer's next line; fails if it ends or says nothing for STALL_SECONDS."""
        try:
            line = self.lines.get(timeout=STALL_SECONDS)
        except queue.Empty:
            pytest.fail(f"the writer printed nothing for {STALL_SECONDS} s")
        if line is None:
            pytest.fail(f"the writer ended (exit code {self.proc.wait()})")
        return line

    def committed(self) -> None:
        """Wait for the writer's next committed batch."""
        line = self.next_line()
        assert line.startswith("committed "), line

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def filled(path: Path) -> Engine:
    engine = Engine.open(path, config=SMALL, summarizer=ScriptedSummarizer())
    for i in range(14):
        engine.ingest("s", {"role": "user", "content": f"turn {i}: " + "work " * 30})
    engine.ingest(
        "s",
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "\n".join(f"row {i}" for i in range(400)),
        },
    )
    engine.compact("s")
    return engine


def count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_a_backup_taken_while_another_process_writes_is_whole_and_consistent(
    tmp_path: Path,
) -> None:
    db = tmp_path / "live.db"
    engine = filled(db)
    engine.ingest_batch(
        "bulk", [{"role": "user", "content": f"bulk {i} " * 20} for i in range(3_000)]
    )
    writer = Writer(db)
    try:
        assert writer.next_line() == "ready"
        writer.committed()  # writes are under way before the backup starts
        before = count(db, "messages")
        report = engine.backup(tmp_path / "copy.db")
        after = before
        while after == before:  # until a batch has landed since `before` (one line each)
            writer.committed()
            after = count(db, "messages")
    finally:
        writer.stop()
    assert report.problems == []
    assert before <= report.messages <= after and after > before  # writes went on
    copied = count(tmp_path / "copy.db", "messages")
    assert copied == report.messages and copied % 50 == (before % 50)  # whole batches only
    with Engine.open(tmp_path / "copy.db", config=SMALL) as copy:
        assert check(copy.store) == []
        files = copy.store.large_files()
        assert files and copy.read_large_file(files[0].file_id).startswith("row 0")
    assert (tmp_path / "copy.db").stat().st_mode & 0o777 == 0o600
    with pytest.raises(BackupError, match="exists already"):
        engine.backup(tmp_path / "copy.db")
    engine.close()


def test_restore_checks_the_backup_first_and_keeps_the_current_store(
    tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "main.db"
    engine = filled(db)
    engine.backup(tmp_path / "good.db")
    engine.backup(tmp_path / "bad.db")
    engine.ingest("s", {"role": "user", "content": "written after the backup"})
    engine.close()
    with sqlite3.connect(tmp_path / "bad.db") as conn:  # damage one backup
        conn.execute("DELETE FROM context_items WHERE ordinal = 0")
    before = db.read_bytes()

    refused = run_cli("--db", str(db), "restore", str(tmp_path / "bad.db"), "--yes")
    assert refused.code == 2 and "nothing was replaced" in refused.err
    assert db.read_bytes() == before

    done = run_cli("--db", str(db), "restore", str(tmp_path / "good.db"), "--yes", "--json")
    assert done.code == 0, done
    data = json.loads(done.out)
    aside = Path(data["kept_aside"])
    assert aside.read_bytes() == before
    with Engine.open(db, config=SMALL) as restored:
        assert "written after the backup" not in [m.content for m in restored.messages("s")]
        assert check(restored.store) == []
        assert restored.store.large_files()
    missing = run_cli("--db", str(db), "restore", str(tmp_path / "nope.db"), "--yes")
    assert missing.code == 2 and "is not a backup file" in missing.err


def test_lossless_backup_from_the_cli(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "c.db"
    filled(db).close()
    out = run_cli("--db", str(db), "backup", str(tmp_path / "b.db"))
    assert out.code == 0 and "backed up to" in out.out and "large files in" in out.out
    again = run_cli("--db", str(db), "backup", str(tmp_path / "b.db"))
    assert again.code == 2 and "exists already" in again.err


def test_a_backup_stopped_midway_leaves_no_backup_and_the_next_run_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lossless.backup as backup_module

    with Engine.open(tmp_path / "store.db", config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "keep me"})
        dest = tmp_path / "copy.db"
        real_check = backup_module._check

        def killed(path: Path) -> Any:
            raise KeyboardInterrupt  # the process stopped while the copy was being checked

        monkeypatch.setattr(backup_module, "_check", killed)
        with pytest.raises(KeyboardInterrupt):
            engine.backup(dest)
        assert not dest.exists()  # nothing half-made under the name the user gave
        monkeypatch.setattr(backup_module, "_check", real_check)
        report = engine.backup(dest)
    assert report.messages == 1 and dest.exists()
    assert not list(tmp_path.glob(".copy.db.partial*"))


def test_restore_refuses_while_another_process_is_using_the_store_and_changes_nothing(
    tmp_path: Path,
) -> None:
    from lossless.backup import restore

    db = tmp_path / "main.db"
    engine = filled(db)
    engine.backup(tmp_path / "good.db")
    reader = sqlite3.connect(db)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM messages").fetchone()  # holds its snapshot
        engine.ingest("s", {"role": "user", "content": "written while a reader holds on"})
        with pytest.raises(BackupError, match=r"in use.*nothing was replaced"):
            restore(tmp_path / "good.db", db, engine.files_dir)
        assert engine.messages("s")[-1].content == "written while a reader holds on"
        assert not list(tmp_path.glob("main.db.before-restore-*"))
        assert not list(tmp_path.glob("main.db.restoring*"))
    finally:
        reader.close()
        engine.close()
    report = restore(tmp_path / "good.db", db, tmp_path / "main.db-files")
    assert report.kept_aside is not None
    with Engine.open(report.kept_aside, config=SMALL) as kept:  # whole, with its own files
        assert kept.messages("s")[-1].content == "written while a reader holds on"
        assert kept.check() == []
    with Engine.open(db, config=SMALL) as restored:
        assert restored.check() == []


def _damage_index_page(db: Path, index: str) -> None:
    """XOR 64 bytes near the end of *index*'s root page (where its cells are), as a failing
    disk would."""
    with sqlite3.connect(db) as conn:
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,))
        number = int(root.fetchone()[0])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with db.open("r+b") as handle:
        at = number * page - 80
        handle.seek(at)
        chunk = handle.read(64)
        handle.seek(at)
        handle.write(bytes(b ^ 0x5A for b in chunk))


def test_a_damaged_index_page_is_found_by_doctor_and_refused_by_backup(
    tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "s.db"
    with Engine.open(db, config=Config()) as engine:
        for i in range(3000):
            engine.ingest("s", {"role": "user", "content": f"note {i}: " + "word " * 20})
    assert run_cli("--db", str(db), "doctor").code == 0
    _damage_index_page(db, "sqlite_autoindex_messages_1")

    checked = run_cli("--db", str(db), "doctor")
    assert checked.code == 1, checked
    assert "database file" in checked.out and "quick_check" in checked.out, checked.out
    assert "Traceback" not in checked.err
    full = run_cli("--db", str(db), "doctor", "--full", "--json")
    assert full.code == 1 and "integrity_check" in full.out

    target = tmp_path / "backup.db"
    refused = run_cli("--db", str(db), "backup", str(target))
    assert refused.code != 0 and "damaged" in refused.err, refused
    assert not target.exists() and not list(tmp_path.glob(".backup.db.partial*"))


def test_restore_without_yes_off_a_terminal_is_refused_like_every_command_that_asks(
    run_cli: Any, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    with Engine.open(db, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "kept"})
        engine.backup(tmp_path / "b.db")
    refused = run_cli("--db", str(db), "restore", str(tmp_path / "b.db"))
    assert refused.code == 2, refused
    assert "add --yes to go ahead" in refused.err and refused.err.count("error:") == 1
    assert not list(tmp_path.glob("s.db.before-restore-*"))
