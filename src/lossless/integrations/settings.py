"""Hook entries in a host's JSON settings, merged without touching the user's own.

Claude Code (``settings.json``) and Codex (``hooks.json``) read command hooks from the same
shape — ``{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type": "command", ...}]}]}}`` —
so one merge serves both: the user's hooks stay as they are, an older lossless entry is
replaced in place (never a second copy), anything else is appended. A :class:`SettingsChange`
shows the diff and writes the file atomically, keeping the previous one as a backup.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import LosslessError
from .hooks import EVENTS, Host

__all__ = [
    "MATCHERS",
    "TIMEOUTS",
    "SettingsChange",
    "cli_globals",
    "hook_command",
    "is_lossless_hook",
    "merge_hooks",
    "plan_json",
    "settings_hooks",
]

#: Matchers of the installed hooks: SessionStart matches its ``source``, so the hook is not
#: even started on ``startup`` or ``clear``; the other events take every call.
MATCHERS = {event: "compact|resume" if event == "SessionStart" else "" for event in EVENTS}
#: Seconds the host lets each hook run. PreCompact pays for the first import of a long
#: session and a full sweep; capturing a turn reads only what the transcript gained; the store
#: waits up to 30 s for a lock held by another writer.
TIMEOUTS = {
    "SessionStart": 45,
    "UserPromptSubmit": 30,
    "Stop": 30,
    "SubagentStop": 30,
    "PreCompact": 120,
    "SessionEnd": 60,
}


def hook_command(
    executable: str, host: Host, event: str, *, db: str | None = None, config: str | None = None
) -> str:
    """The shell command the host runs for *event*."""
    return shlex.join([executable, *cli_globals(db, config), "hook", host.name, event])


def cli_globals(db: str | None, config: str | None) -> list[str]:
    """The ``--db`` / ``--config`` options that make a command use this store."""
    args: list[str] = []
    if db is not None:
        args += ["--db", db]
    if config is not None:
        args += ["--config", config]
    return args


def settings_hooks(
    executable: str,
    host: Host,
    *,
    db: str | None = None,
    config: str | None = None,
    timeouts: Mapping[str, int] = TIMEOUTS,
) -> dict[str, list[dict[str, Any]]]:
    """The ``hooks`` object for the host's settings: one matcher group per event."""
    # Only SessionStart takes a matcher (its source); the other events take every call, and
    # an entry without one says so (a host may hash or check the matcher it is given).
    return {
        event: [
            {
                **({"matcher": MATCHERS[event]} if MATCHERS[event] else {}),
                "hooks": [
                    {
                        "type": "command",
                        "command": hook_command(executable, host, event, db=db, config=config),
                        "timeout": timeouts[event],
                    }
                ],
            }
        ]
        for event in EVENTS
    }


def is_lossless_hook(entry: Any, host: Host) -> bool:
    """Whether a hook entry of a settings file runs ``lossless hook <host>``."""
    if not isinstance(entry, Mapping):
        return False
    command = entry.get("command")
    ours = re.compile(rf"\bhook\s+{re.escape(host.name)}\b")
    return isinstance(command, str) and "lossless" in command and bool(ours.search(command))


def merge_hooks(
    settings: Mapping[str, Any], hooks: Mapping[str, list[dict[str, Any]]], host: Host
) -> dict[str, Any]:
    """*settings* with lossless's *hooks* in: the user's own hooks stay as they are, an older
    lossless entry is replaced in place (never a second copy), anything else is appended."""
    merged = copy.deepcopy(dict(settings))
    events = merged.setdefault("hooks", {})
    if not isinstance(events, dict):
        raise LosslessError('its "hooks" is not an object; fix it by hand and run again')
    for event, ours in hooks.items():
        groups = events.setdefault(event, [])
        if not isinstance(groups, list):
            raise LosslessError(f'its "hooks.{event}" is not a list; fix it by hand and run again')
        wanted = ours[0]
        entry = wanted["hooks"][0]
        placed = False
        kept: list[Any] = []
        for group in groups:
            entries = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(entries, list) or not any(is_lossless_hook(h, host) for h in entries):
                kept.append(group)
                continue
            others: list[Any] = []
            for h in entries:
                if not is_lossless_hook(h, host):
                    others.append(h)
                elif not placed and group.get("matcher", "") == wanted.get("matcher", ""):
                    others.append(copy.deepcopy(entry))
                    placed = True
            if others:  # a group that held only a stale lossless entry goes
                kept.append({**group, "hooks": others})
        if not placed:
            kept.append(copy.deepcopy(wanted))
        events[event] = kept
    return merged


@dataclass(frozen=True)
class SettingsChange:
    """A JSON settings file before and after a merge; :meth:`apply` writes it (with a backup)."""

    path: Path
    before: str | None  # the file's text; None when it does not exist
    after: str
    changed: bool

    def diff(self) -> str:
        """A unified diff of the file, as text."""
        old = (self.before or "").splitlines(keepends=True)
        new = self.after.splitlines(keepends=True)
        label = str(self.path)
        return "".join(
            difflib.unified_diff(
                old, new, "/dev/null" if self.before is None else label, label, n=3
            )
        )

    def apply(self) -> Path | None:
        """Write the new file (atomically) after copying the old one aside; the backup's path."""
        if not self.changed:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        backup = None
        if self.before is not None:
            backup = _backup_path(self.path)
            shutil.copy2(self.path, backup)
        temp = self.path.with_name(f".{self.path.name}.lossless-{os.getpid()}")
        temp.write_text(self.after, encoding="utf-8")
        if self.before is not None:
            shutil.copymode(self.path, temp)
        os.replace(temp, self.path)
        return backup


def _backup_path(path: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.{stamp}.bak")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{stamp}-{n}.bak")
    return candidate


def plan_json(path: Path, merge: Callable[[dict[str, Any]], dict[str, Any]]) -> SettingsChange:
    """What *merge* changes in the JSON object file at *path* (which may not exist yet)."""
    before: str | None = None
    data: Any = {}
    if path.exists():
        before = path.read_text(encoding="utf-8")
        if before.strip():
            try:
                data = json.loads(before)
            except ValueError as exc:
                raise LosslessError(
                    f"{path} is not valid JSON ({exc}); fix it or move it away and run again"
                    " (lossless does not rewrite a file it cannot read)"
                ) from None
        if not isinstance(data, dict):
            raise LosslessError(f"{path} does not hold a JSON object; fix it and run again")
    try:
        merged = merge(data)
    except LosslessError as exc:
        raise LosslessError(f"{path}: {exc}") from None
    after = json.dumps(merged, indent=2, ensure_ascii=False) + "\n"
    return SettingsChange(path, before, after, changed=merged != data or before is None)
