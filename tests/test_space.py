"""`lossless stats --space`: where a store's bytes are, on both back ends."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lossless import Config, Engine

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
