"""``lossless import-store``: moving in from lossless-claw and hermes-lcm, on databases their
own code made (tests/fixtures/peers/README.md), checked message by message and summary by
summary against the source database, read here with plain SQL."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine

PEERS = Path(__file__).parent / "fixtures" / "peers"


def sample(name: str, dest: Path) -> Path:
    """A copy of a peer's sample store (in the repository, not in the sdist)."""
    source = PEERS / name
    if not source.exists():
        pytest.skip(f"{source} is not here: the peers' sample stores are in the repository only")
    return Path(shutil.copy(source, dest))


@pytest.fixture
def claw(tmp_path: Path) -> Path:
    return sample("lossless-claw-sample.db", tmp_path / "lcm.db")


@pytest.fixture
def hermes_lcm(tmp_path: Path) -> Path:
    return sample("hermes-lcm-sample.db", tmp_path / "hermes-lcm.db")


def rows(path: Path, sql: str, *args: object) -> list[sqlite3.Row]:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def test_lossless_claw_comes_over_with_its_dag_and_context(
    claw: Path, new_db: Callable[[], str]
) -> None:
    (conv,) = rows(claw, "SELECT * FROM conversations")
    session = conv["session_id"]
    source_messages = rows(claw, "SELECT * FROM messages ORDER BY seq")
    with Engine.open(new_db(), config=Config()) as engine:
        (report,) = engine.import_store("lossless-claw", claw)
        assert report.messages_imported == len(source_messages) == 26
        stored = engine.messages(session)
        # Message by message: the role, and every content block as lossless-claw kept it.
        by_source: dict[int, int] = {}
        for mine, theirs in zip(stored, source_messages, strict=True):
            by_source[theirs["message_id"]] = mine.message_id
            assert mine.external_id == f"lossless-claw:{theirs['message_id']}"
            parts = rows(
                claw,
                "SELECT * FROM message_parts WHERE message_id = ? ORDER BY ordinal",
                theirs["message_id"],
            )
            raws = [json.loads(p["metadata"]).get("raw") for p in parts]
            source = mine.to_source()
            if all(raws) and raws:
                assert source["content"] == raws
            expected_role = {"tool": "toolResult"}.get(theirs["role"], theirs["role"])
            assert source["role"] == expected_role
        thinking = [
            b for m in stored for b in m.to_source()["content"] if b.get("type") == "thinking"
        ]
        assert thinking and all("thinkingSignature" in b for b in thinking)
        result = next(m.to_source() for m in stored if m.role == "tool")
        assert result["toolCallId"] and result["toolName"]

        # Summary by summary: the same ids, kinds, depths and texts, and the same links.
        summaries = rows(claw, "SELECT * FROM summaries")
        assert report.summaries_imported == len(summaries) == 8
        for theirs in summaries:
            mine = engine.summary(theirs["summary_id"])
            assert (mine.kind, mine.depth, mine.content) == (
                theirs["kind"],
                theirs["depth"],
                theirs["content"],
            )
            parents, messages = engine.summary_sources(theirs["summary_id"])
            assert parents == [
                r[0]
                for r in rows(
                    claw,
                    "SELECT parent_summary_id FROM summary_parents WHERE summary_id = ?"
                    " ORDER BY ordinal",
                    theirs["summary_id"],
                )
            ]
            assert messages == [
                by_source[r[0]]
                for r in rows(
                    claw,
                    "SELECT message_id FROM summary_messages WHERE summary_id = ? ORDER BY ordinal",
                    theirs["summary_id"],
                )
            ]

        # The active context, item by item: the next turn assembles what the user had.
        context = [
            (i.item_type, i.summary_id if i.item_type == "summary" else i.message_id)
            for i in engine.context(session)
        ]
        assert context == [
            (
                r["item_type"],
                r["summary_id"] if r["item_type"] == "summary" else by_source[r["message_id"]],
            )
            for r in rows(claw, "SELECT * FROM context_items ORDER BY ordinal")
        ]
        made = engine.assemble(session, 100_000, format="openclaw", fill=False)
        assert made.summaries == sum(1 for kind, _ in context if kind == "summary") == 2
        assert engine.check() == []
        assert report.not_brought and "data.csv" in report.not_brought[0]

        # Again: nothing new.
        (again,) = engine.import_store("lossless-claw", claw)
        assert (again.messages_imported, again.summaries_imported) == (0, 0)
        assert len(engine.messages(session)) == 26


def node(n: int) -> str:
    return "sum_" + hashlib.sha256(f"hermes-lcm:{n}".encode()).hexdigest()[:16]


def test_hermes_lcm_comes_over_with_its_dag_and_the_context_it_would_assemble(
    hermes_lcm: Path, new_db: Callable[[], str]
) -> None:
    session = "sess-2026-demo"
    source_messages = rows(hermes_lcm, "SELECT * FROM messages ORDER BY store_id")
    nodes = rows(hermes_lcm, "SELECT * FROM summary_nodes ORDER BY node_id")
    with Engine.open(new_db(), config=Config()) as engine:
        (report,) = engine.import_store("hermes-lcm", hermes_lcm)
        assert report.messages_imported == len(source_messages) == 58
        stored = engine.messages(session)
        by_store = {}
        for mine, theirs in zip(stored, source_messages, strict=True):
            by_store[theirs["store_id"]] = mine.message_id
            source = mine.to_source()
            assert (source["role"], source.get("content")) == (theirs["role"], theirs["content"])
            if theirs["tool_calls"]:
                assert source["tool_calls"] == json.loads(theirs["tool_calls"])
        assert report.summaries_imported == len(nodes) == 8
        for theirs in nodes:
            mine = engine.summary(node(theirs["node_id"]))
            assert (mine.depth, mine.content) == (theirs["depth"], theirs["summary"])
            parents, messages = engine.summary_sources(mine.summary_id)
            ids = json.loads(theirs["source_ids"])
            if theirs["source_type"] == "nodes":
                assert (mine.kind, parents) == ("condensed", [node(i) for i in ids])
            else:
                assert (mine.kind, messages) == ("leaf", [by_store[i] for i in ids])
        # hermes-lcm's own assembly: the system prompt, the summaries nothing condensed
        # (node 7 at depth 2, then leaf 8), then the messages after its frontier (54).
        (frontier,) = rows(hermes_lcm, "SELECT current_frontier_store_id FROM lcm_lifecycle_state")[
            0
        ]
        assert frontier == 54
        context = [
            i.summary_id if i.item_type == "summary" else i.message_id
            for i in engine.context(session)
        ]
        assert context == [by_store[1], node(7), node(8)] + [by_store[i] for i in (55, 56, 57, 58)]
        assert engine.check() == []
        (again,) = engine.import_store("hermes-lcm", hermes_lcm)
        assert (again.messages_imported, again.summaries_imported) == (0, 0)


def test_import_store_from_the_cli_and_its_refusals(
    claw: Path, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    db = str(tmp_path / "store.db")
    done = run_cli("--db", db, "import-store", "--from", "lossless-claw", str(claw))
    assert done.code == 0, done
    assert (
        "26 messages imported (0 already stored), 8 summaries (0 already), 6 context items"
        in done.out
    )
    assert "not brought: large file" in done.out
    wrong = run_cli("--db", db, "import-store", "--from", "hermes-lcm", str(claw))
    assert wrong.code != 0 and "not a hermes-lcm database" in wrong.err
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    refused = run_cli("--db", db, "import-store", "--from", "lossless-claw", str(junk))
    assert refused.code != 0 and "cannot read it as a lossless-claw database" in refused.err
