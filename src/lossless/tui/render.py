"""How the terminal UI shows stored things: messages part by part, summaries, large files.

Plain Rich text (no Textual here), so it is cheap to test and to reuse. Long texts are cut
with a note saying how much was left out: the detail pane must stay responsive, and the full
message is always one ``lossless show`` or ``describe`` away.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text

from ..model import LargeFile, StoredMessage, StoredPart, Summary

__all__ = [
    "MAX_CHARS",
    "file_text",
    "first_line",
    "message_text",
    "plural",
    "short_time",
    "summary_text",
]

#: Characters of one text block shown in the detail pane before it is cut.
MAX_CHARS = 20_000

_ATTACHMENTS = ("image", "document", "audio", "file")


def short_time(stamp: str | None) -> str:
    """``2026-03-02T09:41:20.725966Z`` → ``2026-03-02 09:41`` (``-`` when missing)."""
    return (stamp or "-")[:16].replace("T", " ")


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 summary``, ``3 summaries``: *words* is the plural when adding an s is wrong."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def first_line(text: str, width: int = 60) -> str:
    """The text on one line, cut to *width* characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1].rstrip() + "…"


def _cut(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    return text[:MAX_CHARS] + f"\n… ({len(text) - MAX_CHARS:,} more characters)"


def _json(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _block(out: Text, heading: str, style: str, body: str | None, body_style: str = "") -> None:
    out.append(heading + "\n", style=style)
    if body:
        out.append(_cut(body).rstrip("\n") + "\n", style=body_style)


def _part(out: Text, part: StoredPart, tool_names: Mapping[str, str]) -> None:
    call = f"  {part.tool_call_id}" if part.tool_call_id else ""
    if part.type == "text":
        text = part.text if part.text is not None else _json(part.raw)
        out.append(_cut(text).rstrip("\n") + "\n")
    elif part.type == "tool_call":
        _block(
            out, f"→ tool call {part.tool_name or '?'}{call}", "bold cyan", _json(part.tool_input)
        )
    elif part.type == "tool_result":
        name = part.tool_name or tool_names.get(part.tool_call_id or "", "")
        label = f"← tool result{' ' + name if name else ''}{call}"
        if part.is_error:
            label += "  (error)"
        style = "bold red" if part.is_error else "bold green"
        _block(out, label, style, part.tool_output if part.tool_output is not None else part.text)
    elif part.type == "reasoning":
        _block(out, "thinking", "bold magenta", part.text, "italic")
    elif part.type == "redacted_reasoning":
        out.append("thinking (redacted by the provider)\n", style="bold magenta")
    elif part.type == "refusal":
        _block(out, "refusal", "bold red", part.text)
    elif part.type in _ATTACHMENTS:
        media = ""
        if isinstance(part.raw, Mapping):
            source = part.raw.get("source")
            if isinstance(source, Mapping):
                media = str(source.get("media_type") or "")
        out.append(f"[{part.type}{' ' + media if media else ''}]\n", style="yellow")
    else:
        _block(out, f"[{part.type} block]", "yellow", part.text or _json(part.raw))


def message_text(message: StoredMessage, covering: Sequence[str] = ()) -> Text:
    """A stored message for people: a header, then each part (text, tool calls with their
    arguments, tool results, thinking) in order."""
    out = Text()
    out.append(f"msg#{message.message_id}", style="bold")
    out.append(f"  {message.role}", style="bold blue")
    out.append(
        f"  seq {message.seq} · {short_time(message.created_at)} · {message.token_count:,} tokens"
        f" · {message.source_format}\n",
        style="dim",
    )
    if covering:
        out.append(f"summarized by {', '.join(covering)}\n", style="dim")
    out.append("\n")
    if not message.parts:
        out.append(_cut(message.content) + "\n")
        return out
    names = {p.tool_call_id: p.tool_name for p in message.parts if p.tool_call_id and p.tool_name}
    for part in message.parts:
        _part(out, part, names)
    return out


def summary_text(
    summary: Summary, parents: Sequence[str] = (), messages: int = 0, children: Sequence[str] = ()
) -> Text:
    """A summary with what it was made from and what was made from it, then its content."""
    out = Text()
    out.append(summary.summary_id, style="bold")
    out.append(f"  {summary.kind} d{summary.depth}", style="bold magenta")
    out.append(f"  {summary.token_count:,} tokens\n", style="dim")
    span = f"{short_time(summary.earliest_at)} → {short_time(summary.latest_at)}"
    # descendant_count counts the summaries below: none below a leaf, which says what it
    # was made from (its messages) on the next line.
    below = summary.descendant_count
    out.append(
        f"covers {span}" + (f", {below:,} summaries below" if below else "") + "\n", style="dim"
    )
    if parents:
        out.append(f"made from {len(parents)} summaries: {' '.join(parents)}\n", style="dim")
    if messages:
        out.append(f"made from {messages} message(s)\n", style="dim")
    if children:
        out.append(f"condensed into {' '.join(children)}\n", style="dim")
    if summary.file_ids:
        out.append(f"files {' '.join(summary.file_ids)}\n", style="dim")
    if summary.retired_reason:
        successor = f" by {summary.superseded_by}" if summary.superseded_by else ""
        out.append(f"retired: {summary.retired_reason}{successor}\n", style="yellow")
    out.append("\n")
    out.append(_cut(summary.content) + "\n")
    return out


def file_text(record: LargeFile, content: str | None = None) -> Text:
    """A large file's record and exploration summary, or its content once read."""
    out = Text()
    out.append(record.file_id, style="bold")
    out.append(f"  {record.file_name or '(unnamed)'}", style="bold yellow")
    out.append(
        f"  {record.token_count:,} tokens · {record.byte_size:,} bytes"
        f" · {record.mime_type or 'text'}",
        style="dim",
    )
    if record.message_id is not None:
        out.append(f" · from msg#{record.message_id}", style="dim")
    if content is not None:
        out.append("\n\n")
        out.append(_cut(content) + "\n")
        return out
    out.append("\n\nexploration summary\n", style="bold")
    out.append(record.exploration_summary.rstrip("\n") + "\n")
    out.append("\nenter shows the content\n", style="dim")
    return out
