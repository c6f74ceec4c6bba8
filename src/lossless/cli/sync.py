"""``lossless sync``: import what the installed hosts wrote, and follow it with --watch."""

from __future__ import annotations

import importlib.util
import signal
import sys
import threading
from types import FrameType

import click

from ..errors import LosslessError
from ..ingest.reconcile import ReconcileReport
from ..sync import HOSTS, WATCH_HINT, host_folders, sync, watch
from .output import (
    EXIT_PARTIAL,
    State,
    emit_json,
    json_option,
    json_text,
    pass_state,
    stderr,
    stdout,
)
from .transcripts import print_reports, report_problems, skip_bad_option


@click.command("sync")
@click.option(
    "--host",
    "hosts",
    multiple=True,
    type=click.Choice(sorted(HOSTS)),
    help="Only this host's transcripts (repeat for several; default: every host).",
)
@click.option("--watch", "follow", is_flag=True, help="Go on: import each change as it lands.")
@skip_bad_option
@json_option
@pass_state
def sync_command(
    state: State, hosts: tuple[str, ...], follow: bool, skip_bad: bool, as_json: bool
) -> None:
    """Import the transcripts of the agent hosts installed here: Claude Code
    (~/.claude/projects), Codex CLI (~/.codex/sessions) and OpenClaw
    (~/.openclaw/agents/*/sessions), each where its own settings put it.

    Only what a file gained since the last import is read, so running it again is cheap.
    --watch then follows the folders (file-system events; pip install 'lossless[watch]') and
    imports each transcript once it has been quiet a moment; a line the host is still
    writing waits for its end. Stop it with Ctrl-C. Lines that could not be imported are
    named as `import` names them (exit code 3 unless --skip-bad); --watch names each once.
    """
    if follow and importlib.util.find_spec("watchdog") is None:
        raise LosslessError(WATCH_HINT)  # before the first pass, not after it
    engine = state.engine(create=True)
    folders = host_folders(hosts)
    report = sync(engine, folders)
    engine.finish_indexes()
    if as_json and follow:  # one JSON object a line: the first pass, then each import
        click.echo(json_text(report.to_dict()))
    elif as_json:
        emit_json(report.to_dict())
    elif not as_json:
        for folder in folders:
            where = "" if folder.exists else " (not there)"
            stderr.print(f"{folder.host}: {folder.path}{where}", highlight=False)
        print_reports(report.reports, quiet_unchanged=True)
        unchanged = sum(1 for r in report.reports if r.mode == "unchanged")
        stdout.print(
            f"{report.imported} message(s) imported; {unchanged} file(s) unchanged",
            highlight=False,
        )
    problems = report_problems(report.reports, accept=skip_bad)
    if not follow:
        if problems:
            sys.exit(EXIT_PARTIAL)
        return
    stop = threading.Event()

    def interrupted(_signum: int, _frame: FrameType | None) -> None:
        stop.set()
        # Whatever runs now stops too (an import of a long file, a long statement): the
        # watch ends within a second, keeping what was stored.
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    def imported(reports: list[ReconcileReport]) -> None:
        if as_json:  # one JSON object a line while it follows
            for r in reports:
                if r.mode != "unchanged":
                    click.echo(json_text(r.to_dict()))
        else:
            print_reports(reports, quiet_unchanged=True)
        report_problems(reports, accept=skip_bad, only_new=True)
        sys.stdout.flush()

    def ready() -> None:
        stderr.print("watching; Ctrl-C stops", highlight=False)
        sys.stdout.flush()

    watch(engine, folders, imported, stop, ready)
