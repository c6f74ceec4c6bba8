"""``lossless conversations`` and ``lossless show``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..engine import Engine
from ..model import Conversation, StoredMessage
from .output import State, emit_json, json_option, page, pass_state, stdout


def resolve(engine: Engine, ref: str) -> Conversation:
    """A conversation named on the command line (see :meth:`Engine.lookup`)."""
    return engine.lookup(ref)


@click.command("conversations")
@json_option
@pass_state
def conversations_command(state: State, as_json: bool) -> None:
    """List conversations with their message, summary and token counts."""
    rows = state.engine().conversations()
    if as_json:
        emit_json(
            [
                {
                    "conversation_id": r.conversation.conversation_id,
                    "session_id": r.conversation.session_id,
                    "session_key": r.conversation.session_key,
                    "title": r.conversation.title,
                    "status": r.conversation.status,
                    "messages": r.message_count,
                    "message_tokens": r.message_tokens,
                    "summaries": r.summary_count,
                    "summaries_by_depth": {str(k): v for k, v in r.summaries_by_depth.items()},
                    "context_items": r.context_items,
                    "context_tokens": r.context_tokens,
                    "last_message_at": r.last_message_at,
                }
                for r in rows
            ]
        )
        return
    if not rows:
        stdout.print("no conversations yet; add some with `lossless import PATH`")
        return
    table = Table(box=None, pad_edge=False)
    for name, justify in (
        ("id", "right"),
        ("session", "left"),
        ("messages", "right"),
        ("tokens", "right"),
        ("summaries", "right"),
        ("context", "right"),
        ("last message", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "session")  # type: ignore[arg-type]
    for r in rows:
        c = r.conversation
        label = c.session_id + (f" — {c.title[:30]}" if c.title else "")
        if c.status != "active":
            label += f" ({c.status})"
        table.add_row(
            str(c.conversation_id),
            escape(label),
            f"{r.message_count:,}",
            f"{r.message_tokens:,}",
            str(r.summary_count),
            f"{r.context_tokens:,} tok",
            (r.last_message_at or "-")[:16].replace("T", " "),
        )
    stdout.print(table)


def _message_dict(m: StoredMessage, source: bool) -> dict[str, object]:
    out: dict[str, object] = {
        "id": f"msg#{m.message_id}",
        "seq": m.seq,
        "role": m.role,
        "created_at": m.created_at,
        "token_count": m.token_count,
        "external_id": m.external_id,
        "source_format": m.source_format,
        "content": m.content,
    }
    if m.forgotten_at:
        out["forgotten_at"] = m.forgotten_at
    if source:
        out["source"] = m.to_source() if m.source_format != "lossless" else m.to_source().to_dict()
        out["parts"] = [
            {
                "type": p.type,
                "tool_call_id": p.tool_call_id,
                "tool_name": p.tool_name,
                "is_error": p.is_error,
            }
            for p in m.parts
        ]
    return out


@click.command("show")
@click.argument("conversation")
@click.option("--after", "after_seq", type=int, default=0, help="Only messages after this seq.")
@click.option("--limit", type=int, default=None, help="At most this many messages.")
@click.option(
    "--source", is_flag=True, help="With --json: include each message exactly as ingested."
)
@click.option(
    "--pager/--no-pager",
    default=True,
    show_default=True,
    help="On a terminal, page through $PAGER (less by default).",
)
@json_option
@pass_state
def show_command(
    state: State,
    conversation: str,
    after_seq: int,
    limit: int | None,
    source: bool,
    pager: bool,
    as_json: bool,
) -> None:
    """Show the messages of CONVERSATION (its id or its session id)."""
    engine = state.engine()
    conv = resolve(engine, conversation)
    messages = engine.messages(conv.conversation_id, after_seq=after_seq, limit=limit)
    if as_json:
        emit_json(
            {
                "conversation_id": conv.conversation_id,
                "session_id": conv.session_id,
                "title": conv.title,
                "messages": [_message_dict(m, source) for m in messages],
            }
        )
        return
    if pager and sys.stdout.isatty():
        page(lambda console: _print_messages(console, conv, messages))
    else:
        for _ in _print_messages(stdout, conv, messages):
            pass


def _print_messages(
    console: Console, conv: Conversation, messages: list[StoredMessage]
) -> Iterator[None]:
    """Print the conversation's heading, then each message (a step each, for a pager)."""
    title = f" — {conv.title}" if conv.title else ""
    console.print(
        f"conversation {conv.conversation_id} ({escape(conv.session_id)}){escape(title)}",
        style="bold",
        highlight=False,
    )
    yield
    for m in messages:
        console.print(
            f"[dim]#{m.seq} msg#{m.message_id} {m.created_at[:19]} {m.token_count} tok[/] "
            f"[bold]{m.role}[/]",
            highlight=False,
        )
        text = m.content if len(m.content) <= 2000 else m.content[:2000] + " …"
        if m.forgotten_at:
            text = f"(forgotten on {m.forgotten_at[:10]})"
        console.print(escape(text), highlight=False)
        yield
