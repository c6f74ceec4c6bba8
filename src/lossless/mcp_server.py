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
server's lifespan context (a :class:`Recall`, the toolbox's ``ToolScope``), and
every :class:`~lossless.errors.LosslessError` becomes a tool error carrying its message: what
was wrong and what to do. Anything else is the SDK's: logged with its traceback, reported to the
client as a generic tool error, and the server goes on.
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from . import __version__, toolbox
from .engine import ConversationRef, Engine
from .errors import LosslessError
from .retrieval.tools import TOOLS
from .toolbox import MANIFEST_SHOWN, RECALL_ORDER, TOOLSETS
from .toolbox import ToolScope as Recall

INSTALL_HINT = "the MCP server needs the official MCP Python SDK: pip install 'lossless[mcp]'"

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations
    from pydantic import Field
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] not in ("mcp", "mcp_types", "pydantic"):
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

__all__ = [
    "INSTALL_HINT",
    "MANIFEST_SHOWN",
    "TOOLSETS",
    "Recall",
    "build_server",
    "require_token",
    "serve",
]


def _recall(ctx: Context[Recall, Any]) -> Recall:
    return ctx.request_context.lifespan_context


@contextmanager
def _refusals() -> Iterator[None]:
    """Lossless's own errors reach the client as tool errors, with their advice."""
    try:
        yield
    except LosslessError as exc:
        raise ToolError(str(exc)) from exc


def _implementation(name: str) -> Callable[..., dict[str, Any]]:
    """Tool *name* for the SDK: the toolbox's, run in the server's scope."""

    def implementation(ctx: Context[Recall, Any], **arguments: Any) -> dict[str, Any]:
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
    "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context[Recall, Any]
)


def build_server(
    engine: Engine,
    *,
    conversation: ConversationRef | None = None,
    grant_id: str | None = None,
    name: str = "lossless",
) -> MCPServer[Recall]:
    """An MCP server with lossless's recall tools over *engine* (see the module docstring).

    With *conversation* the server is pinned to that conversation's family; with *grant_id*
    it is bound to that delegation grant and offers ``lcm_expand`` instead of
    ``lcm_expand_query``. An unknown conversation or a dead grant raises here, before anything
    is served. The caller keeps ownership of *engine* (and closes it).
    """
    recall = Recall.of(engine, conversation=conversation, grant_id=grant_id)

    @asynccontextmanager
    async def lifespan(_server: MCPServer[Recall]) -> AsyncIterator[Recall]:
        yield recall

    server: MCPServer[Recall] = MCPServer(
        name,
        title="lossless",
        version=__version__,
        instructions=(
            "lossless stores every message of earlier conversations exactly, and replaces old"
            " context with summaries you can drill back through. This server serves"
            f" {recall.describe_scope()}. {RECALL_ORDER}"
        ),
        lifespan=lifespan,
        log_level="WARNING",
    )
    for name in TOOLSETS[recall.mode]:
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
    server: MCPServer[Recall],
    *,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
) -> None:
    """Serve until the client goes away (stdio) or the process is stopped (HTTP).

    Streamable HTTP is served at ``http://HOST:PORT/mcp``; on a loopback host the SDK also
    refuses requests whose Host or Origin header is not local (DNS rebinding). With *token*,
    every HTTP request must carry ``Authorization: Bearer TOKEN`` (401 otherwise).
    """
    if not http:
        server.run("stdio")
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
