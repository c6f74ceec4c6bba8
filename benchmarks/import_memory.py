"""Peak memory and speed of importing a large transcript (default 200 MB).

    python benchmarks/import_memory.py            # 200 MB OpenClaw session
    python benchmarks/import_memory.py --mb 50    # quicker

Generates a deterministic OpenClaw session of about the requested size, then imports it in a
fresh child process (``lossless import``) and reads that process's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lossless.sample import write_session

from common import save


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="transcript size in MB")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-import-bench-"))
    try:
        # ~6 KB file reads: tool output dominates the bytes, as in real coding sessions.
        # Size the session from a small sample of the same generator.
        sample = write_session(work / "sample.jsonl", 50, payload_bytes=6_000)
        per_turn = sample.stat().st_size / 50
        turns = max(1, int(args.mb * 1_000_000 / per_turn))
        started = time.perf_counter()
        transcript = write_session(work / "big.jsonl", turns, payload_bytes=6_000)
        size = transcript.stat().st_size
        took = time.perf_counter() - started
        print(f"generated {size / 1e6:.0f} MB ({turns:,} turns) in {took:.1f} s")
        exe = Path(sys.executable).with_name("lossless")
        started = time.perf_counter()
        out = subprocess.run(
            [str(exe), "--db", str(work / "big.db"), "import", "--json", str(transcript)],
            capture_output=True,
            text=True,
            check=True,
        )
        seconds = time.perf_counter() - started
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        report = json.loads(out.stdout)[0]
        result = {
            "transcript_mb": round(size / 1e6, 1),
            "messages": report["imported"],
            "seconds": round(seconds, 2),
            "mb_per_s": round(size / 1e6 / seconds, 1),
            "messages_per_s": round(report["imported"] / seconds),
            "peak_rss_mb": round(peak_mb, 1),
        }
        print(
            f"imported {result['messages']:,} messages from {result['transcript_mb']} MB in "
            f"{seconds:.1f} s ({result['mb_per_s']} MB/s); peak memory {peak_mb:.0f} MB"
        )
        print(f"results: {save('import_memory', result)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
