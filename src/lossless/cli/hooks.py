"""``lossless hook`` (run as an agent host's hook) and ``lossless hooks`` (set the hooks up)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

import click

from ..engine import Engine
from ..errors import LosslessError
from ..ingest.transcripts import over_limit
from ..integrations.claude_code import (
    CLAUDE_CODE,
    MCP_SERVER_NAME,
    RECALL_TOOLS_RULE,
    SCOPES,
    mcp_add_command,
    mcp_server_entry,
    plan_mcp_json,
    plan_settings,
    settings_path,
)
from ..integrations.codex import (
    CODEX,
    CODEX_TIMEOUTS,
    codex_home,
    mcp_server_table,
    plan_hooks,
    plan_trust,
    trust_entries,
)
from ..integrations.codex import MCP_SERVER_NAME as CODEX_MCP_NAME
from ..integrations.finisher import start_finisher, start_pruner
from ..integrations.hooks import (
    DEFAULT_MAX_CHARS,
    DEFAULT_RECALL_CHARS,
    EVENTS,
    MIN_MAX_CHARS,
    HookInput,
    HookInputError,
    Host,
    default_log_path,
    run_hook,
)
from ..integrations.settings import SettingsChange, settings_hooks
from .output import State, confirmed, emit_json, json_option, pass_state, stderr

logger = logging.getLogger(__name__)

LOG_BYTES = 1 << 20
LOG_BACKUPS = 3


@click.group("hook")
def hook_group() -> None:
    """Run as an agent host's hook, reading the hook input on stdin (Claude Code, Codex).

    `lossless hooks claude-code --install` (or the Claude Code plugin) and `lossless hooks
    codex --install` put the calls into the host's settings. A hook never fails the host:
    errors go to a log file and the exit code is always 0.
    """


def _hook_command(host: Host) -> click.Command:
    @click.command(
        host.name,
        # The host must never see a usage error (exit 2 is a blocking error for hooks).
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        help=f"""Handle one {host.title} hook call: EVENT is one of {", ".join(EVENTS)}.

        UserPromptSubmit, Stop and SubagentStop store what the transcript gained since the
        last call; PreCompact stores it and compacts with a full sweep; SessionEnd stores it
        and compacts incrementally; SessionStart after a compaction (or on resuming a session
        the host compacted, once per compaction) prints lossless's newest summaries and the
        resume summary as additionalContext JSON; UserPromptSubmit in a session the host
        compacted prints the stored messages the prompt is about that its window no longer
        holds (a few, cut short). Errors are logged; the exit code is 0.
        """,
    )
    @click.argument("event", required=False)
    @click.option(
        "--max-chars",
        metavar="N",
        envvar=["LOSSLESS_HOOK_MAX_CONTEXT_CHARS", "LOSSLESS_CLAUDE_CODE_MAX_CONTEXT_CHARS"],
        help=f"SessionStart: print at most N characters (default {DEFAULT_MAX_CHARS:,};"
        " Claude Code moves anything over 10,000 to a file). Env:"
        " LOSSLESS_HOOK_MAX_CONTEXT_CHARS.",
    )
    @click.option(
        "--recall-chars",
        metavar="N",
        envvar="LOSSLESS_HOOK_RECALL_CHARS",
        help=f"UserPromptSubmit: print at most N characters of the messages the prompt is"
        f" about (default {DEFAULT_RECALL_CHARS:,}; 0: none). Env: LOSSLESS_HOOK_RECALL_CHARS.",
    )
    @click.option(
        "--log-file",
        metavar="PATH",
        envvar="LOSSLESS_HOOK_LOG",
        help=f"Log here (default: {host.name}-hooks.log in the user log dir). Env:"
        " LOSSLESS_HOOK_LOG.",
    )
    @pass_state
    def command(
        state: State,
        event: str | None,
        max_chars: str | None,
        recall_chars: str | None,
        log_file: str | None,
    ) -> None:
        package = logging.getLogger("lossless")
        log = Path(log_file).expanduser() if log_file else default_log_path(host)
        handler = _file_handler(log)
        level = package.level
        if handler is not None:
            package.addHandler(handler)
        package.setLevel(logging.INFO)
        try:
            out = _handle(state, host, event, (max_chars, recall_chars), log)
        finally:
            package.setLevel(level)
            if handler is not None:
                package.removeHandler(handler)
                handler.close()
        if out:
            with contextlib.suppress(OSError):  # the host stopped reading: nothing more to do
                click.echo(out)

    return command


for _host in (CLAUDE_CODE, CODEX):
    hook_group.add_command(_hook_command(_host))


def _handle(
    state: State, host: Host, event: str | None, limits: tuple[str | None, str | None], log: Path
) -> str:
    """Run the hook; what to print (*limits*: the --max-chars and --recall-chars given).
    Every error is logged and becomes empty output."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            raise HookInputError(f"no hook input: stdin is a terminal ({host.title} pipes it in)")
        hook = HookInput.parse(_hook_input(state.config.max_line_bytes), event)
        pending: set[int] = set()

        def opened() -> Engine:
            engine = state.engine(create=True)  # a hook writes
            # The hook returns at once: the model's summaries come in a process of its own.
            engine.finish_elsewhere(pending.add)
            return engine

        outcome = run_hook(
            opened,
            hook,
            host,
            max_chars=_chars(limits[0], "--max-chars", DEFAULT_MAX_CHARS),
            recall_chars=_chars(limits[1], "--recall-chars", DEFAULT_RECALL_CHARS, off=True),
        )
        if pending:
            _finish_detached(state, log)
        cap = state.engine().cap() if state.config.max_store_bytes else None
    except LosslessError as exc:  # said in its own words: no traceback needed
        logger.error("lossless hook %s %s failed: %s", host.name, event or "", exc)
        print(f"lossless: the hook failed: {exc} (logged in {log})", file=sys.stderr)
        return ""
    except Exception:  # the top of a host's hook: log everything, fail nothing
        logger.exception("lossless hook %s %s failed", host.name, event or "")
        print(f"lossless: the hook failed; see {log}", file=sys.stderr)
        return ""
    logger.info("%s", outcome.describe())
    for problem in outcome.problems:
        logger.warning("%s: %s", outcome.event, problem)
    if cap is not None and cap.near:
        logger.warning("%s", cap.warning())
        if state.config.retention.at_cap:
            _prune_detached(state, log)
    return outcome.stdout


def _hook_input(limit: int) -> str:
    """The hook's input on stdin: at most *limit* bytes (``max_line_bytes``) are held; a
    larger input is refused, read to its end a megabyte at a time, so the host is not left
    writing into a pipe no one reads."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream put in place of stdin (an embedding program's)
        text = sys.stdin.read(limit + 1)
        data = text.encode("utf-8", "surrogatepass")
    else:
        data = buffer.read(limit + 1)
    if len(data) > limit:
        size = len(data)
        while chunk := (buffer.read(1 << 20) if buffer is not None else sys.stdin.read(1 << 20)):
            size += len(chunk)
        raise HookInputError(over_limit("the hook input", size, limit, "max_line_bytes"))
    return data.decode("utf-8", "replace")


def _finish_detached(state: State, log: Path) -> None:
    """``lossless finish --if-free`` on this store, as a process of its own (the host's hook
    does not wait for it), its output going to the hooks' log."""
    options = ["--db", state.database()]
    if state.config_path:
        options += ["--config", state.config_path]
    start_finisher(options, log=log)
    logger.info("provisional summaries: `lossless finish` started to put the model's in place")


def _prune_detached(state: State, log: Path) -> None:
    """``lossless prune --if-free`` on this store, as a process of its own (a store near its
    cap, with ``retention.at_cap``), its output going to the hooks' log."""
    options = ["--db", state.database()]
    if state.config_path:
        options += ["--config", state.config_path]
    start_pruner(options, log=log)
    logger.info("the store is near its cap: `lossless prune` started (retention.at_cap)")


def _chars(text: str | None, option: str, default: int, *, off: bool = False) -> int:
    """A character limit given on the command line: at least MIN_MAX_CHARS (or 0, when *off*
    is allowed); anything else is logged and *default* used (a hook never fails the host)."""
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < MIN_MAX_CHARS and not (off and value == 0):
        said = "0 or a number" if off else "a number"
        logger.warning(
            "%s %r is not %s >= %d; using %d", option, text, said, MIN_MAX_CHARS, default
        )
        return default
    return value


def _file_handler(path: Path) -> logging.Handler | None:
    """A size-rotated log file, owner-only directory; ``None`` when it cannot be opened (the
    hook still runs, unlogged)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handler = RotatingFileHandler(
            path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
        )
    except OSError:
        return None
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    return handler


@click.group("hooks")
def hooks_group() -> None:
    """Set up an agent host's hooks for this store: print them, or --install them."""


@hooks_group.command("claude-code")
@click.option("--install", is_flag=True, help="Write them into the settings (shows the diff).")
@click.option(
    "--scope",
    type=click.Choice(SCOPES),
    default="user",
    show_default=True,
    help="user: ~/.claude/settings.json; project: .claude/settings.json (shared, with the MCP"
    " server in .mcp.json); local: .claude/settings.local.json.",
)
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The project for --scope project/local (default: the current directory).",
)
@click.option(
    "--executable",
    metavar="PATH",
    help="The lossless command the hooks run (default: this one, by absolute path).",
)
@click.option("--yes", "-y", is_flag=True, help="Write without asking.")
@json_option
@pass_state
def claude_code_hooks(
    state: State,
    install: bool,
    scope: str,
    project_dir: Path | None,
    executable: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    """Print Claude Code's hook settings and MCP server entry for this store, or --install them.

    Command hooks for UserPromptSubmit, Stop and SubagentStop (store each turn as it
    finishes), PreCompact and SessionEnd (store and compact) and SessionStart (after a
    compaction, reinject lossless's summaries), each calling this lossless by absolute path
    with the database made explicit (--db), so the hooks and `lossless mcp` share it.
    --install merges them into the settings file after showing the diff and asking (--yes
    skips the question): the file's other hooks stay, an older lossless entry is replaced,
    never duplicated, and the previous file is kept as a .bak copy. Claude Code keeps MCP
    servers outside settings.json: project scope writes .mcp.json, the other scopes print the
    `claude mcp add` command to run; --install also allows the recall tools in the settings
    file (permissions.allow: mcp__lossless), so that print mode's calls are not refused. (The
    Claude Code plugin is the other way to install.)
    """
    if as_json and install and not yes:
        raise click.UsageError("--install with --json needs --yes (there is no one to ask)")
    exe = executable or _executable()
    db = state.database()
    config = str(Path(state.config_path).expanduser().resolve()) if state.config_path else None
    project = (project_dir or Path.cwd()).expanduser().resolve()
    path = settings_path(scope, project=project)
    hooks = settings_hooks(exe, CLAUDE_CODE, db=db, config=config)
    entry = mcp_server_entry(exe, db=db, config=config)
    mcp_json = project / ".mcp.json" if scope == "project" else None
    command = mcp_add_command(exe, scope=scope, db=db, config=config)
    if not install:
        _print_settings(path, hooks, entry, command, mcp_json, as_json, scope)
        return
    # The recall tools are called without a question (print mode has no one to ask).
    changes = [plan_settings(path, hooks, allow=[RECALL_TOOLS_RULE])]
    if mcp_json is not None:
        changes.append(plan_mcp_json(mcp_json, entry))
    pending = [c for c in changes if c.changed]
    written: list[dict[str, str | None]] = []
    if pending and not as_json:
        for change in pending:
            click.echo(change.diff(), nl=False)
        if not confirmed(
            "Write these changes?", yes=yes, refusal="this writes the changes shown above"
        ):
            stderr.print("nothing written", highlight=False)
            return
    for change in pending:
        backup = change.apply()
        written.append({"path": str(change.path), "backup": str(backup) if backup else None})
    if as_json:
        emit_json(
            {
                "scope": scope,
                "written": written,
                "unchanged": [str(c.path) for c in changes if not c.changed],
                "mcp_command": None if mcp_json is not None else command,
            }
        )
        return
    _report(changes, written, command if mcp_json is None else None)


@hooks_group.command("codex")
@click.option("--install", is_flag=True, help="Write them into hooks.json (shows the diff).")
@click.option(
    "--trust",
    is_flag=True,
    help="With --install: also record in config.toml that Codex may run them (their hashes).",
)
@click.option(
    "--codex-home",
    "codex_home_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Codex's folder (default: $CODEX_HOME, else ~/.codex).",
)
@click.option(
    "--executable",
    metavar="PATH",
    help="The lossless command the hooks run (default: this one, by absolute path).",
)
@click.option(
    "--no-mcp",
    is_flag=True,
    help="With --install: leave config.toml's [mcp_servers] as they are (no recall tools).",
)
@click.option("--yes", "-y", is_flag=True, help="Write without asking.")
@json_option
@pass_state
def codex_hooks(
    state: State,
    install: bool,
    trust: bool,
    codex_home_dir: Path | None,
    executable: str | None,
    no_mcp: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Print Codex's hooks.json entries for this store, or --install them.

    The same hooks as Claude Code's (Codex speaks the same protocol): every turn stored as it
    finishes, the session compacted before Codex compacts it, and lossless's summaries put
    back after. --install merges them into $CODEX_HOME/hooks.json after showing the diff and
    asking (--yes skips it), keeping the file's other hooks and a .bak copy. Codex runs only
    hooks the user trusts: --trust records their hashes in config.toml (Codex 0.169's
    scheme); without it, trust them in Codex, or run `codex exec
    --dangerously-bypass-hook-trust`. --install also registers lossless's MCP server (the
    recall tools: lcm_grep, lcm_describe, lcm_expand_query, ...) in config.toml as
    [mcp_servers.lossless], unless --no-mcp.
    """
    if as_json and install and not yes:
        raise click.UsageError("--install with --json needs --yes (there is no one to ask)")
    if trust and not install:
        raise click.UsageError("--trust goes with --install")
    home = (codex_home_dir or codex_home()).expanduser().resolve()
    exe = executable or _executable()
    config = str(Path(state.config_path).expanduser().resolve()) if state.config_path else None
    hooks = settings_hooks(exe, CODEX, db=state.database(), config=config, timeouts=CODEX_TIMEOUTS)
    server = mcp_server_table(
        exe, db=state.database(), config=config, cache_home=os.environ.get("XDG_CACHE_HOME")
    )
    path = home / "hooks.json"
    if not install:
        if as_json:
            emit_json(
                {
                    "hooks_path": str(path),
                    "hooks": {"hooks": hooks},
                    "config_path": str(home / "config.toml"),
                    "mcp_server": {"name": CODEX_MCP_NAME, **server},
                }
            )
        else:
            click.echo(f"# Codex hooks: merge into {path}")
            click.echo("# (or run this command again with --install; add --trust to trust them)")
            click.echo(json.dumps({"hooks": hooks}, indent=2, ensure_ascii=False))
            click.echo(f"\n# The recall tools: add to {home / 'config.toml'}")
            click.echo(f"[mcp_servers.{CODEX_MCP_NAME}]")
            click.echo(f"command = {json.dumps(server['command'])}")
            click.echo(f"args = {json.dumps(server['args'])}")
        return
    change = plan_hooks(path, hooks)
    entries = trust_entries(path, json.loads(change.after)) if trust else {}
    configuring = trust or not no_mcp
    trusting = (
        plan_trust(home / "config.toml", entries, mcp_server=None if no_mcp else server)
        if configuring
        else None
    )
    diffs = [c.diff() for c in (change, trusting) if c is not None and c.changed]
    if diffs and not as_json:
        for diff in diffs:
            click.echo(diff, nl=False)
        if not confirmed(
            "Write these changes?", yes=yes, refusal="this writes the changes shown above"
        ):
            stderr.print("nothing written", highlight=False)
            return
    backup = change.apply()
    if trusting is not None:
        trusting.apply()
    if not no_mcp:
        _remember_mcp_tools()
    if as_json:
        emit_json(
            {
                "hooks_path": str(path),
                "changed": change.changed,
                "backup": str(backup) if backup else None,
                "trusted": sorted(entries) if trust else [],
                "mcp_server": None if no_mcp else {"name": CODEX_MCP_NAME, **server},
            }
        )
        return
    click.echo(
        f"wrote {path}" + (f" (previous file kept as {backup})" if backup else "")
        if change.changed
        else f"{path}: already installed; nothing to change"
    )
    if not no_mcp:
        click.echo(
            f"lossless's MCP server (the recall tools) is [mcp_servers.{CODEX_MCP_NAME}] in"
            f" {home / 'config.toml'}"
        )
    if trust:
        click.echo(f"recorded their trust in {home / 'config.toml'}")
    else:
        stderr.print(
            "Codex runs only hooks you trust: run this again with --trust, trust them in"
            " Codex, or pass --dangerously-bypass-hook-trust to codex exec.",
            highlight=False,
        )


def _print_settings(
    path: Path,
    hooks: dict[str, list[dict[str, object]]],
    entry: dict[str, object],
    command: str,
    mcp_json: Path | None,
    as_json: bool,
    scope: str,
) -> None:
    if as_json:
        emit_json(
            {
                "scope": scope,
                "settings_path": str(path),
                "settings": {"hooks": hooks},
                "mcp_server": {"name": MCP_SERVER_NAME, **entry},
                "mcp_json_path": str(mcp_json) if mcp_json else None,
                "mcp_command": command,
            }
        )
        return
    click.echo(f"# Claude Code hooks: merge into {path}")
    click.echo("# (or run this command again with --install: it merges them and keeps a backup)")
    click.echo(json.dumps({"hooks": hooks}, indent=2, ensure_ascii=False))
    click.echo("")
    if mcp_json is not None:
        click.echo(f"# MCP server: merge into {mcp_json} (--install does this)")
        click.echo(json.dumps({"mcpServers": {MCP_SERVER_NAME: entry}}, indent=2))
        click.echo("# or register it with:")
    else:
        click.echo(
            "# MCP server: Claude Code keeps MCP servers in ~/.claude.json, not in"
            " settings.json; register it with:"
        )
    click.echo(command)
    _warn_without_mcp()


def _report(
    changes: list[SettingsChange], written: list[dict[str, str | None]], command: str | None
) -> None:
    for item in written:
        backup = f" (previous file kept as {item['backup']})" if item["backup"] else ""
        click.echo(f"wrote {item['path']}{backup}")
    for change in changes:
        if not change.changed:
            click.echo(f"{change.path}: already installed; nothing to change")
    if command is not None:
        click.echo("Claude Code keeps MCP servers outside settings.json; register the server with:")
        click.echo(f"  {command}")
    if written:
        stderr.print(
            "Claude Code reads hooks when a session starts: restart running sessions (/hooks"
            " lists what is loaded).",
            highlight=False,
        )
    _warn_without_mcp()


def _warn_without_mcp() -> None:
    if importlib.util.find_spec("mcp") is None:
        stderr.print(
            "note: `lossless mcp` needs the MCP SDK: pip install 'lossless\\[mcp]'",
            highlight=False,
        )


def _remember_mcp_tools() -> None:
    """Write down the MCP server's tool list now, so that its first start answers it before
    the SDK loads (Codex sends a turn without waiting for a slower server's tools)."""
    try:
        from ..mcp_server import remember_store_tools
    except ModuleNotFoundError:  # no MCP SDK: the server says so when it starts
        return
    remember_store_tools()


def _executable() -> str:
    """This lossless command, by absolute path (hooks run without the user's shell setup)."""
    name = "lossless.exe" if os.name == "nt" else "lossless"
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside.absolute())
    found = shutil.which("lossless")
    if found:
        return str(Path(found).absolute())
    raise LosslessError(
        "cannot find the lossless command beside this Python or on PATH; give --executable PATH"
    )
