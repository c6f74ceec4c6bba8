"""The store's core: what a back end supplies (connections and transactions, id
allocation, the per-conversation write lock, the search indexes and the checks that differ
between engines) and the helpers every aggregate's SQL shares.

The aggregates (:mod:`.messages`, :mod:`.context`, :mod:`.summaries`, :mod:`.records`) are
written once, in the SQL that SQLite and PostgreSQL both accept (``?`` placeholders; the
PostgreSQL connection translates them), on top of :class:`StoreCore`.
"""

from __future__ import annotations

import secrets
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..codec import loads
from ..errors import StoreError
from ..model import ContextItem
from .connection import Connection, Row

__all__ = ["NO_LIMIT", "Placement", "StoreCore", "in_chunks"]

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
#: Batches at least this large leave the trigram index to :meth:`Store.catch_up_indexes`
#: (it costs more than everything else on ingest); smaller ones index it inline.
DEFER_TRIGRAM_AT = 64
_IN_CHUNK = 500  # host parameters per IN (...) list
#: "No limit" for a ``LIMIT ?`` both engines accept (SQLite's -1 is an error in PostgreSQL).
NO_LIMIT = 2**62
_TOOL_PARTS = frozenset({"tool_call", "tool_result"})
_MESSAGE_INSERT = (
    "INSERT INTO messages (message_id, conversation_id, seq, role, content, token_count,"
    " created_at, external_id, source_format, envelope, metadata, host_meta)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_PART_INSERT = (
    "INSERT INTO message_parts (part_id, message_id, session_id, ordinal, slot, part_type, text,"
    " tool_call_id, tool_name, tool_input, tool_output, is_error, raw)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: A conversation's last seq, last context ordinal and context version (0, -1 and its
#: version when it has none yet), as three columns of a SELECT; its id three times.
_POSITION = (
    "(SELECT coalesce(max(seq), 0) FROM messages WHERE conversation_id = ?),"
    " (SELECT coalesce(max(ordinal), -1) FROM context_items WHERE conversation_id = ?),"
    " (SELECT context_version FROM conversations WHERE conversation_id = ?)"
)
#: Conversations whose context a store keeps in memory (the most recently used).
CONTEXTS_KEPT = 256
#: Texts whose index terms a store remembers (see :meth:`StoreCore.index_terms`).
TERMS_KEPT = 4096
#: How long a term's document count is trusted (it moves slowly; it only steers the search).
TERM_CACHE_SECONDS = 300.0


def in_chunks(values: Sequence[T]) -> Iterator[tuple[list[T], str]]:
    """*values* in slices short enough for one ``IN (...)`` list, each with its ``?`` marks."""
    for start in range(0, len(values), _IN_CHUNK):
        chunk = list(values[start : start + _IN_CHUNK])
        yield chunk, ",".join("?" * len(chunk))


def _loads(text: str | None) -> Any:
    return None if text is None else loads(text)


def _row_id(value: int) -> int:
    """*value* if SQLite can hold it; else -1, an id no row has (not found, not a crash)."""
    return value if isinstance(value, int) and -(2**63) <= value < 2**63 else -1


#: A new context version for a conversation (parameters: the version, the conversation).
CONTEXT_VERSION_UPDATE = "UPDATE conversations SET context_version = ? WHERE conversation_id = ?"


def new_context_version() -> int:
    """A context version no earlier write of the conversation is likely to have set."""
    return secrets.randbits(62)


class Placement:
    """Where a batch of messages went: its first message id, and the conversation's last
    context ordinal and context version before it. Given at once, or read when
    first asked for (on PostgreSQL the batch is placed by the server, its answer coming
    back with the commit's)."""

    __slots__ = ("_read", "_values")

    def __init__(self, *values: int, read: Callable[[], Sequence[Any]] | None = None) -> None:
        self._values = tuple(values) if values else None
        self._read = read

    def _get(self) -> tuple[int, ...]:
        if self._values is None:
            assert self._read is not None
            self._values = tuple(int(v) for v in self._read())
        return self._values

    @property
    def first_id(self) -> int:
        return self._get()[0]

    @property
    def ord0(self) -> int:
        return self._get()[1]

    @property
    def version0(self) -> int:
        return self._get()[2]


class StoreCore(ABC):
    """What every aggregate of the store builds on; a back end fills in the hooks."""

    backend = ""

    _term_cache: dict[tuple[str, str], tuple[float, int]]

    #: The engine's own error classes (what a failed statement raises).
    errors: tuple[type[Exception], ...] = ()

    #: Where the store lives, for messages (a file path or a URL without its password).
    location = ""

    #: The file the store lives in (``None`` for a server's store).
    path: Path | None = None

    #: Where archive files are (:mod:`.archive`): set by the engine that opens the store; a
    #: store opened without one says so when it must read an archived message.
    archive_dir: Path | None = None

    @abstractmethod
    def close(self) -> None:
        """Close every connection the store opened."""

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Connection]:
        """A write transaction on a connection of this thread; nested calls are savepoints."""

    def pipelined_transaction(self) -> AbstractContextManager[Connection]:
        """A write transaction whose statements may go to the server together, each waited
        for only when its result is read (PostgreSQL's pipeline mode: a few round trips for a
        turn's writes). Single statements only: no scripts. Elsewhere :meth:`transaction`."""
        return self.transaction()

    @abstractmethod
    def read(self) -> AbstractContextManager[Connection]:
        """A consistent snapshot for several reads (joins an open transaction)."""

    @abstractmethod
    def migrate(self) -> list[str]:
        """Apply pending migrations, each in its own transaction; return the names applied."""

    @abstractmethod
    def _allocate_ids(self, conn: Connection, table: str, count: int) -> int:
        """The first of *count* consecutive fresh ids for ``messages`` or ``message_parts``."""

    @abstractmethod
    def _in_transaction(self) -> bool:
        """Whether this thread is inside a transaction or snapshot of this store."""

    def in_transaction(self) -> bool:
        """Whether this thread is inside a transaction or snapshot of this store (another
        thread's reads would not see what it wrote, nor share its snapshot)."""
        return self._in_transaction()

    # --- the contexts kept in memory (see :class:`.context.ContextStore`) ------------------

    #: Per conversation: the context version, its items, and whether this store's own
    #: append left them so (see :meth:`.context.ContextStore.context`, *as_written*).
    _contexts_kept: OrderedDict[int, tuple[int, list[ContextItem], bool]]
    _contexts_guard: threading.Lock

    def _kept_contexts(self) -> OrderedDict[int, tuple[int, list[ContextItem], bool]]:
        try:
            return self._contexts_kept
        except AttributeError:
            self._contexts_guard = threading.Lock()
            self._contexts_kept = OrderedDict()
            return self._contexts_kept

    def _keep_context(
        self, conversation_id: int, version: int, items: list[ContextItem], *, written: bool
    ) -> None:
        kept = self._kept_contexts()
        with self._contexts_guard:
            kept[conversation_id] = (version, items, written)
            kept.move_to_end(conversation_id)
            while len(kept) > CONTEXTS_KEPT:
                kept.popitem(last=False)

    def _kept_context(self, conversation_id: int) -> tuple[int, list[ContextItem], bool] | None:
        """The kept context of a conversation with a copy of its items, taken together (a
        write patches the kept list in place: :meth:`_patch_kept_context`)."""
        kept = self._kept_contexts()
        with self._contexts_guard:
            held = kept.get(conversation_id)
            return None if held is None else (held[0], list(held[1]), held[2])

    def _patch_kept_context(
        self,
        conversation_id: int,
        seen: int,
        version: int,
        patch: Callable[[list[ContextItem]], None],
        *,
        written: bool,
    ) -> None:
        """A committed write that found the conversation's context at version *seen* and
        left it at *version*: the kept list, when it is the one read at *seen*, is changed by
        *patch* in place, not copied (a compaction of a long backlog writes hundreds of
        summaries into a context of as many thousand items)."""
        kept = self._kept_contexts()
        with self._contexts_guard:
            held = kept.get(conversation_id)
            if held is None or held[0] != seen:
                return
            patch(held[1])
            kept[conversation_id] = (version, held[1], written)
            kept.move_to_end(conversation_id)

    def _context_changed(self, conn: Connection, conversation_id: int) -> int:
        """Mark the conversation's context as changed by this transaction (every write to
        ``context_items``, or to what its items weigh, calls it); the new version."""
        version = new_context_version()
        conn.execute(CONTEXT_VERSION_UPDATE, (version, conversation_id))
        self._context_left(conversation_id)
        return version

    def _context_left(self, conversation_id: int) -> None:
        """The kept list is no longer what this store's last write left (an append that
        commits marks its own list so again): for a write that set the version itself."""
        kept = self._kept_contexts()
        with self._contexts_guard:
            held = kept.get(conversation_id)
            if held is not None and held[2]:
                kept[conversation_id] = (held[0], held[1], False)

    def _lock_conversation(  # noqa: B027 - a default: a store with one writer needs none
        self, conn: Connection, conversation_id: int
    ) -> None:
        """Hold the conversation's write lock until the transaction ends (writers to one
        conversation never interleave, whatever process or host they run in)."""

    def _lock_for_append(self, conn: Connection, conversation_id: int) -> None:
        """The conversation's lock as an append takes it (a back end may set up the append's
        statements in the same call)."""
        self._lock_conversation(conn, conversation_id)

    @contextmanager
    def compaction_lock(self, conversation_id: int, *, wait: bool = True) -> Iterator[bool]:
        """Hold the right to compact a conversation for the block; yields whether it is
        held (with *wait* false, ``False`` at once when another process has it). Here a
        no-op: a store whose writers are one at a time needs none (a race that slips through
        ends in a ConflictError, retried)."""
        yield True

    def _index_messages(  # noqa: B027 - a default: the server may index on its own
        self, conn: Connection, first_id: int, last_id: int, *, trigram: bool
    ) -> None:
        """Index messages ``first_id..last_id`` for search (no-op where the engine does)."""

    def _words_changing(  # noqa: B027 - a default: the server may index on its own
        self, conn: Connection, conversation_id: int
    ) -> None:
        """The conversation's word-index entries are about to change (its title, which every
        message's entry carries): take them out while they are as they were made."""

    def _words_changed(  # noqa: B027 - a default: the server may index on its own
        self, conn: Connection, conversation_id: int
    ) -> None:
        """Make the conversation's word-index entries again, after :meth:`_words_changing`."""

    def _forgetting(  # noqa: B027 - a default: the server may index on its own
        self,
        conn: Connection,
        conversation_ids: Sequence[int],
        message_ids: Sequence[int],
        summary_ids: Sequence[str],
    ) -> None:
        """These messages' text (and these summaries') is about to be taken out: take their
        index entries, and those of their conversations' messages (which carry their
        neighbours' words), out while they are as they were made."""

    def _forgotten(
        self,
        conn: Connection,
        conversation_ids: Sequence[int],
        message_ids: Sequence[int],
        summary_ids: Sequence[str],
    ) -> None:
        """Make the entries :meth:`_forgetting` took out again, from what is stored now."""
        for conv in conversation_ids:
            self._words_changed(conn, conv)

    def purge_freed(self) -> list[str]:
        """After a forget: make the space the deleted text held unreadable where the back end
        allows; returns what was done, in words."""
        return []

    def _index_summaries(  # noqa: B027 - a default: the server may index on its own
        self, conn: Connection, summary_ids: Sequence[str]
    ) -> None:
        """Index these summaries for search (no-op where the engine does)."""

    def pending_index_rows(self) -> int:
        """Messages not yet in every search index."""
        return 0

    def catch_up_indexes(
        self,
        batch: int = 50_000,
        progress: Callable[[int, int], None] | None = None,
        *,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Index what large batches left out; returns rows indexed. *progress* is called
        with (rows done, rows behind) after each transaction, *stop* asked before each."""
        return 0

    def catch_up_soon(self) -> None:
        """Index what a large batch left out, after the call where the store can (SQLite:
        its own thread does), at once where it cannot."""
        self.catch_up_indexes()

    def merge_indexes(
        self, *, seconds: float | None = None, stop: Callable[[], bool] | None = None
    ) -> int:
        """Merge the full-text indexes' segments that are due; the steps taken (none where
        the server keeps its indexes itself)."""
        return 0

    def index_terms(self, text: str) -> list[str]:
        """The distinct terms the word index makes of *text* (stemmed, folded). The same text
        always gives the same terms: the store remembers the last :data:`TERMS_KEPT` texts'
        (a search asks for a word's terms several times, and each asking is several
        statements)."""
        kept: dict[str, list[str]] = self.__dict__.setdefault("_terms_kept", {})
        terms = kept.get(text)
        if terms is None:
            terms = self._index_terms(text)
            if len(kept) >= TERMS_KEPT:
                kept.clear()
            kept[text] = terms
        return list(terms)

    @abstractmethod
    def _index_terms(self, text: str) -> list[str]:
        """:meth:`index_terms`, asked of the engine's own tokenizer."""

    @abstractmethod
    def _term_counts(self, table: str, terms: Sequence[str]) -> dict[str, int]:
        """How many rows of *table* hold each of *terms* (as :meth:`index_terms` makes them)."""

    def backup_to(self, dest: Path) -> None:
        """Copy the whole store to *dest* while writers go on."""
        raise StoreError(f"the {self.backend} back end has no built-in backup")

    @abstractmethod
    def finish_bulk_copy(self) -> None:
        """Make the store ready for writers and searches after rows were written into it
        with their ids as they were (``migrate-store``'s copy): the id generators continue
        after the largest id copied, and the search indexes hold the copied text."""

    @abstractmethod
    def fts_problems(self) -> list[tuple[str, str, str]]:
        """Search-index rows that do not match their sources: (index, id, problem)."""

    def fts_unchecked(self) -> str | None:
        """Why part of :meth:`fts_problems` cannot run here (None: every check runs)."""
        return None

    @abstractmethod
    def rebuild_fts(self) -> None:
        """Rebuild every search index from its source table."""

    @abstractmethod
    def foreign_key_problems(self) -> list[tuple[str, int, str, int]]:
        """Rows whose foreign keys point nowhere: (table, row, parent table, fk index)."""

    @abstractmethod
    def database_size(self) -> dict[str, int]:
        """Bytes the store takes (``database``, and ``wal`` where there is one)."""

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run a read query (used by the integrity checks and reports)."""
        with self.read() as conn:
            return list(conn.execute(sql, params).fetchall())

    def fetch_in_order(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """A read that walks an index in its ``ORDER BY``'s order and stops at its ``LIMIT``
        (a conversation's messages by ``seq``, the first or latest few that pass a filter),
        whatever the planner's statistics say: the work follows the limit, not the
        conversation's length. SQLite's planner walks the index by itself."""
        return self.fetchall(sql, params)

    def row_count(self, table: str) -> int:
        """Rows in *table*, one of the store's own tables (named, never user text)."""
        if not table.isidentifier():
            raise ValueError(f"not a table name: {table!r}")
        return int(self.fetchall(f"SELECT count(*) FROM {table}")[0][0])

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this database, in order."""
        return [r[0] for r in self.fetchall("SELECT name FROM migrations ORDER BY name")]
