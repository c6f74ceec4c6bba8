"""How values are written to the store and read back exactly: the JSON codec, text and ids
safe for any UTF-8 store, and the envelope slot kinds.

A stored message is an *envelope* (every key of the source message, the keys that carry
blocks left as slots) and its parts; these are the slot kinds :meth:`StoredMessage.to_source`
fills the envelope with. Everything here is plain functions over plain values: every layer may
use it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from .errors import UnknownShapeError

__all__ = [
    "CONTENT",
    "LIST",
    "SCALAR",
    "SUMMARY_MESSAGE_LEAD",
    "WHOLE",
    "chat_fingerprint",
    "clean_text",
    "content_hash",
    "dumps",
    "has_lone_surrogates",
    "loads",
    "safe_id",
]

_SURROGATE = re.compile("[\ud800-\udfff]")
#: Slot kinds: one block, a list of blocks, or the whole message as one block.
SCALAR = "s"
LIST = "l"
WHOLE = "."
#: Slot kind for a string that is exactly the message's plain text: stored once, in
#: ``messages.content``, with no part row (the common case of a plain chat message).
CONTENT = "c"


def has_lone_surrogates(text: str) -> bool:
    """Whether *text* holds a lone surrogate (JSON can carry it; UTF-8 cannot)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def clean_text(text: str) -> str:
    """Text safe to store as UTF-8: lone surrogates become U+FFFD (raw JSON keeps them)."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub("\ufffd", text)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

#: Key of the wrapper object :func:`dumps` writes for values holding lone surrogates.
_WRAP = "\x00lossless:wtf8"
#: Prefix of a string stored as the Latin-1 spelling of its WTF-8 bytes (inside the wrapper).
_WTF8 = "\x00\ufdd0"
#: A run of digits long enough to be an integer beyond 64 bits (orjson reads those as floats).
_LONG_DIGITS = re.compile(r"\d{19}")


def safe_id(value: str) -> str:
    """An id that is valid UTF-8: lone surrogates spelled as ``\\udXXX``, unlike U+FFFD
    replacement keeping ids that differ only in their surrogates apart."""
    if value.isascii() or not _SURROGATE.search(value):
        return value
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)


def _wtf8(value: Any) -> Any:
    if isinstance(value, str):
        if _SURROGATE.search(value) or value.startswith(_WTF8):
            return _WTF8 + value.encode("utf-8", "surrogatepass").decode("latin-1")
        return value
    if isinstance(value, dict):
        return {_wtf8(k): _wtf8(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_wtf8(v) for v in value]
    return value


def _unwtf8(value: Any) -> Any:
    if isinstance(value, str):
        if value.startswith(_WTF8):
            return value[len(_WTF8) :].encode("latin-1").decode("utf-8", "surrogatepass")
        return value
    if isinstance(value, dict):
        return {_unwtf8(k): _unwtf8(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwtf8(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """Compact JSON that any UTF-8 store accepts, read back exactly by :func:`loads`.

    orjson on the hot path; the standard library for what orjson refuses (lone surrogates,
    integers beyond 64 bits, non-string keys). JSON cannot carry lone surrogates (an escaped
    pair of them reads back as one astral character), so a value holding any is written as
    ``{"\\u0000lossless:wtf8": value}`` with those strings spelled as the Latin-1 text of
    their WTF-8 bytes behind a marker; a value that merely looks like that wrapper is wrapped
    too, so reading is never ambiguous.
    """
    if type(value) is dict and _WRAP in value and len(value) == 1:
        return _ENCODER.encode({_WRAP: _wtf8(value)})
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        pass
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise UnknownShapeError("the message is nested too deeply to store as JSON") from None
    if _SURROGATE.search(text):
        text = _ENCODER.encode({_WRAP: _wtf8(value)})
    return text


def loads(text: str) -> Any:
    """Parse JSON written by :func:`dumps`."""
    if _LONG_DIGITS.search(text):
        value = json.loads(text)  # exact for integers of any size
    else:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = json.loads(text)
    if type(value) is dict and len(value) == 1 and _WRAP in value:
        return _unwtf8(value[_WRAP])
    return value


def content_hash(text: str) -> str:
    """SHA-256 of a text (how transplant recognises content the target already holds)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


#: How the message begins that carries lossless's summaries into a host's own message list
#: (Hermes Agent's): lossless's output, never stored back as the conversation's.
SUMMARY_MESSAGE_LEAD = "[lossless: summaries of the earlier conversation"


def chat_fingerprint(message: Mapping[str, Any]) -> str:
    """What identifies an OpenAI chat message whatever a host adds to it or renders it as:
    its role, its content (``None``, ``""`` and none alike), the tool call it answers and the
    ids of the tool calls it makes."""
    calls = [c.get("id") for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    key = [
        message.get("role"),
        message.get("content") or "",
        message.get("tool_call_id") or "",
        calls,
    ]
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
