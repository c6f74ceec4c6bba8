"""A message's host facts (``messages.metadata``) and envelope (``messages.envelope``)
stored compressed.

A transcript entry's facts beside its message (a Claude Code entry's ``cwd``, ``sessionId``,
``version``, ``gitBranch``, ``parentUuid``, ``uuid``, ``timestamp``, ...) are a few hundred
bytes of JSON whose keys, and many values, every entry repeats; so are a message's own keys
beside its content (``id``, ``model``, ``stop_reason``, ``usage``, ...). :func:`pack`
deflates such a text (zlib, with a dictionary of the hosts' own field names, so even one
short entry compresses) and writes it as text both back ends hold: ``~z1~`` and the bytes in
base64 (a JSON text never starts with ``~``). It packs only what comes back exactly and shorter;
:func:`unpack` reads either form.
"""

from __future__ import annotations

import base64
import zlib

__all__ = ["pack", "unpack"]

_PREFIX = "~z1~"
#: Texts shorter than this are stored as they are (nothing to gain).
_SHORTEST = 96
#: The field names (and a few values) of the hosts' transcript entries: what a short entry
#: shares with every other. Version 1: never changed once written (``~z1~`` names it).
_DICTIONARY = (
    b'{"entry":{"isSidechain":false,"userType":"external","cwd":"/","sessionId":"'
    b'","version":"","gitBranch":"main","parentUuid":"","isMeta":true,"type":"user",'
    b'"uuid":"","timestamp":"2026-","requestId":"req_","type":"assistant","message":'
    b'{"role":"assistant","model":"","id":"msg_","type":"message","stop_reason":null,'
    b'"usage":{"input_tokens":,"output_tokens":,"cache_read_input_tokens":}},'
    b'"toolUseResult":,"agentId":"","slug":"","leafUuid":"","logicalParentUuid":"",'
    b'"payload":{"type":"response_item","turn_id":"","call_id":"","status":"completed"}}}'
)


def pack(text: str) -> str:
    """The stored form of a JSON *text*: compressed when that is shorter and exact."""
    if len(text) < _SHORTEST:
        return text
    data = text.encode("utf-8", "surrogatepass")
    squeeze = zlib.compressobj(6, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _DICTIONARY)
    packed = _PREFIX + base64.b64encode(squeeze.compress(data) + squeeze.flush()).decode()
    if len(packed) >= len(text) or unpack(packed) != text:
        return text
    return packed


def unpack(stored: str) -> str:
    """The JSON text a stored form stands for."""
    if not stored.startswith(_PREFIX):
        return stored
    opened = zlib.decompressobj(-15, _DICTIONARY)
    data = opened.decompress(base64.b64decode(stored[len(_PREFIX) :])) + opened.flush()
    return data.decode("utf-8", "surrogatepass")
