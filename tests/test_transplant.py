"""Transplant: a conversation inherits another's compacted knowledge as rows of its own.

Expected values come from the source rows themselves (read with plain SQL), never from the
transplant code.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.doctor import check
from lossless.errors import ConflictError, StoreError
from lossless.summarize import ScriptedSummarizer
from lossless.transplant import TransplantError
from lossless.transplant import apply as apply_plan
from lossless.transplant import plan as make_plan

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)
TABLES = (
    "messages",
    "message_parts",
    "summaries",
    "summary_parents",
    "summary_messages",
    "context_items",
    "messages_fts_docsize",
    "summaries_fts_docsize",
)
#: PostgreSQL has no full-text tables: its word index is the ``content_tsv`` column, so a
#: full-text table's row count there is the count of indexed rows of its source table.
PG_FTS_COUNTS = {
    "messages_fts_docsize": "SELECT count(content_tsv) FROM messages",
    "summaries_fts_docsize": "SELECT count(content_tsv) FROM summaries",
}


def counter() -> Any:
    n = 0

    def text(request: Any) -> str:
        nonlocal n
        n += 1
        return f"Summary number {n} of {len(request.sources)} item(s)."

    return text


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    """``old`` is compacted two levels deep, with a tool call and a rare word below its
    summaries; ``new`` has a few messages of its own."""
    eng = Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer(default=counter()))
    for i in range(16):
        eng.ingest("old", {"role": "user", "content": f"old turn {i}: " + "planning work " * 8})
        if i == 2:
            eng.ingest(
                "old",
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Checking the quokka config."},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "read_file",
                            "input": {"path": "quokka.toml"},
                        },
                    ],
                },
            )
            eng.ingest(
                "old",
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "port=9043"}
                    ],
                },
            )
    eng.compact("old")
    for i in range(3):
        eng.ingest("new", {"role": "user", "content": f"new session turn {i}"})
    yield eng
    eng.close()


def rows(eng: Engine, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return eng.store.fetchall(sql, params)


def count_sql(eng: Engine, table: str) -> str:
    if eng.store.backend == "postgresql" and table in PG_FTS_COUNTS:
        return PG_FTS_COUNTS[table]
    return f"SELECT count(*) FROM {table}"


def snapshot(eng: Engine) -> dict[str, Any]:
    out: dict[str, Any] = {t: rows(eng, count_sql(eng, t))[0][0] for t in TABLES}
    out["context"] = rows(eng, "SELECT * FROM context_items ORDER BY conversation_id, ordinal")
    return out


def conv_id(eng: Engine, session: str) -> int:
    return eng.conversation(session).conversation_id


def source_context(eng: Engine, conv: int) -> list[tuple[str, str, int]]:
    return [
        tuple(r)  # type: ignore[misc]
        for r in rows(
            eng,
            "SELECT s.summary_id, s.content, s.depth FROM context_items ci"
            " JOIN summaries s ON s.summary_id = ci.summary_id"
            " WHERE ci.conversation_id = ? AND ci.item_type = 'summary' ORDER BY ci.ordinal",
            conv,
        )
    ]


def dag_of(eng: Engine, conv: int) -> list[tuple[str, int]]:
    return [
        (r[0], r[1])
        for r in rows(eng, "SELECT content, depth FROM summaries WHERE conversation_id = ?", conv)
    ]


def test_a_dry_run_reports_in_the_spec_shape_and_changes_nothing(engine: Engine) -> None:
    before = snapshot(engine)
    old, new = conv_id(engine, "old"), conv_id(engine, "new")
    planned = engine.transplant("old", "new")
    assert snapshot(engine) == before
    assert not planned.applied and planned.problem is None

    context = source_context(engine, old)
    data = planned.to_dict()
    assert [c["summary_id"] for c in data["context_summaries"]] == [c[0] for c in context]
    all_old = rows(
        engine,
        "SELECT depth, count(*) FROM summaries WHERE conversation_id = ? GROUP BY depth",
        old,
    )
    assert data["dag"]["by_depth"] == {str(d): n for d, n in all_old}
    covered = rows(
        engine,
        "SELECT count(DISTINCT sm.message_id) FROM summary_messages sm"
        " JOIN summaries s ON s.summary_id = sm.summary_id WHERE s.conversation_id = ?",
        old,
    )[0][0]
    assert data["messages"] == covered > 0
    assert data["target_context"] == {"summaries": 0, "messages": 3}
    tokens = rows(
        engine,
        "SELECT sum(s.token_count) FROM context_items ci JOIN summaries s"
        " ON s.summary_id = ci.summary_id WHERE ci.conversation_id = ?",
        old,
    )[0][0]
    assert data["token_overhead"] == tokens
    assert (data["source"], data["target"]) == (old, new)


def test_apply_copies_the_dag_and_messages_as_the_targets_own_rows(engine: Engine) -> None:
    old, new = conv_id(engine, "old"), conv_id(engine, "new")
    src_context = source_context(engine, old)
    src_dag = sorted(dag_of(engine, old))
    target_before = rows(
        engine,
        "SELECT message_id FROM context_items WHERE conversation_id = ? ORDER BY ordinal",
        new,
    )
    src_max_seq = rows(engine, "SELECT max(seq) FROM messages WHERE conversation_id = ?", new)[0][0]

    planned = engine.transplant("old", "new", apply=True)
    assert planned.applied

    # the context: copies of the source's context summaries first, then the target's items
    items = rows(
        engine,
        "SELECT item_type, summary_id, message_id FROM context_items"
        " WHERE conversation_id = ? ORDER BY ordinal",
        new,
    )
    n = len(src_context)
    copied = [engine.summary(sid) for _, sid, _ in items[:n]]
    assert [(s.content, s.depth) for s in copied] == [(c[1], c[2]) for c in src_context]
    assert all(s.conversation_id == new for s in copied)
    assert not {s.summary_id for s in copied} & {c[0] for c in src_context}
    assert [(m,) for _, _, m in items[n:]] == target_before

    # the whole DAG beneath, remapped, owned by the target
    assert sorted(dag_of(engine, new)) == src_dag
    assert (
        rows(
            engine,
            "SELECT count(*) FROM summary_parents sp"
            " JOIN summaries a ON a.summary_id = sp.summary_id"
            " JOIN summaries b ON b.summary_id = sp.parent_summary_id WHERE a.conversation_id = ?"
            " AND b.conversation_id = ?",
            new,
            new,
        )[0][0]
        == rows(
            engine,
            "SELECT count(*) FROM summary_parents sp"
            " JOIN summaries a ON a.summary_id = sp.summary_id"
            " WHERE a.conversation_id = ?",
            old,
        )[0][0]
    )

    # messages: same role, text and time, fresh ids, seq after the target's own
    src_msgs = rows(
        engine,
        "SELECT DISTINCT m.role, m.content, m.created_at FROM summary_messages sm"
        " JOIN messages m ON m.message_id = sm.message_id WHERE m.conversation_id = ?",
        old,
    )
    new_msgs = rows(
        engine,
        "SELECT role, content, created_at, seq FROM messages"
        " WHERE conversation_id = ? AND seq > ? ORDER BY seq",
        new,
        src_max_seq,
    )
    assert sorted(r[:3] for r in new_msgs) == sorted(src_msgs)
    assert [r[3] for r in new_msgs] == list(range(src_max_seq + 1, src_max_seq + 1 + len(src_msgs)))
    parts = rows(
        engine,
        "SELECT p.session_id, p.part_type, p.tool_call_id FROM message_parts p"
        " JOIN messages m ON m.message_id = p.message_id WHERE m.conversation_id = ?"
        " AND p.tool_call_id = 'toolu_1'",
        new,
    )
    assert sorted(parts) == [("new", "tool_call", "toolu_1"), ("new", "tool_result", "toolu_1")]

    assert check(engine.store) == []


def test_the_target_uses_the_copies_like_its_own(engine: Engine) -> None:
    planned = engine.transplant("old", "new", apply=True)
    new = conv_id(engine, "new")

    # grep finds the copied messages (full-text rows) within the target alone
    hits = engine.grep("quokka", conversation="new", family=False, scope="messages").hits
    assert hits and all(h.conversation_id == new for h in hits)
    sub = engine.grep("uokk", conversation="new", family=False, scope="messages").hits
    assert sub  # trigram rows too

    # describe and expand walk the copied DAG down to the copied messages
    top = next(i.summary_id for i in engine.context("new") if i.summary_id)
    assert top is not None
    described = engine.describe(top, conversation="new")
    assert described.to_dict()
    grant = engine.create_grant("new", family=False)
    expanded = engine.expand(grant.grant_id, [top], include_messages=True, token_cap=50_000)
    messages = [n for n in expanded.nodes if n.kind == "message"]
    assert messages and all(
        engine.get_message(int(n.id[4:])).conversation_id == new for n in messages
    )

    # assembly puts the transplanted summaries first (shown as they are, not unfolded)
    assembled = engine.assemble("new", token_budget=100_000, format="openai", fill=False)
    first = assembled.messages[0]
    assert "<summary" in json.dumps(first)

    # and the target compacts them further like any of its own summaries
    copies = set(planned.summary_map.values())
    for i in range(20):
        engine.ingest("new", {"role": "user", "content": f"more new work {i}: " + "steps " * 20})
    engine.compact("new")
    made_from_copies = [
        r[0]
        for r in rows(
            engine,
            "SELECT sp.summary_id, sp.parent_summary_id FROM summary_parents sp"
            " JOIN summaries c ON c.summary_id = sp.summary_id WHERE c.conversation_id = ?",
            new,
        )
        if r[1] in copies and r[0] not in copies
    ]
    assert made_from_copies, "compaction should condense the transplanted summaries"
    assert check(engine.store) == []


def test_transplanting_into_a_conversation_with_its_own_dag(engine: Engine) -> None:
    for i in range(16):
        engine.ingest("new", {"role": "user", "content": f"target turn {i}: " + "own work " * 8})
    engine.compact("new")
    new = conv_id(engine, "new")
    own = [(i.item_type, i.summary_id, i.message_id) for i in engine.context("new")]
    assert any(t == "summary" for t, _, _ in own)
    own_contents = [engine.summary(s).content if s else m for _, s, m in own]
    own_dag = rows(engine, "SELECT count(*) FROM summaries WHERE conversation_id = ?", new)[0][0]

    planned = engine.transplant("old", "new", apply=True)
    after = engine.context("new")
    n = len(planned.context_summaries)
    rest = [
        engine.summary(i.summary_id).content if i.summary_id else i.message_id for i in after[n:]
    ]
    assert rest == own_contents
    ordinals = [i.ordinal for i in after]
    assert ordinals == sorted(set(ordinals)) and ordinals[0] == 0  # sparse, in order
    assert check(engine.store) == []
    count = "SELECT count(*) FROM summaries WHERE conversation_id = ?"
    assert rows(engine, count, new)[0][0] == own_dag + len(planned.dag)


def test_a_second_transplant_is_refused_and_changes_nothing(engine: Engine) -> None:
    engine.transplant("old", "new", apply=True)
    before = snapshot(engine)
    planned = engine.transplant("old", "new")
    assert planned.problem is not None and "already holds" in planned.problem
    with pytest.raises(TransplantError, match="transplanted before"):
        engine.transplant("old", "new", apply=True)
    assert snapshot(engine) == before


def test_a_source_without_summaries_in_its_context_is_refused(engine: Engine) -> None:
    before = snapshot(engine)
    planned = engine.transplant("new", "old")
    assert planned.problem is not None and "no summaries in its context" in planned.problem
    with pytest.raises(TransplantError, match="nothing to transplant"):
        engine.transplant("new", "old", apply=True)
    with pytest.raises(TransplantError, match="same conversation"):
        engine.transplant("old", "old", apply=True)
    assert snapshot(engine) == before


def test_shared_source_messages_are_copied_once_and_repaired_content_is_what_is_copied(
    engine: Engine,
) -> None:
    old = conv_id(engine, "old")
    leaves = [
        r[0]
        for r in rows(
            engine,
            "SELECT summary_id FROM summaries"
            " WHERE conversation_id = ? AND kind = 'leaf' ORDER BY created_at",
            old,
        )
    ]
    first_msg = rows(
        engine,
        "SELECT message_id FROM summary_messages WHERE summary_id = ? ORDER BY ordinal",
        leaves[0],
    )[0][0]
    with engine.store.transaction() as conn:
        # a second leaf also covers the first leaf's first message, and a summary is repaired
        conn.execute("INSERT INTO summary_messages VALUES (?, ?, 99)", (leaves[1], first_msg))
        conn.execute(
            "UPDATE summaries SET content = 'Repaired: the quokka port is 9043.'"
            " WHERE summary_id = ?",
            (leaves[1],),
        )
    distinct = rows(
        engine,
        "SELECT count(DISTINCT sm.message_id) FROM summary_messages sm JOIN summaries s"
        " ON s.summary_id = sm.summary_id WHERE s.conversation_id = ?",
        old,
    )[0][0]
    new = conv_id(engine, "new")
    before = rows(engine, "SELECT count(*) FROM messages WHERE conversation_id = ?", new)[0][0]
    engine.transplant("old", "new", apply=True)
    after = rows(engine, "SELECT count(*) FROM messages WHERE conversation_id = ?", new)[0][0]
    assert after - before == distinct
    copied_first = rows(
        engine,
        "SELECT count(DISTINCT sm.summary_id) FROM summary_messages sm JOIN messages m"
        " ON m.message_id = sm.message_id WHERE m.conversation_id = ? AND m.content = ?",
        new,
        engine.get_message(first_msg).content,
    )[0][0]
    assert copied_first == 2  # both copied leaves point at the one copy
    assert (
        rows(
            engine,
            "SELECT count(*) FROM summaries"
            " WHERE conversation_id = ? AND content LIKE 'Repaired:%'",
            new,
        )[0][0]
        == 1
    )


def test_a_failure_in_the_middle_of_the_copy_changes_nothing(engine: Engine) -> None:
    midway = (
        "(SELECT count(*) FROM summaries)"
        "  > (SELECT count(*) FROM summaries WHERE conversation_id = 1) + 2"
    )
    with engine.store.transaction() as conn:
        if engine.store.backend == "postgresql":
            conn.execute(
                "CREATE FUNCTION fail_midway() RETURNS trigger LANGUAGE plpgsql AS $$"
                f" BEGIN IF {midway} THEN RAISE EXCEPTION 'disk went away'; END IF;"
                " RETURN NEW; END $$"
            )
            conn.execute(
                "CREATE TRIGGER fail_midway BEFORE INSERT ON summary_messages"
                " FOR EACH ROW EXECUTE FUNCTION fail_midway()"
            )
        else:
            conn.execute(
                "CREATE TRIGGER fail_midway BEFORE INSERT ON summary_messages"
                f" WHEN {midway}"
                " BEGIN SELECT RAISE(ABORT, 'disk went away'); END"
            )
    before = snapshot(engine)
    with pytest.raises(StoreError, match="rolled back, nothing changed: disk went away"):
        engine.transplant("old", "new", apply=True)
    assert snapshot(engine) == before
    with engine.store.transaction() as conn:
        if engine.store.backend == "postgresql":
            conn.execute("DROP TRIGGER fail_midway ON summary_messages")
            conn.execute("DROP FUNCTION fail_midway()")
        else:
            conn.execute("DROP TRIGGER fail_midway")
    assert check(engine.store) == []
    engine.transplant("old", "new", apply=True)  # and it works once the fault is gone
    assert check(engine.store) == []


def test_a_source_that_changed_since_the_plan_is_a_conflict(engine: Engine) -> None:
    old, new = engine.conversation("old"), engine.conversation("new")
    planned = make_plan(engine.store, old, new)
    for i in range(20):
        engine.ingest("old", {"role": "user", "content": f"later {i}: " + "words " * 20})
    engine.compact("old")
    before = snapshot(engine)
    with pytest.raises(ConflictError, match="changed since the transplant was planned"):
        apply_plan(engine.store, planned)
    assert snapshot(engine) == before


def test_the_cli_dry_run_apply_and_refusal(run_cli, db: str, engine: Engine) -> None:  # type: ignore[no-untyped-def]
    dry = run_cli("--db", db, "transplant", "old", "new")
    assert dry.code == 0, dry
    assert "Transplant: conversation 1 → conversation 2" in dry.out
    assert "Source context summaries (" in dry.out and "Full DAG to copy:" in dry.out
    assert "Estimated token overhead in context: ~" in dry.out
    assert dry.out.rstrip().endswith("Run with --apply to execute.")
    applied = run_cli("--db", db, "transplant", "old", "new", "--apply", "--json")
    assert applied.code == 0, applied
    data = json.loads(applied.out)
    assert data["applied"] is True and len(data["summary_map"]) == data["dag"]["summaries"]
    again = run_cli("--db", db, "transplant", "old", "new", "--apply")
    assert again.code == 2 and "transplanted before" in again.err
    empty = run_cli("--db", db, "transplant", "new", "new")
    assert empty.code == 2 and "same conversation" in empty.err
    if engine.store.backend == "sqlite":
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    else:  # PostgreSQL checks its own pages; the store's invariants are the doctor's
        assert check(engine.store) == []


def test_a_large_transplant_is_fully_indexed_when_it_returns(db: str) -> None:
    # 64 or more copied messages are written as a large batch, whose substring and context
    # index entries come after its transaction: the transplant makes them before it returns
    # (no search makes them any more), so ranked search finds the copies at once.
    eng = Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer(default=counter()))
    try:
        for i in range(80):
            eng.ingest("big", {"role": "user", "content": f"big turn {i}: wombat ledger " * 3})
        eng.compact("big")
        eng.ingest("dest", {"role": "user", "content": "a session of its own"})
        plan = eng.transplant("big", "dest", apply=True)
        assert len(plan.message_ids) >= 64
        assert eng.store.pending_index_rows() == 0
        hits = eng.grep("wombat", conversation="dest", family=False, sort="relevance").hits
        assert hits
    finally:
        eng.close()
