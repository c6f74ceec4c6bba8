"""``lossless serve --http`` / ``--unix`` as a shared server must stand: slow, silent, broken
and vanishing clients, chunked bodies, many idle connections, health and metrics for whoever
runs it, a unix socket only its owner may use. Each test runs the real command and talks to
it over real sockets."""

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
from dataclasses import dataclass
from pathlib import Path

import pytest

from lossless.serve.client import ServeClient, ServeError
from test_serve import SMALL, _start_http, turn


@dataclass
class Served:
    process: subprocess.Popen[str]
    port: int
    token: str
    url: str

    def stop(self) -> str:
        """SIGTERM, the exit code checked; what the server wrote to stderr."""
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err
        return err


def _serve(db: str, tmp_path: Path, *args: str) -> Served:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "lossless.toml"
    config.write_text(SMALL)
    token_file = tmp_path / "token"
    process, url = _start_http(db, config, token_file, *args)
    port = int(url.rsplit(":", 1)[1].strip("/")) if url.startswith("http") else 0
    return Served(process, port, token_file.read_text().strip(), url)


@pytest.fixture
def served(db: str, tmp_path: Path) -> Iterator[Served]:
    made = _serve(db, tmp_path, "--http", "127.0.0.1:0", "--request-timeout", "1.5")
    try:
        yield made
    finally:
        if made.process.poll() is None:
            made.process.kill()
            made.process.communicate()


def _raw(port: int, data: bytes, *, wait: float = 10.0) -> bytes:
    """What the server sends back to *data* written on a new connection, until it closes
    the connection or *wait* seconds pass."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        got = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            got += chunk
        return got


def _request(served: Served, body: bytes, headers: str = "", *, close: bool = True) -> bytes:
    head = (
        f"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.token}\r\n"
        f"Content-Type: application/json\r\n{headers}"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return _raw(served.port, head.encode() + body)


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]


def test_a_chunked_body_is_read_as_one_request(served: Served) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "status", "params": {}}).encode()
    chunked = b"".join(
        f"{len(piece):x}\r\n".encode() + piece + b"\r\n" for piece in (body[:10], body[10:])
    )
    answer = _request(served, chunked + b"0\r\n\r\n", "Transfer-Encoding: chunked\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b'"id":7' in answer and b"summaries_pending" in answer
    assert answer.count(b"HTTP/1.1") == 1  # the chunks were not read as a second request


def test_slow_silent_and_malformed_requests_are_cut_off_and_the_server_serves_on(
    served: Served,
) -> None:
    began = time.monotonic()
    short = _request(served, b'{"jsonrpc": "2.0"', "Content-Length: 100\r\n")
    assert short.startswith(b"HTTP/1.1 408"), short
    assert b"did not arrive within 1.5 seconds" in short
    assert time.monotonic() - began < 8
    # Headers that never end: the connection is closed, not kept for ever.
    began = time.monotonic()
    assert _raw(served.port, b"POST / HTTP/1.1\r\nHost: x\r\n") == b""
    assert time.monotonic() - began < 8
    # A refused request whose client goes on trickling its body: closed, not kept.
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", served.port), timeout=15) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n")
        sock.sendall(b"Content-Length: 100000\r\n\r\n{")
        closed = False
        while time.monotonic() - began < 12:
            try:
                sock.sendall(b" ")
                time.sleep(0.3)
                sock.setblocking(False)
                try:
                    if sock.recv(65536) == b"":
                        closed = True
                        break
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
            except OSError:
                closed = True
                break
    assert closed and time.monotonic() - began < 8
    # A negative or unreadable length: a 400, at once.
    for bad in ("Content-Length: -1\r\n", "Content-Length: lots\r\n"):
        answer = _request(served, b"{}", bad)
        assert answer.startswith(b"HTTP/1.1 400"), (bad, answer)
    # A body over the limit is refused from its declared length, unread.
    huge = _request(served, b"", f"Content-Length: {10**12}\r\n")
    assert huge.startswith(b"HTTP/1.1 413") and b"max_line_bytes" in huge
    client = ServeClient.http(served.url, served.token)
    assert client.after_turn("s", turn(0), token_budget=700)["inserted"] == 2
    err = served.stop()
    assert "Traceback" not in err


def test_clients_that_vanish_leave_no_traceback_and_idle_connections_cost_no_threads(
    served: Served,
) -> None:
    client = ServeClient.http(served.url, served.token)
    client.status()
    before = _threads(served.process.pid)
    idle = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(300)]
    try:
        # Half of them say half a request and stop; the server answers others meanwhile.
        for sock in idle[::2]:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
        for i in range(3):
            assert client.after_turn("busy", turn(i), token_budget=700)["inserted"] == 2
        during = _threads(served.process.pid)
        assert during - before <= 4, (before, during)  # no thread per connection
    finally:
        for sock in idle:
            sock.close()
    # Clients that send a whole request and go before the answer.
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "status", "params": {}}).encode()
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", served.port)) as sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                + served.token.encode()
                + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
    # And clients that go in the middle of their body.
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", served.port)) as sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                + served.token.encode()
                + b'\r\nContent-Length: 100\r\n\r\n{"jsonrpc": '
            )
    assert client.status("busy")["messages"] == 6
    err = served.stop()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert "Exception in ASGI" not in err, err


def test_health_and_metrics_say_what_the_server_did(served: Served) -> None:
    base = served.url.rstrip("/")
    with urllib.request.urlopen(f"{base}/healthz") as response:  # no token needed
        health = json.loads(response.read())
    assert health == {"status": "ok", "store": health["store"]}
    assert health["store"] in ("sqlite", "postgresql")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/metrics")
    assert refused.value.code == 401

    client = ServeClient.http(served.url, served.token)
    for i in range(30):
        client.after_turn("m", turn(i), token_budget=700)
    client.wait_for_compaction(60)
    with pytest.raises(ServeError):
        client.call("no_such_method_" + "x" * 40)
    with pytest.raises(ServeError):
        ServeClient.http(served.url, "a-wrong-token-of-enough-length").status()

    def metrics() -> tuple[str, dict[str, float]]:
        asked = urllib.request.Request(
            f"{base}/metrics", headers={"Authorization": f"Bearer {served.token}"}
        )
        with urllib.request.urlopen(asked) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            page = response.read().decode()
        return page, {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in page.splitlines()
            if line and not line.startswith("#")
        }

    # The queue empties once the work the turns started (compactions and what follows them)
    # is done.
    deadline = time.monotonic() + 30
    page, figures = metrics()
    while figures["lossless_background_queue_depth"] and time.monotonic() < deadline:
        time.sleep(0.2)
        page, figures = metrics()
    assert figures['lossless_requests_total{method="after_turn",outcome="ok"}'] == 30
    assert figures["lossless_turns_total"] == 30
    assert figures['lossless_request_seconds_count{method="after_turn"}'] == 30
    assert figures['lossless_requests_total{method="unknown",outcome="error"}'] == 1
    assert figures['lossless_errors_total{code="-32601"}'] == 1
    assert figures['lossless_http_refused_total{reason="token"}'] >= 2
    assert figures['lossless_background_run_seconds_count{kind="compact"}'] >= 1
    assert figures['lossless_background_run_seconds_sum{kind="compact"}'] > 0
    assert figures["lossless_background_queue_depth"] == 0
    assert "no_such_method" not in page  # a client's made-up name is never a label
    served.stop()


def test_a_unix_socket_only_its_owner_may_use(db: str, tmp_path: Path) -> None:
    path = tmp_path / "lossless.sock"
    path.write_text("not a socket")
    refused = subprocess.run(
        [sys.executable, "-m", "lossless", "--db", db, "serve", "--unix", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")},
    )
    assert refused.returncode == 1 and "not a socket" in refused.stderr, refused
    assert path.read_text() == "not a socket"  # left as it was
    path.unlink()
    # A socket file a server left behind is replaced.
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))
    served = _serve(db, tmp_path, "--unix", str(path))
    try:
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        client = ServeClient.unix(path, served.token)
        assert client.after_turn("u", turn(0), token_budget=700)["inserted"] == 2
        with pytest.raises(ServeError) as wrong:
            ServeClient.unix(path, "a-wrong-token-of-enough-length").status()
        assert wrong.value.code == 401
        # A second server on the same path is refused while the first listens.
        second = subprocess.run(
            [sys.executable, "-m", "lossless", "--db", db, "serve", "--unix", str(path)],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")},
        )
        assert second.returncode == 1 and "another server listens there" in second.stderr
        assert client.status("u")["messages"] == 2
    finally:
        served.stop()
    assert not path.exists()  # removed on the way out


def test_requests_under_way_finish_when_the_server_is_told_to_stop(served: Served) -> None:
    client = ServeClient.http(served.url, served.token)
    answers: list[int] = []

    def host(i: int) -> None:
        answers.append(client.after_turn(f"h{i}", turn(i), token_budget=700)["inserted"])

    threads = [threading.Thread(target=host, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    err = served.stop()
    for thread in threads:
        thread.join(30)
    # Each request either finished (its answer came) or was never taken (connection refused):
    # none was cut in the middle, and the store holds exactly the answered turns.
    assert "Traceback" not in err
    assert all(a == 2 for a in answers)


def test_two_servers_over_one_store_keep_every_turn_once_and_compact_it_once(
    db: str, tmp_path: Path
) -> None:
    """Two ``serve --http`` processes over the same store (a SQLite file, or a PostgreSQL
    schema), hosts writing the same sessions through both at once: every message stored
    once, and each conversation's active context covers each message exactly once (two
    compactions of one stretch would show it twice, a lost one not at all)."""
    from lossless import Config, Engine

    first = _serve(db, tmp_path / "a", "--http", "127.0.0.1:0")
    second = _serve(db, tmp_path / "b", "--http", "127.0.0.1:0")
    sessions, turns_each = 4, 16
    failures: list[str] = []

    def host(session: int, server: Served, parity: int) -> None:
        client = ServeClient.http(server.url, server.token)
        try:
            for t in range(parity, turns_each, 2):
                said = turn(t)
                said[0]["content"] = f"[s{session} t{t}] {said[0]['content']}"
                client.after_turn(f"shared-{session}", said, token_budget=700)
        except Exception as exc:
            failures.append(f"session {session}: {type(exc).__name__}: {exc}")

    threads = [
        threading.Thread(target=host, args=(s, server, parity))
        for s in range(sessions)
        for server, parity in ((first, 0), (second, 1))
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
        assert failures == []
        for server in (first, second):
            ServeClient.http(server.url, server.token).wait_for_compaction(120)
    finally:
        for server in (first, second):
            if server.process.poll() is None:
                assert "Traceback" not in server.stop()

    with Engine.open(db, config=Config()) as engine:
        assert engine.check() == []
        compacted = 0
        for s in range(sessions):
            stored = engine.messages(f"shared-{s}")
            asked = sorted(m.content.split("]")[0] for m in stored if m.role == "user")
            assert asked == sorted(f"[s{s} t{t}" for t in range(turns_each))  # each once
            assert len(stored) == 2 * turns_each

            def below(summary_id: str) -> list[int]:
                summaries, messages = engine.store.summary_sources(summary_id)
                return messages + [m for p in summaries for m in below(p)]

            shown: list[int] = []
            for item in engine.context(f"shared-{s}"):
                if item.summary_id is not None:
                    compacted += 1
                    shown += below(item.summary_id)
                else:
                    assert item.message_id is not None
                    shown.append(item.message_id)
            assert sorted(shown) == sorted(m.message_id for m in stored)
        assert compacted > 0  # the turns were compacted, through either server
