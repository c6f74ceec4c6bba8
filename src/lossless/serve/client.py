"""A small typed client of ``lossless serve``, over a child process's stdio or over HTTP.

    with ServeClient.spawn(["--db", "agent.db"]) as client:
        client.after_turn("s1", [{"role": "user", "content": "hello"}], token_budget=8000)
        context = client.assemble("s1", token_budget=8000)

Calls may be made from several threads at once; each waits for its own answer. A JSON-RPC
error is raised as :class:`ServeError` (its ``code``, ``message`` and ``data``).
"""

from __future__ import annotations

import http.client
import itertools
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import IO, Any

import orjson

__all__ = ["ServeClient", "ServeError"]


class ServeError(Exception):
    """The server answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (JSON-RPC error {code})")
        self.code = code
        self.message = message
        self.data = data


class ServeClient:
    """Calls the server's methods; open one with :meth:`spawn` or :meth:`http`."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    # --- transports ----------------------------------------------------------------------

    @classmethod
    def spawn(cls, args: Sequence[str] = (), *, env: dict[str, str] | None = None) -> StdioClient:
        """Start ``lossless [ARGS] serve --stdio`` as a child process and talk to it."""
        command = [sys.executable, "-m", "lossless", *args, "serve", "--stdio"]
        return StdioClient(command, env=env)

    @classmethod
    def http(cls, url: str, token: str, *, timeout: float = 120.0) -> HttpClient:
        """Talk to ``lossless serve --http`` at *url* with the server's bearer *token*."""
        return HttpClient(url, token, timeout=timeout)

    @classmethod
    def unix(
        cls, path: str | os.PathLike[str], token: str, *, timeout: float = 120.0
    ) -> UnixClient:
        """Talk to ``lossless serve --unix PATH`` with the server's bearer *token*."""
        return UnixClient(os.fspath(path), token, timeout=timeout)

    def send(self, payload: bytes) -> Any:
        """Send one request (or batch) as bytes; the decoded answer (``None``: none)."""
        raise NotImplementedError

    def call(self, method: str, **params: Any) -> Any:
        """Call *method* with *params* (``None`` values are left out); its result."""
        request = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": method,
            "params": {k: v for k, v in params.items() if v is not None},
        }
        reply = self.send(orjson.dumps(request))
        if "error" in reply:
            error = reply["error"]
            raise ServeError(error["code"], error["message"], error.get("data"))
        return reply["result"]

    def close(self) -> None:
        """Let the server go (a child process: close its stdin and wait for it)."""

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- the methods ---------------------------------------------------------------------

    def discover(self) -> dict[str, Any]:
        """Every method with its parameters' JSON Schema."""
        return dict(self.call("rpc.discover"))

    def bootstrap(
        self, session_id: str, *, transcript: str | None = None, format: str | None = None
    ) -> dict[str, Any]:
        """Start a session (reconciling a transcript first, with *transcript*)."""
        return dict(
            self.call("bootstrap", session_id=session_id, transcript=transcript, format=format)
        )

    def ingest(
        self,
        session_id: str,
        message: dict[str, Any],
        *,
        format: str | None = None,
        external_id: str | None = None,
        created_at: str | None = None,
    ) -> dict[str, Any]:
        """Store one message."""
        return dict(
            self.call(
                "ingest",
                session_id=session_id,
                message=message,
                format=format,
                external_id=external_id,
                created_at=created_at,
            )
        )

    def ingest_batch(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        format: str | None = None,
        external_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Store several messages, all or none."""
        return dict(
            self.call(
                "ingest_batch",
                session_id=session_id,
                messages=messages,
                format=format,
                external_ids=external_ids,
            )
        )

    def after_turn(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        token_budget: int | None = None,
        format: str | None = None,
    ) -> dict[str, Any]:
        """Store a turn's messages and compact if needed."""
        return dict(
            self.call(
                "after_turn",
                session_id=session_id,
                messages=messages,
                token_budget=token_budget,
                format=format,
            )
        )

    def assemble(
        self,
        session_id: str,
        *,
        token_budget: int,
        format: str | None = None,
        prompt: str | None = None,
        focus: str | None = None,
    ) -> dict[str, Any]:
        """The messages for the model's next call, within *token_budget* (for the next
        request *prompt*, sent after them, or *focus*, stored already)."""
        return dict(
            self.call(
                "assemble",
                session_id=session_id,
                token_budget=token_budget,
                format=format,
                prompt=prompt,
                focus=focus,
            )
        )

    def compact(
        self, session_id: str, *, mode: str | None = None, until: int | None = None
    ) -> dict[str, Any]:
        """Compact the session's context now."""
        return dict(self.call("compact", session_id=session_id, mode=mode, until=until))

    def grep(self, pattern: str, **options: Any) -> dict[str, Any]:
        """Search the stored history (lcm_grep's parameters)."""
        return dict(self.call("grep", pattern=pattern, **options))

    def describe(self, id: str, **options: Any) -> dict[str, Any]:
        """What an id is (lcm_describe's parameters)."""
        return dict(self.call("describe", id=id, **options))

    def expand_query(self, prompt: str, **options: Any) -> dict[str, Any]:
        """An answer from the history below the summaries (lcm_expand_query's parameters)."""
        return dict(self.call("expand_query", prompt=prompt, **options))

    def status(self, session_id: str | None = None) -> dict[str, Any]:
        """A session's state, or the store's totals."""
        return dict(self.call("status", session_id=session_id))

    def doctor(self) -> dict[str, Any]:
        """The store's integrity checks."""
        return dict(self.call("doctor"))

    def tools(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The recall tools to offer a model."""
        return list(self.call("tools", session_id=session_id)["tools"])

    def call_tool(
        self, name: str, arguments: dict[str, Any], *, session_id: str | None = None
    ) -> dict[str, Any]:
        """Run a recall tool a model called."""
        return dict(self.call("call_tool", name=name, arguments=arguments, session_id=session_id))

    def wait_for_compaction(self, timeout: int = 30) -> dict[str, Any]:
        """Wait for background compaction to finish."""
        return dict(self.call("wait_for_compaction", timeout=timeout))


class StdioClient(ServeClient):
    """A client of a server running as this process's child (``serve --stdio``)."""

    def __init__(self, command: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        super().__init__()
        self.process = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=None if env is None else {**os.environ, **env},
        )
        self._waiting: dict[Any, Future[Any]] = {}
        self._lock = threading.Lock()
        self.unmatched: list[Any] = []  # answers with no request waiting (id null: errors)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        for line in stdout:
            reply = orjson.loads(line)
            rid = _key(reply)
            with self._lock:
                waiter = self._waiting.pop(rid, None)
            if waiter is None:
                self.unmatched.append(reply)
            else:
                waiter.set_result(reply)
        with self._lock:
            for waiter in self._waiting.values():
                waiter.set_exception(ConnectionError("the server closed its output"))
            self._waiting.clear()

    def write(self, raw: bytes) -> None:
        """Write raw bytes to the server's stdin (a test's malformed line, say)."""
        stdin = self.process.stdin
        assert stdin is not None
        with self._lock:
            stdin.write(raw)
            stdin.flush()

    def send(self, payload: bytes) -> Any:
        rid = _key(orjson.loads(payload))
        waiter: Future[Any] = Future()
        with self._lock:
            self._waiting[rid] = waiter
        self.write(payload + b"\n")
        return waiter.result()

    def close(self, timeout: float = 60.0) -> None:
        """Close the server's stdin and wait for it to finish (its exit code is
        ``self.process.returncode``)."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        self.process.wait(timeout)
        self._reader.join(timeout)


def _key(message: Any) -> Any:
    """What pairs an answer with its request: the id; for a batch, its first id (the answers
    keep the requests' order)."""
    if isinstance(message, list):
        ids = [m["id"] for m in message if isinstance(m, dict) and m.get("id") is not None]
        return ("batch", ids[0]) if ids else None
    return message.get("id") if isinstance(message, dict) else None


class HttpClient(ServeClient):
    """A client of ``serve --http``."""

    def __init__(self, url: str, token: str, *, timeout: float = 120.0) -> None:
        super().__init__()
        self.url = url
        self.token = token
        self.timeout = timeout

    def send(self, payload: bytes) -> Any:
        request = urllib.request.Request(
            self.url,
            data=payload,
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            raise ServeError(exc.code, exc.read().decode("utf-8", "replace")) from None
        return orjson.loads(body) if body else None


class UnixClient(HttpClient):
    """A client of ``serve --unix PATH``: HTTP over the unix socket."""

    def __init__(self, path: str, token: str, *, timeout: float = 120.0) -> None:
        super().__init__("http://localhost/", token, timeout=timeout)
        self.path = path

    def send(self, payload: bytes) -> Any:
        connection = _UnixConnection(self.path, self.timeout)
        try:
            connection.request(
                "POST",
                "/",
                body=payload,
                headers={
                    "Content-Type": "application/json",
                    "Authorization": f"Bearer {self.token}",
                },
            )
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.status >= 400:
            raise ServeError(response.status, body.decode("utf-8", "replace"))
        return orjson.loads(body) if body else None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock
