"""``lossless context``."""

from __future__ import annotations

import click
from rich.markup import escape

from ..assemble import FORMATS
from ..errors import ArgumentError
from ..room import recorded
from .conversations import resolve
from .output import State, emit_json, json_option, json_text, pass_state, stderr, stdout


@click.command("context")
@click.argument("conversation")
@click.option(
    "--budget",
    "-b",
    type=click.IntRange(min=1),
    default=None,
    metavar="TOKENS",
    help="The messages' budget. Default: the room the conversation's host leaves them.",
)
@click.option(
    "--window",
    type=click.IntRange(min=1),
    default=None,
    metavar="TOKENS",
    help="The model's window: the budget becomes the room it leaves the messages (the host's"
    " own prompt, as measured for this conversation, and the reply set aside).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="anthropic",
    show_default=True,
    help="Anthropic Messages, OpenAI Chat Completions, or OpenAI Responses input items.",
)
@click.option(
    "--fill/--no-fill",
    default=None,
    help="Spend the room left under TOKENS on detail (summaries shown as what they were made"
    " from, then the messages before the fresh tail) or not. Default: the fill_budget setting.",
)
@click.option(
    "--prompt",
    default=None,
    metavar="TEXT",
    help="The next request, sent after these messages: the room left after the essentials"
    " goes first to the stored messages a search for it finds (up to prompt_share of it).",
)
@click.option(
    "--focus",
    default=None,
    metavar="TEXT",
    help="As --prompt, for a request already stored (its newest user message stays shown) or"
    " a topic.",
)
@json_option
@pass_state
def context_command(
    state: State,
    conversation: str,
    budget: int | None,
    window: int | None,
    fmt: str,
    fill: bool | None,
    prompt: str | None,
    focus: str | None,
    as_json: bool,
) -> None:
    """Print the context CONVERSATION's model would get next, within TOKENS (never more).

    Summaries first (as XML), then the newest items that fit, then the fresh tail; room left
    is spent on detail from below the summaries (--no-fill shows the summaries as they are);
    tool calls and results never without each other. --json prints exactly the messages to
    send. Without --budget, within the room the host's window leaves the messages (--window,
    else the window the host last reported): its own prompt and the reply set aside. With
    --prompt (or --focus), the stored messages it is about are shown first, where they were
    said, with their replies.
    """
    engine = state.engine()
    conv = resolve(engine, conversation)
    room = None
    if budget is None:
        kept = recorded(conv.metadata)
        if window is None and kept is None:
            raise ArgumentError(
                f"conversation {conv.conversation_id} has no host window on record: give"
                " --budget TOKENS (the messages' budget) or --window TOKENS (the model's)"
            )
        room = engine.room(conv.conversation_id, window or (kept.window if kept else 1))
        budget = room.budget
    assembled = engine.assemble(
        conv.conversation_id, budget, format=fmt, fill=fill, prompt=prompt, focus=focus
    )
    if as_json:
        emit_json(
            {
                "conversation_id": conv.conversation_id,
                "format": fmt,
                "budget": budget,
                "room": None if room is None else room.to_dict(),
                "tokens": assembled.tokens,
                "summaries": assembled.summaries,
                "raw_messages": assembled.raw_messages,
                "unfolded": assembled.unfolded,
                "recalled": assembled.recalled,
                "dropped_items": assembled.dropped_items,
                "dropped_orphans": assembled.dropped_orphans,
                "clipped": assembled.clipped,
                "messages": assembled.messages,
            }
        )
        return
    if room is not None:
        stdout.print(f"room: {room.describe()}", highlight=False)
    stdout.print(
        f"conversation {conv.conversation_id}: {assembled.tokens:,} of {budget:,} tokens "
        f"({assembled.summaries} summaries, {assembled.raw_messages} messages"
        + (f", {assembled.unfolded} of them from below the summaries" if assembled.unfolded else "")
        + (f", {len(assembled.recalled)} found for the prompt" if assembled.recalled else "")
        + f"; {assembled.dropped_items} older items left out)"
        + (
            f" — {assembled.clipped} alone is over the budget: shown clipped"
            if assembled.clipped
            else ""
        ),
        highlight=False,
    )
    for message in assembled.messages:
        who = message.get("role") or message.get("type", "item")
        body = message.get("content", message)
        text = body if isinstance(body, str) else json_text(body)
        stdout.print(f"[bold]{escape(str(who))}[/]: {escape(text[:300])}", highlight=False)


@click.command("resume")
@click.argument("conversation")
@click.option("--latest", is_flag=True, help="Cover every stored message, not only compacted ones.")
@json_option
@pass_state
def resume_command(state: State, conversation: str, latest: bool, as_json: bool) -> None:
    """Print CONVERSATION's resume summary: goal, current task, files, key tool executions.

    Made from the stored data without a model, ending with the honesty gate. By default it
    covers the messages up to the compaction boundary — exactly what assembly injects after
    the summaries; --latest covers everything stored.
    """
    engine = state.engine()
    conv = resolve(engine, conversation)
    summary = engine.resume(conv.conversation_id, latest=latest)
    if as_json:
        emit_json(summary.to_dict())
        return
    if summary.upto_seq is None:
        stderr.print(
            f"conversation {conv.conversation_id} has not been compacted yet (neither by lossless"
            " nor by its host), so nothing is injected; --latest shows the summary of"
            " everything stored",
            highlight=False,
        )
        raise click.exceptions.Exit(1)
    stdout.print(escape(summary.text), highlight=False)
