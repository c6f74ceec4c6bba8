"""LangChain's RunnableWithMessageHistory on lossless, offline (LangChain's fake chat model).

Thirty turns through a prompt | model chain whose history is a LosslessChatMessageHistory with
a small budget: the model sees the summaries and the newest turns; every message is stored;
the recall tool finds what the first turn said.

    python examples/langchain_history.py [STORE]      # pip install 'lossless[langchain]'
"""

import json
import sys

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from lossless import Config, Engine
from lossless.integrations.langchain import LosslessChatMessageHistory, recall_tools

STORE = sys.argv[1] if len(sys.argv) > 1 else "langchain-example.db"
config = Config().replace(fresh_tail_count=4, leaf_chunk_tokens=300, leaf_min_fanout=3)

with Engine.open(STORE, config=config) as engine:
    history = LosslessChatMessageHistory("demo", engine, token_budget=250)
    replies = iter([AIMessage(content=f"Service {i} uses port {9000 + i}.") for i in range(30)])
    chain = RunnableWithMessageHistory(
        ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{q}")])
        | GenericFakeChatModel(messages=replies),
        lambda session_id: history,
        input_messages_key="q",
        history_messages_key="history",
    )
    for i in range(30):
        note = " The deploy key is in the blue vault." if i == 0 else ""
        chain.invoke(
            {"q": f"Which port for service {i}?{note}"}, {"configurable": {"session_id": "demo"}}
        )
    window = history.messages
    summaries = sum(1 for m in window if m.additional_kwargs.get("lossless_summary"))
    print(
        f"stored {len(history.stored_messages())} messages; the model sees {len(window)}"
        f" ({summaries} summaries)"
    )
    grep = next(t for t in recall_tools(history) if t.name == "lcm_grep")
    hit = json.loads(grep.invoke({"pattern": "deploy key vault"}))["hits"][0]
    print(hit["id"], hit["snippet"])
