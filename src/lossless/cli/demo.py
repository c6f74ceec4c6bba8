"""``lossless demo``: the README's main job, offline, on the embedded default."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from ..engine import Engine
from ..errors import ArgumentError, NotFoundError
from ..replay import replay_transcript
from ..sample import write_session
from .output import State, emit_json, json_option, pass_state, stdout

#: The generated session's id (the conversation the demo replays into).
DEMO_SESSION = "demo-session"
#: A fact stated in the first turn of the generated session, found again at the end.
CANARY = "cursor-based pagination"


@click.command("demo")
@click.option(
    "--turns",
    type=click.IntRange(1, 100_000),
    default=2000,
    show_default=True,
    help="Turns of the generated session.",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1000),
    default=32_000,
    show_default=True,
    help="Token budget of the replayed agent.",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the session.")
@click.option("--keep", is_flag=True, help="Keep the transcript and database; print where.")
@json_option
@pass_state
def demo_command(
    state: State, turns: int, budget: int, seed: int, keep: bool, as_json: bool
) -> None:
    """Replay a long generated agent session with compaction, offline, and report.

    A deterministic coding-agent session (tool calls, file reads and edits, failing tests,
    decisions) is written as an OpenClaw transcript and fed turn by turn to a fresh store with
    a token budget, as an agent host would, using the offline extractive summarizer. The
    report shows what was stored, the summary DAG, the context against the raw history, and
    a detail from the first turn recovered exactly through the DAG.
    """
    workdir = Path(tempfile.mkdtemp(prefix="lossless-demo-"))
    transcript = write_session(workdir / "demo-session.jsonl", turns, seed=seed)
    # A store of its own, unless --db names one on the command line (LOSSLESS_DB names the
    # user's own store: the demo never writes there unasked).
    db = state.db if state.db and state.db_on_command_line else str(workdir / "demo.db")
    started = time.perf_counter()
    with Engine.open(db, config=state.config) as engine:
        if _holds(engine, DEMO_SESSION):
            shutil.rmtree(workdir, ignore_errors=True)
            raise ArgumentError(
                f"{engine.location} already holds the demo's session ({DEMO_SESSION}): its"
                " figures would mix two runs; leave out --db (the demo then uses a store of"
                " its own) or name a new file"
            )
        report = replay_transcript(engine, transcript, budget)
        seconds = time.perf_counter() - started
        conv = report.conversation_id
        items = engine.context(conv)
        by_depth = engine.summary_counts(conv)
        problems = engine.check()
        trail = _trail(engine, conv)
        location = engine.location
    last = report.turns[-1]
    result: dict[str, Any] = {
        "turns": turns,
        "budget": budget,
        "seconds": round(seconds, 2),
        "messages_stored": sum(t.messages for t in report.turns),
        "raw_tokens": last.raw_tokens,
        "context_tokens": last.context_tokens,
        "peak_context_tokens": report.peak_context_tokens,
        "context_items": len(items),
        "context_summaries": sum(1 for i in items if i.item_type == "summary"),
        "summaries_by_depth": {str(k): v for k, v in sorted(by_depth.items())},
        "compaction_turns": len(report.compaction_turns),
        "doctor_problems": len(problems),
        "retrieved": trail,
        "database": location,
    }
    if as_json:
        emit_json(result)
    else:
        _print(result, transcript)
    if keep:
        stdout.print(f"kept: {escape(str(workdir))}", highlight=False)
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def _holds(engine: Engine, session_id: str) -> bool:
    try:
        engine.conversation(session_id)
    except NotFoundError:
        return False
    return True


def _trail(engine: Engine, conversation_id: int) -> dict[str, Any]:
    """Find the canary's message and the chain of summaries from it up to the context."""
    found = engine.grep(
        f'"{CANARY}"', conversation=conversation_id, scope="messages", sort="recency", limit=200
    )
    if not found.hits:
        return {}
    message = engine.get_message(min(int(h.id.removeprefix("msg#")) for h in found.hits))
    in_context = {i.summary_id for i in engine.context(conversation_id) if i.summary_id}
    chain: list[dict[str, Any]] = []
    ref: str | int = message.message_id
    while True:
        above = engine.covering(ref)
        if not above:
            break
        summary = engine.summary(above[0])
        chain.append(
            {
                "summary_id": summary.summary_id,
                "kind": summary.kind,
                "depth": summary.depth,
                "tokens": summary.token_count,
                "in_context": summary.summary_id in in_context,
                "mentions_canary": CANARY in summary.content,
            }
        )
        if summary.summary_id in in_context:
            break
        ref = summary.summary_id
    return {
        "message": f"msg#{message.message_id}",
        "seq": message.seq,
        "created_at": message.created_at,
        "text": message.content.splitlines()[0],
        "exact_source": message.to_source(),
        "chain_to_context": chain,
    }


def _print(result: dict[str, Any], transcript: Path) -> None:
    out = stdout.print
    out(
        f"[bold]lossless demo[/] — {result['turns']:,} generated turns replayed offline with a "
        f"{result['budget']:,}-token budget in {result['seconds']} s",
        highlight=False,
    )
    out(
        f"stored       {result['messages_stored']:,} messages, {result['raw_tokens']:,} tokens "
        "(all of them, exactly as ingested)",
        highlight=False,
    )
    depth = ", ".join(f"d{d}: {n}" for d, n in result["summaries_by_depth"].items())
    out(f"summary DAG  {depth}", highlight=False)
    out(
        f"context      {result['context_tokens']:,} tokens in {result['context_items']} items "
        f"({result['context_summaries']} summaries + fresh messages); "
        f"{result['context_tokens'] / max(result['raw_tokens'], 1):.1%} of the raw history; "
        f"peak {result['peak_context_tokens']:,}",
        highlight=False,
    )
    out(
        f"compaction   after {result['compaction_turns']} of {result['turns']:,} turns",
        highlight=False,
    )
    out(
        f"doctor       {'ok' if not result['doctor_problems'] else result['doctor_problems']}",
        highlight=False,
    )
    trail = result["retrieved"]
    if trail:
        out(f"retrieved    turn 1 said: {escape(trail['text'])!s}", highlight=False)
        for step in trail["chain_to_context"]:
            where = "in the active context" if step["in_context"] else "below it"
            out(
                f"             ← {step['summary_id']} ({step['kind']} d{step['depth']}, "
                f"{step['tokens']} tokens) {where}",
                highlight=False,
            )
        out(
            f"             {trail['message']} is stored exactly; the agent drills down with "
            "describe / expand",
            highlight=False,
        )
