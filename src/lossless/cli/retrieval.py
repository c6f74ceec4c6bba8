"""``lossless grep``, ``describe``, ``expand`` and ``ask``."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.text import Text

from ..retrieval.describe import parse_lines
from ..retrieval.grep import match_spans
from .conversations import resolve
from .output import (
    State,
    declared_option,
    emit_json,
    json_option,
    pass_state,
    stderr,
    stdout,
)


@click.command("grep")
@click.argument("pattern")
@click.option("--conversation", "-c", help="Search this conversation's family (id or session id).")
@click.option("--only", is_flag=True, help="With --conversation: that conversation alone.")
@declared_option("lcm_grep", "mode")
@declared_option("lcm_grep", "scope")
@declared_option("lcm_grep", "sort")
@declared_option("lcm_grep", "limit", "--limit", "-n")
@declared_option("lcm_grep", "offset")
@declared_option("lcm_grep", "since")
@declared_option("lcm_grep", "before")
@click.option(
    "--reveal",
    is_flag=True,
    help="Also search the originals of messages whose secrets were masked, and show them.",
)
@declared_option("lcm_grep", "include_archived")
@json_option
@pass_state
def grep_command(
    state: State,
    pattern: str,
    conversation: str | None,
    only: bool,
    mode: str,
    scope: str,
    sort: str,
    limit: int,
    offset: int,
    since: str | None,
    before: str | None,
    reveal: bool,
    include_archived: bool,
    as_json: bool,
) -> None:
    """Search stored messages, summaries and large files (lcm_grep).

    full_text (default) matches words and "phrases" through the search index — with --sort
    relevance a question finds documents matching some of its words, ranked by BM25; CJK text
    and substrings go through the trigram index. --mode regex matches a regular expression,
    bounded in rows and time. Results name their ids (msg#, sum_, file_). Without
    --conversation, archived conversations are left out unless --include-archived.
    """
    engine = state.engine()
    ref = resolve(engine, conversation).conversation_id if conversation else None
    result = engine.grep(
        pattern,
        conversation=ref,
        family=not only,
        mode=mode,  # type: ignore[arg-type]
        scope=scope,  # type: ignore[arg-type]
        sort=sort,  # type: ignore[arg-type]
        limit=limit,
        offset=offset,
        since=since,
        before=before,
        reveal=reveal,
        include_archived=include_archived,
    )
    if as_json:
        emit_json(
            {
                "hits": [h.to_dict() for h in result.hits],
                "truncated": result.truncated,
                "scanned": result.scanned,
                "more": result.more,
                "next_offset": result.next_offset,
            }
        )
        return
    for h in result.hits:
        who = h.role or (f"d{h.depth}" if h.depth is not None else h.kind)
        snippet = Text(h.snippet)  # stored text is never markup
        for start, end in match_spans(h.snippet, pattern) if mode == "full_text" else []:
            snippet.stylize("bold yellow", start, end)
        stdout.print(
            Text.assemble(
                (h.id, "bold"), f" conv {h.conversation_id} {h.created_at[:16]} {who}: ", snippet
            ),
            highlight=False,
        )
    if not result.hits:
        stdout.print("no matches")
    if result.truncated:
        stdout.print(f"(stopped early after scanning {result.scanned:,} rows: the regex bound)")
    if result.more:
        stdout.print(f"(more: --offset {result.next_offset} for the next {limit})")


@click.command("describe")
@click.argument("ident", metavar="ID")
@click.option("--conversation", "-c", help="Only within this conversation's family.")
@declared_option("lcm_describe", "token_cap", "--cap")
@declared_option("lcm_describe", "lines")
@json_option
@pass_state
def describe_command(
    state: State,
    ident: str,
    conversation: str | None,
    token_cap: int | None,
    lines: str | None,
    as_json: bool,
) -> None:
    """Describe a summary (sum_…), large file (file_…) or message (msg#N) (lcm_describe).

    For a summary: its metadata, parents and children, the subtree below it with token costs
    (and whether each running total fits --cap), then its content. For a file: its record,
    exploration summary and content (--lines 10:40 for a range).
    """
    engine = state.engine()
    ref = resolve(engine, conversation).conversation_id if conversation else None
    d = engine.describe(ident, conversation=ref, token_cap=token_cap, lines=parse_lines(lines))
    if as_json:
        emit_json(d.to_dict())
        return
    meta = ", ".join(
        f"{k}={v}" for k, v in d.metadata.items() if v not in (None, "", [], {}) and k != "content"
    )
    stdout.print(f"[bold]{d.id}[/] ({d.kind}, conversation {d.conversation_id})", highlight=False)
    stdout.print(escape(meta), highlight=False)
    if d.parents:
        stdout.print(f"made from: {', '.join(d.parents)}", highlight=False)
    if d.children:
        stdout.print(f"summarized by: {', '.join(d.children)}", highlight=False)
    if d.manifest:
        stdout.print(f"below it ({len(d.manifest)} items):", highlight=False)
        for m in d.manifest[:40]:
            depth = "" if m.depth is None else f" d{m.depth}"
            mark = "" if m.fits else "  (over the cap)"
            stdout.print(
                f"  {m.id} {m.kind}{depth} {m.tokens:,} tok, total {m.cumulative_tokens:,}{mark}",
                highlight=False,
            )
        if len(d.manifest) > 40:
            stdout.print(f"  … {len(d.manifest) - 40} more", highlight=False)
    if d.content is not None:
        stdout.print("---", highlight=False)
        stdout.print(escape(d.content), highlight=False)


@click.command("expand")
@click.argument("summary_ids", nargs=-1, required=True, metavar="SUMMARY_ID...")
@declared_option("lcm_expand", "max_depth", "--depth")
@declared_option("lcm_expand", "include_messages", "--messages")
@declared_option("lcm_expand", "token_cap", "--cap")
@json_option
@pass_state
def expand_command(
    state: State,
    summary_ids: tuple[str, ...],
    max_depth: int | None,
    include_messages: bool,
    token_cap: int | None,
    as_json: bool,
) -> None:
    """Expand summaries down the DAG (lcm_expand), within a token cap.

    Runs under a delegation grant over the first summary's conversation family, made for this
    command and revoked when it ends (the agent's tools get theirs from expand_query).
    """
    engine = state.engine()
    owner = engine.summary(summary_ids[0]).conversation_id
    grant = engine.create_grant(owner, token_cap=token_cap, purpose="lossless expand")
    try:
        result = engine.expand(
            grant.grant_id,
            list(summary_ids),
            max_depth=max_depth,
            include_messages=include_messages,
            token_cap=token_cap,
        )
    finally:
        engine.revoke_grant(grant.grant_id)
    if as_json:
        emit_json(result.to_dict())
        return
    for node in result.nodes:
        stdout.print(
            f"[bold]{node.id}[/] {node.kind} (level {node.level}, {node.tokens:,} tok)",
            highlight=False,
        )
        stdout.print(escape(node.content), highlight=False)
    stdout.print(f"{len(result.nodes)} item(s), {result.tokens:,} tokens", highlight=False)
    if result.stopped:
        stdout.print("stopped: " + _in_cli_words(result.stopped), highlight=False)


@click.command("ask")
@click.argument("conversation")
@click.argument("question")
@click.option("--query", help="Search words to find the summaries (default: the question).")
@json_option
@pass_state
def ask_command(
    state: State, conversation: str, question: str, query: str | None, as_json: bool
) -> None:
    """Answer QUESTION from CONVERSATION's stored history (lcm_expand_query).

    Finds the relevant summaries and reads the history below them under a delegation grant
    (revoked when done). With a configured model that can call tools (openai, anthropic) a
    sub-agent writes the answer, citing ids; otherwise the answer is the best cited excerpts,
    labelled as deterministic retrieval.
    """
    engine = state.engine()
    conv = resolve(engine, conversation)
    result = engine.expand_query(question, conversation=conv.conversation_id, query=query)
    if as_json:
        emit_json(result.to_dict())
        return
    stdout.print(escape(result.answer), highlight=False)
    if result.mode == "model":
        stdout.print(
            f"answered by {result.model} in {result.steps} step(s); cited:"
            f" {', '.join(result.citations) or 'nothing'}",
            style="dim",
            highlight=False,
        )
    if result.note:
        stderr.print(f"note: {escape(result.note)}", highlight=False)


@click.command("query")
@click.argument("text", required=False)
@click.option("--conversation", "-c", help="This conversation's family (id or session id).")
@click.option("--only", is_flag=True, help="With --conversation: that conversation alone.")
@declared_option("chat_context_query", "kind")
@declared_option("chat_context_query", "role")
@declared_option("chat_context_query", "tool_name", "--tool")
@declared_option("chat_context_query", "execution_id", "--execution")
@declared_option("chat_context_query", "status")
@declared_option("chat_context_query", "since")
@declared_option("chat_context_query", "before")
@declared_option("chat_context_query", "limit")
@declared_option("chat_context_query", "offset")
@declared_option("chat_context_query", "order")
@json_option
@pass_state
def query_command(
    state: State,
    text: str | None,
    conversation: str | None,
    only: bool,
    kind: str,
    role: str | None,
    tool_name: str | None,
    execution_id: str | None,
    status: str | None,
    since: str | None,
    before: str | None,
    limit: int,
    offset: int,
    order: str,
    as_json: bool,
) -> None:
    """Query the chat frames and the tool-execution log (chat_context_query).

    Filters combine: TEXT (full text, words must all match), --role for messages, --tool /
    --execution / --status for tool executions (and the messages that made or answered
    them), --since/--before, --conversation. Results cite msg# ids and tool call ids; page
    with --limit and --offset.
    """
    engine = state.engine()
    ref = resolve(engine, conversation).conversation_id if conversation else None
    result = engine.chat_context_query(
        conversation=ref,
        family=not only,
        kind=kind,  # type: ignore[arg-type]
        role=role,
        tool_name=tool_name,
        execution_id=execution_id,
        status=status,
        since=since,
        before=before,
        text=text,
        limit=limit,
        offset=offset,
        order=order,  # type: ignore[arg-type]
    )
    if as_json:
        emit_json(result.to_dict())
        return
    for e in result.executions:
        took = f" {e.duration_ms} ms" if e.duration_ms is not None else ""
        stdout.print(
            f"[bold]{escape(e.execution_id)}[/] {escape(e.tool_name or '?')} {e.status}{took}"
            f" conv {e.conversation_id} {e.started_at or e.finished_at or ''}"
            f" call {e.call_message or '-'} result {e.result_message or '-'}",
            highlight=False,
        )
        if e.input:
            stdout.print(f"  input  {escape(e.input)}", highlight=False)
        if e.output:
            stdout.print(f"  output {escape(e.output)}", highlight=False)
    for f in result.frames:
        stdout.print(
            f"[bold]{f.id}[/] {f.role} conv {f.conversation_id} {f.created_at}"
            f"\n  {escape(f.snippet)}",
            highlight=False,
        )
    shown = len(result.executions) + len(result.frames)
    tail = f"; more with --offset {result.next_offset}" if result.next_offset is not None else ""
    stdout.print(
        f"{len(result.executions)} execution(s), {len(result.frames)} message(s){tail}"
        if shown
        else "nothing matches",
        highlight=False,
    )


#: The recall tools' words for their parameters, and the CLI's for the same options: what a
#: tool's advice says, said to a person at the command line.
_CLI_WORDS = (
    ("token_cap of at least", "--cap of at least"),
    ("(token_cap)", "(--cap)"),
    ("fewer summary_ids", "fewer ids"),
    ("max_depth lower", "a lower --depth"),
    ("include_messages false", "--no-messages"),
    ("lcm_describe the id", "`lossless describe ID`"),
)


def _in_cli_words(text: str) -> str:
    for tool, cli in _CLI_WORDS:
        text = text.replace(tool, cli)
    return text
