"""``lossless prune`` and ``lossless archives``: the retention policy applied, and the
archive files it wrote (listed, or read back into the store)."""

from __future__ import annotations

import click
from rich.text import Text

from ..retention import PruneReport, RuleReport
from .output import (
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


@click.command("prune")
@click.option(
    "--dry-run", "dry_run", is_flag=True, help="Say what would move, with bytes; change nothing."
)
@click.option(
    "--no-reclaim",
    "keep_space",
    is_flag=True,
    help="Leave the freed space inside the database file for its next writes (no VACUUM).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before a rule that forgets.")
@click.option(
    "--if-free",
    "if_free",
    is_flag=True,
    help="Exit at once when another prune of this store is running (what hooks start).",
)
@json_option
@pass_state
def prune_command(
    state: State, dry_run: bool, keep_space: bool, yes: bool, if_free: bool, as_json: bool
) -> None:
    """Apply the [retention] policy: archive (or forget) the old messages it names.

    Archiving moves a message's text to a compressed archive file beside the store; its
    summaries stay, and show, export and the recall tools read it back exactly (`lossless
    archives restore` puts it back in the store). Only messages out of the active context and
    covered by a summary are archived. A rule that forgets asks first on a terminal. Each
    batch is one transaction; --dry-run only says what would move.
    """
    engine = state.engine()
    policy = engine.config.retention
    if policy.forget_after_days and not dry_run and not if_free:
        plan = engine.prune(dry_run=True)
        forgets = sum(r.messages for r in plan.rules if r.action == "forget")
        if forgets and not confirmed(
            f"forget {forgets:,} message(s) for good (retention.forget_after_days)?",
            yes=yes,
            refusal="prune would forget messages for good (retention.forget_after_days)",
        ):
            raise SystemExit(1)

    def step(rule: RuleReport) -> None:
        if not as_json and not dry_run and stderr.is_terminal:
            stderr.print(
                f"[dim]{rule.rule}: {rule.messages:,} messages so far[/dim]", highlight=False
            )

    report = engine.prune(dry_run=dry_run, reclaim=not keep_space, wait=not if_free, progress=step)
    if as_json:
        emit_json(report.to_dict())
        return
    _print_report(report)


def _print_report(report: PruneReport) -> None:
    verb = "would move" if report.dry_run else "moved"
    for note in report.notes:
        stdout.print(note, highlight=False)
    rules = report.rules
    if rules:
        print_listing(
            [
                Column("rule", [Text(r.rule) for r in rules]),
                Column("messages", [Text(f"{r.messages:,}") for r in rules], "right"),
                Column("bytes in store", [Text(f"{r.text_bytes:,}") for r in rules], "right"),
                Column(
                    "archive bytes",
                    [
                        Text(
                            "-"
                            if r.action == "forget" or report.dry_run
                            else f"{r.archive_bytes:,}"
                        )
                        for r in rules
                    ],
                    "right",
                ),
                Column("conversations", [Text(f"{r.conversations:,}") for r in rules], "right"),
                Column("from", [Text((r.oldest or "-")[:10]) for r in rules]),
                Column("to", [Text((r.newest or "-")[:10]) for r in rules]),
            ]
        )
    stdout.print(
        f"{verb} {report.messages:,} message(s);"
        + (
            " nothing changed (dry run)"
            if report.dry_run
            else f" the store {report.bytes_before / 1e6:,.1f} MB ->"
            f" {report.bytes_after / 1e6:,.1f} MB"
        ),
        highlight=False,
    )
    for line in report.reclaimed:
        stdout.print(f"[dim]{line}[/dim]", highlight=False)


@click.group("archives", invoke_without_command=True)
@json_option
@pass_state
@click.pass_context
def archives_group(ctx: click.Context, state: State, as_json: bool) -> None:
    """List the archive files retention wrote (`lossless archives restore` reads them back)."""
    if ctx.invoked_subcommand is not None:
        return
    engine = state.engine()
    rows = engine.archives()
    if as_json:
        emit_json({"folder": str(engine.archive_dir), "archives": [a.to_dict() for a in rows]})
        return
    if not rows:
        stdout.print(
            "no archives; `lossless prune` writes them when [retention] asks", markup=False
        )
        return
    stdout.print(f"[dim]in {engine.archive_dir}[/dim]", highlight=False)
    print_listing(
        [
            Column("archive", [Text(a.name) for a in rows]),
            Column("messages", [Text(f"{a.messages:,}") for a in rows], "right"),
            Column("bytes", [Text(f"{a.bytes:,}") for a in rows], "right"),
            Column("text bytes", [Text(f"{a.text_bytes:,}") for a in rows], "right"),
            Column("made", [Text(a.created_at[:19]) for a in rows]),
            Column("rule", [Text(a.rule or "") for a in rows]),
        ]
    )


@archives_group.command("restore")
@click.argument("names", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every archive.")
@json_option
@pass_state
def archives_restore_command(
    state: State, names: tuple[str, ...], every: bool, as_json: bool
) -> None:
    """Put the text archived in NAMES (or --all) back in the store; the emptied files go."""
    if not names and not every:
        raise click.UsageError(
            "name the archives to restore (`lossless archives` lists them), or --all"
        )
    if names and every:
        raise click.UsageError("give archive names or --all, not both")
    count = state.engine().restore_archives(names, every=every)
    if as_json:
        emit_json({"restored": count})
        return
    stdout.print(f"put {count:,} archived message(s) back in the store", highlight=False)
