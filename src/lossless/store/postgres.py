"""The PostgreSQL back end: one store shared by many processes on many hosts.

The queries are :class:`~.base.Store`'s, as for SQLite; this module supplies what differs:

* connections come from a psycopg 3 pool (the ``postgres`` extra). A thread holds one for the
  length of a transaction or read snapshot and gives it back after; nested transactions are
  savepoints. Reads that need one consistent view run as ``REPEATABLE READ READ ONLY``;
  writes run in ``READ COMMITTED`` with explicit locks;
* writers to one conversation are serialized by a transaction-scoped advisory lock on the
  conversation (taken before anything is read), so seq numbers and context ordinals never
  interleave, while writers to different conversations run side by side;
* message and part ids come from sequences in consecutive blocks;
* the word index is a stored ``tsvector`` column and the substring index a ``pg_trgm`` GIN
  index, both kept by PostgreSQL on every write (nothing to catch up, nothing to drift).

Statements are written with ``?`` placeholders; :func:`translate` turns them into psycopg's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..codec import content_hash
from ..errors import NoStore, StoreError
from ..model import Checkpoint, Conversation
from ..timestamps import format_ts, now
from .activity import OPENING
from .base import Store
from .connection import Connection
from .context import CONTEXT_READ
from .core import _POSITION, CONTEXT_VERSION_UPDATE, Placement
from .migrations import STEPS
from .pg_connection import (
    PgConnection,
    _configure,
    bind,
    escape_text,
    prepare,
    redact_url,
    run,
    translate,
)
from .pg_migrations import CONTEXT_TSV, neighbour_text, own_words
from .pg_search import PgSearch
from .search import about_sql

if TYPE_CHECKING:
    pass

__all__ = [
    "Checkpoint",
    "PostgresStore",
    "bind",
    "content_hash",
    "prepare",
    "redact_url",
    "translate",
]

#: The id generators and the columns whose largest value they must pass after a bulk copy.
_SEQUENCES = (
    ("'message_ids'", "messages", "message_id"),
    ("'part_ids'", "message_parts", "part_id"),
    ("pg_get_serial_sequence('conversations', 'conversation_id')", "conversations",
     "conversation_id"),
    ("pg_get_serial_sequence('summaries', 'rowid')", "summaries", "rowid"),
    ("pg_get_serial_sequence('forgotten', 'forget_id')", "forgotten", "forget_id"),
    ("pg_get_serial_sequence('audit_log', 'audit_id')", "audit_log", "audit_id"),
    ("pg_get_serial_sequence('archives', 'archive_id')", "archives", "archive_id"),
)  # fmt: skip

#: The tables a forget writes text out of: rewritten after it (:meth:`purge_freed`).
_FORGET_WRITES = (
    "messages",
    "message_parts",
    "summaries",
    "redacted_originals",
    "tool_executions",
    "large_files",
    "session_summaries",
    "conversations",
)

#: Connections a store keeps at most (threads beyond it wait for one to come back).
POOL_MAX = 8
CONNECT_TIMEOUT = 10.0


#: The columns of a batch's rows as :meth:`PostgresStore._place_messages` sends them, one
#: array each (id and seq come from the reservation).
_ROW_COLUMNS = (
    ("role", "text"),
    ("content", "text"),
    ("token_count", "bigint"),
    ("created_at", "text"),
    ("external_id", "text"),
    ("source_format", "text"),
    ("envelope", "text"),
    ("metadata", "text"),
    ("host_meta", "text"),
)
#: The columns of a batch's parts (the message's index in the batch first).
_PART_COLUMNS = (
    ("msg", "bigint"),
    ("session_id", "text"),
    ("ordinal", "bigint"),
    ("slot", "text"),
    ("part_type", "text"),
    ("text", "text"),
    ("tool_call_id", "text"),
    ("tool_name", "text"),
    ("tool_input", "text"),
    ("tool_output", "text"),
    ("is_error", "int"),
    ("raw", "text"),
)
_MSG_NAMES = ("message_id", "seq", *(name for name, _ in _ROW_COLUMNS))


def _arrays(columns: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"?::{kind}[]" for _, kind in columns)


def _names(columns: Sequence[tuple[str, str]]) -> str:
    return ", ".join(name for name, _ in columns)


#: ``r``: the reservation, under the conversation's lock (parameters: the number of messages,
#: the number of parts twice, the conversation three times): both blocks of ids, the last
#: seq, the last ordinal and the context version before the batch.
_RESERVATION = (
    "r (first_id, first_part, seq0, ord0, version0) AS MATERIALIZED (SELECT"
    " lossless_take_ids('message_ids', ?::bigint),"
    " CASE WHEN ?::bigint > 0 THEN lossless_take_ids('part_ids', ?::bigint) ELSE 0 END,"
    f" {_POSITION})"
)
#: ``b``, ``h``, ``m``: the batch's rows (one array per column of ``_ROW_COLUMNS``) with
#: their ids and seqs, then each row's neighbours' words in ``m.prev``, ``m.next``,
#: ``m.far``, as ``CONTEXT_TSV`` reads them. The start of each message of the batch and of
#: the three before it (parameter: the conversation) is read into words once (a stored
#: message read whole has them already: its own words); each row takes its neighbours' in
#: seq order (seqs run without gaps). The rows before the batch come out
#: too, with only their seq and time (no id): the last of them, the message the batch
#: follows, has its surroundings complete, its next being the batch's first.
_SURROUNDED = (
    f"b AS (SELECT r.first_id + u.i - 1 AS message_id, r.seq0 + u.i AS seq,"
    f" {', '.join('u.' + n for n, _ in _ROW_COLUMNS)} FROM r,"
    f" unnest({_arrays(_ROW_COLUMNS)}) WITH ORDINALITY AS u({_names(_ROW_COLUMNS)}, i)),"
    " h AS (SELECT b.*, to_tsvector('english'::regconfig, "
    + neighbour_text("b.content")
    + ") AS words FROM b UNION ALL SELECT "
    + ", ".join(f"o.{n}" if n in ("seq", "created_at") else "NULL" for n in _MSG_NAMES)
    + f", CASE WHEN {neighbour_text('o.content')} = o.content THEN o.content_tsv"
    " ELSE to_tsvector('english'::regconfig, "
    + neighbour_text("o.content")
    + ") END FROM messages o, r WHERE o.conversation_id = ?"
    " AND o.seq BETWEEN r.seq0 - 2 AND r.seq0),"
    " m AS (SELECT h.*, lag(words) OVER w AS prev, lead(words) OVER w AS next,"
    " lag(words, 2) OVER w AS far FROM h WINDOW w AS (ORDER BY seq))"
)
#: A row of ``m`` in the word index, as ``CONTEXT_TSV`` makes it (the same words, weights
#: and order), with ``c`` its conversation.
_SURROUNDINGS = (
    "setweight(coalesce(m.prev, ''::tsvector), 'B')"
    " || setweight(coalesce(m.next, ''::tsvector), 'C')"
    " || setweight(coalesce(m.far, ''::tsvector), 'C')"
    " || setweight(to_tsvector('english'::regconfig, " + about_sql("m", "c") + "), 'D')"
)
#: A row's own words: the words its neighbours read of it when they read the whole text (a
#: message no longer than they read, with no NUL), else made from the text (as the trigger of
#: migration m020 makes them for every other write).
_OWN_WORDS = (
    f"CASE WHEN {neighbour_text('m.content')} = m.content THEN m.words"
    f" ELSE {own_words('m.content')} END"
)
_INSERT_MESSAGES = (
    f"msgs AS (INSERT INTO messages ({', '.join(_MSG_NAMES)}, conversation_id, context_tsv,"
    f" content_tsv) SELECT {', '.join('m.' + n for n in _MSG_NAMES)}, c.conversation_id,"
    f" {_SURROUNDINGS}, {_OWN_WORDS} FROM m JOIN conversations c ON c.conversation_id = ?"
    " WHERE m.message_id IS NOT NULL)"
)
_INSERT_PARTS = (
    "parts AS (INSERT INTO message_parts (part_id, message_id, "
    + ", ".join(n for n, _ in _PART_COLUMNS[1:])
    + ") SELECT r.first_part + u.k - 1, r.first_id + u.msg, "
    + ", ".join("u." + n for n, _ in _PART_COLUMNS[1:])
    + f" FROM r, unnest({_arrays(_PART_COLUMNS)}) WITH ORDINALITY AS"
    f" u({_names(_PART_COLUMNS)}, k))"
)
#: The message the batch follows gets its next (parameter: the conversation): its words
#: are made again, from those ``m`` read once (an UPDATE of its own would read and make them
#: all again).
_FOLLOWED = (
    f"followed AS (UPDATE messages o SET context_tsv = {_SURROUNDINGS} FROM m, r,"
    " conversations c WHERE c.conversation_id = o.conversation_id AND o.conversation_id = ?"
    " AND o.seq = r.seq0 AND m.seq = r.seq0 AND m.message_id IS NULL)"
)
#: (parameters: the conversation, the time, the number of messages)
_INSERT_ITEMS = (
    "items AS (INSERT INTO context_items (conversation_id, ordinal, item_type, message_id,"
    " created_at) SELECT ?, r.ord0 + g, 'message', r.first_id + g - 1, ?"
    " FROM r, generate_series(1, ?) g)"
)
#: The context's new version (parameters: the version, the conversation); ``r`` has read the
#: one before, the statement's snapshot being taken before any of its writes.
_NEW_VERSION = f"version AS ({CONTEXT_VERSION_UPDATE})"
#: The conversation's write lock, held until the transaction ends (parameter: its id).
_LOCK = "SELECT pg_advisory_xact_lock(hashtext(current_schema()), (?::bigint % 2147483647)::int)"


@lru_cache(maxsize=2)
def _placement(parts: bool) -> str:
    """A batch placed in one statement: reserved, its messages written with their words,
    its parts (with *parts*), its context items and the context's new version; answers the
    reservation (first id, and the ordinal and version before the batch)."""
    steps = [
        _RESERVATION,
        _SURROUNDED,
        _INSERT_MESSAGES,
        _FOLLOWED,
        *([_INSERT_PARTS] if parts else []),
    ]
    steps += [_INSERT_ITEMS, _NEW_VERSION]
    return f"WITH {', '.join(steps)} SELECT first_id, ord0, version0 FROM r"


def _column(rows: Sequence[Sequence[Any]], index: int) -> list[Any]:
    """One column of *rows*, its text as stored (see :func:`escape_text`)."""
    return [escape_text(v) if isinstance(v, str) else v for v in (r[index] for r in rows)]


#: Before the word index has statistics, a lexeme's rows are counted up to this many.
COUNT_CAP = 10_000


class PostgresStore(PgSearch, Store):
    """Messages, parts, summaries, context items and indexes in a PostgreSQL schema."""

    backend = "postgresql"

    def __init__(self, url: str, *, pool_size: int = POOL_MAX, create: bool = True) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool, PoolTimeout
        except ImportError as exc:  # pragma: no cover - the extra is installed in tests
            raise StoreError(
                "the PostgreSQL back end needs psycopg 3 and its pool: pip install"
                " 'lossless[postgres]'"
            ) from exc
        self.url = url
        self.location = redact_url(url)
        self.errors = (psycopg.Error,)
        self._psycopg = psycopg
        self._local = threading.local()
        self._term_cache: dict[tuple[str, str], tuple[float, int]] = {}
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"autocommit": True},
            configure=_configure,
            open=False,
            name="lossless",
            timeout=60.0,
        )
        try:
            # One direct attempt first: a wrong URL or a server that is down fails at once,
            # with the server's own reason (the pool would retry until its timeout).
            psycopg.connect(url, connect_timeout=int(CONNECT_TIMEOUT)).close()
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except (PoolTimeout, psycopg.Error) as exc:
            self._pool.close()
            raise StoreError(
                f"cannot connect to the PostgreSQL database {self.location}:"
                f" {' '.join(str(exc).split())}; check the URL, that the server is running and"
                " accepts this user"
            ) from exc
        if not create and not self._table_exists("migrations"):
            self._pool.close()
            raise NoStore(
                f"no lossless store in {self.location} (the schema first on its search path"
                " holds none): check the URL's database and search_path; `lossless import`,"
                " a host's first turn or Engine.open makes one"
            )
        self.migrate()

    # --- connections and transactions ------------------------------------------------------

    def close(self) -> None:
        """Close the pool and every connection in it."""
        self._pool.close()

    def _current(self) -> PgConnection | None:
        conn: PgConnection | None = getattr(self._local, "conn", None)
        return conn

    def _in_transaction(self) -> bool:
        return self._current() is not None

    @contextmanager
    def _checkout(self, *, snapshot: bool, pipelined: bool = False) -> Iterator[PgConnection]:
        if self._pool.closed:
            raise StoreError(f"the store {self.location} is closed; open it again")
        psycopg = self._psycopg
        try:
            raw = self._pool.getconn()
        except Exception as exc:
            raise StoreError(f"no connection to {self.location}: {exc}") from exc
        conn = self._local.conn = PgConnection(raw)
        # Read at once by transaction() into its BEGIN: no extra round trip for a snapshot.
        raw.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ if snapshot else None
        raw.read_only = True if snapshot else None
        try:
            with conn.in_one_round_trip() if pipelined else raw.transaction():
                yield conn
        except psycopg.OperationalError as exc:
            raise StoreError(
                f"the database {self.location} failed: {exc}; nothing of this write was stored"
            ) from exc
        finally:
            self._local.conn = None
            self._pool.putconn(raw)

    def transaction(self) -> AbstractContextManager[PgConnection]:
        """A write transaction; nested calls become savepoints."""
        return self._write(pipelined=False)

    def pipelined_transaction(self) -> AbstractContextManager[PgConnection]:
        """A write transaction in pipeline mode (see :meth:`StoreCore.pipelined_transaction`);
        inside another transaction, a savepoint of it."""
        return self._write(pipelined=True)

    @contextmanager
    def _write(self, *, pipelined: bool) -> Iterator[PgConnection]:
        conn = self._current()
        if conn is not None:
            if conn.pipeline is not None:
                # Its BEGIN may not have had an answer yet: psycopg would take the
                # connection for idle and begin (then commit) a transaction of its own
                # instead of a savepoint.
                conn.pipeline.sync()
            conn.savepoints += 1
            try:
                with conn.raw.transaction():
                    yield conn
            finally:
                conn.savepoints -= 1
            return
        with self._checkout(snapshot=False, pipelined=pipelined) as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[PgConnection]:
        """A consistent snapshot for several reads (joins an open transaction)."""
        conn = self._current()
        if conn is not None:
            yield conn
            return
        with self._checkout(snapshot=True) as conn:
            yield conn

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read query: in the thread's transaction, else on its own (one round trip)."""
        conn = self._current()
        if conn is not None:
            return list(conn.execute(sql, params).fetchall())
        if self._pool.closed:
            raise StoreError(f"the store {self.location} is closed; open it again")
        with self._pool.connection() as raw:
            return list(run(raw, sql, params).fetchall())

    def _context_rows(self, conn: Connection, conversation_id: int) -> list[tuple[Any, ...]]:
        """The context's rows through the conversation's index, never a scan of the table.
        Each message's item is deleted when a summary replaces it, and without autovacuum
        the table keeps every such dead row: after 1M messages 89 MB of pages for a few
        hundred live items. Statistics that count those few rows make the planner read the
        table whole (25 ms at 1M, in every turn that compacts, growing with the history);
        the index reads the live items."""
        return self._fetch_without_in(conn, ("seqscan",), CONTEXT_READ, (conversation_id,))

    def _opening_like(self, openings: Sequence[str]) -> tuple[str, list[Any]]:
        """:meth:`ActivityStore._opening_like` as one ``LIKE ANY`` of an array: PostgreSQL
        computes the opening once for all the patterns, where an ``OR`` of them computes it
        again for each (the restated-goal search over 2,000 messages, 11 patterns: about
        25-28 → 4.6-4.7 ms at 1M messages)."""
        return f"{OPENING} LIKE ANY (?)", [list(openings)]

    def fetch_in_order(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """:meth:`StoreCore.fetch_in_order` without bitmap scans or sorts: with statistics
        older than the table (autovacuum off, or a conversation grown since the last
        ``ANALYZE``) the planner reckons a conversation a few thousand rows long, collects
        every row of it through a bitmap and sorts them for a page of 20 (0.5 s at 400,000
        messages, and longer as the conversation grows); the ordered index scan reads about
        the page."""
        return self._fetch_without(("bitmapscan", "sort"), sql, params)

    # --- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply pending migrations under a schema-wide advisory lock, each in a savepoint
        of one transaction; an up-to-date store only reads."""
        names = [step.name for step in STEPS]
        if self._table_exists("migrations"):
            done = {r[0] for r in self.fetchall("SELECT name FROM migrations")}
            if done.issuperset(names):
                return []
        applied: list[str] = []
        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema()), 0)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS migrations"
                " (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            schema = conn.execute("SELECT current_schema()").fetchone()
            if schema is None or schema[0] is None:
                raise StoreError(
                    f"{self.location} has no schema to create the store in; create one or set"
                    " the search path (options=-csearch_path=NAME in the URL)"
                )
            done = {
                r[0] for r in conn.execute(f'SELECT name FROM "{schema[0]}".migrations').fetchall()
            }
            self._with_trigrams(conn, schema[0])
            for name, script in ((s.name, s.postgresql) for s in STEPS):
                if name in done:
                    continue
                conn.raw.execute(script.encode())
                conn.execute(
                    "INSERT INTO migrations (name, applied_at) VALUES (?, ?)",
                    (name, format_ts(now())),
                )
                applied.append(name)
        return applied

    def _with_trigrams(self, conn: Connection, schema: str) -> None:
        """Make ``pg_trgm``'s operator classes visible for the rest of the transaction (the
        trigram indexes are made with them), installing the extension in ``public`` when the
        database has none: installed in one store's own schema, a store in another schema
        would not see it, and dropping the first schema would take the second's indexes."""
        found = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
            " ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
        ).fetchone()
        if found is None:
            public = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'public'").fetchone()
            home = "public" if public else schema
            try:
                conn.execute("SAVEPOINT lossless_trgm")
                conn.execute(f'CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA "{home}"')
                conn.execute("RELEASE SAVEPOINT lossless_trgm")
            except Exception as exc:  # any refusal: say what to run
                conn.execute("ROLLBACK TO SAVEPOINT lossless_trgm")
                raise StoreError(
                    f"{self.location} needs the pg_trgm extension, which this role may not"
                    f" install ({str(exc).strip().splitlines()[0]}); ask the database's"
                    " administrator to run: CREATE EXTENSION pg_trgm SCHEMA public"
                ) from exc
            found = (home,)
        conn.execute(f'SET LOCAL search_path = "{schema}", "{found[0]}"')

    def _table_exists(self, name: str) -> bool:
        """Whether the store's own schema (the first on the search path) has *name*; a table
        of that name further down the path is another store's."""
        return bool(
            self.fetchall(
                "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?",
                (name,),
            )
        )

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this database, in order."""
        return [r[0] for r in self.fetchall("SELECT name FROM migrations ORDER BY name")]

    # --- ids and locks ----------------------------------------------------------------------

    def _allocate_ids(self, conn: Connection, table: str, count: int) -> int:
        seq = {"messages": "message_ids", "message_parts": "part_ids"}[table]
        row = conn.execute("SELECT lossless_take_ids(?, ?)", (seq, count)).fetchone()
        assert row is not None
        return int(row[0])

    def _place_messages(
        self,
        conn: Connection,
        conversation: Conversation,
        rows: Sequence[Sequence[Any]],
        parts: Sequence[Sequence[Any]],
        *,
        stamp: str,
        trigram: bool,
        version: int,
    ) -> Placement:
        # The server places the batch: one statement reserves the ids, seq and ordinals
        # (under the conversation's lock, taken before it), writes each message once with
        # its surroundings' words (an UPDATE after the insert would write every row and its
        # index entries twice), its parts and its context items. It is sent in the
        # transaction's pipeline with the rest of the append, so a turn waits for the
        # server once, at the commit; its answer is read when first asked for. The message
        # the batch follows gets its next in the same statement. (The trigram entries are
        # the server's own index, made on every write. The context's new version is set
        # there too.)
        assert isinstance(conn, PgConnection)
        conv_id, count = conversation.conversation_id, len(rows)
        params: list[Any] = [count, len(parts), len(parts), conv_id, conv_id, conv_id]
        params += [_column(rows, i) for i in range(len(_ROW_COLUMNS))]
        params += [conv_id, conv_id, conv_id]
        if parts:
            params += [_column(parts, i) for i in range(len(_PART_COLUMNS))]
        params += [conv_id, stamp, count, version, conv_id]
        placed = conn.execute(_placement(bool(parts)), params)
        return Placement(read=placed.fetchone)

    def _lock_conversation(self, conn: Connection, conversation_id: int) -> None:
        # A conversation's writes read its rows by their keys (its context items by
        # ordinal, its messages by seq), and a scan of the whole table is never the way
        # to them; but a table that keeps dead rows (autovacuum off: every context item a
        # summary replaced) and statistics that count few live ones make the planner read
        # context_items whole for a range of one conversation's ordinals (20-30 ms a
        # statement at 1M messages, in every turn that compacts). So sequential scans are
        # off for the rest of the transaction, set with the lock in the same statement; not
        # inside a caller's transaction, whose own statements are planned as it plans them.
        assert isinstance(conn, PgConnection)
        if conn.savepoints:
            conn.execute(_LOCK, (conversation_id,))
            return
        conn.execute(f"{_LOCK}, set_config('enable_seqscan', 'off', true)", (conversation_id,))

    def _lock_for_append(self, conn: Connection, conversation_id: int) -> None:
        # The append's statements are the same every turn: under plan_cache_mode auto the
        # server plans each once and keeps the plan, and each row's foreign-key checks (its
        # own prepared statements) are not planned again row by row as under the session's
        # force_custom_plan (set for searches). Set with the lock, in the same statement, for
        # the rest of the transaction. Not inside a caller's transaction, whose own
        # statements after the append must be planned as the session plans them. (JIT,
        # which would compile a plan for thousands of rows, is off for the whole session.)
        # Sequential scans are off as for any of the conversation's writes (above).
        assert isinstance(conn, PgConnection)
        if conn.savepoints:
            self._lock_conversation(conn, conversation_id)
            return
        conn.execute(
            f"{_LOCK}, set_config('plan_cache_mode', 'auto', true),"
            " set_config('enable_seqscan', 'off', true)",
            (conversation_id,),
        )

    @contextmanager
    def compaction_lock(self, conversation_id: int, *, wait: bool = True) -> Iterator[bool]:
        """A session advisory lock on a connection of its own, held while the conversation
        is compacted (summarizer calls included): processes on any host compacting one
        conversation would otherwise summarize the same stretch and all but one conflict.
        Released when the block ends, or by the server if the process dies."""
        if self._pool.closed:
            raise StoreError(f"the store {self.location} is closed; open it again")
        key = "hashtext(current_schema() || ':compaction'), (%s::bigint %% 2147483647)::int"
        with self._pool.connection() as raw:
            if wait:
                raw.execute(f"SELECT pg_advisory_lock({key})", (conversation_id,))
                held = True
            else:
                row = raw.execute(f"SELECT pg_try_advisory_lock({key})", (conversation_id,))
                held = bool(row.fetchone()[0])  # type: ignore[index]
            try:
                yield held
            finally:
                if held:
                    raw.execute(f"SELECT pg_advisory_unlock({key})", (conversation_id,))

    # --- search statistics ---------------------------------------------------------------

    def _index_terms(self, text: str) -> list[str]:
        """The distinct lexemes ``to_tsvector('english', ...)`` makes of *text*."""
        return [
            r[0]
            for r in self.fetchall(
                "SELECT lexeme FROM unnest(to_tsvector('english'::regconfig, ?))", (text,)
            )
        ]

    def _term_counts(self, table: str, terms: Sequence[str]) -> dict[str, int]:
        """Estimated from the statistics ``ANALYZE`` keeps of the word index (its most
        common lexemes and their shares): no scan at all, where counting a common word's
        rows takes a fifth of a second at a million messages. A lexeme outside the list is
        rarer than the rarest in it. Before the table is first analyzed (or with autovacuum
        off, never), each lexeme's rows are counted through the word index, up to
        :data:`COUNT_CAP` (a word held that often is common whatever the exact number)."""
        rows = self.fetchall(
            "SELECT st.most_common_elems::text::text[], st.most_common_elem_freqs,"
            " c.reltuples FROM pg_stats st"
            " JOIN pg_namespace n ON n.nspname = st.schemaname"
            " JOIN pg_class c ON c.relname = st.tablename AND c.relnamespace = n.oid"
            " WHERE st.schemaname = current_schema() AND st.tablename = ?"
            " AND st.attname = 'content_tsv'",
            (table,),
        )
        if not rows or rows[0][0] is None:
            return {
                term: int(
                    self.fetchall(
                        f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE content_tsv @@"
                        " plainto_tsquery('simple'::regconfig, ?) LIMIT ?) held",
                        (term, COUNT_CAP),
                    )[0][0]
                )
                for term in terms
            }
        elems, freqs, total = rows[0]
        total = max(float(total), 0.0)
        share = dict(zip(elems, freqs, strict=False))
        floor = min(freqs[: len(elems)], default=0.0) / 2
        return {t: int(share.get(t, floor) * total) for t in terms}

    # --- backup ----------------------------------------------------------------------------

    def backup_to(self, dest: Path) -> None:
        """PostgreSQL is backed up with its own tools, which copy a live database at one
        moment; this says how."""
        raise StoreError(
            f"lossless backup copies SQLite files; back up {self.location} with PostgreSQL's"
            f" own tools, for example: pg_dump --format=custom --file={dest} '<url>' while"
            " writers run (one consistent snapshot), and pg_restore --dbname '<url>' to put it"
            " back, or copy it to SQLite with: lossless migrate-store '<url>' backup.db"
        )

    def _index_messages(
        self, conn: Connection, first_id: int, last_id: int, *, trigram: bool
    ) -> None:
        # content_tsv is generated and the GIN indexes are kept by the server; what the store
        # keeps is each message's neighbours, for rows inserted without them (an append
        # makes them as it inserts, see _write_messages; a transplant does not): the new
        # ones', and the next of the message the rows follow in their conversation.
        # (Two statements: one UPDATE with an OR of the two sets makes the planner read every
        # message.)
        conn.execute(
            f"UPDATE messages m SET context_tsv = {CONTEXT_TSV}"
            " WHERE m.message_id BETWEEN ? AND ? AND m.context_tsv IS NULL",
            (first_id, last_id),
        )
        conn.execute(
            f"UPDATE messages m SET context_tsv = {CONTEXT_TSV}"
            " WHERE m.message_id IN (SELECT p.message_id FROM messages n JOIN messages p"
            "  ON p.conversation_id = n.conversation_id AND p.seq = n.seq - 1"
            " WHERE n.message_id BETWEEN ? AND ? AND p.message_id < ?)",
            (first_id, last_id, first_id),
        )

    def _words_changed(self, conn: Connection, conversation_id: int) -> None:
        conn.execute(
            f"UPDATE messages m SET context_tsv = {CONTEXT_TSV} WHERE m.conversation_id = ?",
            (conversation_id,),
        )

    def purge_freed(self) -> list[str]:
        """Rewrite the tables a forget wrote (``VACUUM FULL``: each table and its indexes
        are written anew and the old files deleted, so no table file keeps a deleted row
        version's bytes; each holds an exclusive lock on its table while it runs). The
        server's write-ahead log and its archives are the server's (docs/security.md)."""
        import psycopg

        try:
            with self._pool.connection() as raw:  # autocommit: VACUUM runs outside a transaction
                for table in _FORGET_WRITES:
                    raw.execute(f"VACUUM FULL {table}")
        except psycopg.Error as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"cannot scrub the space freed in {self.location}: {why}") from exc
        return [f"rewrote {', '.join(_FORGET_WRITES)} (VACUUM FULL; see docs/security.md)"]

    def _index_neighbours(self, conn: Connection, *, own: bool = False) -> None:
        """Every message's neighbours' words (with *own*, its own words too), from the stored
        text (after a bulk copy, a rebuild)."""
        words = f", content_tsv = {own_words('m.content')}" if own else ""
        conn.execute(f"UPDATE messages m SET context_tsv = {CONTEXT_TSV}{words}")

    def finish_bulk_copy(self) -> None:
        """Move the id generators past the copied ids (rows written with their ids as they
        were leave the sequences behind) and index each copied message's neighbours; the
        other search indexes are kept on every write."""
        with self.transaction() as conn:
            self._index_neighbours(conn)
            for sequence, table, column in _SEQUENCES:
                # setval(seq, max + 1, false): the next id handed out is max + 1 (1 if empty)
                conn.execute(
                    f"SELECT setval({sequence},"
                    f" (SELECT coalesce(max({column}), 0) + 1 FROM {table}), false)"
                )

    # --- integrity -------------------------------------------------------------------------

    _INDEXES = (
        "messages_fts",
        "messages_context_fts",
        "messages_trigram",
        "summaries_fts",
        "summaries_trigram",
    )

    def fts_problems(self) -> list[tuple[str, str, str]]:
        """The search indexes are PostgreSQL's own, kept on every write from the
        ``content_tsv`` columns (generated for summaries; for messages written by a batch
        insert, or by migration m020's trigger); what can go wrong is an index missing or left
        invalid, or a message's words (its own, its neighbours') not the stored text's."""
        rows = {
            r[0]: r[1]
            for r in self.fetchall(
                "SELECT c.relname, i.indisvalid FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = current_schema()"
            )
        }
        problems = []
        for name in self._INDEXES:
            if name not in rows:
                problems.append((name, "-", "the index is missing"))
            elif not rows[name]:
                problems.append((name, "-", "the index is not valid"))
        # A message's words are the store's to keep: each must be what the stored text (and
        # the text around it) makes (one pass over the messages each).
        for index, column, words, what in (
            ("messages_fts", "content_tsv", own_words("m.content"), "its stored text"),
            ("messages_context_fts", "context_tsv", CONTEXT_TSV, "the stored text around it"),
        ):
            for (message_id,) in self.fetchall(
                f"SELECT m.message_id FROM messages m WHERE m.{column} IS DISTINCT FROM"
                f" ({words}) ORDER BY m.message_id LIMIT 1000"
            ):
                problems.append((index, f"msg#{message_id}", f"the words do not match {what}"))
        return problems

    def rebuild_fts(self) -> None:
        """Rebuild the search indexes (recreating a missing one), and each message's
        neighbours in them from the stored text."""
        with self.transaction() as conn:
            (schema,) = conn.execute("SELECT current_schema()").fetchone() or ("public",)
            self._with_trigrams(conn, schema)
            self._index_neighbours(conn, own=True)
            conn.execute(
                "CREATE INDEX IF NOT EXISTS messages_fts ON messages USING gin (content_tsv)"
            )
            conn.execute(
                "CREATE INDEX IF NOT EXISTS messages_context_fts ON messages"
                " USING gin (context_tsv)"
            )
            conn.execute(
                "CREATE INDEX IF NOT EXISTS messages_trigram ON messages"
                " USING gin (content gin_trgm_ops)"
            )
            conn.execute(
                "CREATE INDEX IF NOT EXISTS summaries_fts ON summaries USING gin (content_tsv)"
            )
            conn.execute(
                "CREATE INDEX IF NOT EXISTS summaries_trigram ON summaries"
                " USING gin (content gin_trgm_ops)"
            )
            for name in self._INDEXES:
                conn.execute(f"REINDEX INDEX {name}")

    def foreign_key_problems(self) -> list[tuple[str, int, str, int]]:
        """Rows whose foreign keys point nowhere: (table, row number, parent table, key
        index). PostgreSQL checks every key on write, so this finds only what got past it
        (triggers disabled, a restore without constraints)."""
        keys = self.fetchall(
            "SELECT c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text,"
            " fa.attname FROM pg_constraint c"
            " JOIN pg_namespace n ON n.oid = c.connamespace"
            " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]"
            " JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[1]"
            " WHERE c.contype = 'f' AND n.nspname = current_schema()"
            " ORDER BY 1, 2"
        )
        problems: list[tuple[str, int, str, int]] = []
        for index, (table, column, parent, parent_column) in enumerate(keys):
            for (row,) in self.fetchall(
                f'SELECT row_number() OVER () FROM "{table}" t WHERE t."{column}" IS NOT NULL'
                f' AND NOT EXISTS (SELECT 1 FROM "{parent}" p'
                f' WHERE p."{parent_column}" = t."{column}") LIMIT 1000'
            ):
                problems.append((table, int(row), parent, index))
        return problems

    def database_size(self) -> dict[str, int]:
        """Bytes of this schema's tables with their indexes and TOAST data."""
        rows = self.fetchall(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        )
        return {"database": int(rows[0][0])}
