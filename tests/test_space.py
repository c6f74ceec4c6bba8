"""`lossless stats --space`: where a store's bytes are, on both back ends."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lossless import Config, Engine

ROOT = Path(__file__).resolve().parents[1]

BIG = "the nightly import retried on deadlock 40P01 and wrote its batch again. " * 30


def _fill(engine: Engine) -> None:
    for i in range(60):
        at = datetime(2026, 3, 1 + i // 30, 9, i % 30, tzinfo=UTC)
        engine.ingest("big-session", {"role": "user", "content": f"{i}: {BIG}"}, created_at=at)
    for i in range(3):
        engine.ingest("small-session", {"role": "user", "content": f"hello {i}"})


def test_space_names_the_tables_indexes_conversations_and_days(
    new_db: Callable[[], str], backend: str
) -> None:
    with Engine.open(new_db(), config=Config(), create=True) as engine:
        _fill(engine)
        engine.finish_indexes()
        space = engine.space(top=5, days=3)
        on_disk = engine.stats()["bytes"]["database"]
    names = {o.name: o for o in space.objects}
    assert names["messages"].kind == "table" and names["messages"].bytes > 0
    searches = [o for o in space.objects if o.kind == "search index"]
    assert searches, space.objects  # the full-text indexes, counted as such
    indexes = [o for o in space.objects if o.kind == "index"]
    assert indexes and all(o.table in names for o in indexes), indexes
    assert space.objects == sorted(space.objects, key=lambda o: (-o.bytes, o.name))
    assert 0 < space.total() <= on_disk
    if backend == "sqlite":  # every page of the file is some table's or index's but the free
        assert space.total() >= on_disk * 0.8, (space.total(), on_disk)
    big, small = space.conversations
    assert (big[1], big[2], small[1], small[2]) == ("big-session", 60, "small-session", 3)
    assert big[3] >= 60 * len(BIG.encode()) and big[3] > small[3]
    day_counts = {day: n for day, n, _ in space.days}
    assert day_counts["2026-03-01"] == 30 and day_counts["2026-03-02"] == 30


def test_stats_space_from_the_cli_as_text_and_json(run_cli: Any, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Engine.open(db, config=Config(), create=True) as engine:
        _fill(engine)
    shown = run_cli("--db", str(db), "stats", "--space", "--top", "1")
    assert shown.code == 0, shown
    assert "search index messages_fts" in " ".join(shown.out.split())
    assert "big-session" in shown.out and "small-session" not in shown.out
    assert "2026-03-02       30" in shown.out
    data = json.loads(run_cli("--db", str(db), "stats", "--space", "--json").out)
    assert data["space"]["bytes"] == sum(o["bytes"] for o in data["space"]["objects"])
    assert [c["session_id"] for c in data["space"]["conversations"]][:1] == ["big-session"]
    assert "space" not in json.loads(run_cli("--db", str(db), "stats", "--json").out)


def test_a_store_near_its_cap_is_said_by_stats_doctor_and_the_hooks_log(tmp_path: Path) -> None:
    """`max_store_bytes`: from 80% of it `stats` and `doctor` say so (doctor as a note: the
    store is not damaged), and so does the hooks' log on each call; well under it, nothing."""
    import os
    import shutil
    import subprocess
    import sys

    session = next((ROOT / "examples" / "claude-code").glob("*.jsonl"))
    transcript = tmp_path / session.name
    shutil.copy(session, transcript)
    db, log = tmp_path / "c.db", tmp_path / "hooks.log"
    lossless = [sys.executable, "-m", "lossless", "--db", str(db)]
    hook = json.dumps(
        {
            "session_id": session.stem,
            "transcript_path": str(transcript),
            "hook_event_name": "Stop",
        }
    )

    def run(*args: str, cap: int, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HOME": str(tmp_path), "LOSSLESS_MAX_STORE_BYTES": str(cap)}
        return subprocess.run(
            [*lossless, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
        )

    assert run("hook", "claude-code", "--log-file", str(log), cap=10**9, stdin=hook).returncode == 0
    assert "cap" not in log.read_text()
    size = json.loads(run("stats", "--json", cap=10**12).stdout)["cap"]["bytes"]
    near = int(size / 0.9)  # the store is at 90% of it
    assert "near its cap" not in run("doctor", cap=10**9).stdout
    doctor = run("doctor", cap=near)
    assert doctor.returncode == 0 and "note: the store is near its cap" in doctor.stdout, doctor
    stats = run("stats", cap=near)
    assert "(90%): warning, near or over the cap" in stats.stdout, stats.stdout
    assert run("hook", "claude-code", "--log-file", str(log), cap=near, stdin=hook).returncode == 0
    assert "WARNING" in log.read_text() and "near its cap" in log.read_text()
    over = run("stats", "--json", cap=size // 2)
    assert json.loads(over.stdout)["cap"]["near"] is True
