"""A host's turn at scale, on both back ends, and a full compaction of a backlog.

    python benchmarks/turn.py                          # 10k and 100k stored, SQLite + PostgreSQL
    python benchmarks/turn.py --sizes 10000 --backends sqlite --backlogs 10000,40000
    python benchmarks/turn.py --gap 20          # turns 20 ms apart (background upkeep runs)
    python benchmarks/turn.py --sizes 100000 --backlogs "" --interleave 50   # a fair ratio
    python benchmarks/turn.py --background      # compaction in the engine's worker
    python benchmarks/turn.py --three-index-floor --sizes "" --backlogs ""   # the indexes' cost

*Turn*: a conversation already holding N messages (compacted, as a host's would be) takes
``--turns`` turns of ``after_turn`` with two new messages and a 32k-token budget, compacting
when the budget says so, with an instant summarizer (the time is lossless's own). Reported:
p50 / p95 / p99 per turn, p99/p50, and the *floor*: two rows inserted into a bare SQLite
table with an FTS5 index, one transaction, timed the same way (and with the same gap between
turns) in the same run; on PostgreSQL also its own floor, two rows into a bare table with a
stored ``tsvector`` and its GIN index. On PostgreSQL, ``context_items``' dead row versions
after the turns (the server's statistics) say what renumbering would have left behind.

With ``--store built``, the turns go to the conversation of the kept store ``grep.py`` reads
(scripted summaries: ``common.compacted_store``, on PostgreSQL ``common.built_postgres_store``,
built in the server), built once 5,000 messages at a time, each compacted: for 10M messages,
which take long to fill. Each run adds its turns' messages to that store.

With ``--interleave N`` the back ends' engines are open together and take their turns in
alternating blocks of N, so PostgreSQL's p50 over SQLite's compares turns taken under the
same machine state (on a small shared machine, one back end after the other can differ by a
third from run to run in either direction). After each SQLite block, the index merging its
thread would do in the pause is done at once, untimed, so that it does not take the cores
from the other back end's turns; SQLite's turns are then taken without the merging debt of
a run with no pause at all (its p99 is that of turns with pauses between them).

With ``--background`` the engines run with ``background_compaction``: a turn stores its
messages and queues the compaction it calls for in the engine's worker, which runs beside the
next turns (on the same cores: its work still shows in their times, as contention). Each row
says how many summaries the turns (or the worker, waited for at the end) wrote.

*Backlog*: one ``compact()`` over an uncompacted history of M messages; the time for 4×
the work should be at most about 6× (linear, not quadratic).

With ``--summarizer-latency TTFT,TPS`` (``2,50``: 2 s to the first token, then 50 tokens a
second) the summarizer is a model: the ``openai`` and ``anthropic`` providers, over their
official SDKs, talk to a local server speaking each one's wire format at that pace
(``tests/model_servers.py``: ``SummaryServer``). The store is filled (and compacted) with the
instant summarizer first; the turns then run with the provider (the default settings: the
turn's compaction goes to the background, its summaries provisional until the model's come),
``--gap`` apart as a host's model calls would space them. Each row also says how many
summaries the turns made provisional and how long after the last turn the model's were all
in place. The backlog rows are then one ``compact()`` with the provider: the time until the
context fits (provisional, at once) and until every summary is the model's
(``finish_summaries``, ``guards.concurrency`` calls at once; ``--concurrency``).

The configuration is the defaults (``Engine.open`` reads no user settings); PostgreSQL runs
with the server's own settings (this machine's: autovacuum off), printed with the figures,
and any the stores' connections are given in ``LOSSLESS_BENCH_PG_SETTINGS``
(``synchronous_commit=off``: commits that do not wait for the disk, as SQLite's here).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.store.sqlite import SQLiteStore
from lossless.summarize import ScriptedSummarizer, SummaryRequest

from common import (
    PG_URL,
    SESSION,
    create_pg_schema,
    drop_pg_schema,
    kept_store,
    machine,
    percentiles,
    pg_admin,
    pg_url,
    save,
    server_settings,
    text_messages,
)

BUDGET = 32_000


def sized(request: SummaryRequest) -> str:
    """An instant answer of about the target size (4 characters per token)."""
    return ("summary " * (request.target_tokens // 2))[: request.target_tokens * 4]


def fill(engine: Engine, conversation: str, size: int, budget: int = BUDGET) -> None:
    """*size* messages in *conversation*, compacted as a host's with *budget* would be by then."""
    filler = text_messages(min(size, 20_000), seed=11)
    done = 0
    while done < size:
        chunk = filler[: min(len(filler), size - done)]
        engine.ingest_batch(conversation, chunk)
        done += len(chunk)
        engine.compact(conversation, until=budget)
    engine.finish_indexes()  # as an import ends (the merging its batches left due, too)


def turns(
    engine: Engine,
    conversation: str,
    count: int,
    gap: float = 0.0,
    messages: list[dict[str, Any]] | None = None,
) -> list[float]:
    """*count* timed turns, *gap* seconds apart (the model's time in a host: not timed), of
    two of *messages* each (by default the benchmark's own)."""
    if messages is None:
        messages = text_messages(count * 2, seed=12)
    samples = []
    for t in range(count):
        started = time.perf_counter()
        engine.after_turn(conversation, messages[2 * t : 2 * t + 2], token_budget=BUDGET)
        samples.append((time.perf_counter() - started) * 1000)
        if gap:
            time.sleep(gap)
    return samples


#: lossless's three message indexes, as bare tables (:func:`floor` with *indexes*): the own
#: words, the words with what surrounds them (five columns), the trigrams.
THREE_INDEXES = (
    "CREATE VIRTUAL TABLE g USING fts5(content, prev, next, far, about,"
    " tokenize='porter unicode61')",
    "CREATE VIRTUAL TABLE t USING fts5(content, content='m', content_rowid='id',"
    " tokenize='trigram')",
)


def floor(work: Path, count: int, gap: float = 0.0, *, indexes: int = 1) -> dict[str, float]:
    """Two rows into a bare SQLite table with an FTS5 index, one transaction per turn, the
    turns *gap* seconds apart as the turns timed against it are (a pause leaves the caches
    colder: both sides pay it). With *indexes* 3, into lossless's three indexes as bare
    tables (:data:`THREE_INDEXES`; the surroundings column holds the message before, as
    lossless's does), merged as the one index is (FTS5's automatic merging): what the
    indexes alone cost a turn."""
    conn = sqlite3.connect(work / f"floor-{indexes}.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, role TEXT, content TEXT)")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(content, content='m', content_rowid='id')")
    if indexes == 3:
        for sql in THREE_INDEXES:
            conn.execute(sql)
    messages = text_messages(count * 2, seed=12)
    samples = []
    before = ""
    for t in range(count):
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        for m in messages[2 * t : 2 * t + 2]:
            row = conn.execute(
                "INSERT INTO m (role, content) VALUES (?, ?)", (m["role"], m["content"])
            ).lastrowid
            conn.execute("INSERT INTO f (rowid, content) VALUES (?, ?)", (row, m["content"]))
            if indexes == 3:
                conn.execute(
                    "INSERT INTO g (rowid, content, prev, next, far, about)"
                    " VALUES (?, ?, ?, '', '', '')",
                    (row, m["content"], before[:300]),
                )
                conn.execute("INSERT INTO t (rowid, content) VALUES (?, ?)", (row, m["content"]))
            before = m["content"]
        conn.execute("COMMIT")
        samples.append((time.perf_counter() - started) * 1000)
        if gap:
            time.sleep(gap)
    conn.close()
    return percentiles(samples)


def pg_floor(count: int, gap: float = 0.0) -> dict[str, float]:
    """The same on PostgreSQL: two rows into a bare table with a stored ``tsvector`` column
    and its GIN index, one transaction per turn (one round trip each statement)."""
    schema = f"bench_floor_{uuid.uuid4().hex[:8]}"
    url = create_pg_schema(schema)
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE m (id bigserial PRIMARY KEY, role text, content text,"
                " tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED)"
            )
            conn.execute("CREATE INDEX m_tsv ON m USING gin (tsv)")
            messages = text_messages(count * 2, seed=12)
            samples = []
            for t in range(count):
                started = time.perf_counter()
                with conn.transaction():
                    for m in messages[2 * t : 2 * t + 2]:
                        conn.execute(
                            "INSERT INTO m (role, content) VALUES (%s, %s)",
                            (m["role"], m["content"]),
                        )
                samples.append((time.perf_counter() - started) * 1000)
                if gap:
                    time.sleep(gap)
        return percentiles(samples)
    finally:
        drop_pg_schema(schema)


def postgres_reachable() -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    try:
        pg_admin().close()
    except psycopg.Error:
        return False
    return True


def dead_context_rows(engine: Engine) -> int | None:
    if engine.store.backend != "postgresql":
        return None
    rows = engine.store.fetchall(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'context_items'"
        " AND schemaname = current_schema()"
    )
    return int(rows[0][0]) if rows else None


@contextmanager
def turn_engine(
    work: Path, backend: str, size: int, store: str, background: bool = False
) -> Iterator[tuple[Engine, str, dict[str, Any]]]:
    """An engine on *backend* whose conversation holds *size* messages, compacted as a host's
    would be, and that conversation: filled for the run (*store* ``fresh``: a new SQLite file
    or PostgreSQL schema, dropped after), or the kept store built as ``grep.py``'s is
    (``built``: :func:`common.compacted_store` for SQLite, :func:`common.built_postgres_store`
    for PostgreSQL; scripted summaries; each run adds its turns' messages to it). With it, how
    it was filled (``fill_s``, ``stored``). With *background*, the engine compacts after a
    turn in its worker (``background_compaction``), not inside the turn."""
    summarizer = ScriptedSummarizer(default=sized)
    config = Config(background_compaction=background)
    if store == "built":
        target, info = kept_store(backend, size, "scripted", pg_built=True)
        with Engine.open(target, config=config, summarizer=summarizer) as engine:
            stored = engine.store.message_count(engine.conversation(SESSION).conversation_id)
            yield engine, SESSION, {"store": "built", "stored": stored, "fill_s": info["build_s"]}
        return
    with (
        fresh_store(work, backend, f"turn-{size}") as fresh,
        Engine.open(fresh, config=config, summarizer=summarizer) as engine,
    ):
        started = time.perf_counter()
        fill(engine, "host", size)
        filled = round(time.perf_counter() - started, 1)
        yield engine, "host", {"store": "fresh", "stored": size, "fill_s": filled}


@contextmanager
def fresh_store(work: Path, backend: str, name: str) -> Iterator[str]:
    """A new SQLite file, or a PostgreSQL schema of its own (dropped after)."""
    if backend != "postgresql":
        yield str(work / f"{name}.db")
        return
    schema = f"bench_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    try:
        yield create_pg_schema(schema)
    finally:
        drop_pg_schema(schema)


def turn_rows(
    work: Path,
    backends: list[str],
    size: int,
    count: int,
    gap: float,
    store: str,
    block: int,
    background: bool = False,
) -> list[dict[str, Any]]:
    """*count* turns on each of *backends* at *size* stored. With *block*, the back ends'
    engines are open together and take their turns in alternating blocks of that many, so
    each sees the machine as the others do (the ratio between them is then not a matter of
    which ran when); without, one back end after the other. With *background*, compaction
    runs in the engine's worker beside the turns. Each row counts the summaries written."""
    messages = text_messages(count * 2, seed=12)
    groups = [backends] if block else [[b] for b in backends]
    rows = []
    for group in groups:
        with ExitStack() as stack:
            opened = [
                (b, *stack.enter_context(turn_engine(work, b, size, store, background)))
                for b in group
            ]
            samples: dict[str, list[float]] = {b: [] for b in group}
            written = {b: summaries(engine, c) for b, engine, c, _ in opened}
            done = 0
            while done < count:
                n = min(block or count, count - done)
                for backend, engine, conversation, _ in opened:
                    samples[backend] += turns(
                        engine, conversation, n, gap, messages[2 * done : 2 * (done + n)]
                    )
                    if len(opened) > 1 and isinstance(engine.store, SQLiteStore):
                        # What its thread would merge in the pause is merged now, untimed:
                        # not on the cores while the other back end takes its turns.
                        engine.store.merge_indexes()
                done += n
            for backend, engine, conversation, meta in opened:
                engine.wait_for_compaction()  # (with background: what the turns left queued)
                stats = percentiles(samples[backend])
                rows.append(
                    {
                        "backend": backend,
                        **meta,
                        "turns": count,
                        "gap_ms": gap * 1000,
                        "interleaved_block": block or None,
                        **stats,
                        "p99_over_p50": round(stats["p99_ms"] / stats["p50_ms"], 1),
                        "context_items_dead_rows": dead_context_rows(engine),
                        "background_compaction": background,
                        "summaries_written": summaries(engine, conversation) - written[backend],
                    }
                )
    return rows


def summaries(engine: Engine, conversation: str) -> int:
    """The summaries the conversation holds (live ones, every depth)."""
    return sum(engine.summary_counts(conversation).values())


def backlog_run(work: Path, size: int) -> dict[str, Any]:
    summarizer = ScriptedSummarizer(default=sized)
    with Engine.open(work / f"backlog-{size}.db", config=Config(), summarizer=summarizer) as e:
        messages = text_messages(size, seed=13)
        for i in range(0, size, 5_000):
            e.ingest_batch("backlog", messages[i : i + 5_000])
        started = time.perf_counter()
        report = e.compact("backlog")
        seconds = time.perf_counter() - started
    return {
        "backlog": size,
        "seconds": round(seconds, 2),
        "summarizer_calls": summarizer.calls,
        "passes": len(report.passes),
    }


@contextmanager
def model_server(latency: str | None) -> Iterator[Any]:
    """The local model server at *latency* (``TTFT,TPS``), the providers' variables pointed
    at it; ``None`` without a latency."""
    if not latency:
        yield None
        return
    import os
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from model_servers import SummaryServer

    ttft, tps = (float(x) for x in latency.split(","))
    with SummaryServer(ttft=ttft, tokens_per_second=tps) as server:
        saved = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")}
        os.environ["OPENAI_BASE_URL"] = server.url + "/v1"
        os.environ["ANTHROPIC_BASE_URL"] = server.url
        try:
            yield server
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def provider_config(provider: str, concurrency: int) -> Config:
    """The defaults, with *provider* as the summarizer (its calls at most *concurrency* at
    once, a call allowed up to 10 minutes: a 2,400-token summary at 50 tokens a second takes
    50 s)."""
    return Config().replace(
        summarizer=provider,
        summarizer_model="bench-model",
        guards={
            "concurrency": concurrency,
            "timeout_seconds": 600.0,
            "run_seconds": None,
            "max_calls": 100_000,
        },
    )


def latency_rows(
    work: Path,
    backends: list[str],
    providers: list[str],
    size: int,
    count: int,
    gap: float,
    concurrency: int,
) -> list[dict[str, Any]]:
    """*count* turns with a model summarizer (each of *providers*) on each of *backends*, at
    *size* stored (filled with the instant summarizer first)."""
    messages = text_messages(count * 2, seed=12)
    rows = []
    for backend in backends:
        for provider in providers:
            with fresh_store(work, backend, f"latency-{provider}-{size}") as target:
                instant = ScriptedSummarizer(default=sized)
                started = time.perf_counter()
                with Engine.open(target, config=Config(), summarizer=instant) as filling:
                    fill(filling, "host", size)
                conversation = "host"
                meta = {"stored": size, "fill_s": round(time.perf_counter() - started, 1)}
                config = provider_config(provider, concurrency)
                with Engine.open(target, config=config) as engine:
                    written = summaries(engine, conversation)
                    depths = dict(engine.summary_counts(conversation))
                    samples = turns(engine, conversation, count, gap, messages)
                    ended = time.perf_counter()
                    provisional = len(engine.store.provisional_summaries())
                    engine.wait_for_compaction()
                    engine.wait_for_summaries()
                    while engine.pending_summaries()["provisional"]:
                        engine.wait_for_summaries(1.0)
                    final_s = time.perf_counter() - ended
                    stats = percentiles(samples)
                    rows.append(
                        {
                            "backend": backend,
                            "provider": provider,
                            **meta,
                            "turns": count,
                            "gap_ms": gap * 1000,
                            **stats,
                            "p99_over_p50": round(stats["p99_ms"] / stats["p50_ms"], 1),
                            "summaries_written": summaries(engine, conversation) - written,
                            "written_by_depth": {
                                d: n - depths.get(d, 0)
                                for d, n in engine.summary_counts(conversation).items()
                                if n != depths.get(d, 0)
                            },
                            "provisional_after_turns": provisional,
                            "all_final_after_s": round(final_s, 1),
                            "slowest_turns": [
                                [i, round(ms, 1)]
                                for i, ms in sorted(enumerate(samples), key=lambda x: -x[1])[:3]
                            ],
                        }
                    )
    return rows


def latency_backlog(
    work: Path, backend: str, provider: str, size: int, concurrency: int
) -> dict[str, Any]:
    """One ``compact()`` of a *size*-message backlog with a model summarizer: seconds until
    the context fits (the provisional passes) and until every summary is the model's."""
    with (
        fresh_store(work, backend, f"backlog-{provider}-{size}") as target,
        Engine.open(target, config=provider_config(provider, concurrency)) as e,
    ):
        e.finish_elsewhere(lambda conversation_id: None)  # finished below, timed
        messages = text_messages(size, seed=13)
        for i in range(0, size, 5_000):
            e.ingest_batch("backlog", messages[i : i + 5_000])
        started = time.perf_counter()
        report = e.compact("backlog")
        fits = time.perf_counter() - started
        finished = e.finish_summaries("backlog")
        final = time.perf_counter() - started
        return {
            "backend": backend,
            "provider": provider,
            "backlog": size,
            "fits_s": round(fits, 2),
            "all_final_s": round(final, 1),
            "passes": len(report.passes),
            "model_calls": finished.calls,
            "finished": finished.finished,
            "left": finished.left,
            "concurrency": concurrency,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="messages stored before the turns")
    parser.add_argument("--turns", type=int, default=500, help="turns timed per size")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--backlogs", default="10000,40000", help="uncompacted histories")
    parser.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="milliseconds between turns, not timed (a host waits seconds for its model)",
    )
    parser.add_argument(
        "--store",
        choices=("fresh", "built"),
        default="fresh",
        help="a store filled for this run, or the kept one grep.py reads (scripted"
        " summaries; PostgreSQL: built in the server) — 10M messages take long to fill",
    )
    parser.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="N",
        help="the back ends' engines open together, taking turns in alternating blocks of N"
        " (their ratio measured under the same machine state); 0: one after the other",
    )
    parser.add_argument(
        "--three-index-floor",
        action="store_true",
        help="also time the floor with lossless's three message indexes as bare tables",
    )
    parser.add_argument(
        "--background",
        action="store_true",
        help="compact after a turn in the engine's worker (background_compaction), not in it",
    )
    parser.add_argument(
        "--summarizer-latency",
        metavar="TTFT,TPS",
        help="a model summarizer at this pace (seconds to the first token, tokens a second)"
        " behind a local server speaking the OpenAI and Anthropic wire formats",
    )
    parser.add_argument("--providers", default="openai,anthropic")
    parser.add_argument(
        "--concurrency", type=int, default=4, help="model calls at once (guards.concurrency)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-turn-"))
    if args.summarizer_latency:
        try:
            latency_main(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    results: dict[str, Any] = {"machine": machine(), "turn": [], "backlog": []}
    try:
        results["floor"] = floor(work, args.turns, args.gap / 1000)
        f = results["floor"]
        print(f"floor (2 rows + FTS5, one transaction): p50 {f['p50_ms']:.3f} ms")
        if args.three_index_floor:
            results["floor_three_indexes"] = three = floor(
                work, args.turns, args.gap / 1000, indexes=3
            )
            print(
                f"floor with lossless's three indexes as bare tables: p50 {three['p50_ms']:.3f} ms"
                f" ({three['p50_ms'] / f['p50_ms']:.1f}x the floor)"
            )
        backends = []
        for backend in args.backends.split(","):
            if backend == "postgresql" and not postgres_reachable():
                print(f"postgresql: skipped, no server at {PG_URL} (set LOSSLESS_BENCH_PG)")
                continue
            backends.append(backend)
            if backend == "postgresql":
                results["pg_server"] = server = server_settings(pg_url("public"))
                print(
                    f"PostgreSQL {server['server_version']}: synchronous_commit"
                    f" {server['synchronous_commit']}, fsync {server['fsync']}, autovacuum"
                    f" {server['autovacuum']}, shared_buffers {server['shared_buffers']}"
                )
                results["pg_floor"] = pg_floor(args.turns, args.gap / 1000)
                print(
                    "floor on PostgreSQL (2 rows + tsvector GIN, one transaction):"
                    f" p50 {results['pg_floor']['p50_ms']:.3f} ms"
                )
        for size in (int(s) for s in args.sizes.split(",") if s):
            rows = turn_rows(
                work,
                backends,
                size,
                args.turns,
                args.gap / 1000,
                args.store,
                args.interleave,
                args.background,
            )
            results["turn"] += rows
            for row in rows:
                backend = row["backend"]
                print(
                    f"{backend:>10} {size:>9,} stored: after_turn p50 {row['p50_ms']:.2f} ms"
                    f" p95 {row['p95_ms']:.2f} p99 {row['p99_ms']:.2f} max {row['max_ms']:.1f}"
                    f" (p99/p50 {row['p99_over_p50']}, p50/floor"
                    f" {row['p50_ms'] / f['p50_ms']:.1f}"
                    + (
                        f", p50/PostgreSQL floor"
                        f" {row['p50_ms'] / results['pg_floor']['p50_ms']:.1f}"
                        if backend == "postgresql"
                        else ""
                    )
                    + f"); fill {row['fill_s']} s; {row['summaries_written']} summaries written"
                    + (" in the background" if args.background else "")
                    + (
                        f"; context_items dead rows {row['context_items_dead_rows']:,}"
                        if row["context_items_dead_rows"] is not None
                        else ""
                    ),
                    flush=True,
                )
            p50 = {row["backend"]: row["p50_ms"] for row in rows}
            if "sqlite" in p50 and "postgresql" in p50:
                how = f"blocks of {args.interleave} alternating" if args.interleave else "in turn"
                print(
                    f"  PostgreSQL / SQLite at p50: {p50['postgresql'] / p50['sqlite']:.2f}"
                    f" ({how})",
                    flush=True,
                )
        for size in (int(s) for s in args.backlogs.split(",") if s):
            row = backlog_run(work, size)
            results["backlog"].append(row)
            print(
                f"compact() over a {size:,}-message backlog: {row['seconds']} s,"
                f" {row['summarizer_calls']} summarizer calls",
                flush=True,
            )
        if len(results["backlog"]) >= 2:
            a, b = results["backlog"][0], results["backlog"][-1]
            ratio = b["seconds"] / a["seconds"]
            print(f"  {b['backlog'] / a['backlog']:.0f}x the backlog took {ratio:.1f}x the time")
        print(f"results: {save('turn', results)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def latency_main(args: argparse.Namespace, work: Path) -> None:
    """The ``--summarizer-latency`` runs (see the module doc)."""
    results: dict[str, Any] = {"latency": args.summarizer_latency, "turn": [], "backlog": []}
    backends = [b for b in args.backends.split(",") if b != "postgresql" or postgres_reachable()]
    providers = [p for p in args.providers.split(",") if p]
    with model_server(args.summarizer_latency) as server:
        for size in (int(s) for s in args.sizes.split(",") if s):
            for row in latency_rows(
                work, backends, providers, size, args.turns, args.gap / 1000, args.concurrency
            ):
                results["turn"].append(row)
                print(
                    f"{row['backend']:>10} {row['provider']:>9} {size:>9,} stored:"
                    f" after_turn p50 {row['p50_ms']:.2f} ms p95 {row['p95_ms']:.2f}"
                    f" p99 {row['p99_ms']:.2f} max {row['max_ms']:.1f}"
                    f" (p99/p50 {row['p99_over_p50']}); {row['summaries_written']} summaries"
                    f" (by depth {row['written_by_depth']}),"
                    f" {row['provisional_after_turns']} provisional after the turns, all the"
                    f" model's {row['all_final_after_s']} s later; slowest turns (index, ms)"
                    f" {row['slowest_turns']}",
                    flush=True,
                )
        for size in (int(s) for s in args.backlogs.split(",") if s):
            for backend in backends:
                for provider in providers:
                    row = latency_backlog(work, backend, provider, size, args.concurrency)
                    results["backlog"].append(row)
                    print(
                        f"{backend:>10} {provider:>9} compact() of a {size:,}-message backlog:"
                        f" fits after {row['fits_s']} s ({row['passes']} provisional passes),"
                        f" all the model's after {row['all_final_s']} s ({row['model_calls']}"
                        f" calls, {row['concurrency']} at once; {row['left']} left)",
                        flush=True,
                    )
        results["server_requests"] = len(server.requests) if server else 0
    print(f"results: {save('turn-latency', results)}")


if __name__ == "__main__":
    main()
