"""The long profile of the hostile-input campaign (``make fuzz``).

Runs every fuzzer of ``tests/test_fuzz*.py`` with ``--examples`` generated cases each (on both
back ends when ``LOSSLESS_TEST_POSTGRES_URL`` is set), then prints what was tried: per fuzzer
and in total, the cases that passed, failed and were discarded as invalid, and the time. Exits
with pytest's code, so a failure found fails the run; hypothesis keeps the failing case in its
example database (``.hypothesis/``), and the next plain ``pytest`` replays it first.

    .venv/bin/python tests/fuzz_campaign.py --examples 2000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_TEST = re.compile(r"^(tests/\S+::\S+):$")
_COUNTS = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid")


def parse(output: str) -> dict[str, list[int]]:
    """Per test: [passing, failing, invalid] summed over hypothesis's phases."""
    counts: dict[str, list[int]] = {}
    current = None
    for line in output.splitlines():
        if match := _TEST.match(line.strip()):
            current = match.group(1)
            counts.setdefault(current, [0, 0, 0])
        elif current and (match := _COUNTS.search(line)):
            for i, n in enumerate(match.groups()):
                counts[current][i] += int(n)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--examples", type=int, default=2000, help="cases per fuzzer (0: the CI profile's own)"
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (e.g. -k config)")
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("LOSSLESS_FUZZ_EXAMPLES", None)
    if args.examples:
        env["LOSSLESS_FUZZ_EXAMPLES"] = str(args.examples)
    command = [
        sys.executable,
        "-m",
        "pytest",
        *sorted(str(p) for p in HERE.glob("test_fuzz*.py")),
        "-q",
        "-p",
        "no:randomly",
        "--hypothesis-show-statistics",
        *args.pytest_args,
    ]
    began = time.perf_counter()
    run = subprocess.run(command, env=env, cwd=HERE.parent, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    counts = parse(run.stdout)
    tail = [ln for ln in run.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr
    print(f"{'fuzzer':<92} {'passed':>8} {'failed':>7} {'invalid':>8}")
    for name, (passed, failed, invalid) in sorted(counts.items()):
        print(f"{name.split('::', 1)[1][:92]:<92} {passed:>8,} {failed:>7,} {invalid:>8,}")
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    each = f"{args.examples:,} examples each" if args.examples else "the CI profile"
    print(
        f"{len(counts)} fuzz runs, {each}: {total[0]:,} cases passed, {total[1]:,} failed,"
        f" {total[2]:,} discarded as invalid, in {seconds:,.0f} s"
    )
    for line in tail:
        print(line)
    print(f"pytest: {summary}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
