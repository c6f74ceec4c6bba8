"""``lcm_grep`` latency over 1M stored messages, full-text query kinds and bounded regex.

    python benchmarks/grep.py                      # the 1M-message store of assembly.py
    python benchmarks/grep.py --size 100000 --repeat 20
    python benchmarks/grep.py --backend postgres   # the same store copied into PostgreSQL

The store is ``common.compacted_store`` (the one ``assembly.py`` builds and caches): one
conversation of N messages drawn from a Zipf vocabulary (a few real words in most messages, a
long tail of rare ones), tickets (``OPS-01234``) in every 50th message and a CJK sentence in
every 500th, compacted into a summary DAG. ``Engine.grep`` is timed as an agent calls it:
``conversation="bench"`` (its family), ``scope="both"`` (messages and summaries), ``limit=50``,
``mode="full_text"``, for each query kind below, after a warm-up; target p95 <= 50 ms.

Regex mode is shown to be bounded: an ordinary pattern with no recent match and a pathological
one (catastrophic backtracking) must come back within the search's time bound (``max_seconds``
of ``retrieval.grep.grep``) with ``truncated`` set.

``--backend postgres`` runs the same queries on a PostgreSQL copy of that store
(``common.postgres_store``: copied once with ``migrate_store`` into the schema
``lossless_bench_<size>_<summarizer>`` of ``LOSSLESS_BENCH_PG``, by default
postgresql://postgres@127.0.0.1:5432/test, and kept); results go to ``grep-postgres.json``.
With ``--pg-store built`` the store is built in PostgreSQL itself the same way
(``common.built_postgres_store``, schema ``lossless_bench_<size>_<summarizer>_built``): for
10M messages, which would take hours to build in SQLite and copy.
"""

from __future__ import annotations

import argparse
import inspect
import time
from typing import Any

from lossless import Engine
from lossless.retrieval.grep import grep as grep_store

from common import (
    RARE_WORD,
    SESSION,
    kept_store,
    load_average,
    percentiles,
    revision,
    save,
    vocabulary,
)

P95_TARGET_MS = 50.0
#: How far past ``max_seconds`` a regex search may return and still count as bounded (the
#: deadline is checked between rows; the last row's match and page read finish first).
BOUND_SLACK = 0.10
QUESTION = "how did we fix the timeout error in the deploy worker?"


def queries() -> list[tuple[str, str, str]]:
    """(kind, pattern, sort) for each full-text query timed."""
    uncommon = vocabulary()[-1]  # the corpus's rarest drawn word: ~15 messages per 100,000
    return [
        (f"rare word ({RARE_WORD})", RARE_WORD, "recency"),
        ("uncommon word", uncommon, "recency"),
        ("two common words, newest first", "deploy config", "recency"),
        ("two common words (OR, BM25)", "deploy config", "relevance"),
        ("question, relevance", QUESTION, "relevance"),
        ("question, newest first", QUESTION, "recency"),
        ('quoted phrase "cache retry"', '"cache retry"', "recency"),
        ("ticket id OPS-01234", "OPS-01234", "recency"),
        ("identifier fragment (trigram)", "PS-0012", "recency"),
        ("CJK, 5 characters (trigram)", "数据库迁移", "recency"),
        ("CJK, 2 characters (trigram)", "部署", "recency"),
    ]


REGEXES = [
    ("no recent match", r"OPS-0012\d"),
    # Exponential backtracking on every message of the corpus (each search hits the
    # per-match timeout).
    ("pathological (backreferences)", r"(.+)(.*)(.*)(.*)(.*)(.*)\1\1\1\."),
]


def time_query(
    engine: Engine,
    pattern: str,
    sort: str,
    scope: str,
    limit: int,
    warmup: int,
    repeat: int,
    budget_s: float,
) -> tuple[dict[str, float], int, int]:
    """Percentiles of *repeat* calls (fewer, but at least 5, once *budget_s* is spent), the
    number of hits, and the number of calls timed."""

    def call() -> int:
        result = engine.grep(
            pattern,
            conversation=SESSION,
            sort=sort,  # type: ignore[arg-type]
            scope=scope,  # type: ignore[arg-type]
            limit=limit,
        )
        return len(result.hits)

    hits = 0
    for _ in range(warmup):
        hits = call()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < repeat and (len(samples) < 5 or spent < budget_s):
        started = time.perf_counter()
        call()
        elapsed = time.perf_counter() - started
        spent += elapsed
        samples.append(elapsed * 1000)
    return percentiles(samples), hits, len(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="messages in the store")
    parser.add_argument("--repeat", type=int, default=50, help="timed calls per query")
    parser.add_argument(
        "--query-seconds",
        type=float,
        default=30.0,
        help="stop timing a query after this long (at least 5 calls)",
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--scope", default="both", choices=("messages", "summaries", "both"))
    parser.add_argument("--regex-repeat", type=int, default=3, help="timed calls per regex")
    parser.add_argument(
        "--summarizer",
        choices=("extractive", "scripted"),
        default="extractive",
        help="which cached store (see assembly.py)",
    )
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="the cached SQLite store, or its copy in PostgreSQL (common.postgres_store)",
    )
    parser.add_argument(
        "--pg-store",
        choices=("copy", "built"),
        default="copy",
        help="with --backend postgres: the SQLite store's copy, or one built in PostgreSQL"
        " itself (common.built_postgres_store: for 10M messages, too many to build and copy)",
    )
    args = parser.parse_args()
    target, info = kept_store(
        args.backend, args.size, args.summarizer, pg_built=args.pg_store == "built"
    )
    bound_s = inspect.signature(grep_store).parameters["max_seconds"].default
    bound_rows = inspect.signature(grep_store).parameters["max_rows"].default
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    regex_rows: list[dict[str, Any]] = []
    with Engine.open(target) as engine:
        print(
            f"{info['messages']:,} messages stored; scope {args.scope}, limit {args.limit}"
            + (f"; PostgreSQL ({engine.store.location})" if args.backend == "postgres" else "")
        )
        for kind, pattern, sort in queries():
            stats, hits, calls = time_query(
                engine,
                pattern,
                sort,
                args.scope,
                args.limit,
                args.warmup,
                args.repeat,
                args.query_seconds,
            )
            rows.append(
                {
                    "kind": kind,
                    "pattern": pattern,
                    "sort": sort,
                    "hits": hits,
                    "calls": calls,
                    **stats,
                }
            )
            print(
                f"  {kind:<32} {sort:<9} {hits:>3} hits  p50 {stats['p50_ms']:8.2f} ms  "
                f"p95 {stats['p95_ms']:8.2f} ms",
                flush=True,
            )
        for kind, pattern in REGEXES:
            elapsed = []
            result = None
            for _ in range(args.regex_repeat):
                started = time.perf_counter()
                result = engine.grep(
                    pattern, conversation=SESSION, mode="regex", scope=args.scope, limit=args.limit
                )
                elapsed.append(time.perf_counter() - started)
            assert result is not None
            regex_rows.append(
                {
                    "kind": kind,
                    "pattern": pattern,
                    "hits": len(result.hits),
                    "truncated": result.truncated,
                    "rows_scanned": result.scanned,
                    "seconds_max": round(max(elapsed), 3),
                    "seconds_min": round(min(elapsed), 3),
                    "bound_seconds": bound_s,
                    "bound_rows": bound_rows,
                }
            )
            r = regex_rows[-1]
            print(
                f"  regex {kind:<26} {r['hits']:>3} hits  truncated={r['truncated']}  "
                f"{r['rows_scanned']:,} rows scanned  {r['seconds_min']:.2f}-"
                f"{r['seconds_max']:.2f} s (bound {bound_s} s, {bound_rows:,} rows)",
                flush=True,
            )
    print()
    print("| query | sort | hits | calls | p50 | p95 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['sort']} | {r['hits']} | {r['calls']} | {r['p50_ms']:.1f} ms | "
            f"{r['p95_ms']:.1f} ms |"
        )
    worst = max(rows, key=lambda r: r["p95_ms"])
    over = [r["kind"] for r in rows if r["p95_ms"] > P95_TARGET_MS]
    print()
    print(
        f"full_text p95 target <= {P95_TARGET_MS:.0f} ms: worst {worst['p95_ms']:.1f} ms "
        f"({worst['kind']}) — "
        + ("met" if not over else f"NOT met for {len(over)} of {len(rows)}: {', '.join(over)}")
    )
    for r in regex_rows:
        over = r["seconds_max"] / bound_s - 1
        r["bounded"] = over <= BOUND_SLACK
        print(
            f"regex {r['kind']}: {r['seconds_max']:.2f} s at most ({over:+.0%} against the "
            f"{bound_s} s bound), truncated={r['truncated']} — "
            + ("bounded" if r["bounded"] else f"NOT bounded (over by more than {BOUND_SLACK:.0%})")
        )
    load_after = load_average()
    print(f"1-minute load average: {load_before} before, {load_after} after (2 cores)")
    results = {
        "revision": revision(),
        "backend": args.backend,
        "load_before": load_before,
        "load_after": load_after,
        "store": info,
        "scope": args.scope,
        "limit": args.limit,
        "repeat": args.repeat,
        "p95_target_ms": P95_TARGET_MS,
        "full_text": rows,
        "regex": regex_rows,
    }
    name = "grep" if args.backend == "sqlite" else f"grep-{args.backend}"
    if args.backend == "postgres" and args.pg_store == "built":
        name += f"-built-{args.size}"
    print(f"results: {save(name, results)}")


if __name__ == "__main__":
    main()
