"""What every operation of lossless works with, in one object.

The operations — ingest, compaction, assembly, recall, session summaries, resume, transplant,
maintenance, doctor — are functions (or small classes) that take a :class:`Services`: the
store, the configuration, the token counter, the summarizer, where large files live, the
clock, the per-conversation locks, the one background queue, and the redaction of secrets.
None of them imports the :class:`~lossless.engine.Engine`; the engine is the façade that
builds a ``Services`` and hands it to them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from .config import Config
from .redact import Redactor, Sealer
from .store import Store
from .summarize import Summarizer
from .timestamps import now
from .tokens import TokenCounter

__all__ = ["BackgroundQueue", "BoundedCache", "ConversationLocks", "Services"]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ConversationLocks:
    """One re-entrant lock per conversation, created on demand: serializes the mutations of
    a conversation within the process and leaves others free."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[int, threading.RLock] = {}

    def get(self, conversation_id: int) -> threading.RLock:
        """The lock of *conversation_id*."""
        with self._guard:
            lock = self._locks.get(conversation_id)
            if lock is None:
                lock = self._locks[conversation_id] = threading.RLock()
            return lock

    @contextmanager
    def hold(self, *conversation_ids: int) -> Iterator[None]:
        """Hold the conversations' locks, taken in id order (two callers never deadlock)."""
        with ExitStack() as stack:
            for conversation_id in sorted(set(conversation_ids)):
                stack.enter_context(self.get(conversation_id))
            yield


class BoundedCache(Generic[K, V]):
    """A small thread-safe cache that forgets its oldest entries past *size*."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._guard = threading.Lock()
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value of *key*, or ``None``."""
        with self._guard:
            return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        """Keep *value* under *key*, forgetting the oldest entries past the size."""
        with self._guard:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)


#: How many rounds of follow-up work a closing queue runs (each round's runs may ask for more).
LATE_ROUNDS = 16


class BackgroundQueue:
    """The one worker pool for work done off a host's turn (compaction, session summaries).

    Work is keyed (``("compact", 12)``): one run per key at a time. A key submitted while its
    run is going is dropped, or, with *again*, run once more when that run ends (the second
    run covers everything the first did not). Runs that fail are logged by the worker.
    """

    def __init__(self, workers: int = 2, name: str = "lossless-background") -> None:
        self._workers = workers
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._guard = threading.Lock()
        self._pending: dict[Hashable, Future[Any]] = {}
        self._again: set[Hashable] = set()
        #: While :meth:`shutdown` drains the queue: what its last runs asked for (a
        #: compaction's follow-up work), run by it after them rather than dropped.
        self._closing = False
        self._late: dict[Hashable, Callable[[], Any]] = {}
        #: Per kind of work (a key's first element): runs ended, seconds they took, failures.
        self._runs: dict[str, list[float]] = {}

    def submit(self, key: Hashable, work: Callable[[], Any], *, again: bool = False) -> bool:
        """Queue *work* under *key*; whether it was queued (not already running)."""
        with self._guard:
            if self._closing:
                self._late.setdefault(key, work)
                return True
            running = self._pending.get(key)
            if running is not None and not running.done():
                if again:
                    self._again.add(key)
                return False
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._workers, thread_name_prefix=self._name
                )
            self._pending[key] = self._executor.submit(self._run, key, work)
            return True

    def _run(self, key: Hashable, work: Callable[[], Any]) -> Any:
        while True:
            began = time.monotonic()
            try:
                result = work()
            except Exception as exc:  # a worker's top level: log; the next submission retries
                self._ran(key, time.monotonic() - began, failed=True)
                logger.exception("background work %s failed: %s", key, exc)
                raise
            self._ran(key, time.monotonic() - began, failed=False)
            with self._guard:
                if key not in self._again:
                    return result
                self._again.discard(key)

    def _ran(self, key: Hashable, seconds: float, *, failed: bool) -> None:
        kind = str(key[0]) if isinstance(key, tuple) and key else str(key)
        with self._guard:
            runs = self._runs.setdefault(kind, [0, 0.0, 0])
            runs[0] += 1
            runs[1] += seconds
            runs[2] += failed

    def depth(self) -> int:
        """How many runs are queued or going."""
        with self._guard:
            return sum(1 for f in self._pending.values() if not f.done())

    def runs(self) -> dict[str, tuple[int, float, int]]:
        """Per kind of work (``compact``, ``finish``, ...): the runs ended, the seconds they
        took in all, and how many of them failed."""
        with self._guard:
            return {k: (int(n), s, int(f)) for k, (n, s, f) in self._runs.items()}

    def wait(
        self,
        timeout: float | None = None,
        *,
        kind: Hashable | None = None,
        of: Collection[Hashable] | None = None,
    ) -> list[Any]:
        """Wait (at most *timeout* seconds in all) for the queued work (of keys whose first
        element is *kind*, when given, and whose second is in *of*, when given); the results
        of the runs that finished. Runs still going, and others' runs, stay queued for a
        later call; failed runs were logged and are dropped."""
        with self._guard:
            futures = {
                k: f
                for k, f in self._pending.items()
                if (kind is None or (isinstance(k, tuple) and k and k[0] == kind))
                and (of is None or (isinstance(k, tuple) and len(k) > 1 and k[1] in of))
            }
        wait(list(futures.values()), timeout=timeout)
        results = []
        with self._guard:
            for key, future in futures.items():
                if not future.done():
                    continue
                if self._pending.get(key) is future:
                    del self._pending[key]
                if future.exception() is None:
                    results.append(future.result())
        return results

    def shutdown(self) -> None:
        """Finish the queued work, and what it asks for as it ends, then stop the workers."""
        with self._guard:
            self._closing = True
            executor, self._executor = self._executor, None
        try:
            if executor is not None:
                executor.shutdown(wait=True)
            for _ in range(LATE_ROUNDS):
                with self._guard:
                    late, self._late = self._late, {}
                if not late:
                    break
                for key, work in late.items():
                    try:
                        work()
                    except Exception as exc:  # the engine is closing: say what was not done
                        logger.exception("background work %s failed as it closed: %s", key, exc)
        finally:
            with self._guard:
                self._closing = False


@dataclass
class Services:
    """The store and everything the operations share (see the module doc)."""

    store: Store
    config: Config
    tokens: TokenCounter
    summarizer: Summarizer
    files_dir: Path
    locks: ConversationLocks = field(default_factory=ConversationLocks)
    #: One compaction per conversation at a time in this process. Compaction does not hold
    #: ``locks`` across its summarizer calls, so a turn's writes never wait for a model: each
    #: pass writes in one transaction that checks the stretch it summarized is unchanged.
    compacting: ConversationLocks = field(default_factory=ConversationLocks)
    background: BackgroundQueue = field(default_factory=BackgroundQueue)
    #: Resume summaries by (conversation, boundary): assembly asks for one every turn.
    resume_cache: BoundedCache[tuple[int, int], str] = field(
        default_factory=lambda: BoundedCache(256)
    )
    #: What each summary costs as shown (note and XML), by what it is shown as: assembly
    #: unfolds the same summaries turn after turn, and counting a long text's tokens again
    #: was most of an assembly's time.
    shown_costs: BoundedCache[tuple[object, ...], int] = field(
        default_factory=lambda: BoundedCache(8192)
    )
    #: With ``redact.enabled``: what replaces secrets, and what seals the originals.
    redactor: Redactor | None = None
    sealer: Sealer | None = None
    clock: Callable[[], datetime] = now
    #: What finishes a conversation's provisional summaries off the turn: the engine sets
    #: its background queue; a hook's short process hands them to a process of its own.
    finish_later: Callable[[int], None] | None = None
    #: Set when closing: work that finishes provisional summaries stops between calls
    #: (what is left is finished by the next run).
    closing: threading.Event = field(default_factory=threading.Event)

    def lock(self, *conversation_ids: int) -> AbstractContextManager[None]:
        """Hold the conversations' locks (see :meth:`ConversationLocks.hold`)."""
        return self.locks.hold(*conversation_ids)

    def close(self) -> None:
        """Finish background work (the model calls in flight; no new ones), then close the
        store."""
        self.closing.set()
        self.background.shutdown()
        self.store.close()
