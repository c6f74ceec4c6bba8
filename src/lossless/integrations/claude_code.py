"""Claude Code: the hooks and the MCP server, as a plugin or in settings files.

The hooks themselves are :mod:`lossless.integrations.hooks` (Claude Code speaks the protocol
they share with Codex); here is what is Claude Code's own: its name (:data:`CLAUDE_CODE`),
where its settings live, and the MCP server entry (``.mcp.json`` or ``claude mcp add``).
The plugin (``hosts/claude-code`` in the repository) carries the same hooks and server for
users who install with ``claude plugin install``. The CLI only prints and asks.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import LosslessError
from .hooks import Host
from .settings import SettingsChange, cli_globals, merge_hooks, plan_json

__all__ = [
    "CLAUDE_CODE",
    "MCP_SERVER_NAME",
    "SCOPES",
    "mcp_add_command",
    "mcp_server_entry",
    "merge_mcp_server",
    "plan_mcp_json",
    "plan_settings",
    "settings_path",
]

#: Claude Code as a host of lossless's hooks (it shows up to 10,000 characters of a hook's
#: added context inline; above that it saves the text to a file and shows a 2 KB preview).
CLAUDE_CODE = Host("claude-code", "Claude Code", "claude_code")
MCP_SERVER_NAME = "lossless"
SCOPES = ("user", "project", "local")


def settings_path(scope: str, *, home: Path | None = None, project: Path | None = None) -> Path:
    """Claude Code's settings file of *scope*: ``~/.claude/settings.json`` (user),
    ``.claude/settings.json`` (project, shared) or ``.claude/settings.local.json`` (local)."""
    if scope == "user":
        return (home or Path.home()) / ".claude" / "settings.json"
    base = (project or Path.cwd()) / ".claude"
    if scope == "project":
        return base / "settings.json"
    if scope == "local":
        return base / "settings.local.json"
    raise ValueError(f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}")


def mcp_server_entry(
    executable: str, *, db: str | None = None, config: str | None = None
) -> dict[str, Any]:
    """The ``mcpServers`` entry that starts ``lossless mcp`` over stdio (``.mcp.json``)."""
    return {
        "type": "stdio",
        "command": executable,
        "args": [*cli_globals(db, config), "mcp"],
        "env": {},
    }


def mcp_add_command(
    executable: str, *, scope: str = "user", db: str | None = None, config: str | None = None
) -> str:
    """The ``claude mcp add`` command registering the MCP server in *scope*."""
    head = ["claude", "mcp", "add", "--scope", scope, MCP_SERVER_NAME, "--", executable]
    return shlex.join([*head, *cli_globals(db, config), "mcp"])


def merge_mcp_server(config: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """A ``.mcp.json`` object with the lossless server set to *entry* (others untouched)."""
    merged = copy.deepcopy(dict(config))
    servers = merged.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise LosslessError('its "mcpServers" is not an object; fix it by hand and run again')
    servers[MCP_SERVER_NAME] = copy.deepcopy(dict(entry))
    return merged


#: The permission rule that lets the model call the recall tools of the MCP server registered
#: as :data:`MCP_SERVER_NAME` without asking (print mode has no one to ask: a call would be
#: refused). The plugin's server is ``mcp__plugin_lossless_lossless``; a plugin cannot grant
#: permissions itself, so its users add that rule (docs/claude-code.md).
RECALL_TOOLS_RULE = f"mcp__{MCP_SERVER_NAME}"
PLUGIN_RECALL_TOOLS_RULE = "mcp__plugin_lossless_lossless"


def plan_settings(
    path: Path, hooks: Mapping[str, list[dict[str, Any]]], *, allow: Sequence[str] = ()
) -> SettingsChange:
    """What installing *hooks* into the settings file at *path* changes, with the permission
    rules *allow* added to its ``permissions.allow`` (each once)."""

    def merge(data: Mapping[str, Any]) -> dict[str, Any]:
        merged = merge_hooks(data, hooks, CLAUDE_CODE)
        if allow:
            permissions = merged.setdefault("permissions", {})
            if not isinstance(permissions, dict):
                raise LosslessError('its "permissions" is not an object; fix it by hand')
            rules = permissions.setdefault("allow", [])
            if not isinstance(rules, list):
                raise LosslessError('its "permissions.allow" is not a list; fix it by hand')
            rules += [rule for rule in allow if rule not in rules]
        return merged

    return plan_json(path, merge)


def plan_mcp_json(path: Path, entry: Mapping[str, Any]) -> SettingsChange:
    """What registering the MCP server in the ``.mcp.json`` at *path* changes."""
    return plan_json(path, lambda data: merge_mcp_server(data, entry))
