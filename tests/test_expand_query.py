"""lcm_expand_query: a cited, labelled answer from below the summaries; the grant is revoked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lossless import Config, Engine
from lossless.retrieval.expand_query import LABEL
from lossless.retrieval.grep import GrepError
from lossless.summarize import ScriptedSummarizer

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    engine = Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer())
    for i in range(14):
        engine.ingest(
            "s", {"role": "user", "content": f"status update {i}: " + "routine work " * 8}
        )
        if i == 3:
            engine.ingest(
                "s",
                {
                    "role": "assistant",
                    "content": "We chose port 9043 for staging because 8043 clashed"
                    " with the proxy.",
                },
            )
    engine.compact("s")
    yield engine
    engine.close()


def test_the_answer_quotes_the_fact_with_its_citation_and_a_label(engine: Engine) -> None:
    # The scripted summaries say nothing useful: the fact is only below them.
    assert all(
        "9043" not in engine.summary(i.summary_id).content
        for i in engine.context("s")
        if i.summary_id
    )
    result = engine.expand_query("which port did we choose for staging?", conversation="s")
    assert result.answer.startswith(LABEL)
    line = next(row for row in result.answer.splitlines() if "9043" in row)
    assert "because 8043 clashed with the proxy" in line
    cited = line.rsplit("[", 1)[1].rstrip("]")
    assert cited in result.citations
    assert engine.get_message(int(cited[4:])).content.startswith("We chose port 9043")


def test_the_grant_is_revoked_after_the_answer(engine: Engine) -> None:
    result = engine.expand_query("which port for staging", conversation="s")
    live = engine.store.fetchall(
        "SELECT count(*) FROM grants WHERE revoked_at IS NULL AND grant_id = ?", (result.grant_id,)
    )[0][0]
    assert live == 0


def test_named_summaries_bound_the_search(engine: Engine) -> None:
    top = next(i.summary_id for i in engine.context("s") if i.summary_id)
    assert top is not None
    result = engine.expand_query("port staging", conversation="s", summary_ids=[top])
    assert top in result.searched
    assert any("9043" in line for line in result.answer.splitlines())


def test_nothing_matching_says_so_and_an_empty_question_is_refused(engine: Engine) -> None:
    result = engine.expand_query("zebra migration to mars", conversation="s")
    assert "Nothing in the stored history matches" in result.answer
    with pytest.raises(GrepError, match="empty"):
        engine.expand_query("   ", conversation="s")


def test_ask_on_the_command_line(run_cli, db: str, engine: Engine) -> None:  # type: ignore[no-untyped-def]
    engine.close()
    res = run_cli("--db", db, "ask", "s", "which port did we choose for staging?")
    assert res.code == 0, res
    assert "9043" in res.out and "[msg#" in res.out
