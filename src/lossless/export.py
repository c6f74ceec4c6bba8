"""Data out: conversations written as lossless's own JSONL, as Markdown, or as the message
arrays of the OpenAI and Anthropic APIs.

* ``jsonl`` — the import format of :mod:`lossless.ingest.formats.lossless`: a header naming
  the conversations, then each conversation's line and its messages exactly as they were
  ingested (``StoredMessage.to_source()``, with the external id, time, host record kind and
  metadata of each). ``lossless import`` of it, into any store, stores every message again
  with the same text, parts, envelope, ids and times, and gives each conversation its
  session id, family, title and status back.
* ``markdown`` — for people: a heading per conversation, each message with its role and
  time, reasoning, tool calls and tool outputs folded in ``<details>`` blocks.
* ``openai`` / ``anthropic`` — the messages in the providers' wire shapes, made by the
  renderers of the assembled context (:func:`lossless.assemble.render`): one JSON array for
  one conversation; for several, one JSON object a line with each conversation's array.

A forgotten message stays a tombstone in ``jsonl`` (its place, role and time, and when it was
forgotten: importing the file keeps every message's number) and in ``markdown`` (a line saying
so); the provider formats, message arrays for a model, leave it out.

Summaries are in none of them: they are lossless's reading of the conversation, not what was
said (``lossless migrate-store`` and ``lossless backup`` copy a whole store, DAG included).

Every message leaves through one function, the *view* (:func:`as_stored` unless another is
given): the one place where what is written can be changed, such as masking its text.
Output is streamed: a conversation's messages are read a page at a time (the provider
formats, which merge turns, read one conversation at a time).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .assemble import blocks, render
from .codec import has_lone_surrogates, loads
from .errors import ArgumentError, LosslessError
from .ingest.formats.lossless import CONVERSATION, HEADER, VERSION
from .model import Conversation, Message, StoredMessage
from .redact import restore

if TYPE_CHECKING:
    from .services import Services

__all__ = ["FORMATS", "View", "as_stored", "export", "write_atomically"]

#: The formats :func:`export` writes.
FORMATS: tuple[str, ...] = ("jsonl", "markdown", "openai", "anthropic")

#: Messages read from the store at a time.
PAGE = 500

#: What a message is written as: the stored message in, the message to write out.
View = Callable[[StoredMessage], StoredMessage]


def as_stored(message: StoredMessage) -> StoredMessage:
    """The default view: every message as it is stored."""
    return message


def revealing(services: Services) -> View:
    """The view that shows masked secrets: each message whose secrets were masked as it came
    (its kept original); the others as stored."""
    store = services.store

    def view(message: StoredMessage) -> StoredMessage:
        for _, original in store.masked_originals([message.message_id]):
            return restore(message, loads(original.decode("utf-8")))
        return message

    return view


def export(
    services: Services,
    conversation: Conversation | None,
    format: str = "jsonl",
    *,
    family: bool = False,
    view: View = as_stored,
) -> Iterator[str]:
    """*conversation*, its family (with *family*: every conversation sharing its session
    key) or, for ``None``, every conversation of the store, in *format* (see the module
    docstring), as pieces of text each ending with a newline (a JSON line, a Markdown
    block): joined, they are the file. One conversation asked for alone is one JSON array in
    the provider formats. The format is checked now; the store is read as the pieces are
    taken."""
    if format not in FORMATS:
        raise ArgumentError(f"unknown export format {format!r}; use one of: {', '.join(FORMATS)}")
    store = services.store
    if conversation is None:
        if family:
            raise ArgumentError("a family is a conversation's: name the conversation")
        selected = [row.conversation for row in store.list_conversations()]
    elif family:
        selected = [store.get_conversation(i) for i in store.family_ids(conversation)]
    else:
        selected = [conversation]
    if format == "jsonl":
        return _jsonl(services, selected, view)
    if format == "markdown":
        return _markdown(services, selected, view)
    single = conversation is not None and not family
    return _provider(services, selected, format, single, view)


def _messages(
    services: Services, conv: Conversation, view: View, *, tombstones: bool = True
) -> Iterator[StoredMessage]:
    """A conversation's messages in order, a page at a time, each through *view*; forgotten
    ones (tombstones: a place, a role and a time, no text) as they are, or left out when not
    *tombstones*."""
    after = 0
    while True:
        page = services.store.get_messages(conv.conversation_id, after_seq=after, limit=PAGE)
        for message in page:
            if message.forgotten_at is None:
                yield view(message)
            elif tombstones:
                yield message
        if len(page) < PAGE:
            return
        after = page[-1].seq


def _json(value: Any) -> str:
    """One line of JSON, characters as they are (text holding half a surrogate pair, which
    UTF-8 cannot carry, is written with ``\\u`` escapes)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if has_lone_surrogates(text):
        text = json.dumps(value, separators=(",", ":"))
    return text + "\n"


# --- jsonl ---------------------------------------------------------------------------------


def _jsonl(services: Services, selected: Sequence[Conversation], view: View) -> Iterator[str]:
    yield _json(
        {
            "type": HEADER,
            "version": VERSION,
            "conversations": [
                {
                    "conversation_id": c.conversation_id,
                    "session_id": c.session_id,
                    "session_key": c.session_key,
                }
                for c in selected
            ],
        }
    )
    for conv in selected:
        yield _json(
            {
                "type": CONVERSATION,
                "conversation_id": conv.conversation_id,
                "session_id": conv.session_id,
                "session_key": conv.session_key,
                "title": conv.title,
                "status": conv.status,
                "created_at": conv.created_at,
                "updated_at": conv.updated_at,
                "metadata": dict(conv.metadata),
            }
        )
        for m in _messages(services, conv, view):
            line = {
                "conversation_id": conv.conversation_id,
                "seq": m.seq,
                "external_id": m.external_id,
                "created_at": m.created_at,
                "format": m.source_format,
                "host_meta": m.host_meta,
                "metadata": None if m.metadata is None else dict(m.metadata),
            }
            if m.forgotten_at is not None:
                # A tombstone stays one: its place, role and time, when it was forgotten.
                line["forgotten_at"] = m.forgotten_at
                line["message"] = {"role": m.role, "content": ""}
            else:
                source = m.to_source()
                line["message"] = source.to_dict() if isinstance(source, Message) else source
            yield _json(line)


# --- markdown ------------------------------------------------------------------------------


def _markdown(services: Services, selected: Sequence[Conversation], view: View) -> Iterator[str]:
    store = services.store
    for n, conv in enumerate(selected):
        count = store.message_count(conv.conversation_id)
        first = store.get_messages(conv.conversation_id, limit=1)
        last = store.last_messages(conv.conversation_id, 1)
        facts = [f"conversation {conv.conversation_id}", f"session {_code(conv.session_id)}"]
        if conv.session_key is not None and conv.session_key != conv.session_id:
            facts.append(f"family {_code(conv.session_key)}")
        if conv.status != "active":
            facts.append(conv.status)
        span = f"{count:,} message{'s' * (count != 1)}"
        if first and last:
            span += f", {_when(first[0].created_at)} to {_when(last[0].created_at)}"
        title = " ".join((conv.title or conv.session_id).split())
        gap = "\n" if n else ""
        yield f"{gap}# {_text(title)}\n\n{' · '.join(facts)}  \n{span}\n"
        tools: dict[str, str] = {}  # call id → tool name, for the outputs that answer them
        for m in _messages(services, conv, view):
            yield _markdown_message(m, tools)


#: Part types shown as a note when they carry no text (their bytes are not for reading).
_ATTACHMENTS = ("image", "document", "audio", "file")


def _markdown_message(m: StoredMessage, tools: dict[str, str]) -> str:
    who = m.role if m.host_meta is None else f"host ({m.host_meta})"
    out = [f"\n### {who} · {_when(m.created_at)} · msg#{m.message_id}\n"]
    if m.forgotten_at is not None:
        out.append(f"\n*(forgotten on {_when(m.forgotten_at)} at the owner's request)*\n")
        return "".join(out)
    for b in blocks(m):
        if b.kind == "call":
            tools[b.call_id] = b.name
            shown = (
                b.input
                if isinstance(b.input, str)
                else json.dumps(b.input, indent=2, ensure_ascii=False)
            )
            label = f"tool call: {_html(b.name)}"
            out.append(_details(label, _fenced(shown, "json" * (not isinstance(b.input, str)))))
        elif b.kind == "result":
            label = f"tool output: {_html(tools.get(b.call_id, b.call_id or 'tool'))}"
            label += " (error)" if b.is_error else ""
            out.append(_details(label, _fenced(b.text)))
        elif b.kind == "text" and b.name == "reasoning":
            out.append(_details("reasoning", _text(b.text)))
        elif b.kind == "text":
            out.append(f"\n{_text(b.text)}\n")
    unread = [p.type for p in m.parts if p.type in _ATTACHMENTS and not p.text]
    if unread:
        out.append(f"\n*({', '.join(unread)} not shown)*\n")
    if len(out) == 1:
        out.append("\n*(empty)*\n")
    return "".join(out)


def _details(summary: str, body: str) -> str:
    return f"\n<details>\n<summary>{summary}</summary>\n\n{body}\n\n</details>\n"


def _fenced(text: str, language: str = "") -> str:
    """*text* in a code fence longer than any run of backticks in it."""
    text = _text(text)
    run, longest = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _code(text: str) -> str:
    """*text* as inline code (delimited by more backticks than it holds in a row)."""
    ticks = "`"
    while ticks in text:
        ticks += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{_text(text)}{pad}{ticks}"


def _html(text: str) -> str:
    """*text* inside an HTML element (a ``<summary>``)."""
    return _text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _text(text: str) -> str:
    """*text* as UTF-8 can carry it: half a surrogate pair (stored exactly, as it came) is
    shown as its escape."""
    if has_lone_surrogates(text):
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _when(stamp: str) -> str:
    """A stored time for people: ``2026-03-02 09:00:36 UTC``."""
    return f"{stamp[:19].replace('T', ' ')} UTC"


# --- openai / anthropic --------------------------------------------------------------------


def _provider(
    services: Services, selected: Sequence[Conversation], format: str, single: bool, view: View
) -> Iterator[str]:
    for conv in selected:
        # A message array for a model: a forgotten message has nothing to say there.
        rendered = render(list(_messages(services, conv, view, tombstones=False)), format)
        if single:
            if not rendered:
                yield "[]\n"
                continue
            yield "[\n"
            for n, item in enumerate(rendered):
                yield _json(item)[:-1] + (",\n" if n < len(rendered) - 1 else "\n")
            yield "]\n"
        else:
            yield _json(
                {
                    "conversation_id": conv.conversation_id,
                    "session_id": conv.session_id,
                    "title": conv.title,
                    "messages": rendered,
                }
            )


# --- files ---------------------------------------------------------------------------------


def write_atomically(path: str | os.PathLike[str], pieces: Iterable[str]) -> int:
    """Write *pieces* (UTF-8) to *path* through a temporary file beside it, renamed over
    *path* only once everything is written and on disk: a reader never sees half an export,
    and a failure (or Ctrl-C) leaves what was there before. A new file is readable by its
    owner only (it holds conversations). Returns the bytes written."""
    target = Path(path).expanduser()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _write_error(target, exc) from exc
    written = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            for piece in pieces:
                data = piece.encode("utf-8")
                handle.write(data)
                written += len(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        with suppress(OSError):
            os.unlink(tmp)
        raise _write_error(target, exc) from exc
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return written


def _write_error(target: Path, exc: OSError) -> LosslessError:
    why = exc.strerror or str(exc)
    return LosslessError(
        f"cannot write {target}: {why}; nothing was written there (check that"
        f" {target.parent} exists and is writable, and that there is room on its disk)"
    )
