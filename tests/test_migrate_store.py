"""``lossless migrate-store``: a whole store copied between back ends, ids and DAG intact.

The source is built through the public Engine API (an imported transcript with tool calls
and its checkpoint, a compacted DAG with a rewritten summary, a large file, a grant, a
session summary, a redacted original, a message taken out of the context), copied
SQLite -> PostgreSQL -> SQLite, and compared table by table. Interrupted copies (an
exception in the third batch, or after every batch; a ``kill -9`` of the real command) must
resume to the same result. The PostgreSQL tests skip, saying why, without
``LOSSLESS_TEST_POSTGRES_URL``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import postgres_base_url, postgres_schema
from lossless import Config, Engine, StoreError, doctor
from lossless.config import RetentionConfig
from lossless.engine import archive_dir_for, files_dir_for
from lossless.migrate_store import (
    TABLES,
    CopyMismatchError,
    MigrationError,
    MigrationProgress,
    migrate_store,
)
from lossless.redact import KEY_VARIABLE, new_key
from lossless.retrieval.grep import Mode
from lossless.sample import write_session
from lossless.store import Store, open_store
from lossless.summarize import ScriptedSummarizer, SummaryRequest

CONFIG = Config().replace(
    fresh_tail_count=4,
    leaf_chunk_tokens=300,
    leaf_target_tokens=60,
    condensed_target_tokens=60,
    leaf_min_fanout=3,
    condensed_min_fanout=2,
    large_file_token_threshold=500,
    redact={"enabled": True, "keep_originals": True},
)
SECRET = "sk-proj-4fJ9sQ2mZx8LwP0aTbY7cR1dEuV3"
#: Tables the schema has besides the copied ones: each store's own migration history and
#: SQLite's full-text indexes (and their shadow tables).
NOT_COPIED = (
    "migrations",
    "scrubs_due",  # the source's own files' scrub: a copy is written without the freed text
    "messages_fts",
    "messages_ctx_fts",
    "messages_trigram",
    "summaries_fts",
    "summaries_trigram",
)

Rows = dict[str, list[tuple[Any, ...]]]


def answer(request: SummaryRequest) -> str:
    """A summary for compaction, the JSON object a session summary asks for."""
    if request.kind == "session":
        return json.dumps(
            {
                "overview": "The agent added pagination and fixed the cache.",
                "topics": ["pagination"],
                "decisions": ["Cursor pagination because offsets drift."],
                "code_references": ["src/inventory/api.py"],
                "key_points": ["Tests pass."],
            }
        )
    return f"Summary of {len(request.sources)} item(s): " + " ".join(s.ref for s in request.sources)


def tool_chat(n: int) -> list[dict[str, Any]]:
    """A user turn, an assistant tool call and its result (every fifth one a large file),
    with text that tests exact storage: NUL, PostgreSQL's escape character, non-ASCII."""
    body = "x" * 4000 if n % 5 == 0 else f"def handler_{n}(): return {n}"
    # ids whose order depends on the collation: "call_B0" < "call_ab1" byte-wise only
    call = f"call_{'ab' if n % 2 else 'B'}{n}"
    return [
        {"role": "user", "content": f"turn {n}: read handler {n} \x00 \ue000 zqxjk{n} ünï"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"n": n})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": body},
        {"role": "assistant", "content": f"handler {n} read; zqxjk{n} noted"},
    ]


@pytest.fixture
def redact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VARIABLE, new_key())


def open_engine(target: str) -> Engine:
    return Engine.open(target, config=CONFIG, summarizer=ScriptedSummarizer(default=answer))


def build_source(target: str, tmp_path: Path) -> None:
    """A store with a row in every table the copy covers."""
    transcript = write_session(
        tmp_path / "session.jsonl", 25, session_id="imported", format="claude_code"
    )
    with open_engine(target) as engine:
        engine.import_path(transcript)
        engine.ingest("team\x1fs1", {"role": "user", "content": "a team's turn"})  # a namespace's
        for n in range(12):
            engine.ingest_batch("tools", tool_chat(n))
        engine.ingest("tools", {"role": "user", "content": f"deploy with {SECRET}"})
        engine.ingest("tools", {"role": "user", "content": "one more thing"})
        for session in ("imported", "tools"):
            engine.compact(session)
        leaf = engine.store.live_summaries(None, depth=0)[0]
        engine.rewrite([leaf.summary_id], apply=True)
        engine.create_grant("tools", purpose="sub-agent")
        engine.summarize_session("imported")
        engine.pop_context("tools")
        engine.forget("tools", matching="turn 3: read handler 3")  # a tombstone, the log
        engine.store.mask_salt()  # the store's own key (made when a first secret is masked)
        engine.create_token(namespace="team", role="read", actor="local:test")  # and its audit
        # The imported session's old tool outputs archived (its rows, the archives').
        policy = RetentionConfig(archive_after_days=1, kinds=("tool_outputs",))
        assert engine.prune(policy=policy, reclaim=False).messages > 0
        engine.store.catch_up_indexes()


@pytest.fixture
def source(tmp_path: Path, redact_key: None) -> str:
    path = str(tmp_path / "source.db")
    build_source(path, tmp_path)
    return path


@pytest.fixture
def pg_url() -> Iterator[Callable[[], str]]:
    """``pg_url()``: a URL of one more fresh PostgreSQL schema (skips without a server)."""
    base = postgres_base_url()
    with ExitStack() as stack:
        yield lambda: stack.enter_context(postgres_schema(base))


@contextmanager
def opened(*targets: str) -> Iterator[list[Store]]:
    stores = [open_store(t) for t in targets]
    try:
        yield stores
    finally:
        for store in stores:
            store.close()


def contents(target: str) -> Rows:
    """Every copied table's rows (generated columns left out), in key order."""
    with opened(target) as (store,):
        out = {}
        for table in TABLES:
            rows = store.fetchall(f"SELECT {table.column_list} FROM {table.name}")
            key = table.positions(table.key)
            out[table.name] = sorted(rows, key=lambda r, key=key: tuple(r[i] for i in key))
        return out


def migrate(source: str, target: str, **kwargs: Any) -> Any:
    with opened(source, target) as (src, dst):
        # Where an engine on each would keep its archive files (the copy brings them).
        for store in (src, dst):
            store.archive_dir = archive_dir_for(CONFIG, files_dir_for(CONFIG, store))
        return migrate_store(src, dst, **kwargs)


def total_rows(rows: Rows) -> int:
    return sum(len(r) for r in rows.values())


# --- what a copy keeps ----------------------------------------------------------------------


def test_the_source_has_a_row_in_every_copied_table(source: str) -> None:
    rows = contents(source)
    assert [name for name, found in rows.items() if not found] == []
    summaries = {r[1]: r for r in rows["summaries"]}
    assert any(r[15] for r in summaries.values()), "a rewritten summary names its successor"
    assert any(r[4] >= 1 for r in summaries.values()), "condensed summaries exist"
    assert isinstance(rows["redacted_originals"][0][1], bytes)


def test_a_round_trip_sqlite_postgres_sqlite_keeps_every_row(
    source: str, pg_url: Callable[[], str], tmp_path: Path
) -> None:
    pg, back = pg_url(), str(tmp_path / "back.db")
    report = migrate(source, pg, batch=50)
    assert report.verified and not report.resumed
    assert report.copied == report.rows == total_rows(contents(source))
    again = migrate(pg, back, batch=7)
    assert again.verified and again.copied == report.rows

    original = contents(source)
    assert contents(pg) == original
    assert contents(back) == original
    with opened(back) as (store,):
        assert doctor.check(store) == []
        (sealed,) = store.fetchall("SELECT sealed FROM redacted_originals")[0]
        assert isinstance(sealed, bytes)


def test_the_postgres_copy_assembles_greps_and_reveals_like_the_source(
    source: str, pg_url: Callable[[], str]
) -> None:
    pg = pg_url()
    migrate(source, pg)
    with open_engine(source) as old, open_engine(pg) as new:
        for session in ("imported", "tools"):
            assert new.assemble(session, 8_000).messages == old.assemble(session, 8_000).messages
            assert new.context(session) == old.context(session)
        # (Newest first: a word where it was said. Ranked, SQLite also counts a neighbour's
        # words past a NUL, where PostgreSQL's surroundings stop: store/surroundings.py.)
        searches: list[tuple[str, Mode]] = [("zqxjk7", "full_text"), ("handler [0-9]+", "regex")]
        for pattern, mode in searches:
            hits = {h.id for h in old.grep(pattern, mode=mode, sort="recency", limit=200).hits}
            assert hits
            again = new.grep(pattern, mode=mode, sort="recency", limit=200).hits
            assert {h.id for h in again} == hits
        (redacted,) = new.store.fetchall("SELECT message_id FROM redacted_originals")[0]
        assert new.reveal(redacted) == old.reveal(redacted)
        summary = new.store.live_summaries(None, depth=1)[0]
        assert new.describe(summary.summary_id) == old.describe(summary.summary_id)


def test_new_writes_to_a_postgres_copy_get_ids_after_the_copied_ones(
    source: str, pg_url: Callable[[], str]
) -> None:
    pg = pg_url()
    migrate(source, pg)
    with opened(source) as (src,):
        ((last_message, last_part, last_conv, last_rowid),) = src.fetchall(
            "SELECT (SELECT max(message_id) FROM messages), (SELECT max(part_id) FROM"
            " message_parts), (SELECT max(conversation_id) FROM conversations),"
            " (SELECT max(rowid) FROM summaries)"
        )
    with open_engine(pg) as engine:
        added = engine.ingest_batch("tools", tool_chat(100) + tool_chat(101))
        assert added.message_ids[0] == last_message + 1
        fresh = engine.ingest("brand-new", {"role": "user", "content": "hello"})
        assert fresh.conversation_id == last_conv + 1
        engine.compact("tools")
        assert engine.store.fetchall(
            "SELECT min(part_id) FROM message_parts WHERE message_id >= ?", (last_message + 1,)
        ) == [(last_part + 1,)]
        ((new_summaries,),) = engine.store.fetchall(
            "SELECT count(*) FROM summaries WHERE rowid > ?", (last_rowid,)
        )
        assert new_summaries > 0
        assert doctor.check(engine.store) == []


def test_a_sqlite_copy_is_searchable_and_takes_new_writes(source: str, tmp_path: Path) -> None:
    copy = str(tmp_path / "copy.db")
    migrate(source, copy, batch=13)
    assert contents(copy) == contents(source)
    with open_engine(source) as old, open_engine(copy) as new:
        hits = {h.id for h in old.grep("zqxjk3").hits}
        assert hits and {h.id for h in new.grep("zqxjk3").hits} == hits
        before = new.store.fetchall("SELECT max(message_id) FROM messages")[0][0]
        assert new.ingest("tools", {"role": "user", "content": "x"}).message_ids == (before + 1,)
        assert doctor.check(new.store) == []


def copied_columns() -> dict[str, list[str]]:
    return {t.name: sorted(c.strip('"') for c in t.columns) for t in TABLES}


def test_the_column_lists_name_every_column_of_the_sqlite_schema() -> None:
    with opened(":memory:") as (lite,):
        names = [r[0] for r in lite.fetchall("SELECT name FROM sqlite_master WHERE type='table'")]
        found = {
            n: sorted(
                [r[1] for r in lite.fetchall(f"PRAGMA table_info({n})")]
                + (["rowid"] if n == "summaries" else [])  # implicit in SQLite
            )
            for n in names
            if not n.startswith(NOT_COPIED)
        }
    assert found == copied_columns()


def test_the_column_lists_name_every_column_of_the_postgres_schema(
    pg_url: Callable[[], str],
) -> None:
    found: dict[str, list[str]] = {}
    with opened(pg_url()) as (pg,):
        for table, column in pg.fetchall(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema()"
            " AND column_name NOT IN ('content_tsv', 'context_tsv')"
        ):
            if table not in NOT_COPIED:
                found.setdefault(table, []).append(column)
    assert {t: sorted(c) for t, c in found.items()} == copied_columns()


# --- interrupted copies -----------------------------------------------------------------------


def failing(store: Store, at: int) -> Callable[[], AbstractContextManager[Any]]:
    """*store*'s transactions, the *at*-th of which fails after doing its writes."""
    real = store.transaction
    calls = 0

    @contextmanager
    def transaction() -> Iterator[Any]:
        nonlocal calls
        calls += 1
        with real() as conn:
            yield conn
            if calls == at:
                raise RuntimeError(f"injected failure in transaction {at}")

    return transaction


@pytest.mark.parametrize("direction", ["sqlite->postgres", "postgres->sqlite"])
def test_a_copy_that_failed_in_the_middle_resumes_to_the_same_result(
    direction: str,
    source: str,
    pg_url: Callable[[], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if direction == "postgres->sqlite":
        pg = pg_url()
        migrate(source, pg)
        origin, target = pg, str(tmp_path / "target.db")
    else:
        origin, target = source, pg_url()
    expected = contents(origin)
    with opened(origin, target) as (src, dst):
        monkeypatch.setattr(dst, "transaction", failing(dst, at=3))
        with pytest.raises(RuntimeError, match="transaction 3"):
            migrate_store(src, dst, batch=40)
    partial = contents(target)
    # the first two batches were committed: the conversations, 40 messages
    assert partial["conversations"] == expected["conversations"]
    assert partial["messages"] == expected["messages"][:40]
    assert all(partial[t.name] == [] for t in TABLES[2:] if not t.seeded)
    missing = sum(len(expected[t]) - len(partial[t]) for t in expected if t != "index_state")
    report = migrate(origin, target, batch=40)
    assert report.resumed and report.verified
    assert report.copied == missing + (partial["index_state"] != expected["index_state"])
    assert contents(target) == expected
    again = migrate(origin, target, batch=40)
    assert again.copied == 0 and contents(target) == expected


#: Text primary keys of a PostgreSQL source, given an ordering unlike SQLite's (a database
#: whose default collation is a language's): a copy must continue in the source's order.
TEXT_KEYS = (
    ("tool_executions", "execution_id"),
    ("grants", "grant_id"),
    ("large_files", "file_id"),
    ("session_summaries", "session_summary_id"),
)


@pytest.mark.parametrize("direction", ["sqlite->postgres", "postgres->sqlite"])
def test_a_copy_interrupted_after_every_batch_resumes_each_time(
    direction: str,
    source: str,
    pg_url: Callable[[], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if direction == "postgres->sqlite":
        import psycopg

        pg = pg_url()
        migrate(source, pg)
        with psycopg.connect(pg, autocommit=True) as conn:
            for table, column in TEXT_KEYS:
                conn.execute(
                    f'ALTER TABLE {table} ALTER COLUMN {column} TYPE text COLLATE "en-x-icu"'
                )
        origin, target = pg, str(tmp_path / "target.db")
    else:
        origin, target = source, pg_url()
    expected = contents(origin)
    wanted = sum(len(rows) for name, rows in expected.items() if name != "index_state")
    runs = 0
    while True:  # every run commits one batch, then fails in its second transaction
        with opened(origin, target) as (src, dst):
            monkeypatch.setattr(dst, "transaction", failing(dst, at=2))
            try:
                migrate_store(src, dst, batch=7)
            except RuntimeError:
                runs += 1
            else:
                break
        have = contents(target)
        if sum(len(rows) for name, rows in have.items() if name != "index_state") == wanted:
            break
        assert runs < 500
    assert runs > wanted // 7
    report = migrate(origin, target, batch=7)
    assert report.resumed and report.verified
    assert contents(target) == expected


def test_a_killed_migration_command_resumes_without_duplicates(
    source: str, pg_url: Callable[[], str], run_cli: Any, tmp_path: Path
) -> None:
    target = pg_url()
    expected = contents(source)
    errors = tmp_path / "child.stderr"
    command = [sys.executable, "-c", "from lossless.cli.main import main; main()"]
    with errors.open("w") as err:
        proc = subprocess.Popen(
            [*command, "migrate-store", source, target, "--batch", "1"],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            with opened(target) as (watch,):
                deadline = time.monotonic() + 60
                # Wait (bounded) until the copy is well into the messages, then kill -9 it.
                while watch.fetchall("SELECT count(*) FROM messages")[0][0] < 20:
                    assert proc.poll() is None, errors.read_text()
                    assert time.monotonic() < deadline, "the copy did not start within 60 s"
                    time.sleep(0.01)
        finally:
            proc.kill()
            code = proc.wait(timeout=30)
    assert code == -signal.SIGKILL
    partial = contents(target)
    assert 20 <= len(partial["messages"]) < len(expected["messages"])
    assert partial["summaries"] == []

    res = run_cli("migrate-store", source, target, "--batch", "50")
    assert res.code == 0, res
    assert "finished the interrupted copy" in res.out
    assert "verified: row counts match, doctor clean" in res.out
    assert contents(target) == expected


# --- refusals -----------------------------------------------------------------------------------


def test_a_target_holding_another_store_is_refused_and_left_unchanged(
    source: str, pg_url: Callable[[], str], run_cli: Any
) -> None:
    other = pg_url()
    with open_engine(other) as engine:
        engine.ingest_batch("someone-else", tool_chat(1))
    before = contents(other)
    with pytest.raises(MigrationError, match="conversation 1 is session 'someone-else'"):
        migrate(source, other)
    res = run_cli("migrate-store", source, other)
    assert res.code == 2
    assert "not part of a copy" in res.err
    assert contents(other) == before


def test_a_copy_written_to_since_is_refused(source: str, tmp_path: Path) -> None:
    copy = str(tmp_path / "copy.db")
    migrate(source, copy)
    with open_engine(copy) as engine:
        engine.ingest("tools", {"role": "user", "content": "written to the copy"})
    before = contents(copy)
    # refused at the first row that differs: the conversation's context changed (its version)
    with pytest.raises(MigrationError, match=r"conversations differs from the source.s"):
        migrate(source, copy)
    assert contents(copy) == before


def test_stores_with_different_migrations_are_refused(source: str, tmp_path: Path) -> None:
    target = str(tmp_path / "newer.db")
    with opened(target) as (store,), store.transaction() as conn:
        conn.execute("INSERT INTO migrations (name, applied_at) VALUES ('m999_future', 'now')")
    with pytest.raises(MigrationError, match="only the target has m999_future"):
        migrate(source, target)
    assert total_rows(contents(target)) == 1  # only the schema's own index_state row


def test_a_source_written_during_the_copy_fails_the_check(source: str, tmp_path: Path) -> None:
    writer = open_engine(source)
    written: list[int] = []

    def write_once(p: MigrationProgress) -> None:
        if p.table == "summaries" and not written:
            written.extend(writer.ingest("tools", {"role": "user", "content": "late"}).message_ids)

    try:
        # the copy is of the moment it began; the check counts the source as it is now
        with pytest.raises(CopyMismatchError, match=r"messages has \d+ rows in the source"):
            migrate(source, str(tmp_path / "copy.db"), progress=write_once)
    finally:
        writer.close()
    assert written


def test_the_same_store_as_source_and_target_is_refused(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(source).parent)
    with pytest.raises(MigrationError, match="the same store"):
        migrate(source, f"./{Path(source).name}")


# --- the command ----------------------------------------------------------------------------------


def test_the_command_shows_progress_and_a_summary(
    source: str, tmp_path: Path, run_cli: Any
) -> None:
    target = str(tmp_path / "cli.db")
    rows = total_rows(contents(source))
    res = run_cli("migrate-store", source, f"sqlite:///{target}", "--batch", "25")
    assert res.code == 0, res
    assert f"{rows}/{rows} rows" in res.err
    assert f"copied {source} → {target}: {rows:,} rows" in res.out
    for line in ("messages", "summaries", "redacted_originals"):
        assert line in res.out
    assert "verified: row counts match, doctor clean" in res.out
    assert f"copy {source}-files to {target}-files" in res.out

    again = run_cli("migrate-store", source, target, "--json")
    assert again.code == 0, again
    data = json.loads(again.out)
    assert data["verified"] and data["resumed"] and data["copied"] == 0
    assert {t["table"]: t["target_rows"] for t in data["tables"]}["messages"] == len(
        contents(source)["messages"]
    )


def test_progress_reaches_every_row(source: str, tmp_path: Path) -> None:
    seen: list[MigrationProgress] = []
    report = migrate(source, str(tmp_path / "p.db"), batch=100, progress=seen.append)
    assert seen[0].done == 0 and seen[-1].done == seen[-1].total == report.rows
    assert [p.done for p in seen] == sorted(p.done for p in seen)


def test_bad_urls_and_missing_sources_give_clear_errors(
    source: str, tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = run_cli("migrate-store", source, "mysql://u@h/db")
    assert res.code == 2 and "is not a store" in res.err
    res = run_cli("migrate-store", str(tmp_path / "nope.db"), str(tmp_path / "t.db"))
    assert res.code == 2 and "does not exist" in res.err
    assert not (tmp_path / "t.db").exists()
    monkeypatch.setattr("lossless.store.postgres.CONNECT_TIMEOUT", 0.5)
    res = run_cli("migrate-store", source, "postgresql://nobody@127.0.0.1:9/none")
    assert res.code == StoreError.exit_code and "cannot connect" in res.err
    res = run_cli("migrate-store", source, str(tmp_path / "t.db"), "--batch", "0")
    assert res.code == 2 and "--batch" in res.err
