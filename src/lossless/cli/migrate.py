"""``lossless migrate-store``: copy a whole store to another back end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from ..engine import archive_dir_for, files_dir_for
from ..migrate_store import DEFAULT_BATCH, MigrationError, MigrationProgress, migrate_store
from ..store import Store, is_postgres_url, open_store
from .output import State, emit_json, json_option, pass_state, stderr, stdout


@click.command("migrate-store")
@click.argument("source_url", metavar="SOURCE_URL")
@click.argument("target_url", metavar="TARGET_URL")
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Rows copied per target transaction.",
)
@json_option
@pass_state
def migrate_store_command(
    state: State, source_url: str, target_url: str, batch: int, as_json: bool
) -> None:
    """Copy the whole store at SOURCE_URL into TARGET_URL, keeping every id.

    Each is a SQLite file (a path or sqlite:///path) or a postgresql:// URL; the target is
    created and migrated as needed, and must be empty. Messages, parts, summaries with their
    DAG, contexts, files' records, checkpoints, grants, session summaries and the tool log
    are copied in batches (--batch rows per transaction). Interrupted, the same command
    continues where it stopped. The copy is then checked: every table's row count against
    the source, and doctor. Stop the agents writing to the source first. Archive files
    (`lossless prune`) are copied to the target's archive folder; large files stay where they
    are (only their records are copied): the command says where to copy them.
    """
    config = state.config  # where large files live (read first: a bad config stops here)
    source = _open(source_url, "source", must_exist=True)
    try:
        target = _open(target_url, "target", must_exist=False)
        try:
            files_from = files_dir_for(config, source)
            files_to = files_dir_for(config, target)
            # Archive files are copied with the rows (the large files are left where they are).
            source.archive_dir = archive_dir_for(config, files_from)
            target.archive_dir = archive_dir_for(config, files_to)
            with _progress(enabled=not as_json) as update:
                report = migrate_store(source, target, batch=batch, progress=update)
        finally:
            target.close()
    finally:
        source.close()
    if as_json:
        emit_json(report.to_dict())
        return
    table = Table("table", "rows", "copied now", box=None, pad_edge=False)
    table.columns[1].justify = table.columns[2].justify = "right"
    for t in report.tables:
        table.add_row(t.table, f"{t.target_rows:,}", f"{t.copied:,}")
    stdout.print(table)
    where = f"{escape(report.source)} → {escape(report.target)}"
    if report.resumed and not report.copied:
        stdout.print(
            f"nothing to copy {where}: the target holds the whole copy already", highlight=False
        )
    elif report.resumed:
        stdout.print(
            f"finished the interrupted copy {where}: {report.copied:,} more rows"
            f" ({report.rows:,} in all)",
            highlight=False,
        )
    else:
        stdout.print(f"copied {where}: {report.rows:,} rows", highlight=False)
    stdout.print("verified: row counts match, doctor clean", highlight=False)
    files = report.count("large_files")
    if files and files_from.resolve() != files_to.resolve():
        stdout.print(
            f"note: the {files:,} large files themselves are not in the database: copy"
            f" {escape(str(files_from))} to {escape(str(files_to))}",
            highlight=False,
        )


def _open(url: str, role: str, *, must_exist: bool) -> Store:
    """Open a store named on the command line, refusing what is not a store's name."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme and not is_postgres_url(url) and scheme != "sqlite":
        raise MigrationError(
            f"the {role} {url!r} is not a store: use a SQLite file (a path or sqlite:///path)"
            " or a postgresql://user@host/database URL"
        )
    if must_exist and not is_postgres_url(url):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise MigrationError(f"the {role} {str(path)!r} does not exist")
    return open_store(url)


@contextmanager
def _progress(*, enabled: bool) -> Iterator[Callable[[MigrationProgress], None]]:
    """A bar of rows copied over rows to copy, on stderr."""
    if not enabled:
        yield lambda _p: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description:<22}",
        BarColumn(),
        MofNCompleteColumn(),
        "rows",
        TimeRemainingColumn(),
        console=stderr,
    ) as bar:
        task = bar.add_task("copying", total=None)

        def update(p: MigrationProgress) -> None:
            bar.update(task, description=p.table, completed=p.done, total=p.total)

        yield update
        bar.update(task, description="copied")
