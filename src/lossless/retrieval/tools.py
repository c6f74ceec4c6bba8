"""The recall tools, declared once: name, what a model is told, parameters with their types,
defaults and limits.

Every shell builds its tools from these declarations — the MCP server, the Agents SDK's
function tools, the expand_query sub-agent's ``lcm_expand`` — and the CLI and the engine's
methods are checked against them (``tests/test_tools.py``), so a default or a limit is
decided here and nowhere else. A shell may leave out parameters it binds itself (an Agents
SDK session's tools always search the session's own conversations: no ``conversation``).

:meth:`RecallTool.json_schema` is the parameters' JSON Schema (for APIs that take one);
:meth:`RecallTool.bind` makes a function with the declared signature around an
implementation (for SDKs that read a function's signature), with the shell's own field
factory (pydantic's ``Field``), so that this module imports no validation library.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from ..errors import ArgumentError

__all__ = [
    "RECALL_ORDER",
    "REQUIRED",
    "STORE_SCOPE",
    "TOOLS",
    "Param",
    "RecallTool",
    "server_instructions",
    "tool",
]

#: The whole store's scope in words (a pinned or granted scope says which conversations).
STORE_SCOPE = "every conversation in the store"

#: How a model should use the tools, for the instructions a shell hands it.
RECALL_ORDER = (
    "Recall in this order: lcm_grep finds ids; lcm_describe shows what an id is and what lies"
    " below it, with token costs; lcm_expand_query answers a question from the exact history"
    " below the summaries, citing ids (a sub-agent holding a grant uses lcm_expand instead)."
    " Ids look like msg#42 (a stored message), sum_0123456789abcdef (a summary: sum_ and 16 hex"
    " digits) and file_0123456789abcdef (a large file kept outside the context)."
)


def server_instructions(scope: str) -> str:
    """What an MCP server serving *scope* (its scope in words) tells its client."""
    return (
        "lossless stores every message of earlier conversations exactly, and replaces old"
        " context with summaries you can drill back through. This server serves"
        f" {scope}. {RECALL_ORDER}"
    )


#: The default of a parameter that has none (the call must give it).
REQUIRED: Any = inspect.Parameter.empty
#: The most hits, rows or conversations a tool returns in one call.
MAX_LIMIT = 200
#: How far a search pages: offset + limit at most this many hits in (retrieval.grep's).
MAX_REACH = 1_000

_JSON = {"string": "string", "integer": "integer", "boolean": "boolean"}


@dataclass(frozen=True)
class Param:
    """One parameter of a recall tool."""

    name: str
    #: ``string``, ``integer``, ``boolean``, ``strings`` (a list of strings),
    #: ``conversation`` (an id or a host's session id), ``object`` (a JSON object, e.g. a
    #: message) or ``objects`` (a list of them).
    kind: str
    description: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    min_items: int | None = None

    @property
    def required(self) -> bool:
        """Whether a call must give it."""
        return self.default is REQUIRED

    def python_type(self) -> Any:
        """The parameter's Python type (``None`` allowed when its default is ``None``)."""
        base: Any
        if self.choices:
            base = Literal.__getitem__(self.choices)
        elif self.kind == "strings":
            base = list[str]
        elif self.kind == "object":
            base = dict[str, Any]
        elif self.kind == "objects":
            base = list[dict[str, Any]]
        elif self.kind == "conversation":
            base = int | str
        else:
            base = {"string": str, "integer": int, "boolean": bool}[self.kind]
        return base | None if self.default is None else base

    def constraints(self) -> dict[str, Any]:
        """The limits as keyword arguments of a field (``ge``, ``le``, ``min_length``)."""
        out: dict[str, Any] = {}
        if self.minimum is not None:
            out["ge"] = self.minimum
        if self.maximum is not None:
            out["le"] = self.maximum
        if self.min_items is not None:
            out["min_length"] = self.min_items
        return out

    def check(self, value: Any, owner: str) -> Any:
        """*value* if it fits this parameter (JSON types: an integer for ``integer``, a list
        of strings for ``strings``; ``None`` where the default is ``None``), else an
        :class:`~lossless.errors.ArgumentError` saying what was expected."""
        if value is None and self.default is None:
            return None
        where = f"{owner}: {self.name}"
        expected = self.expects()
        if self.kind in ("strings", "objects"):
            item = str if self.kind == "strings" else dict
            if not isinstance(value, list) or not all(isinstance(v, item) for v in value):
                raise ArgumentError(f"{where} must be {expected} (got {_shown(value)})")
            if self.min_items is not None and len(value) < self.min_items:
                raise ArgumentError(f"{where} needs at least {self.min_items} item(s)")
            return value
        fits = {
            "object": isinstance(value, dict),
            "string": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
            "conversation": isinstance(value, str)
            or (isinstance(value, int) and not isinstance(value, bool)),
        }[self.kind]
        if not fits or (self.choices and value not in self.choices):
            raise ArgumentError(f"{where} must be {expected} (got {_shown(value)})")
        if isinstance(value, int) and not isinstance(value, bool):
            low = -(2**63) if self.minimum is None else self.minimum
            high = 2**63 - 1 if self.maximum is None else self.maximum
            if not low <= value <= high:
                raise ArgumentError(f"{where} must be {expected} (got {value})")
        return value

    def expects(self) -> str:
        """What a value must be, in words (for error messages)."""
        if self.choices:
            said = "one of " + ", ".join(self.choices)
        else:
            said = {
                "string": "a string",
                "integer": "an integer",
                "boolean": "true or false",
                "strings": "a list of strings",
                "object": "an object",
                "objects": "a list of objects",
                "conversation": "a conversation id or a session id",
            }[self.kind]
        if self.minimum is not None and self.maximum is not None:
            said += f" from {self.minimum} to {self.maximum}"
        elif self.minimum is not None:
            said += f" of at least {self.minimum}"
        elif self.maximum is not None:
            said += f" of at most {self.maximum}"
        return said + (" or null" if self.default is None else "")

    def json_schema(self) -> dict[str, Any]:
        """The parameter's JSON Schema."""
        schema: dict[str, Any]
        if self.kind in ("strings", "objects"):
            item = "string" if self.kind == "strings" else "object"
            schema = {"type": "array", "items": {"type": item}}
            if self.min_items is not None:
                schema["minItems"] = self.min_items
        elif self.kind == "object":
            schema = {"type": "object"}
        elif self.kind == "conversation":
            schema = {"type": ["integer", "string"]}
        else:
            schema = {"type": _JSON[self.kind]}
        if self.choices:
            schema["enum"] = list(self.choices)
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        if self.default is None and "enum" not in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            schema["type"] = [*types, "null"]
        elif self.default is None:
            schema = {"anyOf": [schema, {"type": "null"}]}
        schema["description"] = self.description
        if not self.required:
            schema["default"] = self.default
        return schema


@dataclass(frozen=True)
class RecallTool:
    """A recall tool: its name, the model-facing description and its parameters."""

    name: str
    title: str
    description: str
    params: tuple[Param, ...]
    #: Whether it only reads (expand and expand_query write grant bookkeeping; a session
    #: summary adds a version): how an MCP client may treat it.
    read_only: bool = True

    def param(self, name: str) -> Param:
        """The parameter called *name*."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no parameter {name!r}")

    def defaults(self) -> dict[str, Any]:
        """``{name: default}`` of the parameters that have one."""
        return {p.name: p.default for p in self.params if not p.required}

    def check(self, arguments: Any, *, omit: Sequence[str] = ()) -> dict[str, Any]:
        """The arguments of a call (a JSON object), checked against the declaration and
        completed with the defaults; an :class:`~lossless.errors.ArgumentError` names the
        first argument that is missing, unknown or does not fit (and what would)."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ArgumentError(
                f"{self.name}: the arguments must be an object of named values (got"
                f" {_shown(arguments)})"
            )
        kept = [p for p in self.params if p.name not in omit]
        names = {p.name for p in kept}
        unknown = sorted(k for k in arguments if k not in names)
        if unknown:
            raise ArgumentError(
                f"{self.name} has no parameter {', '.join(map(repr, unknown))}; it takes"
                f" {', '.join(p.name for p in kept) or 'none'}"
            )
        out: dict[str, Any] = {}
        for p in kept:
            if p.name in arguments:
                out[p.name] = p.check(arguments[p.name], self.name)
            elif p.required:
                raise ArgumentError(f"{self.name} needs {p.name}: {p.expects()}")
            else:
                out[p.name] = p.default
        return out

    def json_schema(self, omit: Sequence[str] = ()) -> dict[str, Any]:
        """The parameters' JSON Schema (an object), without those in *omit*."""
        kept = [p for p in self.params if p.name not in omit]
        return {
            "type": "object",
            "properties": {p.name: p.json_schema() for p in kept},
            "required": [p.name for p in kept if p.required],
            "additionalProperties": False,
        }

    def signature(
        self,
        field: Callable[..., Any],
        *,
        omit: Sequence[str] = (),
        leading: Sequence[inspect.Parameter] = (),
    ) -> inspect.Signature:
        """The declared signature: each parameter ``Annotated[type, field(description=...,
        ge=..., ...)]`` with its default, after the shell's *leading* parameters."""
        params = list(leading)
        for p in self.params:
            if p.name in omit:
                continue
            annotated = Annotated.__class_getitem__(  # type: ignore[attr-defined]
                (p.python_type(), field(description=p.description, **p.constraints()))
            )
            params.append(
                inspect.Parameter(
                    p.name,
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=p.default,
                    annotation=annotated,
                )
            )
        return inspect.Signature(params)

    def bind(
        self,
        implementation: Callable[..., Any],
        field: Callable[..., Any],
        *,
        omit: Sequence[str] = (),
        leading: Sequence[inspect.Parameter] = (),
    ) -> Callable[..., Any]:
        """A function named like the tool, documented with its description and carrying the
        declared signature, that calls ``implementation(**arguments)`` (a coroutine function
        stays one)."""
        returns = typing.get_type_hints(implementation).get("return", Any)
        signature = self.signature(field, omit=omit, leading=leading).replace(
            return_annotation=returns
        )

        def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)

        made: Callable[..., Any]
        if inspect.iscoroutinefunction(implementation):

            async def made_async(*args: Any, **kwargs: Any) -> Any:
                return await implementation(**arguments(args, kwargs))

            made = made_async
        else:

            def made_sync(*args: Any, **kwargs: Any) -> Any:
                return implementation(**arguments(args, kwargs))

            made = made_sync
        made.__name__ = made.__qualname__ = self.name
        made.__doc__ = self.description
        made.__signature__ = signature  # type: ignore[union-attr]
        made.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {
            "return": returns
        }
        return made


_CONVERSATION = Param(
    "conversation",
    "conversation",
    "A conversation id (e.g. 3) or the host's session id. Default: the conversation this"
    " server is pinned to, or every conversation it can see.",
    None,
)
_SINCE = Param("since", "string", "Only from this time on (ISO-8601, UTC).", None)
_BEFORE = Param("before", "string", "Only before this time (ISO-8601, UTC).", None)
_IDS = (
    "Ids look like msg#42 (a stored message), sum_0123456789abcdef (a summary: sum_ and 16 hex"
    " digits) and file_0123456789abcdef (a large file kept outside the context)."
)

TOOLS: dict[str, RecallTool] = {
    t.name: t
    for t in (
        RecallTool(
            "lcm_grep",
            "Search stored history",
            "Search the stored history of earlier conversations: every message exactly as it"
            " was, the summaries that replaced old context, and large files.\n\n"
            "This is step 1 of recall. Each hit has an id, its conversation, time, role"
            " (messages) or depth (summaries) and a snippet. Next: lcm_describe(id) to see a"
            " summary's metadata, what it was made from and the token cost of reading below it,"
            " or a message or file in full; then lcm_expand_query(prompt, ...) to answer a"
            " question from the exact history below the summaries (a sub-agent holding a grant"
            " uses lcm_expand instead).\n\n" + _IDS + " The default full_text + relevance takes"
            " a natural-language question as it is; use mode=regex for patterns such as"
            " 'Error \\d{3}'.",
            (
                Param(
                    "pattern",
                    "string",
                    'Words, "quoted phrases" or a question (full_text), or a regular expression'
                    " (regex).",
                ),
                Param(
                    "mode",
                    "string",
                    "full_text: words through the search index (CJK and substrings through a"
                    " trigram index). regex: a regular expression over the text, newest first,"
                    " bounded in rows and time.",
                    "full_text",
                    choices=("full_text", "regex"),
                ),
                Param(
                    "scope",
                    "string",
                    "What to search: messages, summaries, both, or large files.",
                    "both",
                    choices=("both", "messages", "summaries", "files"),
                ),
                Param(
                    "sort",
                    "string",
                    "relevance (BM25; documents matching some of the words rank by how well"
                    " they match), recency (newest first; any of the words, in the message"
                    " itself)."
                    " full_text only.",
                    "relevance",
                    choices=("relevance", "recency"),
                ),
                _SINCE,
                _BEFORE,
                Param("limit", "integer", "Most hits to return.", 20, minimum=1, maximum=MAX_LIMIT),
                Param(
                    "offset",
                    "integer",
                    "Hits to skip: the next page of the same search starts at the next_offset"
                    " a result gives (while it says more: true).",
                    0,
                    minimum=0,
                    maximum=MAX_REACH - 1,
                ),
                Param(
                    "include_archived",
                    "boolean",
                    "Without a conversation, search archived conversations too (a"
                    " conversation's own search always covers its family's archived ones).",
                    False,
                ),
                _CONVERSATION,
            ),
        ),
        RecallTool(
            "lcm_describe",
            "Describe an id",
            "Describe an id from lcm_grep (or from a summary's text) before reading below it.\n\n"
            "This is step 2 of recall. For a summary (sum_ and 16 hex digits): its metadata"
            " (kind, depth, time range, tokens), the summaries it was made from (parents) and"
            " those made from it (children), a manifest of everything below it in reading order"
            " with each item's tokens, the running total and whether it fits token_cap, then"
            " its content. For a message (msg#42): the message exactly as stored and the"
            " summaries covering it. For a large file (file_...): its record, exploration"
            " summary and content, or a range of lines.\n\n"
            "Next: lcm_expand_query(prompt, summary_ids=[...]) answers a question from the"
            " history below the summaries, citing the ids it used (a sub-agent holding a grant"
            " uses lcm_expand).",
            (
                Param("id", "string", "msg#42, sum_0123456789abcdef or file_0123456789abcdef."),
                Param(
                    "token_cap",
                    "integer",
                    "Tokens you could read: the manifest marks which items below a summary fit"
                    " (default: the store's max_expand_tokens). For a file, the most content"
                    " returned without lines.",
                    None,
                    minimum=1,
                ),
                Param(
                    "lines",
                    "string",
                    "For a file: the lines to return, as FIRST:LAST (e.g. 10:40).",
                    None,
                ),
                _CONVERSATION,
            ),
        ),
        RecallTool(
            "lcm_expand_query",
            "Answer from stored history",
            "Answer a question from the exact history below the summaries, citing the ids it"
            " used.\n\n"
            "This is step 3 of recall, after lcm_grep (and lcm_describe). Give summary_ids you"
            " found, or a query (default: the prompt) and the summaries are found for you. The"
            " history below them is read under a short-lived delegation grant, revoked when the"
            " answer is done; with a configured model a sub-agent writes the answer (mode"
            ' "model"), otherwise it is the best matching excerpts quoted with their ids (mode'
            ' "deterministic", labelled as such).\n\n'
            "Returns answer, citations (msg#42, sum_0123456789abcdef, ...), mode and the"
            " summaries searched. Quote from the answer only what its citations support;"
            " lcm_describe(id) shows a cited message in full.",
            (
                Param("prompt", "string", "The question to answer from the history."),
                Param(
                    "query",
                    "string",
                    "Search words to find the summaries (default: the prompt).",
                    None,
                ),
                Param(
                    "summary_ids",
                    "strings",
                    "Summaries to read below (sum_...), e.g. from lcm_grep.",
                    None,
                ),
                Param(
                    "conversation",
                    "conversation",
                    "The conversation (id or session id) whose history answers. Default: the"
                    " pinned conversation, or the conversation of the first summary_ids entry.",
                    None,
                ),
                Param(
                    "max_tokens",
                    "integer",
                    "Longest answer, in tokens (default 2,000).",
                    None,
                    minimum=50,
                ),
            ),
            read_only=False,
        ),
        RecallTool(
            "lcm_expand",
            "Expand summaries under a grant",
            "Read below summaries, under a delegation grant.\n\n"
            "Returns each given summary, then the summaries it was made from, level by level"
            " down to max_depth, and with include_messages the original messages (msg#42) under"
            " the leaf summaries, stopping at the token cap (truncated says so). Every read is"
            " checked against the grant: a summary of another conversation, a depth beyond the"
            " grant's, or tokens past its cap are refused, and the tokens returned are charged"
            " to it.\n\n"
            "Recall order: lcm_grep finds ids, lcm_describe shows the cost of a subtree,"
            " lcm_expand reads it. Ids look like sum_0123456789abcdef (summaries) and msg#42"
            " (messages).",
            (
                Param(
                    "summary_ids",
                    "strings",
                    "Summaries to expand (sum_ and 16 hex digits).",
                    min_items=1,
                ),
                Param(
                    "max_depth",
                    "integer",
                    "Levels to walk down (default: as deep as the grant allows).",
                    None,
                    minimum=0,
                ),
                Param(
                    "include_messages",
                    "boolean",
                    "Also return the original messages under the leaf summaries reached.",
                    True,
                ),
                Param(
                    "token_cap",
                    "integer",
                    "Most tokens to return (never more than the grant has left).",
                    None,
                    minimum=1,
                ),
            ),
            read_only=False,
        ),
        RecallTool(
            "lcm_list_conversations",
            "List conversations",
            "List the stored conversations this server can see, most recently active first.\n\n"
            "Each has its id and the host's session id (either names it in the conversation"
            " argument of the other tools), title, status, message and summary counts, stored"
            " tokens, the tokens of its active context, and the time of its latest message. Use"
            " it to find the conversation to search, then recall with lcm_grep → lcm_describe →"
            " lcm_expand_query.",
            (
                Param(
                    "limit",
                    "integer",
                    "Most conversations to list, newest first.",
                    50,
                    minimum=1,
                    maximum=500,
                ),
                Param(
                    "include_archived",
                    "boolean",
                    "List archived conversations too (status archived): kept whole, left out"
                    " of the list and of searches of the whole store.",
                    False,
                ),
            ),
        ),
        RecallTool(
            "summarize_session",
            "Summarize a session",
            "Summarize a whole conversation (a session) into a structured, versioned"
            " summary.\n\n"
            "Returns summary (the overview), version, is_incremental, messages_processed (the"
            " new messages this version read), message_count (all it covers, first_message_id"
            " to last_message_id, ids like msg#42), model and the structured fields: topics,"
            " decisions, code_references and key_points. Every run that summarizes stores a new"
            " version; earlier versions are kept (get_history with include_summaries lists"
            " them). With no message after the latest version, that version comes back"
            " unchanged (unchanged: true) and no model is called. Long conversations are read"
            " in chunks, none of them cut.",
            (
                Param(
                    "conversation",
                    "conversation",
                    "The conversation (id or session id) to summarize. Default: the"
                    " conversation this server is pinned to.",
                    None,
                ),
                Param(
                    "incremental",
                    "boolean",
                    "Use incremental summarization (default: true): the latest version plus"
                    " only the messages after it. false re-summarizes the whole conversation"
                    " from scratch (as a new version).",
                    True,
                ),
            ),
            read_only=False,
        ),
        RecallTool(
            "get_history",
            "Read a conversation's messages",
            "Read a conversation's messages in order, a page at a time, exactly as stored.\n\n"
            "Each message has its id (msg#42), seq (its position), role, time, token count and"
            " content. A page ends at limit messages or token_cap tokens; next_after_seq says"
            " where the next page starts (null at the end), and total_messages how many there"
            " are (to read the newest, start at total_messages minus the page size). With"
            " include_summaries, the versions of the conversation's session summary too (see"
            " summarize_session), oldest first. To find something specific, lcm_grep is"
            " faster.",
            (
                Param(
                    "conversation",
                    "conversation",
                    "The conversation (id or session id). Default: the conversation this"
                    " server is pinned to.",
                    None,
                ),
                Param(
                    "after_seq",
                    "integer",
                    "Return messages after this position (seq; 0: from the first message)."
                    " Pass next_after_seq of the previous page to read on.",
                    0,
                    minimum=0,
                    maximum=2**62,
                ),
                Param("limit", "integer", "Most messages to return.", 50, minimum=1, maximum=200),
                Param(
                    "token_cap",
                    "integer",
                    "Most tokens of message content to return (default: the store's"
                    " max_expand_tokens); a page always has at least one message.",
                    None,
                    minimum=1,
                ),
                Param(
                    "include_summaries",
                    "boolean",
                    "Include the session summary version history.",
                    False,
                ),
            ),
        ),
        RecallTool(
            "chat_context_query",
            "Query messages and tool results",
            "Query past chat messages and the tool-execution log: what a tool was called with"
            " and what it returned, which calls failed, what was said when.\n\n"
            "Use it after a compaction when the resume summary names tool execution ids, or to"
            " check a tool result instead of guessing. Filters combine; messages are cited by"
            " msg# id, executions by their tool call id with the msg# of the call and of the"
            " result. Page with offset = next_offset.",
            (
                Param(
                    "text",
                    "string",
                    "Words that must all appear (full text); omit to filter only.",
                    None,
                ),
                Param(
                    "kind",
                    "string",
                    "frames (stored messages), executions (tool calls), or both.",
                    "both",
                    choices=("both", "frames", "executions"),
                ),
                Param(
                    "role",
                    "string",
                    "Only messages of this role (frames only).",
                    None,
                    choices=("user", "assistant", "tool", "system"),
                ),
                Param(
                    "tool_name",
                    "string",
                    "Only executions of this tool (and the messages that made them).",
                    None,
                ),
                Param(
                    "execution_id",
                    "string",
                    "One execution by its tool call id, e.g. toolu_01A...",
                    None,
                ),
                Param(
                    "status",
                    "string",
                    "Only executions that succeeded, failed, or have no result yet.",
                    None,
                    choices=("ok", "error", "pending"),
                ),
                _SINCE,
                _BEFORE,
                Param("limit", "integer", "Most of each kind.", 20, minimum=1, maximum=MAX_LIMIT),
                Param("offset", "integer", "Skip this many (paging).", 0, minimum=0),
                Param(
                    "order",
                    "string",
                    "newest first (default) or oldest first.",
                    "newest",
                    choices=("newest", "oldest"),
                ),
                _CONVERSATION,
            ),
        ),
    )
}


def _shown(value: Any) -> str:
    """A value as an error message quotes it (short)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def tool(name: str) -> RecallTool:
    """The declaration of the tool called *name*."""
    return TOOLS[name]
