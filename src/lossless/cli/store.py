"""``lossless stats``, ``lossless doctor`` and ``lossless config``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.text import Text

from ..backup import restore as restore_store
from ..engine import database_target, files_dir_for
from ..errors import StoreError
from ..redact import new_key as make_key
from ..store import is_postgres_url
from .output import (
    EXIT_ERROR,
    Column,
    State,
    confirmed,
    emit_json,
    json_option,
    pass_state,
    print_listing,
    stderr,
    stdout,
)

if TYPE_CHECKING:
    from ..store.space import Space


@click.command("stats")
@click.option(
    "--space",
    is_flag=True,
    help="Also where the bytes are: each table and index, the conversations holding the most"
    " text, the text of each of the last days (reads the whole store).",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    metavar="N",
    help="With --space: how many conversations.",
)
@click.option(
    "--days",
    type=click.IntRange(min=1),
    default=14,
    show_default=True,
    metavar="N",
    help="With --space: how many of the last days with messages.",
)
@json_option
@pass_state
def stats_command(state: State, space: bool, top: int, days: int, as_json: bool) -> None:
    """Totals for the whole store: conversations, messages, summaries, tokens, size."""
    stats = state.engine().stats()
    found = state.engine().space(top=top, days=days) if space else None
    if as_json:
        emit_json({**stats, "space": found.to_dict()} if found is not None else stats)
        return
    depth = ", ".join(f"d{d}: {n}" for d, n in stats["summaries_by_depth"].items()) or "none"
    sizes = stats["bytes"]
    stdout.print(
        f"database       {escape(stats['database'])} ({stats['backend']})", highlight=False
    )
    stdout.print(f"conversations  {stats['conversations']:,}")
    stdout.print(f"messages       {stats['messages']:,} ({stats['message_tokens']:,} tokens)")
    stdout.print(f"summaries      {stats['summaries']:,} ({depth})")
    stdout.print(
        f"active context {stats['context_items']:,} items ({stats['context_tokens']:,} tokens)"
    )
    rooms = stats["host_rooms"]
    if rooms["measured"]:
        tight = rooms["tightest"]
        stdout.print(
            f"host rooms     {rooms['measured']:,} measured"
            + (f", {rooms['at_minimum']:,} at room.min_tokens" if rooms["at_minimum"] else "")
            + f"; tightest {escape(str(tight['session_id']))}: {tight['budget']:,} of a"
            f" {tight['window']:,}-token window",
            highlight=False,
        )
    stdout.print(
        f"on disk        {sizes['database'] / 1e6:.1f} MB"
        + (f" + {sizes['wal'] / 1e6:.1f} MB WAL" if "wal" in sizes else " (tables and indexes)")
    )
    if (cap := stats["cap"]) is not None:
        stdout.print(
            f"cap            {cap['bytes'] / 1e6:,.1f} MB of {cap['max_store_bytes'] / 1e6:,.1f} MB"
            f" ({100 * cap['share']:.0f}%)"
            + (": warning, near or over the cap" if cap["near"] else ""),
            highlight=False,
        )
    summ = stats["summarizer"]
    where = "offline" if summ["offline"] else "model provider"
    stdout.print(
        f"summarizer     {escape(str(summ['name']))} ({escape(str(summ['model']))}, {where})",
        highlight=False,
    )
    guards = summ["guards"]
    if guards:
        spend = guards.get("spend", {})
        breaker = guards.get("breaker", {})
        stdout.print(
            f"guards         timeout {guards.get('timeout_seconds')} s; spend "
            f"{spend.get('calls_in_window')}/{spend.get('max_calls')} calls per "
            f"{spend.get('window_seconds')} s; breaker {breaker.get('state')}"
            + (
                f" (retry in {breaker.get('retry_in_seconds')} s)"
                if breaker.get("state") == "open"
                else ""
            ),
            highlight=False,
        )
    if found is not None:
        _print_space(found)


def _print_space(space: Space) -> None:
    """``stats --space``: the objects, the conversations and the days, as listings."""
    total = space.total() or 1
    stdout.print(f"\nspace          {space.total() / 1e6:.1f} MB in tables and indexes")
    # The largest 15 of those over 1%; the rest in one line (--json lists them all).
    objects = [o for o in space.objects[:15] if o.bytes * 100 > total]
    rest = space.objects[len(objects) :]
    print_listing(
        [
            Column("bytes", [Text(f"{o.bytes:,}") for o in objects], "right"),
            Column("share", [Text(f"{100 * o.bytes / total:.1f}%") for o in objects], "right"),
            Column("kind", [Text(o.kind) for o in objects]),
            Column(
                "object",
                [
                    Text(o.name if o.name == o.table else f"{o.name} (on {o.table})")
                    for o in objects
                ],
            ),
        ]
    )
    if rest:
        smaller = sum(o.bytes for o in rest)
        stdout.print(f"and {len(rest)} smaller tables and indexes: {smaller:,} bytes")
    if space.conversations:
        stdout.print("\nconversations holding the most")
        convs = space.conversations
        print_listing(
            [
                Column("id", [Text(str(c[0])) for c in convs], "right"),
                Column("messages", [Text(f"{c[2]:,}") for c in convs], "right"),
                Column("message bytes", [Text(f"{c[3]:,}") for c in convs], "right"),
                Column("part bytes", [Text(f"{c[4]:,}") for c in convs], "right"),
                Column("summary bytes", [Text(f"{c[5]:,}") for c in convs], "right"),
                Column("session", [Text(c[1]) for c in convs]),
            ]
        )
    if space.days:
        stdout.print("\nmessages by day (their own time)")
        days = space.days
        print_listing(
            [
                Column("day", [Text(d[0]) for d in days]),
                Column("messages", [Text(f"{d[1]:,}") for d in days], "right"),
                Column("message bytes", [Text(f"{d[2]:,}") for d in days], "right"),
            ]
        )


@click.command("doctor")
@click.option(
    "--rebuild-fts", is_flag=True, help="Rebuild the full-text indexes from the stored text."
)
@click.option(
    "--apply",
    "do_apply",
    is_flag=True,
    help="Re-summarize fallback and truncated summaries with the configured summarizer.",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Fix what needs no model and no backup: indexes, context ordinals, stray files.",
)
@click.option(
    "--full",
    is_flag=True,
    help="Check the SQLite file with integrity_check (slower) instead of quick_check.",
)
@json_option
@pass_state
def doctor_command(
    state: State, rebuild_fts: bool, do_apply: bool, repair: bool, full: bool, as_json: bool
) -> None:
    """Check the store's integrity (read-only unless a fix is asked for).

    Checks the SQLite file page by page (quick_check; --full: integrity_check), foreign
    keys, context ordinals, that every context item points at a row of its own conversation,
    that every message is reachable from the context, that summaries have
    sources, DAG depths, that retired summaries are no longer used, and that the full-text
    indexes match their text; and lists the summaries the deterministic fallback wrote or
    that were cut to size. --apply re-summarizes those, shallowest first, in one transaction
    (the old ones are kept, retired). --repair fixes what needs neither a model nor a backup:
    it rebuilds indexes that do not match their text, renumbers context ordinals below 0 and
    deletes large files nothing names; what remains says how to fix it (most often: restore
    the latest backup with lossless restore). Exit code 1 when anything is wrong.
    """
    engine = state.engine()
    if rebuild_fts:
        engine.rebuild_indexes()
    mended = engine.mend() if repair else []
    if not as_json:
        for line in mended:
            stdout.print(f"repaired: {escape(line)}", highlight=False)
    repaired = None
    if do_apply:
        repaired = engine.repair(apply=True)
        if not as_json:
            for e in repaired.entries:
                outcome = f"→ {e.new_id} ({e.new_tokens} tokens)" if e.new_id else e.skipped
                stdout.print(
                    f"re-summarized {e.summary.summary_id} ({e.reason}, d{e.summary.depth})"
                    f" {outcome}",
                    highlight=False,
                )
    problems = engine.check(degraded=True, full=full)
    notes = engine.check_notes()
    if as_json:
        data: dict[str, object] = {
            "ok": not problems,
            "problems": [p.to_dict() for p in problems],
            "notes": notes,
        }
        if repair:
            data["mended"] = mended
        if repaired is not None:
            data["repaired"] = repaired.to_dict()
        emit_json(data)
    elif not problems:
        stdout.print("ok: no problems found")
    else:
        for p in problems:
            stdout.print(
                f"[red]{escape(p.check)}[/]: {escape(p.ids)} — {escape(p.detail)}\n"
                f"    fix: {escape(p.fix)}",
                highlight=False,
            )
        stdout.print(f"{len(problems)} problem(s)")
    for note in notes if not as_json else []:
        stdout.print(f"note: {escape(note)}", highlight=False)
    if problems:
        sys.exit(EXIT_ERROR)


@click.command("config")
@json_option
@pass_state
def config_command(state: State, as_json: bool) -> None:
    """Print the effective configuration (defaults, config file and LOSSLESS_* overrides)."""
    data = state.config.to_dict()
    if as_json:
        emit_json(data)
        return
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                stdout.print(f"{key}.{sub} = {v!r}", highlight=False)
        else:
            stdout.print(f"{key} = {value!r}", highlight=False)


@click.command("backup")
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@pass_state
def backup_command(state: State, dest: Path, as_json: bool) -> None:
    """Copy the store to DEST while it is in use, and check the copy.

    The database is copied with SQLite's backup API (one consistent moment; writers keep
    going), its large files to DEST-files, and the copy is checked with doctor. DEST must
    not exist. Exit code 1 if the copy has problems.
    """
    report = state.engine().backup(dest)
    if as_json:
        emit_json(report.to_dict())
    else:
        stdout.print(
            f"backed up to {report.database} ({report.bytes:,} bytes: {report.messages:,}"
            f" messages, {report.summaries:,} summaries)"
            + (f", large files in {report.files}" if report.files else ""),
            highlight=False,
        )
        for problem in report.problems:
            stderr.print(f"problem in the copy: {escape(problem)}", highlight=False)
    if report.problems:
        sys.exit(EXIT_ERROR)


@click.command("restore")
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_state
def restore_command(state: State, source: Path, yes: bool, as_json: bool) -> None:
    """Replace the store with the backup SOURCE, after checking it with doctor.

    A backup with any problem is refused and nothing changes. The current database (and its
    large files) is kept aside as NAME.before-restore-TIME. Stop the agents writing to the
    store first.
    """
    chosen = database_target(state.db, state.config)
    if is_postgres_url(chosen):
        raise StoreError(
            "lossless restore replaces a SQLite file; to put a SQLite backup into PostgreSQL,"
            f" copy it into an empty schema with: lossless migrate-store {source} '<url>'"
            " (or restore a pg_dump with pg_restore)"
        )
    target = Path(chosen)
    if not as_json and not confirmed(
        f"Replace {target} with {source}? (the current one is kept aside)",
        yes=yes,
        refusal=f"this replaces {target} with {source} (the current one is kept aside)",
    ):
        raise click.Abort
    report = restore_store(source, target, files_dir_for(state.config, target))
    if as_json:
        emit_json(report.to_dict())
        return
    stdout.print(
        f"restored {report.database} from {source} ({report.messages:,} messages,"
        f" {report.summaries:,} summaries; doctor: ok)",
        highlight=False,
    )
    if report.kept_aside:
        stdout.print(f"the previous database is kept as {report.kept_aside}", highlight=False)


@click.command("reveal")
@click.argument("message", required=False, metavar="MSG_ID")
@click.option("--new-key", is_flag=True, help="Print a fresh key for LOSSLESS_REDACT_KEY.")
@pass_state
def reveal_command(state: State, message: str | None, new_key: bool) -> None:
    """Print a message as it came (msg#N or N), its masked secrets shown.

    A message whose secrets were masked (the default) needs nothing more. One whose secrets
    were removed (redact.enabled) has an original only if redact.keep_originals was on, read
    with the key in LOSSLESS_REDACT_KEY; --new-key prints such a key (keep it safe: without it
    the originals cannot be read).
    """
    if new_key:
        click.echo(make_key())
        return
    if message is None:
        raise click.UsageError("give a message id (msg#42 or 42), or --new-key")
    ident = message.removeprefix("msg#")
    if not ident.isdigit():
        raise click.UsageError(f"{message!r} is not a message id; ids look like msg#42")
    emit_json(state.engine().reveal(int(ident)))
