"""``lossless compact`` and ``lossless replay``."""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from ..compaction import CompactionReport
from ..compaction.finish import FinishReport
from ..engine import Engine
from ..ingest.transcripts import FORMATS
from ..replay import ReplayReport, TurnRecord, replay_transcript
from .conversations import resolve
from .output import EXIT_PARTIAL, State, emit_json, json_option, pass_state, stderr, stdout


def _print_report(report: CompactionReport) -> None:
    depth = ", ".join(f"d{d}: {n}" for d, n in report.by_depth().items()) or "none"
    calls = (
        f"{report.provisional} provisional (the offline summarizer's, at once)"
        if report.provisional
        else f"{report.summarizer_calls} summarizer call(s)"
    )
    stdout.print(
        f"conversation {report.conversation_id}: {len(report.passes)} pass(es), "
        f"summaries written {depth}, {calls}",
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
@click.option(
    "--no-finish",
    is_flag=True,
    help="With a model summarizer: leave the provisional summaries for later (`lossless finish`).",
)
@json_option
@pass_state
def compact_command(
    state: State,
    conversation: str,
    mode: str,
    until: int | None,
    dry_run: bool,
    no_finish: bool,
    as_json: bool,
) -> None:
    """Compact CONVERSATION's active context into summaries.

    The default is a full sweep (leaf passes until none is eligible, then condensation);
    --incremental does what happens after a turn; --until TOKENS sweeps until the context is
    at or under TOKENS. Nothing stored is deleted: only the active context changes.

    With a model summarizer the passes are written at once by the offline summarizer
    (provisional), then the model's summaries replace them, several calls at once, with a
    progress bar. A run that reaches guards.run_seconds stops cleanly: what is left stays due
    for the next run, and the exit code is 3.
    """
    engine = state.engine()
    conv = resolve(engine, conversation)
    if dry_run:
        _dry_run(engine, conv.conversation_id, as_json)
        return
    # The provisional summaries are finished here, in the foreground, with a progress bar
    # (or left, with --no-finish, for `lossless finish` or a host's next turn).
    engine.finish_elsewhere(lambda conversation_id: None)
    found = engine.compaction_plan(conv.conversation_id)
    planned = max(1, found.leaf_passes_about + found.leaf_passes_about // 3)
    with _bar("compacting", planned) as advance:
        report = engine.compact(
            conv.conversation_id,
            mode=mode,
            until=until,
            progress=lambda _: advance(1),
        )
    finished = None
    if not no_finish and engine.pending_summaries(conv.conversation_id)["provisional"]:
        pending = engine.pending_summaries(conv.conversation_id)["provisional"]
        with _bar("model summaries", pending) as advance:
            finished = engine.finish_summaries(
                conv.conversation_id, progress=lambda done, total: advance(1)
            )
    left = _left(engine, conv.conversation_id, report.out_of_time, asked_to_leave=no_finish)
    if as_json:
        emit_json(
            {
                **report.to_dict(),
                "finished": None if finished is None else finished.to_dict(),
                "left": left,
            }
        )
    else:
        _print_report(report)
        if finished is not None:
            _print_finished(finished)
        if left["message"] or left["note"]:
            stderr.print(str(left["message"] or left["note"]), highlight=False)
    if left["message"]:
        sys.exit(EXIT_PARTIAL)


def _left(
    engine: Engine, conversation_id: int, out_of_time: bool, *, asked_to_leave: bool = False
) -> dict[str, object]:
    """What a run left: raw passes still due, provisional summaries, and one line saying so
    (empty when nothing is left, or only the provisional summaries it was *asked_to_leave*:
    then ``note`` says how to finish them)."""
    due = engine.compaction_plan(conversation_id).leaf_passes_about if out_of_time else 0
    provisional = int(engine.pending_summaries(conversation_id)["provisional"])
    if asked_to_leave and not due:
        note = (
            f"{provisional} summaries provisional: `lossless finish` (or a host's next turn)"
            " puts the model's in place"
            if provisional
            else ""
        )
        return {"passes_due": 0, "provisional": provisional, "message": "", "note": note}
    said = []
    if due:
        limit = engine.config.guards.run_seconds
        said.append(
            f"stopped at the time limit (guards.run_seconds = {limit:g} s) with about {due}"
            " leaf pass(es) still due"
        )
    if provisional:
        said.append(
            f"{provisional} summar{'y' if provisional == 1 else 'ies'} still provisional"
            " (the offline summarizer's, until the model's arrive)"
        )
    message = ""
    if said:
        message = (
            "left: "
            + "; ".join(said)
            + ". Nothing is lost: run `lossless compact` (or `lossless finish`) again to go on"
            + (", or raise guards.run_seconds" if out_of_time else "")
        )
    return {"passes_due": due, "provisional": provisional, "message": message, "note": ""}


def _print_finished(report: FinishReport) -> None:
    stdout.print(
        f"model summaries: {report.finished} of {report.pending} provisional summaries"
        f" finished in {report.seconds:.1f} s ({report.calls} call(s))"
        + (
            f"; {report.kept_offline} kept as the offline summarizer wrote them"
            if report.kept_offline
            else ""
        ),
        highlight=False,
    )


@contextmanager
def _bar(what: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on a terminal (done of planned, and the time left); nothing when
    stderr is not a terminal. Yields the function that advances it."""
    if not stderr.is_terminal:
        yield lambda n: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task(what, total=total)

        def advance(n: int) -> None:
            current = bar.tasks[0]
            if current.completed + n > (current.total or 0):
                bar.update(task, total=current.completed + n)
            bar.advance(task, n)

        yield advance


@click.command("finish")
@click.argument("conversation", required=False)
@click.option(
    "--if-free",
    is_flag=True,
    help="Exit at once when another `lossless finish --if-free` works on this store.",
)
@json_option
@pass_state
def finish_command(state: State, conversation: str | None, if_free: bool, as_json: bool) -> None:
    """Put the model's summaries in place of the provisional ones (of CONVERSATION, or of
    the whole store).

    A compaction with a model summarizer writes provisional summaries at once (the offline
    summarizer's) and the model's replace them off the turn; this does it here and now,
    guards.concurrency calls at once, until guards.run_seconds. Exit code 3 when some are
    left (run it again).
    """
    engine = state.engine()
    conv_id = None if conversation is None else resolve(engine, conversation).conversation_id
    with _single(engine.location if if_free else None) as mine:
        if not mine:
            return
        total = FinishReport()
        while True:  # a hook may add more meanwhile: go on while there is progress
            pending = int(engine.pending_summaries(conv_id)["provisional"])
            if not pending:
                break
            with _bar("model summaries", pending) as advance:
                report = engine.finish_summaries(conv_id, progress=lambda done, all_: advance(1))
            total.merge(report)
            if report.out_of_time or report.stopped or not (report.finished or report.kept_offline):
                break
    left = _left(engine, conv_id, False) if conv_id is not None else _store_left(engine)
    if as_json:
        emit_json({**total.to_dict(), "left": left})
    else:
        _print_finished(total)
        if left["message"]:
            stderr.print(str(left["message"]), highlight=False)
    if left["message"]:
        sys.exit(EXIT_PARTIAL)


def _store_left(engine: Engine) -> dict[str, object]:
    provisional = int(engine.pending_summaries()["provisional"])
    message = (
        f"left: {provisional} summaries still provisional; run `lossless finish` again"
        if provisional
        else ""
    )
    return {"passes_due": 0, "provisional": provisional, "message": message, "note": ""}


@contextmanager
def _single(location: str | None) -> Iterator[bool]:
    """Whether this process is the one finishing the store at *location* (always, without
    one): a lock file in the temporary directory, held until the block ends."""
    if location is None:
        yield True
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Windows: every run goes ahead
        yield True
        return
    digest = hashlib.sha256(location.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"lossless-finish-{digest}.lock"
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True


@click.command("status")
@click.argument("conversation", required=False)
@json_option
@pass_state
def status_command(state: State, conversation: str | None, as_json: bool) -> None:
    """What waits for the model: provisional summaries (of CONVERSATION, or of the store),
    the oldest one's age, and the runs whose model kept failing, with the reason."""
    engine = state.engine()
    conv_id = None if conversation is None else resolve(engine, conversation).conversation_id
    found = engine.pending_summaries(conv_id)
    if as_json:
        emit_json(found)
        return
    summarizer = f"summarizer {found['summarizer']}"
    if not found["model_summaries"]:
        summarizer += " (offline: its summaries are final as written)"
    stdout.print(summarizer, highlight=False)
    count = int(found["provisional"])
    if count:
        stdout.print(
            f"provisional summaries: {count}, the oldest {_age(found['oldest_age_seconds'])} old"
            " (the model's replace them off the turn; `lossless finish` does it now)",
            highlight=False,
        )
    else:
        stdout.print("provisional summaries: none", highlight=False)
    for failed in found["fell_back"]:
        stdout.print(
            f"conversation {failed['conversation_id']}: at {failed.get('at')} summarizer"
            f" {failed.get('summarizer')} kept failing; {failed.get('summaries')} summaries kept"
            f" as the offline summarizer wrote them. Reason: {failed.get('reason')}",
            highlight=False,
        )
    guards = found.get("guards")
    if isinstance(guards, dict):
        counts = guards.get("counts") or {}
        breaker = (guards.get("breaker") or {}).get("state")
        stdout.print(
            f"guards: breaker {breaker}, calls {counts.get('calls', 0)}, failed"
            f" {counts.get('failed', 0)}, timed out {counts.get('timed_out', 0)}"
            f" (this process); last error {guards.get('last_error_kind') or 'none'}",
            highlight=False,
        )


def _age(seconds: object) -> str:
    value = float(seconds) if isinstance(seconds, int | float) else 0.0
    if value < 90:
        return f"{value:.0f} s"
    if value < 5400:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


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
