"""What a host pays to reach lossless through ``lossless serve``.

    python benchmarks/serve.py                      # 20 cold starts, 200 turns per transport
    python benchmarks/serve.py --starts 10 --turns 100 --history 1000

* **Cold start**: ``lossless serve --stdio`` spawned and its first answer (``status``) read,
  what a host that starts a server per turn (OpenClaw's plugin by default) pays each turn.
* **A turn**: ``after_turn`` (two messages) then ``assemble``, over stdio and over HTTP, on a
  session with *history* messages already stored: what every turn pays on top of its model
  call, in either mode.
* **Shared** (``--shared``): one ``serve --http`` process, 1, 16 and 64 clients at once (each
  its own session, a thread of this process, *rounds* turns of ``after_turn`` + ``assemble``),
  with *idle* slow connections open beside them the whole time (each has sent half a request
  and waits). Per level: requests/s, p50/p99 of each method, and the server's threads and
  resident memory. On SQLite and on PostgreSQL (``LOSSLESS_BENCH_PG``'s server, a schema of
  its own).

    python benchmarks/serve.py --shared                 # 1/16/64 clients, 800 idle, both back ends
    python benchmarks/serve.py --shared --backends sqlite --rounds 10 --idle 200

With ``--tenants N`` the shared part's clients send access tokens of N namespaces (made with
``lossless tokens create`` before the server starts; client *i* holds namespace *i mod N*'s)
instead of the server's own token: what a token's check, the namespace's scope and the audit
line of each write cost.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lossless.serve.client import ServeClient

from common import drop_pg_schema, fresh_store, machine, percentiles, save, text_messages

#: The clients at once of the shared part.
LEVELS = (1, 16, 64)
TOKEN = "bench-token-of-enough-length"


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


def start_http(db: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "lossless", "--db", db, "serve"),
            *("--http", "127.0.0.1:0", "--token", TOKEN, *extra),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    port = re.search(r":(\d+)/", server.stderr.readline())
    assert port, "the server did not say where it listens"
    return server, f"http://127.0.0.1:{port.group(1)}/"


def server_figures(pid: int) -> tuple[int, float]:
    """The server process's threads and resident memory (MB)."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    rss = int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    return threads, rss / 1024


def idle_connections(url: str, count: int) -> list[socket.socket]:
    """*count* connections that each send half a request and then wait."""
    port = int(url.rsplit(":", 1)[1].strip("/"))
    out = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        out.append(sock)
    return out


def level(
    url: str, clients: int, rounds: int, tag: str, tokens: list[str] | None = None
) -> dict[str, Any]:
    """*clients* threads at once, each *rounds* turns on a session of its own (client *i*
    with ``tokens[i % len(tokens)]``, else the server's own token)."""
    calls: dict[str, list[float]] = {"after_turn": [], "assemble": []}
    failures: list[str] = []
    guard = threading.Lock()
    start = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        talk = ServeClient.http(url, tokens[i % len(tokens)] if tokens else TOKEN)
        mine: dict[str, list[float]] = {"after_turn": [], "assemble": []}
        start.wait()
        try:
            for r in range(rounds):
                began = time.perf_counter()
                talk.after_turn(f"{tag}-{clients}-{i}", text_messages(2, seed=r), token_budget=8000)
                mine["after_turn"].append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                talk.assemble(f"{tag}-{clients}-{i}", token_budget=8000)
                mine["assemble"].append((time.perf_counter() - began) * 1000)
        except Exception as exc:  # noqa: BLE001 - counted and shown
            failures.append(f"{type(exc).__name__}: {exc}")
        with guard:
            for name, samples in mine.items():
                calls[name] += samples

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    done = sum(len(v) for v in calls.values())
    return {
        "clients": clients,
        "requests": done,
        "requests_per_s": round(done / seconds, 1),
        "failures": failures[:5],
        **{name: percentiles(samples) for name, samples in calls.items() if samples},
    }


def access_tokens(db: str, count: int) -> list[str]:
    """*count* write tokens, each of a namespace of its own, made with the CLI."""
    made = []
    for k in range(count):
        done = subprocess.run(
            [
                *(sys.executable, "-m", "lossless", "--db", db, "tokens", "create"),
                *("--namespace", f"tenant-{k}", "--role", "write", "--json"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        made.append(json.loads(done.stdout)["token"])
    return made


def shared(
    backend: str, work: Path, rounds: int, idle: int, tenants: int = 0
) -> list[dict[str, Any]]:
    db, schema = fresh_store(backend, work, "serve-shared")
    tokens = access_tokens(db, tenants) if tenants else None
    # The idle connections stay open through every level (a request timeout past the run).
    server, url = start_http(db, "--request-timeout", "3600", "--max-connections", "4096")
    rows = []
    try:
        baseline = server_figures(server.pid)
        held = idle_connections(url, idle)
        try:
            for clients in LEVELS:
                row = level(url, clients, rounds, backend, tokens)
                threads, rss = server_figures(server.pid)
                row.update(
                    backend=backend,
                    tenants=tenants,
                    idle=idle,
                    server_threads=threads,
                    server_rss_mb=round(rss, 1),
                    threads_before=baseline[0],
                    rss_before_mb=round(baseline[1], 1),
                )
                rows.append(row)
                print(
                    f"{backend:10} {clients:3} clients"
                    + (f" of {tenants} namespaces" if tenants else "")
                    + f" + {idle} idle: {row['requests_per_s']:7.1f}"
                    f" req/s; after_turn p50 {row['after_turn']['p50_ms']:6.1f} p99"
                    f" {row['after_turn']['p99_ms']:6.1f} ms; assemble p50"
                    f" {row['assemble']['p50_ms']:6.1f} p99 {row['assemble']['p99_ms']:6.1f} ms;"
                    f" server {threads} threads, {rss:.0f} MB"
                    + (f"; {len(row['failures'])} failures" if row["failures"] else "")
                )
        finally:
            for sock in held:
                sock.close()
    finally:
        server.terminate()
        server.wait(60)
        if schema is not None:
            drop_pg_schema(schema)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--shared", action="store_true", help="the shared-server part only")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--rounds", type=int, default=20, help="turns per client per level")
    parser.add_argument("--idle", type=int, default=800, help="idle slow connections beside")
    parser.add_argument(
        "--tenants", type=int, default=0, help="clients hold access tokens of N namespaces"
    )
    args = parser.parse_args()
    if args.shared:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [
                row
                for backend in args.backends.split(",")
                for row in shared(backend, Path(tmp), args.rounds, args.idle, args.tenants)
            ]
        name = "serve-shared-tenants" if args.tenants else "serve-shared"
        save(name, {"machine": machine(), "args": vars(args), "results": rows})
        return
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
