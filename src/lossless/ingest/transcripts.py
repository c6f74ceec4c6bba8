"""Transcript files: format detection and streaming, line-by-line reading.

The formats, one module each under :mod:`lossless.ingest.formats`:

* ``openclaw`` — OpenClaw / pi session JSONL: a ``session`` header, then an entry tree.
* ``claude_code`` — Claude Code transcripts: an entry tree of ``uuid``/``parentUuid``, with the
  host's own records kept and marked, and compactions joined into one branch.
* ``codex`` — Codex CLI rollouts: ``session_meta``, then ``response_item`` lines (Responses
  items) with the rest of Codex's bookkeeping skipped.
* ``lossless`` — lossless's own export (``lossless export``): a header naming the
  conversations, then each conversation's messages exactly as they were ingested.
* ``messages`` — a JSON array or JSONL of messages in any shape :mod:`.shapes` accepts
  (OpenAI chat, Responses items, Anthropic). Entries are keyed by their position.

``openclaw_trajectory`` names OpenClaw's trace files, which are recognised and not imported.
Each format is told from the content of the file's first line, never from its name.

Reading is streaming: lines are parsed one at a time, and only ids, parent ids and byte
offsets are kept between passes, so memory does not grow with the size of the messages.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import ImportProblem, LosslessError
from .entries import Entry, FileIdentity, Line, TranscriptFormat
from .formats.claude_code import ClaudeCodeFormat
from .formats.codex import CodexFormat
from .formats.hermes import HermesFormat
from .formats.lossless import LosslessFormat
from .formats.messages import MessagesFormat
from .formats.openclaw import OpenClawFormat, OpenClawTrajectoryFormat

logger = logging.getLogger(__name__)

__all__ = [
    "FORMATS",
    "Entry",
    "FileIdentity",
    "Line",
    "TranscriptFormat",
    "detect_transcript_format",
    "get_format",
    "head_hash",
    "head_values",
    "read_lines",
]

#: How many bytes of the first line identify a file (rotation detection).
HEAD_BYTES = 4096
#: How far into a file its identity is looked for (lines, bytes).
HEAD_LINES = 64
HEAD_SCAN_BYTES = 1 << 20


def head_hash(path: Path) -> str:
    """Hash of the file's first line (up to 4 KiB): changes when a file is replaced."""
    with path.open("rb") as handle:
        head = handle.readline(HEAD_BYTES)
    return hashlib.sha256(head).hexdigest()


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (JSON numbers are finite; write it as a string or null)")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; one that repeats a key keeps the key's last value (as every
    JSON reader does) and says so: a warning per key, which the CLI shows once."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        keys = [k for k, _ in pairs]
        repeated = next(k for i, k in enumerate(keys) if k in keys[:i])
        logger.warning(
            "the input holds a JSON object that repeats the key %r: only its last value is"
            " stored (a JSON object keeps one value per key); write each key once to keep"
            " every value",
            repeated[:60],
        )
    return obj


#: JSON as JSON is: Python's own ``NaN``/``Infinity`` extensions are refused, not turned into
#: null on the way to the store; an object's repeated key is said (:func:`_object`).
JSON = json.JSONDecoder(parse_constant=_not_json, object_pairs_hook=_object)


def parse_json(raw: bytes) -> Any:
    """One JSON text (bytes in any encoding JSON allows, a BOM included) as
    :data:`JSON` reads it."""
    return JSON.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))


_WIDE_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}


#: The first bytes of compressed and archive files, which no JSON text starts with.
_PACKED = {
    b"\x1f\x8b": "gzip-compressed",
    b"\x28\xb5\x2f\xfd": "zstd-compressed",
    b"BZh": "bzip2-compressed",
    b"\xfd7zXZ\x00": "xz-compressed",
    b"PK\x03\x04": "a zip archive",
}


def check_encoding(path: Path) -> None:
    """Refuse a file written in UTF-16 or UTF-32 (a Windows shell's redirect writes UTF-16):
    its lines cannot be split on newline bytes, so it would be misread line by line. Refuse a
    compressed file or an archive for what it is, rather than as text that is not UTF-8."""
    with path.open("rb") as handle:
        head = handle.read(8)
    for magic, packed in _PACKED.items():
        if head.startswith(magic):
            what = packed if packed.startswith("a ") else f"{packed} data"
            raise ImportProblem(
                str(path),
                1,
                f"{what}, not JSON text: unpack it and import what it holds",
                "malformed",
            )
    name = None
    for bom, wide in _WIDE_BOMS.items():
        # A byte order mark, then a character with the zero bytes of that width (JSON starts
        # with an ASCII character): two junk bytes that happen to look like a mark are not.
        after = head[len(bom) : len(bom) + (4 if wide == "UTF-32" else 2)]
        if head.startswith(bom) and after and 0 in after and any(after):
            name = wide
            break
    head = head[:4]
    # (Zero bytes between newlines alone are NUL lines, not wide text: a wide JSON text shows
    # one of its characters in the first four bytes.)
    if name is None and len(head) == 4 and any(b not in b"\x00\t\r\n " for b in head):
        # Without a byte order mark: JSON starts with an ASCII character, so the zero bytes
        # around the first two characters give the width away (RFC 4627, section 3).
        zeros = (head[0] == 0, head[1] == 0, head[2] == 0, head[3] == 0)
        name = {  # which of the first four bytes are zero → the encoding
            (True, True, True, False): "UTF-32",
            (False, True, True, True): "UTF-32",
            (True, False, True, False): "UTF-16",
            (False, True, False, True): "UTF-16",
        }.get(zeros)
    if name is not None:
        raise ImportProblem(
            str(path),
            1,
            f"the file is {name} text; lossless reads UTF-8 JSON: convert it first, e.g."
            f" iconv -f {name} -t UTF-8 {path.name} > {path.stem}.utf8{path.suffix}",
            "malformed",
        )


def _undecodable(exc: UnicodeDecodeError) -> str:
    return (
        f"not UTF-8 text ({exc.reason} at byte {exc.start}: 0x{exc.object[exc.start]:02x});"
        " lossless reads UTF-8 JSON: convert the file, e.g. iconv -f LATIN1 -t UTF-8"
    )


#: The longest line a transcript reader holds in memory by default (the setting
#: ``max_line_bytes``); a longer one is reported and skipped, read in pieces (a file of zeros
#: with no line break is not read whole).
MAX_LINE_BYTES = 64 << 20


def over_limit(what: str, size: int, limit: int, setting: str) -> str:
    """What a reader says of *what* (``a line``, ``the file``) of *size* bytes, over *limit*:
    both sizes, and the setting that raises the limit (and its environment variable)."""
    return (
        f"{what} of {size:,} bytes, over the limit of {limit:,} (the setting {setting},"
        f" or LOSSLESS_{setting.upper()})"
    )


def _bounded(handle: BinaryIO, limit: int) -> Iterator[tuple[bytes, int]]:
    """The lines of *handle*, each with its length in bytes; a line over *limit* bytes comes
    as ``b""`` with its full length (what it held is read and dropped, a megabyte at a time)."""
    while True:
        raw = handle.readline(limit + 1)
        if not raw:
            return
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        size = len(raw)
        while True:
            rest = handle.readline(1 << 20)
            size += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield b"", size


def read_lines(
    handle: BinaryIO, start: int = 0, line_no: int = 0, *, limit: int = MAX_LINE_BYTES
) -> Iterator[Line]:
    """Yield the complete lines of a JSONL stream from byte offset *start*.

    Blank lines are passed over. A final line without a newline is yielded only if it parses
    (a host may be half-way through writing it); otherwise it is left for the next read. A
    line over *limit* bytes is an error line (and never held whole).
    """
    handle.seek(start)
    offset = start
    for raw, size in _bounded(handle, limit):
        line_no += 1
        begin = offset
        offset += size
        if not raw:
            error = over_limit("a line", size, limit, "max_line_bytes") + (
                ": not read (is this file a transcript?)"
            )
            yield Line(line_no, begin, offset, b"", error=error)
            continue
        complete = raw.endswith(b"\n")
        text = raw.strip()
        if not text:
            continue
        try:
            value = parse_json(text)
        except RecursionError:
            if not complete:
                return
            yield Line(line_no, begin, offset, raw, error="nested too deeply to read as JSON")
            continue
        except UnicodeDecodeError as exc:
            if not complete:
                return
            yield Line(line_no, begin, offset, raw, error=_undecodable(exc))
            continue
        except ValueError as exc:
            if not complete:
                return
            yield Line(line_no, begin, offset, raw, error=f"not valid JSON ({exc})")
            continue
        yield Line(line_no, begin, offset, raw, value=value)


#: Every format, in the order detection tries them (the most specific first).
FORMATS: dict[str, TranscriptFormat] = {
    f.name: f
    for f in (
        OpenClawTrajectoryFormat(),
        OpenClawFormat(),
        ClaudeCodeFormat(),
        CodexFormat(),
        HermesFormat(),
        LosslessFormat(),
        MessagesFormat(),
    )
}


def get_format(name: str) -> TranscriptFormat:
    """The format called *name*; a clear error for anything else."""
    try:
        return FORMATS[name]
    except KeyError:
        raise LosslessError(
            f"unknown transcript format {name!r}; use one of: {', '.join(FORMATS)}"
        ) from None


def head_values(path: Path, lines: int = HEAD_LINES) -> tuple[list[Any], bool]:
    """The first *lines* JSON lines of *path* (within the first MiB; lines that do not parse
    are left out: the import reports them) and whether the file is a JSON array. A file none
    of whose first lines is JSON is not a transcript (:class:`ImportProblem`)."""
    values, is_array, _ = _head(path, lines)
    return values, is_array


def _head(path: Path, lines: int) -> tuple[list[Any], bool, int]:
    """:func:`head_values`, and the line number of the first value."""
    values: list[Any] = []
    first_line = 0
    read = 0
    first_bad: int | None = None
    undecodable: UnicodeDecodeError | None = None
    first_error: BaseException | None = None
    seen_text = False
    with path.open("rb") as handle:
        # A line longer than the head's whole budget is not held (it comes as b"").
        for line_no, (raw, size) in enumerate(_bounded(handle, HEAD_SCAN_BYTES), 1):
            read += size
            if not raw:
                first_bad = first_bad or line_no
                first_error = first_error or ValueError(
                    f"a line of {size:,} bytes with no line break is not JSON"
                )
            text = raw.strip()
            if line_no == 1:  # a byte order mark opens a JSON array as well as JSONL
                text = text.removeprefix(b"\xef\xbb\xbf").strip()
            if text and not seen_text and text.startswith(b"["):
                return [], True, line_no
            if text:
                seen_text = True
                try:
                    values.append(parse_json(text))
                    first_line = first_line or line_no
                except (ValueError, RecursionError) as exc:
                    if first_bad is None:
                        first_bad, first_error = line_no, exc
                        if isinstance(exc, UnicodeDecodeError):
                            undecodable = exc
            if len(values) >= lines or read >= HEAD_SCAN_BYTES:
                break
    if not values and undecodable is not None:
        raise ImportProblem(str(path), first_bad or 1, _undecodable(undecodable), "malformed")
    if not values and first_bad is not None:
        why = "nested too deeply" if isinstance(first_error, RecursionError) else first_error
        said = str(why) if "is not JSON" in str(why) else f"not JSON ({why})"
        raise ImportProblem(
            str(path),
            first_bad,
            f"{said}; no line after it is JSON either: is this a transcript? (if it is, name"
            f" its format: --format {'|'.join(sorted(FORMATS))})",
            "malformed",
        )
    return values, False, first_line


def no_known_shape(value: Mapping[str, Any]) -> str:
    """How an object that is no message and no entry of any format is named (by its keys)."""
    keys = sorted(map(str, value))
    shown = ", ".join(keys[:8]) + (f", ... ({len(keys)} keys)" if len(keys) > 8 else "")
    return f"an object of no shape lossless knows (keys: {shown or 'none'})"


#: What a first line that is JSON but no object is, in JSON's words.
_JSON_TYPES: dict[type, str] = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def detect_transcript_format(path: Path) -> TranscriptFormat:
    """Detect the format of *path* from its first line."""
    head, is_array, line_no = _head(path, 1)
    if is_array:
        return FORMATS["messages"]
    if not head:
        raise ImportProblem(str(path), 0, "the file is empty", "empty")
    first = head[0]
    for fmt in FORMATS.values():
        if fmt.sniff(first):
            return fmt
    what = (
        no_known_shape(first)
        if isinstance(first, dict)
        else f"a JSON {_JSON_TYPES.get(type(first), 'value')}, not a message or an entry"
    )
    raise ImportProblem(
        str(path),
        line_no,
        f"{what}: cannot tell the transcript format from it; if the file is a"
        " transcript, pass --format "
        + "|".join(name for name, fmt in FORMATS.items() if fmt.not_a_transcript is None),
        "unknown_shape",
    )


def iter_json_array(handle: BinaryIO, chunk_size: int = 1 << 20) -> Iterator[Line]:
    """Stream the elements of a top-level JSON array without loading the whole file.

    Yields one :class:`Line` per element (``line_no`` is the element's 1-based index;
    ``start``/``end`` are the byte offsets of the element's JSON text in the file). A
    malformed element ends the stream with a final error line, since an array cannot be
    resynchronised after a syntax error.
    """
    decoder = JSON
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
