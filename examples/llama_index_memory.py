"""A LlamaIndex chat engine on lossless, offline (LlamaIndex's mock LLM).

LosslessMemory stores every message and gives the engine the assembled context; the recall
tools are LlamaIndex FunctionTools.

    python examples/llama_index_memory.py [STORE]     # pip install 'lossless[llama-index]'
"""

import json
import sys

from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall

from lossless import Config, Engine
from lossless.integrations.llama_index import LosslessMemory, recall_tools

STORE = sys.argv[1] if len(sys.argv) > 1 else "llama-index-example.db"
config = Config().replace(fresh_tail_count=4, leaf_chunk_tokens=120, leaf_min_fanout=3)

with Engine.open(STORE, config=config) as engine:
    memory = LosslessMemory.from_defaults(
        session_id="demo", store_or_engine=engine, token_budget=250
    )
    llm = MockLLMWithChatMemoryOfLastCall(max_tokens=8)  # replies "text text ..."
    chat = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for i in range(20):
        note = " The deploy key is in the blue vault." if i == 0 else ""
        chat.chat(f"Service {i} uses port {9000 + i}.{note}")
    seen = llm.last_chat_messages or []
    summaries = sum(1 for m in seen if m.additional_kwargs.get("lossless_summary"))
    print(
        f"stored {len(memory.get_all())} messages; the last call saw {len(seen)}"
        f" ({summaries} summaries)"
    )
    grep = next(t for t in recall_tools(memory) if t.metadata.name == "lcm_grep")
    hit = json.loads(grep.call(pattern="deploy key vault").content)["hits"][0]
    print(hit["id"], hit["snippet"])
