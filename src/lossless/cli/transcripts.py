"""``lossless import``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.markup import escape

from ..ingest.peers import PEERS
from ..ingest.reconcile import ReconcileReport
from ..ingest.transcripts import FORMATS
from .output import (
    EXIT_PARTIAL,
    State,
    emit_json,
    file_size,
    json_option,
    pass_state,
    progress_bar,
    stderr,
    stdout,
    working,
)

skip_bad_option = click.option(
    "--skip-bad",
    is_flag=True,
    help="Accept the lines and files that could not be imported: still named, exit code 0.",
)


@click.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(sorted(n for n, f in FORMATS.items() if f.not_a_transcript is None)),
    help="Transcript format (default: detected from the first line).",
)
@skip_bad_option
@json_option
@pass_state
def import_command(
    state: State, paths: tuple[Path, ...], fmt: str | None, skip_bad: bool, as_json: bool
) -> None:
    """Import transcripts (files, or directories of .jsonl/.json files).

    Understands OpenClaw session files, Claude Code transcripts, Codex CLI rollouts,
    OpenAI-style message lists and `lossless export` files, each told from its content.
    Re-importing, or importing a file that grew, stores only what is new. Every line that
    could not be imported (not JSON, of no known shape) is named with its line number, and
    every file skipped, with why, on each import, the file changed or not; the exit code is
    then 3 unless --skip-bad accepts them. A file that holds nothing to import creates
    nothing; one a host keeps beside its transcripts (a trace, an index) is named and passed
    over.
    """
    engine = state.engine(create=True)
    total = sum(file_size(p) for p in paths)
    reports: list[ReconcileReport] = []
    done_before = 0
    with progress_bar("importing", total) as update:
        for path in paths:

            def advance(done: int, _total: int, base: int = done_before) -> None:
                update(base + done, total)

            reports.extend(engine.import_path(path, format=fmt, progress=advance))
            done_before += file_size(path)
    # Large batches leave the substring (trigram) index for later; finish it now so the
    # first search after an import does not pay for it (on a terminal, saying so).
    with working("finishing the search indexes (substrings, surroundings) and merging them"):
        engine.finish_indexes()
    if as_json:
        emit_json([r.to_dict() for r in reports])
    else:
        print_reports(reports)
    if not reports:
        stderr.print("no transcript files found (.jsonl or .json)", highlight=False)
        sys.exit(EXIT_PARTIAL)
    if report_problems(reports, accept=skip_bad):
        sys.exit(EXIT_PARTIAL)


def print_reports(reports: list[ReconcileReport], *, quiet_unchanged: bool = False) -> None:
    """One line per file and conversation: what was imported, skipped or passed over."""
    for r in reports:
        if r.mode == "failed" or (quiet_unchanged and r.mode == "unchanged"):
            continue
        if r.mode == "passed_over":
            stdout.print(
                f"{escape(_shown(r.path))}: passed over: {escape(r.problems[0].reason)}",
                highlight=False,
            )
            continue
        if r.mode == "empty":
            stdout.print(
                f"{escape(_shown(r.path))}: no messages to import; nothing stored", highlight=False
            )
            continue
        skipped = ", ".join(f"{n} {k}" for k, n in sorted(r.skipped.items()))
        line = (
            f"{escape(_shown(r.path))} → conversation {r.conversation_id}"
            f" ({escape(r.session_id)}): {r.imported:,} imported, {r.already_stored:,} already"
            " stored"
        )
        if r.mode == "unchanged":
            line += " (file unchanged)"
        elif r.mode == "tail":
            line += " (read only the appended tail)"
        if r.off_branch:
            line += (
                f", {r.off_branch} on abandoned branches (kept in conversation"
                f" {r.branch_conversation_id})"
                if r.branch_conversation_id
                else f", {r.off_branch} on abandoned branches"
            )
        if skipped:
            line += f"; skipped entries: {escape(skipped)}"
        stdout.print(line, highlight=False)
        if r.missing_before_anchor:
            stderr.print(
                f"warning: {r.missing_before_anchor} entries before the newest stored entry "
                f"are not in the store and were not imported (the store diverged from "
                f"{escape(r.path)})",
                highlight=False,
            )


def report_problems(
    reports: list[ReconcileReport], *, accept: bool = False, only_new: bool = False
) -> bool:
    """Say on stderr which lines were not imported, and which files were skipped; whether
    there were any that *accept* (``--skip-bad``) does not accept. *only_new* leaves out the
    bad lines an earlier import already named (``sync --watch``: said once per change)."""
    lines = 0
    files = 0
    for r in reports:
        for p in r.not_imported:
            if only_new and p.known:
                continue
            if r.mode == "failed":
                files += 1
                where = f"{p.path}:{p.line}" if p.line > 1 else p.path
                stderr.print(f"skipped file {escape(where)}: {escape(p.reason)}", highlight=False)
            else:
                lines += 1
                stderr.print(f"not imported {escape(str(p))}", highlight=False)
    if not (lines or files):
        return False
    parts = [f"{lines} line(s)"] if lines else []
    parts += [f"{files} file(s)"] if files else []
    said = " and ".join(parts)
    stored = sum(r.imported + r.off_branch_stored for r in reports)
    if accept:
        stderr.print(
            f"{said} not imported (accepted: --skip-bad); {stored} message(s) were.",
            highlight=False,
        )
        return False
    stderr.print(
        f"{said} not imported; {stored} message(s) were. Fix or remove them and import again"
        " (nothing is stored twice), or accept them with --skip-bad.",
        highlight=False,
    )
    return True


@click.command("import-store")
@click.option(
    "--from",
    "source",
    type=click.Choice(PEERS),
    required=True,
    help="Whose store it is.",
)
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@pass_state
def import_store_command(state: State, source: str, path: Path, as_json: bool) -> None:
    """Move in from lossless-claw or hermes-lcm: every conversation of its database, with
    its messages, summary DAG and active context (one transaction per conversation).

    The database is only read. Importing again brings only what is new. What is not brought
    (large files kept on disk) is named in the report.
    """
    reports = state.engine(create=True).import_store(source, path)
    if as_json:
        emit_json([r.to_dict() for r in reports])
        return
    for r in reports:
        stdout.print(
            f"{r.session_id} → conversation {r.conversation_id}: {r.messages_imported} messages"
            f" imported ({r.messages_already} already stored), {r.summaries_imported} summaries"
            f" ({r.summaries_already} already), {r.context_items} context items",
            highlight=False,
            soft_wrap=True,
        )
        if r.kept_verbatim:
            stdout.print(f"  {r.kept_verbatim} message(s) kept whole: their shape was not read")
        for note in r.not_brought:
            stdout.print(f"  not brought: {note}", highlight=False, soft_wrap=True)
    if not reports:
        stderr.print(f"{path} holds no conversation", highlight=False)


def _shown(path: str) -> str:
    """A file's path as a person typed it: relative to the working directory when below it
    (the reports keep the absolute path, which --json gives)."""
    try:
        return os.path.relpath(path) if Path(path).is_relative_to(Path.cwd()) else path
    except (OSError, ValueError):
        return path
