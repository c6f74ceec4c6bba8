"""The ``lossless`` command group and its error boundary."""

from __future__ import annotations

import importlib
import logging
import re
import sys
from typing import TYPE_CHECKING, NoReturn

import click
from rich.markup import escape

from .. import __version__
from ..errors import LosslessError
from .output import State, stderr

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

#: Every command, by name: the module (in this package) and the attribute holding it, and the
#: first paragraph of its help (what ``lossless --help`` lists; tests/test_cli.py holds it
#: to the command's own). A command is imported only when it runs or its own --help is asked
#: for, so that one command starts without loading every other's dependencies (``lossless mcp``
#: answers its client's handshake before the engine is loaded) and ``lossless --help`` loads
#: none of them.
COMMANDS: dict[str, tuple[str, str]] = {
    "import": (
        "transcripts:import_command",
        "Import transcripts (files, or directories of .jsonl/.json files).",
    ),
    "import-store": (
        "transcripts:import_store_command",
        "Move in from lossless-claw or hermes-lcm: every conversation of its database, with "
        "its messages, summary DAG and active context (one transaction per conversation).",
    ),
    "sync": (
        "sync:sync_command",
        "Import the transcripts of the agent hosts installed here: Claude Code "
        "(~/.claude/projects), Codex CLI (~/.codex/sessions) and OpenClaw "
        "(~/.openclaw/agents/*/sessions), each where its own settings put it.",
    ),
    "conversations": (
        "conversations:conversations_command",
        "List conversations: id, session, title, where they came from, their first and last "
        "message's dates, message and summary counts.",
    ),
    "show": (
        "conversations:show_command",
        "Show the messages of CONVERSATION (its id or its session id).",
    ),
    "export": (
        "export:export_command",
        "Write out CONVERSATION (its id or session id), its family, or --all of them.",
    ),
    "rename": (
        "conversations:rename_command",
        "Give CONVERSATION (its id or session id) the title TITLE.",
    ),
    "archive": (
        "conversations:archive_command",
        "Archive conversations (each an id or session id): nothing is deleted.",
    ),
    "unarchive": (
        "conversations:unarchive_command",
        "Bring archived conversations (each an id or session id) back into the listings and "
        "the store's searches.",
    ),
    "sessions": (
        "sessions:sessions_command",
        "List conversations with their session summary versions.",
    ),
    "summarize": (
        "sessions:summarize_command",
        "Update the session summary of CONVERSATION (its id or its session id).",
    ),
    "stats": (
        "store:stats_command",
        "Totals for the whole store: conversations, messages, summaries, tokens, size.",
    ),
    "doctor": (
        "store:doctor_command",
        "Check the store's integrity (read-only unless a fix is asked for).",
    ),
    "config": (
        "store:config_command",
        "Print the effective configuration (defaults, config file and LOSSLESS_* overrides).",
    ),
    "info": (
        "info:info_command",
        "Where lossless keeps things for this invocation (the store, the config file read, "
        "the large files, the hooks' logs), the summarizer in use and the ones installed, and"
        " the versions.",
    ),
    "tokens": (
        "access:tokens_command",
        "Create, list and revoke the access tokens of `lossless serve` (a namespace each).",
    ),
    "audit": (
        "access:audit_command",
        "Who did what to which conversation, and when, newest first: writes over `lossless "
        "serve --http`, forgets, exports, token changes and failed authentications.",
    ),
    "backup": (
        "store:backup_command",
        "Copy the store to DEST while it is in use, and check the copy.",
    ),
    "restore": (
        "store:restore_command",
        "Replace the store with the backup SOURCE, after checking it with doctor.",
    ),
    "migrate-store": (
        "migrate:migrate_store_command",
        "Copy the whole store at SOURCE_URL into TARGET_URL, keeping every id.",
    ),
    "reveal": (
        "store:reveal_command",
        "Print a message as it came (msg#N or N), its masked secrets shown.",
    ),
    "demo": (
        "demo:demo_command",
        "Replay a long generated agent session with compaction, offline, and report.",
    ),
    "compact": (
        "compaction:compact_command",
        "Compact CONVERSATION's active context into summaries.",
    ),
    "finish": (
        "compaction:finish_command",
        "Put the model's summaries in place of the provisional ones (of CONVERSATION, or of "
        "the whole store).",
    ),
    "status": (
        "compaction:status_command",
        "What waits for the model: provisional summaries (of CONVERSATION, or of the store), "
        "the oldest one's age, and the runs whose model kept failing, with the reason.",
    ),
    "replay": (
        "compaction:replay_command",
        "Feed TRANSCRIPT turn by turn as an agent host would, with a token budget.",
    ),
    "context": (
        "context:context_command",
        "Print the context CONVERSATION's model would get next, within TOKENS (never more).",
    ),
    "resume": (
        "context:resume_command",
        "Print CONVERSATION's resume summary: goal, current task, files, key tool executions.",
    ),
    "grep": (
        "retrieval:grep_command",
        "Search stored messages, summaries and large files (lcm_grep).",
    ),
    "describe": (
        "retrieval:describe_command",
        "Describe a summary (sum_…), large file (file_…) or message (msg#N) (lcm_describe).",
    ),
    "expand": (
        "retrieval:expand_command",
        "Expand summaries down the DAG (lcm_expand), within a token cap.",
    ),
    "ask": (
        "retrieval:ask_command",
        "Answer QUESTION from CONVERSATION's stored history (lcm_expand_query).",
    ),
    "query": (
        "retrieval:query_command",
        "Query the chat frames and the tool-execution log (chat_context_query).",
    ),
    "mcp": (
        "mcp:mcp_command",
        "Serve the recall tools to MCP clients (Claude Code, Claude Desktop, Cursor, ...).",
    ),
    "grant": (
        "mcp:grant_command",
        "Make a delegation grant over CONVERSATION for a sub-agent, or --revoke one.",
    ),
    "serve": (
        "serve:serve_command",
        "Serve the engine over JSON-RPC 2.0 (docs/serve.md).",
    ),
    "transplant": (
        "maintenance:transplant_command",
        "Copy SOURCE's context summaries, with the DAG and messages beneath them, into TARGET.",
    ),
    "rewrite": (
        "maintenance:rewrite_command",
        "Re-summarize summaries with the configured summarizer, in place of the old ones.",
    ),
    "dissolve": (
        "maintenance:dissolve_command",
        "Undo a condensation: put SUMMARY_ID's sources back into the context in its place.",
    ),
    "backfill": (
        "maintenance:backfill_command",
        "Import an old TRANSCRIPT as its own conversation, compact it, optionally transplant it.",
    ),
    "forget": (
        "maintenance:forget_command",
        "Forget for good: a CONVERSATION, its --family, its --messages A..B, or the messages "
        "--matching a text (in CONVERSATION, or anywhere without it).",
    ),
    "prune": (
        "retention:prune_command",
        "Apply the [retention] policy: archive (or forget) the old messages it names.",
    ),
    "archives": (
        "retention:archives_group",
        "List the archive files retention wrote (`lossless archives restore` reads them back).",
    ),
    "tui": (
        "tui:tui_command",
        "Browse conversations, context windows and summary DAGs; search; transplant.",
    ),
    "hook": (
        "hooks:hook_group",
        "Run as an agent host's hook, reading the hook input on stdin (Claude Code, Codex).",
    ),
    "hooks": (
        "hooks:hooks_group",
        "Set up an agent host's hooks for this store: print them, or --install them.",
    ),
}


class Commands(click.Group):
    """The ``lossless`` group: its commands (:data:`COMMANDS`) imported on first use, listed
    in the order above."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *(name for name in self.commands if name not in COMMANDS)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        module, _, attr = COMMANDS[cmd_name][0].partition(":")
        command: click.Command = getattr(importlib.import_module(f".{module}", __package__), attr)
        # `lossless import --db x.db ...` too, and `lossless tokens create --db x.db ...`.
        subcommands = command.commands.values() if isinstance(command, click.Group) else ()
        for each in (command, *subcommands):
            if not any(p.name in ("db", "db_after") for p in each.params):
                each.params.append(_DB_AFTER)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands of ``lossless --help``, from :data:`COMMANDS` (none imported), as click
        would list them."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in COMMANDS:
                listed = click.Command(name, help=COMMANDS[name][1])  # (click's shortening)
                rows.append((name, listed.get_short_help_str(limit)))
            elif (command := self.get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """The command names a shell completes, from :data:`COMMANDS` (none imported), then
        the group's options."""
        from click.shell_completion import CompletionItem

        found = [
            CompletionItem(name, help=click.Command(name, help=about).get_short_help_str())
            for name, (_, about) in COMMANDS.items()
            if name.startswith(incomplete)
        ]
        return [*found, *click.Command.shell_complete(self, ctx, incomplete)]


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
        handler.setLevel(logging.WARNING)  # (a hook logs its calls to its file at INFO)
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
