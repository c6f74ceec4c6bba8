"""``lossless transplant``, ``rewrite``, ``dissolve``, ``backfill`` and ``forget``: work on
what is stored."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from ..access import local_actor
from ..errors import NotFoundError
from ..forget import ForgetReport, being_finished
from ..maintenance import RewriteReport
from ..model import namespace_of
from ..transplant import render
from .conversations import resolve
from .output import State, confirmed, emit_json, json_option, pass_state, stderr, stdout

if TYPE_CHECKING:
    from ..engine import Engine


@click.command("transplant")
@click.argument("source")
@click.argument("target")
@click.option(
    "--dry-run", "dry_run", is_flag=True, help="Only report what would be copied (the default)."
)
@click.option("--apply", "do_apply", is_flag=True, help="Copy it, in one transaction.")
@json_option
@pass_state
def transplant_command(
    state: State, source: str, target: str, dry_run: bool, do_apply: bool, as_json: bool
) -> None:
    """Copy SOURCE's context summaries, with the DAG and messages beneath them, into TARGET.

    Conversations are named by id or external session id. A dry run by default: the report
    lists the source's context summaries, the DAG to copy by depth, the target's context and
    what the transplant adds. --apply copies it as rows TARGET owns and prepends the copied
    context summaries to TARGET's context. A target that already holds the content, or a
    source with no summaries in its context, is refused and nothing changes (exit 2).
    """
    if dry_run and do_apply:
        raise click.UsageError("choose --dry-run or --apply, not both")
    engine = state.engine()
    src, tgt = resolve(engine, source), resolve(engine, target)
    # With --apply a refused transplant raises (nothing changed) and prints only the error.
    planned = engine.transplant(src.conversation_id, tgt.conversation_id, apply=do_apply)
    problem = planned.problem
    if as_json:
        emit_json(planned.to_dict())
    else:
        for line in render(planned):
            stdout.print(escape(line), highlight=False)
        if problem is None and not do_apply:
            stdout.print("\nRun with --apply to execute.", highlight=False)
        elif planned.applied:
            stdout.print(
                f"\nDone: conversation {tgt.conversation_id} now starts with"
                f" {len(planned.context_summaries)} transplanted summaries.",
                highlight=False,
            )
    if problem is not None:
        if not as_json:
            stderr.print(f"warning: {escape(problem)}", highlight=False)
        raise click.exceptions.Exit(2)


def _print_rewrite(report: RewriteReport) -> None:
    verb = "rewrote" if report.applied else "would rewrite"
    for e in report.entries:
        s = e.summary
        line = f"{s.summary_id}  {s.kind:<9}  d{s.depth}  {s.token_count:>5}t  ({e.reason})"
        if e.new_id:
            line += f"  → {e.new_id}  {e.new_tokens}t"
        elif e.skipped:
            line += f"  — {e.skipped}"
        stdout.print(line, highlight=False)
    done = len(report.rewritten) if report.applied else len(report.entries)
    stdout.print(
        f"{verb} {done} summar{'y' if done == 1 else 'ies'}"
        + (f", {report.calls} summarizer call(s)" if report.applied else ""),
        highlight=False,
    )
    if not report.applied and report.entries:
        stdout.print("Run with --apply to rewrite them.", highlight=False)


@click.command("rewrite")
@click.argument("summary_ids", nargs=-1, metavar="[SUMMARY_ID]...")
@click.option("--depth", type=click.IntRange(min=0), help="Every live summary of this depth.")
@click.option("--all", "everything", is_flag=True, help="Every live summary.")
@click.option("--conversation", "-c", help="With --depth or --all: only this conversation.")
@click.option("--apply", "do_apply", is_flag=True, help="Rewrite them (default: dry run).")
@json_option
@pass_state
def rewrite_command(
    state: State,
    summary_ids: tuple[str, ...],
    depth: int | None,
    everything: bool,
    conversation: str | None,
    do_apply: bool,
    as_json: bool,
) -> None:
    """Re-summarize summaries with the configured summarizer, in place of the old ones.

    Name summaries by id, or choose --depth N or --all (optionally within --conversation).
    Shallowest first, so a condensed summary is rebuilt from the new versions of its sources.
    Each new summary takes the old one's place in the context and under the summaries made
    from it; the old one is kept, marked superseded (lossless describe shows it and its
    successor). One transaction; model calls happen before it. A dry run by default.
    """
    chosen = sum(bool(x) for x in (summary_ids, depth is not None, everything))
    if chosen != 1:
        raise click.UsageError("give summary ids, --depth N or --all (one of them)")
    engine = state.engine()
    ref = resolve(engine, conversation).conversation_id if conversation else None
    report = engine.rewrite(
        summary_ids, depth=depth, everything=everything, conversation=ref, apply=do_apply
    )
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_rewrite(report)


@click.command("dissolve")
@click.argument("summary_id")
@click.option("--apply", "do_apply", is_flag=True, help="Dissolve it (default: dry run).")
@json_option
@pass_state
def dissolve_command(state: State, summary_id: str, do_apply: bool, as_json: bool) -> None:
    """Undo a condensation: put SUMMARY_ID's sources back into the context in its place.

    The summary must be in a conversation's active context. A condensed summary gives back
    the summaries it was made from, a leaf its messages; the summary itself is kept, marked
    dissolved. One transaction. A dry run by default.
    """
    engine = state.engine()
    summary = engine.summary(summary_id)
    in_context = any(i.summary_id == summary_id for i in engine.context(summary.conversation_id))
    parents, messages = engine.summary_sources(summary_id)
    sources = parents or [f"msg#{m}" for m in messages]
    if not in_context:
        raise NotFoundError(
            f"{summary_id} is not in an active context, so there is nothing to dissolve in its"
            " place; dissolve the summary above it first"
        )
    if do_apply:
        items = engine.dissolve(summary_id)
        sources = [i.ref for i in items]
    if as_json:
        emit_json({"summary_id": summary_id, "applied": do_apply, "sources": sources})
        return
    verb = "put back" if do_apply else "would put back"
    stdout.print(
        f"{summary_id} ({summary.kind}, d{summary.depth}, conversation"
        f" {summary.conversation_id}): {verb} {len(sources)} item(s):",
        highlight=False,
    )
    shown = sources[:20] + ([f"… {len(sources) - 20} more"] if len(sources) > 20 else [])
    stdout.print("  " + " ".join(shown), highlight=False)
    if not do_apply:
        stdout.print("Run with --apply to dissolve it.", highlight=False)


@click.command("backfill")
@click.argument("transcript", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--into", help="Transplant the result into this conversation (id or session id).")
@click.option("--single-root", is_flag=True, help="Compact everything, down to one root summary.")
@click.option("--apply", "do_apply", is_flag=True, help="Do it (default: dry run).")
@json_option
@pass_state
def backfill_command(
    state: State,
    transcript: Path,
    into: str | None,
    single_root: bool,
    do_apply: bool,
    as_json: bool,
) -> None:
    """Import an old TRANSCRIPT as its own conversation, compact it, optionally transplant it.

    The transcript is imported like `lossless import` does (idempotently), compacted with a
    full sweep — with --single-root, the fresh tail too, down to one root summary — and with
    --into its context summaries are transplanted into that conversation. A dry run by
    default: it only identifies the transcript.
    """
    engine = state.engine(create=True)
    target = resolve(engine, into).conversation_id if into else None
    report = engine.backfill(transcript, into=target, single_root=single_root, apply=do_apply)
    if as_json:
        emit_json(report.to_dict())
        return
    steps = ["import", "compact" + (" to a single root" if single_root else "")]
    if target is not None:
        steps.append(f"transplant into conversation {target}")
    if not report.applied:
        stdout.print(
            f"{report.path}: {report.format} transcript of session {report.session_id}\n"
            f"would {', '.join(steps)}\nRun with --apply to do it.",
            highlight=False,
        )
        return
    stdout.print(
        f"imported {report.imported} message(s) into conversation {report.conversation_id}"
        f" ({report.session_id}); {report.passes} compaction pass(es);"
        f" {report.context_summaries} summar{'y' if report.context_summaries == 1 else 'ies'}"
        " in its context",
        highlight=False,
    )
    if report.transplant is not None:
        t = report.transplant
        stdout.print(
            f"transplanted {len(t.context_summaries)} context summaries ({len(t.dag)} in all,"
            f" {len(t.message_ids)} messages) into conversation {t.target.conversation_id}",
            highlight=False,
        )


def _message_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = [p.strip().removeprefix("msg#") for p in text.split("..")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise click.UsageError(
            f"{text!r} is not a message range; write msg#12..msg#40 (or 12..40, or one id)"
        )
    return int(parts[0]), int(parts[1])


@click.command("forget")
@click.argument("conversation", required=False)
@click.option("--family", is_flag=True, help="The conversation's whole family (its session key).")
@click.option("--messages", "span", metavar="A..B", help="Only these messages: msg#12..msg#40.")
@click.option(
    "--matching", metavar="TEXT", help="Only the messages holding TEXT (as typed, any case)."
)
@click.option("--dry-run", "dry_run", is_flag=True, help="Say what would go; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before forgetting.")
@click.option(
    "--allow-reimport",
    is_flag=True,
    help="Let a later import of the transcript store it again (default: forgotten stays so).",
)
@click.option(
    "--finish",
    is_flag=True,
    help="Finish the scrub of a forget that stopped after its commit (killed, a full disk).",
)
@json_option
@pass_state
def forget_command(
    state: State,
    conversation: str | None,
    family: bool,
    span: str | None,
    matching: str | None,
    dry_run: bool,
    yes: bool,
    allow_reimport: bool,
    finish: bool,
    as_json: bool,
) -> None:
    """Forget for good: a CONVERSATION, its --family, its --messages A..B, or the messages
    --matching a text (in CONVERSATION, or anywhere without it).

    The text goes from the messages, their parts, the search indexes, the summaries that
    covered them (replaced by a marker saying what was forgotten and when), large files,
    session summaries, the tool log and kept originals, then from the database file itself
    (SQLite: merged indexes, VACUUM, emptied log; PostgreSQL: the tables rewritten). Each
    message stays as an empty tombstone so a re-import of its transcript does not bring it
    back (unless --allow-reimport). Asks first on a terminal; --yes does not; --dry-run only
    says what would go. --finish finishes the scrub of a forget that stopped after its commit
    (killed, a full disk); any command that opens the store tries too, and doctor reports it.
    """
    if finish:
        if conversation is not None or matching is not None or span is not None:
            raise click.UsageError("--finish takes nothing to forget: run it on its own")
        _finish_forgets(state.engine(), as_json)
        return
    if conversation is None and matching is None:
        raise click.UsageError("say what to forget: a CONVERSATION, or --matching TEXT")
    if sum(x is not None for x in (span, matching)) > 1:
        raise click.UsageError("give --messages or --matching, not both")
    if family and conversation is None:
        raise click.UsageError("--family needs a CONVERSATION")
    engine = state.engine()
    resolved = resolve(engine, conversation) if conversation is not None else None
    ref = resolved.conversation_id if resolved is not None else None

    def run(dry: bool) -> ForgetReport:
        return engine.forget(
            ref,
            family=family,
            messages=_message_range(span),
            matching=matching,
            dry_run=dry,
            allow_reimport=allow_reimport,
        )

    plan = run(True)
    if not dry_run and plan.messages and not yes:
        if sys.stdin is not None and sys.stdin.isatty():
            _print_forget(plan)
        going = confirmed(
            "Forget them for good?",
            yes=yes,
            refusal=f"this forgets {plan.messages:,} message(s) for good (--dry-run shows them)",
        )
        if not going:
            raise click.Abort
    report = plan if dry_run else run(False)
    if not dry_run and report.messages:
        # a line per namespace it reached: each namespace's admin reads the forgets of its own
        spaces: dict[str, list[int]] = {}
        for cid in report.conversations:
            spaces.setdefault(namespace_of(engine.conversation(cid).session_id), []).append(cid)
        for space, cids in spaces.items():
            engine.record(
                local_actor(),
                "forget",
                namespace=space,
                conversation_id=cids[0] if len(cids) == 1 else None,
                detail=f"a forget of {report.messages} message(s) ({report.what}) reaching"
                f" conversation(s) {', '.join(map(str, cids))}",
            )
    if as_json:
        emit_json(report.to_dict())
        return
    _print_forget(report)


def _finish_forgets(engine: Engine, as_json: bool) -> None:
    """``forget --finish``: the scrubs finished, or why none was."""
    done = engine.finished_on_open or engine.finish_forgets()  # opening tries first
    left = engine.scrubs_due()
    if as_json:
        emit_json(
            {
                "finished": done.to_dict() if done else None,
                "due": [{"what": s.what, "due_at": s.due_at, "by": s.claimed_by} for s in left],
            }
        )
        return
    if done is not None:
        stdout.print(f"finished the scrub of: {'; '.join(done.what)}", highlight=False)
        for line in done.steps:
            stdout.print(f"  {line}", highlight=False)
    for scrub in left:
        who = being_finished(scrub) or "not finished"
        stdout.print(
            f"still due: the scrub of the forget of {scrub.due_at} ({scrub.what}): {who}",
            highlight=False,
        )
    if done is None and not left:
        stdout.print("nothing to finish: every forget's scrub is done", highlight=False)


def _print_forget(report: ForgetReport) -> None:
    if not report.messages:
        stdout.print("nothing to forget: no message matched", highlight=False)
        for line in report.purged:  # an earlier forget's scrub, finished now
            stdout.print(f"  {line}", highlight=False)
        return
    verb = "would forget" if report.dry_run else "forgot"
    shown = ", ".join(report.first_ids) + (
        " ..." if report.messages > len(report.first_ids) else ""
    )
    stdout.print(
        f"{verb} {report.messages:,} message(s) of conversation(s)"
        f" {', '.join(map(str, report.conversations))} ({report.what}): {shown}",
        highlight=False,
    )
    stdout.print(
        f"  summaries withdrawn (marker in their place): {report.summaries:,}; large files:"
        f" {report.files:,}; session summary versions: {report.session_summaries:,}; tool-log"
        f" rows: {report.tool_executions:,}; kept originals: {report.originals:,}; context"
        f" items: {report.context_items:,}",
        highlight=False,
    )
    for line in report.purged:
        stdout.print(f"  {line}", highlight=False)
    if report.summaries and not report.dry_run:
        stdout.print(
            "  `lossless rewrite` summarizes the withdrawn summaries again from what remains",
            highlight=False,
        )
