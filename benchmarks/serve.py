"""What a host pays to reach lossless through ``lossless serve``.

    python benchmarks/serve.py                      # 20 cold starts, 200 turns per transport
    python benchmarks/serve.py --starts 10 --turns 100 --history 1000

* **Cold start**: ``lossless serve --stdio`` spawned and its first answer (``status``) read,
  what a host that starts a server per turn (OpenClaw's plugin by default) pays each turn.
* **A turn**: ``after_turn`` (two messages) then ``assemble``, over stdio and over HTTP, on a
  session with *history* messages already stored: what every turn pays on top of its model
  call, in either mode.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lossless.serve.client import ServeClient

from common import machine, percentiles, save, text_messages


def cold_starts(db: Path, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        began = time.perf_counter()
        with ServeClient.spawn(["--db", str(db)]) as client:
            client.status()
            samples.append((time.perf_counter() - began) * 1000)
    return samples


def turns(client: ServeClient, session: str, count: int) -> list[float]:
    samples = []
    for i in range(count):
        messages = text_messages(2, seed=1000 + i)
        began = time.perf_counter()
        client.after_turn(session, messages, token_budget=8000)
        client.assemble(session, token_budget=8000)
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--history", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "serve.db"
        with ServeClient.spawn(["--db", str(db)]) as client:
            for start in range(0, args.history, 500):
                client.ingest_batch("warm", text_messages(min(500, args.history - start)))
        results = {"cold_start_ms": percentiles(cold_starts(db, args.starts))}
        with ServeClient.spawn(["--db", str(db)]) as client:
            results["stdio_turn_ms"] = percentiles(turns(client, "warm", args.turns))
        token = "bench-token-of-enough-length"
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "lossless", "--db", str(db), "serve"),
                *("--http", "127.0.0.1:0", "--token", token),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stderr is not None
            port = re.search(r":(\d+)/", server.stderr.readline())
            assert port, "the server did not say where it listens"
            client = ServeClient.http(f"http://127.0.0.1:{port.group(1)}/", token)
            results["http_turn_ms"] = percentiles(turns(client, "warm", args.turns))
        finally:
            server.terminate()
            server.wait(30)
    for name, figures in results.items():
        p50, p95, p99 = (figures[f"{q}_ms"] for q in ("p50", "p95", "p99"))
        print(f"{name:15} p50 {p50:7.2f}  p95 {p95:7.2f}  p99 {p99:7.2f} ms")
    save("serve", {"machine": machine(), "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
