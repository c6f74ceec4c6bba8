"""Prompt-aware assembly: the next request brings what it is about into the context."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from lossless import Engine
from lossless.summarize import ScriptedSummarizer
from test_assemble import SMALL, words

FACT = "the launch code for the rocket is pelican seven"
REPLY = "understood, I will remember it for the countdown"


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=SMALL, summarizer=ScriptedSummarizer()) as eng:
        yield eng


def talk(engine: Engine, session: str, turns: int, *, fact_at: int | None = None) -> None:
    for t in range(turns):
        said = FACT if t == fact_at else words(20, f"q{t}-")
        answer = REPLY if t == fact_at else words(20, f"a{t}-")
        engine.ingest(session, {"role": "user", "content": said})
        engine.ingest(session, {"role": "assistant", "content": answer})


def text_of(messages: list[dict[str, object]]) -> str:
    return json.dumps(messages)


def seqs(engine: Engine, refs: list[str]) -> list[int]:
    return [engine.get_message(int(r[4:])).seq for r in refs if r.startswith("msg#")]


def test_a_prompt_brings_what_it_asks_about_into_a_tight_context(engine: Engine) -> None:
    talk(engine, "s", 40, fact_at=3)
    engine.compact("s")
    budget = engine.assemble("s", 100_000, fill=False).tokens + 400
    plain = engine.assemble("s", budget, format="openai")
    assert "pelican" not in text_of(plain.messages)  # compacted away, too old for the room

    asked = engine.assemble(
        "s", budget, format="openai", prompt="What was the launch code for the rocket?"
    )

    shown = text_of(asked.messages)
    assert FACT in shown and REPLY in shown  # the message, and the reply that followed it
    assert asked.tokens <= budget
    fact = next(m for m in engine.messages("s") if m.content == FACT)
    assert f"msg#{fact.message_id}" in asked.recalled
    # Where it was said: after the summary that covers it, and every message in seq order.
    refs = asked.items
    assert refs[0].startswith("sum_")
    assert refs.index(f"msg#{fact.message_id}") > 0
    assert seqs(engine, refs) == sorted(seqs(engine, refs))
    # The newest turns are still there.
    assert asked.items[-1] == plain.items[-1]


def test_a_request_that_finds_nothing_or_is_not_search_syntax_changes_nothing(
    engine: Engine,
) -> None:
    talk(engine, "s", 30, fact_at=2)
    engine.compact("s")
    budget = engine.assemble("s", 100_000, fill=False).tokens + 300
    plain = engine.assemble("s", budget, format="openai")
    for request in (
        "zzz nothing like this was ever said",
        "",
        "   ",
        '"unbalanced quote',
        "a(b|c)* [x] NEAR( AND OR NOT ^$",
        "\x00\ud800",
        "pelican " * 20_000,
    ):
        made = engine.assemble("s", budget, format="openai", focus=request)
        assert made.tokens <= budget
        if "pelican" in request:
            assert FACT in text_of(made.messages)
        else:
            assert made.messages == plain.messages and not made.recalled


def test_prompt_share_zero_turns_it_off(new_db: Callable[[], str]) -> None:
    with Engine.open(
        new_db(), config=SMALL.replace(prompt_share=0.0), summarizer=ScriptedSummarizer()
    ) as engine:
        talk(engine, "s", 40, fact_at=3)
        engine.compact("s")
        budget = engine.assemble("s", 100_000, fill=False).tokens + 400
        made = engine.assemble("s", budget, prompt="the launch code")
        assert not made.recalled and "pelican" not in text_of(made.messages)


def test_a_tool_result_found_comes_with_the_call_it_answers(engine: Engine) -> None:
    engine.ingest("s", {"role": "user", "content": "look up the mascot"})
    engine.ingest(
        "s",
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": "m"}},
            ],
        },
    )
    engine.ingest(
        "s",
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "zebrafish mascot"}
            ],
        },
    )
    talk(engine, "s", 40)
    engine.compact("s")
    budget = engine.assemble("s", 100_000, fill=False).tokens + 400

    made = engine.assemble("s", budget, format="openai", prompt="which zebrafish?")

    assert not made.dropped_orphans
    calls = [m for m in made.messages if m.get("tool_calls")]
    results = [m for m in made.messages if m["role"] == "tool"]
    assert [c["id"] for m in calls for c in m["tool_calls"]] == ["call_1"]  # type: ignore[union-attr]
    assert [r["tool_call_id"] for r in results] == ["call_1"]
    assert "zebrafish mascot" in text_of(results)
    assert made.tokens <= budget


def test_an_earlier_conversation_of_the_family_comes_first(engine: Engine) -> None:
    engine.conversation("day1", create=True, session_key="project")
    talk(engine, "day1", 6, fact_at=1)
    engine.conversation("day2", create=True, session_key="project")
    talk(engine, "day2", 30)
    engine.compact("day2")
    budget = engine.assemble("day2", 100_000, fill=False).tokens + 200

    made = engine.assemble("day2", budget, format="openai", prompt="the rocket launch code")

    day1 = {f"msg#{m.message_id}": m for m in engine.messages("day1")}
    fact = next(ref for ref, m in day1.items() if m.content == FACT)
    assert fact in made.recalled and made.tokens <= budget
    # Day 1's messages come first, in the order they were said, then day 2's context.
    earlier = [ref for ref in made.items if ref in day1]
    assert made.items[: len(earlier)] == earlier and fact in earlier
    assert [day1[ref].seq for ref in earlier] == sorted(day1[ref].seq for ref in earlier)
    # Another conversation, outside the family, is never shown.
    engine.conversation("other", create=True, session_key="elsewhere")
    talk(engine, "other", 4)
    alone = engine.assemble("other", 100_000, prompt="the rocket launch code")
    assert "pelican" not in text_of(alone.messages) and not alone.recalled


def test_the_cli_takes_the_prompt(db: str, run_cli) -> None:  # type: ignore[no-untyped-def]
    with Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer()) as engine:
        talk(engine, "s", 40, fact_at=3)
        engine.compact("s")

    def context(*args: str) -> str:
        out = run_cli("--db", db, "context", "s", *args)
        assert out.code == 0, out.err
        return str(out.out)

    budget = str(json.loads(context("--budget", "100000", "--no-fill", "--json"))["tokens"] + 400)
    assert "pelican" not in context("--budget", budget, "--json")
    data = json.loads(context("--budget", budget, "--prompt", "launch code?", "--json"))
    assert FACT in json.dumps(data["messages"]) and data["tokens"] <= int(budget)
    assert data["recalled"]
    assert "found for the prompt" in context("--budget", budget, "--prompt", "launch")


def test_an_answer_is_never_shown_without_its_question(engine: Engine) -> None:
    # The question is too large for the room; the answer alone is what the search finds.
    engine.ingest("s", {"role": "user", "content": words(400, "huge")})
    engine.ingest("s", {"role": "assistant", "content": FACT})
    talk(engine, "s", 40)
    engine.compact("s")
    budget = engine.assemble("s", 100_000, fill=False).tokens + 300

    made = engine.assemble("s", budget, format="openai", prompt="the launch code for the rocket")

    answer = next(m for m in engine.messages("s") if m.content == FACT)
    assert f"msg#{answer.message_id}" not in made.items  # (its summary may quote it)
    # What is shown for the request starts with a request, each time.
    shown = [r for r in made.items if r in made.recalled]
    assert shown and engine.get_message(int(shown[0][4:])).role == "user"


def test_a_request_of_words_every_turn_holds_shows_nothing_for_it(engine: Engine) -> None:
    # Every turn says "0" … "19" (q5-0 … q5-19): a new turn made of the same numbers is about
    # none of them in particular, and takes no room from the newest detail.
    talk(engine, "s", 40, fact_at=3)
    engine.compact("s")
    budget = engine.assemble("s", 100_000, fill=False).tokens + 400
    plain = engine.assemble("s", budget, format="openai")

    made = engine.assemble("s", budget, format="openai", focus=words(20, "q99-"))

    assert not made.recalled and made.messages == plain.messages
    # With a telling word among them, that word's turn comes back.
    told = engine.assemble("s", budget, format="openai", focus=words(20, "q99-") + " pelican")
    assert FACT in text_of(told.messages)


def test_an_archived_conversation_of_the_family_is_not_brought_back(engine: Engine) -> None:
    # A history the user cleared (archived: LangChain's clear(), LlamaIndex's reset()) stays
    # out of the context, though the recall tools still find it.
    engine.conversation("day1", create=True, session_key="project")
    talk(engine, "day1", 6, fact_at=1)
    engine.archive("day1")
    engine.conversation("day2", create=True, session_key="project")
    talk(engine, "day2", 4)

    made = engine.assemble("day2", 100_000, prompt="the rocket launch code")

    assert not made.recalled and "pelican" not in text_of(made.messages)
    assert engine.grep("pelican", conversation="day2").hits
