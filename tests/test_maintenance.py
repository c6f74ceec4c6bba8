"""Maintenance of the DAG: rewrite, repair (doctor --apply), dissolve and backfill.

Nothing is ever deleted: replaced and dissolved summaries stay, retired, and the store stays
consistent (``doctor`` finds nothing) after every command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.doctor import check
from lossless.errors import ConflictError, NotFoundError
from lossless.sample import write_session
from lossless.summarize import ScriptedSummarizer, SummarizerError, SummaryRequest
from lossless.transplant import TransplantError

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)


def numbered(prefix: str) -> Any:
    n = 0

    def text(request: SummaryRequest) -> str:
        nonlocal n
        n += 1
        return f"{prefix} {n}: " + " ".join(s.ref for s in request.sources)

    return text


def fill(engine: Engine, session: str = "s", turns: int = 16) -> None:
    for i in range(turns):
        engine.ingest(session, {"role": "user", "content": f"turn {i} about the walrus plan " * 4})
    engine.compact(session)


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    eng = Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer(default=numbered("v1")))
    fill(eng)
    yield eng
    eng.close()


def context_ids(engine: Engine, session: str = "s") -> list[str]:
    return [i.ref for i in engine.context(session)]


def live(engine: Engine) -> list[tuple[str, int]]:
    return [
        (r[0], r[1])
        for r in engine.store.fetchall(
            "SELECT summary_id, depth FROM summaries WHERE retired_at IS NULL ORDER BY depth"
        )
    ]


def test_rewrite_replaces_a_summary_everywhere_and_keeps_the_old_one(engine: Engine) -> None:
    condensed = [s for s, d in live(engine) if d == 1]
    assert condensed, "the fixture should have a condensed summary"
    parent = engine.store.summary_sources(condensed[0])[0][0]
    before = context_ids(engine)

    dry = engine.rewrite([parent])
    assert not dry.applied and engine.summary(parent).retired_reason is None

    engine.summarizer = ScriptedSummarizer(default=numbered("v2"))
    report = engine.rewrite([parent], apply=True)
    (entry,) = report.rewritten
    new = engine.summary(str(entry.new_id))
    old = engine.summary(parent)
    assert new.content.startswith("v2 1:") and new.depth == old.depth == 0
    assert (old.retired_reason, old.superseded_by) == ("rewritten", new.summary_id)
    assert old.content.startswith("v1")  # kept as it was
    # same sources, and the condensed summary made from it now stands on the new one
    assert engine.store.summary_sources(new.summary_id) == engine.store.summary_sources(parent)
    assert new.summary_id in engine.store.summary_sources(condensed[0])[0]
    assert parent not in engine.store.summary_sources(condensed[0])[0]
    assert context_ids(engine) == before  # it was not in the context; nothing else moved
    assert check(engine.store) == []
    # search finds the new text, not the retired one
    assert not [h for h in engine.grep("v1", scope="summaries").hits if h.id == parent]
    assert engine.describe(parent).metadata["superseded_by"] == new.summary_id
    with pytest.raises(
        ConflictError, match=f"rewritten already; its successor is {new.summary_id}"
    ):
        engine.rewrite([parent], apply=True)


def test_rewrite_all_goes_bottom_up_and_a_context_summary_keeps_its_place(
    engine: Engine,
) -> None:
    old_context = engine.context("s")
    engine.summarizer = model = ScriptedSummarizer(default=numbered("v2"))
    report = engine.rewrite(everything=True, apply=True)
    assert len(report.rewritten) == len(report.entries) > 2
    new_ids = {e.new_id for e in report.rewritten}
    # each condensed request was made from the rewritten (v2) versions of its sources
    for request in model.requests:
        if request.kind == "condensed":
            assert all(s.ref in new_ids and s.text.startswith("v2") for s in request.sources)
    after = engine.context("s")
    assert [i.item_type for i in after] == [i.item_type for i in old_context]
    assert all(
        engine.summary(str(i.summary_id)).content.startswith("v2") for i in after if i.summary_id
    )
    assert check(engine.store) == []
    assert engine.rewrite(depth=0).entries and all(
        e.summary.content.startswith("v2") for e in engine.rewrite(depth=0).entries
    )


def test_doctor_lists_fallback_summaries_and_apply_repairs_them(
    new_db: Callable[[], str],
) -> None:
    eng = Engine.open(
        new_db(),
        config=SMALL,
        summarizer=ScriptedSummarizer(default=SummarizerError("provider down")),
    )
    fill(eng)
    fallbacks = [s for s, _ in live(eng) if eng.summary(s).model == "fallback"]
    assert fallbacks
    problems = check(eng.store, degraded=True)
    assert {p.check for p in problems} == {"degraded summaries"}
    assert {p.ids for p in problems} == set(fallbacks)

    # still failing: nothing is replaced
    still = eng.repair(apply=True)
    assert still.entries and not still.rewritten
    assert all(e.skipped and "failed again" in e.skipped for e in still.entries)
    assert {s for s, _ in live(eng)} == set(fallbacks)

    eng.summarizer = ScriptedSummarizer(default=numbered("repaired"))
    fixed = eng.repair(apply=True)
    assert len(fixed.rewritten) == len(fallbacks)
    assert check(eng.store, degraded=True) == []
    assert all(eng.summary(s).content.startswith("repaired") for s, _ in live(eng))
    eng.close()


def test_dissolve_puts_the_sources_back_in_place(engine: Engine) -> None:
    items = engine.context("s")
    top = next(i for i in items if i.summary_id and i.depth == 1)
    parents, _ = engine.store.summary_sources(str(top.summary_id))
    put_back = engine.dissolve(str(top.summary_id))
    assert [i.summary_id for i in put_back] == parents
    after = engine.context("s")
    refs = [i.ref for i in after]
    expected = [i.ref for i in items]
    at = expected.index(str(top.summary_id))
    assert refs == expected[:at] + parents + expected[at + 1 :]
    assert engine.summary(str(top.summary_id)).retired_reason == "dissolved"
    assert check(engine.store) == []

    leaf = parents[0]
    _, messages = engine.store.summary_sources(leaf)
    engine.dissolve(leaf)
    refs = [i.ref for i in engine.context("s")]
    assert refs[at : at + len(messages)] == [f"msg#{m}" for m in messages]
    assert check(engine.store) == []
    with pytest.raises(NotFoundError, match="not in an active context"):
        engine.dissolve(leaf)


def test_backfill_imports_compacts_to_one_root_and_transplants(
    tmp_path: Path, new_db: Callable[[], str]
) -> None:
    transcript = write_session(tmp_path / "old.jsonl", 12, session_id="old-run")
    eng = Engine.open(new_db(), config=SMALL, summarizer=ScriptedSummarizer())
    for i in range(3):
        eng.ingest("today", {"role": "user", "content": f"today {i}"})

    dry = eng.backfill(transcript, into="today", single_root=True)
    assert not dry.applied and dry.session_id == "old-run" and dry.format
    assert [c.conversation.session_id for c in eng.conversations()] == ["today"]

    report = eng.backfill(transcript, into="today", single_root=True, apply=True)
    assert report.applied and report.imported > 50
    old_context = eng.context("old-run")
    assert len(old_context) == 1 and old_context[0].summary_id
    today = eng.context("today")
    assert today[0].summary_id and engine_content(eng, today[0].summary_id) == engine_content(
        eng, old_context[0].summary_id
    )
    assert [i.message_id for i in today[1:]] == [m.message_id for m in eng.messages("today")[:3]]
    assert check(eng.store) == []
    with pytest.raises(TransplantError, match="transplanted before"):
        eng.backfill(transcript, into="today", single_root=True, apply=True)
    eng.close()


def engine_content(engine: Engine, summary_id: str | None) -> str:
    return engine.summary(str(summary_id)).content


def test_the_maintenance_commands_from_the_cli(  # type: ignore[no-untyped-def]
    run_cli, tmp_path: Path, db: str
) -> None:
    with Engine.open(
        db, config=SMALL, summarizer=ScriptedSummarizer(default=SummarizerError("down"))
    ) as eng:
        fill(eng)
        fallbacks = [s for s, _ in live(eng)]
        top = next(i.summary_id for i in eng.context("s") if i.summary_id)
    doctor = run_cli("--db", str(db), "doctor")
    assert doctor.code == 1 and "degraded summaries" in doctor.out
    assert "lossless doctor --apply" in doctor.out
    repaired = run_cli("--db", str(db), "doctor", "--apply", "--json")
    assert repaired.code == 0, repaired
    data = json.loads(repaired.out)
    assert data["ok"] and data["repaired"]["rewritten"] == len(fallbacks)

    dry = run_cli("--db", str(db), "rewrite", "--depth", "0")
    assert dry.code == 0 and "would rewrite" in dry.out and "--apply" in dry.out
    bad = run_cli("--db", str(db), "rewrite", "--depth", "0", "--all")
    assert bad.code == 2 and "one of them" in bad.err
    applied = run_cli("--db", str(db), "rewrite", "--all", "--apply", "--json")
    assert applied.code == 0 and json.loads(applied.out)["rewritten"] > 0

    with Engine.open(db, config=SMALL) as eng:
        top = next(i.summary_id for i in eng.context("s") if i.summary_id)
    dry_dissolve = run_cli("--db", str(db), "dissolve", str(top))
    assert dry_dissolve.code == 0 and "would put back" in dry_dissolve.out
    done = run_cli("--db", str(db), "dissolve", str(top), "--apply", "--json")
    assert done.code == 0 and json.loads(done.out)["applied"] is True
    again = run_cli("--db", str(db), "dissolve", str(top), "--apply")
    assert again.code == 4 and "not in an active context" in again.err

    transcript = write_session(tmp_path / "old.jsonl", 6, session_id="old-run")
    dry_backfill = run_cli("--db", str(db), "backfill", str(transcript), "--into", "s")
    assert dry_backfill.code == 0 and "would import, compact" in dry_backfill.out
    backfilled = run_cli(
        "--db", str(db), "backfill", str(transcript), "--into", "s", "--single-root", "--apply"
    )
    assert backfilled.code == 0, backfilled
    assert "transplanted" in backfilled.out
    assert run_cli("--db", str(db), "doctor").code == 0
