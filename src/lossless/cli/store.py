"""``lossless stats``, ``lossless doctor`` and ``lossless config``."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from .. import doctor
from .output import EXIT_ERROR, State, emit_json, json_option, pass_state, stdout


@click.command("stats")
@json_option
@pass_state
def stats_command(state: State, as_json: bool) -> None:
    """Totals for the whole store: conversations, messages, summaries, tokens, size."""
    stats = state.engine().stats()
    if as_json:
        emit_json(stats)
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
    stdout.print(
        f"on disk        {sizes['database'] / 1e6:.1f} MB + {sizes['wal'] / 1e6:.1f} MB WAL"
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


@click.command("doctor")
@click.option(
    "--rebuild-fts", is_flag=True, help="Rebuild the full-text indexes from the stored text."
)
@json_option
@pass_state
def doctor_command(state: State, rebuild_fts: bool, as_json: bool) -> None:
    """Check the store's integrity (read-only unless a fix is asked for).

    Checks foreign keys, context ordinals, that every context item points at a row of its
    own conversation, that every message is reachable from the context, that summaries have
    sources, DAG depths, and that the full-text indexes match their text. Exit code 1 when
    anything is wrong.
    """
    engine = state.engine()
    if rebuild_fts:
        engine.store.rebuild_fts()
    problems = doctor.check(engine.store)
    if as_json:
        emit_json({"ok": not problems, "problems": [p.to_dict() for p in problems]})
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
