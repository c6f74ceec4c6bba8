"""The engine: the lifecycle a host drives (bootstrap, ingest, ...) over one store.

All mutating operations on a conversation are serialized per conversation: a re-entrant lock
per conversation inside the process, and the store's write transaction across processes.
Work on different conversations never waits on each other's locks.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from .config import Config, default_data_dir, load_config
from .errors import ImportProblem, NotFoundError
from .ingest.reconcile import Progress, ReconcileReport, reconcile_file
from .ingest.shapes import NormalizedMessage, normalize
from .model import Conversation, ConversationStats, IngestResult, StoredMessage
from .store import SQLiteStore, open_store
from .tokens import HeuristicTokenCounter, TokenCounter

__all__ = ["ConversationRef", "Engine", "default_db_path"]

logger = logging.getLogger(__name__)

#: A conversation by id (int), by external session id (str), or the row itself.
ConversationRef = int | str | Conversation


def default_db_path() -> Path:
    """``lossless.db`` in the platform's user data directory."""
    return default_data_dir() / "lossless.db"


class _ConversationLocks:
    """One re-entrant lock per conversation, created on demand."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[int, threading.RLock] = {}

    def get(self, conversation_id: int) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(conversation_id)
            if lock is None:
                lock = self._locks[conversation_id] = threading.RLock()
            return lock


class Engine:
    """Lossless context management over one store.

    Open one with :meth:`open`; use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        store: SQLiteStore,
        config: Config | None = None,
        *,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.store = store
        self.config = config or Config()
        self.token_counter: TokenCounter = token_counter or HeuristicTokenCounter()
        self._locks = _ConversationLocks()
        # session id → conversation; ids never change, so the hot path skips the lookup.
        self._by_session: dict[str, Conversation] = {}

    @classmethod
    def open(
        cls,
        target: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
        token_counter: TokenCounter | None = None,
    ) -> Engine:
        """Open the store at *target* (a path or URL).

        Without *target*: ``config.db``, then ``LOSSLESS_DB``, then the default file in the
        user data directory. The database is created (owner-only) and migrated as needed.
        """
        cfg = config or load_config()
        chosen = target if target is not None else cfg.db or os.environ.get("LOSSLESS_DB")
        store = open_store(chosen if chosen else default_db_path())
        return cls(store, cfg, token_counter=token_counter)

    def close(self) -> None:
        """Close the store's connections."""
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- conversations ---------------------------------------------------------------------

    def conversation(self, ref: ConversationRef, *, create: bool = False) -> Conversation:
        """Resolve *ref*: an int is a conversation id, a str an external session id.

        With ``create=True`` an unknown session id starts a new conversation.
        """
        if isinstance(ref, Conversation):
            return ref
        if isinstance(ref, bool) or not isinstance(ref, int | str):
            raise TypeError(f"a conversation is an int id or a str session id, not {ref!r}")
        if isinstance(ref, int):
            return self.store.get_conversation(ref)
        cached = self._by_session.get(ref)
        if cached is not None:
            return cached
        found = self.store.find_conversation(ref)
        if found is None:
            if not create:
                raise NotFoundError(
                    f"no conversation with session id {ref!r};"
                    " list them with `lossless conversations`"
                )
            found = self.store.get_or_create_conversation(ref)
        self._by_session[ref] = found
        return found

    def conversations(self) -> list[ConversationStats]:
        """Every conversation with its counts."""
        return self.store.list_conversations()

    @contextmanager
    def lock(self, conversation_id: int) -> Iterator[None]:
        """Hold the conversation's lock: serializes mutations of one conversation."""
        with self._locks.get(conversation_id):
            yield

    # --- ingestion -------------------------------------------------------------------------

    def normalize(
        self,
        message: Any,
        *,
        format: str | None = None,
        external_id: str | None = None,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> NormalizedMessage:
        """Normalize one message with this engine's token counter."""
        return normalize(
            message,
            format=format,
            external_id=external_id,
            created_at=created_at,
            metadata=metadata,
            counter=self.token_counter,
        )

    def ingest(
        self,
        conversation: ConversationRef,
        message: Any,
        *,
        format: str | None = None,
        external_id: str | None = None,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> IngestResult:
        """Store one message (any supported shape) and append it to the active context.

        A message whose external id is already stored in the conversation is skipped.
        """
        norm = self.normalize(
            message,
            format=format,
            external_id=external_id,
            created_at=created_at,
            metadata=metadata,
        )
        return self._append(conversation, [norm])

    def ingest_batch(
        self,
        conversation: ConversationRef,
        messages: Iterable[Any],
        *,
        format: str | None = None,
        external_ids: Sequence[str | None] | None = None,
    ) -> IngestResult:
        """Store several messages in one transaction (all or nothing), in order."""
        items = list(messages)
        if external_ids is not None and len(external_ids) != len(items):
            raise ValueError(
                f"external_ids has {len(external_ids)} entries for {len(items)} messages"
            )
        norms = [
            self.normalize(
                m, format=format, external_id=None if external_ids is None else external_ids[i]
            )
            for i, m in enumerate(items)
        ]
        return self._append(conversation, norms)

    def _append(
        self, conversation: ConversationRef, norms: list[NormalizedMessage]
    ) -> IngestResult:
        conv = self.conversation(conversation, create=True)
        with self.lock(conv.conversation_id):
            ids, skipped = self.store.append_messages(conv, norms)
        return IngestResult(conv.conversation_id, tuple(ids), skipped)

    # --- transcripts -----------------------------------------------------------------------

    def bootstrap(
        self,
        transcript: str | os.PathLike[str],
        *,
        format: str | None = None,
        session_id: str | None = None,
        progress: Progress | None = None,
    ) -> list[ReconcileReport]:
        """Reconcile the store with a transcript file (crash recovery on session start).

        Imports what the file has and the store lacks, after the newest entry both have;
        re-running it, or running it on the grown file, never stores a message twice.
        """
        return reconcile_file(
            self, Path(transcript), format=format, session_id=session_id, progress=progress
        )

    def import_path(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        progress: Progress | None = None,
    ) -> list[ReconcileReport]:
        """Import a transcript file, or every transcript below a directory.

        In a directory, ``.jsonl`` files and ``.json`` files that look like transcripts are
        imported; other ``.json`` files (Claude Code's ``sessions-index.json``, sub-agent
        ``.meta.json`` sidecars, ...) are passed over. A file that cannot be read as a
        transcript does not stop the others: it gets a report with ``mode="failed"`` and the
        problem. *progress* receives bytes done and total over all the files.
        """
        root = Path(path).expanduser()
        files = transcript_files(root)
        total = sum(f.stat().st_size for f in files)
        base = 0
        reports: list[ReconcileReport] = []
        for file in files:

            def advance(done: int, _size: int, offset: int = base) -> None:
                if progress is not None:
                    progress(offset + done, total)

            try:
                reports.extend(self.bootstrap(file, format=format, progress=advance))
            except ImportProblem as problem:
                if root.is_dir() and file.suffix == ".json" and format is None:
                    logger.info("passing over %s: %s", file, problem.reason)
                else:
                    reports.append(ReconcileReport.failed(file, problem))
            base += file.stat().st_size
        return reports

    # --- reading ---------------------------------------------------------------------------

    def messages(
        self, conversation: ConversationRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        """Stored messages of a conversation in order."""
        conv = self.conversation(conversation)
        return self.store.get_messages(conv.conversation_id, after_seq=after_seq, limit=limit)

    def get_message(self, message_id: int) -> StoredMessage:
        """One stored message by id (``msg#<id>``)."""
        return self.store.get_message(message_id)

    def stats(self) -> dict[str, Any]:
        """Totals over the whole store (what ``lossless stats`` shows)."""
        convs = self.conversations()
        by_depth: dict[int, int] = {}
        for c in convs:
            for depth, n in c.summaries_by_depth.items():
                by_depth[depth] = by_depth.get(depth, 0) + n
        return {
            "database": str(self.store.path),
            "backend": self.store.backend,
            "conversations": len(convs),
            "messages": sum(c.message_count for c in convs),
            "message_tokens": sum(c.message_tokens for c in convs),
            "summaries": sum(c.summary_count for c in convs),
            "summaries_by_depth": dict(sorted(by_depth.items())),
            "context_items": sum(c.context_items for c in convs),
            "context_tokens": sum(c.context_tokens for c in convs),
            "bytes": self.store.database_size(),
            "migrations": self.store.applied_migrations(),
        }


def transcript_files(root: Path) -> list[Path]:
    """The transcript files a path names: itself, or the ``.jsonl``/``.json`` files below it."""
    if root.is_file():
        return [root]
    if root.is_dir():
        return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))
    raise NotFoundError(f"{root} does not exist; give a transcript file or a directory of them")
