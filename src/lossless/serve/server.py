"""``lossless serve``: the engine behind JSON-RPC 2.0, over stdio or loopback HTTP.

One :class:`Dispatcher` answers requests for both transports. Each request runs in a worker
thread, so a slow one (a compaction, a summarizer call) never holds up another session;
requests that name the same session run one at a time, in the order they arrived. Background
compaction runs in the engine's own worker and never blocks a request. A request that is not
JSON, not JSON-RPC, names no known method or has params that do not fit gets a JSON-RPC error
that says what would; a failure inside a method is logged (stderr) and answered with an
internal error, and the server goes on.

* :func:`serve_stdio`: newline-delimited JSON on stdin and stdout, for a host that spawns the
  server as its child. stdout carries only responses (anything else printed goes to stderr).
  When stdin closes, the requests under way finish and their answers are written; the caller
  then closes the engine, which finishes background compaction.
* :func:`serve_http`: ``POST /`` with a request (or a batch) as the body, on a loopback address
  unless told otherwise, every request with ``Authorization: Bearer TOKEN``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson

from ..engine import Engine
from ..errors import (
    ArgumentError,
    ConflictError,
    LosslessError,
    NotFoundError,
    StoreError,
    UnknownShapeError,
)
from ..ingest.transcripts import over_limit
from ..jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    envelope_problem,
)
from ..jsonrpc import error as _error
from .methods import METHODS, discover

__all__ = [
    "MAX_REQUEST_BYTES",
    "Dispatcher",
    "serve_http",
    "serve_stdio",
]

logger = logging.getLogger(__name__)

#: The largest request (a line on stdio, a body over HTTP) by default: a batch of big
#: messages fits. The setting ``max_line_bytes`` changes it.
MAX_REQUEST_BYTES = 64 * 1024 * 1024

#: A lossless error by its class: the code a client can branch on (data.type names it too).
ERROR_CODES: dict[type[LosslessError], int] = {
    NotFoundError: -32001,
    ConflictError: -32002,  # the store changed underneath: retrying is safe
    StoreError: -32003,
    UnknownShapeError: -32004,
}
LOSSLESS_ERROR = -32000


class Dispatcher:
    """Answers JSON-RPC requests over one engine (see the module docstring)."""

    def __init__(
        self, engine: Engine, *, workers: int = 8, transcript_roots: Sequence[Path] | None = None
    ) -> None:
        self.engine = engine
        #: Where ``bootstrap`` may read a transcript (``None``: anywhere; stdio's client is the
        #: process that started the server, with the same rights).
        self.transcript_roots = transcript_roots
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="lossless-serve")
        # One FIFO lock per session with requests waiting or running (asyncio.Lock wakes
        # waiters in arrival order), dropped when none is left.
        self._sessions: dict[str, tuple[asyncio.Lock, int]] = {}
        self._running: set[asyncio.Task[Any]] = set()

    # --- framing -------------------------------------------------------------------------

    async def answer(self, raw: bytes | str) -> bytes | None:
        """The response to one request or batch, serialized (``None``: only notifications)."""
        try:
            payload = _load(raw)
        except ValueError as exc:
            return _dump(
                _error(
                    None,
                    PARSE_ERROR,
                    f"the request is not JSON ({exc}); send one JSON-RPC 2.0 request (or a"
                    " batch array) per line",
                )
            )
        if isinstance(payload, list):
            if not payload:
                return _dump(_error(None, INVALID_REQUEST, "an empty batch: send at least one"))
            replies = await asyncio.gather(*(self.one(r) for r in payload))
            kept = [r for r in replies if r is not None]
            return _dump(kept) if kept else None
        reply = await self.one(payload)
        return None if reply is None else _dump(reply)

    async def one(self, request: Any) -> dict[str, Any] | None:
        """The response to one request (``None`` for a notification: a request without id)."""
        problem = envelope_problem(request)
        if problem is not None:
            return _error(*problem)
        rid = request.get("id")
        reply = await self._call(rid, request["method"], request.get("params", {}))
        return None if "id" not in request else reply

    # --- calls ---------------------------------------------------------------------------

    async def _call(self, rid: Any, name: str, params: Any) -> dict[str, Any]:
        if name == "rpc.discover":
            return {"jsonrpc": "2.0", "id": rid, "result": discover()}
        method = METHODS.get(name)
        if method is None:
            return _error(
                rid,
                METHOD_NOT_FOUND,
                f"no method {name!r}; the methods are {', '.join(METHODS)} (rpc.discover"
                " describes them)",
            )
        try:
            arguments = method.check(params)
            if name == "bootstrap" and self.transcript_roots is not None:
                readable(arguments.get("transcript"), self.transcript_roots)
        except ArgumentError as exc:
            return _error(rid, INVALID_PARAMS, str(exc))
        key = arguments.get(method.ordered_by) if method.ordered_by else None
        try:
            result = await self._ordered(
                None if key is None else str(key), lambda: method.run(self.engine, arguments)
            )
        except ArgumentError as exc:
            return _error(rid, INVALID_PARAMS, str(exc))
        except LosslessError as exc:
            code = next((c for t, c in ERROR_CODES.items() if isinstance(exc, t)), LOSSLESS_ERROR)
            return _error(rid, code, str(exc), {"type": type(exc).__name__})
        except Exception as exc:  # the server stays up; the details go to its log
            logger.exception("%s failed", name)
            return _error(
                rid,
                INTERNAL_ERROR,
                f"{name} failed inside the server ({type(exc).__name__}: {exc}); nothing of it"
                " was half-written (each write is one transaction); the server's stderr has"
                " the details",
            )
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    async def _ordered(self, key: str | None, work: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        if key is None:
            return await loop.run_in_executor(self._pool, work)
        lock, users = self._sessions.get(key) or (asyncio.Lock(), 0)
        self._sessions[key] = (lock, users + 1)
        try:
            async with lock:
                return await loop.run_in_executor(self._pool, work)
        finally:
            lock, users = self._sessions[key]
            if users == 1:
                del self._sessions[key]
            else:
                self._sessions[key] = (lock, users - 1)

    def start(self, raw: bytes, reply: Callable[[bytes], None]) -> None:
        """Answer *raw* in a task of its own; *reply* gets the response (in the loop)."""

        async def run() -> None:
            out = await self.answer(raw)
            if out is not None:
                reply(out)

        task = asyncio.get_running_loop().create_task(run())
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def drain(self) -> None:
        """Wait until every request under way is answered."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    def close(self) -> None:
        """Stop the worker threads (after :meth:`drain`); the engine stays the caller's."""
        self._pool.shutdown(wait=True)


def _load(raw: bytes | str) -> Any:
    """A request decoded: orjson, or the standard library for what orjson refuses and JSON
    allows (an escaped lone surrogate, an integer past 64 bits)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise ValueError(str(exc)) from None


def _dump(value: Any) -> bytes:
    """A reply encoded: orjson, or the standard library (ASCII-escaped) for text orjson cannot
    write, such as a stored lone surrogate or an integer past 64 bits."""
    try:
        return orjson.dumps(value, default=str)
    except TypeError:
        return json.dumps(value, default=str).encode()


def _stop_on_signals(loop: asyncio.AbstractEventLoop) -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (where the loop can take signal handlers)."""
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Not on the main thread (an embedding host's), or no signals here: stdin or the
        # caller stops it instead.
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


# --- stdio ---------------------------------------------------------------------------------


def serve_stdio(engine: Engine, *, workers: int = 8) -> None:
    """Answer newline-delimited JSON-RPC on stdin/stdout until stdin closes (or SIGTERM)."""
    # The protocol owns the real stdout; anything else printed goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        asyncio.run(_stdio(engine, out, workers))
    finally:
        out.close()


async def _stdio(engine: Engine, out: Any, workers: int) -> None:
    loop = asyncio.get_running_loop()
    dispatcher = Dispatcher(engine, workers=workers)
    limit = engine.services.config.max_line_bytes
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    await _connect_stdin(loop, reader)
    stop = _stop_on_signals(loop)

    def write(data: bytes) -> None:
        try:
            out.write(data + b"\n")
        except BrokenPipeError:  # the host went away; the work itself is done
            stop.set()

    try:
        while not stop.is_set():
            line = await _next_line(reader, stop, write, limit)
            if line is None:
                break
            if line.strip():
                dispatcher.start(line, write)
        await dispatcher.drain()
    finally:
        dispatcher.close()


async def _connect_stdin(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader) -> None:
    """Feed *reader* from stdin: a pipe or socket (a host) through the loop; a file (``serve
    --stdio < requests.jsonl``) or a terminal, which the loop cannot watch, from a thread."""
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    mode = os.fstat(stdin.fileno()).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), stdin)
        return

    def pump() -> None:
        with stdin:
            while chunk := stdin.read(1 << 16):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=pump, name="lossless-stdin", daemon=True).start()


async def _next_line(
    reader: asyncio.StreamReader, stop: asyncio.Event, write: Callable[[bytes], None], limit: int
) -> bytes | None:
    """The next line of stdin (``None`` at its end or when told to stop); a line over the
    limit is answered with an error and skipped."""
    reading = asyncio.ensure_future(reader.readuntil(b"\n"))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not reading.done():
        reading.cancel()
        return None
    stopping.cancel()
    try:
        return reading.result()
    except asyncio.IncompleteReadError as exc:  # the last line, without its newline
        return exc.partial or None
    except asyncio.LimitOverrunError as exc:
        size = len(await reader.readexactly(exc.consumed))  # drop what was read of it
        while True:
            try:
                size += len(await reader.readuntil(b"\n"))
                break
            except asyncio.LimitOverrunError as more:
                size += len(await reader.readexactly(more.consumed))
            except asyncio.IncompleteReadError as end:
                size += len(end.partial)
                break
        said = over_limit("a request line", size, limit, "max_line_bytes")
        write(
            _dump(
                _error(
                    None,
                    INVALID_REQUEST,
                    f"{said} was skipped; send large batches as several requests",
                )
            )
        )
        return b""


# --- HTTP ----------------------------------------------------------------------------------


def serve_http(
    engine: Engine,
    *,
    host: str,
    port: int,
    token: str,
    workers: int = 8,
    ready: Callable[[int], None] | None = None,
    transcript_roots: Sequence[Path] = (),
) -> None:
    """Answer JSON-RPC over HTTP (``POST /``) until SIGINT or SIGTERM. *ready* gets the
    port once the socket listens (useful with port 0). ``bootstrap`` reads transcripts only
    under *transcript_roots* (none by default; ``lossless serve`` gives the installed hosts'
    transcript folders)."""
    asyncio.run(_http(engine, host, port, token, workers, ready, list(transcript_roots)))


def readable(transcript: Any, roots: Sequence[Path]) -> None:
    """Refuse, saying why, a transcript *bootstrap* was asked to read that is not under
    *roots* once every link in its path is followed (a link inside a root that points out
    of it is refused too)."""
    if transcript is None:
        return
    path = Path(str(transcript)).expanduser()
    try:
        real = path.resolve(strict=False)
        inside = any(real.is_relative_to(root.expanduser().resolve()) for root in roots)
    except (OSError, RuntimeError):  # a link loop
        inside = False
    if not inside:
        where = ", ".join(str(r) for r in roots) or "none"
        raise ArgumentError(
            f"bootstrap reads transcripts only under the server's transcript roots ({where});"
            f" {path} is not under them once its links are followed. Start the server with"
            " --transcript-root FOLDER to allow a folder"
        )


class _HttpServer(ThreadingHTTPServer):
    """A thread per connection, and a listen queue deep enough for many hosts connecting
    at once: with the standard library's 5, the sixth simultaneous connection was reset."""

    daemon_threads = True
    request_queue_size = socket.SOMAXCONN


class _HttpServer6(_HttpServer):
    address_family = socket.AF_INET6


def _listen(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> _HttpServer:
    """The server listening on *host*:*port* (an IPv6 address too), or a :class:`LosslessError`
    saying in one line why it cannot."""
    kind = _HttpServer6 if ":" in host else _HttpServer
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        return kind((host, port), handler)
    except socket.gaierror as exc:
        raise LosslessError(
            f"cannot listen on {where}: {host!r} is not an address of this machine"
            f" ({exc.strerror}); use 127.0.0.1 or ::1"
        ) from exc
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            advice = "another process listens there; pick another port (port 0 picks a free one)"
        elif exc.errno == errno.EACCES:
            advice = "ports below 1024 need privileges; pick a port above 1024"
        else:
            advice = "check the address"
        raise LosslessError(f"cannot listen on {where}: {exc.strerror}; {advice}") from exc


async def _http(
    engine: Engine,
    host: str,
    port: int,
    token: str,
    workers: int,
    ready: Callable[[int], None] | None,
    roots: Sequence[Path],
) -> None:
    loop = asyncio.get_running_loop()
    dispatcher = Dispatcher(engine, workers=workers, transcript_roots=roots)
    expected = f"Bearer {token}".encode()
    limit = engine.services.config.max_line_bytes

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "lossless-serve"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s " + format, self.address_string(), *args)

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if status == 401:
                self.send_header("WWW-Authenticate", "Bearer")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(
                405,
                b'{"error": "POST a JSON-RPC 2.0 request to /; rpc.discover lists the methods"}',
            )

        def do_POST(self) -> None:
            given = (self.headers.get("Authorization") or "").encode()
            if not hmac.compare_digest(given, expected):
                self._send(401, b'{"error": "missing or wrong bearer token"}')
                return
            if self.path not in ("/", "/rpc"):
                self._send(404, b'{"error": "POST JSON-RPC requests to /"}')
                return
            try:
                length = int(self.headers.get("Content-Length") or "")
            except ValueError:
                self._send(411, b'{"error": "send the body with a Content-Length"}')
                return
            if length > limit:
                said = over_limit("the request", length, limit, "max_line_bytes")
                self._send(413, json.dumps({"error": f"{said}; split the batch"}).encode())
                self.close_connection = True
                return
            body = self.rfile.read(length)
            answered = asyncio.run_coroutine_threadsafe(dispatcher.answer(body), loop).result()
            if answered is None:
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._send(200, answered)

    server = _listen(host, port, Handler)
    thread = threading.Thread(target=server.serve_forever, name="lossless-http", daemon=True)
    thread.start()
    if ready is not None:
        ready(server.server_address[1])
    stop = _stop_on_signals(loop)
    try:
        await stop.wait()
    finally:
        await loop.run_in_executor(None, server.shutdown)
        server.server_close()
        await dispatcher.drain()
        dispatcher.close()
