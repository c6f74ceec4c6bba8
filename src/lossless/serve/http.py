"""``lossless serve --http``: the JSON-RPC endpoint on uvicorn (an ASGI server) and Starlette.

The server is asyncio throughout: a connection costs a few kilobytes, not a thread (the
requests themselves run in the :class:`~lossless.serve.server.Dispatcher`'s bounded pool).
h11 reads HTTP/1.1 as the standard says (chunked bodies, keep-alive; a malformed request or
length gets a 400 and the connection is closed), and a client that goes away mid-answer
is a closed connection, not a traceback. Around that, lossless sets the limits a shared
server needs:

* every request must arrive whole, headers and body, within :data:`REQUEST_SECONDS` (408,
  or the connection closed when the headers never come); an idle kept-alive connection is
  closed after :data:`IDLE_SECONDS`;
* a body over ``max_line_bytes`` gets a 413 before it is read; past
  :data:`MAX_CONNECTIONS` open connections, a new request gets a 503;
* ``GET /healthz`` answers without a token (200 while serving, 503 while stopping);
  ``GET /metrics`` (with the token) gives Prometheus' text format: requests by method and
  outcome, their time, turns, requests in flight, refusals, the background queue's depth
  and each kind of background work's runs, time and failures;
* on SIGTERM or SIGINT it stops listening, lets the requests under way finish (at most
  :data:`GRACE_SECONDS`), then the caller closes the engine, which finishes the queued
  compactions (``lossless serve`` records what it could not finish as due).

It listens on a TCP address (IPv4 or IPv6) or a unix socket, made by lossless itself so that
a busy port or an unknown address is one line of error.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import logging
import os
import queue
import socket
import stat
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..access import OWNER, Caller, token_id_of
from ..engine import Engine
from ..errors import LosslessError
from ..ingest.transcripts import over_limit
from .methods import METHODS
from .server import Dispatcher, _stop_on_signals

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["Limits", "Metrics", "listen", "listen_unix", "serve_http"]

logger = logging.getLogger(__name__)

#: A request's headers and body must arrive within this many seconds.
REQUEST_SECONDS = 30.0
#: A kept-alive connection with no request coming is closed after this many seconds.
IDLE_SECONDS = 5.0
#: Open connections beyond which a new request is answered 503 (try again).
MAX_CONNECTIONS = 2048
#: On SIGTERM, how long the requests under way may take to finish.
GRACE_SECONDS = 30
#: Failed authentications the audit log lists one by one in a minute (the rest are counted).
FAILED_LOGINS_LOGGED = 60


@dataclass(frozen=True)
class Limits:
    """The HTTP server's limits (``lossless serve --request-timeout``, ``--idle-timeout``,
    ``--max-connections``)."""

    request_seconds: float = REQUEST_SECONDS
    idle_seconds: float = IDLE_SECONDS
    max_connections: int = MAX_CONNECTIONS


def serve_http(
    engine: Engine,
    *,
    host: str,
    port: int,
    token: str,
    workers: int = 8,
    ready: Callable[[int], None] | None = None,
    transcript_roots: Sequence[Path] = (),
    unix_socket: Path | None = None,
    limits: Limits | None = None,
) -> None:
    """Answer JSON-RPC over HTTP (``POST /``) until SIGINT or SIGTERM, on *host*:*port* or,
    given, the unix socket *unix_socket*. *ready* gets the port once the socket listens
    (useful with port 0; 0 for a unix socket). ``bootstrap`` reads transcripts only under
    *transcript_roots* (none by default; ``lossless serve`` gives the installed hosts'
    transcript folders). *limits*: the time and connection limits (:class:`Limits`)."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401  (the extra's presence, said before anything listens)
    except ImportError as exc:
        raise LosslessError(
            "lossless serve --http needs uvicorn and starlette: pip install 'lossless[http]'"
        ) from exc
    sock = listen(host, port) if unix_socket is None else listen_unix(unix_socket)
    try:
        asyncio.run(
            _serve(engine, sock, token, workers, ready, list(transcript_roots), limits or Limits())
        )
    finally:
        sock.close()
        if unix_socket is not None:
            with contextlib.suppress(OSError):
                unix_socket.unlink()


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on *host*:*port* (an IPv6 address too), or a :class:`LosslessError`
    saying in one line why it cannot."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
        return socket.create_server(infos[0][4][:2], family=family, backlog=socket.SOMAXCONN)
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
        elif exc.errno == errno.EADDRNOTAVAIL:
            advice = f"{host!r} is not an address of this machine; use 127.0.0.1 or ::1"
        else:
            advice = "check the address"
        raise LosslessError(f"cannot listen on {where}: {exc.strerror}; {advice}") from exc


def listen_unix(path: Path) -> socket.socket:
    """A unix socket listening at *path*, only its owner may connect to (mode 600). A socket
    file left by a server that is gone is replaced; anything else there is refused."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        found = None
    if found is not None:
        if not stat.S_ISSOCK(found.st_mode):
            raise LosslessError(f"cannot listen on {path}: something that is not a socket is there")
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
            except ConnectionRefusedError:
                path.unlink(missing_ok=True)  # left by a server that is gone
            except OSError as exc:
                raise LosslessError(
                    f"cannot listen on {path}: a socket is there this user cannot reach"
                    f" ({exc.strerror or exc}); pick another path"
                ) from exc
            else:
                raise LosslessError(f"cannot listen on {path}: another server listens there")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        # Connecting takes write permission: with the usual umask nobody else has it between
        # the bind and this.
        os.chmod(path, 0o600)
    except OSError as exc:
        sock.close()
        raise LosslessError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    sock.listen(socket.SOMAXCONN)
    return sock


class Metrics:
    """What ``GET /metrics`` reports: counted as requests are answered."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.answered: Counter[tuple[str, str]] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.errors: Counter[int] = Counter()
        self.refused: Counter[str] = Counter()
        self.in_flight = 0

    def observe(self, method: str, seconds: float, code: int | None) -> None:
        """A request answered (the dispatcher's hook). A method the server does not have is
        counted as ``unknown``: a client's made-up names never become labels."""
        name = method if method in METHODS or method == "rpc.discover" else "unknown"
        self.answered[(name, "ok" if code is None else "error")] += 1
        self.seconds[name] += seconds
        if code is not None:
            self.errors[code] += 1

    def render(self) -> str:
        """The figures in Prometheus' text exposition format."""
        out: list[str] = []

        def family(name: str, kind: str, about: str, samples: list[_Sample]) -> None:
            out.append(f"# HELP {name} {about}")
            out.append(f"# TYPE {name} {kind}")
            for suffix, labels, value in samples:
                shown = ",".join(f'{k}="{v}"' for k, v in labels)
                out.append(
                    f"{name}{suffix}{{{shown}}} {_number(value)}"
                    if shown
                    else f"{name}{suffix} {_number(value)}"
                )

        def summary(key: str, sums: dict[str, float], counts: dict[str, int]) -> list[_Sample]:
            return [
                sample
                for k in sorted(counts)
                for sample in (("_sum", ((key, k),), sums[k]), ("_count", ((key, k),), counts[k]))
            ]

        calls: Counter[str] = Counter()
        for (method, _), n in self.answered.items():
            calls[method] += n
        background = self.engine.services.background
        runs = background.runs()
        family(
            "lossless_requests_total",
            "counter",
            "JSON-RPC requests answered, by method and outcome.",
            [
                ("", (("method", m), ("outcome", o)), n)
                for (m, o), n in sorted(self.answered.items())
            ],
        )
        family(
            "lossless_request_seconds",
            "summary",
            "Time to answer a JSON-RPC request, by method.",
            summary("method", self.seconds, calls),
        )
        family(
            "lossless_turns_total",
            "counter",
            "Turns stored (after_turn requests answered without an error).",
            [("", (), self.answered[("after_turn", "ok")])],
        )
        family(
            "lossless_errors_total",
            "counter",
            "JSON-RPC error answers, by error code.",
            [("", (("code", str(c)),), n) for c, n in sorted(self.errors.items())],
        )
        family(
            "lossless_requests_in_flight",
            "gauge",
            "HTTP requests being answered now.",
            [("", (), self.in_flight)],
        )
        family(
            "lossless_http_refused_total",
            "counter",
            "HTTP requests refused before any method ran, by reason.",
            [("", (("reason", r),), n) for r, n in sorted(self.refused.items())],
        )
        family(
            "lossless_background_queue_depth",
            "gauge",
            "Background runs (compactions, summaries) queued or going.",
            [("", (), background.depth())],
        )
        family(
            "lossless_background_run_seconds",
            "summary",
            "Time background work took (compact: a compaction's latency), by kind.",
            summary("kind", {k: r[1] for k, r in runs.items()}, {k: r[0] for k, r in runs.items()}),
        )
        family(
            "lossless_background_failures_total",
            "counter",
            "Background runs that failed (logged with their reason), by kind.",
            [("", (("kind", k),), runs[k][2]) for k in sorted(runs)],
        )
        return "\n".join(out) + "\n"


#: One sample of a metric family: the name's suffix, its labels and its value.
_Sample = tuple[str, tuple[tuple[str, str], ...], float]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6f}"


class _Refused(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class _FailedLogins:
    """Failed authentications into the audit log, at most :data:`FAILED_LOGINS_LOGGED` a
    minute (the rest of a flood is one line, with its count, written when its minute ends),
    by one thread of its own: the event loop never waits on the store, and a flood costs no
    threads."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._window = 0.0
        self._logged = 0
        self._dropped = 0
        self._lines: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    def note(self, actor: str, where: str) -> None:
        """Count a refused request of *actor* (a token id or ``unknown``) from *where*."""
        with self._lock:
            self._roll(time.monotonic())
            if self._logged >= FAILED_LOGINS_LOGGED:
                self._dropped += 1
            else:
                self._logged += 1
                self._lines.put((actor, f"from {where}"))
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write, name="lossless-audit", daemon=True
                )
                self._writer.start()

    def _roll(self, clock: float) -> None:
        """A new minute: the count of the last one's unlisted refusals goes in a line."""
        if clock - self._window < 60.0:
            return
        if self._dropped:
            self._lines.put(
                ("unknown", f"{self._dropped} more refused in that minute, not listed one by one")
            )
        self._window, self._logged, self._dropped = clock, 0, 0

    def _write(self) -> None:
        while True:
            try:
                actor, detail = self._lines.get(timeout=5.0)
            except queue.Empty:
                with self._lock:
                    self._roll(time.monotonic())
                continue
            self.engine.record(
                actor,
                "authenticate",
                namespace="-",  # no namespace: nobody was let in
                outcome="refused",
                detail=detail,
            )


def _app(
    dispatcher: Dispatcher,
    token: str,
    limit: int,
    seconds: float,
    metrics: Metrics,
    stopping: asyncio.Event,
) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.responses import Response as Plain
    from starlette.routing import Route

    expected = f"Bearer {token}".encode()
    tokens = dispatcher.engine.token_check()
    failures = _FailedLogins(dispatcher.engine)

    async def caller_of(request: Request) -> Caller | None:
        """The server's owner (its own token), an access token's holder, or ``None``."""
        header = request.headers.get("authorization") or ""
        if hmac.compare_digest(header.encode(), expected):
            return OWNER
        scheme, _, presented = header.partition(" ")
        found = None
        if scheme.lower() == "bearer" and presented.startswith("tok_"):
            # a store read and, once per token, a password hash: off the event loop
            found = await dispatcher.blocking(tokens.caller, presented.strip())
        if found is None:
            where = request.client.host if request.client else "?"
            failures.note(token_id_of(presented.strip()), where)
        return found

    async def authorized(request: Request) -> bool:
        return (await caller_of(request)) is OWNER

    def refused(status: int, message: str, reason: str) -> Response:
        # The body was not read (or not whole): the connection is not kept for another request.
        metrics.refused[reason] += 1
        headers = {"Connection": "close"}
        if status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    async def body_of(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            said = over_limit("the request", int(declared), limit, "max_line_bytes")
            raise _Refused(413, "too_large", f"{said}; split the batch")
        chunks: list[bytes] = []
        size = 0

        async def read() -> None:
            nonlocal size
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    said = over_limit("the request", size, limit, "max_line_bytes")
                    raise _Refused(413, "too_large", f"{said}; split the batch")
                chunks.append(chunk)

        try:
            await asyncio.wait_for(read(), seconds)
        except ClientDisconnect:
            raise _Refused(400, "gone", "the client left before its request was whole") from None
        except TimeoutError:
            raise _Refused(
                408, "too_slow", f"the request's body did not arrive within {seconds:g} seconds"
            ) from None
        return b"".join(chunks)

    async def rpc(request: Request) -> Response:
        who = await caller_of(request)
        if who is None:
            return refused(401, "missing or wrong bearer token", "token")
        try:
            body = await body_of(request)
        except _Refused as exc:
            return refused(exc.status, str(exc), exc.reason)
        metrics.in_flight += 1
        try:
            answered = await dispatcher.answer(body, who)
        finally:
            metrics.in_flight -= 1
        if answered is None:
            return Plain(status_code=204)
        return Plain(answered, media_type="application/json")

    async def not_post(request: Request) -> Response:
        return JSONResponse(
            {"error": "POST a JSON-RPC 2.0 request to /; rpc.discover lists the methods"},
            status_code=405,
            headers={"Connection": "close"},
        )

    async def healthz(request: Request) -> Response:
        if stopping.is_set():
            return JSONResponse({"status": "stopping"}, status_code=503)
        return JSONResponse({"status": "ok", "store": dispatcher.engine.store.backend})

    async def metrics_page(request: Request) -> Response:
        if not await authorized(request):  # the whole server's figures: its owner's
            return refused(401, "missing or wrong bearer token", "token")
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    async def not_found(request: Request, exc: Exception) -> Response:
        return JSONResponse(
            {"error": "POST JSON-RPC requests to /"},
            status_code=404,
            headers={"Connection": "close"},
        )

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return await not_post(request)

    return Starlette(
        routes=[
            Route("/", rpc, methods=["POST"]),
            Route("/rpc", rpc, methods=["POST"]),
            Route("/", not_post, methods=["GET", "PUT", "DELETE", "PATCH"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics_page, methods=["GET"]),
        ],
        exception_handlers={404: not_found, 405: not_allowed},
    )


def _protocol(seconds: float) -> type:
    """uvicorn's HTTP/1.1 protocol with one limit more: a connection whose request's headers
    do not all arrive within *seconds* (of its opening, or of the end of its last answer) is
    closed, so slow or silent connections never pile up."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11(H11Protocol):
        _headers_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._headers_timer is not None:
                self._headers_timer.cancel()
            self._headers_timer = self.loop.call_later(seconds, self._too_slow)

        def _too_slow(self) -> None:
            # Still waiting for a request's headers, or for the rest of a body no one reads
            # (a refused request's client trickling bytes): the connection goes. A request
            # being answered is left to the application (its own limit answers 408).
            answering = self.cycle is not None and not self.cycle.response_complete
            waiting = self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
            if waiting and not answering and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._headers_timer is not None:
                self._headers_timer.cancel()
            super().connection_lost(exc)

    return TimedH11


async def _serve(
    engine: Engine,
    sock: socket.socket,
    token: str,
    workers: int,
    ready: Callable[[int], None] | None,
    roots: Sequence[Path],
    limits: Limits,
) -> None:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # lossless stops it on its own signals
            yield

    loop = asyncio.get_running_loop()
    metrics = Metrics(engine)
    dispatcher = Dispatcher(
        engine,
        workers=workers,
        transcript_roots=roots,
        observe=metrics.observe,
        audit_writes=True,
    )
    stopping = asyncio.Event()
    config = uvicorn.Config(
        _app(
            dispatcher,
            token,
            engine.services.config.max_line_bytes,
            limits.request_seconds,
            metrics,
            stopping,
        ),
        http=_protocol(limits.request_seconds),
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=limits.idle_seconds,  # type: ignore[arg-type]  # (a float works)
        limit_concurrency=limits.max_connections,
        timeout_graceful_shutdown=GRACE_SECONDS,
    )
    server = Server(config)
    serving = loop.create_task(server.serve(sockets=[sock]))
    if ready is not None:
        address = sock.getsockname()
        ready(address[1] if isinstance(address, tuple) else 0)
    stop = _stop_on_signals(loop)
    waiting = loop.create_task(stop.wait())
    try:
        await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.set()
        server.should_exit = True
        began = time.monotonic()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await serving
        finally:
            waiting.cancel()
            await dispatcher.drain()
            dispatcher.close()
        logger.debug("HTTP server stopped in %.1f s", time.monotonic() - began)
