"""The first moment of ``lossless mcp`` on stdio: the client's handshake answered at once.

A host starts its MCP servers with every session and gives each a few seconds to answer
``initialize``; loading the MCP SDK and the engine takes longer than that on a busy machine,
and some hosts (Codex) send the turn's first request to the model without waiting for
``tools/list`` to be answered. So ``lossless mcp`` (in the store's scope, on stdio) takes the
wire first and starts loading the SDK and opening the store on another thread; meanwhile one
reader thread reads the wire and answers, itself:

- an ``initialize`` that is the client's first message, with the very result the SDK gives
  (``tests/test_mcp_start.py`` compares them);
- then a ``tools/list`` (its first page), with the SDK's own answer as the last server that
  loaded the SDK wrote it down (:func:`remember_tools`, in the user's cache directory, keyed
  by the files it depends on, so an upgrade or an edit is never answered from an old list).

The SDK then reads every line in order, those included (so that its session is initialized
as if it had answered), and its second answer to each request the front answered is dropped
(:class:`Opening`'s ``answered``). Once the SDK serves (:meth:`Opening.hand_over`) the front
answers nothing more.

This module imports neither the SDK nor the engine: only the standard library, platformdirs
and the tools' declaration.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import queue
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import platformdirs

from . import __version__
from .retrieval.tools import STORE_SCOPE, server_instructions

__all__ = [
    "HANDSHAKE_VERSIONS",
    "INSTALL_HINT",
    "MAX_MESSAGE_BYTES",
    "Opening",
    "initialize_result",
    "open_wire",
    "remember_tools",
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


#: The lines read from the wire, in order: each with whether it was over the limit (then only
#: its start is kept); ``(b"", False)`` when the client has gone.
Line = tuple[bytes, bool]


@dataclass
class Opening:
    """The wire as the front hands it to the SDK: one reader thread reads it (and, while the
    front is open, answers what it can vouch for), and the SDK takes the lines it read."""

    #: The client's side of the protocol: its messages in, the server's replies out.
    wire_in: IO[bytes]
    wire_out: IO[bytes]
    #: The SDK's answers to these request ids are dropped (the front answered them), the
    #: first answer to each only.
    answered: set[int | str] = field(default_factory=set)
    #: Whether the front answers until the SDK serves (the store's scope).
    front: bool = True
    #: The store's scope's tools as the SDK lists them (``None``: not known, the SDK answers).
    tools: list[dict[str, Any]] | None = None
    _lines: queue.Queue[Line] = field(default_factory=queue.Queue)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: Whether the front still answers (until :meth:`hand_over`).
    _open: bool = False
    #: The id of the ``initialize`` the front answered, once it has.
    _initialized: int | str | None = None
    #: Whether a line has been read (the front answers an ``initialize`` only as the first).
    _started: bool = False

    def start(self) -> Opening:
        """Start the reader thread."""
        self._open = self.front
        threading.Thread(target=self._pump, name="lossless-mcp-wire", daemon=True).start()
        return self

    def next_line(self) -> Line:
        """The next line read (waits for it)."""
        return self._lines.get()

    def hand_over(self) -> None:
        """From now on the SDK answers everything."""
        with self._lock:
            self._open = False

    def _pump(self) -> None:
        ended = False
        try:
            while not ended:
                line, too_long = _read_line(self.wire_in)
                if line and not too_long:
                    with self._lock:
                        if self._open:
                            self._answer(line)
                        self._started = True
                self._lines.put((line, too_long))
                ended = not line
        except OSError as exc:  # the wire broke: the SDK sees its end
            logger.debug("the wire's reader stopped: %s", exc)
        finally:
            if not ended:  # whatever stopped the reader, the SDK is not left waiting
                self._lines.put((b"", False))

    def _answer(self, line: bytes) -> None:
        """Answer *line* when it is what the front vouches for (under the lock). Anything
        unexpected closes the front: the SDK answers from then on."""
        try:
            self._vouch(line)
        except Exception as exc:  # noqa: BLE001 - never lose the wire over an early answer
            self._open = False
            logger.debug("the front stopped answering: %r", exc)

    def _vouch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return
        rid = message.get("id")
        if isinstance(rid, bool) or not isinstance(rid, int | str) or rid in self.answered:
            return
        method, params = message.get("method"), message.get("params")
        result: dict[str, Any] | None = None
        if method == "initialize" and not self._started:
            result = initialize_result(params, instructions=server_instructions(STORE_SCOPE))
            if result is not None:
                self._initialized = rid
        elif (
            method == "tools/list"
            and self._initialized is not None
            and self.tools is not None
            and (params is None or (isinstance(params, dict) and set(params) <= {"_meta"}))
        ):
            result = {"tools": self.tools}
        if result is None:
            return
        reply = {"jsonrpc": "2.0", "id": rid, "result": result}
        self.wire_out.write(json.dumps(reply, separators=(",", ":")).encode("utf-8") + b"\n")
        self.answered.add(rid)
        logger.debug("answered %s before the SDK loaded", method)


def _read_line(raw: IO[bytes]) -> Line:
    """The next line of *raw* (``b""`` at the end) and whether it was over the limit (then
    only its start is kept; the rest is read and dropped)."""
    line = raw.readline(MAX_MESSAGE_BYTES + 1)
    if len(line) <= MAX_MESSAGE_BYTES or line.endswith(b"\n"):
        return line, False
    while True:
        rest = raw.readline(1024 * 1024)
        if not rest or rest.endswith(b"\n"):
            return line[:64], True


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


def open_wire(*, answer: bool = True) -> Opening:
    """Take the wire and start reading it; with *answer* (the store's scope) the front
    answers the handshake and the tool list until the SDK serves (see the module docstring)."""
    wire_in, wire_out = take_wire()
    tools = _remembered_tools() if answer else None
    return Opening(wire_in, wire_out, front=answer, tools=tools).start()


# --- the tool list the SDK gave, remembered for the next start --------------------------------


def _tools_file() -> Path:
    """Where this installation keeps the list: one file per installation, so that two (two
    virtual environments, a release and a checkout) do not replace each other's."""
    here = hashlib.sha256(str(Path(__file__).resolve().parent).encode("utf-8")).hexdigest()
    return Path(platformdirs.user_cache_dir("lossless")) / f"mcp-tools-{here[:12]}.json"


def _tools_key() -> str:
    """What the SDK's tool list depends on: lossless's version, the Python version, and the
    sizes and times of the files that make the list (the tools' declaration, the toolsets,
    the MCP server) and of the installed SDK and pydantic."""
    here = Path(__file__).parent
    parts: list[object] = [__version__, sys.version_info[:2]]
    paths = [here / name for name in ("retrieval/tools.py", "toolbox.py", "mcp_server.py")]
    for name in ("mcp", "mcp_types", "pydantic", "pydantic_core"):
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin:
                paths.append(Path(spec.origin))
    for path in paths:
        with contextlib.suppress(OSError):
            stat = path.stat()
            parts.append((str(path), stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()


def _remembered_tools() -> list[dict[str, Any]] | None:
    """The store's scope's tool list the SDK gave last, if nothing it depends on changed."""
    try:
        saved = json.loads(_tools_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("key") != _tools_key():
        return None
    tools = saved.get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return None
    return tools


def remember_tools(tools: Sequence[Mapping[str, Any]]) -> None:
    """Write down the store's scope's tool list as the SDK answers it, for the front of the
    next start (a cache: a failure to write it is only logged)."""
    path = _tools_file()
    data = {"key": _tools_key(), "tools": list(tools)}
    try:
        if path.exists() and json.loads(path.read_text(encoding="utf-8")) == data:
            return
    except (OSError, ValueError):
        pass
    import tempfile

    temp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".mcp-tools-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, separators=(",", ":"))
        os.replace(temp, path)
    except OSError as exc:
        logger.debug("could not remember the tool list at %s: %s", path, exc)
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
