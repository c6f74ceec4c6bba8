"""The first moment of ``lossless mcp`` on stdio: the client's handshake answered at once.

A host starts its MCP servers with every session and gives each a few seconds to answer
``initialize``; loading the MCP SDK and the engine takes longer than that on a busy machine.
So ``lossless mcp`` (in the store's scope, on stdio) takes the wire first, starts loading the
SDK and opening the store on another thread, and answers an ``initialize`` that arrives
meanwhile itself, with the very result the SDK gives (``tests/test_mcp_start.py`` compares
them). The SDK then reads that request again (so that its session is initialized as if it
had answered) and its second answer is dropped (:class:`Opening`'s ``answered``); everything
after it, ``tools/list`` included, is the SDK's.

This module imports neither the SDK nor the engine: only the standard library and the tools'
declaration.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from . import __version__
from .retrieval.tools import STORE_SCOPE, server_instructions

__all__ = [
    "HANDSHAKE_VERSIONS",
    "INSTALL_HINT",
    "MAX_MESSAGE_BYTES",
    "Opening",
    "initialize_result",
    "open_wire",
]

logger = logging.getLogger(__name__)

INSTALL_HINT = "the MCP server needs the official MCP Python SDK: pip install 'lossless[mcp]'"

#: The protocol versions the handshake (``initialize``) is served at, oldest first, as the MCP
#: SDK negotiates them: a version asked for that is not here gets the newest.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: The per-request envelope key of the protocol versions that have no handshake.
_MODERN_KEY = "io.modelcontextprotocol/protocolVersion"
#: The largest message read on stdio; a longer line is answered with an error and skipped.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

#: What the server declares it can do (the SDK's answer for lossless's server: tools, and
#: the prompts and resources it lists empty).
_CAPABILITIES = {
    "prompts": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": False},
    "tools": {"listChanged": False},
}


@dataclass
class Opening:
    """The wire as the front leaves it to the SDK."""

    #: The client's side of the protocol: its messages in, the server's replies out.
    wire_in: IO[bytes]
    wire_out: IO[bytes]
    #: The first line read (``b""`` when the client left at once); the SDK reads it first.
    first: bytes
    #: The id of the ``initialize`` the front answered (the SDK's answer to it is dropped),
    #: or ``None`` when the front answered nothing.
    answered: int | str | None = None


def take_wire() -> tuple[IO[bytes], IO[bytes]]:
    """The protocol's stdin and stdout, taken from this process: fd 0 then reads the null
    device and fd 1 writes to stderr, so nothing printed by accident reaches the wire."""
    wire_in = os.fdopen(os.dup(0), "rb")
    wire_out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


def initialize_result(
    params: Any, *, instructions: str, name: str = "lossless", version: str = __version__
) -> dict[str, Any] | None:
    """The result the SDK gives an ``initialize`` with *params*, or ``None`` when the params
    are not plainly ones it accepts (the SDK then answers, in its words)."""
    if not isinstance(params, Mapping):
        return None
    requested = params.get("protocolVersion")
    client = params.get("clientInfo")
    meta = params.get("_meta")
    if (
        not isinstance(requested, str)
        or not isinstance(params.get("capabilities"), Mapping)
        or not isinstance(client, Mapping)
        or not all(isinstance(client.get(key), str) for key in ("name", "version"))
        or not all(isinstance(client.get(key, ""), str) for key in ("title", "websiteUrl"))
        or (meta is not None and not isinstance(meta, Mapping))
        or (isinstance(meta, Mapping) and _MODERN_KEY in meta)
    ):
        return None
    return {
        "capabilities": _CAPABILITIES,
        "instructions": instructions,
        "protocolVersion": requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1],
        "serverInfo": {"name": name, "title": "lossless", "version": version},
    }


def open_wire() -> Opening:
    """Take the wire, read the client's first message and, when it is an ``initialize`` in
    the store's scope that the SDK would accept, answer it (see the module docstring)."""
    wire_in, wire_out = take_wire()
    first = wire_in.readline(MAX_MESSAGE_BYTES + 1)
    opening = Opening(wire_in, wire_out, first)
    if not first.endswith(b"\n") and len(first) > MAX_MESSAGE_BYTES:
        return opening
    try:
        message = json.loads(first)
    except ValueError:
        return opening
    if (
        not isinstance(message, dict)
        or message.get("jsonrpc") != "2.0"
        or message.get("method") != "initialize"
    ):
        return opening
    rid = message.get("id")
    if isinstance(rid, bool) or not isinstance(rid, int | str):
        return opening
    result = initialize_result(message.get("params"), instructions=server_instructions(STORE_SCOPE))
    if result is None:
        return opening
    reply = {"jsonrpc": "2.0", "id": rid, "result": result}
    wire_out.write(json.dumps(reply, separators=(",", ":")).encode("utf-8") + b"\n")
    opening.answered = rid
    logger.debug(
        "answered initialize before the SDK loaded (protocol %s)", result["protocolVersion"]
    )
    return opening
