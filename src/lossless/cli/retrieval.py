"""``lossless grep``."""

from __future__ import annotations

import click
from rich.markup import escape

from .conversations import resolve
from .output import State, emit_json, json_option, pass_state, stdout


@click.command("grep")
@click.argument("pattern")
@click.option("--conversation", "-c", help="Search this conversation's family (id or session id).")
@click.option("--only", is_flag=True, help="With --conversation: that conversation alone.")
@click.option(
    "--mode", type=click.Choice(["full_text", "regex"]), default="full_text", show_default=True
)
@click.option(
    "--scope",
    type=click.Choice(["messages", "summaries", "both", "files"]),
    default="both",
    show_default=True,
)
@click.option(
    "--sort",
    type=click.Choice(["recency", "relevance", "hybrid"]),
    default="recency",
    show_default=True,
)
@click.option("--limit", type=click.IntRange(1, 200), default=50, show_default=True)
@click.option("--since", help="Only from this time on (ISO-8601).")
@click.option("--before", help="Only before this time (ISO-8601).")
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
    since: str | None,
    before: str | None,
    as_json: bool,
) -> None:
    """Search stored messages, summaries and large files (lcm_grep).

    full_text (default) matches words and "phrases" through the search index — with --sort
    relevance a question finds documents matching some of its words, ranked by BM25; CJK text
    and substrings go through the trigram index. --mode regex matches a regular expression,
    bounded in rows and time. Results name their ids (msg#, sum_, file_).
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
        since=since,
        before=before,
    )
    if as_json:
        emit_json(
            {
                "hits": [h.to_dict() for h in result.hits],
                "truncated": result.truncated,
                "scanned": result.scanned,
            }
        )
        return
    for h in result.hits:
        who = h.role or (f"d{h.depth}" if h.depth is not None else h.kind)
        stdout.print(
            f"[bold]{h.id}[/] conv {h.conversation_id} {h.created_at[:16]} {who}: "
            f"{escape(h.snippet)}",
            highlight=False,
        )
    if not result.hits:
        stdout.print("no matches")
    if result.truncated:
        stdout.print(f"(stopped early after scanning {result.scanned:,} rows: the regex bound)")
