"""``lossless demo``: the README's main job, offline, on the embedded default."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from ..config import load_config
from ..engine import Engine
from ..sample import write_session
from .output import State, emit_json, json_option, pass_state, stdout


@click.command("demo")
@click.option(
    "--turns",
    type=click.IntRange(1, 100_000),
    default=2000,
    show_default=True,
    help="Turns of the generated session.",
)
@click.option(
    "--seed", type=int, default=7, show_default=True, help="Seed of the generated session."
)
@click.option(
    "--keep", is_flag=True, help="Keep the generated transcript and database (prints where)."
)
@json_option
@pass_state
def demo_command(state: State, turns: int, seed: int, keep: bool, as_json: bool) -> None:
    """Generate a long agent session, import it into a fresh store, and report.

    Runs offline with no API key: a deterministic coding-agent session (tool calls, file
    reads and edits, failing tests, decisions) is written as an OpenClaw transcript,
    imported, imported again (nothing is stored twice), and checked with doctor.
    """
    workdir = Path(tempfile.mkdtemp(prefix="lossless-demo-"))
    transcript = write_session(workdir / "demo-session.jsonl", turns, seed=seed)
    db = Path(state.db) if state.db else workdir / "demo.db"
    with Engine.open(db, config=state.config if state.config_path else load_config()) as engine:
        started = time.perf_counter()
        first = engine.bootstrap(transcript)[0]
        import_seconds = time.perf_counter() - started
        again = engine.bootstrap(transcript)[0]
        messages = engine.messages(first.conversation_id)
        roles = Counter(m.role for m in messages)
        parts = Counter(p.type for m in messages for p in m.parts)
        tokens = sum(m.token_count for m in messages)
        from .. import doctor

        problems = doctor.check(engine.store)
        sample = next(m for m in messages if "Decision:" in m.content)
        exact = sample.to_source()
    result: dict[str, Any] = {
        "transcript": str(transcript),
        "transcript_bytes": transcript.stat().st_size,
        "database": str(db),
        "turns": turns,
        "messages": len(messages),
        "messages_by_role": dict(sorted(roles.items())),
        "parts_by_type": dict(sorted(parts.items())),
        "tokens": tokens,
        "import_seconds": round(import_seconds, 3),
        "messages_per_second": round(len(messages) / import_seconds) if import_seconds else None,
        "reimport": {"mode": again.mode, "imported": again.imported},
        "doctor_problems": len(problems),
        "sample_message": {"id": f"msg#{sample.message_id}", "source": exact},
    }
    if as_json:
        emit_json(result)
    else:
        stdout.print(
            f"[bold]lossless demo[/] — {turns:,} generated turns, offline", highlight=False
        )
        stdout.print(
            f"transcript   {result['transcript_bytes'] / 1e6:.1f} MB OpenClaw session JSONL"
        )
        stdout.print(
            f"imported     {len(messages):,} messages in {import_seconds:.2f} s "
            f"({result['messages_per_second']:,} msg/s), {tokens:,} tokens",
            highlight=False,
        )
        stdout.print(
            "by role      "
            + ", ".join(f"{k} {v:,}" for k, v in result["messages_by_role"].items()),
            highlight=False,
        )
        stdout.print(
            "parts        " + ", ".join(f"{k} {v:,}" for k, v in result["parts_by_type"].items()),
            highlight=False,
        )
        stdout.print(
            f"re-import    {again.imported} new messages (file {again.mode})", highlight=False
        )
        stdout.print(
            f"doctor       {'ok' if not problems else f'{len(problems)} problems'}", highlight=False
        )
        stdout.print(f"exact copy   msg#{sample.message_id} as ingested:", highlight=False)
        stdout.print(escape(str(exact))[:400], highlight=False)
    if keep:
        stdout.print(f"kept: {escape(str(workdir))}", highlight=False)
    else:
        for path in sorted(workdir.iterdir()):
            path.unlink()
        workdir.rmdir()
