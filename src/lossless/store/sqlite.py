"""The embedded SQLite store (the default back end).

One connection per thread (WAL lets readers run beside the writer), ``BEGIN IMMEDIATE`` for
every write so two processes never interleave a batch (which also makes it the
per-conversation lock), nested transactions as savepoints, foreign keys on and a busy
timeout. Full-text rows are filled in bulk after each batch.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

from ..codec import content_hash
from ..errors import StoreError
from ..model import Checkpoint
from ..timestamps import format_ts, now
from .base import Store
from .connection import Connection
from .core import DEFER_TRIGRAM_AT
from .merge_pace import BURST_SECONDS, MergePace
from .migrations import MIGRATIONS, give_back_free_pages
from .sqlite_files import (
    MIGRATIONS_TABLE,
    PROGRESS_STEPS,
    _create_private,
    _damage,
    _write_error,
    copy_database,
    interrupted,
    let_signals_in,
    not_sqlite,
)
from .sqlite_indexes import FTS_TABLES, SQLiteIndexes
from .sqlite_search import SQLiteSearch
from .writer_queue import WriterQueue, busy_hint

logger = logging.getLogger(__name__)

__all__ = ["Checkpoint", "SQLiteStore", "content_hash", "copy_database", "standalone"]

BUSY_TIMEOUT_MS = 30_000
#: Pages of full-text index one merge step writes (one short write transaction each; FTS5
#: merges in units of 64 pages itself, and a step's cost is mostly finding its place).
MERGE_PAGES = 64
#: The index merging waits until no write has committed for this long (a host's turns come
#: seconds apart, so it runs between them; a store written without pause still merges where
#: a level holds 16 segments, inside the write, as FTS5 does).
MERGE_IDLE_SECONDS = BURST_SECONDS
#: Messages one transaction of the store's thread indexes for :meth:`SQLiteStore.catch_up_soon`
#: (about a tenth of a second of the write lock on a 2-core machine).
CATCH_UP_STEP = 5_000
#: More messages than this waiting for those entries, the caller of ``catch_up_soon`` makes
#: them itself (batches that come faster than the thread makes their entries).
CATCH_UP_BEHIND_MAX = 4 * CATCH_UP_STEP
#: How long closing a store spends at most on the merging still due (a process that writes
#: once and exits, as a host's hook does, merges there).
CLOSE_MERGE_SECONDS = 0.05
#: A WAL of this many frames (pages) after the store's own checkpoint is copied in whole in
#: the writers' turn, so that the next write starts it again (see SQLiteStore._checkpoint).
WAL_RESTART_FRAMES = 8192
#: ... once a copy beside the writers leaves at most this many frames and was quick (only a few
#: turns' frames came meanwhile: the writers wait for those), trying at most WAL_RESTART_TRIES
#: copies.
WAL_RESTART_LEFT = 64
WAL_RESTART_TRIES = 8
#: A copy that took at most this long left only a few turns' frames behind it (and a writer
#: that held the writers' turn for at most this long wrote only a few).
WAL_QUICK = 0.003
#: A WAL larger than this is checkpointed and truncated after the commit that grew it.
WAL_LIMIT_BYTES = 64 * 1024 * 1024
#: How long that checkpoint waits for readers of older snapshots, holding the writers' turn
#: (the next commit tries again): readers that never pause must not stall every writer.
WAL_LIMIT_WAIT_MS = 1_000
#: How long an import's end (``merge_indexes`` run to the end) keeps trying that checkpoint,
#: a tenth of a second apart: another checkpoint running (the store's thread copying the log
#: in, seconds on a loaded machine) makes it fail at once, without waiting.
IMPORT_END_WAL_SECONDS = 3.0
#: How often the store's thread checkpoints the WAL while writes go on (a passive checkpoint
#: runs beside the writer; SQLite's automatic one, inside the commit that passes its size, is
#: off).
CHECKPOINT_SECONDS = 0.1


#: The stores of this process whose thread was given a large batch's entries to make
#: (:meth:`SQLiteStore.catch_up_soon`) and that are not closed yet: closed at the
#: interpreter's exit, which makes those entries (else the next import would).
_UNCLOSED: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    for store in list(_UNCLOSED):
        if store._pid == os.getpid():  # (a forked child leaves its parent's alone)
            with contextlib.suppress(Exception):  # best effort: the process is ending
                store.close()


class SQLiteStore(SQLiteIndexes, SQLiteSearch, Store):
    """Messages, parts, summaries, context items and indexes in one SQLite file."""

    backend = "sqlite"
    errors = (sqlite3.Error,)
    path: Path

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._wal_path = f"{self.path}-wal"
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        #: Set as close() begins: no index thread is started after that (a commit from
        #: another thread while the store closes would start one the close never joins).
        self._closing = False
        self._term_cache: dict[tuple[str, str], tuple[float, int]] = {}
        # Index upkeep off the writer's path (see merge_indexes): woken by each commit.
        self._merge_due = threading.Event()
        self._merger: threading.Thread | None = None
        self._last_commit = 0.0
        self._pace = MergePace()  # which merge steps fit in the pauses between writes
        self._held_back = False  # the thread's last merging left a step for a longer pause
        self._checkpointed = 0.0
        self._unmerged = False  # commits since the thread last merged (close() finishes)
        # A large batch's trigram entries, made by the store's thread
        # (catch_up_soon): asked for and not yet taken on; set when none wait for it.
        self._catch_up_wanted = False
        self._caught_up = threading.Event()
        self._caught_up.set()
        self._asked_catch_up = False  # ever, in this process: closing finishes the rest
        self._pid = os.getpid()
        self._waiting_guard = threading.Lock()
        self._writers_waiting = 0
        memory = str(self.path) == ":memory:"
        if not memory and (wrong := not_sqlite(self.path)) is not None:
            raise wrong  # before anything is made beside it
        self._writers = WriterQueue(None if memory else Path(f"{self.path}-writers"))
        if not memory:
            _create_private(self.path)
        self.migrate()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"the store {self.path} is closed; open it again")
            try:
                conn = sqlite3.connect(
                    str(self.path),
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                )
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
                    # A new store gives the pages its indexes' merges free back to the
                    # file system as an import ends (merge_indexes); a mode set only on an
                    # empty file, before its journal mode.
                    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute("PRAGMA cache_size = -65536")  # 64 MiB: batches touch many pages
                # No checkpoint inside a commit: the store's thread checkpoints beside the
                # writers (see _checkpoint), and closing does what is left.
                conn.execute("PRAGMA wal_autocheckpoint = 0")
                if threading.current_thread() is threading.main_thread():
                    # (Only the main thread runs signal handlers: elsewhere the calls
                    # would only wait for the interpreter's lock, and slow the statement.)
                    conn.set_progress_handler(let_signals_in, PROGRESS_STEPS)
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                # (The first statement reads the schema: damaged names in it make SQLite's
                # own error text undecodable, a UnicodeDecodeError that _damage knows.)
                damage = _damage(self.path, exc)
                if damage is not None:
                    raise damage from exc
                raise StoreError(
                    f"cannot open the database {self.path}: {exc}; check the path and its "
                    f"permissions"
                ) from exc
            self._local.conn = conn
            self._local.depth = 0
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        """Merge what is due in the full-text indexes (for at most
        :data:`CLOSE_MERGE_SECONDS`), then close every connection this store opened (in any
        thread)."""
        with self._lock:
            self._closing = True
            merger = self._merger
        if merger is not None:
            self._merger = None
            self._merge_due.set()
            merger.join()
            try:
                if self._asked_catch_up:
                    with contextlib.suppress(StoreError, sqlite3.Error):
                        self.catch_up_indexes()  # what the thread had not made yet
                    self._caught_up.set()
                if self._unmerged:
                    with contextlib.suppress(StoreError, sqlite3.Error):
                        self._catch_up_turns()
                        self.merge_indexes(seconds=CLOSE_MERGE_SECONDS)
                with contextlib.suppress(StoreError, sqlite3.Error):
                    self._checkpoint(force=True)
            finally:  # (a Ctrl-C meanwhile: the rest waits for the next import)
                self._finish_close()
        else:
            self._finish_close()

    def _finish_close(self) -> None:
        _UNCLOSED.discard(self)
        with self._lock:
            self._closed = True
            for conn in self._connections:
                with contextlib.suppress(sqlite3.ProgrammingError):  # closed in its thread
                    conn.close()
            self._connections.clear()
        self._local = threading.local()

    def _in_transaction(self) -> bool:
        return int(getattr(self._local, "depth", 0)) > 0

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``, once this writer's turn in the
        :class:`WriterQueue` has come); nested calls become savepoints."""
        with self._transaction(self._conn()) as conn:
            yield conn

    @contextmanager
    def _writer_turn(self) -> Iterator[None]:
        """This writer's turn in the queue; while it waits, the index merging (which
        yields to a waiting writer between its steps) knows."""
        with self._waiting_guard:
            self._writers_waiting += 1
        waiting = True
        try:
            with self._writers.turn():
                with self._waiting_guard:
                    self._writers_waiting -= 1
                waiting = False
                yield
        finally:
            if waiting:
                with self._waiting_guard:
                    self._writers_waiting -= 1

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        depth: int = self._local.depth
        if depth > 0:
            conn.execute(f"SAVEPOINT sp{depth}")
            self._local.depth = depth + 1
            try:
                yield conn
            except BaseException:
                self._local.depth = depth
                conn.execute(f"ROLLBACK TO sp{depth}")
                conn.execute(f"RELEASE sp{depth}")
                raise
            self._local.depth = depth
            conn.execute(f"RELEASE sp{depth}")
            return
        with self._writer_turn():
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(
                    f"cannot start a write on {self.path}: {exc}{busy_hint(str(exc))}"
                ) from exc
            self._local.depth = 1
            try:
                yield conn
            except BaseException as exc:
                self._local.depth = 0
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if stop := interrupted(exc):
                    raise stop from exc
                damage = _damage(self.path, exc)
                if damage is not None:
                    raise damage from exc
                if isinstance(exc, sqlite3.OperationalError):
                    raise _write_error(self.path, exc) from exc
                raise
            self._local.depth = 0
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                damage = _damage(self.path, exc)  # a damaged page met as the commit writes
                if damage is not None:
                    raise damage from exc
                if isinstance(exc, sqlite3.OperationalError):
                    raise _write_error(self.path, exc) from exc
                raise
            self._limit_wal(conn)
            if not getattr(self._local, "merging", False):
                self._last_commit = time.monotonic()
                self._pace.wrote(self._last_commit)
                self._wake_merger()

    # --- index upkeep ---------------------------------------------------------------------

    def _wake_merger(self) -> None:
        """After a commit: the full-text indexes may have segments to merge; a thread of the
        store's own does it, so no writer waits for a merge inside its transaction (the
        indexes' automatic merging is off, migration m019)."""
        self._unmerged = True
        self._merge_due.set()
        if self._merger is None and not self._closing and str(self.path) != ":memory:":
            with self._lock:
                if self._merger is None and not self._closing:
                    self._merger = threading.Thread(
                        target=self._merge_loop, name="lossless-index-merge", daemon=True
                    )
                    self._merger.start()

    def _merge_loop(self) -> None:
        me = threading.current_thread()
        retry: float | None = None  # merging held back: look again when the writes stop
        while True:
            if self._merger is not me:
                return  # closing (looked at before waiting: a signal cleared is not missed)
            self._merge_due.wait(retry)
            # Cleared before looking: a close() that comes after this sets it again, and its
            # signal is never lost (cleared after the look, the thread could wait for ever).
            self._merge_due.clear()
            if self._merger is not me:
                return  # closing: close() merges what is left, bounded
            retry = None
            try:
                # A pause in the writes; meanwhile a large batch's entries are made (they
                # wait for no pause) and the WAL is checkpointed beside the writers.
                while self._merger is me:
                    self._catch_up_batches(stop=lambda: self._merger is not me)
                    self._checkpoint()
                    quiet = time.monotonic() - self._last_commit
                    if quiet >= MERGE_IDLE_SECONDS:
                        break
                    time.sleep(MERGE_IDLE_SECONDS - quiet)
                self._unmerged = False  # set again by any commit from here on
                self._catch_up_turns()
                self.merge_indexes(stop=lambda: self._merger is not me)
                if self._merger is not me or self._held_back:
                    self._unmerged = True  # what is left: close() or the next look merges it
                if self._held_back:
                    retry = self._pace.idle_in(time.monotonic())
                self._checkpoint()
            except (StoreError, sqlite3.Error):  # best effort: the next commit tries again
                logger.debug("index upkeep on %s failed", self.path, exc_info=True)

    def catch_up_soon(self) -> None:
        """Have the store's thread make the entries a large batch left (the trigram ones,
        :meth:`catch_up_indexes`) at once, beside what the caller does next, in transactions
        of :data:`CATCH_UP_STEP` messages. Until they are made, a substring search reads
        those rows itself; closing the store makes what is left."""
        if str(self.path) == ":memory:" or self._closing:
            self.catch_up_indexes()
            return
        ((top, upto),) = self.fetchall(
            "SELECT (SELECT coalesce(max(message_id), 0) FROM messages), upto"
            " FROM index_state WHERE name = 'messages_trigram'"
        )
        if top - upto > CATCH_UP_BEHIND_MAX:
            # Batches that come faster than their entries are made (an import through
            # ingest_batch): the caller makes them, and waits, so the backlog stays bounded.
            self.catch_up_indexes()
            return
        with self._lock:
            self._catch_up_wanted = True
            self._asked_catch_up = True
            self._caught_up.clear()
        _UNCLOSED.add(self)  # a process that exits without closing the store makes them too
        self._wake_merger()
        if self._merger is None:  # no thread after all (the store closing meanwhile)
            self.catch_up_indexes()
            self._caught_up.set()

    def _catch_up_batches(self, stop: Callable[[], bool]) -> None:
        """The store's thread's part of :meth:`catch_up_soon`."""
        with self._lock:
            if not self._catch_up_wanted:
                return
            self._catch_up_wanted = False
        self._local.merging = True  # upkeep, not a write of its own: the pause goes on
        try:
            self.catch_up_indexes(batch=CATCH_UP_STEP, stop=stop)
        finally:
            self._local.merging = False
            with self._lock:
                if not self._catch_up_wanted:
                    self._caught_up.set()  # (failed: a search reads the rows itself)

    def _catch_up_turns(self) -> None:
        """The trigram entries the last few small batches left waiting (fewer than
        :data:`CATCH_UP_AT` messages), made in a pause of the writes (or as the store
        closes), so a substring search then finds them through the index.
        What a large batch left is not taken on here: that is :meth:`catch_up_indexes`'s,
        in transactions of its own size."""
        waiting = (
            "SELECT (SELECT coalesce(max(message_id), 0) FROM messages) - upto, upto"
            " FROM index_state WHERE name = 'messages_trigram'"
        )
        (behind, _), *_ = self.fetchall(waiting)
        if not 0 < behind < DEFER_TRIGRAM_AT:
            return
        self._local.merging = True  # not a write of its own: the pause goes on
        try:
            with self._transaction(self._conn()) as conn:
                behind, upto = conn.execute(waiting).fetchone()
                if 0 < behind < DEFER_TRIGRAM_AT:
                    self._catch_up_to(conn, upto, upto + behind)
        finally:
            self._local.merging = False

    def _checkpoint(self, *, force: bool = False) -> None:
        """Copy the WAL into the database beside the writers (a passive checkpoint: it waits
        for no one), at most every :data:`CHECKPOINT_SECONDS` unless *force*. Done often, the
        next write starts the WAL again from its beginning, so it stays small; a WAL that
        readers keep from starting again is truncated after a commit (:meth:`_limit_wal`).

        Writes that never pause (turns back to back) append while the copy runs, so it never
        ends with nothing left and the WAL would never start again: it would grow to
        :data:`WAL_LIMIT_BYTES` and be truncated inside some writer's commit (tens of ms at
        once). Once it holds :data:`WAL_RESTART_FRAMES`, the few frames written during the
        copy are copied again in the writers' turn, so the next write starts it again."""
        if not force and time.monotonic() - self._checkpointed < CHECKPOINT_SECONDS:
            return
        self._checkpointed = time.monotonic()
        conn = self._conn()
        for _ in range(WAL_RESTART_TRIES):  # a copy, then another while writes came in it
            began = time.monotonic()
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if busy or frames < WAL_RESTART_FRAMES or self._in_transaction():
                return
            # Copied quickly and nearly whole: few frames came during the copy, and the writers
            # wait only for those (a long copy is followed by another beside them).
            quick = time.monotonic() - began <= WAL_QUICK
            if frames - copied <= WAL_RESTART_LEFT and quick and self._finish_checkpoint(conn):
                return

    def _finish_checkpoint(self, conn: sqlite3.Connection) -> bool:
        """Copy the frames the last checkpoint left in the writers' turn (a writer that comes
        meanwhile waits for this copy: its two syncs, a few ms), so the next write starts the
        WAL again. Not when the turn was long in coming: its holder wrote for that long, and
        those frames are copied beside the writers first (``False``)."""
        began = time.monotonic()
        with self._writer_turn():
            if time.monotonic() - began > WAL_QUICK:
                return False
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return True

    def merge_indexes(
        self, *, seconds: float | None = None, stop: Callable[[], bool] | None = None
    ) -> int:
        """Merge the full-text indexes' segments where a level holds several (FTS5's
        ``merge`` command, :data:`MERGE_PAGES` pages per step, each step its own short
        write transaction, so writers interleave); until nothing is left to merge, *seconds*
        have passed or *stop* says so. With *stop* (the store's thread), it also gives way to
        a waiting writer and to writes going on, and begins no step the pause between writes
        should not hold (:class:`~lossless.store.merge_pace.MergePace`; ``_held_back`` says
        whether one was left for later). The steps that did work."""
        deadline = None if seconds is None else time.monotonic() + seconds
        steps = 0
        self._held_back = False
        self._local.merging = True
        try:
            for table in FTS_TABLES:
                while not (stop is not None and stop()) and (
                    deadline is None or time.monotonic() < deadline
                ):
                    if stop is not None and (
                        self._writers_waiting
                        or time.monotonic() - self._last_commit < MERGE_IDLE_SECONDS
                    ):
                        break  # writers are back: wait for the next quiet moment
                    if stop is not None and not self._pace.may_begin(table, time.monotonic()):
                        self._held_back = True  # the next write is due before it would end
                        break
                    began = time.monotonic()
                    with self._transaction(self._conn()) as conn:  # not the public one
                        before = conn.total_changes
                        conn.execute(
                            f"INSERT INTO {table} ({table}, rank) VALUES ('merge', ?)",
                            (MERGE_PAGES,),
                        )
                        worked = conn.total_changes - before >= 2
                    if not worked:
                        break
                    self._pace.stepped(table, time.monotonic() - began)
                    steps += 1
                    if stop is not None:
                        self._checkpoint()
        finally:
            self._local.merging = False
        if stop is None and deadline is None and str(self.path) != ":memory:":
            # Everything merged, as a large import ends (Engine.finish_indexes): the WAL its
            # writes and merges left is copied in and reset here, not by the store's thread
            # beside the turns that come next (a stall of tens of ms in one of them). The
            # pages the merges freed go back to the file system first (a store made before
            # this kept them, for the next writes).
            with self._transaction(self._conn()) as conn:
                give_back_free_pages(conn)
            # An import's end may wait longer than a turn would for the readers of older
            # snapshots (the store's own thread among them) to move on.
            self._truncate_wal(self._conn(), seconds=IMPORT_END_WAL_SECONDS)
        return steps

    def _limit_wal(self, conn: sqlite3.Connection) -> None:
        """Checkpoint and truncate the WAL once it passes :data:`WAL_LIMIT_BYTES`.

        The automatic checkpoints are passive: while readers keep starting one after another
        there is always one on an older snapshot, the WAL is never reset, and it grows with
        every write. This one waits (through the busy handler, at most
        :data:`WAL_LIMIT_WAIT_MS`) for the readers of older snapshots to finish — a read
        transaction is milliseconds — then resets the file. A failure only leaves the WAL as
        it was, for the next commit to try again."""
        try:
            size = os.path.getsize(self._wal_path)
        except OSError:
            return
        if size > WAL_LIMIT_BYTES:
            self._truncate_wal(conn)

    def _truncate_wal(self, conn: sqlite3.Connection, seconds: float = 0.0) -> None:
        """Copy the whole WAL into the database and reset the file, waiting at most
        :data:`WAL_LIMIT_WAIT_MS` for readers of older snapshots; tried again a tenth of a
        second apart for *seconds* (a failure leaves it as it was)."""
        deadline = time.monotonic() + seconds
        conn.execute(f"PRAGMA busy_timeout = {WAL_LIMIT_WAIT_MS}")
        try:
            while True:
                with contextlib.suppress(sqlite3.OperationalError):
                    (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    if not busy:
                        return
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.1)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several reads (joins an open transaction)."""
        conn = self._conn()
        if self._local.depth > 0:
            yield conn
            return
        conn.execute("BEGIN")
        self._local.depth = 1
        try:
            yield conn
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            if stop := interrupted(exc):
                raise stop from exc
            damage = _damage(self.path, exc)
            if damage is None:
                raise
            raise damage from exc
        finally:
            self._local.depth = 0
            if conn.in_transaction:
                try:
                    conn.execute("COMMIT")
                except sqlite3.DatabaseError as exc:
                    damage = _damage(self.path, exc)
                    if damage is None:
                        raise
                    raise damage from exc

    def migrate(self) -> list[str]:
        """Apply pending migrations, each in its own transaction; return the names applied."""
        conn = self._conn()
        try:
            conn.execute(MIGRATIONS_TABLE)
            # An up-to-date store takes no write lock: opening never waits for another writer.
            done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
        except sqlite3.DatabaseError as exc:
            damage = _damage(self.path, exc)
            if damage is None:
                raise
            raise damage from exc
        applied: list[str] = []
        for name, fn in MIGRATIONS:
            if name in done:
                continue
            with self.transaction():  # checked again inside: another process may have won
                row = conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone()
                if row is not None:
                    continue
                fn(conn)
                conn.execute(
                    "INSERT INTO migrations (name, applied_at) VALUES (?, ?)",
                    (name, format_ts(now())),
                )
                applied.append(name)
        return applied

    def _allocate_ids(self, conn: Connection, table: str, count: int) -> int:
        """The next ids after the largest stored: the write lock is held (``BEGIN
        IMMEDIATE``), so no one else allocates before this transaction ends."""
        key = {"messages": "message_id", "message_parts": "part_id"}[table]
        return int(conn.execute(f"SELECT coalesce(max({key}), 0) + 1 FROM {table}").fetchone()[0])

    def _index_terms(self, text: str) -> list[str]:
        """The distinct terms the porter full-text index makes of *text* (stemmed, folded),
        in no particular order: a scratch FTS table in this connection's temp database."""
        conn = self._conn()
        if not getattr(self._local, "stemmer", False):
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.lossless_stemmer"
                " USING fts5(x, tokenize='porter unicode61')"
            )
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.lossless_stemmer_vocab"
                " USING fts5vocab(temp, lossless_stemmer, 'row')"
            )
            self._local.stemmer = True
        with self.read():
            conn.execute("DELETE FROM temp.lossless_stemmer")
            conn.execute("INSERT INTO temp.lossless_stemmer (x) VALUES (?)", (text,))
            terms = [r[0] for r in conn.execute("SELECT term FROM temp.lossless_stemmer_vocab")]
            conn.execute("DELETE FROM temp.lossless_stemmer")
        return terms

    def _term_counts(self, table: str, terms: Sequence[str]) -> dict[str, int]:
        """Read from the porter index's vocabulary (an fts5vocab table in temp)."""
        conn = self._conn()
        if not getattr(self._local, f"vocab_{table}", False):
            conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.lossless_{table}_vocab"
                f" USING fts5vocab(main, {table}_fts, 'row')"
            )
            setattr(self._local, f"vocab_{table}", True)
        out = {}
        for term in terms:
            row = conn.execute(
                f"SELECT doc FROM temp.lossless_{table}_vocab WHERE term = ?", (term,)
            ).fetchone()
            out[term] = int(row[0]) if row else 0
        return out

    def backup_to(self, dest: Path) -> None:
        """Copy the whole database to *dest* (created owner-only) while writers go on.

        The SQLite backup API copies every page in one step under one read snapshot: in WAL
        mode that lets writers commit meanwhile (their changes are simply not in the copy),
        and the copy is the database at one moment, whole. The step runs on a thread of its
        own so that Ctrl-C stops the caller at once (the step itself cannot be broken into
        pieces without starting again after each writer's commit)."""
        _create_private(dest)
        failed: list[BaseException] = []

        def copy() -> None:
            try:
                with (
                    closing(sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000)) as a,
                    closing(sqlite3.connect(str(dest))) as b,
                ):
                    a.backup(b)
            except Exception as exc:  # noqa: BLE001 - raised again in the caller's thread
                failed.append(exc)

        worker = threading.Thread(target=copy, name="lossless-backup", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
        if failed:
            if isinstance(failed[0], sqlite3.Error):
                raise StoreError(f"cannot back up {self.path} to {dest}: {failed[0]}") from failed[
                    0
                ]
            raise failed[0]

    def finish_bulk_copy(self) -> None:
        """Build the full-text indexes from the copied text (ids are allocated from the
        largest stored, so they need nothing)."""
        self.rebuild_fts()

    def free_bytes(self) -> int | None:
        """Bytes of the database file's free pages (reused by the next writes; VACUUM gives
        them back to the disk)."""
        ((pages,),) = self.fetchall("PRAGMA freelist_count")
        ((page,),) = self.fetchall("PRAGMA page_size")
        return int(pages) * int(page)

    def database_size(self) -> dict[str, int]:
        """Bytes on disk of the database and its WAL."""
        sizes = {}
        for suffix, label in (("", "database"), ("-wal", "wal")):
            try:
                sizes[label] = os.path.getsize(f"{self.path}{suffix}")
            except OSError:
                sizes[label] = 0
        return sizes


@contextmanager
def standalone(path: Path) -> Iterator[SQLiteStore]:
    """The store in the SQLite file at *path* (opened, so migrated as needed) for the block;
    when the block ends the store is closed and, unless it raised, the file is left one
    self-contained file: rollback journal, no write-ahead log beside it (what a backup, or
    a file about to be renamed into place, should be)."""
    store = SQLiteStore(path)
    try:
        yield store
    finally:
        store.close()
        Path(f"{path}-writers").unlink(missing_ok=True)  # no one else writes it
    try:
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot leave {path} as one self-contained file: {exc}") from exc
