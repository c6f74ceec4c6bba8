"""Shared CLI plumbing: the lazily opened engine, JSON output, progress bars."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from ..codec import has_lone_surrogates

if TYPE_CHECKING:
    from ..config import Config
    from ..engine import Engine

_F = TypeVar("_F", bound=Callable[..., Any])

stdout = Console(soft_wrap=True)
#: The narrowest the last column of a listing is made (it takes what the others leave).
MIN_LAST_CHARS = 8
stderr = Console(stderr=True, soft_wrap=True)

#: Exit codes (documented in docs/cli.md).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3


@dataclass
class State:
    """What the group's options resolve to; commands open the engine on first use."""

    db: str | None = None
    config_path: str | None = None
    #: Whether --db was given on the command line (not through LOSSLESS_DB).
    db_on_command_line: bool = False
    _config: Config | None = None
    _engine: Engine | None = field(default=None, repr=False)

    @property
    def config(self) -> Config:
        if self._config is None:
            from ..config import load_config

            self._config = load_config(self.config_path)
        return self._config

    def engine(self, *, create: bool = False) -> Engine:
        """The engine on the store; one that does not exist is an error unless *create* (a
        command that writes: a mistyped --db must not look like an empty store)."""
        if self._engine is None:
            from ..engine import Engine

            if create:
                self._check_folder()
            self._engine = Engine.open(self.db, config=self.config, create=create)
        return self._engine

    def _check_folder(self) -> None:
        """A store named (--db, LOSSLESS_DB, the config) in a folder that does not exist is a
        mistyped path far more often than a wish for new folders: refused, saying how to make
        it. The default store's folder (the user data directory) is made as needed."""
        from ..engine import default_db_path
        from ..errors import ArgumentError

        chosen = self.database()
        default = default_db_path().expanduser().resolve()
        if "://" in chosen or chosen == ":memory:" or Path(chosen) == default:
            return
        folder = Path(chosen).parent
        if not folder.exists():
            raise ArgumentError(
                f"the folder {folder} of the store {Path(chosen).name} does not exist: check"
                f" the path (--db, LOSSLESS_DB or the config's db), or make the folder first"
                f" (mkdir -p {folder})"
            )

    def database(self) -> str:
        """The database this invocation opens (as Engine.open picks it), made absolute."""
        from ..engine import default_db_path

        chosen = (
            self.db or self.config.db or os.environ.get("LOSSLESS_DB") or str(default_db_path())
        )
        if "://" in chosen:
            return chosen
        return str(Path(chosen).expanduser().resolve())

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


pass_state = click.make_pass_decorator(State)


@dataclass
class Column:
    """A column of a listing: its cells, how they align, and at most how wide it is shown
    (0: as wide as its widest cell). The last column of a listing takes the rest of the line."""

    name: str
    cells: list[Text]
    justify: JustifyMethod = "left"
    most: int = 0


def listing_table(columns: list[Column], width: int | None) -> Table:
    """A table of one line per row, at most *width* characters wide (``None``: as wide as
    its cells, for a pipe): each column as wide as it needs up to its ``most``, the last
    taking what is left (at least :data:`MIN_LAST_CHARS`); what does not fit is cut with "…",
    never wrapped."""
    table = Table(box=None, pad_edge=False, collapse_padding=True, header_style="bold")
    used = 0
    *fixed, last = columns
    for column in fixed:
        fits = max(len(column.name), *(c.cell_len for c in column.cells))
        size = min(fits, column.most) if column.most and width is not None else fits
        table.add_column(
            column.name, justify=column.justify, width=size, no_wrap=True, overflow="ellipsis"
        )
        used += size + 1  # (one space after each column)
    needed = max(len(last.name), *(c.cell_len for c in last.cells))
    room = needed if width is None else max(MIN_LAST_CHARS, min(width - used, needed))
    table.add_column(last.name, width=room, no_wrap=True, overflow="ellipsis")
    for i in range(len(last.cells)):
        table.add_row(*(column.cells[i] for column in columns))
    return table


def print_listing(columns: list[Column]) -> None:
    """A listing on stdout: fitted to the terminal, or, piped, whole and without the spaces
    that pad its last column."""
    if stdout.is_terminal:
        stdout.print(listing_table(columns, stdout.width))
        return
    wide = Console(width=1_000_000, color_system=None, soft_wrap=False)
    with wide.capture() as captured:
        wide.print(listing_table(columns, None))
    for line in captured.get().splitlines():
        click.echo(line.rstrip())


def confirmed(question: str, *, yes: bool, refusal: str) -> bool:
    """Whether to go ahead with a change that asks first: *yes* (``--yes``) goes ahead; on a
    terminal the user is asked *question*; elsewhere (a script, a pipe) nothing can answer,
    so the command is refused saying *refusal* and that ``--yes`` goes ahead, the same for
    every command that asks."""
    if yes:
        return True
    if sys.stdin is None or not sys.stdin.isatty():
        raise click.UsageError(f"{refusal}; add --yes to go ahead")
    return click.confirm(question, default=False, err=True)


def json_text(value: Any, *, indent: int | None = None) -> str:
    """*value* as JSON: characters as they are, except that text holding half a surrogate
    pair (stored exactly, since it came so) is written with ``\\u`` escapes, which JSON
    allows and a UTF-8 terminal can print."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    if has_lone_surrogates(text):
        text = json.dumps(value, indent=indent, ensure_ascii=True, default=str)
    return text


def emit_json(value: Any) -> None:
    """Print *value* as JSON on stdout (data, for scripts)."""
    click.echo(json_text(value, indent=2))


json_option = click.option("--json", "as_json", is_flag=True, help="Print data as JSON.")


@contextmanager
def progress_bar(
    label: str, total: int, *, enabled: bool = True
) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr for long work (only on a terminal, only for big inputs)."""
    show = enabled and sys.stderr.isatty() and total > 2_000_000
    if not show:
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextmanager
def working(what: str) -> Iterator[None]:
    """A line on stderr (a terminal's only) saying what a long step after a progress bar is
    doing, with a spinner, gone when it is done."""
    if not sys.stderr.isatty():
        yield
        return
    with stderr.status(what):
        yield


def page(write: Callable[[Console], Iterable[object]]) -> None:
    """Page what *write* prints through ``$PAGER`` (``less`` by default), in the terminal's
    colours and width; the pager starts at once and is fed as *write* goes, one step (each
    item it yields) at a time."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        force_terminal=True,
        color_system="auto",
        width=stdout.width,
        soft_wrap=True,
    )

    def pieces() -> Iterator[str]:
        for _ in write(console):
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
        yield buffer.getvalue()

    click.echo_via_pager(pieces())


def file_size(path: Path) -> int:
    """Size of a file, or the total under a directory."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def declared_option(tool: str, param: str, *decls: str, **extra: Any) -> Callable[[_F], _F]:
    """A click option for a recall tool's parameter, its type, choices, limits and default
    taken from the one declaration (:mod:`lossless.retrieval.tools`): the CLI restates none.
    *decls* are the option's names (default ``--<param>``); *extra* adds click settings."""
    from ..retrieval.tools import REQUIRED, TOOLS

    declared = TOOLS[tool].param(param)
    names = decls or (f"--{param.replace('_', '-')}",)
    kind: Any = None
    if declared.choices:
        kind = click.Choice(declared.choices)
    elif declared.kind == "integer":
        kind = click.IntRange(min=declared.minimum, max=declared.maximum)
    settings: dict[str, Any] = {"help": declared.description}
    if declared.kind == "boolean":
        base = names[0].removeprefix("--")
        names = (f"--{base}/--no-{base}",)
        settings["default"] = declared.default
        settings["show_default"] = True
    else:
        settings["type"] = kind
        if declared.default is not REQUIRED and declared.default is not None:
            settings["default"] = declared.default
            settings["show_default"] = True
    settings.update(extra)
    option: Callable[[_F], _F] = click.option(*names, param, **settings)
    return option
