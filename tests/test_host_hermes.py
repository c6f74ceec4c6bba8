"""The real Hermes Agent (PyPI ``hermes-agent``) driving lossless as its context engine.

Hermes runs in a virtual environment of its own with lossless installed from this checkout,
so it finds the engine through lossless's ``hermes_agent.plugins`` entry point, as a user's
``pip install 'lossless[hermes]'`` would. Its config selects the engine (``context: {engine:
lossless}``); lossless's config sets only ``context_threshold``: 0.15 (below Hermes's own ~13k
tokens of system prompt and tools, were it a share of the window) and 0.5. A session of long
turns runs through Hermes's Python API (``AIAgent.run_conversation``), then goes on with
``hermes chat --resume``, against a local server speaking the OpenAI Chat Completions wire
format (its usage counts each request as a provider would). Then: no turn failed, every
request fitted Hermes's 64k window, Hermes compressed with lossless (every request after the
first compression carries lossless's summaries and the turn's request whole), at most one
compaction ran a turn, the DAG stayed shallow, the store holds every turn exactly once, and
the model's ``lcm_grep`` call, made by Hermes through the engine, brought back a detail of the
first turn that the working list no longer held.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from host_packages import HERMES_AGENT, pypi_venv, run_host
from lossless import Config, Engine
from lossless.config import load_config
from model_servers import ChatServer, SummaryServer, reply

pytestmark = pytest.mark.slow

DETAIL = "The staging database password rotates every Thursday at 04:00 UTC."
FILLER = " ".join(
    f"step{n} checks the deploy pipeline stage and its rollback plan" for n in range(120)
)
WINDOW = 64_000
#: How Hermes's own background reviews (of memory, of skills) begin their prompt.
REVIEW = "Review the conversation above"


def prompt(i: int) -> str:
    """Turn *i*'s user text: long (~1,800 tokens), so that a dozen turns pass the threshold;
    turns 5 and 6 say
    the same short thing (and get the same answer), which must be stored twice."""
    if i in (5, 6):
        return "yes"
    head = f"Turn {i}: {DETAIL}" if i == 0 else f"Turn {i}: what about service {i}?"
    return f"{head} {FILLER}"


API_DRIVER = """
import json, logging, sys, time
from hermes_state import SessionDB
from run_agent import AIAgent

# lossless logs each compaction run that wrote summaries (INFO, lossless.compaction).
runs = []
class Runs(logging.Handler):
    def emit(self, record):
        runs.append(record.getMessage())
log = logging.getLogger("lossless.compaction")
log.addHandler(Runs())
log.setLevel(logging.INFO)
warned = []
class Warned(logging.Handler):
    def emit(self, record):
        warned.append(record.getMessage())
logging.getLogger("lossless.integrations.hermes").addHandler(Warned())

base_url, prompts = sys.argv[1], json.loads(sys.argv[2])
agent = AIAgent(model="m", provider="custom", base_url=base_url, api_key="sk-local",
                quiet_mode=True, session_db=SessionDB(), platform="cli")
history = None
per_turn = []
seconds = []
for text in prompts:
    before = len(runs)
    began = time.monotonic()
    result = agent.run_conversation(text, conversation_history=history)
    seconds.append(time.monotonic() - began)
    history = result["messages"]
    per_turn.append(len(runs) - before)
agent.shutdown_memory_provider(history)
print(json.dumps({"session_id": agent.session_id, "runs": per_turn, "log": runs,
                  "seconds": seconds,
                  "warned": [w for w in warned if "context_threshold" in w],
                  "engine": type(agent.context_compressor).__name__}))
agent.close()
"""


@pytest.fixture(scope="module")
def hermes_bin() -> Path:
    return pypi_venv(HERMES_AGENT)


@pytest.mark.parametrize(
    ("threshold", "summarizer"),
    [(0.15, "extractive"), (0.5, "slow model")],
)
def test_hermes_at_any_threshold_never_fails_a_turn_compresses_with_lossless_and_recalls(
    hermes_bin: Path, tmp_path: Path, threshold: float, summarizer: str
) -> None:
    """With a slow model as lossless's summarizer (a local OpenAI-compatible server taking 2 s
    to its first token and then 300 tokens a second: some 10 s a summary), no turn waits for
    it: Hermes's compress gets provisional summaries at once, and the model's replace them in
    Hermes's process, off the turn."""
    home = tmp_path / "hermes-home"
    home.mkdir()
    store = tmp_path / "store.db"
    config = tmp_path / "lossless.toml"
    # Hermes's window is 64,000 tokens, its own prompt some 15,000 of them: the threshold is a
    # share of the room left (lossless's defaults otherwise).
    config.write_text(f"context_threshold = {threshold}\n")
    with ChatServer() as server, SummaryServer(2.0, 300) as model:
        if summarizer == "slow model":
            config.write_text(
                f'context_threshold = {threshold}\nsummarizer = "slow"\n'
                f'[profiles.slow]\nprovider = "openai"\nmodel = "summary-model"\n'
                f'base_url = "{model.url}/v1"\n'
            )
        (home / "config.yaml").write_text(
            "model:\n  default: m\n  provider: custom\n"
            f"  base_url: {server.url}/v1\n  api_key: sk-local\n  context_length: {WINDOW}\n"
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
        api_turns = [prompt(i) for i in range(14)]
        done = run_host(
            [
                str(hermes_bin / "python"),
                "-c",
                API_DRIVER,
                f"{server.url}/v1",
                json.dumps(api_turns),
            ],
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        ran = json.loads(done.stdout.strip().splitlines()[-1])
        assert ran["engine"] == "LosslessContextEngine", ran  # not Hermes's own compressor
        session = ran["session_id"]

        cli_turns = [prompt(14), "RECALL: staging database password"]
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
        sizes = server.prompt_sizes("/chat/completions")
        if summarizer == "slow model":
            # What Hermes's processes left provisional (they stop calling at exit) the next
            # run finishes; none is missing, and the model wrote the rest.
            with Engine.open(store, config=load_config(config)) as engine:
                engine.finish_summaries()
                assert engine.pending_summaries()["provisional"] == 0
                models = {s.model for s in engine.store.live_summaries(None)}
                assert "summary-model" in models and engine.check() == []

    # Every request fitted the window, as the provider counted it.
    assert max(sizes) <= WINDOW, sizes
    # Hermes compressed with lossless: from the first request that carried lossless's
    # summaries on, every request of the conversation carries them and its turn's request
    # whole (Hermes's own background reviews replay the conversation under their own prompt).
    conversation = [r for r in requests if not any(t.startswith(REVIEW) for t in r)]
    first = next(
        (n for n, r in enumerate(conversation) if any("[lossless: summaries" in t for t in r)),
        None,
    )
    assert first is not None, "no request carried lossless's summaries"
    turns = [*api_turns, *cli_turns]
    for r in conversation[first:]:
        assert any('<summary id="sum_' in t for t in r), "a request lost the summaries"
        assert any(p in t for t in r for p in turns), "a request lost the turn's request"
    assert api_turns[0] not in conversation[-1]  # the first turn is no longer sent whole
    # At most one compaction run a turn (one that wrote summaries); with a model summarizer
    # the turn's own runs in the background, so a turn may also see the last one's.
    assert max(ran["runs"]) <= (1 if summarizer == "extractive" else 2), ran
    if summarizer == "slow model":
        # No turn waited for the model (a summary takes it some 10 s), and it was asked.
        assert max(ran["seconds"]) < 8.0, ran["seconds"]
        assert model.answered > 0
    # A threshold that would have been below Hermes's own prompt is said, once.
    if threshold * WINDOW < 10_000:
        assert len(ran["warned"]) == 1 and "below Hermes's own" in ran["warned"][0], ran
        (tmp_path / "warned.txt").write_text(ran["warned"][0])
    else:
        assert ran["warned"] == [], ran

    # The recall tool: Hermes ran lcm_grep through the engine and the model saw the detail.
    tool_results = [t for r in requests for t in r if "hits" in t and "Thursday" in t]
    assert tool_results, "the lcm_grep result never reached the model"
    assert "Found:" in answered and "Thursday" in answered

    # Every turn is stored exactly once, in order, with the scripted replies.
    with Engine.open(store, config=Config()) as engine:
        stored = engine.messages(session)
        live = engine.store.live_summaries(engine.conversation(session).conversation_id)
        conversations = engine.conversations()
    # A shallow DAG: depth <= 1 + log_fanout(leaves); and no conversation that holds nothing.
    leaves = sum(1 for s in live if s.kind == "leaf")
    depth = max(s.depth for s in live)
    assert depth <= 1 + math.log(max(leaves, 1), Config().condensed_min_fanout) + 1e-9
    assert all(c.message_count for c in conversations), [c.conversation for c in conversations]
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
