"""What only the PostgreSQL back end has to prove: locks across connections (as across hosts),
its own schema and indexes, exact text, clear errors. The shared behaviour suite runs on it
through the ``db``/``engine`` fixtures."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import postgres_base_url, postgres_schema
from lossless import Config, Engine, StoreError
from lossless.retrieval.grep import GrepError
from lossless.store import open_store
from lossless.store.activity import requests_sql
from lossless.store.pg_migrations import PG_MIGRATIONS
from lossless.store.postgres import bind, prepare, redact_url, translate


@pytest.fixture
def url() -> Iterator[str]:
    with postgres_schema(postgres_base_url()) as target:
        yield target


def test_a_held_conversation_blocks_its_writers_on_other_hosts_but_no_one_else(
    url: str,
) -> None:
    # Two engines are two connection pools: what two hosts sharing the database would be.
    with Engine.open(url, config=Config()) as host_a, Engine.open(url, config=Config()) as host_b:
        busy = host_a.conversation("busy", create=True)
        host_b.conversation("other", create=True)
        holding, release = threading.Event(), threading.Event()
        other_done, busy_done = threading.Event(), threading.Event()

        def hold() -> None:
            with host_a.store.transaction() as conn:
                host_a.store._lock_conversation(conn, busy.conversation_id)
                holding.set()
                release.wait(timeout=30)

        def write(session: str, done: threading.Event) -> None:
            host_b.ingest(session, {"role": "user", "content": f"into {session}"})
            done.set()

        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(timeout=10)
        threading.Thread(target=write, args=("other", other_done)).start()
        waiter = threading.Thread(target=write, args=("busy", busy_done))
        waiter.start()
        assert other_done.wait(timeout=10), "a write to another conversation waited"
        assert not busy_done.wait(timeout=0.5), "a write to the held conversation did not wait"
        release.set()
        holder.join(timeout=10)
        assert busy_done.wait(timeout=10)
        waiter.join(timeout=10)
        assert [m.seq for m in host_a.messages("busy")] == [1]


def test_the_schema_has_the_word_and_trigram_indexes_and_every_migration(url: str) -> None:
    store = open_store(url)
    try:
        assert store.backend == "postgresql"
        assert store.migrate() == []  # all applied on open, none twice
        assert store.applied_migrations() == [name for name, _ in PG_MIGRATIONS]
        indexes = dict(
            store.fetchall(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
            )
        )
        for name in ("messages_fts", "summaries_fts"):
            assert "gin (content_tsv)" in indexes[name]
        for name in ("messages_trigram", "summaries_trigram"):
            assert "gin (content gin_trgm_ops)" in indexes[name]
        assert store.fts_problems() == []
        store.fetchall("SELECT 1")  # reads still work after the checks
    finally:
        store.close()


def test_a_missing_search_index_is_reported_and_rebuilt(url: str) -> None:
    with Engine.open(url, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "the flaky deploy script"})
        with engine.store.transaction() as conn:
            conn.execute("DROP INDEX messages_trigram")
        assert ("messages_trigram", "-", "the index is missing") in engine.store.fts_problems()
        engine.store.rebuild_fts()
        assert engine.store.fts_problems() == []
        assert [h.id for h in engine.grep("lak", conversation="s").hits] == ["msg#1"]


def test_a_turn_is_indexed_with_its_surroundings_as_a_rebuild_would(url: str) -> None:
    # A turn's messages get their neighbours' words as they are inserted (the next one given
    # with the row); a large batch gets them after, set-based. Either way, what the doctor
    # compares them with (the words the stored text around each makes) must agree.
    texts = ["alpha\x00hidden tail", "\ue000 bravo", "charlie " * 200, "delta", "echo"]
    with Engine.open(url, config=Config()) as engine:
        for n in range(6):
            engine.ingest_batch(
                "s",
                [{"role": "user", "content": f"{texts[n % 5]} {n}"}]
                + [{"role": "assistant", "content": f"{t} reply {n}"} for t in texts[: n % 3]],
            )
            if n == 2:
                engine.rename("s", "Harbour crane plans")  # the title is among the words
        engine.ingest_batch("s", [{"role": "user", "content": f"bulk {i}"} for i in range(80)])
        engine.ingest_batch("s", [{"role": "user", "content": "after the bulk"}])
        assert engine.store.fts_problems() == []


@pytest.mark.parametrize(
    "text",
    ["nul\x00inside", "\ue000 private use", "both \ue0000 \x00\ue000", "plain"],
)
def test_text_comes_back_exactly_even_with_nul_characters(url: str, text: str) -> None:
    with Engine.open(url, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": f"before {text} after"})
        (message,) = engine.messages("s")
        assert message.content == f"before {text} after"
        assert engine.assemble("s", token_budget=1000).messages[0]["content"][0]["text"] == (
            f"before {text} after"
        )


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "a & | ! b", "foo:* <-> bar", "-(deploy)", "or or and"],
)
def test_user_text_never_breaks_the_word_query(url: str, query: str) -> None:
    with Engine.open(url, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "deploy foo bar b a"})
        for sort in ("relevance", "recency"):
            refusal = ""
            try:
                engine.grep(query, conversation="s", sort=sort)  # whatever it finds
            except GrepError as exc:  # regex-looking text: the two modes explained
                refusal = str(exc)
            assert not refusal or "mode=regex" in refusal


def test_a_bad_url_says_what_is_wrong_without_the_password() -> None:
    with pytest.raises(StoreError, match=r"cannot connect to the PostgreSQL database") as info:
        open_store("postgresql://someone:s3cret-pass@127.0.0.1:1/nowhere?connect_timeout=2")
    assert "s3cret-pass" not in str(info.value)
    assert "someone:***@" in str(info.value)


def test_backup_points_to_postgresql_tools(url: str, tmp_path: Path) -> None:
    with Engine.open(url, config=Config()) as engine:
        with pytest.raises(StoreError, match="pg_dump"):
            engine.store.backup_to(tmp_path / "copy.dump")
        assert not (tmp_path / "copy.dump").exists()


def test_placeholders_are_translated_outside_quotes_only() -> None:
    assert translate("SELECT ? WHERE a LIKE '%?%' AND b = \"?\"") == (
        "SELECT %s WHERE a LIKE '%%?%%' AND b = \"?\""
    )
    assert redact_url("postgresql://u:p@h/db") == "postgresql://u:***@h/db"


def test_a_list_of_values_is_one_array_parameter_whatever_its_length(url: str) -> None:
    sql = "SELECT x FROM t WHERE a = ? AND x IN (?, ?, ?) AND y NOT IN (?,?) AND z IN (?)"
    text, groups = prepare(sql)
    assert text == ("SELECT x FROM t WHERE a = %s AND x = ANY(%s) AND y <> ALL(%s) AND z IN (%s)")
    assert bind([0, 1, 2, 3, "p", "q\x00", 9], groups) == [0, [1, 2, 3], ["p", "q\ue0000"], 9]
    assert prepare("SELECT 'IN (?, ?)', ? WHERE b LIKE '%s'")[1] == ()
    with Engine.open(url, config=Config()) as engine:
        ids = engine.ingest_batch("s", [{"role": "user", "content": f"m {i}"} for i in range(700)])
        wanted = list(reversed(ids.message_ids))  # lists of 500 and 200 ids
        found = engine.messages_by_id(wanted)
        assert [m.message_id for m in found] == wanted
        assert [m.content for m in found][:2] == ["m 699", "m 698"]


def test_one_process_compacts_a_conversation_and_a_turn_elsewhere_leaves_it_to_that_one(
    url: str,
) -> None:
    config = Config().replace(fresh_tail_count=2, leaf_chunk_tokens=200, leaf_target_tokens=40)
    with Engine.open(url, config=config) as host_a, Engine.open(url, config=config) as host_b:
        for i in range(12):
            host_a.ingest("s", {"role": "user", "content": f"note {i}: " + "words " * 60})
        conv = host_a.conversation("s").conversation_id
        holding, release = threading.Event(), threading.Event()

        def compact_slowly() -> None:
            with host_a.store.compaction_lock(conv) as mine:
                assert mine
                holding.set()
                release.wait(timeout=30)

        holder = threading.Thread(target=compact_slowly)
        holder.start()
        assert holding.wait(timeout=10)
        turn = host_b.after_turn("s", [{"role": "user", "content": "one more"}])
        assert turn.compaction is not None and turn.compaction.passes == []  # left to host A
        assert all(i.summary_id is None for i in host_b.context("s"))
        waited = threading.Event()

        def compact_by_hand() -> None:
            host_b.compact("s")
            waited.set()

        manual = threading.Thread(target=compact_by_hand)
        manual.start()
        assert not waited.wait(timeout=0.5), "a manual compaction did not wait for host A"
        release.set()
        holder.join(timeout=10)
        assert waited.wait(timeout=30)
        manual.join(timeout=10)
        assert any(i.summary_id is not None for i in host_b.context("s"))


def test_two_stores_in_two_schemas_of_one_database_both_work() -> None:
    """Each store's search path is its own schema alone (no ``public``): the trigram indexes
    are made with pg_trgm wherever the database has it, and dropping one store's schema
    leaves the other whole."""
    import uuid

    import psycopg

    base = postgres_base_url()
    names = [f"lossless_two_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    sep = "&" if "?" in base else "?"
    with psycopg.connect(base, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE SCHEMA "{name}"')
    try:
        engines = [
            Engine.open(f"{base}{sep}options=-csearch_path%3D{name}", config=Config())
            for name in names
        ]
        for n, engine in enumerate(engines):
            engine.ingest("s", {"role": "user", "content": f"store {n} uses getTablePathName"})
            [hit] = engine.grep("ablePath", conversation="s").hits  # the trigram index
            assert hit.snippet == f"store {n} uses getTablePathName"
            assert engine.check() == []
            engine.close()
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{names[0]}" CASCADE')
        with Engine.open(f"{base}{sep}options=-csearch_path%3D{names[1]}", config=Config()) as e:
            assert [h.id for h in e.grep("ablePath", conversation="s").hits] == ["msg#1"]
            assert e.check() == []
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_a_schema_without_a_store_is_an_error_when_asked_not_to_create(url: str) -> None:
    from lossless import NoStore

    with pytest.raises(NoStore, match=r"no lossless store in .*search_path"):
        Engine.open(url, config=Config(), create=False)
    with Engine.open(url, config=Config()) as engine:  # made when asked to
        assert engine.conversations() == []
    with Engine.open(url, config=Config(), create=False) as engine:  # then found
        assert engine.conversations() == []


def test_a_conversations_first_and_latest_requests_are_read_in_order_whatever_the_statistics(
    url: str,
) -> None:
    # Compaction warms the resume summary, which asks for a conversation's first and latest
    # requests. On tables never analyzed (autovacuum off) the planner reckons a conversation a
    # few rows long, collects all of it through a bitmap and sorts it: a read that grew with
    # the conversation (0.5 s at 400,000 messages) on every compaction.
    with Engine.open(url, config=Config()) as engine:
        turns = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i} of the plan"}
            for i in range(6_000)
        ]
        engine.ingest_batch("s", turns)
        conv = engine.conversation("s").conversation_id
        store = engine.store
        for newest_first in (False, True):
            sql = requests_sql(newest_first=newest_first)
            params = (conv, 5_000, 20)
            plain = "\n".join(r[0] for r in store.fetchall(f"EXPLAIN {sql}", params))
            assert "Sort" in plain  # the statistics' plan: every row collected, then sorted
            walked = "\n".join(r[0] for r in store.fetch_in_order(f"EXPLAIN {sql}", params))
            assert "Index Scan" in walked and "Sort" not in walked and "Bitmap" not in walked
            found = store.user_requests(conv, 5_000, newest_first=newest_first, limit=20)
            seqs = [r.seq for r in found]
            expected = list(range(4_999, 4_959, -2)) if newest_first else list(range(1, 41, 2))
            assert seqs == expected


def test_a_conversations_context_is_read_by_its_index_whatever_dead_rows_it_left(
    url: str,
) -> None:
    # Each message's context item is deleted when a summary replaces it; without autovacuum
    # (as on the test server) the table keeps every dead row, and statistics that count the
    # few live ones make the planner read the table whole for one conversation's items: a
    # read that grew with the history (25 ms at 1M messages) in every turn that compacts.
    import psycopg

    from lossless.store.context import CONTEXT_READ

    config = Config(leaf_chunk_tokens=400, fresh_tail_count=4)
    with Engine.open(url, config=config) as engine:
        for n in range(40):
            engine.ingest_batch(
                "s",
                [
                    {"role": "user", "content": f"question {n} about the harbour crane"},
                    {"role": "assistant", "content": f"answer {n}: the crane moves at dawn"},
                ],
            )
            engine.compact("s")
        conv = engine.conversation("s").conversation_id
        store = engine.store
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("VACUUM ANALYZE context_items")
        explain = f"EXPLAIN {CONTEXT_READ}"
        plain = "\n".join(r[0] for r in store.fetchall(explain, (conv,)))
        assert "Seq Scan on context_items" in plain  # what the statistics choose
        with store.read() as conn:
            ours = "\n".join(
                r[0] for r in store._fetch_without_in(conn, ("seqscan",), explain, (conv,))
            )
        assert "context_items_pkey" in ours and "Seq Scan on context_items" not in ours
        # A conversation's writes (compaction's among them) read its items by their keys.
        stretch = (
            "EXPLAIN SELECT ordinal, message_id, summary_id FROM context_items"
            " WHERE conversation_id = ? AND ordinal BETWEEN ? AND ?"
        )
        assert "Seq Scan" in "\n".join(r[0] for r in store.fetchall(stretch, (conv, 0, 10)))
        with store.transaction() as conn:
            store._lock_conversation(conn, conv)
            plan = "\n".join(r[0] for r in conn.execute(stretch, (conv, 0, 10)).fetchall())
        assert "Seq Scan" not in plan
        items = store.context(conv)
    assert [i.item_type for i in items].count("summary") >= 1
    with Engine.open(url, config=config) as reader:  # read afresh: the same items
        assert reader.store.context(conv) == items


def test_newest_first_finds_a_common_word_past_newest_rows_that_hold_none(url: str) -> None:
    # A common word is looked for by walking the newest rows; when a host's last turns were
    # about something else, the walk goes on in longer stretches (it had jumped to sorting
    # every older match: 1.2 s at 10M messages for a word in 2% of them). No row between
    # stretches may be skipped: every older message holds the word, so a gap would show.
    older = [{"role": "user", "content": f"crane {i} lifts the container"} for i in range(2_400)]
    newer = [{"role": "assistant", "content": f"a quiet harbour {i}"} for i in range(600)]
    with Engine.open(url, config=Config()) as engine:
        engine.ingest_batch("s", older)
        engine.ingest_batch("s", newer)
        store = engine.store
        asked: list[str] = []
        search_rows = store._search_rows

        def spy(sql: str, params: Any, **kw: Any) -> list[tuple[Any, ...]]:
            asked.append(sql)
            return search_rows(sql, params, **kw)

        store._search_rows = spy  # type: ignore[method-assign]
        found = engine.grep("crane", conversation="s", scope="messages", sort="recency", limit=40)
        ids = [m.message_id for m in engine.messages("s")][: len(older)]
    assert [h.id for h in found.hits] == [f"msg#{i}" for i in reversed(ids[-40:])]
    assert len(asked) >= 2  # the newest stretch, then a longer one before it
    assert not any("|| '') DESC" in sql for sql in asked)  # no sort of every older match


def test_a_batchs_own_words_are_the_texts_and_the_doctor_checks_them(url: str) -> None:
    # A batch writes each message's own words with its neighbours' (made once for a short
    # text); every other write gets them from the trigger. Either way they are the words the
    # stored text makes, and a row whose words are not is found and mended.
    texts = ["short and plain", "with a NUL\x00inside it", "long " * 100, "\ue000 odd"]
    with Engine.open(url, config=Config()) as engine:
        engine.ingest_batch("s", [{"role": "user", "content": t} for t in texts])
        engine.ingest("s", {"role": "assistant", "content": "one message alone"})
        store = engine.store
        assert store.fts_problems() == []
        assert ["inside" in h.snippet for h in engine.grep("inside", conversation="s").hits] == [
            True
        ]
        with store.transaction() as conn:
            conn.execute(
                "UPDATE messages SET content_tsv = to_tsvector('english', 'unrelated')"
                " WHERE seq = 3"
            )
        assert [p[0] for p in store.fts_problems()] == ["messages_fts"]
        store.rebuild_fts()
        assert store.fts_problems() == []
        # a changed text (as forgetting writes one) gets its words again
        with store.transaction() as conn:
            conn.execute("UPDATE messages SET content = 'tombstone words' WHERE seq = 1")
        # (its neighbours' words are forgetting's to mend; its own are the trigger's)
        assert "messages_fts" not in [p[0] for p in store.fts_problems()]
        assert len(engine.grep("tombstone", conversation="s").hits) == 1


def test_a_pipelined_append_that_fails_leaves_nothing_and_the_store_goes_on(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # An append's statements go out together with its BEGIN and COMMIT (one round trip): a
    # statement the server refuses, or an error in the block, must roll back all of it,
    # and the connection must come back to the pool fit for the next write (the pool
    # would warn of a connection handed back inside a transaction).
    import logging

    import psycopg

    caplog.set_level(logging.WARNING, logger="psycopg")

    turn = [{"role": "user", "content": "the crane moves at dawn"}]
    with Engine.open(url, config=Config()) as engine:
        engine.ingest_batch("s", turn)
        before = [m.content for m in engine.messages("s")]
        cid = engine.conversation("s").conversation_id
        refused = pytest.raises(psycopg.errors.ForeignKeyViolation)
        with refused, engine.store.pipelined_transaction() as conn:
            engine.store._lock_conversation(conn, cid)
            conn.execute(
                "INSERT INTO context_items (conversation_id, ordinal, item_type, message_id,"
                " created_at) VALUES (?, 99, 'message', 999999, 'now')",
                (cid,),
            )  # no message 999999: refused by its foreign key, at the commit
        with pytest.raises(RuntimeError), engine.store.pipelined_transaction() as conn:
            conn.execute(
                "UPDATE conversations SET title = 'half' WHERE conversation_id = ?", (cid,)
            )
            raise RuntimeError("the caller gave up")
        assert [m.content for m in engine.messages("s")] == before
        assert engine.conversation("s").title != "half"
        engine.ingest_batch("s", [{"role": "assistant", "content": "and stops at noon"}])
        assert [m.content for m in engine.messages("s")] == [*before, "and stops at noon"]
        assert engine.store.fts_problems() == []
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
