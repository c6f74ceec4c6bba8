"""``lossless mcp`` starting: the handshake answered before the SDK and the engine load, with
the SDK's own answer; a store that does not exist yet served as soon as it appears."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from lossless import Config, Engine
from lossless.mcp_front import HANDSHAKE_VERSIONS, initialize_result
from lossless.mcp_server import build_server
from lossless.retrieval.tools import STORE_SCOPE, server_instructions

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _lossless_command() -> list[str]:
    exe = Path(sys.executable).with_name("lossless")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from lossless.cli.main import main; main()"]


def _environment(tmp_path: Path) -> dict[str, str]:
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
    }


def _initialize(params: Any, rid: int | str = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params}


CLIENT = {"name": "a-host", "version": "2.1.332"}
PARAMS = [
    *(
        {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT}
        for version in HANDSHAKE_VERSIONS
    ),
    # A version the server does not speak gets the newest; what a host sends besides is kept.
    {"protocolVersion": "2099-01-01", "capabilities": {"roots": {}}, "clientInfo": CLIENT},
    {
        "protocolVersion": "2025-06-18",
        "capabilities": {"elicitation": {}, "sampling": {}},
        "clientInfo": {**CLIENT, "title": "A Host"},
        "_meta": {"progressToken": 1},
    },
]


async def _sdk_answer(engine: Engine, request: dict[str, Any]) -> dict[str, Any]:
    """What the SDK itself answers *request* with, on the server lossless mcp builds."""
    lowlevel = build_server(engine)._lowlevel_server
    to_server, server_in = create_context_streams[SessionMessage | Exception](1)
    server_out, from_server = create_context_streams[SessionMessage](1)
    message = mcp_types.jsonrpc_message_adapter.validate_json(json.dumps(request), by_name=False)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lowlevel.run, server_in, server_out, lowlevel.create_initialization_options()
            )
            await to_server.send(SessionMessage(message))
            reply = await from_server.receive()
            tg.cancel_scope.cancel()
    answer: dict[str, Any] = json.loads(
        reply.message.model_dump_json(by_alias=True, exclude_unset=True)
    )
    return answer


async def test_the_front_answers_initialize_exactly_as_the_sdk_does(tmp_path: Path) -> None:
    assert HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS
    with Engine.open(tmp_path / "s.db", config=Config()) as engine:
        for params in PARAMS:
            sdk = await _sdk_answer(engine, _initialize(params))
            ours = initialize_result(params, instructions=server_instructions(STORE_SCOPE))
            assert ours == sdk["result"], params


def test_the_front_leaves_what_it_cannot_vouch_for_to_the_sdk() -> None:
    for params in (
        None,
        [],
        {"capabilities": {}, "clientInfo": CLIENT},
        {"protocolVersion": 20250618, "capabilities": {}, "clientInfo": CLIENT},
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}},
        {"protocolVersion": "2025-06-18", "clientInfo": CLIENT},
        {
            "protocolVersion": "2026-07-28",
            "capabilities": {},
            "clientInfo": CLIENT,
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
        },
    ):
        assert initialize_result(params, instructions="x") is None, params


def test_answering_the_handshake_loads_neither_the_engine_nor_the_sdk() -> None:
    """What ``lossless mcp`` imports before it can answer: no engine, no MCP SDK (which is
    what makes the first answer fast; benchmarks/mcp_start.py times it)."""
    probe = (
        "import sys\n"
        "from lossless.cli.main import cli\n"
        "import click\n"
        "cli.get_command(click.Context(cli), 'mcp')\n"
        "import lossless.mcp_front\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types',"
        " 'pydantic', 'anyio') or m in ('lossless.engine', 'lossless.store', 'sqlite3'))\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def _session(tmp_path: Path, db: Path, lines: list[Any]) -> tuple[list[Any], str]:
    """``lossless --debug mcp`` over real stdio, sent *lines* at once: its answers in the
    order written, and its log."""
    with subprocess.Popen(
        [*_lossless_command(), "--debug", "--db", str(db), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **_environment(tmp_path)},
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(
            "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
        )
        server.stdin.flush()
        replies = [server.stdout.readline() for _ in range(3)]
        rest, err = server.communicate(timeout=60)
    assert server.returncode == 0, err
    return [json.loads(line) for line in [*replies, *rest.splitlines()] if line], err


def test_lossless_mcp_answers_each_request_once_with_the_front_first(tmp_path: Path) -> None:
    """Over real stdio: the handshake is answered by the front (said with --debug), the SDK's
    second answer to it never reaches the wire, and the SDK serves everything after it. The
    tool list the SDK gave is remembered: the next start's front answers it too, with the
    very same list, before the SDK has loaded (a host that does not wait for it still gets
    the tools), and again the SDK's own answer is never written twice."""
    db = tmp_path / "s.db"
    with Engine.open(db, config=Config()) as engine:
        engine.ingest("s", {"role": "user", "content": "The staging port is 9043."})
    lines = [
        _initialize(PARAMS[2], rid="init-1"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/list",
            "params": {"_meta": {"progressToken": 0}},
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "lcm_grep", "arguments": {"pattern": "staging port"}},
        },
    ]
    answers, err = _session(tmp_path, db, lines)
    assert [a["id"] for a in answers] == ["init-1", 2, 3], err
    assert answers[0]["result"]["protocolVersion"] == PARAMS[2]["protocolVersion"]
    assert "answered initialize before the SDK loaded" in err
    assert "answered tools/list" not in err  # nothing remembered yet: the SDK listed them
    assert len(answers[1]["result"]["tools"]) == 7
    found = json.loads(answers[2]["result"]["content"][0]["text"])
    assert found["hits"][0]["snippet"] == "The staging port is 9043."

    again, err = _session(tmp_path, db, lines)
    assert [a["id"] for a in again] == ["init-1", 2, 3], err
    assert "answered tools/list before the SDK loaded" in err
    assert again[:2] == answers[:2]

    # A list remembered under other files (another SDK, an edited declaration) is not used.
    [remembered] = (tmp_path / "xdg-cache" / "lossless").glob("mcp-tools-*.json")
    saved = json.loads(remembered.read_text())
    remembered.write_text(json.dumps({**saved, "key": "another", "tools": []}))
    third, err = _session(tmp_path, db, lines)
    assert "answered tools/list" not in err
    assert third[:2] == answers[:2]
    assert json.loads(remembered.read_text()) == saved  # and it is written down again


async def test_a_store_made_after_the_server_started_is_served_from_then_on(
    tmp_path: Path,
) -> None:
    """A host starts its MCP server before its first hook makes the store: the server
    connects, lists its tools, says where the store is expected (without making it), and
    answers from the store once it is there."""
    db = tmp_path / "later" / "store.db"
    db.parent.mkdir()
    params = StdioServerParameters(
        command=_lossless_command()[0],
        args=[*_lossless_command()[1:], "--db", str(db), "mcp"],
        env=_environment(tmp_path),
    )
    with (tmp_path / "server.err").open("w") as errlog, anyio.fail_after(60):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            early = await client.call_tool("lcm_grep", {"pattern": "staging"})
            assert not db.exists()  # a mistyped --db is never made into an empty store
            with Engine.open(db, config=Config(), create=True) as engine:
                engine.ingest("s", {"role": "user", "content": "Staging listens on 9043."})
            later = await client.call_tool("lcm_grep", {"pattern": "staging"})
            listed = await client.call_tool("lcm_list_conversations", {})
    err = (tmp_path / "server.err").read_text()
    assert "lcm_grep" in names
    assert early.is_error
    text = early.content[0].text  # type: ignore[union-attr]
    assert f"no lossless store at {db}" in text, text
    assert not later.is_error, later
    assert later.structured_content is not None
    assert later.structured_content["hits"][0]["snippet"] == "Staging listens on 9043."
    assert listed.structured_content is not None
    assert len(listed.structured_content["conversations"]) == 1
    assert f"warning: no lossless store at {db}" in err and "serving anyway" in err
    assert "Traceback" not in err


def test_a_line_nested_too_deeply_is_refused_and_the_server_goes_on(tmp_path: Path) -> None:
    """A line Python's JSON reader cannot read (nested beyond its recursion limit), before
    the SDK has loaded and after: answered with a parse error each time, the requests around
    it answered, and the server ends when the client closes its input (it once waited for
    ever when its reader thread died on such a line)."""
    deep = {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": "DEEP"}}
    nested = "[" * 100_000 + "]" * 100_000
    line = json.dumps(deep).replace('"DEEP"', nested)
    db = tmp_path / "s.db"
    Engine.open(db, config=Config()).close()
    for lines in (
        [line, _initialize(PARAMS[2]), {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}],
        [_initialize(PARAMS[2]), line, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}],
    ):
        answers, _ = _session(tmp_path, db, lines)
        refused = [a for a in answers if "error" in a]
        assert len(refused) == 1 and "nests too deeply" in refused[0]["error"]["message"]
        assert {a.get("id") for a in answers if "result" in a} == {1, 2}, answers
