"""The engine: the façade a host drives (bootstrap, ingest, after_turn, assemble, ...).

Each operation resolves the conversation a caller names (an id, a session id, or the row) and
hands the work to the service that does it (:mod:`lossless.services`: ingest, compaction,
assembly, recall, sessions, resume, transplant, maintenance). All mutations of a conversation
are serialized per conversation: a re-entrant lock per conversation inside the process, and
the store's write transaction across processes. Work on different conversations never waits
on each other's locks.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from ..assemble import AssembledContext
from ..assemble import assemble as assemble_context
from ..codec import clean_text, dumps, loads
from ..compaction import CompactionReport, PassResult, after_turn_compaction, nothing_due
from ..compaction import compact as compact_context
from ..config import Config, RedactConfig
from ..errors import ArgumentError, NotFoundError
from ..ingest.importer import import_path as import_transcripts
from ..ingest.peers import PeerReport
from ..ingest.peers import import_store as import_peer_store
from ..ingest.pipeline import append, prepare
from ..ingest.reconcile import Progress, ReconcileReport, reconcile_file
from ..model import Conversation, IngestResult, NormalizedMessage, StoredMessage
from ..redact import Redactor, Sealer, restore, tagger
from ..services import BoundedCache, ConversationLocks, Services
from ..store import DEFER_TRIGRAM_AT, Store, open_store
from ..summarize import Summarizer
from ..summarize.providers import build_summarizer
from ..tokens import HeuristicTokenCounter, TokenCounter
from .access import Access
from .base import (
    ConversationRef,
    database_target,
    default_db_path,
    files_dir_for,
)
from .hosting import Hosting
from .pending import Pending
from .reads import Reads
from .recall import Recall
from .retention import Retention, archive_dir_for
from .upkeep import Upkeep

__all__ = [
    "ConversationRef",
    "Engine",
    "TurnResult",
    "archive_dir_for",
    "database_target",
    "default_db_path",
    "files_dir_for",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnResult:
    """What :meth:`Engine.after_turn` did: the ingest, and the compaction (if it ran inline,
    or, with ``background_compaction``, the report of a turn that left nothing to compact).
    ``deferred``: compaction was handed to the background worker."""

    ingest: IngestResult
    compaction: CompactionReport | None
    deferred: bool = False
    error: str | None = None


class Engine(Reads, Recall, Upkeep, Retention, Hosting, Pending, Access):
    """Lossless context management over one store.

    Open one with :meth:`open`; use it as a context manager or call :meth:`close`. Its
    reads, recall and upkeep are :class:`Reads`, :class:`Recall` and :class:`Upkeep`; a
    host's room is :class:`Hosting`; provisional summaries are :class:`Pending`.
    """

    def __init__(
        self,
        store: Store,
        config: Config | None = None,
        *,
        token_counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        config = config or Config()
        redact = config.redact
        #: What every operation works with (see :mod:`lossless.services`).
        self.services = Services(
            store=store,
            config=config,
            tokens=token_counter or HeuristicTokenCounter(),
            summarizer=summarizer or build_summarizer(config),
            files_dir=(files_dir := files_dir_for(config, store)),
            redactor=_redactor(redact, store),
            sealer=Sealer() if redact.enabled and redact.keep_originals else None,
        )
        # Archived messages are read back from files beside the large files.
        store.archive_dir = archive_dir_for(config, files_dir).absolute()
        # Session summaries: one run per conversation at a time (never the ingest lock: a
        # model call must not hold up ingest).
        self._session_locks = ConversationLocks()
        # session id → conversation; ids never change, so the hot path skips the lookup.
        self._by_session: dict[str, Conversation] = {}
        # conversation → its newest assembly's tokens (what a host's reported prompt size is
        # measured against: Engine.measure_room).
        self._assembled: BoundedCache[int, int] = BoundedCache(1024)
        # A compaction's provisional summaries are finished off the turn, in the background
        # queue (a hook's short process replaces this with a process of its own).
        self._finish_checked: set[int] = set()
        self.services.finish_later = self._finish_later
        # A forget stopped after its commit left its scrub due: the next opening finishes it.
        self._finish_forgets_on_open()

    @classmethod
    def open(
        cls,
        target: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
        token_counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        create: bool = True,
    ) -> Engine:
        """Open the store at *target* (a path or URL).

        Without *target*: ``config.db``, then ``LOSSLESS_DB``, then the default file in the
        user data directory. The database is created (owner-only) and migrated as needed;
        with *create* false, a store that does not exist is a :class:`~lossless.errors.NoStore`
        error and nothing is made (what a tool that only reads wants).

        *config* is the configuration used, and nothing else: without one, the defaults
        (``Config()``), never the user's file or ``LOSSLESS_*`` variables — so a program (a
        test, a benchmark) behaves the same whoever runs it. A host that should follow the
        user's settings passes ``config=load_config()``, as the CLI and the hooks do.
        """
        cfg = config if config is not None else Config()
        store = open_store(database_target(target, cfg), create=create)
        return cls(store, cfg, token_counter=token_counter, summarizer=summarizer)

    def close(self) -> None:
        """Finish background work (compaction, session summaries), then close the store's
        connections."""
        self.services.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def update_conversation(
        self,
        conversation: ConversationRef,
        *,
        title: str | None = None,
        session_key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: str | None = None,
    ) -> Conversation:
        """Set a conversation's title, family key, status (``active``/``archived``) or
        metadata (merged into what is there); returns the updated row."""
        conv = self.conversation(conversation)
        self.store.update_conversation(
            conv.conversation_id,
            title=title,
            session_key=session_key,
            metadata=metadata,
            status=status,
        )
        self._by_session.pop(conv.session_id, None)  # the cached row is stale now
        return self.store.get_conversation(conv.conversation_id)

    def rename(self, conversation: ConversationRef, title: str) -> Conversation:
        """Give a conversation a title (what the listings show; its messages are also found
        by its words, for less than their own). Returns the updated row."""
        cleaned = " ".join(clean_text(title).split())
        if not cleaned:
            raise ArgumentError("a title needs some text; give the conversation a name")
        return self.update_conversation(conversation, title=cleaned)

    def archive(self, conversation: ConversationRef) -> Conversation:
        """Archive a conversation. Nothing is deleted: it leaves the default listings and
        searches of the whole store (``conversations()`` with ``archived=False``, ``grep``
        without a conversation), and a search of its family still finds it (an agent
        framework's cleared sessions). :meth:`unarchive` brings it back."""
        return self.update_conversation(conversation, status="archived")

    def unarchive(self, conversation: ConversationRef) -> Conversation:
        """Bring an archived conversation back into the listings and the store's searches."""
        return self.update_conversation(conversation, status="active")

    def pop_context(self, conversation: ConversationRef) -> StoredMessage | None:
        """Take the newest message out of the active context (an agent framework's "pop");
        it stays stored and searchable. ``None`` when the context is empty or ends in a
        summary."""
        conv = self.conversation(conversation)
        with self.lock(conv.conversation_id):
            return self.store.pop_context_message(conv.conversation_id)

    def normalize(
        self,
        message: Any,
        *,
        format: str | None = None,
        external_id: str | None = None,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> NormalizedMessage:
        """Normalize one message with this engine's token counter (and redact its secrets
        when ``redact.enabled``)."""
        return prepare(
            self.services,
            message,
            format=format,
            external_id=external_id,
            created_at=created_at,
            metadata=metadata,
        )

    def reveal(self, message_id: int, *, key: str | None = None) -> Any:
        """The original of a message whose secrets were masked or removed, in its source
        shape: as it was (masked: no key needed), or decrypted with *key* (removed with
        ``redact.keep_originals``; default: ``LOSSLESS_REDACT_KEY``). A message with no
        secrets is its own original. :class:`NotFoundError` when a removed secret's original
        was not kept."""
        stored = self.get_message(message_id)
        kept = self.store.sealed_original(message_id)
        if kept is None:
            source = stored.to_source()
            if "[REDACTED:" not in dumps(source):
                return source
            raise NotFoundError(
                f"no original was kept for msg#{message_id}: its secrets were removed"
                " (redact.enabled) while redact.keep_originals was off"
            )
        sealed, plain = kept
        data = loads(sealed.decode("utf-8")) if plain else Sealer(key).open(sealed)
        original = restore(stored, data)
        return original.to_source()

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
        finish_indexes: bool = True,
    ) -> IngestResult:
        """Store several messages in one transaction (all or nothing), in order.

        Items may be messages of any supported shape, or messages already passed through
        :meth:`normalize` (to set each one's id, time or metadata).

        A large batch is written without its substring index entries (and, on PostgreSQL,
        its surroundings'), which the store makes after the transaction has committed,
        beside what the caller does next (SQLite: its own thread, at once; closing the engine
        makes what is left). Until then a substring search reads those rows itself. With
        *finish_indexes* false they are left for :meth:`finish_indexes`, to be made once
        after an import of many batches.
        """
        items = list(messages)
        if external_ids is not None and len(external_ids) != len(items):
            raise ValueError(
                f"external_ids has {len(external_ids)} entries for {len(items)} messages"
            )
        norms = [
            m
            if isinstance(m, NormalizedMessage)
            else self.normalize(
                m, format=format, external_id=None if external_ids is None else external_ids[i]
            )
            for i, m in enumerate(items)
        ]
        result = self._append(conversation, norms)
        if finish_indexes and len(norms) >= DEFER_TRIGRAM_AT:
            self.store.catch_up_soon()
        return result

    def _append(
        self, conversation: ConversationRef, norms: list[NormalizedMessage]
    ) -> IngestResult:
        result = append(self.services, self.conversation(conversation, create=True), norms)
        if result.message_ids and self.config.sessions.auto_summarize:
            self._auto_summarize(
                result.conversation_id, len(result.message_ids), result.message_ids[-1]
            )
        return result

    def compact(
        self,
        conversation: ConversationRef,
        *,
        mode: str = "full",
        until: int | None = None,
        budget: int | None = None,
        deadline: float | None = None,
        if_free: bool = False,
        force: bool = False,
        instructions: str | None = None,
        stop: threading.Event | None = None,
        provisional: bool | None = None,
        progress: Callable[[PassResult], None] | None = None,
    ) -> CompactionReport:
        """Compact a conversation's active context.

        ``mode="full"`` (the default, a manual compact): leaf passes until none is eligible,
        then condensation. ``mode="incremental"``: what :meth:`after_turn` does. ``until=N``:
        sweeps until the context is at or under N tokens (at most ``max_rounds``). With the
        model's *budget*, the fresh tail is capped at ``fresh_tail_budget_share`` of it.
        After ``guards.run_seconds`` (or at *deadline*, ``time.monotonic()`` seconds) the run
        ends (``report.out_of_time``) and what is left stays due for the next run.

        With a model summarizer the passes are *provisional* (default:
        ``provisional_summaries``): written at once by the offline summarizer, and finished
        with the model's summaries off the turn (:meth:`finish_summaries`, which the
        background queue runs). *progress* is told of each pass written.

        One process compacts a conversation at a time (on PostgreSQL, across hosts); another
        waits for it, or with *if_free* (what a turn does) leaves the work to it and returns
        a report with no passes.

        With *until* and *force* (a host that must fit its next request), once nothing outside
        the fresh tail is left the tail gives up its oldest turns, down to the newest exchange.
        *instructions* (what to keep in view: a host's custom instructions or focus topic) go
        to the summarizer with every pass. Setting *stop* ends the run between passes (each
        pass is one transaction: nothing is left half written).
        """
        conv_id = self.conversation(conversation).conversation_id
        self._finish_left(conv_id)
        return compact_context(
            self.services,
            conv_id,
            mode=mode,
            until=until,
            budget=budget,
            deadline=deadline,
            if_free=if_free,
            force=force,
            instructions=instructions,
            stop=stop,
            provisional=provisional,
            progress=progress,
        )

    def after_turn(
        self,
        conversation: ConversationRef,
        messages: Iterable[Any] = (),
        *,
        token_budget: int | None = None,
        format: str | None = None,
    ) -> TurnResult:
        """After the model answered: store the turn's new messages, then compact if needed.

        Compaction is incremental (a leaf pass once enough raw material is outside the fresh
        tail, then condensation up to ``incremental_max_depth``); with *token_budget*, a
        context above ``context_threshold`` of it is compacted down to ``compaction_target``
        of it.
        Compaction is best effort: a failure is logged and reported, never raised, so the
        conversation goes on. With ``background_compaction`` (by default: when the
        summarizer calls a model) it runs in a worker thread, and the turn only stores its
        messages. With a model summarizer the turn never waits for the model: the passes
        are provisional (see :meth:`compact`), finished in the background.
        """
        ingest = self.ingest_batch(conversation, messages, format=format)
        conv_id = ingest.conversation_id
        self._finish_left(conv_id)
        background = self.config.background_compaction
        if background is None:  # unset: off the turn when a summary is a model's call
            background = not self.summarizer.offline
        if background:
            # Said here, not in the worker: waking it for every turn slowed the next one.
            try:
                idle = nothing_due(self.services, conv_id, token_budget)
            except Exception:  # best effort: the worker's run meets it and reports it
                logger.debug("could not tell whether %s needs compaction", conv_id, exc_info=True)
                idle = None
            if idle is not None:
                return TurnResult(ingest, idle)
            # A turn that lands while a run is going has it run once more when it ends, so
            # the context never stays past the threshold until some later turn comes.
            self.services.background.submit(
                ("compact", conv_id),
                lambda: after_turn_compaction(self.services, conv_id, token_budget),
                again=True,
            )
            return TurnResult(ingest, None, deferred=True)
        try:
            report = after_turn_compaction(self.services, conv_id, token_budget)
        except Exception as exc:  # best effort: the turn must not fail because of compaction
            logger.exception("compaction of conversation %s failed", conv_id)
            return TurnResult(ingest, None, error=f"{type(exc).__name__}: {exc}")
        return TurnResult(ingest, report)

    def wait_for_compaction(
        self, timeout: float | None = None, *, conversations: Sequence[int] | None = None
    ) -> list[CompactionReport]:
        """Wait (at most *timeout* seconds in all) for queued background compaction (of
        *conversations*, when given: others' runs are neither waited for nor collected).

        Returns the reports of the runs that finished; runs still going stay queued, and a
        later call collects them. Failed runs were logged by the worker and are dropped.
        """
        of = None if conversations is None else frozenset(conversations)
        return self.services.background.wait(timeout, kind="compact", of=of)

    def assemble(
        self,
        conversation: ConversationRef,
        token_budget: int,
        *,
        format: str = "anthropic",
        pending_calls: bool = False,
        fill: bool | None = None,
        dates: bool | None = None,
        prompt: str | None = None,
        focus: str | None = None,
    ) -> AssembledContext:
        """The messages to send the model before its next turn, within *token_budget* (a
        cap: never more).

        Summaries come first as XML, then the newest items that fit, then the fresh tail (a
        tail over the budget shrinks from the front); tool calls and results are never left
        without each other (with *pending_calls*, a call whose result is not stored yet
        stays). Room left under the budget is spent on detail — summaries shown as what they
        were made from, then the messages just before the fresh tail as they were — unless
        *fill* (default: the ``fill_budget`` setting) is false. A user message said on
        another day than what comes before it starts with its date (``[Tuesday 9 May 2023]``)
        unless *dates* (default: the ``date_marks`` setting) is false.

        A tight budget goes to the essentials first: the newest user request whole, the
        newest summary, the turn under way, the other summaries, the rest of the fresh tail.
        *prompt* is the request when the host sends it itself after these messages (it is not
        stored yet): then the summaries come first.

        The next request makes the assembly prompt-aware: the room left after the essentials
        goes first (up to the ``prompt_share`` of it) to the stored messages a search for it
        finds (:meth:`relevant_to`), each shown where it was said with its call, results and
        reply, then to detail as above. The request is *prompt*, or *focus* when it is stored
        already (the newest user message) or is a topic rather than a request.
        """
        conv = self.conversation(conversation)
        request = focus if focus is not None else prompt
        relevant: list[int] = []
        if request and self.config.prompt_share > 0:
            relevant = self.relevant_to(conv.conversation_id, request)
        with self.store.read():  # one snapshot: the context and its rows agree
            made = assemble_context(
                self.services,
                conv.conversation_id,
                token_budget,
                format=format,
                pending_calls=pending_calls,
                fill=fill,
                dates=dates,
                prompt=prompt,
                relevant=relevant,
            )
        self._assembled.put(conv.conversation_id, made.tokens)
        said = made.request_warning(conv.conversation_id)
        if said is not None:
            logger.warning("%s", said)
        return made

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
            self.services,
            Path(transcript),
            format=format,
            session_id=session_id,
            progress=progress,
        )

    def import_store(self, source: str, path: str | os.PathLike[str]) -> list[PeerReport]:
        """Move in from another store: a lossless-claw or hermes-lcm database (*source*), its
        conversations with their messages, summary DAG and active context, one transaction
        per conversation; importing again brings only what is new (see
        :mod:`lossless.ingest.peers`)."""
        reports = import_peer_store(self.services, source, path)
        self.finish_indexes()  # what its large batches left for after their transactions
        return reports

    def import_path(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        progress: Progress | None = None,
    ) -> list[ReconcileReport]:
        """Import a transcript file, a host's database (OpenClaw's ``openclaw-agent.sqlite``,
        Hermes Agent's ``state.db``), or every transcript and host database below a directory.

        In a directory, ``.jsonl`` and ``.json`` files are read. A file that cannot be read as
        a transcript does not stop the others: it gets a report with ``mode="failed"`` and the
        problem; a file a host keeps beside its transcripts (Claude Code's
        ``sessions-index.json``, a trace, a copy) one with ``mode="passed_over"`` and why.

        What was not imported is in each report's
        :attr:`~lossless.ingest.reconcile.ReconcileReport.not_imported`: an
        :class:`~lossless.errors.ImportProblem` per bad line (``path``, ``line``, ``kind``,
        ``reason``), or for the file a ``failed`` report names. An unchanged file is not read
        again, and its bad lines are still there (``known``). *progress* receives bytes done
        and total over all the files.

        After a large import, :meth:`finish_indexes` merges the index segments it left due
        (``lossless import`` does), so that the turns after it do not wait for that merging.
        """
        return import_transcripts(self.services, path, format=format, progress=progress)


def _redactor(redact: RedactConfig, store: Store) -> Redactor | None:
    """What finds secrets on ingest: removal (``redact.enabled``), masking (``redact.mask``,
    tagged with the store's own key, made when the first secret is found), or nothing."""
    if redact.enabled:
        return Redactor(redact.patterns, builtin=redact.builtin)
    if redact.mask:
        return Redactor(redact.patterns, builtin=redact.builtin, tag=tagger(store.mask_salt))
    return None
