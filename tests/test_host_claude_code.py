"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``) driving lossless end to end.

Claude Code runs in print mode (``claude -p``) against a local server that speaks the
Anthropic Messages wire format with scripted replies (``ANTHROPIC_BASE_URL``), with lossless's
plugin installed the way a user installs it (``claude plugin marketplace add`` + ``claude
plugin install``). A session of several turns — the user says "yes" twice and gets the same
answer twice — is compacted twice with ``/compact``, and goes on after each. Then: the store
holds every turn exactly once, lossless's summaries reached the request after each
compaction, and the transcript Claude Code wrote imports whole, once, into a fresh store.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from host_packages import CLAUDE_CODE, npm_host
from lossless import Config, Engine
from model_servers import AnthropicServer, SummaryServer, prompt_tokens, reply

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TURNS_BEFORE = ["Plan the retry policy for the HTTP client", "yes", "yes"]
TURNS_BETWEEN = ["Now write the backoff table", "Add jitter of ten percent"]
TURNS_AFTER = ["Summarise what we decided about retries"]
PLUGIN_TOOLS = "mcp__plugin_lossless_lossless"
RECALL = "CALLS " + json.dumps(
    [
        ["ToolSearch", {"query": f"select:{PLUGIN_TOOLS}__lcm_grep", "max_results": 5}],
        ["lcm_grep", {"pattern": "retry policy"}],
    ]
)


class Claude:
    """``claude`` with a scratch home, the local model server and lossless on PATH."""

    def __init__(self, exe: Path, tmp: Path, server: AnthropicServer) -> None:
        self.exe = exe
        self.project = tmp / "project"
        self.project.mkdir()
        self.store = tmp / "store.db"
        self.log = tmp / "hooks.log"
        self.env = {
            "HOME": str(tmp / "home"),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-local-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "LOSSLESS_DB": str(self.store),
            "LOSSLESS_HOOK_LOG": str(self.log),
            # A short fresh tail, so that lossless has summaries of this short session.
            "LOSSLESS_FRESH_TAIL_COUNT": "4",
            "XDG_CONFIG_HOME": str(tmp / "xdg-config"),
            "XDG_DATA_HOME": str(tmp / "xdg-data"),
        }
        self.session: str | None = None

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.exe), *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done

    def say(self, prompt: str, *options: str) -> dict[str, Any]:
        resume = ["--resume", self.session] if self.session else []
        out = json.loads(
            self.run("-p", prompt, "--output-format", "json", *resume, *options).stdout
        )
        self.session = out["session_id"]
        return dict(out)


@pytest.fixture(scope="module")
def claude_exe() -> Path:
    return npm_host(CLAUDE_CODE, "claude")


def test_claude_code_with_the_plugin_keeps_every_turn_and_gets_summaries_back(
    claude_exe: Path, tmp_path: Path
) -> None:
    """With a slow model as lossless's summarizer (``openai`` against a local server taking 2 s
    to its first token and then 300 tokens a second: some 10 s a summary): no hook call comes
    near its time limit in the plugin's hooks.json (the hooks' passes are provisional), and
    processes of their own put the model's summaries in place afterwards."""
    with AnthropicServer() as server, SummaryServer(2.0, 300) as model:
        claude = Claude(claude_exe, tmp_path, server)
        claude.env.update(
            LOSSLESS_SUMMARIZER="openai",
            LOSSLESS_SUMMARIZER_MODEL="summary-model",
            OPENAI_BASE_URL=model.url + "/v1",
        )
        # As a user installs it: the marketplace in this repository, the plugin from it.
        assert claude.run("plugin", "validate", str(REPO / "hosts" / "claude-code")).returncode == 0
        claude.run("plugin", "marketplace", "add", str(REPO))
        claude.run("plugin", "install", "lossless@lossless", "--scope", "project")
        # The MCP server connects before any hook has made the store.
        listed = claude.run("mcp", "list").stdout
        assert re.search(r"plugin:lossless:lossless: .*Connected", listed), listed
        assert not claude.store.exists()

        for prompt in TURNS_BEFORE:
            assert claude.say(prompt)["result"] == reply(prompt)
        # The model loads the deferred recall tool with ToolSearch and calls it (print mode
        # refuses a tool the user did not allow: docs/claude-code.md says how).
        recalled = claude.say(RECALL, "--allowedTools", f"{PLUGIN_TOOLS}__lcm_grep")["result"]
        claude.say("/compact")
        after_first = len(server.requests)
        for prompt in TURNS_BETWEEN:
            claude.say(prompt)
        claude.say("/compact")
        after_second = len(server.requests)
        for prompt in TURNS_AFTER:
            claude.say(prompt)
        requests = list(server.requests)
        _all_final(claude.store, model)

    session = claude.session
    assert session is not None
    log = claude.log.read_text(encoding="utf-8")
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]
    for event in ("Stop session=", "UserPromptSubmit", "PreCompact/manual", "SessionStart/compact"):
        assert event in log, log[-3000:]
    # Every hook call ended well within its time limit (the plugin's hooks.json).
    limits = _hook_limits()
    for event, seconds in re.findall(r"INFO lossless\.cli\.hooks: (\w+)\S* .* in ([\d.]+) s", log):
        assert float(seconds) < limits[event] / 2, (event, seconds)
    assert "provisional=" in log  # the compactions' passes were provisional

    # The recall tool answered from the store (hits with ids), the host's records of itself
    # (its MCP instructions, its record of the deferred tools) not among them; no request
    # said the server was still connecting.
    assert recalled.startswith("Tool said: ") and "Plan the retry policy" in recalled, recalled
    found = json.loads(recalled.removeprefix("Tool said: "))
    assert found["hits"] and "MCP Server Instructions" not in recalled
    assert not any("still connecting" in json.dumps(r["body"]) for r in requests)

    # Every turn once, in order: the user's words and the scripted replies; "yes" twice.
    prompts = [*TURNS_BEFORE, RECALL, *TURNS_BETWEEN, *TURNS_AFTER]
    with Engine.open(claude.store, config=Config()) as engine:
        messages = engine.messages(session)
        said = [m.content for m in messages if m.role == "user" and m.host_meta is None]
        answered = [
            m.content
            for m in messages
            if m.role == "assistant"
            and m.host_meta is None
            and m.content.startswith(("Reply", "Conf"))
        ]
        assert said == prompts
        assert answered == [reply(p) for p in prompts if p != RECALL]
        kinds = {m.host_meta for m in messages} - {None}
        assert {"compact_boundary", "host_summary", "command", "host_record"} <= kinds
        records = [m for m in messages if m.host_meta == "host_record"]
        assert any("deferred_tools_record" in m.content for m in records)
        assert all(m.role == "system" for m in records)
        assert engine.resume(session, latest=True).goal[0] == TURNS_BEFORE[0]
        stored = [(m.external_id, m.content) for m in messages]

    # lossless's context reached the model in the first request after each compaction.
    for start in (after_first, after_second):
        first = json.dumps(requests[start]["body"], ensure_ascii=False)
        assert "[lossless] Claude Code compacted this conversation" in first
        assert "<summary id=" in first and "lcm_grep" in first
    # A request about what the compactions took out of Claude Code's window gets lossless's
    # stored originals back (the UserPromptSubmit hook): the first request of the plan.
    about = json.dumps(requests[after_second]["body"], ensure_ascii=False)
    assert "Said before Claude Code compacted this session" in about
    assert "(user, " in about and TURNS_BEFORE[0] in about

    # The transcript Claude Code wrote imports whole, once, into a fresh store; a copy of it
    # under another name is the same conversation.
    [transcript] = (tmp_path / "home" / ".claude" / "projects").rglob(f"{session}.jsonl")
    with Engine.open(tmp_path / "fresh.db", config=Config()) as fresh:
        [report] = [r for r in fresh.import_path(transcript) if r.session_id == session]
        assert report.off_branch == 0 and not report.problems
        assert [(m.external_id, m.content) for m in fresh.messages(session)] == stored
        copy = tmp_path / "renamed.jsonl"
        shutil.copy(transcript, copy)
        assert sum(r.imported for r in fresh.import_path(copy)) == 0
        assert [c.conversation.session_id for c in fresh.conversations()] == [session]


def long_prompt(i: int) -> str:
    """Turn *i*'s request: 600 words."""
    return f"Request {i}: " + " ".join(f"detail{i}-{k}" for k in range(600))


def test_claude_code_at_a_tight_window_always_gets_summaries_back(
    claude_exe: Path, tmp_path: Path
) -> None:
    """A model with a 24k window (the server refuses a longer request, as the API does; Claude
    Code's own prompt is some 14k of it), turns of 600 words: Claude Code compacts again and
    again when a request is refused. No turn fails, every request after the first compaction
    carries lossless's summaries and the turn's request whole, lossless compacts at most once
    a turn, its DAG stays shallow, and every turn is stored once."""
    window = 24_000
    with AnthropicServer(window=window) as server:
        claude = Claude(claude_exe, tmp_path, server)
        claude.env.pop("LOSSLESS_FRESH_TAIL_COUNT")  # lossless's defaults
        claude.run("plugin", "marketplace", "add", str(REPO))
        claude.run("plugin", "install", "lossless@lossless", "--scope", "project")
        prompts = [long_prompt(i) for i in range(12)]
        starts = []
        for prompt in prompts:
            starts.append(len(server.requests))
            assert claude.say(prompt)["result"] == reply(prompt)
        requests = list(server.requests)
        refused = server.refused

    session = claude.session
    assert session is not None
    log = claude.log.read_text(encoding="utf-8")
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]
    compactions = log.count("SessionStart/compact")
    assert compactions >= 2 and refused >= 2, log[-3000:]  # compacted again and again
    bodies = [json.dumps(r["body"], ensure_ascii=False) for r in requests]
    sizes = [prompt_tokens(r["body"]) for r in requests]
    first = next(n for n, b in enumerate(bodies) if "[lossless] Claude Code compacted" in b)
    turn_of = {start: n for n, start in enumerate(starts)}
    turn = 0
    for n, body in enumerate(bodies):
        turn = turn_of.get(n, turn)
        if n < first or AnthropicServer.COMPACTION in body or sizes[n] > window:
            continue  # before any compaction, Claude Code's own summarizing, or refused
        assert "<summary id=" in body, n
        assert prompts[turn] in body, n
    # lossless compacted at most once a turn (its hooks' runs that wrote summaries).
    for lines in log.split("UserPromptSubmit")[1:]:
        assert lines.count("compaction_passes=") <= 1, lines

    with Engine.open(claude.store, config=Config()) as engine:
        messages = engine.messages(session)
        said = [m.content for m in messages if m.role == "user" and m.host_meta is None]
        assert said == prompts  # every turn once, in order
        live = engine.store.live_summaries(engine.conversation(session).conversation_id)
    leaves = sum(1 for s in live if s.kind == "leaf")
    depth = max(s.depth for s in live)
    assert depth <= 1 + math.log(max(leaves, 1), Config().condensed_min_fanout) + 1e-9


def _hook_limits() -> dict[str, float]:
    """Each event's time limit in the plugin's hooks.json (seconds)."""
    declared = json.loads((REPO / "hosts" / "claude-code" / "hooks" / "hooks.json").read_text())
    return {
        event: float(entry["hooks"][0].get("timeout", 60))
        for event, entries in declared["hooks"].items()
        for entry in entries[:1]
    }


def _all_final(store: Path, model: SummaryServer, wait: float = 240.0) -> None:
    """Wait for the hooks' own processes to put the model's summaries in place: then none is
    provisional, the model wrote some, and the store is consistent."""
    deadline = time.monotonic() + wait
    while True:
        with Engine.open(store, config=Config()) as engine:
            pending = engine.pending_summaries()["provisional"]
            if not pending or time.monotonic() > deadline:
                models = {s.model for s in engine.store.live_summaries(None)}
                assert pending == 0, f"{pending} still provisional after {wait:g} s"
                assert "summary-model" in models and model.answered > 0
                assert engine.check() == []
                return
        time.sleep(1.0)
