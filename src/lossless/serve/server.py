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
* :func:`lossless.serve.http.serve_http`: ``POST /`` with a request (or a batch) as the body,
  on a loopback address (or a unix socket) unless told otherwise, every request with
  ``Authorization: Bearer TOKEN``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from ..access import OWNER, Caller
from ..engine import Engine
from ..errors import (
    AccessError,
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
from . import tenancy
from .methods import METHODS, discover

__all__ = [
    "MAX_REQUEST_BYTES",
    "Dispatcher",
    "serve_stdio",
]

logger = logging.getLogger(__name__)

R = TypeVar("R")

#: The largest request (a line on stdio, a body over HTTP) by default: a batch of big
#: messages fits. The setting ``max_line_bytes`` changes it.
MAX_REQUEST_BYTES = 64 * 1024 * 1024

#: A lossless error by its class: the code a client can branch on (data.type names it too).
ERROR_CODES: dict[type[LosslessError], int] = {
    NotFoundError: -32001,
    ConflictError: -32002,  # the store changed underneath: retrying is safe
    StoreError: -32003,
    UnknownShapeError: -32004,
    AccessError: -32005,  # the token's role or sessions do not allow it
}
LOSSLESS_ERROR = -32000


class Dispatcher:
    """Answers JSON-RPC requests over one engine (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        *,
        workers: int = 8,
        transcript_roots: Sequence[Path] | None = None,
        observe: Callable[[str, float, int | None], None] | None = None,
        audit_writes: bool = False,
    ) -> None:
        self.engine = engine
        #: Whether each write is recorded in the audit log (by the HTTP server: its callers
        #: are not the local owner's own process, as stdio's is).
        self.audit_writes = audit_writes
        #: Told of each request answered: its method, the seconds it took, and its error code
        #: (``None`` when it succeeded): what ``/metrics`` counts.
        self.observe = observe
        #: Where ``bootstrap`` may read a transcript (``None``: anywhere; stdio's client is the
        #: process that started the server, with the same rights).
        self.transcript_roots = transcript_roots
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="lossless-serve")
        # One FIFO lock per session with requests waiting or running (asyncio.Lock wakes
        # waiters in arrival order), dropped when none is left.
        self._sessions: dict[str, tuple[asyncio.Lock, int]] = {}
        self._running: set[asyncio.Task[Any]] = set()

    # --- framing -------------------------------------------------------------------------

    async def answer(self, raw: bytes | str, caller: Caller = OWNER) -> bytes | None:
        """The response to one request or batch of *caller*, serialized (``None``: only
        notifications)."""
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
            replies = await asyncio.gather(*(self.one(r, caller) for r in payload))
            kept = [r for r in replies if r is not None]
            return _dump(kept) if kept else None
        reply = await self.one(payload, caller)
        return None if reply is None else _dump(reply)

    async def one(self, request: Any, caller: Caller = OWNER) -> dict[str, Any] | None:
        """The response to one request (``None`` for a notification: a request without id)."""
        problem = envelope_problem(request)
        if problem is not None:
            return _error(*problem)
        rid = request.get("id")
        began = time.perf_counter()
        reply = await self._call(rid, request["method"], request.get("params", {}), caller)
        if self.observe is not None:
            error = reply.get("error")
            self.observe(
                request["method"], time.perf_counter() - began, error and error.get("code")
            )
        return None if "id" not in request else reply

    # --- calls ---------------------------------------------------------------------------

    async def _call(self, rid: Any, name: str, params: Any, caller: Caller) -> dict[str, Any]:
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
            arguments = tenancy.admit(caller, name, arguments)
        except ArgumentError as exc:
            return _error(rid, INVALID_PARAMS, tenancy.said(caller, str(exc)))
        except LosslessError as exc:
            if self.audit_writes and name in tenancy.WRITES:  # a write refused is recorded too
                await self.blocking(tenancy.record, self.engine, caller, name, arguments, None, exc)
            return self._refusal(rid, caller, exc)
        key = tenancy.order_key(
            caller, arguments.get(method.ordered_by) if method.ordered_by else None
        )
        audited = self.audit_writes and name in tenancy.WRITES

        def work() -> Any:
            with tenancy.acting(caller):
                failure: BaseException | None = None
                result = None
                try:
                    tenancy.check_reads(self.engine, caller, name, arguments)
                    result = method.run(self.engine, arguments)
                    return tenancy.shown(caller, result)
                except BaseException as exc:
                    failure = exc
                    raise
                finally:
                    if audited:
                        tenancy.record(self.engine, caller, name, arguments, result, failure)

        try:
            result = await self._ordered(key, work)
        except ArgumentError as exc:
            return _error(rid, INVALID_PARAMS, tenancy.said(caller, str(exc)))
        except LosslessError as exc:
            return self._refusal(rid, caller, exc)
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

    @staticmethod
    def _refusal(rid: Any, caller: Caller, exc: LosslessError) -> dict[str, Any]:
        code = next((c for t, c in ERROR_CODES.items() if isinstance(exc, t)), LOSSLESS_ERROR)
        return _error(rid, code, tenancy.said(caller, str(exc)), {"type": type(exc).__name__})

    async def blocking(self, call: Callable[..., R], *args: Any) -> R:
        """*call(*args)* in the server's worker pool: a store read off the event loop, on a
        thread that has its store connection already (a thread of its own would open one
        more, with its own page cache)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

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
