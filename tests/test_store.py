"""The store: migrations, transactions, ids; the SQLite file's permissions and pragmas."""

from __future__ import annotations

import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import postgres_base_url, postgres_schema
from lossless import Config, Engine, StoreError
from lossless.store import SQLiteStore, open_store
from lossless.store.merge_pace import MergePace
from lossless.store.migrations import MIGRATIONS
from lossless.store.sqlite_indexes import CATCH_UP_AT


def test_opening_a_new_database_applies_every_migration_once(db: str) -> None:
    store = open_store(db)
    assert store.applied_migrations() == sorted(name for name, _ in MIGRATIONS)
    assert store.migrate() == []  # a second run has nothing to do
    store.close()
    reopened = open_store(db)
    assert reopened.migrate() == []
    reopened.close()


def test_schema_has_the_spec_tables_and_indexes(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    with sqlite3.connect(db_path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    for table in (
        "conversations",
        "messages",
        "message_parts",
        "summaries",
        "summary_parents",
        "summary_messages",
        "context_items",
        "large_files",
        "messages_fts",
        "messages_trigram",
        "summaries_fts",
        "summaries_trigram",
        "transcript_checkpoints",
    ):
        assert table in names
    assert "messages_external_id" in names


def test_database_file_and_directory_are_private_to_the_owner(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "lossless.db"
    with Engine.open(path) as engine:
        engine.ingest("s", {"role": "user", "content": "hello"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    wal = Path(f"{path}-wal")
    if wal.exists():
        assert stat.S_IMODE(wal.stat().st_mode) & 0o077 == 0


def test_wal_mode_and_foreign_keys_are_on(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    conn = store._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    store.close()


def test_an_exception_inside_a_transaction_leaves_nothing_behind(engine: Engine) -> None:
    conv = engine.conversation("s", create=True)
    norm = engine.normalize({"role": "user", "content": "will be rolled back"})
    with pytest.raises(RuntimeError), engine.store.transaction():
        engine.store.append_messages(conv, [norm])
        raise RuntimeError("boom")
    assert engine.store.message_count(conv.conversation_id) == 0
    assert engine.store.fetchall("SELECT count(*) FROM context_items")[0][0] == 0
    # the word index: SQLite's full-text table, PostgreSQL's column of ``messages``
    fts = (
        "messages_fts"
        if engine.store.backend == "sqlite"
        else "messages WHERE content_tsv IS NOT NULL"
    )
    assert engine.store.fetchall(f"SELECT count(*) FROM {fts}")[0][0] == 0


def test_a_pipelined_write_counts_its_rows_and_fails_whole(engine: Engine) -> None:
    # On PostgreSQL the statements go out together and an error comes back late (at the
    # next result read, or at COMMIT): the whole write must still be undone, and a row count
    # must still be the statement's.
    conv = engine.conversation("s", create=True)
    kept = [engine.normalize({"role": "user", "content": f"kept {i}"}) for i in range(2)]
    engine.store.append_messages(conv, kept)
    with engine.store.pipelined_transaction() as conn:
        cur = conn.execute(
            "UPDATE messages SET role = role WHERE conversation_id = ?", (conv.conversation_id,)
        )
        assert cur.rowcount == 2
    lost = engine.normalize({"role": "user", "content": "undone"})
    with (
        pytest.raises(Exception, match=r"(?i)foreign key"),
        engine.store.pipelined_transaction() as conn,
    ):
        engine.store.append_messages(conv, [lost])
        conn.execute(
            "INSERT INTO context_items (conversation_id, ordinal, item_type, message_id,"
            " created_at) VALUES (?, 999, 'message', 987654321, '2026-01-01')",
            (conv.conversation_id,),
        )
    assert [m.content for m in engine.messages(conv.conversation_id)] == ["kept 0", "kept 1"]
    assert engine.store.fetchall("SELECT count(*) FROM context_items")[0][0] == 2


def test_a_failed_nested_step_rolls_back_only_itself(engine: Engine) -> None:
    conv = engine.conversation("s", create=True)
    first = engine.normalize({"role": "user", "content": "kept"})
    second = engine.normalize({"role": "user", "content": "undone"})
    with engine.store.transaction():
        engine.store.append_messages(conv, [first])
        with pytest.raises(RuntimeError), engine.store.transaction():
            engine.store.append_messages(conv, [second])
            raise RuntimeError("inner failure")
    assert [m.content for m in engine.messages(conv.conversation_id)] == ["kept"]


def test_an_unwritable_location_gives_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="--db or LOSSLESS_DB"):
        open_store(blocker / "lossless.db")


def test_a_postgres_url_opens_the_postgres_back_end() -> None:
    # A schema of its own: a bare server URL would create the store in ``public``.
    with postgres_schema(postgres_base_url()) as url:
        store = open_store(url)
        try:
            assert store.backend == "postgresql"
            assert store.applied_migrations() == sorted(name for name, _ in MIGRATIONS)
        finally:
            store.close()


def test_sqlite_url_opens_the_file(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/via-url.db")
    assert store.path == tmp_path / "via-url.db"
    store.close()


def test_messages_get_contiguous_seq_and_context_ordinals(engine: Engine) -> None:
    engine.ingest_batch("s", [{"role": "user", "content": f"m{i}"} for i in range(5)])
    engine.ingest("s", {"role": "assistant", "content": "last"})
    msgs = engine.messages("s")
    assert [m.seq for m in msgs] == [1, 2, 3, 4, 5, 6]
    ordinals = engine.store.fetchall(
        "SELECT ordinal, message_id FROM context_items ORDER BY ordinal"
    )
    assert [o for o, _ in ordinals] == list(range(6))
    assert [mid for _, mid in ordinals] == [m.message_id for m in msgs]


def test_a_large_batch_is_stored_and_found_like_small_ones(engine: Engine) -> None:
    # A bulk batch takes the set-based path on PostgreSQL: every message, part, context item,
    # tool execution, masked secret and index entry must be what a turn at a time makes.
    def batch(tag: str) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for i in range(40):
            out.append({"role": "user", "content": f"{tag} question {i} about zebra{i}"})
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"{tag}-call-{i}",
                            "type": "function",
                            "function": {"name": "read", "arguments": f'{{"n": {i}}}'},
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": f"{tag}-call-{i}", "content": f"ok {i}"})
        out[5] = {"role": "user", "content": "nul\x00inside and \ue000 " + "long " * 80}
        out[7] = {"role": "user", "content": "my key is sk-proj-" + "a1" * 24}
        return out

    engine.ingest("s", {"role": "user", "content": "the first, alone"})
    first = engine.ingest_batch("s", batch("a"), external_ids=[f"a{i}" for i in range(120)])
    again = engine.ingest_batch("s", batch("a"), external_ids=[f"a{i}" for i in range(120)])
    second = engine.ingest_batch("s", batch("b"))
    assert len(first.message_ids) == 120 and again.message_ids == () and again.skipped == 120
    msgs = engine.messages("s")
    assert [m.seq for m in msgs] == list(range(1, 242))
    assert [m.message_id for m in msgs[1:]] == [*first.message_ids, *second.message_ids]
    assert msgs[6].content.startswith("nul\x00inside and \ue000 long")
    assert "sk-proj-" not in msgs[8].content and engine.reveal(msgs[8].message_id)
    assert msgs[2].parts[0].tool_call_id == "a-call-0" and msgs[3].parts[0].text == "ok 0"
    assert [i.message_id for i in engine.context("s")] == [m.message_id for m in msgs]
    executions = engine.store.fetchall("SELECT count(*) FROM tool_executions WHERE status = 'ok'")[
        0
    ][0]
    assert executions == 78  # in each batch one result was replaced by a plain message
    # Words and their surroundings: zebra7's answer is found through its question.
    hits = engine.grep("zebra12", conversation="s", sort="relevance").hits
    assert {h.id for h in hits} >= {f"msg#{first.message_ids[36]}"}
    assert engine.check() == []


def test_large_batches_fill_the_trigram_index_on_catch_up(engine: Engine) -> None:
    engine.ingest_batch(
        "s",
        [{"role": "user", "content": f"needle-{i} text"} for i in range(200)],
        finish_indexes=False,
    )
    if engine.store.backend == "postgresql":
        # PostgreSQL keeps its trigram index on every write: nothing is left to catch up,
        # and the substring is found at once.
        assert engine.store.pending_index_rows() == 0
        assert engine.store.catch_up_indexes() == 0
        hits = engine.store.fetchall(
            "SELECT count(*) FROM messages WHERE content LIKE '%eedle-19 %'"
        )[0][0]
        assert hits == 1
        return
    assert engine.store.pending_index_rows() == 200
    assert engine.store.catch_up_indexes() == 200
    assert engine.store.pending_index_rows() == 0
    hits = engine.store.fetchall(
        "SELECT count(*) FROM messages_trigram WHERE content LIKE '%eedle-19 %'"
    )[0][0]
    assert hits == 1
    engine.ingest_batch("s", [{"role": "user", "content": f"turn {i}"} for i in range(20)])
    assert engine.store.pending_index_rows() == 0  # a small batch past CATCH_UP_AT: inline


def test_a_hosts_turns_leave_their_trigram_entries_for_a_pause_or_a_batch(
    db_path: Path,
) -> None:
    # The store made first: its making (the migrations' writes) wakes the store's thread,
    # which would make the entries below in the first pause it saw.
    Engine.open(db_path, config=Config()).close()
    with Engine.open(db_path, config=Config()) as engine:
        engine.store._wake_merger = lambda: None  # type: ignore[method-assign]  # no pause

        def found(words: str) -> list[str]:
            return [h.id for h in engine.grep(words, conversation="s", sort="relevance").hits]

        # (Statements: a question would pass its score to the reply, found so without them.)
        engine.ingest("s", {"role": "user", "content": "We still need a port for staging."})
        engine.ingest("s", {"role": "assistant", "content": "9043, the proxy took 8043."})
        # The two wait for their trigram entries; a search reads them itself as substrings,
        # and ranks them with their surroundings at once (counted, nothing waits for it).
        assert engine.store.pending_index_rows() == 2
        assert found("proxy")[:1] == ["msg#2"]
        assert [h.id for h in engine.grep("roxy took", conversation="s").hits][:1] == ["msg#2"]
        assert found("staging port") == ["msg#1", "msg#2"]  # the answer, by its question
        assert engine.check() == []
        # Turns written one after another make them in one batch once CATCH_UP_AT wait.
        for n in range(2, CATCH_UP_AT - 1):
            engine.ingest("s", {"role": "user", "content": f"turn {n}"})
        assert engine.store.pending_index_rows() == CATCH_UP_AT - 1
        engine.ingest("s", {"role": "user", "content": "and one more"})
        assert engine.store.pending_index_rows() == 0
        assert found("staging port")[:2] == ["msg#1", "msg#2"]  # the answer, by its question

    # In a pause of the writes (or as the store closes) the store's thread makes them.
    with Engine.open(db_path, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "A database for the audit log, then."})
        engine.ingest("s", {"role": "assistant", "content": "PostgreSQL 15, in its own schema."})
        deadline = time.monotonic() + 5
        while engine.store.pending_index_rows() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.store.pending_index_rows() == 0
        hits = engine.grep("database audit", conversation="s", sort="relevance").hits
        assert [h.id for h in hits][:2] == [f"msg#{CATCH_UP_AT + 1}", f"msg#{CATCH_UP_AT + 2}"]
        assert engine.check() == []
        engine.ingest("s", {"role": "user", "content": "Closing now."})
    with Engine.open(db_path, config=Config()) as engine:
        assert engine.store.pending_index_rows() == 0


def test_closed_store_says_to_reopen(db: str) -> None:
    store = open_store(db)
    store.close()
    with pytest.raises(StoreError, match="open it again"):
        store.message_count()


def _segments(engine: Engine, table: str = "messages_fts") -> int:
    with engine.store.read() as conn:
        return int(conn.execute(f"SELECT count(DISTINCT segid) FROM {table}_idx").fetchone()[0])


def test_sqlite_merges_its_word_indexes_off_the_writers_path(db_path: Path) -> None:
    with Engine.open(db_path, config=Config()) as engine:
        engine.store._wake_merger = lambda: None  # type: ignore[method-assign]  # held back
        for n in range(40):
            engine.ingest("s", {"role": "user", "content": f"crane {n} moves the blue container"})
        # each write left a segment; only FTS5's crisis merge (16 on one level) merged them
        assert _segments(engine) >= 9
        before = [h.id for h in engine.grep("blue container", conversation="s", limit=50).hits]
        assert engine.store.merge_indexes() > 0
        assert _segments(engine) <= 5
        assert [h.id for h in engine.grep("blue container", conversation="s", limit=50).hits] == (
            before
        )
        assert engine.store.fts_problems() == []


def test_finishing_an_import_merges_what_it_left_so_the_turns_after_it_do_not(
    db_path: Path,
) -> None:
    with Engine.open(db_path, config=Config()) as engine:
        engine.store._wake_merger = lambda: None  # type: ignore[method-assign]  # held back

        def newest() -> list[str]:
            hits = engine.grep("crane container", conversation="s", limit=50, sort="recency").hits
            return [h.id for h in hits]

        for b in range(12):  # an import: many large batches, each its own segments
            engine.ingest_batch(
                "s",
                [
                    {"role": "user", "content": f"crane {b}-{n} moves a container"}
                    for n in range(80)
                ],
                finish_indexes=False,
            )
        assert _segments(engine) >= 8
        before = newest()
        assert len(before) == 50
        wal = Path(f"{db_path}-wal")
        assert wal.stat().st_size > 0
        assert engine.finish_indexes() == 12 * 80
        # and the WAL those writes left is in the database, not copied in beside the next turns
        assert wal.stat().st_size == 0
        # what was due is merged: a turn that comes next finds nothing left to wait for
        assert engine.store.merge_indexes() == 0
        assert _segments(engine) <= 5
        assert newest() == before
        assert engine.check() == []


def _pages(db_path: Path) -> tuple[int, int, int]:
    """The store's auto-vacuum mode, free pages and pages (from a connection of its own)."""
    with sqlite3.connect(db_path) as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("auto_vacuum", "freelist_count", "page_count")
        )


def _import(engine: Engine, batches: int = 12) -> None:
    for b in range(batches):  # many large batches: their segments merged at the end free pages
        engine.ingest_batch(
            f"c{b}",
            [
                {"role": "user", "content": f"batch {b} line {n} " + "crane " * 30}
                for n in range(300)
            ],
            finish_indexes=False,
        )


def test_an_import_gives_the_pages_its_merges_freed_back_to_the_file_system(
    db_path: Path,
) -> None:
    with Engine.open(db_path, config=Config()) as engine:
        engine.store._wake_merger = lambda: None  # type: ignore[method-assign]  # no thread
        _import(engine)
        engine.store.catch_up_indexes()
        assert _pages(db_path)[0] == 2  # incremental, set as the store was made
        engine.finish_indexes()
        # The merges freed the pages of the segments they replaced (a store made before
        # keeps them: the next test), and the file gave them back.
        assert _pages(db_path)[:2] == (2, 0)
        assert engine.check() == []
        assert len(engine.grep("crane", conversation="c3", limit=5).hits) == 5


def test_a_store_made_before_keeps_its_free_pages_for_the_next_writes(db_path: Path) -> None:
    # A store whose file existed before incremental vacuum was set keeps its mode (changing
    # it takes a VACUUM): the import's end frees nothing, and works as before.
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE older (x)")
    with Engine.open(db_path, config=Config()) as engine:
        engine.store._wake_merger = lambda: None  # type: ignore[method-assign]  # no thread
        _import(engine)
        engine.store.catch_up_indexes()
        engine.finish_indexes()
        mode, free, _ = _pages(db_path)
        assert mode == 0 and free > 0
        assert engine.check() == []


def test_sqlite_merges_when_writes_pause(db_path: Path) -> None:
    with Engine.open(db_path, config=Config()) as engine:
        for n in range(40):
            engine.ingest("s", {"role": "user", "content": f"crane {n} moves the blue container"})
        deadline = time.monotonic() + 5
        while _segments(engine) > 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _segments(engine) <= 5


def test_a_merge_step_begins_only_when_the_pause_should_hold_it() -> None:
    pace = MergePace()
    assert pace.may_begin("messages_fts", 0.0)  # nothing known yet: merge
    for t in (0.0, 1.0, 2.0, 3.0):  # a turn a second, each its burst of writes
        pace.wrote(t)
        pace.wrote(t + 0.005)  # the same turn: not a pause
    assert pace.usual_pause() == pytest.approx(0.995)
    pace.stepped("messages_fts", 0.4)
    # a 0.4 s step fits early in the pause, not late in it, when the next turn is due
    assert pace.may_begin("messages_fts", 3.005 + 0.3)
    assert not pace.may_begin("messages_fts", 3.005 + 0.5)
    # another index, whose steps are short, still merges late in the pause
    pace.stepped("summaries_fts", 0.01)
    assert pace.may_begin("summaries_fts", 3.005 + 0.7)
    # two usual pauses without a write: the writes have stopped, any step may begin
    assert not pace.may_begin("messages_fts", 3.005 + 1.5)
    assert pace.may_begin("messages_fts", 3.005 + 2.0)
    assert pace.idle_in(3.005 + 1.5) == pytest.approx(0.49)


def test_a_step_no_pause_can_hold_runs_once_a_pause_so_merging_keeps_up() -> None:
    pace = MergePace()
    for t in (0.0, 0.1, 0.2, 0.3):
        pace.wrote(t)
    pace.stepped("messages_ctx_fts", 0.5)  # longer than the pauses themselves
    pace.wrote(0.4)
    assert pace.may_begin("messages_ctx_fts", 0.42)  # the first step of this pause
    pace.stepped("messages_ctx_fts", 0.5)
    assert not pace.may_begin("messages_ctx_fts", 0.43)  # not a second one


def test_a_step_that_only_fits_before_the_burst_settles_still_runs_once_a_pause() -> None:
    pace = MergePace()
    for t in (0.0, 0.03, 0.06):  # turns 30 ms apart
        pace.wrote(t)
    pace.stepped("messages_fts", 0.01)  # fits 24 ms of a pause, but a step begins at 20 ms
    pace.wrote(0.09)
    assert pace.may_begin("messages_fts", 0.09 + 0.021)
    pace.stepped("messages_fts", 0.01)
    assert not pace.may_begin("messages_fts", 0.09 + 0.022)


def test_one_short_pause_does_not_set_the_pace() -> None:
    pace = MergePace()
    t = 0.0
    for pause in (1.0, 1.0, 0.05, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0):
        pace.wrote(t)
        t += pause
    pace.wrote(t)
    assert pace.usual_pause() == pytest.approx(1.0)


def test_sqlite_merging_held_back_resumes_once_the_writes_stop(db_path: Path) -> None:
    class HeldBack(MergePace):
        def __init__(self, until: float) -> None:
            super().__init__()
            self.until = until
            self.asked = 0

        def may_begin(self, index: str, now: float) -> bool:
            self.asked += 1
            return now >= self.until

        def idle_in(self, now: float) -> float | None:
            return max(0.0, self.until - now)

    with Engine.open(db_path, config=Config()) as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)
        pace = HeldBack(time.monotonic() + 1.0)
        store._pace = pace
        for n in range(40):
            engine.ingest("s", {"role": "user", "content": f"crane {n} moves the blue container"})
        time.sleep(0.3)
        assert pace.asked > 0 and _segments(engine) > 5  # held back, not merged
        # no write comes to wake the thread: it comes back by itself when the pace says
        deadline = time.monotonic() + 10
        while _segments(engine) > 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _segments(engine) <= 5


def test_a_commit_from_another_thread_while_the_store_closes_starts_no_index_thread(
    db_path: Path,
) -> None:
    # A host's worker may commit while its engine closes: the index thread that commit
    # would start is one close() never joins (a host process once hung in close on it).
    engine = Engine.open(db_path, config=Config())
    engine.ingest("s", {"role": "user", "content": "the store's thread is started"})
    store = engine.store
    assert isinstance(store, SQLiteStore) and store._merger is not None
    started: list[object] = []
    merge = store.merge_indexes

    def commit_while_closing(**kw: Any) -> int:
        worker = threading.Thread(
            target=lambda: engine.ingest("s", {"role": "user", "content": "late write"})
        )
        worker.start()
        worker.join()
        started.append(store._merger)
        return merge(**kw)

    store._unmerged = True
    store.merge_indexes = commit_while_closing  # type: ignore[method-assign]
    engine.close()
    assert started and all(m is None for m in started)  # late writes started no thread
    with Engine.open(db_path, config=Config()) as again:
        assert again.store.message_count() == 1 + len(started)  # every late write kept
