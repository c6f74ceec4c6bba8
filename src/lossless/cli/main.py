"""The ``lossless`` command group and its error boundary."""

from __future__ import annotations

import importlib
import logging
import re
import sys
from typing import NoReturn

import click
from rich.markup import escape

from .. import __version__
from ..errors import LosslessError
from .output import State, stderr

#: Every command, by name: the module (in this package) and the attribute holding it. A command
#: is imported when it runs (or when --help lists it), so that one command starts without
#: loading every other's dependencies: ``lossless mcp`` answers its client's handshake before
#: the engine is loaded.
COMMANDS = {
    "import": "transcripts:import_command",
    "import-store": "transcripts:import_store_command",
    "sync": "sync:sync_command",
    "conversations": "conversations:conversations_command",
    "show": "conversations:show_command",
    "export": "export:export_command",
    "rename": "conversations:rename_command",
    "archive": "conversations:archive_command",
    "unarchive": "conversations:unarchive_command",
    "sessions": "sessions:sessions_command",
    "summarize": "sessions:summarize_command",
    "stats": "store:stats_command",
    "doctor": "store:doctor_command",
    "config": "store:config_command",
    "info": "info:info_command",
    "backup": "store:backup_command",
    "restore": "store:restore_command",
    "migrate-store": "migrate:migrate_store_command",
    "reveal": "store:reveal_command",
    "demo": "demo:demo_command",
    "compact": "compaction:compact_command",
    "finish": "compaction:finish_command",
    "status": "compaction:status_command",
    "replay": "compaction:replay_command",
    "context": "context:context_command",
    "resume": "context:resume_command",
    "grep": "retrieval:grep_command",
    "describe": "retrieval:describe_command",
    "expand": "retrieval:expand_command",
    "ask": "retrieval:ask_command",
    "query": "retrieval:query_command",
    "mcp": "mcp:mcp_command",
    "grant": "mcp:grant_command",
    "serve": "serve:serve_command",
    "transplant": "maintenance:transplant_command",
    "rewrite": "maintenance:rewrite_command",
    "dissolve": "maintenance:dissolve_command",
    "backfill": "maintenance:backfill_command",
    "forget": "maintenance:forget_command",
    "tui": "tui:tui_command",
    "hook": "hooks:hook_group",
    "hooks": "hooks:hooks_group",
}


class Commands(click.Group):
    """The ``lossless`` group: its commands (:data:`COMMANDS`) imported on first use, listed
    in the order above."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *(name for name in self.commands if name not in COMMANDS)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        home = COMMANDS.get(cmd_name)
        if home is None:
            return super().get_command(ctx, cmd_name)
        module, _, attr = home.partition(":")
        command: click.Command = getattr(importlib.import_module(f".{module}", __package__), attr)
        if not any(p.name in ("db", "db_after") for p in command.params):
            command.params.append(_DB_AFTER)  # `lossless import --db x.db ...` too
        return command


def _db_after(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--db`` given after the command (as sqlite-utils and llm take it): the same as before."""
    if value is not None:
        state = ctx.find_object(State)
        if state is not None:
            state.db = value
            state.db_on_command_line = True


_DB_AFTER = click.Option(
    ["--db", "db_after"],
    metavar="PATH|URL",
    expose_value=False,
    is_eager=True,
    callback=_db_after,
    help="The store, as `lossless --db PATH COMMAND` takes it.",
)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lossless")
@click.option(
    "--db",
    envvar="LOSSLESS_DB",
    metavar="PATH|URL",
    help="Database file, or a postgresql:// URL (default: lossless.db in the user data dir)."
    " Env: LOSSLESS_DB.",
)
@click.option(
    "--config",
    "config_path",
    envvar="LOSSLESS_CONFIG",
    metavar="PATH",
    type=click.Path(dir_okay=False),
    help="Config file (TOML). Env: LOSSLESS_CONFIG.",
)
@click.option(
    "--debug",
    is_flag=True,
    envvar="LOSSLESS_DEBUG",
    help="Show tracebacks with errors and warnings, and debug logging. Env: LOSSLESS_DEBUG.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print data as JSON: the same as the command's own --json, given before it.",
)
@click.pass_context
def cli(
    ctx: click.Context, db: str | None, config_path: str | None, debug: bool, as_json: bool
) -> None:
    """Lossless context management for LLM agents.

    Every message is kept; old context becomes a DAG of summaries you can drill back through.
    """
    _logging(debug)
    source = ctx.get_parameter_source("db")
    state = State(
        db=db,
        config_path=config_path,
        db_on_command_line=source is click.core.ParameterSource.COMMANDLINE,
    )
    ctx.obj = state
    ctx.call_on_close(state.close)
    if as_json:
        _json_for(ctx)


def _json_for(ctx: click.Context) -> None:
    """``lossless --json COMMAND``: COMMAND's own ``--json`` on (a group's: each of its
    commands'), or a usage error when it prints no JSON."""
    name = ctx.invoked_subcommand
    command = cli.get_command(ctx, name) if name else None
    if name is None or command is None:
        return  # click says the command is missing or unknown
    if isinstance(command, click.Group):
        defaults = {
            sub: {"as_json": True}
            for sub in command.list_commands(ctx)
            if _prints_json(command.get_command(ctx, sub))
        }
        if defaults:
            ctx.default_map = {name: defaults}
            return
    elif _prints_json(command):
        ctx.default_map = {name: {"as_json": True}}
        return
    raise click.UsageError(f"`lossless {name}` prints no JSON; run it without --json")


def _prints_json(command: click.Command | None) -> bool:
    return command is not None and any(p.name == "as_json" for p in command.params)


def _logging(debug: bool) -> None:
    """Warnings as one line each on stderr (``warning: ...``); with *debug*, everything
    with its traceback."""
    root = logging.getLogger("lossless")
    for handler in list(root.handlers):
        if getattr(handler, "lossless_cli", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.lossless_cli = True  # type: ignore[attr-defined]
    if debug:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.setLevel(logging.DEBUG)
    else:
        handler.setFormatter(_OneLine("warning: %(message)s"))
        _REPEATS.seen.clear()
        _REPEATS.dropped = 0
        handler.addFilter(_REPEATS)
        root.setLevel(logging.WARNING)
    root.addHandler(handler)


class _Repeats(logging.Filter):
    """Each warning once: the same failure again (at another rung of the ladder, or for the
    next pass) is counted, and the count said at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\((normal|aggressive)\)", "", record.getMessage())
        if key in self.seen:
            self.dropped += 1
            return False
        self.seen.add(key)
        return True

    def report(self) -> None:
        if self.dropped:
            stderr.print(f"warning: {self.dropped} more like the above", highlight=False)
            self.dropped = 0


_REPEATS = _Repeats()


class _OneLine(logging.Formatter):
    """A record's message alone: no traceback (``--debug`` shows it)."""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_info = None
        record.exc_text = None
        return super().format(record).splitlines()[0]


def main() -> None:
    """Console-script entry point: run the CLI, turning lossless errors into exit codes."""
    try:
        _main()
    finally:
        _REPEATS.report()


def _main() -> None:
    try:
        # Without standalone mode click returns a ctx.exit()/Exit code instead of exiting.
        code = cli.main(standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        if exc.ctx is not None:  # how the command is called, then what was wrong
            click.echo(exc.ctx.get_usage(), err=True)
            click.echo(f"Try '{exc.ctx.command_path} --help' for help.\n", err=True)
        _error(exc.format_message(), exc.exit_code)
    except click.ClickException as exc:
        _error(exc.format_message(), exc.exit_code)
    except click.exceptions.Abort:
        stderr.print("aborted")
        sys.exit(130)
    except LosslessError as exc:
        if logging.getLogger("lossless").isEnabledFor(logging.DEBUG):
            stderr.print_exception()
        _error(str(exc), exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)


def _error(message: str, code: int) -> NoReturn:
    """Every error the same way, whoever raised it (click's usage errors, lossless's): one
    ``error:`` line on stderr, and the exit code."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    sys.exit(code)
