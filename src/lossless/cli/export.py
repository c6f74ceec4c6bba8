"""``lossless export``."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from ..access import local_actor
from ..export import FORMATS, write_atomically
from ..model import namespace_of, unqualify
from .output import State, pass_state, stderr


@click.command("export")
@click.argument("conversation", required=False)
@click.option(
    "--family",
    is_flag=True,
    help="Every conversation sharing CONVERSATION's session key (its branches, sub-agents,"
    " earlier generations).",
)
@click.option("--all", "everything", is_flag=True, help="Every conversation of the store.")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(FORMATS),
    default="jsonl",
    show_default=True,
    help="jsonl: lossless's own, which `lossless import` reads back exactly; markdown: for"
    " people; openai, anthropic: the providers' message arrays.",
)
@click.option(
    "--output",
    "-o",
    metavar="FILE",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True),
    help="Write to FILE (in full, or not at all) instead of stdout.",
)
@click.option(
    "--reveal",
    is_flag=True,
    help="Write masked secrets as they came (default: masked, as everywhere else).",
)
@pass_state
def export_command(
    state: State,
    conversation: str | None,
    family: bool,
    everything: bool,
    fmt: str,
    output: str | None,
    reveal: bool,
) -> None:
    """Write out CONVERSATION (its id or session id), its family, or --all of them.

    The default format, jsonl, keeps every message exactly as it was ingested: `lossless
    import` of the file, into this store or another, stores the same messages again (and
    nothing twice). Summaries are not exported: they are lossless's reading of what was said.
    Secrets masked on ingest stay masked unless --reveal.
    """
    if conversation is None and not everything:
        raise click.UsageError("name a CONVERSATION, or pass --all for every conversation")
    if conversation is not None and everything:
        raise click.UsageError("a CONVERSATION or --all, not both")
    if family and everything:
        raise click.UsageError("--family goes with a CONVERSATION, not with --all")
    engine = state.engine()
    conv = engine.lookup(conversation) if conversation is not None else None
    pieces = engine.export(conv, family=family, format=fmt, reveal=reveal)
    engine.record(
        local_actor(),
        "export",
        namespace=None if conv is None else namespace_of(conv.session_id),
        conversation_id=None if conv is None else conv.conversation_id,
        session_id=None if conv is None else unqualify(conv.session_id),
        detail=f"{'--all' if conv is None else ('family' if family else 'conversation')}"
        f" as {fmt}{' with secrets revealed' if reveal else ''} to {output or 'stdout'}",
    )
    if output is None or output == "-":
        # UTF-8 whatever the terminal's locale: the bytes are the same as in a file.
        binary = getattr(sys.stdout, "buffer", None)
        for piece in pieces:
            if binary is not None:
                binary.write(piece.encode("utf-8"))
            else:
                sys.stdout.write(piece)
        (binary or sys.stdout).flush()
        return
    written = write_atomically(output, pieces)
    stderr.print(f"wrote {escape(output)} ({written:,} bytes)", highlight=False)
