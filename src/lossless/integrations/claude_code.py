"""Claude Code hooks: keep the whole session in lossless, and give it back after a compaction.

Claude Code runs a command hook with one JSON object on stdin — ``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name`` and the event's own fields — and reads the
hook's exit code and stdout (https://code.claude.com/docs/en/hooks):

* ``PreCompact`` (``trigger``: ``manual`` or ``auto``) runs before the host replaces the
  conversation by its own, lossy summary. The transcript is imported (reconciliation against
  its checkpoint: only what is new is read) and compacted with a **full sweep**, since the
  host is about to compact everything too.
* ``SessionEnd`` (``reason``) imports the transcript the same way and compacts it
  **incrementally** (what ``after_turn`` does): cheap, because Claude Code gives SessionEnd
  hooks little time.
* ``SessionStart`` (``source``: ``startup``, ``resume``, ``clear`` or ``compact``): right after
  a compaction, and on resuming a session the host compacted before, the hook prints the
  context to reinject as ``{"hookSpecificOutput": {"hookEventName": "SessionStart",
  "additionalContext": ...}}``: the newest of lossless's summaries of the session (the spec's
  XML, newest first until the budget) and the session's resume summary. All of it stays
  within Claude Code's limit for injected text (10,000 characters; above it the host saves
  the text to a file and shows the model a 2 KB preview).

Exit code 2 is a *blocking* error whose stderr Claude Code feeds to the model; other non-zero
codes are non-blocking errors. The CLI shell (``lossless hook claude-code``) therefore turns
every failure into a log line, exit code 0 and nothing on stdout.

The settings side — the hook entries for ``settings.json`` and the MCP server entry, merged
into existing files without touching the user's own hooks — is here too; the CLI only prints
and asks.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import logging
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from ..assemble import UNTRUSTED_NOTE, render_summary
from ..config import APP_NAME
from ..errors import LosslessError
from ..model import Summary

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = [
    "CONTEXT_LIMIT",
    "DEFAULT_MAX_CHARS",
    "EVENTS",
    "HookInput",
    "HookInputError",
    "HookOutcome",
    "Reinjection",
    "SettingsChange",
    "default_log_path",
    "hook_command",
    "is_lossless_hook",
    "mcp_add_command",
    "mcp_server_entry",
    "merge_hooks",
    "merge_mcp_server",
    "plan_mcp_json",
    "plan_settings",
    "reinjection",
    "run_hook",
    "session_start_output",
    "settings_hooks",
    "settings_path",
]

logger = logging.getLogger(__name__)

#: Claude Code's limit for a hook's injected text (stdout or ``additionalContext``), in
#: characters. Longer output is saved to a file and the model sees a 2 KB preview instead.
CONTEXT_LIMIT = 10_000
#: What the SessionStart hook prints at most (the whole JSON line), leaving a margin.
DEFAULT_MAX_CHARS = 9_000
MIN_MAX_CHARS = 500
#: The events lossless hooks, in the order a session meets them.
EVENTS = ("PreCompact", "SessionStart", "SessionEnd")
#: SessionStart sources after which the host's window lacks what lossless has.
REINJECT_SOURCES = ("compact", "resume")
#: Matchers of the installed hooks: SessionStart matches its ``source``, so the hook is not
#: even started on ``startup`` or ``clear``.
MATCHERS = {"PreCompact": "", "SessionStart": "compact|resume", "SessionEnd": ""}
#: Seconds Claude Code lets each hook run. PreCompact pays for the first import of a long
#: session and a full sweep; SessionEnd hooks share a 1.5 s budget unless a hook asks for
#: more (up to 60 s); the store waits up to 30 s for a lock held by another writer.
TIMEOUTS = {"PreCompact": 120, "SessionStart": 45, "SessionEnd": 60}
MCP_SERVER_NAME = "lossless"
SCOPES = ("user", "project", "local")
_OURS = re.compile(r"\bhook\s+claude-code\b")
#: A summary is only cut to fit when at least this much room is left for it.
_MIN_CLIP_CHARS = 400


class HookInputError(LosslessError):
    """The hook's stdin is not what Claude Code sends (or asks for an event we do not hook)."""


def default_log_path() -> Path:
    """Where the hooks log: ``claude-code-hooks.log`` in the platform's user log directory."""
    return Path(platformdirs.user_log_dir(APP_NAME)) / "claude-code-hooks.log"


# --- the hook ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HookInput:
    """The JSON object Claude Code writes to a command hook's stdin (the fields we use)."""

    event: str
    session_id: str | None = None
    transcript_path: str | None = None
    cwd: str | None = None
    source: str | None = None  # SessionStart: startup | resume | clear | compact
    trigger: str | None = None  # PreCompact: manual | auto
    reason: str | None = None  # SessionEnd: clear | logout | prompt_input_exit | other | ...

    @classmethod
    def parse(cls, text: str, event: str | None = None) -> HookInput:
        """Read the hook input; *event* (the command line's) is used when the input has no
        ``hook_event_name``. The input's own name wins when both are there."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise HookInputError(f"the hook input on stdin is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise HookInputError("the hook input on stdin is not a JSON object")
        name = _field(data, "hook_event_name") or event
        if name is None:
            raise HookInputError("the hook input has no hook_event_name and no EVENT was given")
        if name not in EVENTS:
            raise HookInputError(
                f"lossless has nothing to do on {name}; hook it to {', '.join(EVENTS)}"
            )
        if event and name != event:
            logger.warning(
                "hook installed for %s was called with %s; handling %s", event, name, name
            )
        return cls(
            event=name,
            session_id=_field(data, "session_id"),
            transcript_path=_field(data, "transcript_path"),
            cwd=_field(data, "cwd"),
            source=_field(data, "source"),
            trigger=_field(data, "trigger"),
            reason=_field(data, "reason"),
        )


def _field(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None


@dataclass
class HookOutcome:
    """What one hook call did (logged one line per call), and what it prints."""

    event: str
    session_id: str | None
    detail: str | None = None  # source / trigger / reason
    conversation_id: int | None = None
    import_mode: str | None = None  # full | tail | unchanged (the main lane's)
    imported: int = 0
    already_stored: int = 0
    compaction_passes: int = 0
    summaries_shown: int = 0
    summaries_total: int = 0
    stdout: str = ""
    note: str | None = None
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def describe(self) -> str:
        """One log line."""
        parts = [f"{self.event}{'/' + self.detail if self.detail else ''}"]
        parts.append(f"session={self.session_id or '?'}")
        if self.conversation_id is not None:
            parts.append(f"conversation={self.conversation_id}")
        if self.import_mode is not None:
            parts.append(
                f"import={self.import_mode} imported={self.imported}"
                f" already_stored={self.already_stored}"
            )
        if self.compaction_passes:
            parts.append(f"compaction_passes={self.compaction_passes}")
        if self.stdout:
            parts.append(
                f"reinjected={len(self.stdout)} chars"
                f" summaries={self.summaries_shown}/{self.summaries_total}"
            )
        if self.note:
            parts.append(f"({self.note})")
        if self.problems:
            parts.append(f"problems={len(self.problems)}")
        parts.append(f"in {self.seconds:.3f} s")
        return " ".join(parts)


def run_hook(
    engine: Engine | Callable[[], Engine],
    hook: HookInput,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> HookOutcome:
    """Do what *hook* calls for; the outcome's ``stdout`` is what to print (may be empty).

    *engine* may be a function that opens one: it is then only called when there is work
    (a SessionStart on ``startup`` or ``clear`` never opens the store). Raises
    :class:`~lossless.errors.LosslessError` (and lets other errors through): the caller is
    the boundary that must not fail the host.
    """
    started = time.perf_counter()
    detail = hook.source or hook.trigger or hook.reason
    outcome = HookOutcome(hook.event, hook.session_id, detail)
    if hook.event not in EVENTS:
        raise HookInputError(
            f"lossless has nothing to do on {hook.event}; hook it to {', '.join(EVENTS)}"
        )
    if hook.event == "SessionStart" and hook.source not in REINJECT_SOURCES:
        outcome.note = f"nothing to reinject on {hook.source or 'an unknown source'}"
    else:
        opened = engine() if callable(engine) else engine
        if hook.event == "SessionStart":
            _reinject(opened, hook, outcome, max_chars)
        else:
            mode = "full" if hook.event == "PreCompact" else "incremental"
            _archive(opened, hook, outcome, mode=mode)
    outcome.seconds = time.perf_counter() - started
    return outcome


def _transcript(hook: HookInput) -> Path:
    if hook.transcript_path is None:
        raise HookInputError(f"the {hook.event} hook input has no transcript_path")
    return Path(hook.transcript_path).expanduser()


def _import(engine: Engine, path: Path, outcome: HookOutcome) -> int:
    """Import the transcript (only what is new); the main conversation's id."""
    reports = engine.bootstrap(path, format="claude_code")
    main = reports[0]
    outcome.conversation_id = main.conversation_id
    outcome.import_mode = main.mode
    outcome.imported = sum(r.imported for r in reports)
    outcome.already_stored = sum(r.already_stored for r in reports)
    outcome.problems += [str(p) for r in reports for p in r.problems]
    return main.conversation_id


def _archive(engine: Engine, hook: HookInput, outcome: HookOutcome, *, mode: str) -> None:
    conversation_id = _import(engine, _transcript(hook), outcome)
    try:
        report = engine.compact(conversation_id, mode=mode)
    except LosslessError as exc:  # the import is stored; compaction runs again next time
        outcome.problems.append(f"compaction of conversation {conversation_id}: {exc}")
        return
    outcome.compaction_passes = len(report.passes)


def _reinject(engine: Engine, hook: HookInput, outcome: HookOutcome, max_chars: int) -> None:
    conversation_id: int | None = None
    if hook.transcript_path is not None:
        try:
            conversation_id = _import(engine, _transcript(hook), outcome)
        except (LosslessError, OSError) as exc:
            # What is stored already is worth reinjecting: go on without the import.
            outcome.problems.append(f"import before reinjection: {exc}")
    if conversation_id is None and hook.session_id is not None:
        found = engine.store.find_conversation(hook.session_id)
        conversation_id = found.conversation_id if found is not None else None
    if conversation_id is None:
        outcome.note = "no stored conversation for this session"
        return
    outcome.conversation_id = conversation_id
    conversation = engine.store.get_conversation(conversation_id)
    if hook.source == "resume" and not conversation.metadata.get("host_compactions"):
        outcome.note = "resumed a session Claude Code never compacted: it has all of it"
        return
    result = reinjection(engine, conversation_id, max_chars=max_chars, source=hook.source)
    outcome.summaries_shown = result.summaries_shown
    outcome.summaries_total = result.summaries_total
    outcome.stdout = session_start_output(result.text) if result.text else ""


# --- the reinjected context ----------------------------------------------------------------


@dataclass(frozen=True)
class Reinjection:
    """The text for ``additionalContext`` and what went into it."""

    text: str
    summaries_shown: int = 0
    summaries_total: int = 0
    resume_chars: int = 0


def session_start_output(text: str) -> str:
    """The JSON a SessionStart hook prints to add *text* to Claude's context."""
    payload = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    return json.dumps(payload, ensure_ascii=False)


def _cost(text: str) -> int:
    """What *text* adds to the printed JSON, in UTF-16 code units (how Claude Code counts)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-16-le")) // 2 - 2


def reinjection(
    engine: Engine,
    conversation_id: int,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    source: str | None = "compact",
) -> Reinjection:
    """The context to give Claude Code back after it compacted *conversation_id*.

    A short header (where the whole history is and which tools reach it), the newest of the
    summaries in the conversation's active context — whole while they fit, then the next one
    cut to the room left, laid out oldest first — and the resume summary of every stored
    message. Claude Code's compaction drops the whole window, lossless's fresh tail included,
    so the resume summary covers everything (``latest``), not only the compacted part. The
    printed JSON (:func:`session_start_output`) stays within *max_chars*.
    """
    if max_chars < MIN_MAX_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_MAX_CHARS}, not {max_chars}")
    conversation = engine.store.get_conversation(conversation_id)
    count = engine.store.message_count(conversation_id)
    if not count:
        return Reinjection("")
    budget = max_chars - len(session_start_output(""))
    session = conversation.session_id
    what = "resumed" if source == "resume" else "compacted"
    header = (
        f"[lossless] Claude Code {what} this conversation; lossless keeps all of it"
        f" (conversation {conversation_id}, session {session}: {count:,} messages). Below:"
        " lossless's summaries of the earlier work (the newest that fit), then a resume"
        " summary. The originals are one call away with the lossless MCP tools: lcm_grep"
        " (search), lcm_describe (open a summary), lcm_expand_query (ask the history);"
        f" pass conversation={json.dumps(session)}."
    )
    resume = engine.resume(conversation_id, latest=True).text
    sep = "\n\n"
    fixed = _cost(header) + _cost(sep) + _cost(resume)
    if fixed > budget:  # only with a very small max_chars: the resume summary is cut first
        resume = _clip_text(resume, budget - _cost(header) - _cost(sep))
        if not resume:
            header = _clip_text(header, budget)
        return Reinjection(sep.join(b for b in (header, resume) if b), 0, 0, len(resume))
    items = engine.context(conversation_id)
    ids = [i.summary_id for i in items if i.summary_id is not None]
    summaries = {s.summary_id: s for s in engine.store.get_summaries(ids)}
    # Room for the summaries: the untrusted-data note and a line about any left out.
    reserve = _cost(sep) + _cost(UNTRUSTED_NOTE) + _cost(sep) + _cost(_left_out(len(ids)))
    room = budget - fixed - reserve
    chosen: list[str] = []
    for summary_id in reversed(ids):  # newest first
        summary = summaries[summary_id]
        parents = engine.store.summary_sources(summary_id)[0]
        xml = render_summary(summary, parents)
        cost = _cost(xml) + _cost("\n")
        if cost <= room:
            chosen.append(xml)
            room -= cost
            continue
        if room - _cost("\n") >= _MIN_CLIP_CHARS:
            clipped = _clip_summary(summary, parents, room - _cost("\n"))
            if clipped is not None:
                chosen.append(clipped)
        break
    blocks = [header]
    if chosen:
        shown = "\n".join(reversed(chosen))
        left = len(ids) - len(chosen)
        blocks.append(UNTRUSTED_NOTE + "\n" + shown + ("\n" + _left_out(left) if left else ""))
    blocks.append(resume)
    text = sep.join(blocks)
    return Reinjection(text, len(chosen), len(ids), len(resume))


def _left_out(n: int) -> str:
    return f"({n:,} older summaries are not shown; lcm_grep and lcm_describe reach them.)"


def _clip_text(text: str, room: int) -> str:
    """The longest prefix of *text* (with an ellipsis) whose cost fits *room*."""
    if _cost(text) <= room:
        return text
    if room <= 0:
        return ""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _cost(text[:mid] + "…") <= room:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + "…" if lo else ""


def _clip_summary(summary: Summary, parents: list[str], room: int) -> str | None:
    """*summary*'s XML with its content cut so that the whole fits *room* (``None`` if even
    the bare element does not)."""
    tail = (
        f"\n… [cut to fit Claude Code's limit for injected context; lcm_describe"
        f" {summary.summary_id} shows the whole summary]"
    )

    def render(n: int) -> str:
        return render_summary(
            dataclasses.replace(summary, content=summary.content[:n] + tail), parents
        )

    if _cost(render(0)) > room:
        return None
    lo, hi = 0, len(summary.content)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _cost(render(mid)) <= room:
            lo = mid
        else:
            hi = mid - 1
    return render(lo)


# --- settings ------------------------------------------------------------------------------


def hook_command(
    executable: str, event: str, *, db: str | None = None, config: str | None = None
) -> str:
    """The shell command Claude Code runs for *event*."""
    return shlex.join([executable, *_globals(db, config), "hook", "claude-code", event])


def _globals(db: str | None, config: str | None) -> list[str]:
    args: list[str] = []
    if db is not None:
        args += ["--db", db]
    if config is not None:
        args += ["--config", config]
    return args


def settings_hooks(
    executable: str, *, db: str | None = None, config: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The ``hooks`` object for Claude Code's settings: one matcher group per event."""
    return {
        event: [
            {
                "matcher": MATCHERS[event],
                "hooks": [
                    {
                        "type": "command",
                        "command": hook_command(executable, event, db=db, config=config),
                        "timeout": TIMEOUTS[event],
                    }
                ],
            }
        ]
        for event in EVENTS
    }


def mcp_server_entry(
    executable: str, *, db: str | None = None, config: str | None = None
) -> dict[str, Any]:
    """The ``mcpServers`` entry that starts ``lossless mcp`` over stdio (``.mcp.json``)."""
    return {
        "type": "stdio",
        "command": executable,
        "args": [*_globals(db, config), "mcp"],
        "env": {},
    }


def mcp_add_command(
    executable: str, *, scope: str = "user", db: str | None = None, config: str | None = None
) -> str:
    """The ``claude mcp add`` command registering the MCP server in *scope*."""
    head = ["claude", "mcp", "add", "--scope", scope, MCP_SERVER_NAME, "--", executable]
    return shlex.join([*head, *_globals(db, config), "mcp"])


def is_lossless_hook(entry: Any) -> bool:
    """Whether a hook entry of a settings file runs ``lossless hook claude-code``."""
    if not isinstance(entry, Mapping):
        return False
    command = entry.get("command")
    return isinstance(command, str) and "lossless" in command and bool(_OURS.search(command))


def merge_hooks(
    settings: Mapping[str, Any], hooks: Mapping[str, list[dict[str, Any]]]
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
            if not isinstance(entries, list) or not any(is_lossless_hook(h) for h in entries):
                kept.append(group)
                continue
            others: list[Any] = []
            for h in entries:
                if not is_lossless_hook(h):
                    others.append(h)
                elif not placed and group.get("matcher", "") == wanted["matcher"]:
                    others.append(copy.deepcopy(entry))
                    placed = True
            if others:  # a group that held only a stale lossless entry goes
                kept.append({**group, "hooks": others})
        if not placed:
            kept.append(copy.deepcopy(wanted))
        events[event] = kept
    return merged


def merge_mcp_server(config: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """A ``.mcp.json`` object with the lossless server set to *entry* (others untouched)."""
    merged = copy.deepcopy(dict(config))
    servers = merged.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise LosslessError('its "mcpServers" is not an object; fix it by hand and run again')
    servers[MCP_SERVER_NAME] = copy.deepcopy(dict(entry))
    return merged


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


def _plan(path: Path, merge: Any) -> SettingsChange:
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


def plan_settings(path: Path, hooks: Mapping[str, list[dict[str, Any]]]) -> SettingsChange:
    """What installing *hooks* into the settings file at *path* changes."""
    return _plan(path, lambda data: merge_hooks(data, hooks))


def plan_mcp_json(path: Path, entry: Mapping[str, Any]) -> SettingsChange:
    """What registering the MCP server in the ``.mcp.json`` at *path* changes."""
    return _plan(path, lambda data: merge_mcp_server(data, entry))
