"""Pydantic AI driving lossless: ``Agent.run`` with its own ``FunctionModel`` and
``TestModel``, lossless's history processor as a capability and its recall toolset."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from framework_turns import DETAIL, SMALL, answer, question, unrelated
from lossless import Config, Engine
from lossless.integrations.pydantic_ai import LosslessHistory


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=SMALL) as eng:
        yield eng


def texts(messages: list[ModelMessage]) -> str:
    return json.dumps([str(getattr(p, "content", "")) for m in messages for p in m.parts])


def test_pydantic_ai_agent_runs_see_a_bounded_context_and_every_message_is_kept(
    engine: Engine,
) -> None:
    seen: list[list[ModelMessage]] = []
    turns = 20

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[TextPart(content=f"Found: {last.content}")])
        asked = str(last.content)
        if asked.startswith("RECALL"):
            call = ToolCallPart(tool_name="lcm_grep", args={"pattern": "staging password"})
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(content=answer(int(asked.split()[1].rstrip(":"))))])

    history = LosslessHistory("pa-1", engine, token_budget=600)
    agent = Agent(
        FunctionModel(model),
        capabilities=[history.capability()],
        toolsets=[history.toolset()],
    )
    previous: list[ModelMessage] = []
    for i in range(turns):
        result = agent.run_sync(question(i), message_history=previous)
        assert result.output == answer(i)
        previous = result.all_messages()
    result = agent.run_sync("RECALL the password rotation", message_history=previous)
    assert "Thursday" in result.output

    # The model saw summaries and a bounded window, though twenty long turns were said.
    late = seen[turns - 1]
    assert any(
        isinstance(p, SystemPromptPart) and '<summary id="sum_' in p.content
        for m in late
        for p in m.parts
    )
    sizes = [engine.token_counter.count(texts(m)) for m in seen[:turns]]
    whole = engine.token_counter.count(texts(history.stored_messages()))
    assert whole > 4 * 600 and max(sizes) < 2 * 600
    # Every message once, in order: every question, every answer, the tool call and return.
    stored = history.stored_messages()
    asked = [p.content for m in stored for p in m.parts if isinstance(p, UserPromptPart)]
    assert asked == [question(i) for i in range(turns)] + ["RECALL the password rotation"]
    said = [p.content for m in stored for p in m.parts if isinstance(p, TextPart)]
    assert said[:turns] == [answer(i) for i in range(turns)] and "Thursday" in said[-1]
    returned = [p for m in stored for p in m.parts if isinstance(p, ToolReturnPart)]
    assert len(returned) == 1 and "Thursday" in str(returned[0].content)


def test_pydantic_ai_test_model_calls_every_recall_tool_of_the_toolset(engine: Engine) -> None:
    history = LosslessHistory("pa-2", engine)
    history.engine.ingest("pa-2", {"role": "user", "content": DETAIL})
    agent = Agent(TestModel(), capabilities=[history.capability()], toolsets=[history.toolset()])
    result = agent.run_sync("recall")
    returns = {
        p.tool_name: p.content
        for m in result.all_messages()
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    assert {"lcm_grep", "lcm_describe", "lcm_expand_query"} <= set(returns)
    assert all(isinstance(v, str) and json.loads(v) for v in returns.values())
    stored = history.stored_messages()
    assert sum(isinstance(p, ToolReturnPart) for m in stored for p in m.parts) == len(returns)


TEXT = st.text(max_size=30)
CALL_ID = st.text("abc123", min_size=3, max_size=6)
REQUEST_PARTS = st.one_of(
    st.builds(UserPromptPart, content=TEXT),
    st.builds(SystemPromptPart, content=TEXT),
    st.builds(
        ToolReturnPart,
        tool_name=st.sampled_from(["read", "grep"]),
        content=TEXT | st.dictionaries(st.sampled_from(["v", "w"]), st.integers(), max_size=2),
        tool_call_id=CALL_ID,
    ),
    st.builds(
        ToolReturnPart,
        tool_name=st.sampled_from(["read", "grep"]),
        content=TEXT,
        tool_call_id=CALL_ID,
        outcome=st.just("retried"),
    ),
)
RESPONSE_PARTS = st.one_of(
    st.builds(TextPart, content=TEXT),
    st.builds(ThinkingPart, content=TEXT),
    st.builds(
        ToolCallPart,
        tool_name=st.sampled_from(["read", "grep"]),
        args=st.dictionaries(st.sampled_from(["a", "b"]), st.integers() | TEXT, max_size=2),
        tool_call_id=CALL_ID,
    ),
)
MESSAGES = st.one_of(
    st.builds(ModelRequest, parts=st.lists(REQUEST_PARTS, min_size=1, max_size=3)),
    st.builds(ModelResponse, parts=st.lists(RESPONSE_PARTS, min_size=1, max_size=3)),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(MESSAGES, min_size=1, max_size=6))
def test_pydantic_ai_messages_of_every_kind_come_back_equal(
    engine: Engine, batch: list[ModelMessage]
) -> None:
    history = LosslessHistory(f"p-{uuid.uuid4()}", engine)
    history(batch)
    history([*batch, batch[0]])  # handed over again, with one more (the same words again)
    # Exactly what was handed over: Pydantic AI's own serialized form, message by message
    # (its own round trip turns a deprecated RetryPromptPart into a retried ToolReturnPart).
    handed = ModelMessagesTypeAdapter.dump_python([*batch, batch[0]], mode="json")
    assert [m.to_source() for m in engine.messages(history.session_id)] == handed


def test_pydantic_ai_toolset_keeps_the_declaration_and_refuses_with_advice(
    engine: Engine,
) -> None:
    import asyncio

    from pydantic_ai.tools import RunContext
    from pydantic_ai.usage import RunUsage

    from lossless.retrieval.tools import TOOLS

    history = LosslessHistory("pa-3", engine)
    engine.ingest("pa-3", {"role": "user", "content": DETAIL})
    toolset = history.toolset()
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    tools = asyncio.run(toolset.get_tools(ctx))
    grep = tools["lcm_grep"]
    declared = TOOLS["lcm_grep"].json_schema(omit=("conversation",))
    assert grep.tool_def.parameters_json_schema == declared
    found = asyncio.run(toolset.call_tool("lcm_grep", {"pattern": "staging password"}, ctx, grep))
    assert "Thursday" in found
    refused = asyncio.run(toolset.call_tool("lcm_grep", {"pattern": "x", "limit": 0}, ctx, grep))
    assert "limit must be an integer from 1 to 200" in json.loads(refused)["error"]


def test_pydantic_ai_show_source_exports_the_same_messages(
    tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    said: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(content="hi")]),
        ModelResponse(parts=[ToolCallPart(tool_name="f", args={"a": 1}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart(tool_name="f", content="1", tool_call_id="c1")]),
    ]
    with Engine.open(tmp_path / "s.db", config=Config()) as engine:
        LosslessHistory("x", engine)(said)
    shown = run_cli("--db", str(tmp_path / "s.db"), "show", "x", "--json", "--source")
    assert shown.code == 0, shown
    exported = [m["source"] for m in json.loads(shown.out)["messages"]]
    assert ModelMessagesTypeAdapter.validate_python(exported) == said


def test_pydantic_ai_a_question_about_a_compacted_turn_brings_that_turn_back(
    engine: Engine,
) -> None:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(content="noted")])

    history = LosslessHistory("pa-prompt", engine, token_budget=2000)
    agent = Agent(FunctionModel(model), capabilities=[history.capability()])
    previous: list[ModelMessage] = []
    for i in range(20):
        previous = agent.run_sync(unrelated(i), message_history=previous).all_messages()
    agent.run_sync("When does the staging database password rotate?", message_history=previous)

    def asked(messages: list[ModelMessage]) -> list[str]:
        return [str(p.content) for m in messages for p in m.parts if isinstance(p, UserPromptPart)]

    # Turn 0 was compacted away long before; the question about it brings it back whole,
    # before the newest turns, within the budget.
    assert unrelated(0) not in asked(seen[-2])
    last = asked(seen[-1])
    assert unrelated(0) in last and last[-1].startswith("When does the staging")
    assert engine.token_counter.count(texts(seen[-1])) <= 2000
