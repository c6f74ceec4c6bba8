"""What a host's per-turn hook costs as the session grows.

    python benchmarks/hooks.py                    # transcripts of 1k, 10k and 100k lines
    python benchmarks/hooks.py --sizes 1000,10000 --turns 20

A Claude Code transcript of N lines (a generated agent session) is imported once, as the
hooks would have done turn by turn. Then, *turns* times, one more turn is appended and the
``Stop`` hook captures it (``run_hook``, in process: the command's own start-up, about a
third of a second of Python, is the same at any length and is timed once separately). The
claim to check: the capture reads only what the transcript gained, so its cost does not grow
with the length of the session.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lossless import Config, Engine
from lossless.integrations.claude_code import CLAUDE_CODE
from lossless.integrations.hooks import HookInput, run_hook
from lossless.sample import generate_session

from common import machine, percentiles, save


def lines_for(count: int, session: str) -> list[str]:
    """At least *count* transcript lines of a generated session (whole turns)."""
    turns = max(1, count // 7)
    while True:
        lines = [
            json.dumps(o) for o in generate_session(turns, format="claude_code", session_id=session)
        ]
        if len(lines) >= count:
            return lines
        turns = turns * 2


def measure(size: int, turns: int, root: Path) -> dict[str, object]:
    session = f"bench-{size}"
    lines = lines_for(size + turns * 20, session)
    head, rest = lines[:size], lines[size:]
    transcript = root / f"{session}.jsonl"
    transcript.write_text("\n".join(head) + "\n")
    with Engine.open(root / f"{session}.db", config=Config()) as engine:
        engine.bootstrap(transcript, format="claude_code")
        stop = HookInput(event="Stop", session_id=session, transcript_path=str(transcript))
        samples = []
        for n in range(turns):
            chunk = rest[n * 20 : (n + 1) * 20]
            with transcript.open("a") as handle:
                handle.write("\n".join(chunk) + "\n")
            began = time.perf_counter()
            outcome = run_hook(engine, stop, CLAUDE_CODE)
            samples.append((time.perf_counter() - began) * 1000)
            assert outcome.import_mode == "tail", outcome
        stored = engine.message_count(session)
    return {"lines": size, "messages": stored, "capture_ms": percentiles(samples)}


def startup_ms(root: Path) -> float:
    """One ``lossless hook claude-code Stop`` process with nothing to read: the fixed cost."""
    payload = json.dumps({"hook_event_name": "Stop", "session_id": "none"})
    exe = Path(sys.executable).parent / "lossless"
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        subprocess.run(
            [str(exe), "--db", str(root / "startup.db"), "hook", "claude-code", "Stop"],
            input=payload.encode(),
            capture_output=True,
            check=True,
        )
        best = min(best, (time.perf_counter() - began) * 1000)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for size in (int(s) for s in args.sizes.split(",")):
            row = measure(size, args.turns, root)
            results.append(row)
            capture = row["capture_ms"]
            assert isinstance(capture, dict)
            print(
                f"{size:>7,} lines ({row['messages']:,} messages): Stop hook capture"
                f" p50 {capture['p50_ms']:.2f} ms, p95 {capture['p95_ms']:.2f} ms"
            )
        start = startup_ms(root)
    print(f"the hook process itself (start-up, nothing to read): {start:.0f} ms")
    save("hooks", {"machine": machine(), "results": results, "startup_ms": start})


if __name__ == "__main__":
    main()
