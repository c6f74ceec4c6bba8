"""``lossless doctor``: a clean store passes; each kind of damage is found with its ids."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from lossless import Config, Engine, doctor


@contextmanager
def _raw(engine: Engine) -> Iterator[Any]:
    """A connection that damages the store as something other than lossless would: with
    foreign keys unchecked (SQLite's pragma; PostgreSQL's replica role skips the checks)."""
    store = engine.store
    if store.backend == "sqlite":
        with closing(sqlite3.connect(store.location, isolation_level=None)) as conn:
            conn.execute("PRAGMA foreign_keys = OFF")
            yield conn
        return
    with store.transaction() as conn:
        conn.execute("SET LOCAL session_replication_role = replica")
        yield conn


def _seed(engine: Engine) -> list[int]:
    res = engine.ingest_batch(
        "s",
        [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m {i}"} for i in range(6)],
    )
    return list(res.message_ids)


def test_a_fresh_store_has_no_problems(engine: Engine) -> None:
    _seed(engine)
    engine.ingest_batch("big", [{"role": "user", "content": f"x{i}"} for i in range(100)])
    assert doctor.check(engine.store) == []


def test_a_lost_context_item_orphans_its_message_and_ordinals_below_0_are_reported(
    engine: Engine,
) -> None:
    ids = _seed(engine)
    with _raw(engine) as conn:
        conn.execute("DELETE FROM context_items WHERE ordinal = 2")
        conn.execute("UPDATE context_items SET ordinal = -5 WHERE ordinal = 0")
    problems = doctor.check(engine.store)
    checks = {p.check for p in problems}
    # A gap is no fault (ordinals are sparse); an ordinal below 0 is.
    assert "context ordinals" in checks
    unreachable = [p for p in problems if p.check == "reachability"]
    assert [p.ids for p in unreachable] == [f"msg#{ids[2]}"]
    assert all(p.fix for p in problems)


def test_an_item_pointing_at_another_conversation_is_reported(engine: Engine) -> None:
    _seed(engine)
    other = engine.ingest("other", {"role": "user", "content": "elsewhere"})
    with _raw(engine) as conn:
        conn.execute(
            "UPDATE context_items SET message_id = ? WHERE ordinal = 0 AND conversation_id = 1",
            (other.message_ids[0],),
        )
    assert any(p.check == "context items" for p in doctor.check(engine.store))


def test_a_summary_without_sources_is_reported(engine: Engine) -> None:
    _seed(engine)
    with _raw(engine) as conn:
        conn.execute(
            "INSERT INTO summaries (summary_id, conversation_id, kind, depth, content, token_count,"
            " created_at) VALUES ('sum_0123456789abcdef', 1, 'leaf', 0, 'x', 1, '2026-01-01')"
        )
    found = [p for p in doctor.check(engine.store) if p.check == "summary sources"]
    assert [p.ids for p in found] == ["sum_0123456789abcdef"]


def test_missing_full_text_rows_are_reported_and_rebuilt(engine: Engine) -> None:
    ids = _seed(engine)
    if engine.store.backend == "postgresql":
        # Its word and trigram indexes are PostgreSQL's own: what can go missing is an index.
        with _raw(engine) as conn:
            conn.execute("DROP INDEX messages_trigram")
        problems = doctor.check(engine.store)
        assert any(p.check == "full-text index" and "messages_trigram" in p.ids for p in problems)
        engine.store.rebuild_fts()
        assert doctor.check(engine.store) == []
        return
    with _raw(engine) as conn:
        content = conn.execute(
            "SELECT content FROM messages WHERE message_id = ?", (ids[1],)
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', ?, ?)",
            (ids[1], content),
        )
    problems = doctor.check(engine.store)
    assert any(p.check == "full-text index" and f"msg#{ids[1]}" in p.ids for p in problems)
    engine.store.rebuild_fts()
    assert doctor.check(engine.store) == []


def test_dangling_foreign_keys_are_reported(engine: Engine) -> None:
    ids = _seed(engine)
    with _raw(engine) as conn:
        conn.execute(
            "INSERT INTO summary_messages (summary_id, message_id, ordinal)"
            " VALUES ('sum_missing', ?, 0)",
            (ids[0],),
        )
    assert any(p.check == "foreign keys" for p in doctor.check(engine.store))


def test_doctor_lists_files_no_stored_message_refers_to(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from lossless import Config, Engine
    from lossless.doctor import stray_files

    db = tmp_path / "files.db"
    with Engine.open(db, config=Config().replace(large_file_token_threshold=200)) as engine:
        table = "\n".join(f"row {i}: value={i * 7}" for i in range(400))
        engine.ingest("s", {"role": "tool", "tool_call_id": "c1", "content": table})
        files_dir = engine.files_dir
        stored = engine.store.large_files()
        assert stored and stray_files(engine.store, files_dir) == []
        # an ingest killed after writing its file but before committing leaves this behind
        stray = files_dir / str(stored[0].conversation_id) / "file_00000000deadbeef.txt"
        stray.write_text("left over")
        found = stray_files(engine.store, files_dir)
        assert [p.ids for p in found] == [str(stray.relative_to(files_dir.resolve()))]
    out = run_cli("--db", str(db), "doctor")
    assert out.code == 1 and "stray files" in out.out and "file_00000000deadbeef" in out.out
    stray.unlink()
    assert run_cli("--db", str(db), "doctor").code == 0


def test_doctor_repair_fixes_what_needs_no_backup_and_says_how_to_fix_the_rest(
    new_db: Callable[[], str], run_cli: Any
) -> None:
    db = new_db()
    with Engine.open(db, config=Config().replace(large_file_token_threshold=200)) as engine:
        ids = _seed(engine)
        table = "\n".join(f"row {i}: value={i * 7}" for i in range(400))
        ids += engine.ingest(
            "s", {"role": "tool", "tool_call_id": "c1", "content": table}
        ).message_ids
        order = [item.message_id for item in engine.context("s")]
        stray = engine.files_dir / "1" / "file_00000000deadbeef.txt"
        stray.write_text("left by an interrupted ingest")
        with _raw(engine) as conn:
            conn.execute("UPDATE context_items SET ordinal = ordinal - 100")  # order kept
            if engine.store.backend == "postgresql":
                conn.execute("DROP INDEX messages_trigram")
            else:
                content = conn.execute(
                    "SELECT content FROM messages WHERE message_id = ?", (ids[1],)
                ).fetchone()[0]
                conn.execute(
                    "INSERT INTO messages_fts (messages_fts, rowid, content)"
                    " VALUES ('delete', ?, ?)",
                    (ids[1], content),
                )
            conn.execute(  # damage only a backup undoes
                "INSERT INTO summary_messages (summary_id, message_id, ordinal)"
                " VALUES ('sum_missing', ?, 0)",
                (ids[0],),
            )
    found = json.loads(run_cli("--db", db, "doctor", "--json").out)
    assert {p["check"] for p in found["problems"]} == {
        "context ordinals",
        "full-text index",
        "stray files",
        "foreign keys",
    }

    repaired = run_cli("--db", db, "doctor", "--repair")

    assert repaired.code == 1  # the foreign key problem remains
    assert "repaired: rebuilt the full-text indexes" in repaired.out
    assert "repaired: renumbered the 7 context items of conversation 1" in repaired.out
    assert f"repaired: deleted {stray.resolve()}" in repaired.out
    left = json.loads(run_cli("--db", db, "doctor", "--json").out)["problems"]
    assert [p["check"] for p in left] == ["foreign keys"]
    assert "lossless restore" in left[0]["fix"]
    assert not stray.exists()
    with Engine.open(db, config=Config()) as engine:
        assert [item.message_id for item in engine.context("s")] == order
        assert [h.id for h in engine.grep("m 1", mode="full_text", conversation="s").hits][:1]
        assert engine.read_large_file(engine.store.large_files()[0].file_id) == table


def test_stale_word_entries_are_reported_and_repaired(new_db: Callable[[], str]) -> None:
    with Engine.open(new_db(), config=Config()) as engine:
        ids = _seed(engine)
        engine.finish_indexes()  # the entries the last turns left waiting, made
        assert doctor.check(engine.store) == []
        with _raw(engine) as conn:  # the store's own bookkeeping, changed behind its back
            if engine.store.backend == "postgresql":
                conn.execute(
                    "UPDATE messages SET context_tsv = NULL WHERE message_id = ?", (ids[2],)
                )
            else:
                # (SQLite counts the neighbours' words from each one's own entry: a stale
                # own-words entry is what it can have.)
                conn.execute(
                    "INSERT INTO messages_fts (messages_fts, rowid, content)"
                    " SELECT 'delete', message_id, content FROM messages WHERE message_id = ?",
                    (ids[3],),
                )
                conn.execute(
                    "INSERT INTO messages_fts (rowid, content) VALUES (?, 'stale words')",
                    (ids[3],),
                )
        problems = doctor.check(engine.store)
        assert problems and all(p.check == "full-text index" for p in problems)
        assert engine.mend() == ["rebuilt the full-text indexes from the stored text"]
        assert doctor.check(engine.store) == []
        # What the neighbours give is found again: msg 3's next is msg 4's text.
        hits = engine.grep("m 3", conversation="s", sort="relevance").hits
        assert f"msg#{ids[2]}" in [h.id for h in hits]
