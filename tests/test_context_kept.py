"""The active context a store keeps in memory between reads (store/context.py).

A host reads its conversation's context after every turn. The store keeps what it read and
checks one value (the conversation's context version) before reading it all again, and adds
its own appends to what it keeps. These tests hold one store's kept context up against a
fresh read while *another* store on the same database (another process, as far as the first
can tell) changes the context every way lossless can: appends, compaction, dissolving,
taking an item out, renumbering, rewriting and forgetting. Each back end in turn.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lossless import Config, Engine
from lossless.model import ContextItem
from lossless.summarize import ScriptedSummarizer, SummaryRequest


def small(request: SummaryRequest) -> str:
    return f"summary of {len(request.sources)} items"


def reworded(request: SummaryRequest) -> str:
    return f"a longer rewritten summary of {len(request.sources)} items, said another way"


def turn(n: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"question number {n} about the harbour crane schedule"},
        {"role": "assistant", "content": f"answer number {n}: the crane moves at dawn " * 3},
    ]


CONFIG = Config(leaf_chunk_tokens=400, fresh_tail_count=4)


@pytest.fixture
def pair(db: str) -> Iterator[tuple[Engine, Engine]]:
    """Two engines on one store: *mine* keeps its reads, *other* writes behind its back."""
    with (
        Engine.open(db, config=CONFIG, summarizer=ScriptedSummarizer(default=small)) as mine,
        Engine.open(db, config=CONFIG, summarizer=ScriptedSummarizer(default=reworded)) as other,
    ):
        yield mine, other


def fresh(engine: Engine, conversation: str) -> list[ContextItem]:
    """The context as a store that never read it before reads it."""
    cid = engine.conversation(conversation).conversation_id
    with Engine.open(engine.store.location, config=CONFIG) as reader:
        return reader.store.context(cid)


def kept(engine: Engine, conversation: str) -> list[ContextItem]:
    return engine.store.context(engine.conversation(conversation).conversation_id)


def written(engine: Engine, conversation: str) -> list[ContextItem]:
    cid = engine.conversation(conversation).conversation_id
    return engine.store.context(cid, as_written=True)


def test_a_kept_context_follows_every_change_another_writer_makes(
    pair: tuple[Engine, Engine],
) -> None:
    mine, other = pair
    for n in range(12):
        mine.after_turn("c", turn(n))
    assert kept(mine, "c") == fresh(mine, "c")  # read once, kept

    def summary_at(index: int) -> str:
        summaries = [i for i in kept(other, "c") if i.item_type == "summary"]
        return str(summaries[index].summary_id)

    def forget_two() -> None:
        ids = other.store.message_ids_of([other.conversation("c").conversation_id])
        other.forget("c", messages=(ids[-4], ids[-3]))

    steps = {
        "append": lambda: other.ingest_batch("c", turn(100)),
        "compact": lambda: other.compact("c"),
        "rewrite": lambda: other.rewrite([summary_at(0)], apply=True),
        "dissolve": lambda: other.dissolve(summary_at(-1)),
        "pop": lambda: other.pop_context("c"),
        "renumber": lambda: other.store.renumber_context(other.conversation("c").conversation_id),
        "forget": forget_two,
    }
    for n, (step, change) in enumerate(steps.items()):
        before = fresh(mine, "c")
        assert kept(mine, "c") == before
        change()
        after = fresh(mine, "c")
        assert after != before, f"the test's {step} changed nothing"
        # mine changed nothing meanwhile: what it keeps must be what is stored now
        assert kept(mine, "c") == after, f"stale after another writer's {step}"
        mine.ingest_batch("c", turn(200 + n))
        assert kept(mine, "c") == fresh(mine, "c"), f"own append after {step}"


def test_an_append_adds_to_what_is_kept_and_a_turn_reads_nothing_again(
    pair: tuple[Engine, Engine],
) -> None:
    mine, _ = pair
    mine.after_turn("c", turn(0))
    before = kept(mine, "c")
    mine.ingest_batch("c", turn(1))
    after = kept(mine, "c")
    assert after[: len(before)] == before
    added = after[len(before) :]
    assert [(i.item_type, i.role) for i in added] == [("message", "user"), ("message", "assistant")]
    assert after == fresh(mine, "c")


def test_an_own_compaction_puts_each_summary_in_place_of_its_sources_in_what_is_kept(
    pair: tuple[Engine, Engine],
) -> None:
    # The next pass and the next turn then check one row instead of reading the context.
    mine, _ = pair
    for n in range(12):
        mine.ingest_batch("c", turn(n))
    before = kept(mine, "c")
    assert all(i.item_type == "message" for i in before)
    mine.compact("c")
    cid = mine.conversation("c").conversation_id
    held = mine.store._kept_context(cid)
    assert held is not None and held[2], "the compaction's own write is not what is kept"
    assert any(i.item_type == "summary" for i in held[1])
    assert held[1] == fresh(mine, "c")
    assert kept(mine, "c") == fresh(mine, "c")


def test_a_context_handed_out_is_the_callers_own(pair: tuple[Engine, Engine]) -> None:
    # What is kept is patched in place by this store's writes: a list a caller holds must
    # not change under it, and a caller changing its list must not change what is kept.
    mine, _ = pair
    for n in range(12):
        mine.ingest_batch("c", turn(n))
    held = kept(mine, "c")
    snapshot = list(held)
    mine.ingest_batch("c", turn(12))
    assert held == snapshot, "an append changed a list handed out before it"
    mine.compact("c")
    assert held == snapshot, "a compaction changed a list handed out before it"
    now = kept(mine, "c")
    now.clear()
    assert kept(mine, "c") == fresh(mine, "c") != []


def test_a_rolled_back_append_is_not_kept(pair: tuple[Engine, Engine]) -> None:
    mine, _ = pair
    mine.after_turn("c", turn(0))
    before = kept(mine, "c")
    with pytest.raises(RuntimeError), mine.store.transaction():
        mine.ingest_batch("c", turn(1))
        raise RuntimeError("the host gave up")
    assert kept(mine, "c") == before == fresh(mine, "c")
    # nor taken for what this store's own write left (it was in the caller's transaction)
    with pytest.raises(RuntimeError), mine.store.transaction():
        mine.ingest_batch("c", turn(1))
        raise RuntimeError("the host gave up again")
    assert written(mine, "c") == before == fresh(mine, "c")
    mine.ingest_batch("c", turn(2))
    assert kept(mine, "c") == fresh(mine, "c")


def test_as_written_is_the_own_append_and_never_outlives_an_own_change(
    pair: tuple[Engine, Engine],
) -> None:
    mine, _ = pair
    for n in range(12):
        mine.ingest_batch("c", turn(n))
    kept(mine, "c")
    mine.ingest_batch("c", turn(12))
    assert written(mine, "c") == fresh(mine, "c")
    # every change of this store's own, not only an append, is seen by the next read
    cid = mine.conversation("c").conversation_id
    changes = {
        "compact": lambda: mine.compact("c"),
        "pop": lambda: mine.pop_context("c"),
        "renumber": lambda: mine.store.renumber_context(cid),
    }
    for step, change in changes.items():
        before = fresh(mine, "c")
        change()
        after = fresh(mine, "c")
        assert after != before, f"the test's {step} changed nothing"
        assert written(mine, "c") == after, f"stale after this store's own {step}"
        mine.ingest_batch("c", turn(300))
        assert written(mine, "c") == fresh(mine, "c"), f"own append after {step}"


def test_a_turn_still_compacts_what_another_writer_left_over_the_threshold(
    pair: tuple[Engine, Engine],
) -> None:
    # as_written skips the check for another writer once, right after this store's own
    # write; the next turn reads the version and sees what the other writer appended
    mine, other = pair
    mine.after_turn("c", turn(0))
    for n in range(1, 30):
        other.ingest_batch("c", turn(n))
    mine.after_turn("c", turn(30))
    report = mine.after_turn("c", turn(31)).compaction
    assert report is not None and report.passes, "the backlog the other writer left stays"
