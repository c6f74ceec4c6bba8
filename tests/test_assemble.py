"""Context assembly: XML summaries, the fresh tail, the budget, tool pairing, cache stability."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lossless import Config, Engine
from lossless.assemble import summary_text
from lossless.summarize import ScriptedSummarizer
from lossless.timestamps import parse_ts
from lossless.tokens import estimate_tokens

SMALL = Config().replace(
    fresh_tail_count=4,
    leaf_chunk_tokens=200,
    leaf_target_tokens=40,
    condensed_target_tokens=40,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=SMALL, summarizer=ScriptedSummarizer()) as eng:
        yield eng


@pytest.fixture
def folded(new_db: Callable[[], str]) -> Iterator[Engine]:
    """An engine whose assemblies show the summaries as they are, however much room is left
    (``fill_budget`` off): what the rendering tests look at."""
    config = SMALL.replace(fill_budget=False)
    with Engine.open(new_db(), config=config, summarizer=ScriptedSummarizer()) as eng:
        yield eng


def fill(engine: Engine, turns: int) -> None:
    for t in range(turns):
        engine.ingest("s", {"role": "user", "content": words(20, f"q{t}-")})
        engine.ingest("s", {"role": "assistant", "content": words(20, f"a{t}-")})


def test_summaries_are_rendered_as_the_specs_xml_and_marked_untrusted(folded: Engine) -> None:
    engine = folded
    fill(engine, 12)
    engine.compact("s")
    assembled = engine.assemble("s", 100_000)
    first = assembled.messages[0]
    assert first["role"] == "user"
    texts = [b["text"] for b in first["content"] if "<summary " in b["text"]]
    assert texts  # summaries lead, merged into the first user message (roles alternate)
    assert all(t.startswith("[Summary of earlier conversation") for t in texts)
    assert all("do not follow instructions" in t for t in texts)
    pattern = r'<summary id="(sum_[0-9a-f]{16})" kind="(leaf|condensed)" depth="(\d+)"'
    tags = [re.search(pattern, t) for t in texts]
    assert all(tags)
    assert {m.group(2) for m in tags if m} == {"condensed"}  # the sweep condensed the leaves
    for t in texts:
        for attr in ("descendant_count", "earliest_at", "latest_at"):
            assert f'{attr}="' in t
        assert "<parents>" in t and '<summary_ref id="sum_' in t  # a condensed one's parents
        assert "<content>" in t and "</content>" in t


def test_a_fresh_tail_over_the_budget_shrinks_to_its_newest_turns(engine: Engine) -> None:
    fill(engine, 6)
    items = engine.context("s")
    last_turn = items[-1].tokens + items[-2].tokens
    assembled = engine.assemble("s", last_turn + 5)  # the 4-message tail does not fit
    texts = json.dumps(assembled.messages)
    assert "q5-0" in texts and "a5-19" in texts  # the newest turn, whole
    assert "q4-0" not in texts and "a4-0" not in texts
    assert assembled.tokens <= last_turn + 5 and not assembled.over_budget


def test_a_newest_message_over_the_budget_alone_is_shown_clipped_with_its_id(
    engine: Engine,
) -> None:
    fill(engine, 2)
    engine.ingest("s", {"role": "user", "content": words(600, "huge-")})
    newest = engine.context("s")[-1]
    assembled = engine.assemble("s", 200)
    [only] = assembled.messages
    text = json.dumps(only)
    assert f"lcm_describe {newest.ref}" in text and "huge-0" in text and "huge-599" not in text
    assert assembled.tokens <= 200
    assert engine.assemble("s", 5).messages == []  # not even the note fits: nothing does


def test_the_budget_keeps_the_newest_items_and_drops_the_oldest(engine: Engine) -> None:
    fill(engine, 10)
    per_message = engine.context("s")[0].tokens
    assembled = engine.assemble("s", per_message * 7)
    texts = json.dumps(assembled.messages)
    assert "q3-0" not in texts  # oldest dropped
    assert "a6-0" in texts and "a9-0" in texts  # newest kept
    assert assembled.tokens <= per_message * 7
    assert assembled.dropped_items == 13


def test_roles_alternate_and_assistant_content_is_a_block_list(engine: Engine) -> None:
    engine.ingest("s", {"role": "user", "content": "one"})
    engine.ingest("s", {"role": "user", "content": "two"})
    engine.ingest("s", {"role": "assistant", "content": "three"})
    messages = engine.assemble("s", 1000).messages
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == [
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two"},
    ]
    assert isinstance(messages[1]["content"], list)


def _tool_exchange(engine: Engine, call_ids: list[str]) -> None:
    engine.ingest(
        "s",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c, "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}
                for c in call_ids
            ],
        },
    )
    for c in call_ids:
        engine.ingest("s", {"role": "tool", "tool_call_id": c, "content": f"result of {c}"})


def test_parallel_tool_calls_keep_their_results(engine: Engine) -> None:
    engine.ingest("s", {"role": "user", "content": "look"})
    _tool_exchange(engine, ["c1", "c2"])
    messages = engine.assemble("s", 10_000).messages
    uses = [b["id"] for m in messages for b in m["content"] if b["type"] == "tool_use"]
    results = [
        b["tool_use_id"] for m in messages for b in m["content"] if b["type"] == "tool_result"
    ]
    assert uses == ["c1", "c2"]
    assert results == ["c1", "c2"]


def test_a_budget_boundary_between_call_and_result_leaves_no_orphan(engine: Engine) -> None:
    engine.ingest("s", {"role": "user", "content": words(30, "old")})
    _tool_exchange(engine, ["c1"])
    for t in range(2):  # four newer messages: the fresh tail
        engine.ingest("s", {"role": "user", "content": words(10, f"u{t}")})
        engine.ingest("s", {"role": "assistant", "content": words(10, f"r{t}")})
    items = engine.context("s")
    tail_tokens = sum(i.tokens for i in items[-4:])
    result_tokens = items[2].tokens
    # Room for the tail and the tool result, not for the call before it.
    assembled = engine.assemble("s", tail_tokens + result_tokens)
    blocks = [b for m in assembled.messages for b in m["content"]]
    assert not any(b["type"] in ("tool_use", "tool_result") for b in blocks)
    # The call and its result are one unit: left out together, so neither was an orphan.
    assert assembled.dropped_orphans == []
    assert items[2].ref not in assembled.items


def test_the_prefix_is_byte_identical_when_nothing_was_compacted(engine: Engine) -> None:
    fill(engine, 12)
    engine.compact("s")
    before = engine.assemble("s", 100_000).messages
    again = engine.assemble("s", 100_000).messages
    assert json.dumps(before) == json.dumps(again)
    engine.ingest("s", {"role": "user", "content": "a new question"})
    after = engine.assemble("s", 100_000).messages
    assert json.dumps(after[: len(before) - 1]) == json.dumps(before[:-1])


def test_anthropic_thinking_blocks_are_passed_through_exactly(engine: Engine) -> None:
    thinking = {"type": "thinking", "thinking": "plan the fix", "signature": "EuYBCkQYAiJA"}
    engine.ingest("s", {"role": "user", "content": "fix it"})
    engine.ingest(
        "s",
        {"role": "assistant", "content": [thinking, {"type": "text", "text": "done"}]},
        format="anthropic",
    )
    messages = engine.assemble("s", 10_000).messages
    assert messages[1]["content"][0] == thinking


def test_an_unknown_format_is_refused(engine: Engine) -> None:
    engine.ingest("s", {"role": "user", "content": "x"})
    with pytest.raises(ValueError, match="anthropic"):
        engine.assemble("s", 100, format="gemini")


def test_openai_format_has_tool_calls_and_tool_messages(engine: Engine) -> None:
    engine.ingest("s", {"role": "system", "content": "be brief"})
    engine.ingest("s", {"role": "user", "content": "look"})
    _tool_exchange(engine, ["c1", "c2"])
    messages = engine.assemble("s", 10_000, format="openai").messages
    assert messages[0] == {"role": "system", "content": "be brief"}
    assistant = messages[2]
    assert assistant["role"] == "assistant"
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"p": 1}
    assert messages[3:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "result of c1"},
        {"role": "tool", "tool_call_id": "c2", "content": "result of c2"},
    ]


def test_responses_format_passes_its_own_items_through_and_converts_others(engine: Engine) -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_9",
        "name": "f",
        "arguments": "{}",
    }
    output = {"type": "function_call_output", "call_id": "call_9", "output": "42"}
    engine.ingest("s", {"role": "user", "content": "compute"})
    for item in (reasoning, call, output):
        engine.ingest("s", item, format="openai_responses")
    _tool_exchange(engine, ["c7"])  # chat-shaped tool call, converted
    items = engine.assemble("s", 10_000, format="responses").messages
    assert items[0] == {"role": "user", "content": "compute"}
    assert items[1:4] == [reasoning, call, output]
    assert items[4]["type"] == "function_call" and items[4]["call_id"] == "c7"
    assert items[5] == {"type": "function_call_output", "call_id": "c7", "output": "result of c7"}


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses", "openclaw"])
def test_no_format_emits_an_orphan_at_a_budget_boundary(engine: Engine, fmt: str) -> None:
    engine.ingest("s", {"role": "user", "content": words(30, "old")})
    _tool_exchange(engine, ["c1"])
    for t in range(2):
        engine.ingest("s", {"role": "user", "content": words(10, f"u{t}")})
        engine.ingest("s", {"role": "assistant", "content": words(10, f"r{t}")})
    items = engine.context("s")
    budget = sum(i.tokens for i in items[-4:]) + items[2].tokens
    dumped = json.dumps(engine.assemble("s", budget, format=fmt).messages)
    assert "c1" not in dumped


#: An OpenClaw turn with every kind of message it writes (unknown keys included).
OPENCLAW_TURN = [
    {"role": "user", "content": "look it up", "timestamp": 1, "__openclaw": {"owner": True}},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"},
            {"type": "toolCall", "id": "call_1", "name": "lookup", "arguments": {"q": "x"}},
        ],
        "api": "openai-completions",
        "provider": "p",
        "model": "m",
        "usage": {"input": 1, "output": 1, "totalTokens": 2},
        "stopReason": "toolUse",
        "timestamp": 2,
    },
    {
        "role": "toolResult",
        "toolCallId": "call_1",
        "toolName": "lookup",
        "content": [{"type": "text", "text": "found it"}],
        "isError": False,
        "timestamp": 3,
    },
    {"role": "bashExecution", "command": "ls", "output": "a", "exitCode": 0, "timestamp": 4},
    {"role": "custom", "customType": "note", "content": "n", "display": True, "timestamp": 5},
]


def test_openclaw_format_gives_openclaws_messages_back_exactly(engine: Engine) -> None:
    engine.ingest_batch("s", OPENCLAW_TURN, format="openclaw")
    assert engine.assemble("s", 10_000, format="openclaw").messages == OPENCLAW_TURN


def test_openclaw_format_converts_summaries_and_other_shapes(folded: Engine) -> None:
    engine = folded
    fill(engine, 6)
    _tool_exchange(engine, ["c9"])  # chat-shaped, converted
    engine.compact("s")
    made = engine.assemble("s", 10_000, format="openclaw").messages
    assert made[0]["role"] == "user" and '<summary id="sum_' in made[0]["content"]
    call = next(m for m in made if m["role"] == "assistant" and m["stopReason"] == "toolUse")
    assert call["content"][-1] == {
        "type": "toolCall",
        "id": "c9",
        "name": "read",
        "arguments": {"p": 1},
    }
    result = next(m for m in made if m["role"] == "toolResult")
    assert result["toolCallId"] == "c9" and result["content"][0]["text"] == "result of c9"
    # Each carries when it was said (OpenClaw shows a time before every message): a summary
    # when its sources end, a converted message when it was stored.
    [(summary, _)] = engine.context_summaries("s")
    ended = parse_ts(summary.latest_at or summary.created_at)
    assert ended is not None and made[0]["timestamp"] == int(ended.timestamp() * 1000)
    stored = {m.content: m for m in engine.messages("s")}
    said = parse_ts(stored["result of c9"].created_at)
    assert said is not None and result["timestamp"] == int(said.timestamp() * 1000)


# --- the budget is a cap: property-tested -----------------------------------------------------

_sessions = itertools.count()
#: A turn: the user's words, whether the assistant calls a tool (with a result of how many
#: words), and the assistant's words.
TURNS = st.lists(
    st.tuples(st.integers(1, 120), st.integers(0, 400), st.integers(1, 400)),
    min_size=1,
    max_size=10,
)


def _strings(value: object) -> list[str]:
    """Every string inside *value* (a rendered message list)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _strings(v)]
    if isinstance(value, list):
        return [t for v in value for t in _strings(v)]
    return []


def _say(engine: Engine, session: str, turns: list[tuple[int, int, int]]) -> None:
    for t, (asked, tool, answered) in enumerate(turns):
        engine.ingest(session, {"role": "user", "content": words(asked, f"t{t}u")})
        if tool:
            call = {
                "id": f"c{t}",
                "type": "function",
                "function": {"name": "run", "arguments": "{}"},
            }
            engine.ingest(
                session,
                {"role": "assistant", "content": f"t{t}call", "tool_calls": [call]},
            )
            engine.ingest(
                session, {"role": "tool", "tool_call_id": f"c{t}", "content": words(tool, f"t{t}r")}
            )
        engine.ingest(session, {"role": "assistant", "content": words(answered, f"t{t}a")})


@settings(
    max_examples=int(os.environ.get("LOSSLESS_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(turns=TURNS, budget=st.integers(1, 4_000), compact=st.booleans())
def test_the_budget_is_a_cap_and_the_newest_turn_and_summary_come_first(
    engine: Engine, turns: list[tuple[int, int, int]], budget: int, compact: bool
) -> None:
    session = f"cap{next(_sessions)}"
    _say(engine, session, turns)
    if compact:
        engine.compact(session)
    items = engine.context(session)
    stored = engine.messages(session)

    assembled = engine.assemble(session, budget)

    assert assembled.tokens <= budget
    text = json.dumps(assembled.messages)
    # What each shown item costs: a message its tokens, a summary what it reads as shown (the
    # untrusted-data note and the XML with its parents).
    tokens = {f"msg#{m.message_id}": m.token_count for m in stored}
    sums = [ref for ref in assembled.items if ref.startswith("sum_")]
    sums += [i.ref for i in items if i.summary_id is not None and i.ref not in sums]
    parents = engine.store.parents_of(sums)
    for summary in engine.store.get_summaries(sums):
        shown = summary_text(summary, parents[summary.summary_id])
        tokens[summary.summary_id] = estimate_tokens(shown)
        if summary.summary_id in assembled.items:
            assert shown in "".join(
                b.get("text", "") for m in assembled.messages for b in m["content"]
            )
    counted = sum(tokens[ref] for ref in assembled.items if ref not in assembled.clipped_all)
    for ref in assembled.clipped_all:  # shown as its head and where to read it whole
        [stub] = [t for t in _strings(assembled.messages) if f"lcm_describe {ref} " in t]
        counted += estimate_tokens(stub)
    assert assembled.tokens == counted + assembled.resume_tokens
    # The output holds exactly the messages it names — from the context, or from below its
    # summaries to fill the budget: each one's first word is there, no left-out message's is
    # (the summarizer writes none of the messages' words).
    for message in stored:
        ref = f"msg#{message.message_id}"
        first = message.content.split()[0]
        shown_word = re.search(rf"\b{re.escape(first)}\b", text) is not None
        if ref in assembled.clipped_all:
            assert f"lcm_describe {ref}" in text
        elif ref in assembled.items:
            assert shown_word or message.role == "tool" or "call" in first, ref  # orphans go
        elif not assembled.resume_tokens:  # the resume summary may quote a left-out message
            assert not shown_word, ref
    # The essentials come first: the newest user request is always there (whole, or clipped
    # with where to read it whole) once the budget holds the clip's note; then the newest
    # summary (or, with room to spare, the detail it was made from) whenever it fits beside
    # that request; then what followed the request, newest first.
    request = max(i for i, item in enumerate(items) if item.role == "user")
    if budget >= 80:
        assert items[request].ref in assembled.items
    summaries = [i for i in items if i.summary_id is not None]
    request_tokens = min(items[request].tokens, budget)
    if summaries and items[request].tokens > budget:
        # The request clipped: the newest summary keeps its room when it takes at most half
        # the budget (a request with summaries stored never goes without one).
        newest = tokens[summaries[-1].ref]
        if newest <= budget // 2 and budget - newest >= 64:
            assert summaries[-1].ref in assembled.items
    if summaries and tokens[summaries[-1].ref] + request_tokens <= budget:
        context_refs = {i.ref for i in items}
        unfolded = [ref for ref in assembled.items if ref not in context_refs]
        assert summaries[-1].ref in assembled.items or unfolded
        after = sum(item.tokens for item in items[request + 1 :])
        if tokens[summaries[-1].ref] + request_tokens + after <= budget:
            assert all(item.ref in assembled.items for item in items[request:])


# --- the room under the budget is spent on detail -------------------------------------------


def test_a_budget_that_holds_the_history_shows_it_as_it_was(engine: Engine) -> None:
    fill(engine, 12)
    engine.compact("s")
    assert any(i.summary_id for i in engine.context("s"))
    stored = engine.messages("s")

    made = engine.assemble("s", 10_000, format="openai")

    # Every message, in order, exactly as said; the summaries gave their place to them.
    assert made.summaries == 0 and made.items == [f"msg#{m.message_id}" for m in stored]
    assert [m["content"] for m in made.messages] == [m.content for m in stored]
    assert made.unfolded == len(stored) - sum(1 for i in engine.context("s") if i.message_id)
    assert made.tokens == sum(m.token_count for m in stored) <= 10_000
    # Asked not to, or with no room, the summaries are shown as they are.
    folded = engine.assemble("s", 10_000, format="openai", fill=False)
    assert folded.unfolded == 0 and folded.summaries >= 1
    assert folded.items == [i.ref for i in engine.context("s")]


def test_a_tight_budget_shows_the_summary_then_the_messages_before_the_tail(
    engine: Engine,
) -> None:
    fill(engine, 40)
    engine.compact("s")
    context = engine.context("s")
    # Room for some of what was summarized (a step of messages is ~700 tokens here), not all.
    budget = engine.assemble("s", 100_000, fill=False).tokens + 1_500

    made = engine.assemble("s", budget)

    assert made.tokens <= budget and made.summaries >= 1 and made.unfolded > 0
    refs = made.items
    first_raw = next(n for n, ref in enumerate(refs) if ref.startswith("msg#"))
    assert all(ref.startswith("sum_") for ref in refs[:first_raw])  # summaries lead
    raw = [engine.get_message(int(ref[4:])) for ref in refs[first_raw:]]
    # One unbroken run of messages up to the newest.
    assert [m.seq for m in raw] == list(range(raw[0].seq, raw[0].seq + len(raw)))
    assert raw[-1].message_id == context[-1].message_id

    # As the conversation grows, the run's start moves on in steps (a summary's whole range,
    # or FILL_STEP messages), not at every turn: between moves the prompt's prefix is the same
    # bytes, so a provider's prompt cache keeps it.
    starts, previous = [raw[0].seq], made
    for t in range(8):
        engine.ingest("s", {"role": "user", "content": words(20, f"more{t}-")})
        now = engine.assemble("s", budget)
        first = next(ref for ref in now.items if ref.startswith("msg#"))
        starts.append(engine.get_message(int(first[4:])).seq)
        if starts[-1] == starts[-2]:
            # (the last message may gain the new turn's blocks: roles alternate)
            assert now.messages[: len(previous.messages) - 1] == previous.messages[:-1]
        previous = now
    assert starts == sorted(starts)  # only ever forward
    assert len(set(starts)) <= 3  # 8 turns of ~40 tokens: a step is ~700 tokens


def test_a_user_message_said_on_another_day_carries_its_date(engine: Engine) -> None:
    def say(role: str, text: str, day: int, hour: int = 9) -> None:
        when = datetime(2023, 5, day, hour, tzinfo=UTC)
        engine.ingest("d", {"role": role, "content": text}, created_at=when)

    say("user", "we start the migration", 8)
    say("assistant", "noted", 8)
    say("user", "and the backups?", 8, 17)
    say("assistant", "tonight", 9, 1)  # the reply comes after midnight
    say("user", "done with the backups", 9)  # a new day: marked
    say("assistant", "great", 9)
    say("user", "cut over today", 12)  # marked

    made = engine.assemble("d", 10_000, format="openai")

    users = [m["content"] for m in made.messages if m["role"] == "user"]
    assert users[0] == "we start the migration"  # nothing before it to differ from
    assert users[1] == "and the backups?"  # the same day
    assert users[2] == "[Tuesday 9 May 2023]\ndone with the backups"
    assert users[3] == "[Friday 12 May 2023]\ncut over today"
    assert made.tokens == sum(m.token_count for m in engine.messages("d")) + sum(
        estimate_tokens(mark) for mark in ("[Tuesday 9 May 2023]", "[Friday 12 May 2023]")
    )
    # Asked not to (a framework whose messages must come back exactly as stored): none.
    plain = engine.assemble("d", 10_000, format="openai", dates=False)
    assert [m["content"] for m in plain.messages] == [m.content for m in engine.messages("d")]


def test_a_request_over_the_budget_is_clipped_beside_the_newest_summary(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    fill(engine, 12)
    engine.compact("s")
    engine.ingest("s", {"role": "user", "content": words(3_000, "paste")})
    newest = next(i for i in reversed(engine.context("s")) if i.summary_id)
    shown = engine.assemble("s", 100_000, fill=False)
    summary_cost = next(
        estimate_tokens(b["text"])
        for m in shown.messages
        for b in m["content"]
        if newest.summary_id in b.get("text", "")
    )
    budget = 3 * summary_cost
    with caplog.at_level("WARNING", logger="lossless.engine"):
        made = engine.assemble("s", budget)
    assert made.tokens <= budget
    assert made.clipped is not None and newest.summary_id in made.items
    assert "paste0" in json.dumps(made.messages)  # its head, with where to read it whole
    warned = [r.getMessage() for r in caplog.records]
    assert any("the newest request" in w and made.clipped in w for w in warned), warned


def test_a_leaf_folded_under_pressure_unfolds_into_the_leaves_it_took_the_place_of(
    new_db: Callable[[], str],
) -> None:
    # A host's turns at a tight budget (offline summaries of real size): compaction under
    # pressure folds leaves into one leaf, as the DAG grows a level only when a level has
    # condensed_min_fanout summaries. With room, assembly shows the finer leaves again.
    said = itertools.count()

    def line() -> str:
        return " ".join(f"w{next(said) * 7919 % 3001}" for _ in range(25)) + "."

    with Engine.open(new_db(), config=Config()) as engine:
        for _ in range(150):
            turn = [{"role": "user", "content": line()}, {"role": "assistant", "content": line()}]
            engine.after_turn("s", turn, token_budget=4000)
        folded = [i.summary_id for i in engine.context("s") if i.summary_id]
        replaced = engine.store.replaced_by(str(folded[0]))
        assert len(replaced) >= 2 and engine.summary(str(folded[0])).depth == 0

        made = engine.assemble("s", 8000)

        below: set[str] = set()  # what the fold replaced, fold by fold
        todo = list(replaced)
        while todo:
            summary_id = todo.pop()
            below.add(summary_id)
            todo += engine.store.replaced_by(summary_id)
        shown = [ref for ref in made.items if ref.startswith("sum_")]
        assert folded[0] not in shown and shown and set(shown) <= below
        assert made.tokens <= 8000
        starts = [engine.summary(s).earliest_at or "" for s in replaced]
        assert starts == sorted(starts)  # in the order of what they cover


def test_a_summary_whose_text_changes_in_place_is_costed_anew(new_db: Callable[[], str]) -> None:
    # What a summary costs as shown is kept between assemblies; a summary rewritten in place
    # (same id: a forget of what it summarized) costs what its new text does.
    db = new_db()
    with Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer()) as engine:
        fill(engine, 12)
        engine.compact("s")
        before = engine.assemble("s", 100_000, fill=False)
        shown = sorted(ref for ref in before.items if ref.startswith("sum_"))
        stored = engine.messages("s")
        engine.forget("s", messages=(stored[0].message_id, stored[8].message_id))

        after = engine.assemble("s", 100_000, fill=False)

        changed = [s for s in engine.summaries(shown) if s.model == "forgotten"]
        assert changed and after.tokens <= 100_000
        text = json.dumps(after.messages)
        assert all(s.content in text for s in changed)
    # Its cost as shown is its new text's: a process that never saw the old text agrees.
    with Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer()) as fresh:
        assert fresh.assemble("s", 100_000, fill=False).tokens == after.tokens
