"""Codex CLI: its rollouts, and lossless's hooks in its ``hooks.json``.

Codex runs command hooks from ``$CODEX_HOME/hooks.json`` (default ``~/.codex``) in the shape
Claude Code uses, with the same events and the same stdin protocol, so the hooks are
:mod:`lossless.integrations.hooks` with :data:`CODEX`'s name, and the merge is
:mod:`lossless.integrations.settings`'. What is Codex's own:

* Its SessionEnd hooks get at most 3 seconds (longer timeouts are cut, with a warning).
* It runs only hooks the user trusts: each handler is trusted by a hash of its definition,
  recorded in ``config.toml`` under ``[hooks.state."<hooks.json>:<event>:<group>:<handler>"]``
  as ``trusted_hash``. :func:`trust_entries` computes them the way Codex 0.169 does, and
  :func:`plan_trust` records them (``lossless hooks codex --install --trust``), so that the
  user's one command is the whole set-up. Without them, Codex skips the hooks until the user
  trusts them, or runs them with ``--dangerously-bypass-hook-trust``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LosslessError
from .hooks import Host
from .settings import (
    TIMEOUTS,
    SettingsChange,
    cli_globals,
    is_lossless_hook,
    merge_hooks,
    plan_json,
)

__all__ = [
    "CODEX",
    "CODEX_TIMEOUTS",
    "TrustChange",
    "codex_home",
    "has_recall_tools",
    "mcp_server_table",
    "plan_hooks",
    "plan_trust",
    "trust_entries",
]

#: The name lossless's MCP server is registered under in ``config.toml``.
MCP_SERVER_NAME = "lossless"

#: Codex as a host of lossless's hooks.
CODEX = Host("codex", "Codex", "codex", recall_tools=lambda: has_recall_tools())
#: Codex cuts a SessionEnd hook to 3 seconds: ask for what it gives.
CODEX_TIMEOUTS = {**TIMEOUTS, "SessionEnd": 3}
_CLAMPED = {"SessionEnd": 3, "Interrupt": 3}
TOMLKIT_HINT = "recording Codex's hook trust needs tomlkit: pip install 'lossless[codex]'"


def codex_home() -> Path:
    """``$CODEX_HOME``, else ``~/.codex``."""
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex").expanduser()


def plan_hooks(path: Path, hooks: Mapping[str, list[dict[str, Any]]]) -> SettingsChange:
    """What installing *hooks* into Codex's ``hooks.json`` at *path* changes."""
    return plan_json(path, lambda data: merge_hooks(data, hooks, CODEX))


def _snake(event: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def _handler_hash(event: str, matcher: str | None, handler: Mapping[str, Any]) -> str:
    """The hash Codex trusts a hook handler by: SHA-256 of the compact, key-sorted JSON of
    its event, matcher (when set) and normalized handler."""
    timeout = handler.get("timeout")
    seconds = max(1, int(timeout)) if isinstance(timeout, int | float) else 600
    if event in _CLAMPED:
        seconds = 1 if timeout is None else min(seconds, _CLAMPED[event])
    normal: dict[str, Any] = {
        "type": "command",
        "command": handler.get("command"),
        "timeout": seconds,
        "async": bool(handler.get("async", False)),
    }
    if handler.get("statusMessage") is not None:
        normal["statusMessage"] = handler["statusMessage"]
    ident: dict[str, Any] = {"event_name": _snake(event), "hooks": [normal]}
    if matcher is not None:
        ident["matcher"] = matcher
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def trust_entries(hooks_path: Path, hooks_json: Mapping[str, Any]) -> dict[str, str]:
    """``{state key: trusted_hash}`` for lossless's own handlers in a ``hooks.json`` object
    (the user's other hooks are theirs to trust)."""
    out: dict[str, str] = {}
    events = hooks_json.get("hooks")
    if not isinstance(events, Mapping):
        return out
    where = str(hooks_path.expanduser().resolve())
    for event, groups in events.items():
        for g, group in enumerate(groups if isinstance(groups, list) else []):
            handlers = group.get("hooks") if isinstance(group, Mapping) else None
            matcher = group.get("matcher") if isinstance(group, Mapping) else None
            for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if is_lossless_hook(handler, CODEX):
                    key = f"{where}:{_snake(event)}:{g}:{h}"
                    out[key] = _handler_hash(event, matcher, handler)
    return out


@dataclass(frozen=True)
class TrustChange:
    """Codex's ``config.toml`` before and after recording the trust of lossless's hooks."""

    path: Path
    before: str | None
    after: str
    changed: bool

    def diff(self) -> str:
        """A unified diff of the file, as text."""
        label = str(self.path)
        return "".join(
            difflib.unified_diff(
                (self.before or "").splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                "/dev/null" if self.before is None else label,
                label,
            )
        )

    def apply(self) -> None:
        """Write the file atomically."""
        if not self.changed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(f".{self.path.name}.lossless-{os.getpid()}")
        temp.write_text(self.after, encoding="utf-8")
        os.replace(temp, self.path)


#: How long Codex waits for lossless's MCP server to start and list its tools (it answers
#: in ~0.8 s on an idle machine; Codex gave up at its default 10 s on two loaded cores).
MCP_STARTUP_SECONDS = 30


def mcp_server_table(
    executable: str,
    *,
    db: str | None = None,
    config: str | None = None,
    cache_home: str | None = None,
) -> dict[str, Any]:
    """The ``[mcp_servers.lossless]`` table that starts ``lossless mcp`` over stdio, with
    :data:`MCP_STARTUP_SECONDS` to list its tools (Codex's default, 10 s, is passed on a
    busy machine: the server loads the MCP SDK first, and Codex then runs without the
    recall tools). Codex starts the server with ``HOME`` and ``PATH`` only: *cache_home*
    (the installing shell's ``XDG_CACHE_HOME``) is passed on, so the server finds the tool
    list the install wrote down (:func:`lossless.mcp_front.remember_tools`)."""
    table: dict[str, Any] = {
        "command": executable,
        "args": [*cli_globals(db, config), "mcp"],
        "startup_timeout_sec": MCP_STARTUP_SECONDS,
    }
    if cache_home:
        table["env"] = {"XDG_CACHE_HOME": cache_home}
    return table


def plan_trust(
    config_path: Path,
    entries: Mapping[str, str],
    *,
    mcp_server: Mapping[str, Any] | None = None,
) -> TrustChange:
    """What recording *entries* (:func:`trust_entries`) in ``config.toml`` changes, and with
    *mcp_server* (:func:`mcp_server_table`) registering lossless's MCP server as
    ``[mcp_servers.lossless]``; the rest of the file stays as it is, comments included."""
    try:
        import tomlkit
        from tomlkit.exceptions import TOMLKitError
    except ModuleNotFoundError as exc:
        raise LosslessError(TOMLKIT_HINT) from exc
    before = config_path.read_text(encoding="utf-8") if config_path.exists() else None
    try:
        doc = tomlkit.parse(before or "")
    except TOMLKitError as exc:
        raise LosslessError(
            f"{config_path} is not valid TOML ({exc}); fix it and run again"
        ) from None
    if entries:
        hooks = doc.setdefault("hooks", tomlkit.table(is_super_table=True))
        state = hooks.setdefault("state", tomlkit.table(is_super_table=True))
        for key, digest in entries.items():
            current = state.get(key)
            if current is None:
                table = tomlkit.table()
                table["trusted_hash"] = digest
                state[key] = table
            else:
                current["trusted_hash"] = digest
    if mcp_server is not None:
        servers = doc.setdefault("mcp_servers", tomlkit.table(is_super_table=True))
        table = servers.get(MCP_SERVER_NAME)
        if table is None:
            table = tomlkit.table()
            servers[MCP_SERVER_NAME] = table
        for key, value in mcp_server.items():
            if table.get(key) != value:
                table[key] = value
    after = tomlkit.dumps(doc)
    return TrustChange(config_path, before, after, changed=after != (before or ""))


def has_recall_tools(home: Path | None = None) -> bool:
    """Whether Codex's ``config.toml`` registers lossless's MCP server (so a Codex session
    has the recall tools): a ``[mcp_servers.*]`` table whose command runs ``lossless ... mcp``.
    """
    path = (home or codex_home()) / "config.toml"
    try:
        with path.open("rb") as handle:
            servers = tomllib.load(handle).get("mcp_servers")
    except (OSError, tomllib.TOMLDecodeError):
        return False
    if not isinstance(servers, Mapping):
        return False
    for table in servers.values():
        if not isinstance(table, Mapping) or table.get("enabled") is False:
            continue
        command = str(table.get("command") or "")
        args = table.get("args")
        if Path(command).name.startswith("lossless") and isinstance(args, list) and "mcp" in args:
            return True
    return False
