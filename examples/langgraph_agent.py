"""LangGraph's prebuilt agent on lossless, offline (LangChain's fake chat model).

The agent keeps its checkpointer; lossless's hooks store every message of the thread and give
the model the assembled context; the last turn's scripted model calls lcm_grep, a graph tool.

    python examples/langgraph_agent.py [STORE]        # pip install 'lossless[langgraph]'
"""

import sys

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from lossless import Config, Engine
from lossless.integrations.langgraph import LosslessContext

STORE = sys.argv[1] if len(sys.argv) > 1 else "langgraph-example.db"


class FakeModel(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):  # the fake model takes the agent's tools as they are
        return self


config = Config().replace(fresh_tail_count=4, leaf_chunk_tokens=300, leaf_min_fanout=3)
with Engine.open(STORE, config=config) as engine:
    ctx = LosslessContext(engine, token_budget=600)
    replies = [AIMessage(content=f"Service {i} uses port {9000 + i}.") for i in range(20)]
    call = {"name": "lcm_grep", "args": {"pattern": "deploy key vault"}, "id": "call_1"}
    replies += [AIMessage(content="", tool_calls=[call]), AIMessage(content="In the blue vault.")]
    agent = create_react_agent(
        FakeModel(messages=iter(replies)),
        tools=ctx.tools(),
        pre_model_hook=ctx.pre_model_hook,
        post_model_hook=ctx.post_model_hook,
        checkpointer=InMemorySaver(),
    )
    thread = {"configurable": {"thread_id": "demo"}}
    for i in range(20):
        note = " The deploy key is in the blue vault." if i == 0 else ""
        agent.invoke({"messages": [HumanMessage(f"Which port for service {i}?{note}")]}, thread)
    out = agent.invoke({"messages": [HumanMessage("Where is the deploy key?")]}, thread)
    print(
        f"the thread holds {len(out['messages'])} messages; lossless stored"
        f" {len(engine.messages('demo'))}, in {sum(engine.summary_counts('demo').values())}"
        f" summaries so far"
    )
    print("tool result:", out["messages"][-2].content[:120])
    print("answer:", out["messages"][-1].content)
