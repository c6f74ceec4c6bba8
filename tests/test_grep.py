"""lcm_grep: full text (sanitized, BM25), substrings and CJK, bounded regex, scopes."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.errors import ArgumentError
from lossless.retrieval.grep import GrepError, match_spans
from lossless.retrieval.grep import grep as grep_store
from lossless.summarize import ScriptedSummarizer
from lossless.timestamps import format_ts


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    config = Config().replace(fresh_tail_count=2, large_file_token_threshold=200)
    with Engine.open(new_db(), config=config, summarizer=ScriptedSummarizer()) as eng:
        yield eng


def seed(engine: Engine) -> None:
    engine.ingest("s", {"role": "user", "content": "The staging deploy failed with a timeout."})
    engine.ingest(
        "s", {"role": "assistant", "content": "I raised the deploy timeout to 90 seconds."}
    )
    engine.ingest("s", {"role": "user", "content": "Call getTablePathName before migrating."})
    engine.ingest("s", {"role": "assistant", "content": "日本語テキストの検索も必要です。"})


def test_full_text_finds_words_newest_first(engine: Engine) -> None:
    seed(engine)
    hits = engine.grep("deploy timeout", conversation="s", sort="recency").hits
    assert [h.id for h in hits] == ["msg#2", "msg#1"]
    assert hits[0].role == "assistant"
    assert "deploy timeout" in hits[0].snippet


def test_a_question_with_relevance_sort_ranks_partial_matches_by_bm25(engine: Engine) -> None:
    seed(engine)
    question = "why did the staging deploy fail on friday"
    hits = engine.grep(question, conversation="s", sort="relevance").hits
    assert hits[0].id == "msg#1"  # matches the most words
    assert "msg#2" in [h.id for h in hits]  # matches some of them, still found
    # newest first finds any of the words too, in the message itself: friday is nowhere, and
    # neither msg#3 (found by relevance through the message before it) nor the stop words count
    recent = engine.grep(question, conversation="s", sort="recency").hits
    assert [h.id for h in recent] == ["msg#2", "msg#1"]
    assert engine.grep("friday", conversation="s", sort="recency").hits == []
    assert engine.grep("why did the friday", conversation="s", sort="recency").hits == []


def test_user_text_never_breaks_the_index_syntax(engine: Engine) -> None:
    seed(engine)
    for text in ('deploy AND "', "NOT (deploy", "deploy* OR", "col:umn deploy", "-deploy"):
        # Read as the words they hold: both deploy messages first, and nothing the syntax
        # invents (after them at most msg#3 and msg#4, found through the two before them).
        hits = engine.grep(text, conversation="s", sort="relevance").hits
        assert {h.id for h in hits[:2]} == {"msg#1", "msg#2"}, text
        assert {h.id for h in hits[2:]} <= {"msg#3", "msg#4"}, text


def test_regex_syntax_in_full_text_mode_explains_the_two_modes(engine: Engine) -> None:
    seed(engine)
    with pytest.raises(GrepError, match="mode=regex"):
        engine.grep(r"dep.*timeout", conversation="s")


def test_substrings_and_cjk_go_through_the_trigram_index(engine: Engine) -> None:
    seed(engine)
    assert [h.id for h in engine.grep("ablePath", conversation="s").hits] == ["msg#3"]
    assert [h.id for h in engine.grep("本語テ", conversation="s").hits] == ["msg#4"]


def test_substring_search_sees_messages_of_a_large_import(engine: Engine) -> None:
    rows = [{"role": "user", "content": f"row {i} zqxjk{i}"} for i in range(300)]
    engine.ingest_batch("s", rows, finish_indexes=False)
    # large batches defer SQLite's trigram index (PostgreSQL keeps its own on every write)
    deferred = 300 if engine.store.backend == "sqlite" else 0
    assert engine.store.pending_index_rows() == deferred
    assert [h.id for h in engine.grep("qxjk299", conversation="s").hits] == ["msg#300"]
    assert [h.id for h in engine.grep("qxjk0", conversation="s").hits] == ["msg#1"]
    # the search read the rows not yet indexed; it never made their entries itself
    assert engine.store.pending_index_rows() == deferred
    # by default a large batch's entries are made once its transaction has committed (on
    # SQLite by the store's thread, beside what the caller does next)
    engine.ingest_batch("t", rows)
    assert [h.id for h in engine.grep("qxjk299", conversation="t").hits] == ["msg#600"]
    deadline = time.monotonic() + 10
    while engine.store.pending_index_rows() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.store.pending_index_rows() == 0


def test_a_ranked_search_right_after_a_large_batch_ranks_it_with_its_surroundings(
    engine: Engine,
) -> None:
    rows = [{"role": "user", "content": f"walrus {i} sings a shanty"} for i in range(200)]
    rows[140] = {"role": "assistant", "content": "the otters answered"}
    engine.ingest_batch("s", rows)
    # The entries are the store's thread's to make; a ranked search in this process waits
    # for them, so the neighbours come through the answer at once.
    hits = [h.id for h in engine.grep("otters", conversation="s", sort="relevance").hits]
    assert hits[0] == "msg#141"
    assert {"msg#140", "msg#142"} <= set(hits)


def test_closing_right_after_a_large_batch_leaves_no_entry_waiting(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    rows = [{"role": "user", "content": f"row {i} zqxjk{i}"} for i in range(3000)]
    with Engine.open(db, config=Config()) as engine:
        engine.ingest_batch("s", rows)
    with Engine.open(db, config=Config()) as engine:
        assert engine.store.pending_index_rows() == 0
        assert engine.check() == []


def test_a_process_that_never_closes_its_engine_leaves_no_entry_waiting(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    script = (
        "import sys\n"
        "from lossless import Config, Engine\n"
        "engine = Engine.open(sys.argv[1], config=Config())\n"
        "engine.ingest_batch('s', [{'role': 'user', 'content': f'row {i} zqxjk{i}'}"
        " for i in range(3000)])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(db)], check=True, timeout=120)
    with Engine.open(db, config=Config()) as engine:
        assert engine.store.pending_index_rows() == 0
        assert engine.check() == []


def test_ranked_search_sees_messages_of_a_large_import_before_their_surroundings(
    engine: Engine,
) -> None:
    rows = [{"role": "user", "content": f"walrus {i} sings a shanty"} for i in range(100)]
    rows[40] = {"role": "assistant", "content": "the otters answered"}
    engine.ingest_batch("s", rows, finish_indexes=False)
    pending = engine.store.pending_index_rows()

    def ranked(words: str) -> list[str]:
        return [h.id for h in engine.grep(words, conversation="s", sort="relevance").hits]

    # found by its own words while its surroundings' entry waits (ranked with it after)
    assert ranked("otters")[0] == "msg#41"
    assert len(ranked("walrus shanty")) == 20
    assert engine.store.pending_index_rows() == pending  # the search made no entry
    engine.finish_indexes()
    assert ranked("otters")[0] == "msg#41"
    assert {"msg#40", "msg#42"} <= set(ranked("otters"))  # now through their neighbour too


def test_regex_mode_matches_and_is_bounded(engine: Engine) -> None:
    seed(engine)
    result = engine.grep(r"raised .* to \d+ seconds", conversation="s", mode="regex")
    assert [h.id for h in result.hits] == ["msg#2"]
    engine.ingest_batch("s", [{"role": "user", "content": f"filler {i}"} for i in range(50)])
    from lossless.retrieval.grep import grep

    bounded = grep(engine.store, r"n.v.r.th.re", mode="regex", max_rows=10)
    assert bounded.truncated and bounded.scanned <= 11
    # A literal the index can look up answers for the whole history at once.
    looked_up = grep(engine.store, r"never-there", mode="regex", max_rows=10)
    assert looked_up.hits == [] and not looked_up.truncated
    with pytest.raises(GrepError, match="not a valid regular expression"):
        engine.grep("(unclosed", mode="regex")


def test_scopes_select_what_is_searched(engine: Engine) -> None:
    for i in range(8):
        engine.ingest("s", {"role": "user", "content": f"migration step {i} for the orders table"})
    engine.compact("s")
    summaries = engine.grep("Summary", conversation="s", scope="summaries").hits
    assert summaries and all(h.id.startswith("sum_") for h in summaries)
    messages = engine.grep("orders", conversation="s", scope="messages").hits
    assert messages and all(h.id.startswith("msg#") for h in messages)
    body = "\n".join(f"def handler_{i}():\n    return {i}" for i in range(200))
    engine.ingest("s", {"role": "user", "content": f'<file name="handlers.py">{body}</file>'})
    files = engine.grep("handlers", conversation="s", scope="files").hits
    assert len(files) == 1 and files[0].id.startswith("file_")


def test_a_search_scoped_to_one_family_never_returns_another(engine: Engine) -> None:
    seed(engine)
    engine.ingest("other", {"role": "user", "content": "secret deploy timeout of another team"})
    ours = engine.grep("deploy timeout", conversation="s").hits
    assert all(h.conversation_id == engine.conversation("s").conversation_id for h in ours)
    everywhere = engine.grep("deploy timeout").hits
    assert {h.conversation_id for h in everywhere} == {1, 2}


def test_a_ranked_search_of_one_conversation_ranks_as_a_search_of_the_whole_store(
    new_db: Callable[[], str],
) -> None:
    """A ranked search of one conversation among many asks the index only for the ids
    between its first and last message: what it finds, and how it scores them, are what
    ranking the whole store and keeping that conversation's gives (also for a conversation
    written in turns with another, whose ids are spread across the other's)."""
    rng = random.Random(7)
    words = ["deploy", "timeout", "orders", "queue", *(f"topic{i}" for i in range(36))]

    def said() -> dict[str, str]:
        return {"role": "user", "content": " ".join(rng.choices(words, k=5))}

    with Engine.open(new_db(), config=Config()) as engine:
        for c in range(12):
            engine.ingest_batch(f"c{c}", [engine.normalize(said()) for _ in range(15)])
        for _ in range(30):
            engine.ingest("a", said())
            engine.ingest("b", said())
        engine.finish_indexes()  # every surroundings entry made: the two searches rank alike
        question = "why did the deploy timeout on the orders queue"
        everywhere, offset = [], 0
        while offset is not None:
            page = engine.grep(question, sort="relevance", limit=200, offset=offset)
            everywhere += page.hits
            offset = page.next_offset
        assert len({h.conversation_id for h in everywhere}) == 14
        for name in ("c4", "a", "b"):
            cid = engine.conversation(name).conversation_id
            scoped = engine.grep(question, conversation=name, sort="relevance", limit=200).hits
            expected = [(h.id, h.score) for h in everywhere if h.conversation_id == cid]
            assert len(expected) >= 10
            assert [(h.id, h.score) for h in scoped] == expected


def test_time_filters_and_limits(engine: Engine) -> None:
    seed(engine)
    late = engine.grep("deploy", conversation="s", since="2999-01-01T00:00:00Z").hits
    assert late == []
    with pytest.raises(GrepError, match="from 1 to 200"):
        engine.grep("deploy", limit=500)
    with pytest.raises(GrepError, match="empty"):
        engine.grep("   ")


def test_a_regex_with_a_required_literal_reaches_all_of_history_through_the_index(
    engine: Engine,
) -> None:
    old = engine.ingest("s", {"role": "user", "content": "ticket OPS-00123 was reopened"})
    filler = [{"role": "user", "content": f"routine note {i} about OPS work"} for i in range(400)]
    engine.ingest_batch("s", filler)
    conv = [engine.conversation("s").conversation_id]
    found = grep_store(
        engine.store, r"OPS-0012\d", mode="regex", conversation_ids=conv, max_rows=100
    )
    assert [h.id for h in found.hits] == [f"msg#{old.message_ids[0]}"]
    assert not found.truncated
    # Without a literal to look up, the same bound stops the scan in the newest rows.
    scanned = grep_store(
        engine.store, r"O.S.0.12\d", mode="regex", conversation_ids=conv, max_rows=100
    )
    assert scanned.hits == [] and scanned.truncated


@pytest.mark.parametrize(
    "pattern",
    [
        r"deploy (timeout|script)",
        r"(?i)DEPLOY",
        r"getTable\w+Name",
        r"\d{2} sec",
        r"100%_done",
        r"a\\b path",
        r"日本語\w+",
        r"x*timeout",
    ],
)
def test_regex_results_are_those_of_scanning_every_message(engine: Engine, pattern: str) -> None:
    seed(engine)
    engine.ingest("s", {"role": "user", "content": r"100%_done at C:\a\b path"})
    engine.ingest("s", {"role": "user", "content": "a deploy script with no timeout"})
    compiled = re.compile(pattern)
    expected = [f"msg#{m.message_id}" for m in engine.messages("s") if compiled.search(m.content)]
    found = engine.grep(pattern, conversation="s", mode="regex", scope="messages")
    assert sorted(h.id for h in found.hits) == sorted(expected)
    assert expected, "the case should find something"


@pytest.mark.parametrize("bound", ["since", "before"])
@pytest.mark.parametrize("text", ["yesterday", "garbage", "2026-13-45"])
def test_a_time_bound_that_is_not_a_time_is_refused_not_compared_as_text(
    engine: Engine, bound: str, text: str
) -> None:
    from datetime import UTC, datetime

    engine.ingest(
        "s",
        {"role": "user", "content": "deploy window"},
        created_at=datetime(2026, 3, 2, tzinfo=UTC),
    )
    with pytest.raises(GrepError, match=f"{bound} must be an ISO-8601 time"):
        engine.grep("deploy", **{bound: text})
    with pytest.raises(GrepError, match=f"{bound} must be an ISO-8601 time"):
        engine.chat_context_query(text="deploy", **{bound: text})
    # Times in any ISO-8601 form still bound the search.
    assert engine.grep("deploy", since="2026-03-01").hits
    assert not engine.grep("deploy", since="2026-03-03T00:00:00+00:00").hits
    assert engine.grep("deploy", before="2026-03-02T12:00Z").hits


@pytest.mark.parametrize("mode", ["full_text", "regex"])
def test_a_pattern_too_long_to_be_a_search_is_refused_before_it_runs(
    engine: Engine, mode: str
) -> None:
    # A 5,000-character literal used to run for 14 s in regex mode: the engine's time limit
    # does not bound long literals.
    engine.ingest("s", {"role": "user", "content": "x" * 20_000})
    with pytest.raises(GrepError, match="at most 2,000: search for a distinctive part"):
        engine.grep("x" * 5_000, mode=mode)  # type: ignore[arg-type]
    with pytest.raises(GrepError, match="the text is 5,000 characters"):
        engine.chat_context_query(text="x" * 5_000)
    assert engine.grep("x" * 2_000, mode=mode).hits  # type: ignore[arg-type]


def test_a_snippet_centres_on_the_window_holding_most_of_the_question(engine: Engine) -> None:
    filler = " ".join(f"filler{i}" for i in range(300))
    text = (
        f"What a day. The weather was fine. {filler} Then we moved the staging database to"
        f" db-staging-2 on port 5433 after the migration. {filler} What else?"
    )
    engine.ingest("s", {"role": "user", "content": text})

    [hit] = engine.grep("What port did we move the staging database to?", sort="relevance").hits

    assert "port 5433" in hit.snippet and "staging database" in hit.snippet
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    spans = match_spans(hit.snippet, "What port did we move the staging database to?")
    marked = {hit.snippet[a:b].lower() for a, b in spans}
    assert {"port", "staging", "database", "moved"} <= marked  # "move" finds "moved"
    assert "what" not in marked and "the" not in marked  # question words are not matches


def test_an_answer_is_found_through_the_question_before_it(engine: Engine) -> None:
    engine.ingest("s", {"role": "user", "content": "Lunch was good today."})
    engine.ingest("s", {"role": "user", "content": "Which port did we pick for staging?"})
    # The answer comes in a later call: the question's entry gets its next then.
    engine.ingest_batch(
        "s",
        [
            {"role": "assistant", "content": "9043, because 8043 clashed with the proxy."},
            {"role": "user", "content": "Thanks, noted."},
        ],
    )
    # (The last turns' surroundings entries are made once the writes pause: here, at once.)
    engine.finish_indexes()

    asked = engine.grep("which port for staging", conversation="s", sort="relevance").hits
    answered = engine.grep("clashed proxy", conversation="s", sort="relevance").hits

    # The answer first (a question found passes half its score to the reply after it, on top
    # of the reply's own through the question before it), then the question; msg#4 and msg#1
    # are found through those, and nothing else.
    assert [h.id for h in asked][:2] == ["msg#3", "msg#2"]
    assert sorted(h.id for h in asked[2:]) == ["msg#1", "msg#4"]
    # The answer, then what follows it and the question before it (whose entry got its next
    # when the answer came).
    assert [h.id for h in answered] == ["msg#3", "msg#4", "msg#2"]
    # Newest first, the words must be in the message's own text.
    recent = engine.grep("port staging", conversation="s", sort="recency").hits
    assert [h.id for h in recent] == ["msg#2"]
    assert engine.check() == []  # the index entries match the text and its neighbours


def test_a_summary_hit_names_the_messages_it_covers(engine: Engine) -> None:
    for i in range(12):
        engine.ingest("s", {"role": "user", "content": f"turn {i}: nothing much"})
        engine.ingest("s", {"role": "assistant", "content": f"noted {i}"})
    engine.compact("s")
    [top, *_] = [i for i in engine.context("s") if i.summary_id is not None]

    def below(summary_id: str) -> list[int]:  # walked one level at a time
        summaries, messages = engine.store.summary_sources(summary_id)
        return messages + [m for s in summaries for m in below(s)]

    covered = below(str(top.summary_id))
    hits = engine.grep("Summary", conversation="s", scope="summaries", sort="recency").hits

    [hit] = [h for h in hits if h.id == top.summary_id]
    assert len(covered) > 1
    assert hit.covers == f"{len(covered)} message(s), msg#{min(covered)}..msg#{max(covered)}"
    assert "covers" in hit.to_dict()
    messages = engine.grep("nothing", conversation="s", scope="messages").hits
    assert messages and all("covers" not in h.to_dict() for h in messages)


def test_a_search_naming_a_day_or_month_ranks_what_was_said_then_first(engine: Engine) -> None:
    day = datetime(2022, 11, 9, 18, 30, tzinfo=UTC)
    said = [
        # Said often, on other days, in more of the search's words.
        ("The release checklist and the deploy checklist for the release.", day - timedelta(60)),
        ("Deploy the release after the release checklist passes.", day + timedelta(40)),
        ("The release deploy went out.", day),  # the day named: fewer of its words
        ("Deploy the release checklist, again, for the release.", day + timedelta(90)),
    ]
    for text, when in said:
        engine.ingest("s", {"role": "user", "content": text}, created_at=when)

    def top(pattern: str, **kw: Any) -> str:
        return engine.grep(pattern, conversation="s", sort="relevance", **kw).hits[0].id

    assert top("release deploy checklist") != "msg#3"  # no date named: its words decide
    for named in ("9 November 2022", "November 9th, 2022", "2022-11-09", "the 9th of Nov 2022"):
        assert top(f"release deploy checklist on {named}") == "msg#3", named
    assert top("what release deploy checklist in November 2022") == "msg#3"
    # A day a time zone away is still that day; one the calendar lacks names its month.
    assert top("release deploy checklist on 10 November 2022") == "msg#3"
    assert top("release deploy checklist on 31 November 2022") == "msg#3"
    # A range given that leaves the named day out is kept; newest first ignores the date.
    late = engine.grep(
        "release deploy checklist on 9 November 2022",
        conversation="s",
        sort="relevance",
        since="2022-12-01",
    ).hits
    assert {h.id for h in late} == {"msg#2", "msg#4"}
    newest = engine.grep("deploy 9 November 2022", conversation="s", sort="recency").hits
    assert newest == [] or newest[0].id != "msg#3"


def test_a_message_is_found_by_its_conversations_title_and_month(engine: Engine) -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    other = datetime(2023, 9, 1, 9, 0, tzinfo=UTC)
    engine.ingest("s", {"role": "user", "content": "We went camping."}, created_at=when)
    engine.ingest("s", {"role": "user", "content": "Back at work."}, created_at=other)
    engine.ingest("t", {"role": "user", "content": "We went camping too."}, created_at=other)

    # The month and year it was said find it, for less than its own words would.
    may = engine.grep("camping in May 2023", sort="relevance").hits
    assert may[0].id == "msg#1"
    assert engine.grep("kayak trip", sort="relevance").hits == []

    # A title given later re-indexes the conversation's entries, in one change.
    engine.update_conversation("s", title="Kayak trip planning")
    found = engine.grep("kayak trip", sort="relevance").hits
    assert {h.id for h in found} == {"msg#1", "msg#2"}  # not conversation t's message
    engine.update_conversation("s", title="Hiking")
    assert engine.grep("kayak", sort="relevance").hits == []
    assert {h.id for h in engine.grep("hiking", sort="relevance").hits} == {"msg#1", "msg#2"}
    assert engine.check() == []  # every entry is what the stored text and title make
    # Newest first, only the message's own words count: the title is not what was said.
    assert engine.grep("hiking", sort="recency").hits == []


def test_sort_hybrid_is_refused_with_what_to_use(engine: Engine) -> None:
    seed(engine)
    with pytest.raises(
        GrepError, match=r"hybrid is gone.*use relevance \(the default\) or recency"
    ):
        engine.grep("deploy", sort="hybrid")  # type: ignore[arg-type]


def test_a_summary_ranks_beside_the_messages_that_say_the_same(new_db: Callable[[], str]) -> None:
    def summarize(request: Any) -> str:
        if "billing" in " ".join(s.text for s in request.sources):
            return "Decision: Postgres 16 chosen for the billing service, for logical replication."
        return "Routine notes about lunch and the standup."

    config = Config().replace(
        fresh_tail_count=4, leaf_chunk_tokens=200, leaf_target_tokens=40, leaf_min_fanout=50
    )
    with Engine.open(
        new_db(), config=config, summarizer=ScriptedSummarizer(default=summarize)
    ) as e:
        for i in range(60):
            text = f"turn {i}: routine standup notes about lunch and the weather service."
            if i == 5:
                text = (
                    "We chose Postgres 16 for the billing service because of logical replication."
                )
            e.ingest("s", {"role": "user" if i % 2 == 0 else "assistant", "content": text})
        e.compact("s")
        [summary] = [h.id for h in e.grep("billing", conversation="s", scope="summaries").hits][:1]

        hits = [h.id for h in e.grep("billing postgres replication", conversation="s").hits]

    # The message that says it first; the summary that says it among the first three, ahead
    # of the messages that only sit beside it (the one before it, the one two after it) —
    # not held down because its index is small and the DAG says it again at each level.
    assert hits[0] == "msg#6"
    assert summary in hits[:3]
    assert hits.index(summary) < hits.index("msg#5") and hits.index(summary) < hits.index("msg#8")


def test_an_identifier_is_searched_as_typed_and_newest_first_puts_every_word_first(
    engine: Engine,
) -> None:
    engine.ingest("s", {"role": "user", "content": "OPS-01234 is blocked on review"})
    engine.ingest("s", {"role": "user", "content": "OPS-01299 shipped"})
    engine.ingest("s", {"role": "user", "content": "the review of OPS-01234 is done"})
    engine.ingest("s", {"role": "user", "content": "OPS-01300 opened"})

    newest = [h.id for h in engine.grep("OPS-01234", conversation="s", sort="recency").hits]
    # The ticket as typed, newest first; then the messages holding only a piece of it.
    assert newest[:2] == ["msg#3", "msg#1"]
    assert set(newest[2:]) == {"msg#2", "msg#4"} and newest[2:] == ["msg#4", "msg#2"]
    ranked = [h.id for h in engine.grep("OPS-01234", conversation="s").hits]
    assert set(ranked[:2]) == {"msg#1", "msg#3"}

    # A question's words: those holding every word first, then some of them, newest first.
    both = [h.id for h in engine.grep("blocked review", conversation="s", sort="recency").hits]
    assert both == ["msg#1", "msg#3"]


def test_a_large_batch_is_found_with_its_surroundings_once_caught_up(engine: Engine) -> None:
    """A batch of 64 or more leaves its context entries (and trigrams) to catch_up_indexes,
    which a ranked search runs first; a title given meanwhile reaches them too."""
    said = [{"role": "user", "content": f"filler turn {i}"} for i in range(100)]
    # (A statement: a question would pass its score to the answer, found so without them.)
    said[40] = {"role": "user", "content": "We still need a port for staging."}
    said[41] = {"role": "assistant", "content": "9043, because 8043 clashed."}
    engine.ingest_batch("big", said)
    engine.ingest("big", {"role": "user", "content": "and one more after it"})  # indexed now
    engine.update_conversation("big", title="Kayak trip")

    asked = [h.id for h in engine.grep("which port for staging", conversation="big").hits]
    assert asked[:2] == ["msg#41", "msg#42"]  # the answer, through the question before it
    kayak = engine.grep("kayak", conversation="big", limit=200).hits
    assert {h.id for h in kayak} >= {"msg#1", "msg#101"}
    assert engine.check() == []


def test_pages_past_the_ranked_candidates_follow_on_when_questions_pass_on_their_score(
    engine: Engine,
) -> None:
    """More hits than a relevance search re-ranks (replies to questions moved up): a page
    reaching past them must not reorder the ones before it."""
    said = []
    for i in range(70):
        words = "alpha " * (1 + i % 5)
        said.append({"role": "user", "content": f"{words} item {i}, which one?"})
        said.append({"role": "assistant", "content": f"reply {i}: the one numbered {i}"})
    engine.ingest_batch("s", said)
    whole = engine.grep("alpha", conversation="s", sort="relevance", limit=200).hits
    assert len(whole) > 100
    for size in (30, 40, 60):
        seen = []
        offset: int | None = 0
        while offset is not None:
            page = engine.grep(
                "alpha", conversation="s", sort="relevance", limit=size, offset=offset
            )
            seen += [h.id for h in page.hits]
            offset = page.next_offset
        assert seen == [h.id for h in whole], size


@pytest.mark.parametrize("sort", ["relevance", "recency"])
@pytest.mark.parametrize("mode", ["full_text", "regex"])
def test_pages_of_a_search_follow_on_without_gaps_or_repeats(
    engine: Engine, sort: str, mode: str
) -> None:
    engine.ingest_batch(
        "s",
        [
            {"role": "user", "content": f"note {i}: the deploy " + "went fine " * (i % 4)}
            for i in range(23)
        ],
    )
    pattern = "deploy" if mode == "full_text" else r"note \d+: the deploy"
    whole = engine.grep(pattern, conversation="s", sort=sort, mode=mode, limit=23)  # type: ignore[arg-type]
    assert len(whole.hits) == 23 and not whole.more and whole.next_offset is None
    pages, offset = [], 0
    while True:
        page = engine.grep(
            pattern,
            conversation="s",
            sort=sort,
            mode=mode,
            limit=10,
            offset=offset,  # type: ignore[arg-type]
        )
        pages.append(page)
        if not page.more:
            break
        assert page.next_offset == offset + 10
        offset = page.next_offset
    assert [len(p.hits) for p in pages] == [10, 10, 3]
    assert [h.id for p in pages for h in p.hits] == [h.id for h in whole.hits]
    assert all(h.snippet for p in pages for h in p.hits)


def test_a_page_beyond_reach_is_refused_with_what_to_do(engine: Engine) -> None:
    seed(engine)
    with pytest.raises(GrepError, match="narrow the search"):
        engine.grep("deploy", conversation="s", limit=50, offset=990)
    with pytest.raises(GrepError, match="offset"):
        engine.grep("deploy", conversation="s", offset=-1)
    assert engine.grep("deploy", conversation="s", offset=5).hits == []


# --- newest first is by time, across conversations and imports ------------------------------

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _write_transcript(path: Path, lines: list[tuple[int, str]]) -> Path:
    """A plain message list (JSONL), one message a line at START + the given minutes, in
    time order as a transcript is."""
    with path.open("w") as f:
        for minute, text in sorted(lines):
            at = START + timedelta(minutes=minute)
            f.write(json.dumps({"role": "user", "content": text, "timestamp": at.isoformat()}))
            f.write("\n")
    return path


def test_newest_first_is_by_time_across_conversations_imported_out_of_order(
    new_db: Callable[[], str], tmp_path: Path, run_cli: Any
) -> None:
    # 2,600 minutes dealt at random to two transcripts; alpha is imported first, so beta's
    # rows come after all of alpha's whatever their times. Every message says "deploy"
    # (newest first walks the time index), a few "kayak" (few: found and sorted), alpha's
    # and every 40th of beta's "blue" (one conversation's walk: many stretches).
    minutes = list(range(2_600))
    random.Random(7).shuffle(minutes)
    alpha = [(m, f"deploy note {m}: blue sky") for m in minutes[:1_300]]
    beta = [
        (
            m,
            f"deploy note {m}"
            + (": blue" if i % 40 == 0 else "")
            + (" kayak" if m % 300 == 7 else ""),
        )
        for i, m in enumerate(sorted(minutes[1_300:]))
    ]
    db = new_db()
    for name, lines in (("alpha", alpha), ("beta", beta)):
        path = _write_transcript(tmp_path / f"{name}.jsonl", lines)
        assert run_cli("--db", db, "import", str(path), "--format", "messages").code == 0

    def newest(pattern: str, limit: int, *more: str) -> list[dict[str, Any]]:
        res = run_cli(
            "--db", db, "grep", pattern, "--sort", "recency", "--limit", str(limit), "--json", *more
        )
        assert res.code == 0, res
        hits: list[dict[str, Any]] = json.loads(res.out)["hits"]
        return hits

    for pattern, said in (
        ("deploy", alpha + beta),
        ("kayak", [b for b in beta if "kayak" in b[1]]),
    ):
        five, twenty = newest(pattern, 5), newest(pattern, 20)
        latest = sorted((m for m, _ in said), reverse=True)
        expected = [format_ts(START + timedelta(minutes=m)) for m in latest[:20]]
        assert [h["created_at"] for h in twenty] == expected[: len(twenty)]
        assert len(twenty) == min(20, len(said))
        assert [h["id"] for h in five] == [h["id"] for h in twenty[:5]]
        assert {h["conversation_id"] for h in five} == ({1, 2} if pattern == "deploy" else {2})

    with Engine.open(db) as engine:  # one conversation's walk, through its own time index
        hits = engine.grep("blue", conversation="beta", family=False, sort="recency").hits
        beta_blue = sorted((m for m, text in beta if "blue" in text), reverse=True)
        assert [h.created_at for h in hits] == [
            format_ts(START + timedelta(minutes=m)) for m in beta_blue[:20]
        ]
        # Pages follow on: the second page starts where the first stopped, by time.
        second = engine.grep("deploy", sort="recency", limit=10, offset=10).hits
        first_twenty = engine.grep("deploy", sort="recency", limit=20).hits
        assert [h.id for h in second] == [h.id for h in first_twenty[10:]]


def test_a_summary_of_older_messages_made_later_is_not_the_newest(
    new_db: Callable[[], str],
) -> None:
    config = Config().replace(fresh_tail_count=2, leaf_chunk_tokens=150, leaf_min_fanout=2)
    with Engine.open(new_db(), config=config, summarizer=ScriptedSummarizer()) as engine:
        for session, day in (("recent", 5), ("older", 1)):  # compacted in this order
            for i in range(16):
                engine.ingest(
                    session,
                    {"role": "user", "content": f"turn {i}: " + "planning work " * 8},
                    created_at=START + timedelta(days=day, minutes=i),
                )
            engine.compact(session)
        hits = engine.grep("Summary", scope="summaries", sort="recency", limit=50).hits
        times = [h.created_at for h in hits]
        assert len(hits) > 2 and times == sorted(times, reverse=True)
        assert hits[0].conversation_id == engine.conversation("recent").conversation_id
        [first] = engine.grep("Summary", scope="summaries", sort="recency", limit=1).hits
        assert first.id == hits[0].id


def test_an_archived_conversation_leaves_the_stores_search_but_not_its_familys(
    engine: Engine,
) -> None:
    from lossless.toolbox import ToolScope, call

    engine.ingest("live", {"role": "user", "content": "The quokka deploy went fine."})
    engine.conversation("old#2", create=True, session_key="old")
    engine.ingest("old", {"role": "user", "content": "The quokka deploy timed out."})
    engine.update_conversation("old", session_key="old")
    engine.ingest("old#2", {"role": "user", "content": "Starting over after the clear."})
    old = engine.archive("old")
    assert old.status == "archived"

    def found(**options: Any) -> list[str]:
        return [h.id for h in engine.grep("quokka", sort="recency", **options).hits]

    everywhere = {"msg#1", "msg#2"}
    assert found() == ["msg#1"]  # the store's search leaves it out
    assert set(found(include_archived=True)) == everywhere
    assert found(mode="regex") == ["msg#1"]
    assert found(conversation="old#2") == ["msg#2"]  # its family's search keeps it
    assert found(conversation="old", family=False) == ["msg#2"]
    # The tools as a model sees them: the list leaves it out unless asked, and says so.
    tools = ToolScope.of(engine)
    listed = call(tools, "lcm_list_conversations", {})
    assert [c["session_id"] for c in listed["conversations"]] == ["old#2", "live"]
    assert listed["archived_not_listed"] == 1
    every = call(tools, "lcm_list_conversations", {"include_archived": True})
    assert {c["session_id"]: c["status"] for c in every["conversations"]}["old"] == "archived"
    hits = call(tools, "lcm_grep", {"pattern": "quokka"})["hits"]
    assert [h["id"] for h in hits] == ["msg#1"]
    hits = call(tools, "lcm_grep", {"pattern": "quokka", "include_archived": True})["hits"]
    assert {h["id"] for h in hits} == everywhere
    pinned = ToolScope.of(engine, conversation="old#2")  # a framework's session tools
    assert [h["id"] for h in call(pinned, "lcm_grep", {"pattern": "quokka"})["hits"]] == ["msg#2"]

    assert engine.unarchive("old").status == "active"
    assert set(found()) == everywhere
    assert engine.rename("live", "  Quokka\n release  ").title == "Quokka release"
    with pytest.raises(ArgumentError, match="needs some text"):
        engine.rename("live", " \n ")


def test_a_question_is_not_looked_for_as_one_substring(engine: Engine) -> None:
    # A run of words with whole words inside it is found through those words; looking for
    # the whole run as one substring (a read of every row holding its common trigrams)
    # would find nothing they did not.
    engine.ingest("q", {"role": "user", "content": "the deploy worker hit a timeout again"})
    asked: list[str] = []
    substring_search = engine.store.substring_search

    def spy(table: str, needle: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(needle)
        return substring_search(table, needle, *args, **kwargs)

    engine.store.substring_search = spy  # type: ignore[method-assign]
    question = "how did we fix the timeout error in the deploy worker?"
    assert engine.grep(question, conversation="q", sort="relevance").hits
    assert engine.grep("nothing of this was ever said here", conversation="q").hits == []
    assert asked == []
    # a short run may be a piece of longer words: still looked for as written
    mid = engine.ingest("q", {"role": "user", "content": "xxello worldyy"}).message_ids[0]
    assert [h.id for h in engine.grep("ello world", conversation="q").hits] == [f"msg#{mid}"]
    assert asked


def _grep_in_child(db: str, out: Any) -> None:
    with Engine.open(db, config=Config()) as child:
        out.put(len(child.grep("deploy", conversation="s").hits))


def test_a_process_forked_after_a_search_searches_too(db: str) -> None:
    # grep searches the summaries in threads of its own; a forked child has none of its
    # parent's threads, and must not wait for them.
    import multiprocessing

    with Engine.open(db, config=Config()) as parent:
        parent.ingest("s", {"role": "user", "content": "deploy the worker"})
        assert len(parent.grep("deploy", conversation="s").hits) == 1
    fork = multiprocessing.get_context("fork")
    out = fork.Queue()
    child = fork.Process(target=_grep_in_child, args=(db, out))
    child.start()
    child.join(60)
    hung = child.is_alive()
    if hung:
        child.kill()
    assert not hung, "the forked child's search never finished"
    assert child.exitcode == 0 and out.get(timeout=5) == 1
