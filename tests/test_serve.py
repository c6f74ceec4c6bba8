"""``lossless serve``: the engine over JSON-RPC 2.0, driven as a host drives it — a child
process over stdio, or a shared server over loopback HTTP — through the project's client."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click
import pytest

from lossless import Config, Engine
from lossless.serve.client import ServeClient, ServeError, StdioClient

#: Small enough that a few dozen turns compact (leaf passes, then a condensed one).
SMALL = """
fresh_tail_count = 6
leaf_chunk_tokens = 300
leaf_target_tokens = 60
condensed_target_tokens = 60
leaf_min_fanout = 3
condensed_min_fanout = 2
"""


def turn(i: int) -> list[dict[str, Any]]:
    """Turn *i*: a user message (turn 3 carries the detail recalled later) and a reply."""
    detail = " The staging database password rotates on Thursdays." if i == 3 else ""
    return [
        {"role": "user", "content": f"Question {i}: how is service number {i} deployed?{detail}"},
        {
            "role": "assistant",
            "content": f"Service {i} is deployed with blue-green releases behind the load"
            f" balancer, with a canary of {i % 7 + 1} percent for ten minutes first.",
        },
    ]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "lossless.toml"
    path.write_text(SMALL)
    return path


@pytest.fixture
def client(db: str, config: Path) -> Iterator[StdioClient]:
    with ServeClient.spawn(["--db", db, "--config", str(config)]) as made:
        yield made


def test_a_session_over_stdio_compacts_assembles_within_budget_and_recalls(
    client: StdioClient, db: str
) -> None:
    budget = 700
    for i in range(40):
        answer = client.after_turn("s1", turn(i), token_budget=budget)
        assert answer["inserted"] == 2
    client.wait_for_compaction(60)

    made = client.assemble("s1", token_budget=budget, format="openai")
    assert made["summaries"] > 0
    assert made["tokens"] <= budget
    assert any("<summary id=" in str(m["content"]) for m in made["messages"])
    assert made["messages"][-1]["content"] == turn(39)[1]["content"]

    hits = client.grep("staging database password")["hits"]
    assert hits and "Thursdays" in hits[0]["snippet"]
    found = client.describe(hits[0]["id"])
    assert "rotates on Thursdays" in found["content"]

    state = client.status("s1")
    assert state["messages"] == 80 and state["summaries"] > 0
    assert client.doctor() == {"ok": True, "problems": [], "notes": []}
    client.close()
    assert client.process.returncode == 0
    with Engine.open(db, config=Config()) as engine:  # every turn stored once, in order
        stored = [m.content for m in engine.messages("s1")]
    assert stored == [m["content"] for i in range(40) for m in turn(i)]


def test_bad_lines_get_json_rpc_errors_and_the_server_lives_on(client: StdioClient) -> None:
    client.write(b"{not json\n")
    client.write(b"[]\n")
    client.write(b'{"jsonrpc": "1.0", "id": 9, "method": "status"}\n')
    for method, params, code, said in (
        ("no_such_method", {}, -32601, "no method 'no_such_method'"),
        ("grep", {"pattern": "x", "limit": 5000}, -32602, "limit must be an integer from 1"),
        ("grep", {"patern": "x"}, -32602, "no parameter 'patern'"),
        ("ingest", {"session_id": "s"}, -32602, "needs message"),
        ("status", {"session_id": "nobody"}, -32001, "no conversation with session id"),
        ("grep", {"pattern": "(", "mode": "regex"}, -32000, "regular expression"),
        ("ingest", {"session_id": "s", "message": {"nonsense": 1}}, -32004, "shape"),
    ):
        with pytest.raises(ServeError) as raised:
            client.call(method, **params)
        assert raised.value.code == code, raised.value
        assert said in raised.value.message
    assert client.call("ingest", session_id="s", message={"role": "user", "content": "still up"})
    unasked = sorted((r["id"] or 0, r["error"]["code"]) for r in client.unmatched)
    assert unasked == [(0, -32700), (0, -32600), (9, -32600)]
    assert client.status("s")["messages"] == 1


def test_a_request_line_over_the_limit_names_the_setting_and_the_server_lives_on(
    db: str, config: Path
) -> None:
    """Issue 45, point 5: serve's reader holds at most ``max_line_bytes`` of a line; a longer
    request is answered with an error naming the limit and its setting, and skipped."""
    with ServeClient.spawn(
        ["--db", db, "--config", str(config)], env={"LOSSLESS_MAX_LINE_BYTES": "100000"}
    ) as client:
        huge = {"role": "user", "content": "x" * 300_000}
        client.write(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "ingest",
                    "params": {"session_id": "s", "message": huge},
                }
            ).encode()
            + b"\n"
        )
        assert client.call("ingest", session_id="s", message={"role": "user", "content": "ok"})
        [answer] = client.unmatched
        said = answer["error"]["message"]
        assert "over the limit of 100,000" in said and "max_line_bytes" in said, said
        assert client.status("s")["messages"] == 1


def test_a_batch_and_a_notification(client: StdioClient) -> None:
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "status"},
        {
            "jsonrpc": "2.0",
            "method": "ingest",
            "params": {"session_id": "n", "message": {"role": "user", "content": "quiet"}},
        },
        {"jsonrpc": "2.0", "id": "b", "method": "nope"},
    ]
    replies = client.send(json.dumps(batch).encode())
    assert [r["id"] for r in replies] == ["a", "b"]  # the notification is not answered
    assert "result" in replies[0] and replies[1]["error"]["code"] == -32601
    assert client.status("n")["messages"] == 1  # ... but it ran, before this request


def test_one_sessions_requests_run_in_the_order_they_arrived(client: StdioClient, db: str) -> None:
    # Sent without waiting, interleaved over two sessions: each session keeps its order.
    lines = []
    for i in range(60):
        session = "left" if i % 3 else "right"
        lines.append(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "ingest",
                    "params": {
                        "session_id": session,
                        "message": {"role": "user", "content": str(i)},
                    },
                }
            )
        )
    client.write(("\n".join(lines) + "\n").encode())
    client.close()  # closing stdin: the server answers what it was sent, then stops
    with Engine.open(db, config=Config()) as engine:
        for session in ("left", "right"):
            got = [m.content for m in engine.messages(session)]
            sent = [str(i) for i in range(60) if (session == "left") == bool(i % 3)]
            assert got == sent


class HeldSummarizer:
    """An OpenAI-wire summarizer that answers only when the test lets it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.called = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.called.set()
                owner.release.wait(60)
                body = json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "m",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "Deploys, summed up."},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_background_compaction_never_holds_a_request(db: str, tmp_path: Path) -> None:
    held = HeldSummarizer()
    config = tmp_path / "held.toml"
    config.write_text(
        SMALL + f'summarizer = "held"\n[profiles.held]\nprovider = "openai"\nmodel = "m"\n'
        f'base_url = "{held.url}"\napi_key = "k"\n'
    )
    try:
        with ServeClient.spawn(["--db", db, "--config", str(config)]) as client:
            for i in range(12):
                client.after_turn("s", turn(i), token_budget=600)
            assert held.called.wait(30), "the model was never asked for a summary"
            # The summarizer holds its answer: requests to the same session are answered, and
            # the context is compacted already (provisional summaries, the model's to come).
            client.after_turn("s", turn(12), token_budget=600)
            assert client.assemble("s", token_budget=600)["raw_messages"] > 0
            state = client.status("s")
            assert state["messages"] == 26 and state["summaries"] > 0
            assert state["summaries_pending"]["provisional"] > 0
            held.release.set()
            client.wait_for_compaction(60)
            deadline = time.monotonic() + 60
            while client.status("s")["summaries_pending"]["provisional"]:
                assert time.monotonic() < deadline, "the model's summaries never came"
                time.sleep(0.1)
    finally:
        held.release.set()
        held.server.shutdown()


def test_the_recall_tools_for_a_host_model(client: StdioClient) -> None:
    for i in range(6):
        client.after_turn("mine", turn(i))
    client.after_turn("theirs", [{"role": "user", "content": "Thursdays are for the other team"}])
    tools = {t["name"]: t for t in client.tools("mine")}
    assert (
        "lcm_grep" in tools and "conversation" not in tools["lcm_grep"]["parameters"]["properties"]
    )
    hits = client.call_tool("lcm_grep", {"pattern": "Thursdays"}, session_id="mine")["hits"]
    # Only the session's own conversation (the message, and the ones beside it in the ranking).
    assert {h["conversation_id"] for h in hits} == {client.status("mine")["conversation_id"]}
    assert "Thursdays" in hits[0]["snippet"]
    with pytest.raises(ServeError, match="leave out conversation"):
        client.call_tool("lcm_grep", {"pattern": "x", "conversation": "theirs"}, session_id="mine")
    with pytest.raises(ServeError, match="no tool 'lcm_expand' here"):
        client.call_tool("lcm_expand", {"summary_ids": ["sum_0123456789abcdef"]})
    discovered = {m["name"]: m for m in client.discover()["methods"]}
    assert discovered["grep"]["params"]["properties"]["limit"]["maximum"] == 200
    assert discovered["after_turn"]["params"]["required"] == ["session_id"]


def _start_http(
    db: str, config: Path, token_file: Path, *args: str
) -> tuple[subprocess.Popen[str], str]:
    """``serve`` with a token file and *args* (``--http 127.0.0.1:0`` when none are given):
    the process and the first line it wrote (where it listens)."""
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "lossless", "--db", db, "--config", str(config), "serve"),
            *("--token-file", str(token_file), *(args or ("--http", "127.0.0.1:0"))),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/|unix:(\S+) ", line)
    assert found, line
    return process, f"http://127.0.0.1:{found.group(1)}/" if found.group(1) else line


def test_the_same_over_http_with_its_token(db: str, config: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    process, url = _start_http(db, config, token_file)
    try:
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        token = token_file.read_text().strip()
        client = ServeClient.http(url, token)
        for i in range(30):
            client.after_turn("h", turn(i), token_budget=700)
        client.wait_for_compaction(60)
        made = client.assemble("h", token_budget=700)
        assert made["summaries"] > 0 and made["tokens"] <= 700
        assert "Thursdays" in client.grep("staging password")["hits"][0]["snippet"]
        with pytest.raises(ServeError, match="missing or wrong bearer token") as refused:
            ServeClient.http(url, "wrong-token-of-enough-length").status()
        assert refused.value.code == 401
        bad = urllib.request.Request(
            url, data=b"{oops", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(bad) as response:
            assert json.loads(response.read())["error"]["code"] == -32700
        assert client.status("h")["messages"] == 60  # still serving
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0


def test_a_hundred_hosts_connecting_at_once_are_all_served(
    db: str, config: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    process, url = _start_http(db, config, token_file)
    hosts = 100
    start = threading.Barrier(hosts)
    failures: list[str] = []
    stored: dict[int, int] = {}

    def host(i: int) -> None:
        client = ServeClient.http(url, token_file.read_text().strip())
        start.wait()
        try:
            for t in range(3):
                client.after_turn(f"host-{i}", turn(t), token_budget=700)
            stored[i] = client.status(f"host-{i}")["messages"]
        except Exception as exc:
            failures.append(f"host {i}: {type(exc).__name__}: {exc}")

    try:
        threads = [threading.Thread(target=host, args=(i,)) for i in range(hosts)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failures == []
        assert stored == dict.fromkeys(range(hosts), 6)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0


def test_http_refuses_an_address_off_loopback(db: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lossless", "--db", db, "serve", "--http", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 2
    assert "not a loopback address" in done.stderr and "--allow-remote" in done.stderr


def test_requests_read_from_a_file_are_all_answered(tmp_path: Path) -> None:
    # `serve --stdio < requests.jsonl`: stdin is a file, which an event loop cannot watch.
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "ingest",
                "params": {"session_id": "f", "message": {"role": "user", "content": "hi"}},
            }
        )
        + "\n"
        + json.dumps({"jsonrpc": "2.0", "id": 2, "method": "status", "params": {}})
    )
    with requests.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "lossless", "--db", str(tmp_path / "f.db"), "serve", "--stdio"],
            stdin=stdin,
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    answers = {a["id"]: a for a in map(json.loads, done.stdout.decode().splitlines())}
    assert answers[1]["result"]["inserted"] == 1
    assert answers[2]["result"]["backend"] == "sqlite"


def _long_turns(n: int) -> list[dict[str, Any]]:
    """*n* turns of about 170 words a message (about 350 tokens each)."""
    out = []
    for i in range(n):
        out.append(
            {"role": "user", "content": f"Q{i}: " + " ".join(f"ask{i}w{k}" for k in range(170))}
        )
        out.append(
            {
                "role": "assistant",
                "content": f"A{i}: " + " ".join(f"say{i}w{k}" for k in range(170)),
            }
        )
    return out


def test_with_the_window_the_bridge_assembles_within_the_room_the_host_leaves(
    db: str, tmp_path: Path
) -> None:
    """The issue's reproduction: 300 stored messages, a 40k window of which the host's own
    prompt takes 18k. Given the window instead of a bare budget, the assembly fits the room
    (the window less the host's part, less the reply, less the turn under way) and carries
    summaries; the host's reported prompt size is what measures its part."""
    with ServeClient.spawn(["--db", db]) as bridge:
        bridge.call("ingest_batch", session_id="oc", messages=_long_turns(150))
        first = bridge.call(
            "assemble", session_id="oc", window=40_000, reply_tokens=4_000, format="openai"
        )
        # No measurement yet: a quarter of the window is taken to be the host's.
        assert first["room"]["source"] == "default" and first["room"]["overhead"] == 10_000
        assert first["tokens"] <= 40_000 - 10_000 - 4_000
        # The host's prompt is over its limit: it asks lossless to compact.
        done = bridge.call(
            "compact_for_host",
            session_id="oc",
            window=40_000,
            host_tokens=118_000,
            format="openai",
        )
        assert done["compacted"] and done["tokens_before"] == 118_000
        assert done["tokens_after"] <= 40_000 - 4_000
        # The host's request carried lossless's messages with its own 18,000 tokens and a
        # 600-token prompt; the provider said so. Measured and kept for the next turn (whose
        # compaction, if any, runs in the background: waited for).
        turn = bridge.call(
            "after_turn",
            session_id="oc",
            messages=[],
            window=40_000,
            prompt_tokens=first["tokens"] + 18_600,
            pending_tokens=600,
            assembled_tokens=first["tokens"],
        )
        assert turn["room"]["overhead"] == 18_000 and turn["room"]["source"] == "recorded"
        bridge.call("wait_for_compaction", timeout=60)
        made = bridge.call("assemble", session_id="oc", window=40_000, pending_tokens=600)
        assert made["tokens"] <= 40_000 - 18_000 - 4_000 - 600
        assert made["summaries"] >= 1
        status = bridge.call("status", session_id="oc")
        assert status["room"]["overhead"] == 18_000
        again = bridge.call("compact_for_host", session_id="oc", window=40_000)
        assert not again["compacted"] and again["reason"].startswith("already")
        # No compaction runs for a session: cancelling says so.
        assert bridge.call("cancel_compaction", session_id="oc") == {"cancelled": False}


def test_a_host_that_gives_up_stops_the_compaction_between_passes(db: str, tmp_path: Path) -> None:
    """A model that takes a second a summary, each pass waiting for it (provisional summaries
    off); the host asks to compact, then cancels (its abortSignal): the run stops after the
    pass under way, says so, and leaves a consistent store; it would have written many more
    passes."""
    sys.path.insert(0, str(Path(__file__).parent))
    from model_servers import ChatServer

    with ChatServer(delay=1.0) as model:
        config = tmp_path / "slow.toml"
        config.write_text(
            SMALL
            + "provisional_summaries = false\n"
            + 'summarizer = "slow"\n[profiles.slow]\nprovider = "openai"\nmodel = "m"\n'
            + f'base_url = "{model.url}/v1"\napi_key = "sk-local"\n'
        )
        token_file = tmp_path / "token"
        process, url = _start_http(db, config, token_file)
        try:
            client = ServeClient.http(url, token_file.read_text().strip())
            client.call("ingest_batch", session_id="slow", messages=_long_turns(30))
            done: dict[str, Any] = {}

            def ask() -> None:
                done.update(client.call("compact_for_host", session_id="slow", window=8_000))

            asking = threading.Thread(target=ask)
            asking.start()
            time.sleep(2.5)
            other = ServeClient.http(url, token_file.read_text().strip())
            assert other.call("cancel_compaction", session_id="slow") == {"cancelled": True}
            asking.join(30)
            assert not asking.is_alive()
            assert done["stopped"] is True and 1 <= done["passes"] <= 4, done
            assert other.call("doctor")["ok"] is True
            # Asked again, it goes on from where it stopped.
            assert other.call("cancel_compaction", session_id="slow") == {"cancelled": False}
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(60) == 0


def test_listening_problems_are_one_line_and_the_made_token_is_never_logged(
    db: str, config: Path, tmp_path: Path
) -> None:
    """An address in use or not of this machine is one line of error, no traceback; IPv6
    loopback serves; a token lossless made is written to a private file, not to a log."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    base = [sys.executable, "-m", "lossless", "--db", db, "--config", str(config), "serve"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run(
            [*base, "--http", f"127.0.0.1:{port}"], capture_output=True, text=True, env=env
        )
    assert busy.returncode == 1, busy
    assert busy.stderr.strip().count("\n") == 0 and "Traceback" not in busy.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in busy.stderr and "in use" in busy.stderr
    unknown = subprocess.run(
        [*base, "--http", "no-such-host.invalid:0", "--allow-remote"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr, unknown
    assert "is not an address of this machine" in unknown.stderr

    process = subprocess.Popen(
        [*base, "--http", "[::1]:0"], stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = re.search(r"http://\[::1\]:(\d+)/ \(bearer token: in (\S+)\);", line)
        assert found, line
        token_file = Path(found.group(2))
        token = token_file.read_text().strip()
        assert token not in line and oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert token_file.is_relative_to(tmp_path / "state")
        status = ServeClient.http(f"http://[::1]:{found.group(1)}/", token).status()
        assert "summaries_pending" in status
    finally:
        process.terminate()
        process.wait(30)


def test_a_session_id_no_conversation_should_have_is_refused_saying_why(
    client: StdioClient,
) -> None:
    """Empty, blank, a megabyte long, or holding a NUL or a line break: an error that says
    which, no conversation made, and the server lives on."""
    message = {"role": "user", "content": "hello"}
    for session_id, said in (
        ("", "may not be empty"),
        ("   ", "may not be empty"),
        ("x" * 1_000_000, "at most 1,024 characters; this one has 1,000,000"),
        ("a\x00b", "control characters; this one has U+0000 at position 1"),
        ("line\nbreak", "U+000A"),
    ):
        with pytest.raises(ServeError) as raised:
            client.call("ingest", session_id=session_id, message=message)
        assert raised.value.code == -32602 and said in raised.value.message, raised.value
    assert client.call("ingest", session_id="fine", message=message)
    assert client.call("status")["conversations"] == 1


def test_the_token_file_is_made_new_and_owner_only_and_never_written_through_a_link(
    db: str, tmp_path: Path
) -> None:
    """An earlier start's token file (a regular file of this user, even one made 0644) is
    replaced by a new owner-only file; a symbolic link (to a file an attacker wants
    overwritten) or another user's file is refused unless --force, which replaces the link
    itself; the file it pointed to is never touched."""
    from lossless.cli.serve import write_token_file

    earlier = tmp_path / "serve.token"
    earlier.write_text("old token\n")
    earlier.chmod(0o644)
    write_token_file(earlier, "new-token")
    assert earlier.read_text() == "new-token\n" and earlier.stat().st_mode & 0o777 == 0o600

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    link = tmp_path / "link.token"
    link.symlink_to(victim)
    refused = subprocess.run(
        [
            *(sys.executable, "-m", "lossless", "--db", db, "serve", "--http", "127.0.0.1:0"),
            *("--token-file", str(link)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused
    assert f"the token file {link} is a symbolic link" in refused.stderr
    assert victim.read_text() == "precious\n" and link.is_symlink()
    write_token_file(link, "forced-token", force=True)
    assert not link.is_symlink() and link.read_text() == "forced-token\n"
    assert link.stat().st_mode & 0o777 == 0o600
    assert victim.read_text() == "precious\n" and victim.stat().st_mode & 0o777 == 0o644
    if os.getuid() == 0:  # (only root can give a file away)
        theirs = tmp_path / "theirs.token"
        theirs.write_text("someone else's\n")
        os.chown(theirs, 65534, 65534)
        with pytest.raises(click.UsageError, match="belongs to another user"):
            write_token_file(theirs, "t")
        assert theirs.read_text() == "someone else's\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_bootstrap_over_http_reads_only_under_the_transcript_roots(
    db: str, config: Path, tmp_path: Path
) -> None:
    """A token holder cannot have the server import any file it can read: a transcript
    under the installed hosts' folders (here Claude Code's, under HOME) is read; a file
    elsewhere, or a link inside a root that points out of it, is refused saying so, and
    nothing of it is stored; --transcript-root allows a folder."""
    from lossless.sample import write_session

    home = tmp_path / "home"
    projects = home / ".claude" / "projects" / "-work"
    for folder in (projects, tmp_path / "elsewhere", tmp_path / "extra"):
        folder.mkdir(parents=True)
    inside = write_session(projects / "in.jsonl", 4, session_id="in")
    secret = write_session(tmp_path / "elsewhere" / "secret.jsonl", 4, session_id="secret")
    (projects / "out.jsonl").symlink_to(secret)
    extra = write_session(tmp_path / "extra" / "x.jsonl", 4, session_id="x")
    base = [sys.executable, "-m", "lossless", "--db", db, "--config", str(config), "serve"]
    env = {**os.environ, "HOME": str(home)}
    env.pop("CLAUDE_CONFIG_DIR", None)
    for roots in ([], ["--transcript-root", str(extra.parent)]):
        process = subprocess.Popen(
            [*base, "--http", "127.0.0.1:0", "--token", "t" * 32, *roots],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert process.stderr is not None
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", process.stderr.readline())
            assert found
            server = ServeClient.http(f"http://127.0.0.1:{found.group(1)}/", "t" * 32)
            if not roots:
                made = server.call("bootstrap", session_id="in", transcript=str(inside))
                assert made["messages"] > 0
                for path in (secret, projects / "out.jsonl", extra):
                    with pytest.raises(ServeError) as refused:
                        server.call("bootstrap", session_id="s2", transcript=str(path))
                    assert refused.value.code == -32602
                    assert "reads transcripts only under the server's transcript roots" in (
                        refused.value.message
                    )
                    assert "--transcript-root" in refused.value.message
            else:
                made = server.call("bootstrap", session_id="x", transcript=str(extra))
                assert made["messages"] > 0
        finally:
            process.terminate()
            process.wait(30)
    with Engine.open(db, config=Config()) as engine:
        sessions = {c.conversation.session_id for c in engine.conversations()}
    assert sessions == {"in", "x"}


def test_closing_stdin_right_after_a_turn_finishes_its_compaction(tmp_path: Path) -> None:
    """The host closes the server's stdin as soon as `after_turn` is answered: the compaction
    it started in the background still runs to its end, the follow-up work it asks for as
    it ends too (it was refused by the closing queue: 'background work failed', and one
    summary of a needed dozen), and nothing is said on stderr."""
    db = tmp_path / "s.db"
    messages = [
        {"role": ("user", "assistant")[i % 2], "content": f"turn {i} " + "the deploy plan " * 40}
        for i in range(60)
    ]
    requests = [
        {"method": "ingest_batch", "params": {"session_id": "s", "messages": messages}},
        {"method": "after_turn", "params": {"session_id": "s", "token_budget": 2000}},
    ]
    lines = "".join(
        json.dumps({"jsonrpc": "2.0", "id": i, **r}) + "\n" for i, r in enumerate(requests)
    )
    env = {
        **os.environ,
        "LOSSLESS_LEAF_CHUNK_TOKENS": "200",
        "LOSSLESS_CONTEXT_THRESHOLD": "0.1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "lossless", "--db", str(db), "serve", "--stdio"],
        input=lines,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    with Engine.open(db, config=Config()) as engine:
        context = engine.context("s")
        assert sum(item.tokens for item in context) <= 2000
        assert sum(engine.summary_counts("s").values()) >= 12


def test_assemble_is_prompt_aware_with_the_request_given_or_stored(client: StdioClient) -> None:
    budget = 1600  # (compacted at 900: room is left after the essentials)
    for i in range(40):
        client.after_turn("p1", turn(i), token_budget=900)
    client.wait_for_compaction(60)
    detail = turn(3)[0]["content"]
    said = next(
        h["id"] for h in client.grep("staging database password")["hits"] if h["kind"] == "message"
    )
    plain = client.assemble("p1", token_budget=budget, format="openai", focus="qqq zzz")
    assert plain["recalled"] == []

    # The request the host sends itself (OpenClaw's prompt): the turn it is about comes back.
    asked = client.assemble(
        "p1", token_budget=budget, format="openai", prompt="when does the password rotate?"
    )
    assert said in asked["recalled"] and asked["tokens"] <= budget
    assert {"role": "user", "content": detail} in asked["messages"]
    # Neither given: the newest stored request is what the context is for.
    client.after_turn(
        "p1", [{"role": "user", "content": "when does the password rotate?"}], token_budget=900
    )
    stored = client.assemble("p1", token_budget=budget, format="openai")
    assert said in stored["recalled"] and {"role": "user", "content": detail} in stored["messages"]
