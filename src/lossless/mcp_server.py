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

The engine reaches the tools through the server's lifespan context (a :class:`Recall`), and
every :class:`~lossless.errors.LosslessError` becomes a tool error carrying its message: what
was wrong and what to do. Anything else is the SDK's: logged with its traceback, reported to the
client as a generic tool error, and the server goes on.
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from . import __version__
from .engine import ConversationRef, Engine
from .errors import LosslessError, NotFoundError
from .model import Conversation
from .retrieval.describe import parse_lines
from .retrieval.tools import TOOLS
from .timestamps import format_ts, parse_ts

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

__all__ = ["INSTALL_HINT", "Recall", "build_server", "require_token", "serve"]

#: Manifest entries a describe shows; the rest are counted (a deep summary has thousands).
MANIFEST_SHOWN = 50

RECALL_ORDER = (
    "Recall in this order: lcm_grep finds ids; lcm_describe shows what an id is and what lies"
    " below it, with token costs; lcm_expand_query answers a question from the exact history"
    " below the summaries, citing ids (a sub-agent holding a grant uses lcm_expand instead)."
    " Ids look like msg#42 (a stored message), sum_0123456789abcdef (a summary: sum_ and 16 hex"
    " digits) and file_0123456789abcdef (a large file kept outside the context)."
)


@dataclass(frozen=True)
class Recall:
    """What the tools of one server see: the engine and the conversations in scope.

    A pinned server reads ``pinned`` and its family (looked up on each call, so a
    conversation that joins the family later is in it); a grant server reads its grant's
    conversations, and checks the grant is still live on each call. With neither, the whole
    store is in scope.
    """

    engine: Engine
    pinned: Conversation | None = None
    grant_id: str | None = None

    def scope(self) -> tuple[int, ...] | None:
        """The conversation ids the tools may read now (``None``: all of them)."""
        if self.grant_id is not None:
            return self.engine.check_grant(self.grant_id).conversation_ids
        if self.pinned is not None:
            return tuple(self.engine.family_ids(self.pinned))
        return None

    def describe_scope(self) -> str:
        """The scope in words, for instructions and refusals."""
        if self.grant_id is not None:
            return "the conversations of its delegation grant"
        if self.pinned is not None:
            return (
                f"conversation {self.pinned.conversation_id} (session"
                f" {self.pinned.session_id!r}) and its family"
            )
        return "every conversation in the store"

    def lookup(self, ref: ConversationRef) -> Conversation:
        """A conversation by id, session id, or a numeric string (see :meth:`Engine.lookup`)."""
        return self.engine.lookup(ref)

    def resolve(self, ref: int | str | None) -> tuple[Conversation | None, tuple[int, ...] | None]:
        """The conversation a tool call names (or the pinned one) and the ids it may read.

        A conversation outside the scope is refused with the same words as an unknown one, so
        a scoped server does not even confirm that other conversations exist.
        """
        scope = self.scope()
        if ref is None:
            return self.pinned, scope
        try:
            conv = self.lookup(ref)
        except NotFoundError:
            conv = None
        if conv is None or (scope is not None and conv.conversation_id not in scope):
            raise NotFoundError(
                f"conversation {ref!r} is not one this server can see (it serves"
                f" {self.describe_scope()}); lcm_list_conversations lists them"
            )
        family = self.engine.family_ids(conv)
        ids = tuple(i for i in family if scope is None or i in scope)
        return conv, ids


def _recall(ctx: Context[Recall, Any]) -> Recall:
    return ctx.request_context.lifespan_context


@contextmanager
def _refusals() -> Iterator[None]:
    """Lossless's own errors reach the client as tool errors, with their advice."""
    try:
        yield
    except LosslessError as exc:
        raise ToolError(str(exc)) from exc


def _time(value: str | None, name: str) -> str | None:
    if value is None or not value.strip():
        return None
    parsed = parse_ts(value)
    if parsed is None:
        raise ToolError(f"{name} must be an ISO-8601 time, e.g. 2026-03-02 or 2026-03-02T09:30Z")
    return format_ts(parsed)


def lcm_grep(
    ctx: Context[Recall, Any],
    pattern: str,
    mode: Literal["full_text", "regex"],
    scope: Literal["both", "messages", "summaries", "files"],
    sort: Literal["relevance", "recency", "hybrid"],
    since: str | None,
    before: str | None,
    limit: int,
    conversation: int | str | None,
) -> dict[str, Any]:
    recall = _recall(ctx)
    with _refusals():
        _, ids = recall.resolve(conversation)
        result = recall.engine.grep(
            pattern,
            within=ids,
            mode=mode,
            scope=scope,
            since=_time(since, "since"),
            before=_time(before, "before"),
            limit=limit,
            sort=sort,
        )
    out: dict[str, Any] = {
        "hits": [h.to_dict() for h in result.hits],
        "truncated": result.truncated,
    }
    if mode == "regex":
        out["scanned"] = result.scanned
    if not result.hits:
        out["hint"] = (
            "no matches: try other or fewer words (relevance needs only some of them to"
            " match), mode=regex for a pattern, scope=files for large files, or another"
            " conversation (lcm_list_conversations)"
        )
    return out


def lcm_describe(
    ctx: Context[Recall, Any],
    id: str,
    token_cap: int | None,
    lines: str | None,
    conversation: int | str | None,
) -> dict[str, Any]:
    recall = _recall(ctx)
    with _refusals():
        span = parse_lines(lines)
        _, ids = recall.resolve(conversation)
        found = recall.engine.describe(id, within=ids, token_cap=token_cap, lines=span)
    out = found.to_dict()
    manifest = out.pop("manifest")
    if manifest:
        out["manifest"] = manifest[:MANIFEST_SHOWN]
        out["manifest_items"] = len(manifest)
        out["manifest_tokens"] = manifest[-1]["cumulative_tokens"]
        if len(manifest) > MANIFEST_SHOWN:
            out["manifest_more"] = len(manifest) - MANIFEST_SHOWN
    if found.kind == "file" and span is None and found.content is not None:
        _cap_file(recall.engine, out, found.content, token_cap)
    return out


def _cap_file(engine: Engine, out: dict[str, Any], content: str, token_cap: int | None) -> None:
    """Keep a whole large file out of the agent's context unless it fits the cap."""
    cap = token_cap or engine.config.max_expand_tokens
    if engine.token_counter.count(content) <= cap:
        return
    kept: list[str] = []
    used = 0
    rows = content.splitlines()
    for row in rows:
        cost = engine.token_counter.count(row) + 1
        if used + cost > cap:
            break
        kept.append(row)
        used += cost
    out["content"] = "\n".join(kept)
    out["content_truncated"] = True
    out["lines_total"] = len(rows)
    out["hint"] = (
        f"the file is over {cap:,} tokens: this is lines 1:{len(kept)} of {len(rows)};"
        " ask for more with lines=FIRST:LAST"
    )


def lcm_expand_query(
    ctx: Context[Recall, Any],
    prompt: str,
    query: str | None,
    summary_ids: list[str] | None,
    conversation: int | str | None,
    max_tokens: int | None,
) -> dict[str, Any]:
    recall = _recall(ctx)
    with _refusals():
        conv, _ = recall.resolve(conversation)
        wanted = [s.strip() for s in summary_ids or [] if s.strip()]
        if conv is None and wanted:  # the engine refuses ids outside this one's family
            owner = recall.engine.summary(wanted[0]).conversation_id
            conv, _ = recall.resolve(owner)
        if conv is None:
            raise ToolError(
                "name the conversation to answer from: conversation=<id or session id> (lcm_grep"
                " hits and lcm_list_conversations show them), or give summary_ids"
            )
        result = recall.engine.expand_query(
            prompt,
            conversation=conv.conversation_id,
            query=query,
            summary_ids=wanted or None,
            max_tokens=max_tokens,
        )
    return {"conversation_id": conv.conversation_id, **result.to_dict()}


def lcm_expand(
    ctx: Context[Recall, Any],
    summary_ids: list[str],
    max_depth: int | None,
    include_messages: bool,
    token_cap: int | None,
) -> dict[str, Any]:
    recall = _recall(ctx)
    grant_id = recall.grant_id
    if grant_id is None:  # only registered for grant servers; kept honest all the same
        raise ToolError("lcm_expand needs a delegation grant; this server has none")
    with _refusals():
        result = recall.engine.expand(
            grant_id,
            [s.strip() for s in summary_ids],
            max_depth=max_depth,
            include_messages=include_messages,
            token_cap=token_cap,
        )
    return result.to_dict()


def lcm_list_conversations(ctx: Context[Recall, Any], limit: int) -> dict[str, Any]:
    recall = _recall(ctx)
    with _refusals():
        scope = recall.scope()
        rows = [
            r
            for r in recall.engine.conversations()
            if scope is None or r.conversation.conversation_id in scope
        ]
    rows.sort(key=lambda r: r.last_message_at or r.conversation.created_at, reverse=True)
    return {
        "conversations": [
            {
                "conversation_id": r.conversation.conversation_id,
                "session_id": r.conversation.session_id,
                "title": r.conversation.title,
                "status": r.conversation.status,
                "messages": r.message_count,
                "message_tokens": r.message_tokens,
                "summaries": r.summary_count,
                "context_tokens": r.context_tokens,
                "last_message_at": r.last_message_at,
            }
            for r in rows[:limit]
        ],
        "total": len(rows),
        "scope": recall.describe_scope(),
    }


def _one_conversation(recall: Recall, ref: int | str | None, tool: str) -> Conversation:
    """The conversation a session tool names, else the pinned one, else the only one in
    scope; refused when that leaves a choice."""
    conv, scope = recall.resolve(ref)
    if conv is None and scope is not None and len(scope) == 1:
        conv, _ = recall.resolve(scope[0])
    if conv is None:
        raise ToolError(
            f"name the conversation for {tool}: conversation=<id or session id>"
            " (lcm_list_conversations lists them)"
        )
    return conv


def _msg(message_id: int | None) -> str | None:
    return None if message_id is None else f"msg#{message_id}"


def summarize_session(
    ctx: Context[Recall, Any], conversation: int | str | None, incremental: bool
) -> dict[str, Any]:
    recall = _recall(ctx)
    with _refusals():
        conv = _one_conversation(recall, conversation, "summarize_session")
        before = recall.engine.latest_session_summary(conv)
        summary = recall.engine.summarize_session(conv.conversation_id, full=not incremental)
    out = summary.to_dict()
    out["first_message_id"] = _msg(summary.first_message_id)
    out["last_message_id"] = _msg(summary.last_message_id)
    out["unchanged"] = (
        before is not None and before.session_summary_id == summary.session_summary_id
    )
    return out


def get_history(
    ctx: Context[Recall, Any],
    conversation: int | str | None,
    after_seq: int,
    limit: int,
    token_cap: int | None,
    include_summaries: bool,
) -> dict[str, Any]:
    recall = _recall(ctx)
    engine = recall.engine
    with _refusals():
        conv = _one_conversation(recall, conversation, "get_history")
        cid = conv.conversation_id
        page = engine.messages(cid, after_seq=after_seq, limit=limit)
        total = engine.message_count(cid)
        versions = engine.session_summaries(cid) if include_summaries else []
    cap = token_cap or engine.config.max_expand_tokens
    messages: list[dict[str, Any]] = []
    used = 0
    for m in page:
        if messages and used + m.token_count > cap:
            break
        used += m.token_count
        messages.append(
            {
                "id": f"msg#{m.message_id}",
                "seq": m.seq,
                "role": m.role,
                "created_at": m.created_at,
                "token_count": m.token_count,
                "content": m.content,
            }
        )
    last = messages[-1]["seq"] if messages else after_seq
    out: dict[str, Any] = {
        "conversation_id": cid,
        "session_id": conv.session_id,
        "total_messages": total,
        "messages": messages,
        "tokens": used,
        "next_after_seq": last if last < total else None,
    }
    if include_summaries:
        out["summaries"] = [
            {
                **v.to_dict(),
                "first_message_id": _msg(v.first_message_id),
                "last_message_id": _msg(v.last_message_id),
            }
            for v in versions
        ]
    return out


_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# expand and expand_query write grant bookkeeping, never the history itself.
_READS_UNDER_GRANT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, open_world_hint=False
)


# summarize_session adds a version; it never changes or removes one.
def chat_context_query(
    ctx: Context[Recall, Any],
    text: str | None,
    kind: Literal["both", "frames", "executions"],
    role: Literal["user", "assistant", "tool", "system"] | None,
    tool_name: str | None,
    execution_id: str | None,
    status: Literal["ok", "error", "pending"] | None,
    since: str | None,
    before: str | None,
    limit: int,
    offset: int,
    order: Literal["newest", "oldest"],
    conversation: int | str | None,
) -> dict[str, Any]:
    recall = _recall(ctx)
    with _refusals():
        _, ids = recall.resolve(conversation)
        result = recall.engine.chat_context_query(
            within=ids,
            kind=kind,
            role=role,
            tool_name=tool_name,
            execution_id=execution_id,
            status=status,
            since=_time(since, "since"),
            before=_time(before, "before"),
            text=text,
            limit=limit,
            offset=offset,
            order=order,
        )
    return result.to_dict()


_ADDS_A_VERSION = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

#: Each tool's implementation and what an MCP client may assume of it; the parameters,
#: their defaults and limits, and the description come from the one declaration
#: (:mod:`lossless.retrieval.tools`).
_TOOLS: dict[str, tuple[Callable[..., dict[str, Any]], ToolAnnotations]] = {
    "lcm_grep": (lcm_grep, _READ_ONLY),
    "lcm_describe": (lcm_describe, _READ_ONLY),
    "lcm_expand_query": (lcm_expand_query, _READS_UNDER_GRANT),
    "lcm_expand": (lcm_expand, _READS_UNDER_GRANT),
    "lcm_list_conversations": (lcm_list_conversations, _READ_ONLY),
    "summarize_session": (summarize_session, _ADDS_A_VERSION),
    "get_history": (get_history, _READ_ONLY),
    "chat_context_query": (chat_context_query, _READ_ONLY),
}
#: The context parameter the SDK fills in before the declared ones.
_CONTEXT = inspect.Parameter(
    "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context[Recall, Any]
)


#: The tools each mode offers: a grant holder expands but cannot start sub-agents, and
#: reads but does not write session summaries.
TOOLSETS = {
    "store": (
        "lcm_grep",
        "lcm_describe",
        "lcm_expand_query",
        "lcm_list_conversations",
        "summarize_session",
        "get_history",
        "chat_context_query",
    ),
    "pinned": (
        "lcm_grep",
        "lcm_describe",
        "lcm_expand_query",
        "lcm_list_conversations",
        "summarize_session",
        "get_history",
        "chat_context_query",
    ),
    "grant": (
        "lcm_grep",
        "lcm_describe",
        "lcm_expand",
        "lcm_list_conversations",
        "get_history",
        "chat_context_query",
    ),
}


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
    if conversation is not None and grant_id is not None:
        raise ValueError("give a conversation or a grant, not both: a grant has its own scope")
    recall = Recall(engine)
    if conversation is not None:
        recall = Recall(engine, pinned=recall.lookup(conversation))
    elif grant_id is not None:
        engine.check_grant(grant_id)
        recall = Recall(engine, grant_id=grant_id)
    mode = "grant" if grant_id is not None else "pinned" if conversation is not None else "store"

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
    for name in TOOLSETS[mode]:
        implementation, annotations = _TOOLS[name]
        declared = TOOLS[name]
        server.add_tool(
            declared.bind(implementation, Field, leading=[_CONTEXT]),
            name=name,
            title=declared.title,
            description=declared.description,
            annotations=annotations,
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
