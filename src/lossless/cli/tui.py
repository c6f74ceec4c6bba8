"""``lossless tui``: the terminal UI (Textual, an extra)."""

from __future__ import annotations

import click

from .conversations import resolve
from .output import State, pass_state

#: Kept here too, so ``lossless tui --help`` works without Textual installed.
DEFAULT_BUDGET = 128_000


class MissingTextual(click.ClickException):
    """Textual is not installed (printed as is: Rich markup would eat "[tui]")."""

    exit_code = 2


@click.command("tui")
@click.option(
    "--conversation", "-c", metavar="CONV", help="Open this conversation (id or session id)."
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    default=DEFAULT_BUDGET,
    show_default=True,
    metavar="TOKENS",
    help="Token budget the context window is drawn against.",
)
@pass_state
def tui_command(state: State, conversation: str | None, budget: int) -> None:
    """Browse conversations, context windows and summary DAGs; search; transplant.

    A keyboard-driven terminal UI over the store (--db / LOSSLESS_DB / the default): the
    conversations list, then per conversation its context window against --budget, the
    summary DAG down to the original messages, search and large files; and a transplant
    screen with the dry-run report. Needs pip install 'lossless[tui]'.
    """
    try:
        from ..tui import LosslessApp
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "textual":
            raise
        raise MissingTextual(
            f"the terminal UI needs Textual ({exc}); install it with: pip install 'lossless[tui]'"
        ) from None
    engine = state.engine()
    start = resolve(engine, conversation).conversation_id if conversation else None
    LosslessApp(engine, conversation=start, budget=budget).run()
