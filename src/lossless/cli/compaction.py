"""``lossless compact`` and ``lossless replay``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.markup import escape

from ..compaction import CompactionReport
from ..engine import Engine
from ..ingest.transcripts import FORMATS
from ..replay import ReplayReport, TurnRecord, replay_transcript
from .conversations import resolve
from .output import State, emit_json, json_option, pass_state, stderr, stdout


def _print_report(report: CompactionReport) -> None:
    depth = ", ".join(f"d{d}: {n}" for d, n in report.by_depth().items()) or "none"
    stdout.print(
        f"conversation {report.conversation_id}: {len(report.passes)} pass(es), "
        f"summaries written {depth}, {report.summarizer_calls} summarizer call(s)",
        highlight=False,
    )
    stdout.print(
        f"context tokens {report.tokens_before:,} → {report.tokens_after:,}"
        + (
            f" (target {report.target:,}: {'reached' if report.reached_target else 'not reached'})"
            if report.target is not None
            else ""
        ),
        highlight=False,
    )
    levels = [p.level for p in report.passes if p.level != "normal"]
    if levels:
        stdout.print(f"escalated passes: {', '.join(levels)}", highlight=False)


@click.command("compact")
@click.argument("conversation")
@click.option("--full", "mode", flag_value="full", default=True, help="Full sweep (default).")
@click.option("--incremental", "mode", flag_value="incremental", help="What after_turn does.")
@click.option("--until", type=click.IntRange(min=1), metavar="TOKENS", help="Sweep until under.")
@click.option("--dry-run", is_flag=True, help="Show what would be compacted; change nothing.")
@json_option
@pass_state
def compact_command(
    state: State, conversation: str, mode: str, until: int | None, dry_run: bool, as_json: bool
) -> None:
    """Compact CONVERSATION's active context into summaries.

    The default is a full sweep (leaf passes until none is eligible, then condensation);
    --incremental does what happens after a turn; --until TOKENS sweeps until the context is
    at or under TOKENS. Nothing stored is deleted: only the active context changes.
    """
    engine = state.engine()
    conv = resolve(engine, conversation)
    if dry_run:
        _dry_run(engine, conv.conversation_id, as_json)
        return
    with stderr.status("compacting…") if stderr.is_terminal else _null():
        report = engine.compact(conv.conversation_id, mode=mode, until=until)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_report(report)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


def _dry_run(engine: Engine, conversation_id: int, as_json: bool) -> None:
    found = engine.compaction_plan(conversation_id)
    raw_outside, leaf_passes = found.raw_tokens_outside_tail, found.leaf_passes_about
    plan: dict[str, object] = {
        "conversation_id": conversation_id,
        "context_items": found.context_items,
        "context_tokens": found.context_tokens,
        "fresh_tail_items": found.fresh_tail_items,
        "fresh_tail_tokens": found.fresh_tail_tokens,
        "raw_tokens_outside_tail": raw_outside,
        "leaf_passes_about": leaf_passes,
        "next_leaf_chunk": {"messages": found.next_leaf_messages, "tokens": found.next_leaf_tokens},
        "next_condensation": {
            "summaries": found.next_condensation_summaries,
            "depth": found.next_condensation_depth,
        },
        "incremental_would_run": found.incremental_would_run,
    }
    if as_json:
        emit_json(plan)
        return
    stdout.print(
        f"conversation {conversation_id}: {plan['context_items']} items, "
        f"{plan['context_tokens']:,} tokens; fresh tail {plan['fresh_tail_items']} items "
        f"({plan['fresh_tail_tokens']:,} tokens)",
        highlight=False,
    )
    stdout.print(
        f"raw tokens outside the tail: {raw_outside:,} → about {leaf_passes} leaf pass(es); "
        f"next chunk {found.next_leaf_messages} messages ({found.next_leaf_tokens:,} tokens)",
        highlight=False,
    )
    if found.next_condensation_summaries:
        stdout.print(
            f"next condensation: {found.next_condensation_summaries}"
            f" depth-{found.next_condensation_depth} summaries",
            highlight=False,
        )
    stdout.print("dry run: nothing changed")


@click.command("replay")
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--budget", type=click.IntRange(min=100), required=True, metavar="TOKENS")
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), help="Transcript format.")
@click.option("--every", type=click.IntRange(min=0), default=0, help="Also print every Nth turn.")
@json_option
@pass_state
def replay_command(
    state: State, transcript: Path, budget: int, fmt: str | None, every: int, as_json: bool
) -> None:
    """Feed TRANSCRIPT turn by turn as an agent host would, with a token budget.

    Each turn is ingested and followed by after_turn (incremental compaction, and compaction
    under the budget's threshold when the context grows past it). Prints the compaction
    events and the token use per turn. Without --db the replay goes to a temporary store.
    """
    with tempfile.TemporaryDirectory(prefix="lossless-replay-cli-") as tmp:
        if state.db:
            engine = state.engine(create=True)
            report = _replay(engine, transcript, budget, fmt, every, as_json)
        else:
            with Engine.open(Path(tmp) / "replay.db", config=state.config) as engine:
                report = _replay(engine, transcript, budget, fmt, every, as_json)
    if as_json:
        emit_json(report)


def _replay(
    engine: Engine, transcript: Path, budget: int, fmt: str | None, every: int, as_json: bool
) -> dict[str, object]:
    def show(record: TurnRecord) -> None:
        if as_json:
            return
        if record.passes or (every and record.turn % every == 0):
            depth = ", ".join(f"d{d}: {n}" for d, n in record.summaries_written.items())
            stdout.print(
                f"turn {record.turn:>6}: context {record.context_tokens:>8,} tokens"
                f" ({record.context_tokens / budget:.0%} of budget), raw {record.raw_tokens:,}"
                + (f"; compacted: {record.passes} pass(es) ({depth})" if record.passes else ""),
                highlight=False,
            )

    report = replay_transcript(engine, transcript, budget, format=fmt, on_turn=show)
    if not as_json:
        _summary(report, transcript)
    return report.to_dict()


def _summary(report: ReplayReport, transcript: Path) -> None:
    last = report.turns[-1] if report.turns else None
    stdout.print(
        f"replayed {len(report.turns):,} turns ({sum(t.messages for t in report.turns):,} "
        f"messages) of {escape(str(transcript))}: final context "
        f"{last.context_tokens if last else 0:,} tokens of {last.raw_tokens if last else 0:,} "
        f"raw; peak {report.peak_context_tokens:,}; {len(report.compaction_turns)} turn(s) "
        "with compaction",
        highlight=False,
    )
