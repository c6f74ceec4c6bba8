"""What each framework adapter adds to a turn: storing the turn and handing back the context.

    python benchmarks/adapters.py                    # 1,000 stored messages, 200 turns each
    python benchmarks/adapters.py --history 10000 --turns 100

For each framework a session is filled with *history* messages first, then *turns* turns are
timed: a user message and a reply given to the adapter the way the framework gives them
(LangChain's ``add_messages`` + ``messages``; LangGraph's pre-model hook on the grown state;
Pydantic AI's history processor on the list it would hand over; LlamaIndex's ``put`` + ``get``),
with the default (offline) summarizer and a 100k-token budget.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine

from common import machine, percentiles, save


def words(i: int) -> str:
    return f"Turn {i}: " + " ".join(f"word{(i * 7 + k) % 500}" for k in range(30))


def langchain(engine: Engine, history: int, turns: int) -> list[float]:
    from langchain_core.messages import AIMessage, HumanMessage

    from lossless.integrations.langchain import LosslessChatMessageHistory

    h = LosslessChatMessageHistory("lc", engine)
    h.add_messages([HumanMessage(words(i)) for i in range(history)])
    out = []
    for i in range(turns):
        began = time.perf_counter()
        h.add_messages([HumanMessage(words(i)), AIMessage(words(i + 1))])
        shown = h.messages
        assert shown
        out.append((time.perf_counter() - began) * 1000)
    return out


def langgraph(engine: Engine, history: int, turns: int) -> list[float]:
    from langchain_core.messages import AIMessage, HumanMessage

    from lossless.integrations.langgraph import LosslessContext

    ctx = LosslessContext(engine)
    config: Any = {"configurable": {"thread_id": "lg"}}
    state = [HumanMessage(words(i), id=f"h{i}") for i in range(history)]
    ctx.remember({"messages": state}, config)
    out = []
    for i in range(turns):
        state = [*state, AIMessage(words(i), id=f"a{i}"), HumanMessage(words(i), id=f"q{i}")]
        began = time.perf_counter()
        ctx.pre_model_hook({"messages": state}, config)
        out.append((time.perf_counter() - began) * 1000)
    return out


def pydantic_ai(engine: Engine, history: int, turns: int) -> list[float]:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from lossless.integrations.pydantic_ai import LosslessHistory

    h = LosslessHistory("pa", engine)
    handed: list[Any] = [ModelRequest(parts=[UserPromptPart(words(i))]) for i in range(history)]
    handed = h(handed)
    out = []
    for i in range(turns):
        handed = [
            *handed,
            ModelResponse(parts=[TextPart(words(i))]),
            ModelRequest(parts=[UserPromptPart(words(i))]),
        ]
        began = time.perf_counter()
        handed = h(handed)
        out.append((time.perf_counter() - began) * 1000)
    return out


def llama_index(engine: Engine, history: int, turns: int) -> list[float]:
    from llama_index.core.base.llms.types import ChatMessage

    from lossless.integrations.llama_index import LosslessMemory

    m = LosslessMemory.from_defaults(session_id="li", store_or_engine=engine)
    m.put_messages([ChatMessage(role="user", content=words(i)) for i in range(history)])
    out = []
    for i in range(turns):
        began = time.perf_counter()
        m.put_messages(
            [
                ChatMessage(role="user", content=words(i)),
                ChatMessage(role="assistant", content=words(i)),
            ]
        )
        m.get()
        out.append((time.perf_counter() - began) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    results = {}
    for name, run in (
        ("langchain", langchain),
        ("langgraph", langgraph),
        ("pydantic_ai", pydantic_ai),
        ("llama_index", llama_index),
    ):
        with (
            tempfile.TemporaryDirectory() as tmp,
            Engine.open(Path(tmp) / "adapters.db", config=Config()) as engine,
        ):
            results[name] = percentiles(run(engine, args.history, args.turns))
        p50, p95, p99 = (results[name][f"{q}_ms"] for q in ("p50", "p95", "p99"))
        print(f"{name:12} a turn p50 {p50:7.2f}  p95 {p95:7.2f}  p99 {p99:7.2f} ms")
    save("adapters", {"machine": machine(), "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
