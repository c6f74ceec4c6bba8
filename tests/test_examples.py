"""The example agent loops in examples/, run as scripts against a local fake provider.

Each example runs as a subprocess with the official SDK pointed (OPENAI_BASE_URL,
ANTHROPIC_BASE_URL) at a pytest-httpserver that speaks the provider's wire format: the first
answer calls lcm_grep, the second answers from what the tool returned. The store is a
compacted conversation whose fact lies below its summaries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from lossless import Config, Engine

ROOT = Path(__file__).resolve().parents[1]
SESSION = "loop"
QUESTION = "Which port did we pick for staging?"
FACT = "We picked port 9043 for staging because 8043 clashes with the metrics agent."
SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=40,
    condensed_target_tokens=40,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)


@pytest.fixture
def server() -> Iterator[HTTPServer]:
    server = HTTPServer(host="127.0.0.1")
    server.start()
    yield server
    server.clear()
    server.stop()


def stored_history(db: Path) -> str:
    """A conversation whose fact was compacted into summaries; returns the fact's id."""
    with Engine.open(db, config=SMALL) as engine:
        engine.ingest(SESSION, {"role": "user", "content": "Which port should staging use?"})
        fact = engine.ingest(SESSION, {"role": "assistant", "content": FACT}).message_ids[0]
        for i in range(10):
            engine.ingest(SESSION, {"role": "user", "content": f"Step {i}: rotate the logs."})
            engine.ingest(SESSION, {"role": "assistant", "content": "Rotated. " * 12})
        engine.compact(SESSION)
        assert any(item.summary_id for item in engine.context(SESSION))
        return f"msg#{fact}"


def run_example(name: str, db: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "LOSSLESS_")) and "proxy" not in k.lower()
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), SESSION],
        input=QUESTION + "\n",
        capture_output=True,
        text=True,
        # The stored history is small: shown as its summaries (not filled back in from below
        # them), so the model must recall the fact with the tools, as in a long session.
        env={**clean, "LOSSLESS_DB": str(db), "LOSSLESS_FILL_BUDGET": "false", **env},
        timeout=120,
        check=False,
    )


def serve(server: HTTPServer, path: str, answer: Callable[[dict[str, Any]], Any]) -> None:
    def handler(request: Request) -> Response:
        return Response(
            json.dumps(answer(json.loads(request.get_data()))),
            200,
            {"Content-Type": "application/json"},
        )

    server.expect_request(path, method="POST").respond_with_handler(handler)


def bodies(server: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(request.get_data()) for request, _ in server.log]


def grepped_ids(tool_output: str) -> list[str]:
    return [hit["id"] for hit in json.loads(tool_output)]


def message_with_port(tool_output: str) -> str:
    """What the fake model reads in lcm_grep's answer: the message that names the port."""
    hits = json.loads(tool_output)
    return next(h["id"] for h in hits if h["kind"] == "message" and "9043" in h["snippet"])


def test_the_openai_loop_calls_lcm_grep_and_stores_the_turn(
    server: HTTPServer, tmp_path: Path
) -> None:
    db = tmp_path / "loop.db"
    fact_id = stored_history(db)

    def answer(body: dict[str, Any]) -> Any:
        tool = [m for m in body["messages"] if m["role"] == "tool"]
        n = len(server.log)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if not tool:
            call = {"name": "lcm_grep", "arguments": json.dumps({"pattern": "staging port"})}
            message["tool_calls"] = [{"id": "call_grep_1", "type": "function", "function": call}]
        else:
            message["content"] = (
                f"Staging uses port 9043 (see {message_with_port(tool[0]['content'])})."
            )
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1767603600,
            "model": "test-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if not tool else "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    serve(server, "/v1/chat/completions", answer)
    done = run_example(
        "openai_loop.py",
        db,
        {
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": server.url_for("/v1"),
            "OPENAI_MODEL": "test-model",
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Staging uses port 9043 (see {fact_id}).\n"
    assert "[lcm_grep]" in done.stderr

    first, second = bodies(server)
    assert first["model"] == "test-model"
    assert [t["function"]["name"] for t in first["tools"]] == ["lcm_grep", "lcm_expand_query"]
    assert first["messages"][0]["role"] == "system"
    assert "<summary id=" in first["messages"][1]["content"]  # the assembled context
    assert first["messages"][-1] == {"role": "user", "content": QUESTION}
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_grep_1"
    assert second["messages"][-1]["role"] == "tool" and fact_id in grepped_ids(
        second["messages"][-1]["content"]
    )

    with Engine.open(db, config=SMALL) as engine:
        new = engine.messages(SESSION)[-4:]
        assert [m.role for m in new] == ["user", "assistant", "tool", "assistant"]
        assert new[0].content == QUESTION and new[3].content.startswith("Staging uses port 9043")
        assert new[1].to_source()["tool_calls"][0]["id"] == "call_grep_1"
        assert fact_id in new[2].content


def test_the_anthropic_loop_calls_lcm_grep_and_stores_the_turn(
    server: HTTPServer, tmp_path: Path
) -> None:
    db = tmp_path / "loop.db"
    fact_id = stored_history(db)

    def answer(body: dict[str, Any]) -> Any:
        results = [
            block
            for m in body["messages"]
            if isinstance(m["content"], list)
            for block in m["content"]
            if block.get("type") == "tool_result"
        ]
        if not results:
            content: list[dict[str, Any]] = [
                {"type": "text", "text": "Let me search."},
                {
                    "type": "tool_use",
                    "id": "toolu_grep_1",
                    "name": "lcm_grep",
                    "input": {"pattern": "staging port"},
                },
            ]
        else:
            found = message_with_port(results[-1]["content"])
            content = [{"type": "text", "text": f"Staging uses port 9043 (see {found})."}]
        return {
            "id": f"msg_{len(server.log)}",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": "end_turn" if results else "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    serve(server, "/v1/messages", answer)
    done = run_example(
        "anthropic_loop.py",
        db,
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "ANTHROPIC_BASE_URL": server.url_for("/"),
            "ANTHROPIC_MODEL": "claude-test",
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Staging uses port 9043 (see {fact_id}).\n"

    first, second = bodies(server)
    assert first["model"] == "claude-test" and first["system"].startswith("You are")
    assert [t["name"] for t in first["tools"]] == ["lcm_grep", "lcm_expand_query"]
    assert "<summary id=" in first["messages"][0]["content"][0]["text"]
    assert first["messages"][-1]["content"][-1] == {"type": "text", "text": QUESTION}
    sent_back, results = second["messages"][-2:]
    assert sent_back["role"] == "assistant" and sent_back["content"][-1]["id"] == "toolu_grep_1"
    assert results["content"][0]["tool_use_id"] == "toolu_grep_1"
    assert fact_id in grepped_ids(results["content"][0]["content"])

    with Engine.open(db, config=SMALL) as engine:
        new = engine.messages(SESSION)[-4:]
        assert [m.role for m in new] == ["user", "assistant", "tool", "assistant"]
        assert new[0].content == QUESTION and new[3].content.startswith("Staging uses port 9043")
        assert new[1].to_source()["content"][1]["id"] == "toolu_grep_1"
        assert fact_id in new[2].content


@pytest.mark.parametrize("name", ["openai_loop.py", "anthropic_loop.py"])
def test_each_example_is_short(name: str) -> None:
    assert len((ROOT / "examples" / name).read_text().splitlines()) < 80


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("langchain_history.py", ["stored 60 messages", "summaries)", "blue vault"]),
        ("langgraph_agent.py", ["lossless stored 44", "answer: In the blue vault."]),
        ("pydantic_ai_agent.py", ["lossless stored 44", "blue vault"]),
        ("llama_index_memory.py", ["stored 40 messages", "summaries)", "blue vault"]),
    ],
)
def test_the_framework_examples_run_offline(tmp_path: Path, script: str, said: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), str(tmp_path / "store.db")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for text in said:
        assert text in done.stdout, done.stdout
    assert "(0 summaries)" not in done.stdout


@pytest.mark.parametrize(
    ("name", "variable"),
    [("openai_loop.py", "OPENAI_API_KEY"), ("anthropic_loop.py", "ANTHROPIC_API_KEY")],
)
def test_a_loop_example_without_its_key_says_so_in_one_line(name: str, variable: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != variable}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == f"set {variable} (with {variable.split('_')[0]}_BASE_URL for a compatible server)"
    )
