"""A Pydantic AI agent on lossless, offline (Pydantic AI's FunctionModel).

lossless's history processor keeps every message of the runs and hands the model the assembled
context; its toolset gives the model lcm_grep, which the scripted model calls on the last run.

    python examples/pydantic_ai_agent.py [STORE]      # pip install 'lossless[pydantic-ai]'
"""

import json
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from lossless import Config, Engine
from lossless.integrations.pydantic_ai import LosslessHistory

STORE = sys.argv[1] if len(sys.argv) > 1 else "pydantic-ai-example.db"


def model(messages, info):
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart):  # the scripted model quotes the hit that answers
        hit = next(h for h in json.loads(last.content)["hits"] if "vault" in h["snippet"])
        return ModelResponse(parts=[TextPart(f"{hit['snippet']} ({hit['id']})")])
    if "deploy key" in str(last.content) and "Where" in str(last.content):
        return ModelResponse(parts=[ToolCallPart("lcm_grep", {"pattern": "deploy key vault"})])
    return ModelResponse(parts=[TextPart("Noted.")])


config = Config().replace(fresh_tail_count=4, leaf_chunk_tokens=300, leaf_min_fanout=3)
with Engine.open(STORE, config=config) as engine:
    history = LosslessHistory("demo", engine, token_budget=600)
    agent = Agent(
        FunctionModel(model), capabilities=[history.capability()], toolsets=[history.toolset()]
    )
    messages = []
    for i in range(20):
        note = " The deploy key is in the blue vault." if i == 0 else ""
        messages = agent.run_sync(
            f"Service {i} uses port {9000 + i}.{note}", message_history=messages
        ).all_messages()
    result = agent.run_sync("Where is the deploy key?", message_history=messages)
    print(
        f"the run's history: {len(result.all_messages())} messages; lossless stored"
        f" {len(history.stored_messages())}"
    )
    print("answer:", result.output)
