"""The MCP server: lossless's recall tools for any MCP client (``lossless mcp``).

Built on the official MCP Python SDK (``pip install 'lossless[mcp]'``), imported with this
module and nowhere in the core. :func:`build_server` returns an SDK ``MCPServer`` over an open
:class:`~lossless.engine.Engine`; hosts embed it, ``lossless mcp`` serves it over stdio or
streamable HTTP.

Three modes, fixed when the server is built:

* **store** (default): every conversation; tools take an optional ``conversation``.
* **pinned** (``conversation=``): one conversation family. Tools see nothing else, and a
  request naming another conversation, or an id from one, is refused.
* **grant** (``grant_id=``): a sub-agent's server, bound to a delegation grant. Its scope is the
  grant's conversations, every call first checks the grant is still live, ``lcm_expand`` is
  offered and ``lcm_expand_query`` is not (a sub-agent cannot start sub-agents), nor
  ``summarize_session`` (it writes a new summary version).

Besides the recall tools, every mode offers ``get_history`` (a conversation's messages, paged,
with its session summary versions on request), and the store and pinned modes
``summarize_session`` (the versioned, incremental whole-session summary).

The tools are :mod:`lossless.toolbox`'s. The engine and the scope reach them through the
server's lifespan context (a :class:`Held` scope: the toolbox's ``ToolScope``, or the way to
open it when the store does not exist yet). A call's arguments
are checked against the one declaration (:mod:`lossless.retrieval.tools`) before the SDK sees
them, so a wrong or missing argument is a tool error in lossless's words (what was wrong, what
would do), never a value coerced into another (``true`` is not conversation 1). Every
:class:`~lossless.errors.LosslessError` becomes a tool error carrying its message. Anything else
is the SDK's: logged with its traceback, reported to the client as a generic tool error, and the
server goes on.

On stdio, a guard stands between the wire and the SDK (:func:`serve`): a line that is not a
JSON-RPC message the SDK accepts — not JSON, not UTF-8, over :data:`MAX_MESSAGE_BYTES`, a wrong
``jsonrpc``, ``params`` that are not an object — is answered with a JSON-RPC error (carrying the
request's id when it has one), so a client waiting on that id is never left hanging; the SDK
alone would drop it.
"""

from __future__ import annotations

import hmac
import inspect
import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Any, cast

from . import __version__, jsonrpc, toolbox
from .engine import ConversationRef, Engine
from .errors import ArgumentError, LosslessError
from .mcp_front import INSTALL_HINT, MAX_MESSAGE_BYTES, Opening, remember_tools, take_wire
from .retrieval.tools import STORE_SCOPE, TOOLS, server_instructions
from .toolbox import MANIFEST_SHOWN, TOOLSETS
from .toolbox import ToolScope as Recall

logger = logging.getLogger(__name__)

try:
    import anyio
    import mcp_types
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.stdio import stdio_server
    from mcp_types import ListToolsResult, ToolAnnotations
    from pydantic import Field, ValidationError
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] not in ("mcp", "mcp_types", "pydantic"):
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

__all__ = [
    "INSTALL_HINT",
    "MANIFEST_SHOWN",
    "MAX_MESSAGE_BYTES",
    "TOOLSETS",
    "Held",
    "Recall",
    "build_server",
    "require_token",
    "serve",
]


class Held:
    """The server's scope, or the way to it: a store that does not exist yet (a host may start
    its MCP server before its first turn makes the store) is opened by the first tool call
    that finds it there; until then each call is refused with where the store is expected."""

    def __init__(self, recall: Recall | None, opener: Callable[[], Engine] | None = None) -> None:
        self._recall = recall
        self._opener = opener
        self._lock = threading.Lock()

    def get(self) -> Recall:
        with self._lock:
            if self._recall is None:
                assert self._opener is not None
                self._recall = Recall.of(self._opener())
            return self._recall


def _recall(ctx: Context[Held, Any]) -> Recall:
    return ctx.request_context.lifespan_context.get()


@contextmanager
def _refusals() -> Iterator[None]:
    """Lossless's own errors reach the client as tool errors, with their advice."""
    try:
        yield
    except LosslessError as exc:
        raise ToolError(str(exc)) from exc


def _implementation(name: str) -> Callable[..., dict[str, Any]]:
    """Tool *name* for the SDK: the toolbox's, run in the server's scope."""

    def implementation(ctx: Context[Held, Any], **arguments: Any) -> dict[str, Any]:
        with _refusals():
            return toolbox.run(_recall(ctx), name, arguments)

    return implementation


_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# expand and expand_query write grant bookkeeping, never the history itself.
_READS_UNDER_GRANT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, open_world_hint=False
)


# summarize_session adds a version; it never changes or removes one.
_ADDS_A_VERSION = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

#: What an MCP client may assume of each tool; the implementation is the toolbox's, and the
#: parameters, their defaults and limits, and the description come from the one declaration
#: (:mod:`lossless.retrieval.tools`).
_ANNOTATIONS: dict[str, ToolAnnotations] = {
    "lcm_grep": _READ_ONLY,
    "lcm_describe": _READ_ONLY,
    "lcm_expand_query": _READS_UNDER_GRANT,
    "lcm_expand": _READS_UNDER_GRANT,
    "lcm_list_conversations": _READ_ONLY,
    "summarize_session": _ADDS_A_VERSION,
    "get_history": _READ_ONLY,
    "chat_context_query": _READ_ONLY,
}
#: The context parameter the SDK fills in before the declared ones.
_CONTEXT = inspect.Parameter(
    "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context[Held, Any]
)


class RecallServer(MCPServer[Held]):
    """The SDK's server, with each recall tool's arguments checked against its declaration
    first: the SDK's own validation would coerce (``true`` → 1, ``"3"`` → 3) and word its
    refusals for a developer."""

    offered: tuple[str, ...] = ()

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Held, Any] | None = None
    ) -> Any:
        if name in self.offered:
            try:
                arguments = TOOLS[name].check(arguments)
            except ArgumentError as exc:
                raise ToolError(str(exc)) from exc
        return await super().call_tool(name, arguments, context)


def build_server(
    engine: Engine | Callable[[], Engine],
    *,
    conversation: ConversationRef | None = None,
    grant_id: str | None = None,
    name: str = "lossless",
) -> MCPServer[Held]:
    """An MCP server with lossless's recall tools over *engine* (see the module docstring).

    With *conversation* the server is pinned to that conversation's family; with *grant_id*
    it is bound to that delegation grant and offers ``lcm_expand`` instead of
    ``lcm_expand_query``. An unknown conversation or a dead grant raises here, before anything
    is served. The caller keeps ownership of *engine* (and closes it).

    *engine* may instead be a function that opens it (the store's scope only): for a store
    that does not exist yet, called by each tool call until it opens one (see :class:`Held`).
    """
    if isinstance(engine, Engine):
        held = Held(Recall.of(engine, conversation=conversation, grant_id=grant_id))
    elif conversation is not None or grant_id is not None:
        raise ValueError("a pinned or granted server needs its engine open")
    else:
        held = Held(None, engine)
    mode = "store" if conversation is None and grant_id is None else None
    scope = STORE_SCOPE if mode == "store" else held.get().describe_scope()

    @asynccontextmanager
    async def lifespan(_server: MCPServer[Held]) -> AsyncIterator[Held]:
        yield held

    server = RecallServer(
        name,
        title="lossless",
        version=__version__,
        instructions=server_instructions(scope),
        lifespan=lifespan,
        log_level="WARNING",
    )
    server.offered = TOOLSETS[mode or held.get().mode]
    for name in server.offered:
        declared = TOOLS[name]
        server.add_tool(
            declared.bind(_implementation(name), Field, leading=[_CONTEXT]),
            name=name,
            title=declared.title,
            description=declared.description,
            annotations=_ANNOTATIONS[name],
        )
    return server


def serve(
    server: MCPServer[Held],
    *,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    opening: Opening | None = None,
) -> None:
    """Serve until the client goes away (stdio) or the process is stopped (HTTP).

    On stdio, *opening* is the wire as :func:`lossless.mcp_front.open_wire` left it (being
    read, its first requests perhaps answered).

    Streamable HTTP is served at ``http://HOST:PORT/mcp``; on a loopback host the SDK also
    refuses requests whose Host or Origin header is not local (DNS rebinding). With *token*,
    every HTTP request must carry ``Authorization: Bearer TOKEN`` (401 otherwise).
    """
    if not http:
        anyio.run(_serve_stdio, server, opening)
        return
    import uvicorn

    app: Any = server.streamable_http_app(host=host)
    if token:
        app = require_token(app, token)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def require_token(app: Any, token: str) -> Any:
    """Wrap an ASGI *app* so that HTTP requests need ``Authorization: Bearer <token>``
    (compared in constant time); lifespan and other scopes pass through."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                body = b'{"error": "missing or wrong bearer token"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


# --- stdio: the guard between the wire and the SDK ---------------------------------------------


async def _serve_stdio(server: MCPServer[Held], opening: Opening | None = None) -> None:
    """Serve *server* on this process's stdin and stdout through :class:`_Guard`, from the
    *opening* the front left (:mod:`lossless.mcp_front`) or from the start."""
    sys.stdout.flush()
    if opening is None:
        wire_in, wire_out = take_wire()
        opening = Opening(wire_in, wire_out, front=False).start()
    elif opening.front:  # the store's scope: its tool list, for the next start's front
        remember_tools(await _tool_list(server))
    opening.hand_over()
    out = _Wire(opening.wire_out, drop_replies_to=opening.answered)
    guard = _Guard(opening, out)
    # The SDK reads lines from *guard* and writes its replies to *out*: duck-typed text files.
    async with stdio_server(stdin=cast(Any, guard), stdout=cast(Any, out)) as (
        read_stream,
        write_stream,
    ):
        # The SDK's own run_stdio_async does exactly this, over the process's streams.
        lowlevel = server._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


async def _tool_list(server: MCPServer[Held]) -> list[dict[str, Any]]:
    """*server*'s tools as the SDK lists them on the wire."""
    listed = ListToolsResult(tools=await server.list_tools())
    tools: list[dict[str, Any]] = listed.model_dump(by_alias=True, mode="json", exclude_none=True)[
        "tools"
    ]
    return tools


def remember_store_tools() -> None:
    """Write down the store's scope's tool list, for the front of ``lossless mcp`` to answer
    at its next start (what installing a host's MCP server does: the first session gets the
    tools at once too)."""

    def unopened() -> Engine:
        raise LosslessError("the tool list needs no store")

    remember_tools(anyio.run(_tool_list, build_server(unopened)))


class _Wire:
    """The protocol's stdout: one whole line per write, never two writers inside one line.

    The SDK's reply to a request id in *drop_replies_to* (a request the front already
    answered) is not written; the first such reply to each only."""

    def __init__(self, raw: IO[bytes], *, drop_replies_to: set[int | str] | None = None) -> None:
        self._raw = raw
        self._lock = anyio.Lock()
        self._drop = drop_replies_to if drop_replies_to is not None else set()

    def _answered(self, text: str) -> bool:
        """Whether *text* is a reply to drop (and it is then dropped once only)."""
        if not self._drop:
            return False
        try:
            message = json.loads(text)
        except ValueError:
            return False
        if not isinstance(message, dict) or "method" in message:
            return False
        rid = message.get("id")
        if isinstance(rid, bool) or not isinstance(rid, int | str) or rid not in self._drop:
            return False
        if "error" in message:
            logger.warning(
                "the SDK refused a request this server had answered: %s", message["error"]
            )
        self._drop.discard(rid)
        return True

    async def write(self, text: str) -> None:
        if self._answered(text):
            return
        data = text.encode("utf-8")
        async with self._lock:
            await anyio.to_thread.run_sync(self._raw.write, data)

    async def flush(self) -> None:
        """Each write is already on the wire (the file is unbuffered)."""

    async def refuse(self, rid: Any, code: int, message: str) -> None:
        await self.write(
            json.dumps(jsonrpc.error(rid, code, message), separators=(",", ":")) + "\n"
        )


class _Guard:
    """stdin as the SDK reads it (lines of text), holding back what it would drop: each such
    line is answered on the wire with a JSON-RPC error saying what was wrong."""

    def __init__(self, opening: Opening, out: _Wire) -> None:
        self._opening = opening
        self._out = out

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            raw, too_long = await anyio.to_thread.run_sync(self._opening.next_line)
            if not raw:
                return
            if too_long:
                await self._out.refuse(
                    None,
                    jsonrpc.INVALID_REQUEST,
                    f"a message over {MAX_MESSAGE_BYTES // (1024 * 1024)} MB was skipped; send"
                    " smaller arguments (a search pattern takes at most a few thousand"
                    " characters)",
                )
                continue
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                await self._out.refuse(
                    None,
                    jsonrpc.PARSE_ERROR,
                    f"the message is not UTF-8 text ({exc.reason} at byte {exc.start}); send"
                    " one JSON-RPC 2.0 message per line, encoded as UTF-8",
                )
                continue
            try:
                mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
            except ValidationError as exc:
                refusal = _refusal(text, exc)
                if refusal is not None:
                    await self._out.refuse(*refusal)
                continue
            yield text


def _refusal(text: str, exc: ValidationError) -> tuple[Any, int, str] | None:
    """The error answering a line the SDK cannot read (``None`` for a malformed reply to one
    of the server's own requests: JSON-RPC never answers a response)."""
    try:
        message = json.loads(text)
    except ValueError as err:
        return (
            None,
            jsonrpc.PARSE_ERROR,
            f"the message is not JSON ({err}); send one JSON-RPC 2.0 message per line",
        )
    except RecursionError:
        return (
            None,
            jsonrpc.PARSE_ERROR,
            "the message nests too deeply to read; send one JSON-RPC 2.0 message per line",
        )
    problem = jsonrpc.envelope_problem(message)
    if problem is not None:
        if (
            isinstance(message, dict)
            and "method" not in message
            and ("result" in message or "error" in message)
        ):
            return None
        return problem
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"][1:]) or "the message"
    return (
        jsonrpc.request_id(message),
        jsonrpc.INVALID_REQUEST,
        f"not a JSON-RPC 2.0 message this server reads: {where}: {first['msg']}",
    )
