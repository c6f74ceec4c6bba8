"""``lossless sessions`` and ``lossless summarize``: versioned whole-session summaries."""

from __future__ import annotations

import click
from rich.console import JustifyMethod
from rich.markup import escape
from rich.text import Text

from ..model import ConversationStats, SessionSummary
from .conversations import resolve
from .output import Column, State, emit_json, json_option, pass_state, print_listing, stdout


def _when(stamp: str | None) -> str:
    return (stamp or "-")[:16].replace("T", " ")


def _covers(s: SessionSummary) -> str:
    return f"msg#{s.first_message_id}…msg#{s.last_message_id}"


#: The listing's columns: how each aligns and at most how wide it is shown (0: whole); the
#: session (its id and title) is last, taking the rest of the line.
LABELS: dict[str, tuple[JustifyMethod, int]] = {
    "id": ("right", 0),
    "msgs": ("right", 0),
    "ver": ("right", 0),
    "covers": ("right", 0),
    "model": ("left", 18),
    "summarized": ("left", 0),
    "session": ("left", 0),
}


@click.command("sessions")
@click.option(
    "--summaries",
    is_flag=True,
    help="Show every version of each session summary, not only the latest.",
)
@json_option
@pass_state
def sessions_command(state: State, summaries: bool, as_json: bool) -> None:
    """List conversations with their session summary versions.

    A conversation's session summary is made by `lossless summarize` (or automatically with
    sessions.auto_summarize); each run stores a new version and keeps the old ones. The list
    shows the latest version, how many messages it covers, the model that wrote it and when;
    --summaries shows the whole history.
    """
    engine = state.engine()
    rows = engine.conversations()
    history: dict[int, list[SessionSummary]] = {}
    for s in engine.session_summaries():
        history.setdefault(s.conversation_id, []).append(s)
    if as_json:
        out = []
        for r in rows:
            c = r.conversation
            versions = history.get(c.conversation_id, [])
            entry: dict[str, object] = {
                "conversation_id": c.conversation_id,
                "session_id": c.session_id,
                "title": c.title,
                "messages": r.message_count,
                "summary_version": versions[-1].version if versions else None,
                "summary_covers": versions[-1].message_count if versions else 0,
                "summary": versions[-1].summary if versions else None,
            }
            if summaries:
                entry["versions"] = [_version_dict(v) for v in versions]
            out.append(entry)
        emit_json(out)
        return
    if not rows:
        stdout.print("no conversations yet; add some with `lossless import PATH`")
        return
    print_listing(columns(rows, history, summaries=summaries))
    if not history:
        stdout.print("no session summaries yet; make one with `lossless summarize CONV`")


def _version_dict(s: SessionSummary) -> dict[str, object]:
    return {
        "version": s.version,
        "message_count": s.message_count,
        "messages_processed": s.messages_processed,
        "is_incremental": s.is_incremental,
        "first_message_id": s.first_message_id,
        "last_message_id": s.last_message_id,
        "model": s.model,
        "created_at": s.created_at,
    }


@click.command("summarize")
@click.argument("conversation")
@click.option(
    "--full",
    is_flag=True,
    help="Summarize every message again instead of only those after the latest version.",
)
@json_option
@pass_state
def summarize_command(state: State, conversation: str, full: bool, as_json: bool) -> None:
    """Update the session summary of CONVERSATION (its id or its session id).

    Incremental: the latest version and the messages after it make the next version (no new
    messages: the latest version is shown as it is). --full summarizes the whole conversation
    again, as a new version. Earlier versions are never changed; `lossless sessions
    --summaries` lists them.
    """
    engine = state.engine()
    conv = resolve(engine, conversation)
    before = engine.latest_session_summary(conv)
    summary = engine.summarize_session(conv.conversation_id, full=full)
    unchanged = before is not None and before.session_summary_id == summary.session_summary_id
    if as_json:
        emit_json({**summary.to_dict(), "unchanged": unchanged})
        return
    if unchanged:
        how = "unchanged: no messages after it"
    elif summary.is_incremental:
        how = f"incremental: {summary.messages_processed:,} new message(s)"
    else:
        how = f"full: {summary.messages_processed:,} message(s)"
    stdout.print(
        f"conversation {conv.conversation_id} ({escape(conv.session_id)}) — session summary"
        f" v{summary.version} ({how}; covers {summary.message_count:,} message(s),"
        f" {_covers(summary)}; by {escape(summary.model or '-')})",
        style="bold",
        highlight=False,
    )
    stdout.print(escape(summary.render()), highlight=False)


def columns(
    rows: list[ConversationStats],
    history: dict[int, list[SessionSummary]],
    *,
    summaries: bool,
) -> list[Column]:
    """The listing's columns: a line per conversation (per version with *summaries*)."""
    cells: dict[str, list[str]] = {k: [] for k in LABELS}
    for r in rows:
        c = r.conversation
        versions = history.get(c.conversation_id, [])
        shown: list[SessionSummary | None] = [*reversed(versions if summaries else versions[-1:])]
        shown = shown or [None]
        label = c.session_id + (f" — {' '.join(c.title.split())}" if c.title else "")
        for n, v in enumerate(shown):
            first = n == 0
            cells["id"].append(str(c.conversation_id) if first else "")
            cells["msgs"].append(f"{r.message_count:,}" if first else "")
            if v is None:
                for key in ("ver", "covers", "model", "summarized"):
                    cells[key].append("-")
            else:
                cells["ver"].append(f"v{v.version}")
                cells["covers"].append(
                    f"{v.message_count:,} (+{v.messages_processed:,})"
                    if v.is_incremental
                    else f"{v.message_count:,}"
                )
                cells["model"].append(v.model or "-")
                cells["summarized"].append(_when(v.created_at))
            cells["session"].append(label if first else "")
    return [
        Column(name, [Text(x) for x in cells[name]], justify, most)  # never markup
        for name, (justify, most) in LABELS.items()
    ]
