"""``lossless conversations``, ``show``, ``rename``, ``archive`` and ``unarchive``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ..engine import Engine
from ..model import Conversation, ConversationStats, StoredMessage
from .output import (
    Column,
    State,
    emit_json,
    json_option,
    page,
    pass_state,
    print_listing,
    stderr,
    stdout,
)


def resolve(engine: Engine, ref: str) -> Conversation:
    """A conversation named on the command line (see :meth:`Engine.lookup`)."""
    return engine.lookup(ref)


@click.command("conversations")
@click.option("--archived", is_flag=True, help="Only the archived conversations.")
@click.option("--all", "-a", "every", is_flag=True, help="Archived conversations too.")
@click.option(
    "--limit", "-n", type=click.IntRange(min=1), help="Only the N with the latest messages."
)
@json_option
@pass_state
def conversations_command(
    state: State, archived: bool, every: bool, limit: int | None, as_json: bool
) -> None:
    """List conversations: id, session, title, where they came from, their first and last
    message's dates, message and summary counts.

    Archived conversations are left out unless --archived (only them) or --all.
    """
    if archived and every:
        raise click.UsageError("--archived lists the archived ones only, --all every one: give one")
    engine = state.engine()
    rows = engine.conversations(archived=None if every else archived)
    if limit is not None:  # the latest N, still listed oldest first
        rows = sorted(
            rows, key=lambda r: (r.last_message_at or "", r.conversation.conversation_id)
        )[-limit:]
        rows.sort(key=lambda r: r.conversation.conversation_id)
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
                    "first_message_at": r.first_message_at,
                    "source": r.source,
                }
                for r in rows
            ]
        )
        return
    hidden = 0 if archived or every else len(engine.conversations(archived=True))
    if not rows:
        if archived:
            stdout.print("no archived conversations")
        elif hidden:
            stdout.print(f"no conversations but {hidden} archived: list them with --archived")
        else:
            stdout.print("no conversations yet; add some with `lossless import PATH`")
        return
    print_listing(listing(rows))
    if hidden:
        stderr.print(f"({hidden} archived not listed: --archived or --all)", style="dim")


#: The longest session id shown whole (longer ones, a host's UUIDs, are cut with "…": the
#: id column names a conversation in a few characters), and source.
SESSION_CHARS = 10
SOURCE_CHARS = 11


def listing(rows: list[ConversationStats]) -> list[Column]:
    """The conversations' columns, one line each: the title last, taking the rest of the line
    (see :func:`print_listing`); an archived conversation's title starts with "archived"."""

    def texts(values: list[str]) -> list[Text]:
        return [Text(v) for v in values]  # never markup

    titles = []
    for r in rows:
        title = Text(_title(r.conversation))
        if r.conversation.status == "archived":
            title.stylize("yellow", 0, len("archived"))
        titles.append(title)
    return [
        Column("id", texts([str(r.conversation.conversation_id) for r in rows]), "right"),
        Column(
            "session", texts([_flat(r.conversation.session_id) for r in rows]), most=SESSION_CHARS
        ),
        Column("source", texts([r.source or "-" for r in rows]), most=SOURCE_CHARS),
        Column("first", texts([_date(r.first_message_at) for r in rows])),
        Column("last", texts([_date(r.last_message_at) for r in rows])),
        Column("msgs", texts([f"{r.message_count:,}" for r in rows]), "right"),
        Column("sums", texts([f"{r.summary_count:,}" for r in rows]), "right"),
        Column("title", titles),
    ]


def _title(conv: Conversation) -> str:
    """What the title column says: the title, after "archived" when it is."""
    title = _flat(conv.title or "")
    if conv.status == "archived":
        return f"archived {title}".rstrip()
    return title


def _flat(text: str) -> str:
    """Text on one line (a title or session id may hold line breaks)."""
    return " ".join(text.split())


def _date(stamp: str | None) -> str:
    return stamp[:10] if stamp else "-"


@click.command("rename")
@click.argument("conversation")
@click.argument("title")
@json_option
@pass_state
def rename_command(state: State, conversation: str, title: str, as_json: bool) -> None:
    """Give CONVERSATION (its id or session id) the title TITLE.

    The listings show it, and its messages are also found by its words (for less than
    their own).
    """
    engine = state.engine()
    conv = engine.rename(resolve(engine, conversation).conversation_id, title)
    if as_json:
        emit_json(_conversation_dict(conv))
        return
    stdout.print(
        Text(f"conversation {conv.conversation_id} ({conv.session_id}) is titled: {conv.title}"),
        highlight=False,
    )


@click.command("archive")
@click.argument("conversations", metavar="CONVERSATION...", nargs=-1, required=True)
@json_option
@pass_state
def archive_command(state: State, conversations: tuple[str, ...], as_json: bool) -> None:
    """Archive conversations (each an id or session id): nothing is deleted.

    An archived conversation leaves `lossless conversations` and searches of the whole store
    (grep without --conversation); a search of its family still finds it, and
    `lossless unarchive` brings it back.
    """
    _set_status(state, conversations, archived=True, as_json=as_json)


@click.command("unarchive")
@click.argument("conversations", metavar="CONVERSATION...", nargs=-1, required=True)
@json_option
@pass_state
def unarchive_command(state: State, conversations: tuple[str, ...], as_json: bool) -> None:
    """Bring archived conversations (each an id or session id) back into the listings and
    the store's searches."""
    _set_status(state, conversations, archived=False, as_json=as_json)


def _set_status(state: State, refs: tuple[str, ...], *, archived: bool, as_json: bool) -> None:
    engine = state.engine()
    found = [resolve(engine, ref) for ref in refs]  # every one known before any changes
    wanted = "archived" if archived else "active"
    out = []
    for conv in {c.conversation_id: c for c in found}.values():
        changed = conv.status != wanted
        if changed:
            conv = (
                engine.archive(conv.conversation_id)
                if archived
                else engine.unarchive(conv.conversation_id)
            )
        out.append((conv, changed))
    if as_json:
        emit_json([{**_conversation_dict(c), "changed": changed} for c, changed in out])
        return
    for conv, changed in out:
        name = f"conversation {conv.conversation_id} ({conv.session_id})"
        if not changed:
            said = f"{name} {'was archived already' if archived else 'is not archived'}"
        elif archived:
            said = f"archived {name}: `lossless unarchive {conv.conversation_id}` brings it back"
        else:
            said = f"{name} is back in the listings and searches"
        stdout.print(Text(said), highlight=False)


def _conversation_dict(conv: Conversation) -> dict[str, object]:
    return {
        "conversation_id": conv.conversation_id,
        "session_id": conv.session_id,
        "session_key": conv.session_key,
        "title": conv.title,
        "status": conv.status,
    }


def _message_dict(m: StoredMessage, source: bool) -> dict[str, object]:
    out: dict[str, object] = {
        "id": f"msg#{m.message_id}",
        "seq": m.seq,
        "role": m.role,
        "host_meta": m.host_meta,
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
@click.option("--limit", "-n", type=int, default=None, help="At most this many messages.")
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
