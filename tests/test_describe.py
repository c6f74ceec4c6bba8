"""lcm_describe: summaries with their subtree, files, messages; scoped to a family."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from lossless import Config, Engine, NotFoundError
from lossless.summarize import ScriptedSummarizer

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=120,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
    large_file_token_threshold=200,
)


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=SMALL, summarizer=ScriptedSummarizer()) as eng:
        yield eng


def compacted(engine: Engine) -> str:
    for i in range(16):
        engine.ingest("s", {"role": "user", "content": f"note {i}: " + "detail " * 12})
    engine.compact("s")
    top = next(i.summary_id for i in engine.context("s") if i.summary_id)
    assert top is not None
    return top


def test_a_condensed_summary_lists_its_subtree_with_running_costs(engine: Engine) -> None:
    top = compacted(engine)
    d = engine.describe(top, token_cap=10_000)
    assert d.kind == "summary" and d.metadata["kind"] == "condensed"
    assert d.parents and all(p.startswith("sum_") for p in d.parents)
    ids = [m.id for m in d.manifest]
    assert ids[0] == d.parents[0]  # its first parent, then what lies below that
    assert any(i.startswith("msg#") for i in ids)
    totals = [m.cumulative_tokens for m in d.manifest]
    assert totals == sorted(totals)
    assert totals[-1] == sum(m.tokens for m in d.manifest)
    assert all(m.fits for m in d.manifest)
    tight = engine.describe(top, token_cap=d.manifest[0].tokens)
    assert tight.manifest[0].fits and not tight.manifest[-1].fits
    assert d.content == engine.summary(top).content


def test_a_leaf_summary_lists_its_messages_and_what_summarizes_it(engine: Engine) -> None:
    top = compacted(engine)
    leaf = engine.describe(top).parents[0]
    d = engine.describe(leaf)
    assert d.metadata["kind"] == "leaf"
    assert [m.kind for m in d.manifest] == ["message"] * len(d.manifest)
    assert d.children == [top]


def test_a_large_file_and_a_line_range(engine: Engine) -> None:
    body = "\n".join(f"line {i}" for i in range(1, 400))
    engine.ingest("s", {"role": "user", "content": f'<file name="log.txt">{body}</file>'})
    fid = engine.store.large_files()[0].file_id
    d = engine.describe(fid, lines=(10, 12))
    assert d.kind == "file"
    assert d.content == "line 10\nline 11\nline 12"
    assert d.metadata["file_name"] == "log.txt"
    assert "399 lines" in d.metadata["exploration_summary"]


def test_a_message_id_shows_the_message_and_its_summaries(engine: Engine) -> None:
    compacted(engine)
    d = engine.describe("msg#1")
    assert d.kind == "message" and d.content.startswith("note 0:")
    assert d.children and d.children[0].startswith("sum_")


def test_ids_of_another_family_are_unknown_within_a_scope(engine: Engine) -> None:
    top = compacted(engine)
    engine.ingest("other", {"role": "user", "content": "elsewhere"})
    with pytest.raises(NotFoundError, match="among the conversations") as beyond:
        engine.describe(top, conversation="other")
    with pytest.raises(NotFoundError, match="among the conversations"):
        engine.describe("msg#1", conversation="other")
    # An id of another family reads exactly as one no conversation has: nothing leaks.
    with pytest.raises(NotFoundError) as unknown:
        engine.describe("sum_" + "0" * 16, conversation="other")
    assert str(beyond.value) == str(unknown.value).replace("sum_" + "0" * 16, top)
    assert engine.describe(top, conversation="s").id == top


@pytest.mark.parametrize("bad", ["sum_nothere", "file_../../etc", "msg#x", "hello", "msg#999"])
def test_unknown_or_malformed_ids_are_clear_errors(engine: Engine, bad: str) -> None:
    engine.ingest("s", {"role": "user", "content": "x"})
    with pytest.raises(NotFoundError):
        engine.describe(bad)
