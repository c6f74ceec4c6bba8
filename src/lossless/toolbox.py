"""The recall tools at work: each declared tool (:mod:`lossless.retrieval.tools`) as one
function over an :class:`~lossless.engine.Engine` and the scope a shell gives it.

Every shell that offers the tools to a model calls these: the MCP server, ``lossless serve``
(and through it the OpenClaw plugin), the Hermes Agent engine. A function takes the scope
and the declared arguments and returns a JSON-ready dict; it raises
:class:`~lossless.errors.LosslessError` (with what was wrong and what to do) and nothing a
shell has to know about. :func:`call` checks a call's arguments against the declaration first.

A scope is one of three, fixed when a shell is built:

* the **store**: every conversation; tools take an optional ``conversation``;
* **pinned** to a conversation: its family, and nothing else (a request naming another
  conversation, or an id from one, is refused with the words used for an unknown one);
* a **grant**: a sub-agent's, bound to a delegation grant: the grant's conversations, the grant
  checked on every call; ``lcm_expand`` instead of ``lcm_expand_query``, and no
  ``summarize_session``.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .engine import ConversationRef, Engine
from .errors import ArgumentError, LosslessError, NotFoundError
from .model import Conversation, qualify, unqualify
from .retrieval.context_query import Kind as QueryKind
from .retrieval.context_query import Order as QueryOrder
from .retrieval.describe import parse_lines
from .retrieval.grants import GrantError
from .retrieval.grep import Mode, Scope, Sort
from .retrieval.tools import RECALL_ORDER, STORE_SCOPE, TOOLS

__all__ = [
    "GREP_RESULT_CHARS",
    "MANIFEST_SHOWN",
    "RECALL_ORDER",
    "SESSION_TOOLS",
    "TOOLSETS",
    "ToolScope",
    "call",
    "call_json",
    "run",
    "tool_schemas",
]

#: The most characters of hits one lcm_grep result carries (about 5k tokens): a page that
#: would be longer ends early and says where the next starts, so a model's window (and a
#: client's cap on a tool result) is never flooded by a large limit.
GREP_RESULT_CHARS = 20_000

#: Manifest entries a describe shows; the rest are counted (a deep summary has thousands).
MANIFEST_SHOWN = 50


@dataclass(frozen=True)
class ToolScope:
    """What the tools see: the engine and the conversations in scope.

    A pinned scope reads ``pinned`` and its family (looked up on each call, so a conversation
    that joins the family later is in it); a grant scope reads its grant's conversations, and
    checks the grant is still live on each call. With neither, the whole store is in scope.
    A *namespace* (``lossless serve``'s access tokens) narrows any of them to that
    namespace's conversations (and to the session ids matching *sessions*, a glob), and a
    session id the tools are given names a conversation of that namespace.
    """

    engine: Engine
    pinned: Conversation | None = None
    grant_id: str | None = None
    namespace: str | None = None
    sessions: str | None = None

    @classmethod
    def of(
        cls,
        engine: Engine,
        *,
        conversation: ConversationRef | None = None,
        grant_id: str | None = None,
        namespace: str | None = None,
        sessions: str | None = None,
    ) -> ToolScope:
        """The store's scope, a conversation's (looked up now: an unknown one raises) or a
        grant's (checked now: a dead grant raises), within *namespace* when one is given (a
        conversation or grant outside it raises as an unknown one would)."""
        if conversation is not None and grant_id is not None:
            raise ValueError("give a conversation or a grant, not both: a grant has its own scope")
        within = cls(engine, namespace=namespace, sessions=sessions)
        if conversation is not None:
            if isinstance(conversation, Conversation):
                conversation = conversation.conversation_id
            conv, _ = within.resolve(conversation)
            return cls(engine, pinned=conv, namespace=namespace, sessions=sessions)
        if grant_id is not None:
            grant = engine.check_grant(grant_id)
            reach = within.scope()
            if reach is not None and not set(grant.conversation_ids) <= set(reach):
                raise GrantError("this grant is unknown, expired or revoked; ask for a new one")
            return cls(engine, grant_id=grant_id, namespace=namespace, sessions=sessions)
        return within

    @property
    def mode(self) -> str:
        """``store``, ``pinned`` or ``grant``: which toolset it offers (:data:`TOOLSETS`)."""
        if self.grant_id is not None:
            return "grant"
        return "store" if self.pinned is None else "pinned"

    def _reach(self) -> tuple[int, ...] | None:
        """The conversations of the namespace (and sessions glob), ``None`` for no namespace."""
        if self.namespace is None:
            return None
        rows = self.engine.namespace_conversations(self.namespace)
        if self.sessions is not None:
            rows = [r for r in rows if fnmatch.fnmatchcase(unqualify(r[1]), self.sessions)]
        return tuple(i for i, _ in rows)

    def scope(self) -> tuple[int, ...] | None:
        """The conversation ids the tools may read now (``None``: all of them)."""
        ids: tuple[int, ...] | None = None
        if self.grant_id is not None:
            ids = self.engine.check_grant(self.grant_id).conversation_ids
        elif self.pinned is not None:
            ids = tuple(self.engine.family_ids(self.pinned))
        reach = self._reach()
        if reach is None:
            return ids
        if ids is None:
            return reach
        within = set(reach)
        return tuple(i for i in ids if i in within)

    def describe_scope(self) -> str:
        """The scope in words, for instructions and refusals."""
        if self.grant_id is not None:
            return "the conversations of its delegation grant"
        if self.pinned is not None:
            return (
                f"conversation {self.pinned.conversation_id} (session"
                f" {unqualify(self.pinned.session_id)!r}) and its family"
            )
        if self.namespace is not None:
            return f"the conversations of namespace {self.namespace!r}"
        return STORE_SCOPE

    def _candidates(self, ref: int | str) -> list[int | str]:
        """What *ref* may name, in the order tried: within a namespace, a session id is one
        of its own (text of digits: a conversation id first, then a session id)."""
        if self.namespace is None or isinstance(ref, int):
            return [ref]
        if ref.strip().isascii() and ref.strip().isdigit():
            return [int(ref.strip()), qualify(self.namespace, ref)]
        return [qualify(self.namespace, ref)]

    def resolve(self, ref: int | str | None) -> tuple[Conversation | None, tuple[int, ...] | None]:
        """The conversation a tool call names (or the pinned one) and the ids it may read.

        A conversation outside the scope is refused with the same words as an unknown one, so
        a scoped shell does not even confirm that other conversations exist.
        """
        scope = self.scope()
        if ref is None:
            return self.pinned, scope
        conv: Conversation | None = None
        for candidate in self._candidates(ref):
            try:
                found = self.engine.lookup(candidate)
            except NotFoundError:
                continue
            if scope is None or found.conversation_id in scope:
                conv = found
                break
        if conv is None:
            shown = unqualify(ref) if isinstance(ref, str) else ref
            raise NotFoundError(
                f"conversation {shown!r} is not one these tools can see (they serve"
                f" {self.describe_scope()}); lcm_list_conversations lists them"
            )
        family = self.engine.family_ids(conv)
        ids = tuple(i for i in family if scope is None or i in scope)
        return conv, ids


def lcm_grep(
    tools: ToolScope,
    *,
    pattern: str,
    mode: Mode,
    scope: Scope,
    sort: Sort,
    since: str | None,
    before: str | None,
    limit: int,
    offset: int,
    include_archived: bool,
    conversation: int | str | None,
) -> dict[str, Any]:
    """Search the stored history: lean hits (ids, where, when, who, a snippet), one page at a
    time, and what to ask for the next page or why the search stopped early."""
    _, ids = tools.resolve(conversation)
    if conversation is None and tools.mode == "store" and ids is not None and not include_archived:
        archived = set(tools.engine.archived_ids())  # a namespace's, as the whole store's
        ids = tuple(i for i in ids if i not in archived)
    result = tools.engine.grep(
        pattern,
        within=ids,
        mode=mode,
        scope=scope,
        since=since,
        before=before,
        limit=limit,
        sort=sort,
        offset=offset,
        include_archived=include_archived,
    )
    leans = [_lean(hit.to_dict()) for hit in result.hits]
    hits = leans
    # Most pages fit whole: one measure of them all (each hit alone is shorter still).
    if len(json.dumps(leans, ensure_ascii=False)) > GREP_RESULT_CHARS:
        hits, size = [], 0
        for lean in leans:
            size += len(json.dumps(lean, ensure_ascii=False))
            if hits and size > GREP_RESULT_CHARS:
                break
            hits.append(lean)
    more, next_offset = result.more, result.next_offset
    if len(hits) < len(result.hits):  # cut to size: the rest of this page is the next one
        more, next_offset = True, offset + len(hits)
    out: dict[str, Any] = {"hits": hits, "more": more, "truncated": result.truncated}
    if more:
        out["next_offset"] = next_offset
        out["next"] = f"the next page: the same call with offset={next_offset}"
        if len(hits) < len(result.hits):
            out["next"] += (
                f" (this page stopped at {len(hits)} hits, about {GREP_RESULT_CHARS:,}"
                " characters, to fit a model's window)"
            )
    if result.truncated:
        out["stopped"] = (
            "the search stopped at its bound (rows or time) before looking everywhere:"
            " narrow it (since/before, a conversation, a literal in the pattern)"
        )
    if mode == "regex":
        out["scanned"] = result.scanned
    if not result.hits:
        out["hint"] = (
            "no matches: try other or fewer words (relevance needs only some of them to"
            " match), mode=regex for a pattern, scope=files for large files, or another"
            " conversation (lcm_list_conversations)"
            + ("; include_archived=true searches archived ones too" if ids is None else "")
        )
    return out


def _lean(hit: dict[str, Any]) -> dict[str, Any]:
    """A hit as a model reads it: no empty fields, the score to three figures."""
    out = {k: v for k, v in hit.items() if v is not None and not (k == "tier" and v == 0)}
    if "score" in out:
        out["score"] = float(f"{out['score']:.3g}") or 0.0
    return out


def lcm_describe(
    tools: ToolScope,
    *,
    id: str,
    token_cap: int | None,
    lines: str | None,
    conversation: int | str | None,
) -> dict[str, Any]:
    """An id's metadata, manifest and content."""
    span = parse_lines(lines)
    _, ids = tools.resolve(conversation)
    found = tools.engine.describe(id, within=ids, token_cap=token_cap, lines=span)
    out = found.to_dict()
    manifest = out.pop("manifest")
    if manifest:
        out["manifest"] = manifest[:MANIFEST_SHOWN]
        out["manifest_items"] = len(manifest)
        out["manifest_tokens"] = manifest[-1]["cumulative_tokens"]
        if len(manifest) > MANIFEST_SHOWN:
            out["manifest_more"] = len(manifest) - MANIFEST_SHOWN
    if found.kind == "file" and span is None and found.content is not None:
        _cap_file(tools.engine, out, found.content, token_cap)
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
    tools: ToolScope,
    *,
    prompt: str,
    query: str | None,
    summary_ids: list[str] | None,
    conversation: int | str | None,
    max_tokens: int | None,
) -> dict[str, Any]:
    """An answer from the history below the summaries, with citations."""
    conv, _ = tools.resolve(conversation)
    wanted = [s.strip() for s in summary_ids or [] if s.strip()]
    if conv is None and wanted:  # the engine refuses ids outside this one's family
        try:
            conv, _ = tools.resolve(tools.engine.summary(wanted[0]).conversation_id)
        except NotFoundError:  # unknown, or beyond the scope: the same words for both
            raise NotFoundError(
                f"no summary {wanted[0]!r} among the conversations these tools can see; find"
                " summary ids with lcm_grep"
            ) from None
    if conv is None:
        raise ArgumentError(
            "name the conversation to answer from: conversation=<id or session id> (lcm_grep"
            " hits and lcm_list_conversations show them), or give summary_ids"
        )
    result = tools.engine.expand_query(
        prompt,
        conversation=conv.conversation_id,
        query=query,
        summary_ids=wanted or None,
        max_tokens=max_tokens,
    )
    return {"conversation_id": conv.conversation_id, **result.to_dict()}


def lcm_expand(
    tools: ToolScope,
    *,
    summary_ids: list[str],
    max_depth: int | None,
    include_messages: bool,
    token_cap: int | None,
) -> dict[str, Any]:
    """The summaries below the given ones (and their messages), under the scope's grant."""
    if tools.grant_id is None:
        raise ArgumentError("lcm_expand needs a delegation grant; these tools have none")
    result = tools.engine.expand(
        tools.grant_id,
        [s.strip() for s in summary_ids],
        max_depth=max_depth,
        include_messages=include_messages,
        token_cap=token_cap,
    )
    return result.to_dict()


def lcm_list_conversations(
    tools: ToolScope, *, limit: int, include_archived: bool
) -> dict[str, Any]:
    """The conversations in scope, most recently active first (archived ones only when
    asked)."""
    scope = tools.scope()
    every = [
        r
        for r in tools.engine.conversations()
        if scope is None or r.conversation.conversation_id in scope
    ]
    rows = [r for r in every if include_archived or r.conversation.status != "archived"]
    rows.sort(key=lambda r: r.last_message_at or r.conversation.created_at, reverse=True)
    out: dict[str, Any] = {
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
        "scope": tools.describe_scope(),
    }
    if len(every) > len(rows):
        out["archived_not_listed"] = len(every) - len(rows)
    return out


def _one_conversation(tools: ToolScope, ref: int | str | None, tool: str) -> Conversation:
    """The conversation a session tool names, else the pinned one, else the only one in
    scope; refused when that leaves a choice."""
    conv, scope = tools.resolve(ref)
    if conv is None and scope is not None and len(scope) == 1:
        conv, _ = tools.resolve(scope[0])
    if conv is None:
        raise ArgumentError(
            f"name the conversation for {tool}: conversation=<id or session id>"
            " (lcm_list_conversations lists them)"
        )
    return conv


def _msg(message_id: int | None) -> str | None:
    return None if message_id is None else f"msg#{message_id}"


def summarize_session(
    tools: ToolScope, *, conversation: int | str | None, incremental: bool
) -> dict[str, Any]:
    """A new version of the conversation's session summary (or the latest, unchanged)."""
    conv = _one_conversation(tools, conversation, "summarize_session")
    before = tools.engine.latest_session_summary(conv)
    summary = tools.engine.summarize_session(conv.conversation_id, full=not incremental)
    out = summary.to_dict()
    out["first_message_id"] = _msg(summary.first_message_id)
    out["last_message_id"] = _msg(summary.last_message_id)
    out["unchanged"] = (
        before is not None and before.session_summary_id == summary.session_summary_id
    )
    return out


def get_history(
    tools: ToolScope,
    *,
    conversation: int | str | None,
    after_seq: int,
    limit: int,
    token_cap: int | None,
    include_summaries: bool,
) -> dict[str, Any]:
    """A page of a conversation's messages, exactly as stored."""
    engine = tools.engine
    conv = _one_conversation(tools, conversation, "get_history")
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
                "host_meta": m.host_meta,
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


def chat_context_query(
    tools: ToolScope,
    *,
    text: str | None,
    kind: QueryKind,
    role: str | None,
    tool_name: str | None,
    execution_id: str | None,
    status: str | None,
    since: str | None,
    before: str | None,
    limit: int,
    offset: int,
    order: QueryOrder,
    conversation: int | str | None,
) -> dict[str, Any]:
    """Stored messages and logged tool executions, filtered and paged."""
    _, ids = tools.resolve(conversation)
    result = tools.engine.chat_context_query(
        within=ids,
        kind=kind,
        role=role,
        tool_name=tool_name,
        execution_id=execution_id,
        status=status,
        since=since,
        before=before,
        text=text,
        limit=limit,
        offset=offset,
        order=order,
    )
    return result.to_dict()


#: Each declared tool's implementation.
IMPLEMENTATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "lcm_grep": lcm_grep,
    "lcm_describe": lcm_describe,
    "lcm_expand_query": lcm_expand_query,
    "lcm_expand": lcm_expand,
    "lcm_list_conversations": lcm_list_conversations,
    "summarize_session": summarize_session,
    "get_history": get_history,
    "chat_context_query": chat_context_query,
}

_EVERYONES = ("lcm_grep", "lcm_describe")
#: The tools each scope offers: a grant holder expands but cannot start sub-agents, and
#: reads but does not write session summaries.
TOOLSETS: dict[str, tuple[str, ...]] = {
    "store": (
        *_EVERYONES,
        "lcm_expand_query",
        "lcm_list_conversations",
        "summarize_session",
        "get_history",
        "chat_context_query",
    ),
    "pinned": (
        *_EVERYONES,
        "lcm_expand_query",
        "lcm_list_conversations",
        "summarize_session",
        "get_history",
        "chat_context_query",
    ),
    "grant": (
        *_EVERYONES,
        "lcm_expand",
        "lcm_list_conversations",
        "get_history",
        "chat_context_query",
    ),
}


def tool_schemas(names: tuple[str, ...], *, pinned: bool) -> list[dict[str, Any]]:
    """Function-tool declarations of *names* for a host's model: ``name``, ``description``
    and ``parameters`` (a JSON Schema; a session's tools, *pinned*, take no ``conversation``:
    they search the session's own)."""
    omit = ("conversation",) if pinned else ()
    return [
        {
            "name": name,
            "description": TOOLS[name].description,
            "parameters": TOOLS[name].json_schema(omit=omit),
        }
        for name in names
    ]


#: The tools a host's agent gets for its own session (nothing that writes a new summary).
SESSION_TOOLS = tuple(n for n in TOOLSETS["pinned"] if n != "summarize_session")


def run(tools: ToolScope, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Run tool *name* with arguments already checked and completed (every declared name)."""
    return IMPLEMENTATIONS[name](tools, **arguments)


def call(tools: ToolScope, name: str, arguments: Any) -> dict[str, Any]:
    """Run tool *name* on a call's raw arguments (a JSON object): an unknown tool, a tool
    the scope does not offer, or arguments that do not fit the declaration are an
    :class:`~lossless.errors.ArgumentError` that says what would."""
    offered = TOOLSETS[tools.mode]
    if name not in offered:
        raise ArgumentError(f"no tool {name!r} here; the tools are {', '.join(offered)}")
    return run(tools, name, TOOLS[name].check(arguments))


def call_json(scope: Callable[[], ToolScope], name: str, arguments: Mapping[str, Any]) -> str:
    """A host's tool call answered as the JSON text the model reads: arguments left unset
    (``None``) are dropped, and lossless's own errors (raised by *scope* or by the tool) come
    back as ``{"error": ...}`` with their advice instead of ending the host's run."""
    try:
        out = call(scope(), name, {k: v for k, v in arguments.items() if v is not None})
    except LosslessError as exc:
        out = {"error": str(exc)}
    return json.dumps(out, ensure_ascii=False, default=str)
