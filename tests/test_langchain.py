"""LangChain driving lossless: ``RunnableWithMessageHistory`` over
:class:`LosslessChatMessageHistory`, with LangChain's own fake chat model, and the recall tools
as LangChain tools."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from framework_turns import DETAIL, SMALL, answer, question
from lossless import Config, Engine
from lossless.integrations.langchain import (
    LosslessChatMessageHistory,
    RunnableWithLosslessHistory,
    recall_tools,
)
from lossless.retrieval.tools import TOOLS


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=SMALL) as eng:
        yield eng


class Seen(BaseCallbackHandler):
    """What the chat model was given, call by call."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.calls.append(list(messages[0]))


def test_langchain_runnable_with_history_sees_a_bounded_context_with_summaries(
    engine: Engine,
) -> None:
    turns = 30
    budget = 600
    model = GenericFakeChatModel(
        messages=iter([AIMessage(content=answer(i)) for i in range(turns)])
    )
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    histories: dict[str, LosslessChatMessageHistory] = {}

    def history(session_id: str) -> LosslessChatMessageHistory:
        return histories.setdefault(
            session_id, LosslessChatMessageHistory(session_id, engine, token_budget=budget)
        )

    chain = RunnableWithMessageHistory(
        prompt | model, history, input_messages_key="question", history_messages_key="history"
    )
    seen = Seen()
    for i in range(turns):
        reply = chain.invoke(
            {"question": question(i, steps=0)},
            config={"configurable": {"session_id": "s1"}, "callbacks": [seen]},
        )
        assert reply.content == answer(i)

    last = seen.calls[-1]
    summaries = [m for m in last if m.additional_kwargs.get("lossless_summary")]
    assert summaries and all(isinstance(m, SystemMessage) for m in summaries)
    assert '<summary id="sum_' in str(summaries[0].content)
    assert not any(question(0, steps=0) == m.content for m in last)  # the first turn is summarized
    assert last[-1].content == question(turns - 1, steps=0)
    tokens = [
        engine.token_counter.count(json.dumps([str(m.content) for m in c])) for c in seen.calls
    ]
    assert max(tokens[-10:]) < 2 * budget  # bounded, though 30 turns were said

    stored = history("s1").stored_messages()  # every message once, in order
    assert [m.content for m in stored] == [
        text for i in range(turns) for text in (question(i, steps=0), answer(i))
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langchain_prompt_aware_history_brings_back_what_the_request_asks_for(
    engine: Engine, mode: str
) -> None:
    """RunnableWithLosslessHistory hands the request to the history: the turn said long ago
    that the request is about reaches the model verbatim, where RunnableWithMessageHistory
    (the same history, the same store) gives the model only its summary."""
    import asyncio

    turns = 30
    budget = 1_000  # room for the request's turn beside the summaries and the newest
    ask = "When does the staging database password rotate?"
    model = GenericFakeChatModel(
        messages=iter([AIMessage(content=answer(i)) for i in range(turns + 2)])
    )
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    history = LosslessChatMessageHistory("s1", engine, token_budget=budget)
    keys = {"input_messages_key": "question", "history_messages_key": "history"}
    plain = RunnableWithMessageHistory(prompt | model, lambda _: history, **keys)
    aware = RunnableWithLosslessHistory(prompt | model, lambda _: history, **keys)
    for i in range(turns):
        plain.invoke({"question": question(i, steps=0)}, {"configurable": {"session_id": "s1"}})
    seen = Seen()
    config: Any = {"configurable": {"session_id": "s1"}, "callbacks": [seen]}
    plain.invoke({"question": ask}, config)
    if mode == "sync":
        aware.invoke({"question": ask}, config)
    else:
        asyncio.run(aware.ainvoke({"question": ask}, config))
    unaware, prompted = ([m.content for m in c] for c in seen.calls)
    assert question(0, steps=0) not in unaware  # as a message of its own
    assert question(0, steps=0) in prompted
    assert seen.calls[1][-1].content == ask  # the request itself last, as the prompt put it
    assert any(m.additional_kwargs.get("lossless_summary") for m in seen.calls[1])
    stored = [m.content for m in history.stored_messages()]
    assert stored.count(ask) == 2 and len(stored) == 2 * turns + 4  # each once per turn


@pytest.mark.parametrize("shape", ["str", "messages", "dict"])
def test_langchain_prompt_aware_history_without_a_history_key_stores_each_turn_once(
    engine: Engine, shape: str
) -> None:
    """Without history_messages_key the history goes before the input in one list, and the
    runnable stores what follows the history it gave: the request and the reply are stored
    once, though the context given for the request is not the plain context's length."""
    import asyncio

    turns = 30
    ask = "When does the staging database password rotate?"
    history = LosslessChatMessageHistory("s1", engine, token_budget=1_000)
    for i in range(turns):
        history.add_messages([HumanMessage(question(i, steps=0)), AIMessage(answer(i))])
    model = GenericFakeChatModel(messages=iter([AIMessage(content="On Thursdays.")] * 2))
    if shape == "dict":
        prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("question")])
        chain = RunnableWithLosslessHistory(
            prompt | model, lambda _: history, input_messages_key="question"
        )
        given: Any = {"question": ask}
    else:
        chain = RunnableWithLosslessHistory(model, lambda _: history)
        given = ask if shape == "str" else [HumanMessage(ask)]
    plain = len(history.messages)
    seen = Seen()
    config: Any = {"configurable": {"session_id": "s1"}, "callbacks": [seen]}
    chain.invoke(given, config)
    asyncio.run(chain.ainvoke(given, config))
    for call in seen.calls:
        assert question(0, steps=0) in [m.content for m in call]
        assert len(call) != plain + 1  # not the plain context's length: the count matters
    stored = [m.content for m in history.stored_messages()][2 * turns :]
    assert stored == [ask, "On Thursdays.", ask, "On Thursdays."]


def test_langchain_recall_tools_find_an_early_detail_and_keep_the_declaration(
    engine: Engine,
) -> None:
    history = LosslessChatMessageHistory("s2", engine, token_budget=600)
    for i in range(20):
        history.add_messages(
            [HumanMessage(content=question(i, steps=0)), AIMessage(content=answer(i))]
        )
    assert len(history.messages) < 40  # compacted
    tools = {t.name: t for t in recall_tools(history)}
    assert set(tools) >= {"lcm_grep", "lcm_describe", "lcm_expand_query"}
    grep = tools["lcm_grep"]
    assert set(grep.args) == {p.name for p in TOOLS["lcm_grep"].params} - {"conversation"}
    hits = json.loads(grep.invoke({"pattern": "staging database password"}))["hits"]
    assert any("Thursday" in h["snippet"] for h in hits)
    refused = json.loads(grep.invoke({"pattern": "x", "limit": 5000}))
    assert "limit must be an integer from 1 to 200" in refused["error"]
    answer_ = json.loads(
        tools["lcm_expand_query"].invoke({"prompt": "when does the password rotate?"})
    )
    assert "Thursday" in answer_["answer"]


def test_langchain_clear_archives_and_the_next_generation_starts_empty(engine: Engine) -> None:
    history = LosslessChatMessageHistory("s3", engine)
    history.add_messages([HumanMessage(content=DETAIL), AIMessage(content="Noted.")])
    first = history.conversation_id()
    history.clear()
    assert history.messages == []
    assert history.conversation_id() != first
    assert engine.conversation(first).status == "archived"
    history.add_messages([HumanMessage(content="new start")])
    assert [m.content for m in history.messages] == ["new start"]
    # The earlier generation stays searchable from the session's tools.
    grep = next(t for t in recall_tools(history) if t.name == "lcm_grep")
    assert "Thursday" in grep.invoke({"pattern": "staging password"})


def test_langchain_history_opened_from_a_path_closes_its_store(tmp_path: Path) -> None:
    history = LosslessChatMessageHistory("s4", tmp_path / "own.db")
    history.add_message(HumanMessage(content="hello"))
    history.close()
    with Engine.open(tmp_path / "own.db", config=Config()) as engine:
        assert [m.content for m in engine.messages("s4")] == ["hello"]


TEXT = st.text(max_size=40)
IDS = st.one_of(st.none(), st.text("abcdef0123456789", min_size=1, max_size=8))
KWARGS = st.dictionaries(
    st.sampled_from(["x", "refusal", "meta"]), st.integers() | TEXT, max_size=2
)
BLOCKS = st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), min_size=1, max_size=3
)
CONTENT = TEXT | BLOCKS
CALLS = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["read", "grep", "run"]),
            "args": st.dictionaries(st.sampled_from(["a", "b"]), st.integers() | TEXT, max_size=2),
            "id": st.text("abc123", min_size=3, max_size=6),
        }
    ),
    max_size=2,
)
MESSAGES = st.one_of(
    st.builds(HumanMessage, content=CONTENT, id=IDS, additional_kwargs=KWARGS),
    st.builds(SystemMessage, content=TEXT),
    st.builds(
        AIMessage,
        content=CONTENT,
        id=IDS,
        tool_calls=CALLS,
        additional_kwargs=KWARGS,
        response_metadata=st.dictionaries(st.just("model"), TEXT, max_size=1),
    ),
    st.builds(
        ToolMessage,
        content=TEXT,
        tool_call_id=st.text("abc123", min_size=3, max_size=6),
        name=st.none() | st.sampled_from(["read", "grep"]),
        status=st.sampled_from(["success", "error"]),
    ),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(MESSAGES, min_size=1, max_size=8))
def test_langchain_messages_of_every_kind_come_back_equal(
    engine: Engine, batch: list[BaseMessage]
) -> None:
    history = LosslessChatMessageHistory(f"p-{uuid.uuid4()}", engine)
    history.add_messages(batch)
    history.add_messages(batch[:1])  # the same message again is a second message
    assert history.stored_messages() == [*batch, batch[0]]


def test_langchain_context_never_hands_the_model_a_call_without_its_result(
    engine: Engine,
) -> None:
    history = LosslessChatMessageHistory("s5", engine)
    pending = AIMessage(content="", tool_calls=[{"name": "read", "args": {}, "id": "c7"}])
    history.add_messages([HumanMessage(content="read it"), pending])
    # The call has no result yet: the model is not shown a call it cannot see answered...
    assert all(not getattr(m, "tool_calls", None) for m in history.messages)
    # ...while the store keeps it exactly, and shows it once the result is there.
    assert history.stored_messages()[-1] == pending
    history.add_messages([ToolMessage(content="the file", tool_call_id="c7")])
    shown = history.messages
    assert shown[-2] == pending and shown[-1].content == "the file"


def test_langchain_show_source_exports_the_same_objects(
    tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    from langchain_core.messages import messages_from_dict

    said = [
        HumanMessage(content=[{"type": "text", "text": "hi"}], id="h1"),
        AIMessage(content="", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c1"}]),
        ToolMessage(content="1", tool_call_id="c1", status="error"),
    ]
    with Engine.open(tmp_path / "s.db", config=Config()) as engine:
        LosslessChatMessageHistory("x", engine).add_messages(said)
    shown = run_cli("--db", str(tmp_path / "s.db"), "show", "x", "--json", "--source")
    assert shown.code == 0, shown
    exported = [m["source"] for m in json.loads(shown.out)["messages"]]
    assert messages_from_dict(exported) == said
