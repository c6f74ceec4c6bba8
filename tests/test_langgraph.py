"""LangGraph driving lossless: its prebuilt ReAct agent and a hand-written ``StateGraph``, each
with a checkpointer, LangChain's fake chat model, and the recall tools as graph tools."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import create_react_agent

from framework_turns import SMALL, answer, question, unrelated
from lossless import Engine
from lossless.integrations.langgraph import LosslessContext


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=SMALL) as eng:
        yield eng


class ToolCapableFake(GenericFakeChatModel):
    """LangChain's fake chat model, accepting the tools an agent binds to it."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


class Seen(BaseCallbackHandler):
    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.calls.append(list(messages[0]))


def tokens(engine: Engine, messages: list[BaseMessage]) -> int:
    return sum(engine.token_counter.count(str(m.content)) for m in messages)


def test_langgraph_prebuilt_agent_keeps_every_message_and_recalls_an_early_detail(
    engine: Engine,
) -> None:
    turns = 20
    ctx = LosslessContext(engine, token_budget=600)
    replies: list[AIMessage] = [AIMessage(content=answer(i)) for i in range(turns)]
    replies += [
        AIMessage(
            content="",
            tool_calls=[{"name": "lcm_grep", "args": {"pattern": "staging password"}, "id": "c1"}],
        ),
        AIMessage(content="It rotates on Thursdays."),
    ]
    agent = create_react_agent(
        ToolCapableFake(messages=iter(replies)),
        tools=ctx.tools(),
        pre_model_hook=ctx.pre_model_hook,
        post_model_hook=ctx.post_model_hook,
        checkpointer=InMemorySaver(),
    )
    seen = Seen()
    config: Any = {"configurable": {"thread_id": "t1"}, "callbacks": [seen]}
    for i in range(turns):
        agent.invoke({"messages": [HumanMessage(content=question(i))]}, config)
    out = agent.invoke({"messages": [HumanMessage(content="When does it rotate?")]}, config)

    # The checkpointer still holds the whole thread; the model saw a bounded context.
    assert len(out["messages"]) == 2 * turns + 4
    late = seen.calls[-3]
    assert any(m.additional_kwargs.get("lossless_summary") for m in late)
    whole = tokens(engine, out["messages"])
    # (the recall turn's own tool result, a page of hits, comes on top of its last call)
    assert whole > 4 * 600 and all(tokens(engine, c) < 2 * 600 for c in seen.calls[:turns])
    # The tool call ran the recall tool in the thread's conversation and found turn 0.
    tool_result = out["messages"][-2]
    assert tool_result.type == "tool" and "Thursday" in tool_result.content
    # Every message once, in order: the hooks stored each state again and again.
    stored = engine.messages("t1")
    assert [m.content for m in stored[: 2 * turns]] == [
        text for i in range(turns) for text in (question(i), answer(i))
    ]
    assert len(stored) == len(out["messages"])
    assert [m.external_id for m in stored] == [m.id for m in out["messages"]]


def test_langgraph_state_graph_with_a_checkpointer_bounds_the_model_window(
    engine: Engine,
) -> None:
    ctx = LosslessContext(engine, token_budget=600)
    model = GenericFakeChatModel(messages=iter([AIMessage(content=answer(i)) for i in range(25)]))
    seen = Seen()

    def call_model(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [model.invoke(ctx.context(state, config), config)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_edge(START, "model")
    app = graph.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "g1"}, "callbacks": [seen]}
    for i in range(25):
        state = app.invoke({"messages": [HumanMessage(content=question(i))]}, config)
    ctx.remember(state, config)  # the last reply
    assert len(state["messages"]) == 50
    assert len(engine.messages("g1")) == 50
    assert tokens(engine, state["messages"]) > 4 * 600
    assert all(tokens(engine, c) < 2 * 600 for c in seen.calls)
    assert any(m.additional_kwargs.get("lossless_summary") for m in seen.calls[-1])
    grep = next(t for t in ctx.tools() if t.name == "lcm_grep")
    hits = json.loads(grep.invoke({"pattern": "staging password"}, config))["hits"]
    assert any("Thursday" in h["snippet"] for h in hits)


def test_langgraph_tools_need_a_thread(engine: Engine) -> None:
    ctx = LosslessContext(engine)
    grep = next(t for t in ctx.tools() if t.name == "lcm_grep")
    said = json.loads(grep.invoke({"pattern": "x"}, {"configurable": {}}))
    assert "needs the graph's thread" in said["error"]


def test_langgraph_a_state_remembered_again_stores_nothing_twice(engine: Engine) -> None:
    from langchain_core.messages import messages_from_dict

    ctx = LosslessContext(engine)
    config: Any = {"configurable": {"thread_id": "r1"}}
    said = [HumanMessage(content="yes", id="a"), AIMessage(content="Confirmed.", id="b")]
    again = [HumanMessage(content="yes", id="c"), AIMessage(content="Confirmed.", id="d")]
    assert ctx.remember({"messages": said}, config) == 2
    assert ctx.remember({"messages": said + again}, config) == 2  # new ids: said again
    assert ctx.remember({"messages": said + again}, config) == 0
    stored = messages_from_dict([m.to_source() for m in engine.messages("r1")])
    assert stored == said + again


def test_langgraph_a_question_about_a_compacted_turn_brings_that_turn_back(
    engine: Engine,
) -> None:
    ctx = LosslessContext(engine, token_budget=2000)
    replies = iter([AIMessage(content=answer(i)) for i in range(21)])
    agent = create_react_agent(
        ToolCapableFake(messages=replies),
        tools=ctx.tools(),
        pre_model_hook=ctx.pre_model_hook,
        post_model_hook=ctx.post_model_hook,
        checkpointer=InMemorySaver(),
    )
    seen = Seen()
    config: Any = {"configurable": {"thread_id": "t-prompt"}, "callbacks": [seen]}
    for i in range(20):
        agent.invoke({"messages": [HumanMessage(content=unrelated(i))]}, config)
    ask = "When does the staging database password rotate?"
    agent.invoke({"messages": [HumanMessage(content=ask)]}, config)

    before = [m.content for m in seen.calls[-2]]
    after = [m.content for m in seen.calls[-1]]
    assert unrelated(0) not in before
    assert unrelated(0) in after and after[-1] == ask
    assert tokens(engine, seen.calls[-1]) <= 2000
