"""A plain agent loop on the Anthropic Messages API with lossless as its memory.

One user turn per line of stdin. Before each model call the context is assembled (summaries +
fresh tail, within BUDGET); after it the new messages go to after_turn, which compacts when
needed. The model recalls its own past with the lcm_grep and lcm_expand_query tools.

    ANTHROPIC_API_KEY=... python examples/anthropic_loop.py [SESSION] < questions.txt

Settings: ANTHROPIC_MODEL, ANTHROPIC_BASE_URL, LOSSLESS_DB (the store's file).
"""

import json
import os
import sys

try:
    from anthropic import Anthropic
except ModuleNotFoundError:
    sys.exit("this example needs the Anthropic SDK: pip install 'lossless[anthropic]'")

from lossless import Engine, load_config

BUDGET = 100_000
SYSTEM = "You are a helpful agent. Your older history is summarized; recall it with the tools."
GREP = "Search this conversation's stored history; returns ids and snippets."
EXPAND = "Answer a question from the exact history below the summaries, citing ids."


def tool(name: str, description: str, arg: str) -> dict:
    params = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    return {"name": name, "description": description, "input_schema": params}


TOOLS = [tool("lcm_grep", GREP, "pattern"), tool("lcm_expand_query", EXPAND, "prompt")]


def run_tool(engine: Engine, session: str, name: str, args: dict) -> str:
    if name == "lcm_grep":
        hits = engine.grep(args["pattern"], conversation=session, sort="relevance", limit=10).hits
        return json.dumps([h.to_dict() for h in hits])
    if name == "lcm_expand_query":
        return json.dumps(engine.expand_query(args["prompt"], conversation=session).to_dict())
    return f"unknown tool {name}"


def main() -> None:
    session = sys.argv[1] if len(sys.argv) > 1 else "anthropic-loop"
    if not os.environ.get("ANTHROPIC_API_KEY"):
        sys.exit("set ANTHROPIC_API_KEY (with ANTHROPIC_BASE_URL for a compatible server)")
    client, model = Anthropic(), os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")
    ask = {"model": model, "max_tokens": 2048, "system": SYSTEM, "tools": TOOLS}
    with Engine.open(config=load_config()) as engine:  # the user's store and settings
        for line in sys.stdin:
            engine.ingest(session, {"role": "user", "content": line.strip()})
            while True:
                context = engine.assemble(session, BUDGET, format="anthropic")
                reply = client.messages.create(messages=context.messages, **ask)
                blocks = [b.model_dump(exclude_none=True) for b in reply.content]
                turn = [{"role": "assistant", "content": blocks}]
                results = []
                for call in (b for b in reply.content if b.type == "tool_use"):
                    out = run_tool(engine, session, call.name, call.input)
                    print(f"[{call.name}] {out[:200]}", file=sys.stderr)
                    results.append({"type": "tool_result", "tool_use_id": call.id, "content": out})
                if results:
                    turn.append({"role": "user", "content": results})
                engine.after_turn(session, turn, token_budget=BUDGET)
                if not results:
                    print("".join(b.text for b in reply.content if b.type == "text"))
                    break


if __name__ == "__main__":
    main()
