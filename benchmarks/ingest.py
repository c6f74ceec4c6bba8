"""Ingest throughput and per-turn latency, with the OpenAI Agents SDK's SQLiteSession beside it.

    python benchmarks/ingest.py                    # 100k bulk + per-turn at 1k..1M
    python benchmarks/ingest.py --sizes 1000,100000 --bulk 20000   # quicker
    python benchmarks/ingest.py --backend postgres --bulk 20000     # PostgreSQL against COPY

Bulk: N messages of ~200 characters through ``Engine.ingest_batch`` (batches of 5,000; one
transaction each; the full-text index filled in the same transaction, the trigram index
caught up afterwards and timed separately). Per turn: one user + one assistant message in one
call (one transaction), timed over many turns on stores that already hold 1k ... 1M messages.
The baseline is ``agents.SQLiteSession`` (``pip install openai-agents``) fed the same
messages; it stores JSON blobs with no search index, so it is a floor, not a competitor.

``--backend postgres`` runs the bulk ingest into fresh schemas of ``LOSSLESS_BENCH_PG`` and,
in the same run and alternated with it, its floor: a plain ``COPY`` of the very rows lossless
stored into a table made ``LIKE messages INCLUDING ALL`` (the same indexes: words,
surroundings, trigrams, times; the word column generated from the text, as a COPY meets it),
in transactions of the same size; once with each row's surroundings (``context_tsv``) as
stored, once with it empty. It prints lossless's rate as a share of each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.store.pg_migrations import own_words

from common import (
    SCHEMA_PREFIX,
    create_pg_schema,
    drop_pg_schema,
    load_average,
    percentiles,
    revision,
    save,
    text_messages,
)

BATCH = 5_000


def bulk_lossless(
    work: Path, messages: list[dict[str, str]], repeat: int, *, mask: bool = True
) -> dict[str, Any]:
    """Median of *repeat* runs, each on a fresh database (this machine's timing is noisy);
    secrets masked (the default) or not."""
    runs = []
    config = Config().replace(redact={"mask": mask})
    for r in range(repeat):
        with Engine.open(work / f"bulk-{r}-{mask}.db", config=config) as engine:
            started = time.perf_counter()
            for i in range(0, len(messages), BATCH):
                engine.ingest_batch("bulk", messages[i : i + BATCH])
            ingest = time.perf_counter() - started
            started = time.perf_counter()
            engine.store.catch_up_indexes()
            catch_up = time.perf_counter() - started
        runs.append((ingest, catch_up))
    rates = sorted(len(messages) / i for i, _ in runs)
    ingest, catch_up = sorted(runs)[len(runs) // 2]
    return {
        "messages_per_s": round(statistics.median(rates)),
        "messages_per_s_runs": [round(r) for r in rates],
        "seconds": round(ingest, 3),
        "trigram_catch_up_s": round(catch_up, 3),
        "messages_per_s_incl_catch_up": round(len(messages) / (ingest + catch_up)),
    }


#: The columns of messages a COPY writes (content_tsv is generated in the floor's table).
_COPY_COLUMNS = (
    "message_id, conversation_id, seq, role, content, token_count, created_at, external_id,"
    " source_format, envelope, metadata, host_meta, context_tsv"
)


def _cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of this process, or of the server process *pid* when the
    server runs on this machine (NaN when it does not): a measure the other work sharing the
    cores moves much less than the time on the clock."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: One run: seconds on the clock, CPU seconds of the server's process and of this one.
Run = tuple[float, float, float]


def _pg_lossless(url: str, messages: list[dict[str, str]]) -> Run:
    with Engine.open(url, config=Config()) as engine:
        engine.conversation("bulk", create=True)
        # One thread, one batch at a time: the pool hands back the same connection.
        ((pid,),) = engine.store.fetchall("SELECT pg_backend_pid()")
        server, client, started = _cpu_seconds(pid), _cpu_seconds(), time.perf_counter()
        for i in range(0, len(messages), BATCH):
            engine.ingest_batch("bulk", messages[i : i + BATCH])
        elapsed = time.perf_counter() - started
        client = _cpu_seconds() - client
        ((after,),) = engine.store.fetchall("SELECT pg_backend_pid()")
        server = _cpu_seconds(pid) - server if after == pid else float("nan")
        return elapsed, server, client


def _pg_floor(url: str, rows: list[tuple[Any, ...]], *, neighbours: bool) -> Run:
    """COPY *rows* into a fresh table like messages, BATCH rows per transaction."""
    import psycopg

    columns = _COPY_COLUMNS if neighbours else _COPY_COLUMNS.rsplit(",", 1)[0]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS floor")
        conn.execute("CREATE TABLE floor (LIKE messages INCLUDING ALL)")
        # The word column as a plain COPY meets it: made from the text by the server (the
        # store's batch insert writes it itself since m020; LIKE copies no trigger).
        conn.execute("ALTER TABLE floor DROP COLUMN content_tsv")
        conn.execute(
            f"ALTER TABLE floor ADD COLUMN content_tsv tsvector"
            f" GENERATED ALWAYS AS ({own_words('content')}) STORED"
        )
        conn.execute("CREATE INDEX ON floor USING gin (content_tsv)")
        pid = conn.info.backend_pid
        server, client, started = _cpu_seconds(pid), _cpu_seconds(), time.perf_counter()
        for i in range(0, len(rows), BATCH):
            with (
                conn.transaction(),
                conn.cursor().copy(f"COPY floor ({columns}) FROM STDIN") as copy,
            ):
                for row in rows[i : i + BATCH]:
                    copy.write_row(row if neighbours else row[:-1])
        run = (
            time.perf_counter() - started,
            _cpu_seconds(pid) - server,
            _cpu_seconds() - client,
        )
        conn.execute("DROP TABLE floor")
    return run


def bulk_postgres(messages: list[dict[str, str]], repeat: int) -> dict[str, Any]:
    """Lossless's bulk ingest and its COPY floors, alternated, each on a fresh schema."""
    import psycopg

    runs: dict[str, list[Run]] = {"lossless": [], "floor": [], "floor_no_neighbours": []}
    rows: list[tuple[Any, ...]] = []
    load_before = load_average()
    for r in range(repeat):
        schema = f"{SCHEMA_PREFIX}ingest_{os.getpid()}_{r}"
        drop_pg_schema(schema)
        url = create_pg_schema(schema)
        Engine.open(url, config=Config()).close()  # the store's tables, for LIKE messages
        try:
            floors = [("floor", True), ("floor_no_neighbours", False)]
            if rows and r % 2:  # every other round, the floors first
                for name, neighbours in floors:
                    runs[name].append(_pg_floor(url, rows, neighbours=neighbours))
            runs["lossless"].append(_pg_lossless(url, messages))
            if not rows:
                with psycopg.connect(url) as conn:
                    rows = conn.execute(
                        f"SELECT {_COPY_COLUMNS} FROM messages ORDER BY message_id"
                    ).fetchall()
            if not r % 2:
                for name, neighbours in floors:
                    runs[name].append(_pg_floor(url, rows, neighbours=neighbours))
        finally:
            drop_pg_schema(schema)
    n = len(messages)
    out: dict[str, Any] = {}
    for name, measured in runs.items():
        rates = sorted(n / wall for wall, _, _ in measured)
        cpu = [(server + client) for _, server, client in measured]
        out[name] = {
            "messages_per_s": round(statistics.median(rates)),
            "runs": [round(x) for x in rates],
            "server_cpu_us_per_message": round(
                statistics.median(s for _, s, _ in measured) / n * 1e6, 1
            ),
            "client_cpu_us_per_message": round(
                statistics.median(c for _, _, c in measured) / n * 1e6, 1
            ),
            "messages_per_cpu_s": round(n / statistics.median(cpu)),
        }
    for floor in ("floor", "floor_no_neighbours"):
        out[f"share_of_{floor}"] = round(
            out["lossless"]["messages_per_s"] / out[floor]["messages_per_s"], 3
        )
        out[f"cpu_share_of_{floor}"] = round(
            out["lossless"]["messages_per_cpu_s"] / out[floor]["messages_per_cpu_s"], 3
        )
    out["load_before"], out["load_after"] = load_before, load_average()
    return out


def bulk_agents(db: Path, messages: list[dict[str, str]]) -> dict[str, float] | None:
    try:
        from agents import SQLiteSession
    except ImportError:
        return None

    async def run() -> float:
        session = SQLiteSession("bulk", str(db))
        started = time.perf_counter()
        for i in range(0, len(messages), BATCH):
            await session.add_items(messages[i : i + BATCH])  # type: ignore[arg-type]
        elapsed = time.perf_counter() - started
        session.close()
        return elapsed

    seconds = asyncio.run(run())
    return {"messages_per_s": round(len(messages) / seconds), "seconds": round(seconds, 3)}


def per_turn_lossless(db: Path, size: int, turns: int) -> dict[str, float]:
    fill = text_messages(min(size, 50_000), seed=3)
    with Engine.open(db) as engine:
        done = 0
        while done < size:
            chunk = fill[: min(len(fill), size - done)]
            engine.ingest_batch("history", chunk)
            done += len(chunk)
        engine.store.catch_up_indexes()
        turn_msgs = text_messages(turns * 2, seed=5)
        samples = []
        for t in range(turns):
            pair = turn_msgs[2 * t : 2 * t + 2]
            started = time.perf_counter()
            engine.ingest_batch("history", pair)
            samples.append((time.perf_counter() - started) * 1000)
    return {"stored_before": size, "turns": turns, **percentiles(samples)}


def per_turn_agents(db: Path, size: int, turns: int) -> dict[str, float] | None:
    try:
        from agents import SQLiteSession
    except ImportError:
        return None
    fill = text_messages(min(size, 50_000), seed=3)
    turn_msgs = text_messages(turns * 2, seed=5)

    async def run() -> list[float]:
        session = SQLiteSession("history", str(db))
        done = 0
        while done < size:
            chunk = fill[: min(len(fill), size - done)]
            await session.add_items(chunk)  # type: ignore[arg-type]
            done += len(chunk)
        samples = []
        for t in range(turns):
            started = time.perf_counter()
            await session.add_items(turn_msgs[2 * t : 2 * t + 2])  # type: ignore[arg-type]
            samples.append((time.perf_counter() - started) * 1000)
        session.close()
        return samples

    return {"stored_before": size, "turns": turns, **percentiles(asyncio.run(run()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bulk", type=int, default=100_000, help="messages in the bulk run")
    parser.add_argument(
        "--sizes", default="1000,10000,100000,1000000", help="stored messages before per-turn runs"
    )
    parser.add_argument("--turns", type=int, default=1000, help="turns timed per size")
    parser.add_argument("--repeat", type=int, default=3, help="bulk runs (the median is kept)")
    parser.add_argument(
        "--backend",
        default="sqlite",
        choices=("sqlite", "postgres"),
        help="postgres: the bulk run against its COPY floor (LOSSLESS_BENCH_PG)",
    )
    args = parser.parse_args()
    if args.backend == "postgres":
        messages = text_messages(args.bulk)
        pg = bulk_postgres(messages, args.repeat)
        print(
            f"PostgreSQL bulk ingest of {args.bulk:,} messages (~200 chars) in batches of"
            f" {BATCH:,}, at {revision()}:"
        )
        for name in ("lossless", "floor", "floor_no_neighbours"):
            row = pg[name]
            print(
                f"  {name:<20} {row['messages_per_s']:>7,} msg/s (runs {row['runs']});"
                f" CPU per message: server {row['server_cpu_us_per_message']} us, client"
                f" {row['client_cpu_us_per_message']} us = {row['messages_per_cpu_s']:,} msg"
                " per CPU second"
            )
        print(
            f"  lossless / floor = {pg['share_of_floor']:.1%} by the clock,"
            f" {pg['cpu_share_of_floor']:.1%} by CPU; lossless / floor without neighbours ="
            f" {pg['share_of_floor_no_neighbours']:.1%},"
            f" {pg['cpu_share_of_floor_no_neighbours']:.1%}"
            f" (1-minute load {pg['load_before']} before, {pg['load_after']} after)"
        )
        result = {"revision": revision(), "messages": args.bulk, "batch": BATCH, **pg}
        print(f"results: {save('ingest_postgres', result)}")
        return
    work = Path(tempfile.mkdtemp(prefix="lossless-bench-"))
    results: dict[str, Any] = {}
    try:
        messages = text_messages(args.bulk)
        results["bulk"] = {
            "messages": args.bulk,
            "lossless": bulk_lossless(work, messages, args.repeat),
            "agents_sqlite_session": bulk_agents(work / "bulk-agents.db", messages),
        }
        # Masking (on by default) against off, in the same run, on the same messages and on
        # messages of which one in fifty holds a key.
        keyed = [
            {**m, "content": m["content"] + f" key sk-proj-{i:024d}"} if i % 50 == 0 else m
            for i, m in enumerate(messages)
        ]
        masking = {
            "off": bulk_lossless(work, messages, args.repeat, mask=False),
            "on": results["bulk"]["lossless"],
            "on_with_keys": bulk_lossless(work, keyed, args.repeat),
        }
        results["masking"] = masking
        b = results["bulk"]
        print(f"bulk ingest of {args.bulk:,} messages (~200 chars, FTS):")
        print(
            f"  lossless      {b['lossless']['messages_per_s']:>9,} msg/s (median of"
            f" {b['lossless']['messages_per_s_runs']})"
            f"  (+ trigram catch-up {b['lossless']['trigram_catch_up_s']} s;"
            f" {b['lossless']['messages_per_s_incl_catch_up']:,} msg/s with it)"
        )
        if b["agents_sqlite_session"]:
            ratio = b["lossless"]["messages_per_s"] / b["agents_sqlite_session"]["messages_per_s"]
            b["ratio_lossless_to_agents"] = round(ratio, 2)
            print(
                f"  SQLiteSession {b['agents_sqlite_session']['messages_per_s']:>9,} msg/s"
                f"  (no search index); lossless/SQLiteSession = {ratio:.2f}"
            )
        print("masking secrets (the default) against off, bulk msg/s (with catch-up):")
        for name, row in masking.items():
            rate, whole = row["messages_per_s"], row["messages_per_s_incl_catch_up"]
            share = rate / masking["off"]["messages_per_s"]
            print(f"  {name:<13} {rate:>9,} ({whole:,})  {share:.1%} of off")
        results["per_turn"] = []
        print("per-turn ingest (user + assistant, one transaction):")
        for size in (int(s) for s in args.sizes.split(",")):
            row = {
                "lossless": per_turn_lossless(work / f"turn-{size}.db", size, args.turns),
                "agents_sqlite_session": per_turn_agents(
                    work / f"turn-agents-{size}.db", size, args.turns
                ),
            }
            results["per_turn"].append(row)
            lo, ag = row["lossless"], row["agents_sqlite_session"]
            line = (
                f"  {size:>9,} stored: lossless p50 {lo['p50_ms']:.3f} ms"
                f" p95 {lo['p95_ms']:.3f} ms p99 {lo['p99_ms']:.3f} ms"
            )
            if ag:
                line += f" | SQLiteSession p50 {ag['p50_ms']:.3f} ms p95 {ag['p95_ms']:.3f} ms"
            print(line, flush=True)
            for suffix in ("", "-wal", "-shm"):
                for name in (f"turn-{size}.db", f"turn-agents-{size}.db"):
                    (work / f"{name}{suffix}").unlink(missing_ok=True)
        p50s = [r["lossless"]["p50_ms"] for r in results["per_turn"]]
        results["per_turn_p50_ratio_largest_to_smallest"] = round(p50s[-1] / p50s[0], 2)
        print(f"  p50 largest/smallest store: {results['per_turn_p50_ratio_largest_to_smallest']}")
        print(f"results: {save('ingest', results)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
