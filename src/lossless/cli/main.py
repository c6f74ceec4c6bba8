"""The ``lossless`` command group and its error boundary."""

from __future__ import annotations

import logging
import re
import sys

import click
from rich.markup import escape

from .. import __version__
from ..errors import LosslessError
from . import (
    compaction,
    context,
    conversations,
    demo,
    maintenance,
    migrate,
    retrieval,
    sessions,
    store,
    transcripts,
    tui,
)
from . import export as export_commands
from . import hooks as hook_commands
from . import mcp as mcp_commands
from . import serve as serve_commands
from . import sync as sync_commands
from .output import State, stderr


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@click.pass_context
def cli(ctx: click.Context, db: str | None, config_path: str | None, debug: bool) -> None:
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


for command in (
    transcripts.import_command,
    transcripts.import_store_command,
    sync_commands.sync_command,
    conversations.conversations_command,
    conversations.show_command,
    export_commands.export_command,
    conversations.rename_command,
    conversations.archive_command,
    conversations.unarchive_command,
    sessions.sessions_command,
    sessions.summarize_command,
    store.stats_command,
    store.doctor_command,
    store.config_command,
    store.backup_command,
    store.restore_command,
    migrate.migrate_store_command,
    store.reveal_command,
    demo.demo_command,
    compaction.compact_command,
    compaction.finish_command,
    compaction.status_command,
    compaction.replay_command,
    context.context_command,
    context.resume_command,
    retrieval.grep_command,
    retrieval.describe_command,
    retrieval.expand_command,
    retrieval.ask_command,
    retrieval.query_command,
    mcp_commands.mcp_command,
    mcp_commands.grant_command,
    serve_commands.serve_command,
    maintenance.transplant_command,
    maintenance.rewrite_command,
    maintenance.dissolve_command,
    maintenance.backfill_command,
    maintenance.forget_command,
    tui.tui_command,
    hook_commands.hook_group,
    hook_commands.hooks_group,
):
    cli.add_command(command)


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
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        stderr.print("aborted")
        sys.exit(130)
    except LosslessError as exc:
        stderr.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, markup=True)
        if logging.getLogger("lossless").isEnabledFor(logging.DEBUG):
            stderr.print_exception()
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
