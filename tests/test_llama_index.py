"""LlamaIndex driving lossless: its chat engine with :class:`LosslessMemory` and its own mock
LLM, and the recall tools as LlamaIndex tools."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall

from framework_turns import DETAIL, SMALL, question, unrelated
from lossless import Config, Engine
from lossless.integrations.llama_index import LosslessMemory, recall_tools
from lossless.retrieval.tools import TOOLS


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=SMALL) as eng:
        yield eng


def tokens(engine: Engine, messages: list[ChatMessage]) -> int:
    return sum(engine.token_counter.count(m.content or "") for m in messages)


def test_llama_index_chat_engine_sees_a_bounded_context_and_every_message_is_kept(
    engine: Engine,
) -> None:
    memory = LosslessMemory.from_defaults(
        session_id="li-1", store_or_engine=engine, token_budget=600
    )
    llm = MockLLMWithChatMemoryOfLastCall()
    chat = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    seen: list[list[ChatMessage]] = []
    replies = []
    for i in range(20):
        replies.append(chat.chat(question(i)).response)
        seen.append(list(llm.last_chat_messages or []))

    late = seen[-1]
    assert any(m.additional_kwargs.get("lossless_summary") for m in late)
    assert any('<summary id="sum_' in (m.content or "") for m in late)
    everything = memory.get_all()
    assert tokens(engine, everything) > 4 * 600
    assert all(tokens(engine, c) < 3 * 600 for c in seen)
    # Every message once, in order, as LlamaIndex put it.
    assert [m.content for m in everything] == [
        text for i in range(20) for text in (question(i), replies[i])
    ]


def test_llama_index_recall_tools_find_an_early_detail(engine: Engine) -> None:
    memory = LosslessMemory.from_defaults(
        session_id="li-2", store_or_engine=engine, token_budget=600
    )
    for i in range(20):
        memory.put_messages(
            [
                ChatMessage(role="user", content=question(i)),
                ChatMessage(role="assistant", content=f"Answer {i}."),
            ]
        )
    assert len(memory.get()) < 40
    tools = {t.metadata.name: t for t in recall_tools(memory)}
    schema = tools["lcm_grep"].metadata.get_parameters_dict()
    assert set(schema["properties"]) == {p.name for p in TOOLS["lcm_grep"].params} - {
        "conversation"
    }
    found = json.loads(tools["lcm_grep"].call(pattern="staging database password").content)
    assert any("Thursday" in h["snippet"] for h in found["hits"])
    answer = json.loads(
        tools["lcm_expand_query"].call(prompt="When does the staging password rotate?").content
    )
    assert "Thursday" in answer["answer"]


def test_llama_index_reset_and_set_archive_instead_of_deleting(engine: Engine) -> None:
    memory = LosslessMemory.from_defaults(session_id="li-3", store_or_engine=engine)
    memory.put(ChatMessage(role="user", content=DETAIL))
    first = memory.conversation_id()
    memory.reset()
    assert memory.get() == [] and engine.conversation(first).status == "archived"
    memory.set([ChatMessage(role="user", content="fresh start")])
    assert [m.content for m in memory.get_all()] == ["fresh start"]
    grep = next(t for t in recall_tools(memory) if t.metadata.name == "lcm_grep")
    assert "Thursday" in grep.call(pattern="staging password").content


def test_llama_index_memory_opened_from_a_path_closes_its_store(tmp_path: Path) -> None:
    memory = LosslessMemory.from_defaults(session_id="li-4", store_or_engine=tmp_path / "own.db")
    memory.put(ChatMessage(role="user", content="hello"))
    memory.close()
    with Engine.open(tmp_path / "own.db", config=Config()) as engine:
        assert [m.content for m in engine.messages("li-4")] == ["hello"]


TEXT = st.text(max_size=30)
CALLS = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.text("abc123", min_size=3, max_size=6),
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.sampled_from(["read", "grep"]), "arguments": st.just('{"a": 1}')}
            ),
        }
    ),
    min_size=1,
    max_size=2,
)
MESSAGES = st.one_of(
    st.builds(ChatMessage, role=st.sampled_from(["user", "system"]), content=TEXT),
    st.builds(
        ChatMessage,
        role=st.just("assistant"),
        content=TEXT,
        additional_kwargs=st.one_of(st.just({}), CALLS.map(lambda c: {"tool_calls": c})),
    ),
    st.builds(
        ChatMessage,
        role=st.just("tool"),
        content=TEXT,
        additional_kwargs=st.fixed_dictionaries(
            {"tool_call_id": st.text("abc123", min_size=3, max_size=6), "name": st.just("read")}
        ),
    ),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(MESSAGES, min_size=1, max_size=8))
def test_llama_index_messages_of_every_kind_come_back_equal(
    engine: Engine, batch: list[ChatMessage]
) -> None:
    memory = LosslessMemory.from_defaults(session_id=f"p-{uuid.uuid4()}", store_or_engine=engine)
    memory.put_messages(batch)
    memory.put(batch[0])  # the same message again is a second message
    assert memory.get_all() == [*batch, batch[0]]


def test_llama_index_messages_keep_what_they_carry_beside_their_text(engine: Engine) -> None:
    extra: dict[str, Any] = {
        "tool_calls": [{"id": "c9", "function": {"name": "f", "arguments": "{}"}}]
    }
    message = ChatMessage(role="assistant", content="calling f", additional_kwargs=extra)
    memory = LosslessMemory.from_defaults(session_id="li-5", store_or_engine=engine)
    memory.put(message)
    assert memory.get_all() == [message]


def test_llama_index_function_agent_calls_a_recall_tool_with_lossless_memory(
    engine: Engine,
) -> None:
    import asyncio

    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ToolCallBlock
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    def model(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        last = messages[-1]
        if last.role == "tool":
            return ChatMessage(role="assistant", content=f"Found: {last.content}")
        if "RECALL" in (last.content or ""):
            call = ToolCallBlock(
                tool_call_id="c1", tool_name="lcm_grep", tool_kwargs={"pattern": "staging password"}
            )
            return ChatMessage(role="assistant", blocks=[call])
        return ChatMessage(role="assistant", content="Noted.")

    memory = LosslessMemory.from_defaults(
        session_id="li-6", store_or_engine=engine, token_budget=600
    )
    agent = FunctionAgent(
        tools=recall_tools(memory), llm=MockFunctionCallingLLM(response_generator=model)
    )

    async def run() -> list[str]:
        answers = []
        for i in range(12):
            answers.append(str(await agent.run(question(i), memory=memory)))
        answers.append(str(await agent.run("RECALL the rotation", memory=memory)))
        return answers

    answers = asyncio.run(run())
    assert "Thursday" in answers[-1]
    stored = memory.get_all()
    assert [m.role for m in stored[-4:]] == ["user", "assistant", "tool", "assistant"]
    assert [m.content for m in stored if m.role == "user"] == [question(i) for i in range(12)] + [
        "RECALL the rotation"
    ]
    assert engine.summary_counts(memory.conversation_id())  # it compacted on the way


def test_llama_index_show_source_exports_the_same_messages(
    tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    said = [
        ChatMessage(role="user", content="hi"),
        ChatMessage(
            role="assistant",
            content="",
            additional_kwargs={
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]
            },
        ),
        ChatMessage(role="tool", content="1", additional_kwargs={"tool_call_id": "c1"}),
    ]
    with Engine.open(tmp_path / "s.db", config=Config()) as engine:
        LosslessMemory.from_defaults(session_id="x", store_or_engine=engine).put_messages(said)
    shown = run_cli("--db", str(tmp_path / "s.db"), "show", "x", "--json", "--source")
    assert shown.code == 0, shown
    exported = [m["source"] for m in json.loads(shown.out)["messages"]]
    assert [ChatMessage.model_validate(m) for m in exported] == said


def test_llama_index_a_question_about_a_compacted_turn_brings_that_turn_back(
    engine: Engine,
) -> None:
    """As an agent uses its memory: each turn put, the context read with the next input."""
    memory = LosslessMemory.from_defaults(
        session_id="li-prompt", store_or_engine=engine, token_budget=2000
    )
    for i in range(20):
        memory.put_messages(
            [
                ChatMessage(role="user", content=unrelated(i)),
                ChatMessage(role="assistant", content=f"noted {i}"),
            ]
        )
    ask = "When does the staging database password rotate?"
    before = [m.content for m in memory.get(input="w19x3")]
    after = [m.content for m in memory.get(input=ask)]

    assert unrelated(0) not in before
    assert unrelated(0) in after and after[-1] == "noted 19"
    assert after.index(unrelated(0)) < after.index(unrelated(19))
    # A chat engine puts the request first and reads without an input: the newest request
    # stored is what the context is for.
    memory.put(ChatMessage(role="user", content=ask))
    assert unrelated(0) in [m.content for m in memory.get()]
