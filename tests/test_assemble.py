"""Context assembly: XML summaries, the fresh tail, the budget, tool pairing, cache stability."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lossless import Config, Engine
from lossless.summarize import ScriptedSummarizer
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


def fill(engine: Engine, turns: int) -> None:
    for t in range(turns):
        engine.ingest("s", {"role": "user", "content": words(20, f"q{t}-")})
        engine.ingest("s", {"role": "assistant", "content": words(20, f"a{t}-")})


def test_summaries_are_rendered_as_the_specs_xml_and_marked_untrusted(engine: Engine) -> None:
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
    assert assembled.dropped_orphans == ["tool result c1"]


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


def test_openclaw_format_converts_summaries_and_other_shapes(engine: Engine) -> None:
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


# --- the budget is a cap: property-tested -----------------------------------------------------

_sessions = itertools.count()
#: A turn: the user's words, whether the assistant calls a tool (with a result of how many
#: words), and the assistant's words.
TURNS = st.lists(
    st.tuples(st.integers(1, 120), st.integers(0, 400), st.integers(1, 400)),
    min_size=1,
    max_size=10,
)


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
    tokens = {item.ref: item.tokens for item in items}

    assembled = engine.assemble(session, budget)

    assert assembled.tokens <= budget
    text = json.dumps(assembled.messages)
    counted = sum(tokens[ref] for ref in assembled.items if ref != assembled.clipped)
    if assembled.clipped is not None:
        [stub] = [
            b["text"]
            for m in assembled.messages
            for b in m["content"]
            if "lcm_describe" in b["text"]
        ]
        counted += estimate_tokens(stub)
    assert assembled.tokens == counted + assembled.resume_tokens
    # The output holds exactly the items it names: each chosen message's first word is there,
    # no left-out message's is (the summarizer writes none of the messages' words).
    for item in items:
        if item.message_id is None:
            continue
        first = engine.get_message(item.message_id).content.split()[0]
        shown = re.search(rf"\b{re.escape(first)}\b", text) is not None
        if item.ref == assembled.clipped:
            assert f"lcm_describe {item.ref}" in text
        elif item.ref in assembled.items:
            assert shown or item.role == "tool" or "call" in first, item  # orphans are left out
        elif not assembled.resume_tokens:  # the resume summary may quote a left-out message
            assert not shown, item
    # The newest message is always there (whole, or clipped with where to read it whole)
    # once the budget holds the clip's note; the newest summary whenever it fits beside the
    # newest unit of the conversation (a message, or a call with its results).
    if budget >= 80:
        assert items[-1].ref in assembled.items
    last_unit = max(i for i, item in enumerate(items) if item.role != "tool")
    unit_tokens = sum(item.tokens for item in items[last_unit:])
    summaries = [i for i in items if i.summary_id is not None]
    if summaries and summaries[-1].tokens + unit_tokens <= budget:
        assert summaries[-1].ref in assembled.items
