"""How long ``lossless mcp`` keeps a host waiting when it starts, and what the time goes to.

    python benchmarks/mcp_start.py              # 10 starts of each, on a demo-sized store
    python benchmarks/mcp_start.py --runs 20

Hosts start their MCP servers with each session and give up on one that is slow to answer
``initialize`` (Claude Code logs "version negotiation probe timed out" and lists the server as
still connecting). Timed here, each from the moment the process is spawned, over real stdio:

* ``initialize`` answered: what a host waits for before the server counts as connected;
* the first ``tools/list`` answered (sent right after ``initialize``, as hosts do): from the
  list the last start wrote down (in the user's cache directory), and on a first start,
  with nothing written down, once the SDK has loaded;
* ``lossless --help``, and ``lossless mcp`` on a store that does not exist yet;

then ``python -X importtime`` of what the server loads, heaviest first: what dominates the
time to ``tools/list``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lossless import Config, Engine
from lossless.sample import generate_session

from common import load_average, machine, revision, save

EXE = Path(sys.executable).with_name("lossless")
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "benchmark", "version": "1"},
    },
}
THEN = [
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def one_start(db: Path, cache: Path) -> tuple[float, float]:
    """Milliseconds from spawning ``lossless mcp`` (with *cache* as the user's cache
    directory) to its ``initialize`` answer, and to its first ``tools/list`` answer."""
    began = time.perf_counter()
    with subprocess.Popen(
        [str(EXE), "--db", str(db), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        server.stdin.flush()
        first = json.loads(server.stdout.readline())
        initialized = time.perf_counter()
        server.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in THEN))
        server.stdin.flush()
        listed = json.loads(server.stdout.readline())
        done = time.perf_counter()
        server.stdin.close()
        server.wait(30)
    assert first["id"] == 1 and "result" in first, first
    assert listed["id"] == 2 and listed["result"]["tools"], listed
    return (initialized - began) * 1000, (done - began) * 1000


def help_ms() -> float:
    began = time.perf_counter()
    subprocess.run([str(EXE), "--help"], capture_output=True, check=True)
    return (time.perf_counter() - began) * 1000


#: What each start loads, as one interpreter: ``lossless mcp`` (the command, then the SDK and
#: the engine on its building thread) and ``lossless --help`` (every command's module).
LOADS = {
    "lossless mcp": "import lossless.cli.main, lossless.cli.mcp, lossless.mcp_server",
    "lossless --help": (
        "import click; from lossless.cli.main import cli;"
        "[cli.get_command(click.Context(cli), n) for n in cli.list_commands(click.Context(cli))]"
    ),
}


def heaviest_imports(code: str, shown: int) -> list[tuple[str, float]]:
    """The modules *code* loads, by cumulative import time (ms), heaviest first: the
    top-level imports and the ones directly inside them."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if cumulative.strip().isdigit():
            rows.append((name.rstrip(), int(cumulative) / 1000))
    # Top-level entries (least indented) carry their children's time.
    depth = {name: len(name) - len(name.lstrip()) for name, _ in rows}
    top = sorted((r for r in rows if depth[r[0]] <= 4), key=lambda r: -r[1])
    return [(name.strip(), ms) for name, ms in top[:shown]]


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(samples), 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--turns", type=int, default=300, help="Turns of the stored session.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.db"
        transcript = Path(tmp) / "bench.jsonl"
        lines = generate_session(args.turns, format="claude_code", session_id="bench")
        transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
        with Engine.open(db, config=Config()) as engine:
            engine.bootstrap(transcript, format="claude_code")
            messages = engine.message_count("bench")
        cache = Path(tmp) / "cache"
        one_start(db, cache)  # writes the tool list down
        starts = [one_start(db, cache) for _ in range(args.runs)]
        firsts = [one_start(db, Path(tmp) / f"fresh-{run}") for run in range(args.runs)]
        missing = [
            one_start(Path(tmp) / "not-yet.db", cache) for _ in range(max(3, args.runs // 3))
        ]
        helps = [help_ms() for _ in range(args.runs)]
        heavy = {label: heaviest_imports(code, 10) for label, code in LOADS.items()}
    result = {
        "revision": revision(),
        "load_average": load_average(),
        "store_messages": messages,
        "initialize": summary([s[0] for s in starts]),
        "tools_list": summary([s[1] for s in starts]),
        "first_start_tools_list": summary([s[1] for s in firsts]),
        "missing_store_initialize": summary([s[0] for s in missing]),
        "missing_store_tools_list": summary([s[1] for s in missing]),
        "help": summary(helps),
        "heaviest_imports_ms": heavy,
    }
    print(f"store: {messages:,} messages; load average {result['load_average']}")
    for label, key in (
        ("initialize answered", "initialize"),
        ("first tools/list answered", "tools_list"),
        ("tools/list, nothing written down", "first_start_tools_list"),
        ("initialize, store not made yet", "missing_store_initialize"),
        ("tools/list, store not made yet", "missing_store_tools_list"),
        ("lossless --help", "help"),
    ):
        row = result[key]
        assert isinstance(row, dict)
        print(
            f"{label:<32} median {row['median_ms']:7.1f} ms"
            f"  (min {row['min_ms']:.1f}, max {row['max_ms']:.1f})"
        )
    for label, rows in heavy.items():
        print(f"what {label} loads, cumulative import time:")
        for name, ms in rows:
            print(f"  {ms:7.1f} ms  {name}")
    save("mcp_start", {"machine": machine(), **result})


if __name__ == "__main__":
    main()
