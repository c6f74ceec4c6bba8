"""The real Hermes Agent (PyPI ``hermes-agent``) driving lossless as its context engine.

Hermes runs in a virtual environment of its own with lossless installed from this checkout,
so it finds the engine through lossless's ``hermes_agent.plugins`` entry point, as a user's
``pip install 'lossless[hermes]'`` would. Its config selects the engine (``context: {engine:
lossless}``); lossless's config makes Hermes's threshold small enough that a dozen long turns
pass it. A session runs through Hermes's Python API (``AIAgent.run_conversation``), then goes
on with ``hermes chat --resume``, against a local server speaking the OpenAI Chat Completions
wire format. Then: Hermes compressed with lossless (the requests after it carry lossless's
summaries, not Hermes's own compressor's), the store holds every turn exactly once, and the
model's ``lcm_grep`` call, made by Hermes through the engine, brought back a detail of the
first turn that the working list no longer held.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from host_packages import HERMES_AGENT, pypi_venv, run_host
from lossless import Config, Engine
from model_servers import ChatServer, reply

pytestmark = pytest.mark.slow

DETAIL = "The staging database password rotates every Thursday at 04:00 UTC."
FILLER = " ".join(
    f"step{n} checks the deploy pipeline stage and its rollback plan" for n in range(40)
)


def prompt(i: int) -> str:
    """Turn *i*'s user text: long, so that a dozen turns pass the threshold; turns 5 and 6 say
    the same short thing (and get the same answer), which must be stored twice."""
    if i in (5, 6):
        return "yes"
    head = f"Turn {i}: {DETAIL}" if i == 0 else f"Turn {i}: what about service {i}?"
    return f"{head} {FILLER}"


API_DRIVER = """
import json, sys
from hermes_state import SessionDB
from run_agent import AIAgent

base_url, prompts = sys.argv[1], json.loads(sys.argv[2])
agent = AIAgent(model="m", provider="custom", base_url=base_url, api_key="sk-local",
                quiet_mode=True, session_db=SessionDB(), platform="cli")
history = None
for text in prompts:
    result = agent.run_conversation(text, conversation_history=history)
    history = result["messages"]
agent.shutdown_memory_provider(history)
print(json.dumps({"session_id": agent.session_id,
                  "engine": type(agent.context_compressor).__name__}))
agent.close()
"""


@pytest.fixture(scope="module")
def hermes_bin() -> Path:
    return pypi_venv(HERMES_AGENT)


def test_hermes_keeps_every_turn_compresses_with_lossless_and_recalls(
    hermes_bin: Path, tmp_path: Path
) -> None:
    home = tmp_path / "hermes-home"
    home.mkdir()
    store = tmp_path / "store.db"
    config = tmp_path / "lossless.toml"
    # Hermes's window is 64,000 tokens; compress at 40 % of it (about 25,600 tokens: the system
    # prompt and tool schemas are some 15,000 of them).
    config.write_text(
        "context_threshold = 0.40\nfresh_tail_count = 4\nleaf_chunk_tokens = 2000\n"
        "leaf_min_fanout = 3\ncondensed_min_fanout = 2\n"
    )
    with ChatServer() as server:
        (home / "config.yaml").write_text(
            "model:\n  default: m\n  provider: custom\n"
            f"  base_url: {server.url}/v1\n  api_key: sk-local\n  context_length: 64000\n"
            "context:\n  engine: lossless\n"
            "plugins:\n  enabled: [lossless]\n"
            "security:\n  tirith_enabled: false\n"
        )
        env = {
            **os.environ,
            "HERMES_HOME": str(home),
            "HOME": str(tmp_path / "home"),
            "LOSSLESS_DB": str(store),
            "LOSSLESS_CONFIG": str(config),
        }
        api_turns = [prompt(i) for i in range(12)]
        done = run_host(
            [
                str(hermes_bin / "python"),
                "-c",
                API_DRIVER,
                f"{server.url}/v1",
                json.dumps(api_turns),
            ],
            env=env,
            timeout=150,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        ran = json.loads(done.stdout.strip().splitlines()[-1])
        assert ran["engine"] == "LosslessContextEngine", ran  # not Hermes's own compressor
        session = ran["session_id"]

        cli_turns = [prompt(12), "RECALL: staging database password"]
        for text in cli_turns:
            done = run_host(
                [str(hermes_bin / "hermes"), "chat", "-Q", "--resume", session, "-q", text],
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=45,
            )
            assert done.returncode == 0, done.stderr[-3000:]
        answered = done.stdout

        requests = server.user_texts()

    # Hermes compressed with lossless: later requests carry lossless's summaries, and the first
    # turn's words are no longer sent whole.
    compressed = [r for r in requests if any("[lossless: summaries" in t for t in r)]
    assert compressed, "no request carried lossless's summaries"
    assert any('<summary id="sum_' in t for t in compressed[-1])
    assert not any(DETAIL in t and FILLER in t for t in compressed[-1])

    # The recall tool: Hermes ran lcm_grep through the engine and the model saw the detail.
    tool_results = [t for r in requests for t in r if "hits" in t and "Thursday" in t]
    assert tool_results, "the lcm_grep result never reached the model"
    assert "Found:" in answered and "Thursday" in answered

    # Every turn is stored exactly once, in order, with the scripted replies.
    with Engine.open(store, config=Config()) as engine:
        stored = engine.messages(session)
    users = [m.content for m in stored if m.role == "user"]
    assert users == [*api_turns, *cli_turns]
    replies = [m.content for m in stored if m.role == "assistant" and m.content]
    assert replies[:-2] == [reply(text) for text in [*api_turns, cli_turns[0]]]
    assert replies[-2].startswith("[tool call lcm_grep]") and replies[-1].startswith("Found:")
    assert [m.role for m in stored[-4:]] == ["user", "assistant", "tool", "assistant"]
    assert "Thursday" in stored[-2].content

    # What Hermes itself stored (state.db) imports into a fresh store as the same messages,
    # once: without the copies its in-place compression wrote, or lossless's summary message.
    with Engine.open(tmp_path / "imported.db", config=Config()) as engine:
        first = engine.import_path(home / "state.db")
        assert sum(r.imported for r in first) == len(stored), [r.to_dict() for r in first]
        imported = [(m.role, m.content) for m in engine.messages(session)]
        assert imported == [(m.role, m.content) for m in stored]
        assert sum(r.imported for r in engine.import_path(home / "state.db")) == 0
