"""A plain agent loop on the OpenAI Chat Completions API with lossless as its memory.

One user turn per line of stdin. Before each model call the context is assembled (summaries +
fresh tail, within BUDGET); after it the new messages go to after_turn, which compacts when
needed. The model recalls its own past with the lcm_grep and lcm_expand_query tools.

    OPENAI_API_KEY=... python examples/openai_loop.py [SESSION] < questions.txt

Settings: OPENAI_MODEL, OPENAI_BASE_URL (any compatible endpoint), LOSSLESS_DB (the store).
"""

import json
import os
import sys

try:
    from openai import OpenAI
except ModuleNotFoundError:
    sys.exit("this example needs the OpenAI SDK: pip install 'lossless[openai]'")

from lossless import Engine, load_config

BUDGET = 100_000
SYSTEM = "You are a helpful agent. Your older history is summarized; recall it with the tools."
GREP = "Search this conversation's stored history; returns ids and snippets."
EXPAND = "Answer a question from the exact history below the summaries, citing ids."


def tool(name: str, description: str, arg: str) -> dict:
    params = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


TOOLS = [tool("lcm_grep", GREP, "pattern"), tool("lcm_expand_query", EXPAND, "prompt")]


def run_tool(engine: Engine, session: str, name: str, args: dict) -> str:
    if name == "lcm_grep":
        hits = engine.grep(args["pattern"], conversation=session, sort="relevance", limit=10).hits
        return json.dumps([h.to_dict() for h in hits])
    if name == "lcm_expand_query":
        return json.dumps(engine.expand_query(args["prompt"], conversation=session).to_dict())
    return f"unknown tool {name}"


def main() -> None:
    session = sys.argv[1] if len(sys.argv) > 1 else "openai-loop"
    if not os.environ.get("OPENAI_API_KEY"):
        sys.exit("set OPENAI_API_KEY (with OPENAI_BASE_URL for a compatible server)")
    client, model = OpenAI(), os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    with Engine.open(config=load_config()) as engine:  # the user's store and settings
        for line in sys.stdin:
            engine.ingest(session, {"role": "user", "content": line.strip()})
            while True:
                context = engine.assemble(session, BUDGET, format="openai")
                messages = [{"role": "system", "content": SYSTEM}, *context.messages]
                reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
                message = reply.choices[0].message
                turn = [message.model_dump(exclude_none=True)]
                for call in message.tool_calls or []:
                    name, args = call.function.name, json.loads(call.function.arguments)
                    out = run_tool(engine, session, name, args)
                    print(f"[{name}] {out[:200]}", file=sys.stderr)
                    turn.append({"role": "tool", "tool_call_id": call.id, "content": out})
                engine.after_turn(session, turn, token_budget=BUDGET)
                if not message.tool_calls:
                    print(message.content)
                    break


if __name__ == "__main__":
    main()
