"""Crash safety of the schema migrations: an old-schema store's opening killed with SIGKILL
at a random moment or inside a migration's transaction applies each migration whole or not at
all, and opening it again finishes them (see ``test_crash.py`` for the harness's rounds)."""

from __future__ import annotations

import functools
import random
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from crash_support import (
    OLD_SCHEMA_UPTO,
    SEEDS,
    ImportCase,
    assert_whole,
    copy_db,
    holding,
    is_hold,
    kill_child,
    nth,
)
from lossless import Config, Engine
from lossless.store.migrations import MIGRATIONS

# --- migration ---------------------------------------------------------------------------------


def _schema(conn: sqlite3.Connection) -> set[tuple[str, str, str | None]]:
    return {
        (kind, name, sql)
        for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master")
        if not name.startswith("sqlite_") and name != "migrations"
    }


def _objects_by_migration() -> dict[str, set[tuple[str, str, str | None]]]:
    """The schema objects each migration creates (replayed on an empty database)."""
    conn = sqlite3.connect(":memory:")
    made: dict[str, set[tuple[str, str, str | None]]] = {}
    seen: set[tuple[str, str, str | None]] = set()
    for name, fn in MIGRATIONS:
        fn(conn)
        now = _schema(conn)
        made[name] = now - seen
        seen = now
    conn.close()
    return made


@functools.cache
def _dropped_by_migration() -> dict[str, set[str]]:
    """The names of the schema objects each migration drops (replayed on an empty database)."""
    conn = sqlite3.connect(":memory:")
    dropped: dict[str, set[str]] = {}
    seen: set[str] = set()
    for name, fn in MIGRATIONS:
        fn(conn)
        now = {ident for _, ident, _ in _schema(conn)}
        dropped[name] = seen - now
        seen = now
    conn.close()
    return dropped


def _sql_now(conn: sqlite3.Connection, name: str) -> str | None:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def _sql_before(migration: str) -> dict[str, str]:
    """Each object's SQL as the migrations before *migration* left it."""
    conn = sqlite3.connect(":memory:")
    for name, fn in MIGRATIONS:
        if name == migration:
            break
        fn(conn)
    sql = {n: s for n, s in conn.execute("SELECT name, sql FROM sqlite_master") if s}
    conn.close()
    return sql


def _columns_before(migration: str) -> dict[str, list[str]]:
    """Each table's columns as the migrations before *migration* left them."""
    conn = sqlite3.connect(":memory:")
    for name, fn in MIGRATIONS:
        if name == migration:
            break
        fn(conn)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    columns = {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    conn.close()
    return columns


@dataclass(frozen=True)
class MigrationCase:
    old: Path  # a store as the older release left it
    later: list[str]  # the migrations opening it applies
    objects: dict[str, set[tuple[str, str, str | None]]]
    tool_executions: int  # rows the backfill must end with
    seconds: float  # how long opening (migrating) it takes here
    #: The older release's schema (a later migration may make an object again as it was).
    old_schema: set[tuple[str, str, str | None]]


@pytest.fixture(scope="module")
def migration_case(
    import_case: ImportCase, tmp_path_factory: pytest.TempPathFactory
) -> MigrationCase:
    root = tmp_path_factory.mktemp("migration")
    names = [name for name, _ in MIGRATIONS]
    later = names[names.index(OLD_SCHEMA_UPTO) + 1 :]
    objects = _objects_by_migration()
    old = copy_db(import_case.reference_db, root / "old.db")
    conn = sqlite3.connect(old, isolation_level=None)
    expected_rows = conn.execute("SELECT count(*) FROM tool_executions").fetchone()[0]
    assert expected_rows > 1_000
    # Downgrade: drop what the later migrations made and forget that they ran. This is the
    # schema the older release wrote, as long as later migrations only add objects, add
    # columns to older tables (those columns are dropped, the table kept), drop an object (it
    # is made again as it was), replace a
    # full-text table or a view (the older one is made again, a full-text table rebuilt), or
    # make a table again in another form with the same columns (the older form is made again,
    # its rows copied back, then its indexes).
    conn.execute("BEGIN")
    for name in reversed(later):
        before = _columns_before(name)
        old_sql = _sql_before(name)
        # What the migration dropped is made again as it was (a view before the full-text
        # table made over it, which is rebuilt; a full-text table's shadow tables come with it).
        current = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        virtual = [i for i, q in old_sql.items() if "VIRTUAL TABLE" in q.upper()]
        dropped = [
            i
            for i in old_sql
            if i not in current and not any(i.startswith(f"{v}_") for v in virtual)
        ]
        for ident in sorted(dropped, key=lambda i: "VIRTUAL TABLE" in old_sql[i].upper()):
            conn.execute(old_sql[ident])
            if "VIRTUAL TABLE" in old_sql[ident].upper():
                conn.execute(f'INSERT INTO "{ident}" ("{ident}") VALUES (\'rebuild\')')
        # Tables the migration made go first, a full-text table before its own shadow tables
        # (it reads the view it was made over, and them), then replaced views and indexes,
        # then the tables it replaced.
        for kind, ident, _ in sorted(
            objects[name],
            key=lambda o: (
                o[0] != "table" or o[1] in old_sql,
                "VIRTUAL TABLE" not in (o[2] or "").upper(),
                o[0] == "table",
            ),
        ):
            if "VIRTUAL TABLE" in old_sql.get(ident, "").upper():
                conn.execute(f'DROP TABLE "{ident}"')
                conn.execute(old_sql[ident])
                conn.execute(f'INSERT INTO "{ident}" ("{ident}") VALUES (\'rebuild\')')
            elif kind != "table" and ident in old_sql:  # replaced: made again as it was
                conn.execute(f'DROP {kind.upper()} IF EXISTS "{ident}"')
                conn.execute(old_sql[ident])
            elif (
                kind == "table"
                and ident in old_sql
                and _sql_now(conn, ident) != old_sql[ident]
                and [r[1] for r in conn.execute(f'PRAGMA table_info("{ident}")')]
                == before.get(ident)
            ):
                conn.execute(f'ALTER TABLE "{ident}" RENAME TO "{ident}_later"')
                conn.execute(old_sql[ident])
                conn.execute(f'INSERT INTO "{ident}" SELECT * FROM "{ident}_later"')
                conn.execute(f'DROP TABLE "{ident}_later"')
                for sql in old_sql.values():  # its indexes went with the later form
                    if sql.upper().startswith("CREATE INDEX") and f" ON {ident}(" in sql:
                        conn.execute(sql.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1))
            elif kind == "table" and ident in before:
                current = [r[1] for r in conn.execute(f'PRAGMA table_info("{ident}")')]
                for column in reversed([c for c in current if c not in before[ident]]):
                    conn.execute(f'ALTER TABLE "{ident}" DROP COLUMN "{column}"')
            else:
                conn.execute(f'DROP {kind.upper()} IF EXISTS "{ident}"')
        conn.execute("DELETE FROM migrations WHERE name = ?", (name,))
    conn.execute("COMMIT")
    replay = sqlite3.connect(":memory:")
    for _, fn in MIGRATIONS[: names.index(OLD_SCHEMA_UPTO) + 1]:
        fn(replay)
    assert _schema(conn) == _schema(replay), "a later migration changes an older object"
    old_schema = _schema(conn)
    conn.close()
    replay.close()

    timed = copy_db(old, root / "timed.db")
    began = time.perf_counter()
    with Engine.open(timed, config=Config()) as engine:
        seconds = time.perf_counter() - began
        assert engine.store.applied_migrations() == names
        assert engine.store.fetchall("SELECT count(*) FROM tool_executions")[0][0] == expected_rows
    return MigrationCase(old, later, objects, expected_rows, seconds, old_schema)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_migration_applies_each_step_whole_and_opening_again_finishes_it(
    migration_case: MigrationCase, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(f"migrate:{seed}")
    db = copy_db(migration_case.old, tmp_path / "store.db")
    if is_hold(seed):
        run = kill_child(tmp_path, "migrate", db, "--hold", "1", when=holding)
        assert "holding" in run.lines
    else:
        delay = rng.uniform(0, 1.5 * migration_case.seconds)
        run = kill_child(tmp_path, "migrate", db, when=nth("ready", 1), delay=delay)

    # Before anything opens it again: each later migration is recorded and all there, or
    # neither.
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        recorded = {r[0] for r in conn.execute("SELECT name FROM migrations")}
        schema = _schema(conn)
        for n, name in enumerate(migration_case.later):
            made = migration_case.objects[name]
            if name in recorded:
                # (less what a later recorded migration made again in its own form, or
                # dropped)
                remade = {
                    ident
                    for later in migration_case.later[n + 1 :]
                    if later in recorded
                    for ident in {o[1] for o in migration_case.objects[later]}
                    | _dropped_by_migration()[later]
                }
                made = {o for o in made if o[1] not in remade}
                assert made <= schema, f"{name} recorded but not all there"
            else:
                new = made - migration_case.old_schema
                assert not new & schema, f"{name} half applied: {sorted(new & schema)}"
        if "m005_tool_executions" in recorded:
            rows = conn.execute("SELECT count(*) FROM tool_executions").fetchone()[0]
            assert rows == migration_case.tool_executions
    finally:
        conn.close()
    done = len(recorded & set(migration_case.later))
    print(f"migrate: {done} of {len(migration_case.later)} migrations recorded at the kill")
    if is_hold(seed):
        assert done == 0

    with Engine.open(db, config=Config()) as engine:  # opening again migrates the rest
        assert engine.store.applied_migrations() == [name for name, _ in MIGRATIONS]
        rows = engine.store.fetchall("SELECT count(*) FROM tool_executions")[0][0]
        assert rows == migration_case.tool_executions
        assert_whole(engine.store)
