"""Many sessions at once: 100 hosts taking turns against one store, through ``lossless serve``
and through one in-process ``Engine``.

    python benchmarks/sessions.py                           # PostgreSQL, 100 sessions, both modes
    python benchmarks/sessions.py --sessions 10 --turns 5 --modes engine
    python benchmarks/sessions.py --backend sqlite

For each mode a fresh store is made (``postgres``: a new schema of ``LOSSLESS_BENCH_PG``, by
default postgresql://postgres@127.0.0.1:5432/test, dropped afterwards; ``sqlite``: a temporary
file) and every session is given ``--history`` messages first. Then one thread per session
waits for the start signal and takes ``--turns`` turns, each ``after_turn`` with two new
messages and a token budget, then ``assemble`` within that budget: what a host does around
every model call. With ``--think``, a session waits that long between its turns, as a host
waits for its model; without it, every session asks again at once (the most turns a second).
Compaction runs in the background, as it does by default in ``serve``: the budget is small
enough that every session passes its threshold during the run.

* ``serve``: one ``lossless serve --http`` process (``--workers`` threads, the store's
  connection pool) and one HTTP client per session.
* ``engine``: one ``Engine`` shared by the sessions' threads in this process.

Reported per mode: turns per second over the run (from the start signal to the last turn's
answer), the per-turn latency p50/p95/p99/max as each session saw it, the quickest and the
slowest session's time for all its turns (how fairly the sessions are served), and the CPU
time of this process and of the server process. Afterwards every session is checked: all its
messages stored, in order, once; its context coherent; ``doctor`` finds nothing in the store.
The server settings and the machine are saved with the figures. Not part of the test run.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.doctor import check
from lossless.serve.client import ServeClient

from common import (
    drop_pg_schema,
    fresh_store,
    load_average,
    percentiles,
    pg_url,
    revision,
    save,
    server_settings,
    text_messages,
)

TOKEN = "sessions-bench-token-of-enough-length"


def session_name(i: int) -> str:
    return f"session-{i:03d}"


def turn_messages(session: int, turn: int) -> list[dict[str, str]]:
    """The two messages of one turn, marked with their session and turn."""
    pair = text_messages(2, seed=session * 100_003 + turn)
    return [
        {"role": m["role"], "content": f"[s{session:03d} t{turn:04d} m{k}] {m['content']}"}
        for k, m in enumerate(pair)
    ]


def seed_history(target: str, sessions: int, history: int) -> None:
    """Give every session *history* messages (one transaction each)."""
    if history <= 0:
        return
    with Engine.open(target, config=Config()) as engine:
        for i in range(sessions):
            engine.ingest_batch(session_name(i), text_messages(history, seed=i + 1))


class Run:
    """The sessions' threads, their start signal and what each measured."""

    def __init__(self, sessions: int, think: float = 0.0) -> None:
        self.think = think
        self.ready = threading.Barrier(sessions + 1)
        self.go = threading.Event()
        self.samples: list[list[float]] = [[] for _ in range(sessions)]
        self.spans: list[float] = [0.0] * sessions
        self.errors: list[str] = []
        self.began = 0.0
        self.ended: list[float] = [0.0] * sessions

    def session(self, i: int, turn: Any, turns: int) -> None:
        try:
            self.ready.wait()
            self.go.wait()
            start = time.perf_counter()
            for t in range(turns):
                began = time.perf_counter()
                turn(i, t)
                self.samples[i].append((time.perf_counter() - began) * 1000)
                if self.think and t + 1 < turns:
                    time.sleep(self.think)
            self.ended[i] = time.perf_counter()
            self.spans[i] = self.ended[i] - start
        except Exception as exc:  # noqa: BLE001 - reported, and the run counts as failed
            self.errors.append(f"{session_name(i)}: {type(exc).__name__}: {exc}")

    def drive(self, sessions: int, turn: Any, turns: int) -> float:
        """Start every session's thread, release them at once; the run's seconds."""
        threads = [
            threading.Thread(target=self.session, args=(i, turn, turns), daemon=True)
            for i in range(sessions)
        ]
        for thread in threads:
            thread.start()
        self.ready.wait()
        self.began = time.perf_counter()
        self.go.set()
        for thread in threads:
            thread.join()
        return max(self.ended) - self.began if all(self.ended) else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process *pid* so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_serve(target: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The sessions through one ``lossless serve --http`` process."""
    config = work / "empty-config.toml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOSSLESS_")}
    env["LOSSLESS_CONFIG"] = str(config)  # the defaults, never the user's own settings
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "lossless", "--db", target, "serve"),
            *("--http", "127.0.0.1:0", "--token", TOKEN, "--workers", str(args.workers)),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        port = re.search(r":(\d+)/", line)
        if not port:
            raise SystemExit(f"the server did not say where it listens: {line!r}")
        url = f"http://127.0.0.1:{port.group(1)}/"
        clients = [ServeClient.http(url, TOKEN) for _ in range(args.sessions)]
        clients[0].status()

        def turn(i: int, t: int) -> None:
            client = clients[i]
            client.after_turn(session_name(i), turn_messages(i, t), token_budget=args.budget)
            client.assemble(session_name(i), token_budget=args.budget)

        run = Run(args.sessions, args.think / 1000)
        cpu_server, cpu_self = cpu_seconds(server.pid), own_cpu()
        seconds = run.drive(args.sessions, turn, args.turns)
        cpu_server, cpu_self = cpu_seconds(server.pid) - cpu_server, own_cpu() - cpu_self
        began = time.perf_counter()
        clients[0].call("wait_for_compaction", timeout=600)
        settle = time.perf_counter() - began
    finally:
        server.terminate()
        server.wait(60)
    return report(run, seconds, args) | {
        "cpu_s": {"server": round(cpu_server, 2), "clients": round(cpu_self, 2)},
        "compaction_after_s": round(settle, 2),
    }


def run_engine(target: str, args: argparse.Namespace) -> dict[str, Any]:
    """The sessions as threads sharing one ``Engine`` in this process."""
    with Engine.open(target, config=Config(background_compaction=True)) as engine:

        def turn(i: int, t: int) -> None:
            engine.after_turn(session_name(i), turn_messages(i, t), token_budget=args.budget)
            engine.assemble(session_name(i), args.budget)

        run = Run(args.sessions, args.think / 1000)
        cpu_self = own_cpu()
        seconds = run.drive(args.sessions, turn, args.turns)
        cpu_self = own_cpu() - cpu_self
        began = time.perf_counter()
        engine.wait_for_compaction(600)
        settle = time.perf_counter() - began
    return report(run, seconds, args) | {
        "cpu_s": {"process": round(cpu_self, 2)},
        "compaction_after_s": round(settle, 2),
    }


def report(run: Run, seconds: float, args: argparse.Namespace) -> dict[str, Any]:
    every = [s for samples in run.samples for s in samples]
    done = len(every)
    return {
        "turns": done,
        "errors": run.errors[:10],
        "error_count": len(run.errors),
        "seconds": round(seconds, 2),
        "turns_per_s": round(done / seconds, 1) if seconds == seconds and seconds else None,
        "turn_ms": percentiles(every) if every else {},
        "session_s": {
            "quickest": round(min(run.spans), 2),
            "slowest": round(max(run.spans), 2),
        },
    }


def verify(target: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every session holds its history and every turn's messages, once and in order."""
    wrong: list[str] = []
    summaries = 0
    with Engine.open(target, config=Config()) as engine:
        for i in range(args.sessions):
            conv = engine.conversation(session_name(i))
            stored = [m.content for m in engine.messages(conv.conversation_id)]
            turns = stored[args.history :]
            expected = [m["content"] for t in range(args.turns) for m in turn_messages(i, t)]
            if len(stored) != args.history + 2 * args.turns or turns != expected:
                wrong.append(f"{session_name(i)}: {len(stored)} messages, not in order")
            context = engine.context(conv.conversation_id)
            summaries += sum(1 for item in context if item.summary_id is not None)
        problems = check(engine.store)
    return {
        "sessions_intact": args.sessions - len(wrong),
        "wrong": wrong[:5],
        "summaries_in_contexts": summaries,
        "doctor_problems": [f"{p.check}: {p.detail}" for p in problems[:5]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--modes", default="serve,engine", help="serve, engine or both")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=20, help="turns per session")
    parser.add_argument("--history", type=int, default=100, help="messages per session first")
    parser.add_argument("--budget", type=int, default=8000, help="the token budget of a turn")
    parser.add_argument("--workers", type=int, default=8, help="serve's worker threads")
    parser.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="milliseconds each session waits between its turns (its model's answer); 0 keeps"
        " every session asking at once, which measures the most turns a second",
    )
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {"serve", "engine"}
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(sorted(unknown))} (serve, engine)")
    results: dict[str, Any] = {
        "revision": revision(),
        "backend": args.backend,
        "params": vars(args),
        "load_before": load_average(),
    }
    if args.backend == "postgres":
        results["server"] = server_settings(pg_url("public"))
    print(
        f"{args.sessions} sessions x {args.turns} turns on {args.backend} "
        f"({args.history} messages each first, budget {args.budget}, {args.think:g} ms between"
        f" a session's turns; load {load_average()})"
    )
    failed = False
    with tempfile.TemporaryDirectory(prefix="lossless-sessions-") as tmp:
        work = Path(tmp)
        for mode in modes:
            target, schema = fresh_store(args.backend, work, f"sessions-{mode}")
            try:
                seed_history(target, args.sessions, args.history)
                figures = run_serve(target, args, work) if mode == "serve" else None
                if mode == "engine":
                    figures = run_engine(target, args)
                assert figures is not None
                figures["check"] = verify(target, args)
            finally:
                if schema:
                    drop_pg_schema(schema)
            results[mode] = figures
            turn = figures["turn_ms"]
            check_ = figures["check"]
            print(
                f"  {mode:6}: {figures['turns_per_s']} turns/s; a turn p50 {turn.get('p50_ms')}"
                f" p95 {turn.get('p95_ms')} p99 {turn.get('p99_ms')} max {turn.get('max_ms')} ms;"
                f" sessions {figures['session_s']['quickest']}-"
                f"{figures['session_s']['slowest']} s; CPU {figures['cpu_s']};"
                f" compaction left {figures['compaction_after_s']} s;"
                f" {check_['sessions_intact']}/{args.sessions} sessions intact,"
                f" {check_['summaries_in_contexts']} summaries in contexts,"
                f" doctor {len(check_['doctor_problems'])} problems;"
                f" {figures['error_count']} errors"
            )
            for line in figures["errors"] + check_["wrong"] + check_["doctor_problems"]:
                print(f"    {line}")
            failed |= bool(figures["error_count"] or check_["wrong"] or check_["doctor_problems"])
    results["load_after"] = load_average()
    print(f"  load after: {results['load_after']}; saved {save('sessions', results)}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
