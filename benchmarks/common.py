"""Helpers shared by the benchmarks: machine facts, timing summaries, result files."""

from __future__ import annotations

import json
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"

_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "deploy",
    "config",
    "error",
    "file",
    "path",
    "build",
    "test",
    "server",
    "client",
    "token",
    "budget",
    "summary",
    "python",
    "sqlite",
    "index",
    "query",
    "result",
    "tool",
    "call",
    "retry",
    "cache",
    "latency",
    "decision",
    "branch",
    "commit",
    "review",
    "schema",
    "migration",
    "request",
    "response",
    "timeout",
    "worker",
    "queue",
]


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next(
                (line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")),
                platform.processor(),
            )
    except OSError:
        model = platform.processor()
    return {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "cpu": model,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
    }


def text_messages(n: int, *, seed: int = 1, chars: int = 200) -> list[dict[str, str]]:
    """*n* chat messages of about *chars* characters, alternating user and assistant."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(_WORDS))
        out.append(
            {"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(words)[:chars]}
        )
    return out


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50/p95/p99, the slowest and the mean of a list of milliseconds."""
    ordered = sorted(samples_ms)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50_ms": round(q[49], 4),
        "p95_ms": round(q[94], 4),
        "p99_ms": round(q[98], 4),
        "max_ms": round(ordered[-1], 4),
        "mean_ms": round(statistics.fmean(ordered), 4),
    }


def load_average() -> float:
    """The 1-minute load average (figures taken above ~1.0 on 2 cores share the machine)."""
    return round(os.getloadavg()[0], 2)


def revision() -> str:
    """The git commit measured, with ``+dirty`` when src/ has uncommitted changes."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (commit or "unknown") + ("+dirty" if dirty else "")


def save(name: str, data: dict[str, Any]) -> Path:
    """Write *data* (with the machine facts) to ``benchmarks/out/<name>.json``."""
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **data}, indent=2))
    return path


# --- a searchable corpus: Zipf-distributed words, identifiers and some CJK ------------------

# Real words, most frequent first; a long tail of made-up words follows them, so a query can
# pick a word found in most messages, in a few percent of them, or in a few dozen.
_HEAD = (
    "the to and a of i it is in that you we for this on with be not have was but are so can"
    " as if at do will just what all my now there an from or one about when how they then"
    " test file error config deploy build server run fix change code tool call result check"
    " need use should would could did see out up more like also here get new time first last"
    " path python branch commit review schema migration request response timeout worker queue"
    " cache retry index query token budget summary latency decision client sqlite database"
    " endpoint function module package version release service logs user session context"
    " message memory search storage table column row value key type field list string number"
    " date week yesterday today tomorrow because instead before after again still already"
    " failing passing fixed broken slow fast large small old new port host network disk cpu"
    " thread process lock transaction write read update delete create import export parse"
    " format render template layout style image upload download backup restore monitor alert"
    " metric dashboard report invoice customer order payment price account password secret"
)
#: A word planted in every 40,000th message only (25 of 1M): fewer than a page of hits.
RARE_WORD = "quixotic"
_CJK_SENTENCES = (
    "部署脚本在生产环境中失败了",
    "数据库迁移需要回滚",
    "请检查配置文件中的端口号",
    "缓存命中率下降到百分之四十",
    "测试用例全部通过",
    "明天上午发布新版本",
    "服务器日志显示超时错误",
    "用户会话在三十分钟后过期",
    "本番環境のデプロイが失敗しました",
    "データベースの索引を再構築する",
    "設定ファイルを確認してください",
    "배포 스크립트가 실패했습니다",
)


def _tail_words(count: int, seed: int = 42) -> list[str]:
    rng = random.Random(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"] + ["qu", "th", "sh", "ch"]
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


_VOCAB: list[str] = []
_CUM: list[float] = []


def vocabulary() -> list[str]:
    """The corpus's words by rank (rank 1 first): real words, then 30,000 made-up ones."""
    if not _VOCAB:
        head = list(dict.fromkeys(_HEAD.split()))
        _VOCAB.extend(head + [w for w in _tail_words(30_000) if w not in head])
        total = 0.0
        for rank in range(1, len(_VOCAB) + 1):
            total += 1.0 / (rank + 2.7)  # Zipf–Mandelbrot, as word counts of real text
            _CUM.append(total)
    return _VOCAB


def corpus_messages(count: int, *, seed: int = 1, start: int = 0) -> list[dict[str, str]]:
    """Messages *start* … *start+count-1* of a deterministic corpus for search benchmarks.

    15-60 words each (≈ 230 characters) drawn from :func:`vocabulary` with Zipf frequencies,
    in sentences; every 50th message names a ticket (``OPS-12345``), every 500th holds a CJK
    sentence and every 40,000th the word :data:`RARE_WORD`. Users and assistants alternate.
    The same (seed, start, count) gives the same messages, so a large corpus can be made chunk
    by chunk.
    """
    words = vocabulary()
    rng = random.Random(seed * 1_000_003 + start)
    out = []
    for i in range(start, start + count):
        drawn = rng.choices(words, cum_weights=_CUM, k=rng.randint(15, 60))
        sentences = []
        at = 0
        while at < len(drawn):
            end = at + rng.randint(6, 14)
            sentence = " ".join(drawn[at:end])
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
            at = end
        if i % 50 == 7:
            sentences.insert(rng.randrange(len(sentences)), f"See ticket OPS-{i // 50:05d}.")
        if i % 500 == 123:
            sentences.append(_CJK_SENTENCES[(i // 500) % len(_CJK_SENTENCES)])
        if i % 40_000 == 20_011:
            sentences.append(f"The {RARE_WORD} plan was shelved.")
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(sentences)})
    return out


# --- a compacted conversation of N messages, cached in benchmarks/out/stores ------------------

STORES = OUT / "stores"
#: Bump when the corpus or the way a store is built changes: cached stores are rebuilt.
STORE_VERSION = 2
SESSION = "bench"
_INGEST_CHUNK = 5_000  # messages ingested (one transaction) before each compaction
#: How :func:`built_postgres_store` builds: 2, its word and trigram indexes made after the
#: messages are in (as a restore of a dump makes them).
PG_BUILD = 2


def agent_tail(turns: int = 10, *, seed: int = 3) -> list[dict[str, Any]]:
    """The last turns of a generated coding-agent session (tool calls and results, thinking
    blocks; 68 messages for 10 turns), as OpenClaw source messages."""
    import tempfile

    from lossless import Engine
    from lossless.sample import write_session

    with tempfile.TemporaryDirectory(prefix="lossless-tail-") as work:
        path = write_session(Path(work) / "tail.jsonl", turns, seed=seed)
        with Engine.open(Path(work) / "tail.db") as source:
            source.bootstrap(path)
            return [m.to_source() for m in source.messages("demo-session")]


def instant_summary(request: Any) -> str:
    """A scripted summarizer's answer of about the target size (4 characters per token)."""
    target = int(request.target_tokens)
    return ("summary " * (target // 2))[: target * 4]


def _build_conversation(target: str | Path, size: int, summarizer: str) -> dict[str, Any]:
    """Fill the empty store at *target* as :func:`compacted_store` says; how it was built."""
    import time

    from lossless import Config, Engine
    from lossless.summarize import ScriptedSummarizer
    from lossless.summarize.extractive import ExtractiveSummarizer

    tail = agent_tail()
    history = max(0, size - len(tail))
    chosen = (
        ScriptedSummarizer(default=instant_summary)
        if summarizer == "scripted"
        else ExtractiveSummarizer()
    )
    ingest_s = compact_s = 0.0
    started = time.perf_counter()
    with Engine.open(target, config=Config(), summarizer=chosen) as engine:
        done = 0
        while done < history:
            count = min(_INGEST_CHUNK, history - done)
            t0 = time.perf_counter()
            engine.ingest_batch(SESSION, corpus_messages(count, start=done))
            t1 = time.perf_counter()
            engine.compact(SESSION)
            ingest_s += t1 - t0
            compact_s += time.perf_counter() - t1
            done += count
            if done % 100_000 == 0:
                elapsed = time.perf_counter() - started
                print(f"  building {size:,}: {done:,} messages ({elapsed:.0f} s)", flush=True)
        t0 = time.perf_counter()
        engine.ingest_batch(SESSION, tail)
        t1 = time.perf_counter()
        engine.compact(SESSION)
        t2 = time.perf_counter()
        engine.finish_indexes()  # as an import ends: the indexes caught up and merged
        finish_s = time.perf_counter() - t2
        ingest_s += t1 - t0
        compact_s += t2 - t1
        conv = engine.conversation(SESSION)
        items = engine.context(conv.conversation_id)
        return {
            "version": STORE_VERSION,
            "messages": engine.store.message_count(conv.conversation_id),
            "summarizer": summarizer,
            "summaries_by_depth": engine.store.summary_counts(conv.conversation_id),
            "context_items": len(items),
            "context_summaries": sum(1 for i in items if i.summary_id is not None),
            "context_tokens": sum(i.tokens for i in items),
            "ingest_s": round(ingest_s, 1),
            "compact_s": round(compact_s, 1),
            "finish_indexes_s": round(finish_s, 1),
            "build_s": round(time.perf_counter() - started, 1),
        }


def compacted_store(size: int, *, summarizer: str = "scripted", rebuild: bool = False) -> Path:
    """A store whose conversation ``bench`` holds *size* messages, compacted, built once.

    The history is :func:`corpus_messages` ingested with ``Engine.ingest_batch`` 5,000 at a
    time, each chunk followed by a full compaction (so the context compaction reads stays
    small), then :func:`agent_tail` as the last messages and a last compaction: the active
    context is a few summaries and a ~64-message fresh tail of tool calls and results. The
    indexes are finished at the end as an import finishes them (``Engine.finish_indexes``:
    the entries large batches left, then the merging they left due). *summarizer* is
    ``scripted`` (:func:`instant_summary`: summaries of the target size, at once) or
    ``extractive`` (the offline default). The store is kept in ``benchmarks/out/stores/``
    with a JSON file of how it was built; later calls return it as it is.
    """
    STORES.mkdir(parents=True, exist_ok=True)
    path = STORES / f"conversation-{size}-{summarizer}.db"
    meta_path = path.with_suffix(".json")
    if (
        not rebuild
        and path.exists()
        and meta_path.exists()
        and json.loads(meta_path.read_text()).get("version") == STORE_VERSION
    ):
        return path
    for stale in (path, meta_path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)
    building = path.with_name(path.name + ".building")
    building.unlink(missing_ok=True)
    meta = _build_conversation(building, size, summarizer)
    building.rename(path)
    Path(f"{building}-writers").unlink(missing_ok=True)  # the build's writers' lock file
    meta_path.write_text(json.dumps(meta, indent=2))
    return path


def store_info(path: Path) -> dict[str, Any]:
    """How a store made by :func:`compacted_store` was built."""
    info: dict[str, Any] = json.loads(path.with_suffix(".json").read_text())
    return info


# --- PostgreSQL: a schema of the benchmark database per store -------------------------------

#: The database the PostgreSQL runs use (``LOSSLESS_BENCH_PG`` names another); every store is
#: a schema of its own in it, with ``public`` (where ``pg_trgm`` lives) after it on the path.
PG_URL = os.environ.get("LOSSLESS_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: How the schemas a benchmark makes for one run begin (``LOSSLESS_BENCH_PG_PREFIX``: on a
#: shared server, a prefix of one's own).
SCHEMA_PREFIX = os.environ.get("LOSSLESS_BENCH_PG_PREFIX", "lossless_bench_")


#: Settings every store's connections take (``LOSSLESS_BENCH_PG_SETTINGS``, as
#: ``name=value`` words: ``synchronous_commit=off`` measures commits that do not wait for
#: the disk, the durability SQLite's WAL with ``synchronous=NORMAL`` gives).
PG_SETTINGS = os.environ.get("LOSSLESS_BENCH_PG_SETTINGS", "").split()


def pg_url(schema: str) -> str:
    """The URL of the store kept in *schema* of :data:`PG_URL`'s database."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"not a plain schema name: {schema!r}")
    extra = "".join(f"%20-c{s.replace('=', '%3D')}" for s in PG_SETTINGS)
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}options=-csearch_path%3D{schema},public{extra}"


def server_settings(url: str = PG_URL) -> dict[str, str]:
    """The server settings a figure depends on, as a connection to *url* has them."""
    import psycopg

    names = (
        "server_version",
        "shared_buffers",
        "synchronous_commit",
        "max_connections",
        "autovacuum",
        "wal_level",
        "fsync",
    )
    with psycopg.connect(url, autocommit=True) as conn:
        return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}


def pg_admin() -> Any:
    """An autocommit psycopg connection to :data:`PG_URL` (for schemas, comments, VACUUM)."""
    import psycopg

    return psycopg.connect(PG_URL, autocommit=True)


def create_pg_schema(schema: str) -> str:
    """Create *schema* (and ``pg_trgm`` in ``public`` when it is missing); its store's URL."""
    url = pg_url(schema)
    with pg_admin() as conn:
        if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone():
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    return url


def fresh_store(backend: str, work: Path, name: str) -> tuple[str, str | None]:
    """(path or URL, PostgreSQL schema to drop afterwards) of a fresh, empty store for one
    run: a file *name*.db in *work*, or the schema ``<prefix><name>_<pid>``."""
    if backend == "sqlite":
        return str(work / f"{name}.db"), None
    schema = f"{SCHEMA_PREFIX}{name.replace('-', '_')}_{os.getpid()}"
    drop_pg_schema(schema)
    return create_pg_schema(schema), schema


def drop_pg_schema(schema: str) -> None:
    """Drop *schema* and everything in it."""
    pg_url(schema)  # checks the name
    with pg_admin() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _table_counts(store: Any) -> dict[str, int]:
    from lossless.migrate_store import TABLES

    return {t.name: int(store.fetchall(f"SELECT count(*) FROM {t.name}")[0][0]) for t in TABLES}


def postgres_store(size: int, *, summarizer: str = "scripted", rebuild: bool = False) -> str:
    """The URL of a PostgreSQL copy of :func:`compacted_store` (*size*, *summarizer*), made once.

    The SQLite store is copied with ``migrate_store`` into the schema
    ``lossless_bench_<size>_<summarizer>`` of :data:`PG_URL`, every table is then vacuumed and
    analyzed (as autovacuum would in time: planner statistics, visibility map), and the
    schema's comment records how the SQLite store was built. Later calls reuse the copy when
    that comment matches the SQLite store's and every table has the source's row count; a copy
    of an older build is dropped and made again, an interrupted one is continued.
    """
    from lossless.migrate_store import MigrationError, MigrationProgress, migrate_store
    from lossless.store import open_store

    path = compacted_store(size, summarizer=summarizer, rebuild=rebuild)
    stamp = json.dumps(store_info(path), sort_keys=True)
    schema = f"lossless_bench_{size}_{summarizer}"
    url = pg_url(schema)
    exists, comment = _schema_comment(schema)
    row = (comment,) if exists else None
    if row is not None and (rebuild or (row[0] is not None and row[0] != stamp)):
        drop_pg_schema(schema)  # a copy of another build of the SQLite store
        row = None
    source = open_store(path)
    try:
        if row is not None and row[0] == stamp:
            target = open_store(url)
            try:
                if _table_counts(target) == _table_counts(source):
                    return url
            finally:
                target.close()
            drop_pg_schema(schema)
        print(f"  copying the {size:,}-message store to PostgreSQL schema {schema}", flush=True)
        started = time.perf_counter()
        shown = [0.0]

        def progress(p: MigrationProgress) -> None:
            now = time.perf_counter()
            if now - shown[0] >= 30 or p.done == p.total:
                shown[0] = now
                print(
                    f"  copying {size:,}: {p.done:,} of {p.total:,} rows ({now - started:.0f} s)",
                    flush=True,
                )

        for attempt in (1, 2):
            target = open_store(create_pg_schema(schema))
            try:
                migrate_store(source, target, progress=progress)
                break
            except MigrationError as exc:
                if attempt == 2:
                    raise
                print(f"  the copy in {schema} cannot be continued ({exc}); copying again")
                drop_pg_schema(schema)
            finally:
                target.close()
    finally:
        source.close()
    _vacuum_and_stamp(schema, stamp)
    print(f"  copied in {time.perf_counter() - started:.0f} s (with VACUUM ANALYZE)", flush=True)
    return url


def _vacuum_and_stamp(schema: str, stamp: str) -> None:
    """VACUUM ANALYZE every table of *schema* (as autovacuum would in time: planner
    statistics, visibility map), then record *stamp* as the schema's comment: the store in it
    is complete."""
    from psycopg import sql

    with pg_admin() as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        for (table,) in tables:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(schema, table)))
        conn.execute(
            sql.SQL("COMMENT ON SCHEMA {} IS {}").format(sql.Identifier(schema), sql.Literal(stamp))
        )


def _schema_comment(schema: str) -> tuple[bool, str | None]:
    """Whether *schema* exists, and its comment."""
    with pg_admin() as conn:
        row = conn.execute(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s",
            (schema,),
        ).fetchone()
    return (row is not None, None if row is None else row[0])


def built_postgres_store(size: int, *, summarizer: str = "scripted", rebuild: bool = False) -> str:
    """The URL of a store built as :func:`compacted_store` builds one, but in PostgreSQL itself
    (the schema ``lossless_bench_<size>_<summarizer>_built``), made once.

    For sizes whose SQLite copy would take too long to make and copy (10M messages): the
    messages go in with ``Engine.ingest_batch`` and are compacted on the server. The word and
    trigram indexes (GIN) are dropped before and made after, as a restore of a dump makes them:
    kept up message by message, they made each next 100,000 messages slower to build than the
    last (10M would take hours). Every table is then vacuumed and analyzed, and the schema's
    comment records how it was built; a schema without that comment (an interrupted build) is
    dropped and built again.
    """
    import time

    schema = f"lossless_bench_{size}_{summarizer}_built"
    url = pg_url(schema)
    exists, comment = _schema_comment(schema)
    if (
        exists
        and comment is not None
        and not rebuild
        and json.loads(comment).get("version") == STORE_VERSION
        and json.loads(comment).get("pg_build") == PG_BUILD
    ):
        return url
    drop_pg_schema(schema)
    started = time.perf_counter()
    print(f"  building {size:,} messages in PostgreSQL schema {schema}", flush=True)
    from lossless import Config, Engine

    with Engine.open(create_pg_schema(schema), config=Config()):
        pass  # the store's tables and indexes
    deferred = _drop_search_indexes(schema)
    meta = _build_conversation(url, size, summarizer)
    t0 = time.perf_counter()
    _create_indexes(deferred)
    meta["search_indexes_s"] = round(time.perf_counter() - t0, 1)
    meta["pg_build"] = PG_BUILD
    _vacuum_and_stamp(schema, json.dumps(meta, sort_keys=True))
    print(f"  built in {time.perf_counter() - started:.0f} s (with VACUUM ANALYZE)", flush=True)
    return url


def _drop_search_indexes(schema: str) -> list[str]:
    """Drop the GIN indexes of *schema* (the word and trigram indexes); their definitions."""
    from psycopg import sql

    with pg_admin() as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s"
            " AND indexdef LIKE '%% USING gin %%' ORDER BY indexname",
            (schema,),
        ).fetchall()
        for name, _ in rows:
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, name)))
    return [definition for _, definition in rows]


def _create_indexes(definitions: list[str]) -> None:
    """Make the indexes *definitions* say, two at a time (one a core here), each with a
    gigabyte to sort in (``maintenance_work_mem``), as a restore of a dump makes them."""
    from concurrent.futures import ThreadPoolExecutor

    def make(definition: str) -> None:
        with pg_admin() as conn:
            conn.execute("SET maintenance_work_mem = '1GB'")
            conn.execute(definition)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(make, definitions))


def kept_store(
    backend: str, size: int, summarizer: str, *, pg_built: bool = False
) -> tuple[str | Path, dict[str, Any]]:
    """The kept store of *size* messages for *backend* (``sqlite``, or ``postgres`` /
    ``postgresql``: the SQLite store's copy, or with *pg_built* one built in the server) and
    how it was built."""
    if backend != "sqlite" and pg_built:
        return built_postgres_store(size, summarizer=summarizer), built_store_info(size, summarizer)
    path = compacted_store(size, summarizer=summarizer)
    info = store_info(path)
    if backend == "sqlite":
        return path, info
    return postgres_store(size, summarizer=summarizer), info


def built_store_info(size: int, summarizer: str) -> dict[str, Any]:
    """How a store made by :func:`built_postgres_store` was built."""
    exists, comment = _schema_comment(f"lossless_bench_{size}_{summarizer}_built")
    if not exists or comment is None:
        raise LookupError(f"no built {size:,}-message store in PostgreSQL")
    info: dict[str, Any] = json.loads(comment)
    return info
