"""How faithful the resume summary is on a replayed long agent session.

    python benchmarks/resume.py                  # 1,000 turns, 32k budget
    python benchmarks/resume.py --turns 300

A generated coding-agent session (Claude Code format: file reads, edits, test runs, chatter)
is replayed turn by turn through ``after_turn`` with a token budget. After every compaction
the resume summary that assembly would inject is compared with the truth, read directly from
the stored messages up to the same boundary by this script's own simple pass:

* files modified — the paths of every ``edit_file`` call before the boundary; reported as
  recall (share of them under "Files modified") and precision (listed paths truly edited);
* current task — whether the latest user request before the boundary ("Turn N: ...", not
  the chatter in between) is what "Current task" says.

Also: the time to build a resume summary and its size in tokens.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.replay import replay_messages
from lossless.resume import build_resume
from lossless.sample import write_session
from lossless.summarize import ScriptedSummarizer, SummaryRequest

from common import percentiles, save


def sized(request: SummaryRequest) -> str:
    """An instant summary of about the target size (the resume does not read summaries)."""
    return ("summary " * (request.target_tokens // 2))[: request.target_tokens * 4]


def truth(engine: Engine, conv: int, upto: int) -> tuple[set[str], str | None]:
    """Edited paths and the latest request up to seq *upto*, straight from the store."""
    edited: set[str] = set()
    for (raw,) in engine.store.fetchall(
        "SELECT p.tool_input FROM message_parts p JOIN messages m ON m.message_id = p.message_id"
        " WHERE m.conversation_id = ? AND m.seq <= ? AND p.part_type = 'tool_call'"
        " AND p.tool_name = 'edit_file'",
        (conv, upto),
    ):
        edited.add(json.loads(raw)["path"])
    latest = engine.store.fetchall(
        "SELECT content FROM messages WHERE conversation_id = ? AND seq <= ? AND role = 'user'"
        " AND content LIKE 'Turn %' ORDER BY seq DESC LIMIT 1",
        (conv, upto),
    )
    return edited, latest[0][0] if latest else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=32_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-resume-bench-"))
    try:
        transcript = write_session(
            work / "s.jsonl", args.turns, seed=11, format="claude_code", session_id="long"
        )
        with Engine.open(work / "src.db") as source:
            source.bootstrap(transcript)
            messages = source.messages("long")
        engine = Engine.open(
            work / "replay.db", config=Config(), summarizer=ScriptedSummarizer(default=sized)
        )
        checks: list[dict[str, Any]] = []
        build_ms: list[float] = []
        seen: set[int] = set()

        def on_turn(record: Any) -> None:
            if not record.passes:
                return
            conv = engine.conversation("long").conversation_id
            summary = engine.resume(conv)
            if summary.upto_seq is None or summary.upto_seq in seen:
                return
            seen.add(summary.upto_seq)
            started = time.perf_counter()
            build_resume(engine.store, conv, summary.upto_seq, engine.config.resume.max_tokens)
            build_ms.append((time.perf_counter() - started) * 1000)
            edited, latest = truth(engine, conv, summary.upto_seq)
            listed = set(summary.files_modified)
            checks.append(
                {
                    "upto_seq": summary.upto_seq,
                    "recall": len(edited & listed) / len(edited) if edited else 1.0,
                    "precision": len(edited & listed) / len(listed) if listed else 1.0,
                    "task": latest is not None and summary.current_task == latest,
                    "tokens": engine.token_counter.count(summary.text),
                }
            )

        started = time.perf_counter()
        replay_messages(engine, "long", messages, args.budget, on_turn=on_turn)
        replay_s = time.perf_counter() - started
        engine.close()
        result = {
            "turns": args.turns,
            "messages": len(messages),
            "budget": args.budget,
            "checkpoints": len(checks),
            "files_recall_mean": round(statistics.fmean(c["recall"] for c in checks), 4),
            "files_recall_min": round(min(c["recall"] for c in checks), 4),
            "files_precision_mean": round(statistics.fmean(c["precision"] for c in checks), 4),
            "current_task_correct": round(statistics.fmean(c["task"] for c in checks), 4),
            "resume_tokens_max": max(c["tokens"] for c in checks),
            "build_ms": percentiles(build_ms),
            "replay_seconds": round(replay_s, 1),
        }
        print(
            f"{args.turns:,} turns ({len(messages):,} messages), {len(checks)} compaction"
            f" checkpoints\nfiles modified: recall {result['files_recall_mean']:.1%} (min"
            f" {result['files_recall_min']:.1%}), precision {result['files_precision_mean']:.1%}"
            f"\ncurrent task = latest request: {result['current_task_correct']:.1%} of"
            f" checkpoints\nresume size ≤ {result['resume_tokens_max']} tokens; build p50"
            f" {result['build_ms']['p50_ms']:.1f} ms, p95 {result['build_ms']['p95_ms']:.1f} ms"
        )
        save("resume", result)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
