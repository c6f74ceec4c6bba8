"""Transcript files: format detection and streaming, line-by-line reading.

Three formats:

* ``openclaw`` — OpenClaw / pi session JSONL (version 3): a ``session`` header line, then
  entries with ``id``/``parentId`` forming a tree. ``message`` entries carry user,
  assistant and ``toolResult`` messages; every other entry type (model changes, the host's
  own compaction summaries, labels, ...) is skipped and counted, but still links the tree.
  Version 1 files (no ids) are read as a linear history.
* ``claude_code`` — Claude Code transcripts: ``user``/``assistant`` entries with
  ``uuid``/``parentUuid``; ``system`` entries with ``subtype: compact_boundary`` link across
  a host compaction through ``logicalParentUuid``; the ``isCompactSummary`` user entry after
  a boundary is the host's own summary, not user speech, and is kept out of the messages.
  Sidechain (sub-agent) entries form their own conversation.
* ``messages`` — a JSON array or JSONL of messages in any shape :mod:`.shapes` accepts
  (OpenAI chat, Responses items, Anthropic). Entries are keyed by their position.

Reading is streaming: lines are parsed one at a time, and only ids, parent ids and byte
offsets are kept between passes, so memory does not grow with the size of the messages.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import ImportProblem, LosslessError
from ..timestamps import parse_ts
from .shapes import safe_id

__all__ = [
    "FORMATS",
    "Entry",
    "Line",
    "TranscriptFormat",
    "detect_transcript_format",
    "get_format",
    "head_hash",
    "read_lines",
]

#: How many bytes of the first line identify a file (rotation detection).
HEAD_BYTES = 4096


@dataclass
class Entry:
    """One transcript entry: a message to import, or a skipped line that may link the tree."""

    line_no: int
    start: int
    end: int
    entry_id: str | None
    parent_id: str | None
    message: Any = None
    shape: str | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] | None = None
    skip: str | None = None
    lane: str = "main"
    title: str | None = None
    host_compaction: dict[str, Any] | None = None
    #: Tool call ids this entry answers, when it holds nothing but tool results.
    answers: tuple[str, ...] = ()
    #: The model response this entry is a part of (Claude Code writes one line per block).
    group: str | None = None

    @property
    def is_message(self) -> bool:
        """Whether this entry becomes a stored message."""
        return self.skip is None and self.message is not None


@dataclass
class Line:
    """A complete line of a JSONL file: its number, byte span and parsed value (or error)."""

    line_no: int
    start: int
    end: int
    raw: bytes
    value: Any = None
    error: str | None = None


@dataclass
class FileIdentity:
    """What identifies one transcript file (its session and, for rotation checks, its head)."""

    format: str
    session_id: str
    header_id: str | None
    session_key: str | None = None
    lane_sessions: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def head_hash(path: Path) -> str:
    """Hash of the file's first line (up to 4 KiB): changes when a file is replaced."""
    with path.open("rb") as handle:
        head = handle.readline(HEAD_BYTES)
    return hashlib.sha256(head).hexdigest()


def read_lines(handle: BinaryIO, start: int = 0, line_no: int = 0) -> Iterator[Line]:
    """Yield the complete lines of a JSONL stream from byte offset *start*.

    Blank lines are passed over. A final line without a newline is yielded only if it parses
    (a host may be half-way through writing it); otherwise it is left for the next read.
    """
    handle.seek(start)
    offset = start
    for raw in handle:
        line_no += 1
        begin = offset
        offset += len(raw)
        complete = raw.endswith(b"\n")
        text = raw.strip()
        if not text:
            continue
        try:
            value = json.loads(text)
        except RecursionError:
            if not complete:
                return
            yield Line(line_no, begin, offset, raw, error="nested too deeply to read as JSON")
            continue
        except (ValueError, UnicodeDecodeError) as exc:
            if not complete:
                return
            yield Line(line_no, begin, offset, raw, error=f"not valid JSON ({exc})")
            continue
        yield Line(line_no, begin, offset, raw, value=value)


class TranscriptFormat(ABC):
    """How one transcript format maps lines to entries."""

    name: str = ""
    #: Entries form an id/parent tree whose active branch is imported.
    tree: bool = True

    @abstractmethod
    def sniff(self, first: Any) -> bool:
        """Whether the first parsed line looks like this format."""

    @abstractmethod
    def identify(self, path: Path, first: Any) -> FileIdentity:
        """The session this file belongs to, from its first line (and name)."""

    @abstractmethod
    def entry(self, line: Line) -> Entry:
        """Classify one parsed line."""


def _str(value: Any) -> str | None:
    """A non-empty string field; lone surrogates spelled out so it can be stored as an id."""
    return safe_id(value) if isinstance(value, str) and value else None


class OpenClawFormat(TranscriptFormat):
    """OpenClaw / pi session JSONL."""

    name = "openclaw"

    def sniff(self, first: Any) -> bool:
        return isinstance(first, Mapping) and first.get("type") == "session"

    def identify(self, path: Path, first: Any) -> FileIdentity:
        header = _str(first.get("id")) if isinstance(first, Mapping) else None
        return FileIdentity(self.name, header or safe_id(path.stem), header)

    def entry(self, line: Line) -> Entry:
        obj = line.value
        if not isinstance(obj, Mapping):
            raise ValueError("an OpenClaw entry must be a JSON object")
        kind = obj.get("type")
        entry_id = _str(obj.get("id"))
        parent = _str(obj.get("parentId"))
        entry = Entry(line.line_no, line.start, line.end, entry_id, parent)
        if kind == "session":
            entry.skip = "session header"
            entry.entry_id = None
        elif kind == "message":
            if entry_id is None:  # version 1: no ids, a linear history keyed by line
                entry.entry_id = f"line:{line.line_no}"
            message = obj.get("message")
            if not isinstance(message, Mapping):
                raise ValueError("message entry without a 'message' object")
            entry.message = message
            entry.shape = "openclaw"
            entry.created_at = parse_ts(obj.get("timestamp")) or parse_ts(message.get("timestamp"))
            entry.metadata = {"entry": {k: v for k, v in obj.items() if k != "message"}}
        else:
            entry.skip = str(kind) if isinstance(kind, str) else "entry without a type"
            if kind == "session_info":
                entry.title = _str(obj.get("name"))
        return entry


class ClaudeCodeFormat(TranscriptFormat):
    """Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``)."""

    name = "claude_code"
    _KNOWN = frozenset(
        {"user", "assistant", "system", "summary", "file-history-snapshot", "attachment"}
    )

    def sniff(self, first: Any) -> bool:
        if not isinstance(first, Mapping):
            return False
        if "sessionId" in first or "parentUuid" in first or "leafUuid" in first:
            return True
        return first.get("type") in ("summary", "file-history-snapshot") and "role" not in first

    def identify(self, path: Path, first: Any) -> FileIdentity:
        session = _str(first.get("sessionId")) if isinstance(first, Mapping) else None
        agent = _str(first.get("agentId")) if isinstance(first, Mapping) else None
        sidechain_file = bool(isinstance(first, Mapping) and first.get("isSidechain"))
        if session is None:
            # Older files open with summary lines that carry no session id; the file name is
            # the session id in Claude Code's layout (made storable: it need not be UTF-8).
            session = safe_id(path.stem)
        if sidechain_file:
            # A sub-agent's own file: its conversation sits in the parent session's family.
            sub = f"{session}:agent-{agent or safe_id(path.stem).removeprefix('agent-')}"
            return FileIdentity(self.name, sub, session, session_key=session)
        return FileIdentity(
            self.name,
            session,
            session,
            session_key=session,
            lane_sessions={"sidechain": (f"{session}:sidechain", session)},
        )

    def entry(self, line: Line) -> Entry:
        obj = line.value
        if not isinstance(obj, Mapping):
            raise ValueError("a Claude Code entry must be a JSON object")
        kind = obj.get("type")
        entry_id = _str(obj.get("uuid"))
        parent = _str(obj.get("parentUuid")) or _str(obj.get("logicalParentUuid"))
        entry = Entry(line.line_no, line.start, line.end, entry_id, parent)
        entry.lane = "sidechain" if obj.get("isSidechain") else "main"
        if kind in ("user", "assistant"):
            message = obj.get("message")
            if not isinstance(message, Mapping):
                raise ValueError(f"{kind} entry without a 'message' object")
            if obj.get("isCompactSummary"):
                entry.skip = "host compaction summary"
                entry.host_compaction = {
                    "summary_uuid": entry_id,
                    "boundary_uuid": parent,
                    "timestamp": obj.get("timestamp"),
                    "line": line.line_no,
                }
                return entry
            entry.message = message
            entry.shape = "anthropic"
            entry.created_at = parse_ts(obj.get("timestamp"))
            if kind == "assistant":
                entry.group = _str(message.get("id"))
            else:
                entry.answers = _tool_results(message.get("content"))
            entry.metadata = {"entry": {k: v for k, v in obj.items() if k != "message"}}
        elif kind == "system":
            subtype = obj.get("subtype")
            entry.skip = f"system {subtype}" if isinstance(subtype, str) else "system"
        else:
            entry.skip = str(kind) if isinstance(kind, str) else "entry without a type"
            if kind == "summary" or kind == "ai-title":
                entry.title = _str(obj.get("summary")) or _str(obj.get("aiTitle"))
            if entry.entry_id is None:
                entry.parent_id = None
        return entry


def _tool_results(content: Any) -> tuple[str, ...]:
    """The tool_use ids a user message answers, if it is made of tool results only."""
    if not isinstance(content, list) or not content:
        return ()
    ids: list[str] = []
    for block in content:
        if not isinstance(block, Mapping) or block.get("type") != "tool_result":
            return ()
        tool_id = _str(block.get("tool_use_id"))
        if tool_id is None:
            return ()
        ids.append(tool_id)
    return tuple(ids)


class MessagesFormat(TranscriptFormat):
    """A JSON array or JSONL file of messages in any supported shape."""

    name = "messages"
    tree = False

    def sniff(self, first: Any) -> bool:
        return isinstance(first, Mapping) and ("role" in first or "type" in first)

    def identify(self, path: Path, first: Any) -> FileIdentity:
        return FileIdentity(self.name, safe_id(path.stem), None)

    def entry(self, line: Line) -> Entry:
        obj = line.value
        entry = Entry(line.line_no, line.start, line.end, f"pos:{line.line_no}", None)
        entry.message = obj
        if isinstance(obj, Mapping):
            entry.created_at = parse_ts(obj.get("timestamp") or obj.get("created_at"))
        return entry


FORMATS: dict[str, TranscriptFormat] = {
    f.name: f for f in (OpenClawFormat(), ClaudeCodeFormat(), MessagesFormat())
}


def get_format(name: str) -> TranscriptFormat:
    """The format called *name*; a clear error for anything else."""
    try:
        return FORMATS[name]
    except KeyError:
        raise LosslessError(
            f"unknown transcript format {name!r}; use one of: {', '.join(FORMATS)}"
        ) from None


def first_value(path: Path) -> tuple[Any, bool]:
    """The first JSON line of *path* and whether the file is a JSON array."""
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, 1):
            text = raw.strip()
            if not text:
                continue
            if text.startswith(b"["):
                return None, True
            try:
                return json.loads(text), False
            except (ValueError, RecursionError):
                raise ImportProblem(
                    str(path), line_no, "the first line is not JSON; is this a transcript?"
                ) from None
    return None, False


def detect_transcript_format(path: Path) -> TranscriptFormat:
    """Detect the format of *path* from its first line."""
    first, is_array = first_value(path)
    if is_array:
        return FORMATS["messages"]
    if first is None:
        raise ImportProblem(str(path), 0, "the file is empty")
    for fmt in FORMATS.values():
        if fmt.sniff(first):
            return fmt
    raise ImportProblem(
        str(path),
        1,
        "cannot tell the transcript format from the first line; pass --format " + "|".join(FORMATS),
    )


def iter_json_array(handle: BinaryIO, chunk_size: int = 1 << 20) -> Iterator[Line]:
    """Stream the elements of a top-level JSON array without loading the whole file.

    Yields one :class:`Line` per element (``line_no`` is the element's 1-based index;
    ``start``/``end`` are the byte offsets of the element's JSON text in the file). A
    malformed element ends the stream with a final error line, since an array cannot be
    resynchronised after a syntax error.
    """
    decoder = json.JSONDecoder()
    # Incremental: a multi-byte character split between two reads is decoded whole.
    text_decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    buffer = ""
    cursor = 0  # characters of buffer already handled
    offset = 0  # byte offset in the file of buffer[cursor]
    index = 0
    started = False
    eof = False

    def read_more() -> None:
        nonlocal buffer, cursor, eof
        data = handle.read(chunk_size)
        buffer = buffer[cursor:]
        cursor = 0
        if data:
            buffer += text_decoder.decode(data)
        else:
            buffer += text_decoder.decode(b"", final=True)
            eof = True

    def advance(to: int) -> int:
        """Move the cursor to *to*; returns the byte offset there."""
        nonlocal cursor, offset
        offset += _utf8_len(buffer[cursor:to])
        cursor = to
        return offset

    while True:
        if not eof and len(buffer) - cursor < chunk_size:
            read_more()
        pos = cursor
        length = len(buffer)
        while pos < length and buffer[pos] in " \t\r\n,\ufeff":
            pos += 1
        if pos >= length:
            if eof:
                if started:
                    yield Line(index + 1, offset, offset, b"", error="the array is not closed")
                else:
                    yield Line(1, 0, 0, b"", error="not a JSON array")
                return
            advance(pos)
            read_more()
            continue
        if not started:
            if buffer[pos] != "[":
                yield Line(1, 0, 0, b"", error="not a JSON array")
                return
            started = True
            advance(pos + 1)
            continue
        if buffer[pos] == "]":
            yield from _after_array(handle, buffer[pos + 1 :], advance(pos + 1), index)
            return
        try:
            value, end = decoder.raw_decode(buffer, pos)
        except RecursionError:
            start = advance(pos)
            yield Line(index + 1, start, start, b"", error="bad element: nested too deeply")
            return
        except json.JSONDecodeError as exc:
            if not eof:
                advance(pos)
                read_more()
                continue
            start = advance(pos)
            yield Line(index + 1, start, start, b"", error=f"bad element: {exc}")
            return
        if end == length and not eof and not isinstance(value, dict | list | str):
            # A number (or literal) at the end of the buffer may continue in the next read.
            advance(pos)
            read_more()
            continue
        index += 1
        start = advance(pos)
        yield Line(index, start, advance(end), b"", value=value)


def _after_array(handle: BinaryIO, rest: str, offset: int, index: int) -> Iterator[Line]:
    """A problem line if anything but whitespace follows the array's closing bracket: it is
    not part of the array, and must not be dropped without a word."""
    while True:
        if rest.strip(" \t\r\n"):
            yield Line(index + 1, offset, offset, b"", error="data after the end of the array")
            return
        chunk = handle.read(1 << 16)
        if not chunk:
            return
        rest = chunk.decode("utf-8", errors="replace")


def _utf8_len(text: str) -> int:
    """Bytes *text* took in the file (undecodable bytes come back as they were)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", errors="surrogateescape"))
