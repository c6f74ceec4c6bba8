"""The real Codex CLI (npm ``@openai/codex``) driving lossless end to end.

``codex exec`` runs against a local server that speaks the OpenAI Responses wire format with
scripted replies. lossless's hooks are installed the way a user installs them (``lossless
hooks codex --install --trust``: written into ``hooks.json`` and trusted in ``config.toml``,
so Codex runs them without ``--dangerously-bypass-hook-trust``). A session of several turns
— the same words twice, answered the same way twice — is auto-compacted by Codex (a tiny
``model_auto_compact_token_limit`` on a resume) and goes on. Then: the store holds every turn
exactly once, lossless's context reached the request after the compaction, and the rollout
Codex wrote imports whole, once, into a fresh store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from host_packages import CODEX, npm_host
from lossless import Config, Engine
from model_servers import ResponsesServer, reply

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
PROMPTS = ["Port the config parser to Rust", "same text", "same text"]
AFTER = ["Continue porting the config parser: the lexer"]
FAILING = 'CALL exec_command {"cmd": "ls /no-such-dir-for-lossless"}'
RECALL = 'CALL lcm_grep {"pattern": "config parser"}'


class Codex:
    """``codex exec`` with a scratch CODEX_HOME, the local model server and lossless."""

    def __init__(self, exe: Path, tmp: Path, server: ResponsesServer) -> None:
        self.exe = exe
        self.home = tmp / "codex-home"
        self.home.mkdir()
        self.work = tmp / "work"
        self.work.mkdir()
        self.store = tmp / "store.db"
        self.log = tmp / "hooks.log"
        (self.home / "config.toml").write_text(
            'model = "m"\nmodel_provider = "local"\napproval_policy = "never"\n'
            'sandbox_mode = "read-only"\n\n[model_providers.local]\nname = "local"\n'
            f'base_url = "{server.url}/v1"\nwire_api = "responses"\nenv_key = "LOCAL_API_KEY"\n'
            "request_max_retries = 0\nstream_max_retries = 0\n"
        )
        self.env = {
            "HOME": str(tmp / "home"),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "CODEX_HOME": str(self.home),
            "LOCAL_API_KEY": "local",
            "LOSSLESS_DB": str(self.store),
            "LOSSLESS_HOOK_LOG": str(self.log),
            "LOSSLESS_FRESH_TAIL_COUNT": "4",
            "XDG_CONFIG_HOME": str(tmp / "xdg-config"),
            "XDG_DATA_HOME": str(tmp / "xdg-data"),
            "XDG_CACHE_HOME": str(tmp / "xdg-cache"),
        }
        self.session: str | None = None

    def exec(self, prompt: str, *options: str) -> None:
        args = [str(self.exe), "exec", "--skip-git-repo-check", "--json", *options]
        args += ["resume", self.session, prompt] if self.session else [prompt]
        done = subprocess.run(
            args,
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,  # Codex waits for ever when its server is gone
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        for line in done.stdout.splitlines():
            event = json.loads(line)
            if event.get("type") == "thread.started":
                self.session = event["thread_id"]


@pytest.fixture(scope="module")
def codex_exe() -> Path:
    return npm_host(CODEX, "codex")


def test_codex_with_lossless_hooks_keeps_every_turn_and_gets_summaries_back(
    codex_exe: Path, tmp_path: Path
) -> None:
    with ResponsesServer() as server:
        codex = Codex(codex_exe, tmp_path, server)
        install = subprocess.run(
            [str(BIN / "lossless"), "hooks", "codex", "--install", "--trust", "--yes"],
            env=codex.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert install.returncode == 0, install.stderr
        installed = (codex.home / "config.toml").read_text()
        assert "[mcp_servers.lossless]" in installed and "startup_timeout_sec = 30" in installed
        assert str(tmp_path / "xdg-cache") in installed  # passed on to the server (see below)
        for prompt in PROMPTS:
            codex.exec(prompt)
        # The first session's first request already offers the recall tools: lossless mcp
        # answered Codex's tools/list from the list the install wrote down (Codex starts it
        # with HOME and PATH only: the install passed the cache folder on).
        assert _offers(server.requests[0]["body"], "lcm_grep")
        compact_from = len(server.requests)
        codex.exec("Go on", "-c", "model_auto_compact_token_limit=12")
        requests = list(server.requests)
        for prompt in AFTER:
            codex.exec(prompt)
        after_requests = list(server.requests)[len(requests) :]
        # A command that fails, a recall tool through the MCP server install registered, and
        # a second compaction.
        codex.exec(FAILING)
        codex.exec(RECALL)
        # Codex sends a turn's first request without waiting for an MCP server's tool list:
        # lossless mcp answers it before its SDK loads (the list install wrote down).
        assert _offers(server.requests[-2]["body"], "lcm_grep")
        recall_reply = server.requests[-1]
        codex.exec("Go on again", "-c", "model_auto_compact_token_limit=12")
        codex.exec("And after that")

    session = codex.session
    assert session is not None
    log = codex.log.read_text(encoding="utf-8")
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]
    for event in ("Stop session=", "PreCompact/auto", "SessionStart/compact"):
        assert event in log, log[-3000:]

    prompts = [*PROMPTS, "Go on", *AFTER, FAILING, RECALL, "Go on again", "And after that"]
    replied = [p for p in prompts if not p.startswith("CALL ")]
    with Engine.open(codex.store, config=Config()) as engine:
        messages = engine.messages(session)
        said = [m.content for m in messages if m.role == "user" and m.host_meta is None]
        assert said == prompts
        answers = [m.content for m in messages if m.content.startswith(("Reply to:", "Conf"))]
        assert answers == [reply(p) for p in replied]
        assert "host_summary" in {m.host_meta for m in messages}
        stored = [(m.external_id, m.content) for m in messages]
        hooked = engine.conversation(session).metadata["host_compactions"]
        # The failed command is logged as failed (its output says it exited with code 2).
        executions = engine.resume(session, latest=True).executions
        assert any("exec_command error" in e for e in executions), executions
    assert len(hooked) == 2  # both of Codex's compactions, as a fresh import finds them

    # The model called lcm_grep through the MCP server, and got the stored turn back.
    output = ResponsesServer.call_output(recall_reply["body"])
    assert output is not None and "Port the config parser to Rust" in output, output

    # The request that went on after the compaction carried lossless's context.
    kinds = [ResponsesServer.is_compaction(r) for r in requests[compact_from:]]
    assert True in kinds, "Codex did not compact"
    after = requests[compact_from + kinds.index(True) + 1]
    text = json.dumps(after["body"], ensure_ascii=False)
    assert "[lossless] Codex compacted this conversation" in text
    # The next request is about what the compaction took out of Codex's window: lossless's
    # stored originals came with it (the UserPromptSubmit hook).
    about = json.dumps(after_requests[0]["body"], ensure_ascii=False)
    assert "Said before Codex compacted this session" in about and PROMPTS[0] in about

    # The rollout imports whole, once, into a fresh store.
    [rollout] = (codex.home / "sessions").rglob(f"rollout-*{session}.jsonl")
    with Engine.open(tmp_path / "fresh.db", config=Config()) as fresh:
        [report] = fresh.import_path(rollout)
        assert (report.format, report.session_id, report.problems) == ("codex", session, [])
        assert [(m.external_id, m.content) for m in fresh.messages(session)] == stored
        assert fresh.conversation(session).metadata["host_compactions"] == hooked
        assert sum(r.imported for r in fresh.import_path(rollout)) == 0


def _offers(body: dict[str, Any], tool: str) -> bool:
    """Whether a request to the model offered *tool* (an MCP server's tools come in a
    namespace)."""
    tools = body.get("tools") or []
    names = [t.get("name") or "" for t in tools] + [
        inner.get("name") or ""
        for t in tools
        if t.get("type") == "namespace"
        for inner in t.get("tools") or []
    ]
    return any(n == tool or n.endswith(tool) for n in names)
