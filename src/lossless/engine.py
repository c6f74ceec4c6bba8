"""The engine: the façade a host drives (bootstrap, ingest, after_turn, assemble, ...).

Each operation resolves the conversation a caller names (an id, a session id, or the row) and
hands the work to the service that does it (:mod:`lossless.services`: ingest, compaction,
assembly, recall, sessions, resume, transplant, maintenance). All mutations of a conversation
are serialized per conversation: a re-entrant lock per conversation inside the process, and
the store's write transaction across processes. Work on different conversations never waits
on each other's locks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from . import maintenance
from .assemble import AssembledContext
from .assemble import assemble as assemble_context
from .backup import BackupReport
from .backup import backup as backup_store
from .codec import safe_id
from .compaction import CompactionReport, after_turn_compaction
from .compaction import compact as compact_context
from .config import Config, default_data_dir, load_config
from .errors import NotFoundError
from .ingest.files import read_file
from .ingest.pipeline import append, prepare
from .ingest.reconcile import Progress, ReconcileReport, reconcile_file
from .ingest.reconcile import import_path as import_transcripts
from .maintenance import BackfillReport, RewriteReport
from .model import (
    ContextItem,
    Conversation,
    ConversationStats,
    IngestResult,
    LargeFile,
    NormalizedMessage,
    SessionSummary,
    StoredMessage,
    StoredPart,
    Summary,
)
from .redact import Redactor, Sealer
from .resume import ResumeSummary
from .resume import resume as resume_summary
from .retrieval import grants
from .retrieval.context_query import ContextQueryResult
from .retrieval.context_query import Kind as QueryKind
from .retrieval.context_query import Order as QueryOrder
from .retrieval.context_query import chat_context_query as query_context
from .retrieval.describe import Description
from .retrieval.describe import describe as describe_id
from .retrieval.expand import ExpandResult
from .retrieval.expand import expand as expand_dag
from .retrieval.expand_query import ExpandQueryResult
from .retrieval.expand_query import expand_query as expand_query_answer
from .retrieval.grants import Grant
from .retrieval.grep import GrepResult, Mode, Scope, Sort
from .retrieval.grep import grep as grep_store
from .services import ConversationLocks, Services
from .sessions import summarize_session as summarize_session_versions
from .store import Store, open_store
from .summarize import Summarizer
from .summarize.guards import guard_state
from .summarize.providers import build_summarizer
from .tokens import HeuristicTokenCounter, TokenCounter
from .transplant import TransplantPlan
from .transplant import transplant as transplant_conversation

__all__ = [
    "ConversationRef",
    "Engine",
    "TurnResult",
    "database_target",
    "default_db_path",
    "files_dir_for",
]

logger = logging.getLogger(__name__)

#: A conversation by id (int), by external session id (str), or the row itself.
ConversationRef = int | str | Conversation


def default_db_path() -> Path:
    """``lossless.db`` in the platform's user data directory."""
    return default_data_dir() / "lossless.db"


def database_target(target: str | os.PathLike[str] | None, config: Config) -> str | Path:
    """The store to open: *target*, else ``config.db``, else ``LOSSLESS_DB``, else the
    default file in the user data directory."""
    chosen = target if target is not None else config.db or os.environ.get("LOSSLESS_DB")
    return os.fspath(chosen) if chosen else default_db_path()


def files_dir_for(config: Config, database: Path | Store) -> Path:
    """Where large files are kept: ``data_dir/files``, else ``<database>-files`` beside a
    SQLite file, else (a PostgreSQL store) ``files-postgresql-<hash of the URL>`` in the
    user data directory."""
    if config.data_dir:
        return Path(config.data_dir).expanduser() / "files"
    if isinstance(database, Store):
        if database.path is None:  # a server's store: one folder per database and schema
            digest = hashlib.sha256(database.location.encode()).hexdigest()[:12]
            return default_db_path().parent / f"files-{database.backend}-{digest}"
        database = database.path
    return database.with_name(database.name + "-files")


@dataclass(frozen=True)
class TurnResult:
    """What :meth:`Engine.after_turn` did: the ingest, and the compaction (if it ran inline)."""

    ingest: IngestResult
    compaction: CompactionReport | None
    deferred: bool = False
    error: str | None = None


class Engine:
    """Lossless context management over one store.

    Open one with :meth:`open`; use it as a context manager or call :meth:`close`.
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
            files_dir=files_dir_for(config, store),
            redactor=Redactor(redact.patterns, builtin=redact.builtin) if redact.enabled else None,
            sealer=Sealer() if redact.enabled and redact.keep_originals else None,
        )
        # Session summaries: one run per conversation at a time (never the ingest lock: a
        # model call must not hold up ingest).
        self._session_locks = ConversationLocks()
        # session id → conversation; ids never change, so the hot path skips the lookup.
        self._by_session: dict[str, Conversation] = {}

    @property
    def store(self) -> Store:
        """The store."""
        return self.services.store

    @property
    def config(self) -> Config:
        """The configuration."""
        return self.services.config

    @property
    def token_counter(self) -> TokenCounter:
        """How tokens are counted."""
        return self.services.tokens

    @property
    def summarizer(self) -> Summarizer:
        """What writes the summaries (another may be set: the next run uses it)."""
        return self.services.summarizer

    @summarizer.setter
    def summarizer(self, summarizer: Summarizer) -> None:
        self.services.summarizer = summarizer

    @classmethod
    def open(
        cls,
        target: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
        token_counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
    ) -> Engine:
        """Open the store at *target* (a path or URL).

        Without *target*: ``config.db``, then ``LOSSLESS_DB``, then the default file in the
        user data directory. The database is created (owner-only) and migrated as needed.
        """
        cfg = config or load_config()
        store = open_store(database_target(target, cfg))
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
        ref = safe_id(ref)  # lone surrogates spelled out, as in every stored id
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

    def lookup(self, ref: ConversationRef) -> Conversation:
        """A conversation a person or a model named: an id, a session id, or text that spells
        a number (tried as an id first, then as a session id: a host's session ids may be
        numbers too). The one place references from the CLI, the MCP tools and the hooks are
        resolved."""
        if isinstance(ref, bool):  # JSON true is no conversation
            raise NotFoundError(f"{ref!r} is not a conversation id or session id")
        if isinstance(ref, str) and ref.strip().isascii() and ref.strip().isdigit():
            try:
                return self.conversation(int(ref))
            except NotFoundError:
                found = self.find_conversation(ref)
                if found is not None:
                    return found
                raise
        return self.conversation(ref)

    def find_conversation(self, session_id: str) -> Conversation | None:
        """The conversation of an external session id, or ``None`` (nothing is created)."""
        try:
            return self.conversation(session_id)
        except NotFoundError:
            return None

    def message_count(self, conversation: ConversationRef) -> int:
        """How many messages the conversation stores."""
        return self.store.message_count(self.conversation(conversation).conversation_id)

    def context_summaries(self, conversation: ConversationRef) -> list[tuple[Summary, list[str]]]:
        """The summaries in the conversation's active context, in order, each with the ids of
        the summaries it was made from."""
        conv = self.conversation(conversation).conversation_id
        summaries = self.store.context_summaries(conv)
        parents = self.store.parents_of([s.summary_id for s in summaries])
        return [(s, parents[s.summary_id]) for s in summaries]

    def host_compaction_seq(self, conversation: ConversationRef) -> int | None:
        """Where the host last compacted the conversation (the seq of its newest compaction
        record), or ``None`` when it never did."""
        conv = self.conversation(conversation).conversation_id
        return self.store.host_record_seq(conv, ("compact_boundary", "host_summary"))

    def reinjected_since(self, conversation: ConversationRef, seq: int, mark: str) -> bool:
        """Whether a hook's output stored after *seq* holds *mark* (the host's window already
        has what a hook put back)."""
        conv = self.conversation(conversation).conversation_id
        return self.store.host_record_mentions(conv, "hook_output", seq, mark)

    def conversations(self) -> list[ConversationStats]:
        """Every conversation with its counts."""
        return self.store.list_conversations()

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

    def archive(self, conversation: ConversationRef) -> Conversation:
        """Mark a conversation archived (nothing is deleted; it stays searchable)."""
        return self.update_conversation(conversation, status="archived")

    def pop_context(self, conversation: ConversationRef) -> StoredMessage | None:
        """Take the newest message out of the active context (an agent framework's "pop");
        it stays stored and searchable. ``None`` when the context is empty or ends in a
        summary."""
        conv = self.conversation(conversation)
        with self.lock(conv.conversation_id):
            return self.store.pop_context_message(conv.conversation_id)

    def lock(self, *conversation_ids: int) -> AbstractContextManager[None]:
        """Hold the conversations' locks (taken in id order, so two callers never deadlock):
        serializes mutations of a conversation."""
        return self.services.locks.hold(*conversation_ids)

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
        """The original of a redacted message, in its source shape, decrypted with *key*
        (default: ``LOSSLESS_REDACT_KEY``); :class:`NotFoundError` when none was kept."""
        stored = self.get_message(message_id)
        sealed = self.store.sealed_original(message_id)
        if sealed is None:
            raise NotFoundError(
                f"no original was kept for msg#{message_id}: it had no secrets, or"
                " redact.keep_originals was off when it was stored"
            )
        data = Sealer(key).open(sealed)
        parts = tuple(
            StoredPart(
                part_id=0,
                message_id=message_id,
                ordinal=n,
                slot=p["slot"],
                type=p["type"],
                text=p["text"],
                tool_call_id=p["tool_call_id"],
                tool_name=p["tool_name"],
                tool_input=p["tool_input"],
                tool_output=p["tool_output"],
                is_error=bool(p["is_error"]),
                raw=p["text"] if p["raw_is_text"] else p["raw"],
            )
            for n, p in enumerate(data["parts"])
        )
        original = dataclasses.replace(
            stored, content=data["content"], envelope=data["envelope"], parts=parts
        )
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
    ) -> IngestResult:
        """Store several messages in one transaction (all or nothing), in order.

        Items may be messages of any supported shape, or messages already passed through
        :meth:`normalize` (to set each one's id, time or metadata).
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
        return self._append(conversation, norms)

    @property
    def files_dir(self) -> Path:
        """Where large files are kept: ``data_dir/files``, else ``<database>-files`` beside it."""
        return self.services.files_dir

    def large_file(self, file_id: str) -> LargeFile:
        """The record of a large file (id, name, size, exploration summary, ...)."""
        return self.store.get_large_file(file_id)

    def read_large_file(self, file_id: str) -> str:
        """The full content of a large file."""
        return read_file(self.files_dir, self.store.get_large_file(file_id))

    def _append(
        self, conversation: ConversationRef, norms: list[NormalizedMessage]
    ) -> IngestResult:
        result = append(self.services, self.conversation(conversation, create=True), norms)
        if result.message_ids and self.config.sessions.auto_summarize:
            self._auto_summarize(
                result.conversation_id, len(result.message_ids), result.message_ids[-1]
            )
        return result

    # --- compaction ------------------------------------------------------------------------

    def compact(
        self,
        conversation: ConversationRef,
        *,
        mode: str = "full",
        until: int | None = None,
        budget: int | None = None,
        deadline: float | None = None,
        if_free: bool = False,
    ) -> CompactionReport:
        """Compact a conversation's active context.

        ``mode="full"`` (the default, a manual compact): leaf passes until none is eligible,
        then condensation. ``mode="incremental"``: what :meth:`after_turn` does. ``until=N``:
        sweeps until the context is at or under N tokens (at most ``max_rounds``). With the
        model's *budget*, the fresh tail is capped at ``fresh_tail_budget_share`` of it.
        After ``guards.run_seconds`` (or at *deadline*, ``time.monotonic()`` seconds) no model
        is called: the remaining passes fall back, so a slow provider cannot hold it longer.

        One process compacts a conversation at a time (on PostgreSQL, across hosts); another
        waits for it, or with *if_free* (what a turn does) leaves the work to it and returns
        a report with no passes.
        """
        return compact_context(
            self.services,
            self.conversation(conversation).conversation_id,
            mode=mode,
            until=until,
            budget=budget,
            deadline=deadline,
            if_free=if_free,
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
        conversation goes on. With ``background_compaction`` it runs in a worker thread.
        """
        ingest = self.ingest_batch(conversation, messages, format=format)
        conv_id = ingest.conversation_id
        if self.config.background_compaction:
            queued = self.services.background.submit(
                ("compact", conv_id),
                lambda: after_turn_compaction(self.services, conv_id, token_budget),
            )
            return TurnResult(ingest, None, deferred=queued)
        try:
            report = after_turn_compaction(self.services, conv_id, token_budget)
        except Exception as exc:  # best effort: the turn must not fail because of compaction
            logger.exception("compaction of conversation %s failed", conv_id)
            return TurnResult(ingest, None, error=f"{type(exc).__name__}: {exc}")
        return TurnResult(ingest, report)

    def wait_for_compaction(self, timeout: float | None = None) -> list[CompactionReport]:
        """Wait (at most *timeout* seconds in all) for queued background compaction.

        Returns the reports of the runs that finished; runs still going stay queued, and a
        later call collects them. Failed runs were logged by the worker and are dropped.
        """
        return self.services.background.wait(timeout, kind="compact")

    def assemble(
        self,
        conversation: ConversationRef,
        token_budget: int,
        *,
        format: str = "anthropic",
        pending_calls: bool = False,
    ) -> AssembledContext:
        """The messages to send the model before its next turn, within *token_budget*.

        Summaries come first as XML, then the newest items that fit, then the fresh tail
        (always, even over budget); tool calls and results are never left without each other
        (with *pending_calls*, a call whose result is not stored yet stays).
        """
        conv = self.conversation(conversation)
        with self.store.read():  # one snapshot: the context and its rows agree
            return assemble_context(
                self.services,
                conv.conversation_id,
                token_budget,
                format=format,
                pending_calls=pending_calls,
            )

    def grep(
        self,
        pattern: str,
        *,
        conversation: ConversationRef | None = None,
        family: bool = True,
        mode: Mode = "full_text",
        scope: Scope = "both",
        since: str | None = None,
        before: str | None = None,
        limit: int = 20,
        sort: Sort = "relevance",
    ) -> GrepResult:
        """``lcm_grep``: search messages, summaries or large files.

        With *conversation*, the search covers its family (the conversations sharing its
        session key; only itself with ``family=False``); without, the whole store.
        """
        ids = None
        if conversation is not None:
            conv = self.conversation(conversation)
            ids = self.store.family_ids(conv) if family else [conv.conversation_id]
        return grep_store(
            self.store,
            pattern,
            conversation_ids=ids,
            mode=mode,
            scope=scope,
            since=since,
            before=before,
            limit=limit,
            sort=sort,
        )

    def describe(
        self,
        ident: str,
        *,
        conversation: ConversationRef | None = None,
        token_cap: int | None = None,
        lines: tuple[int, int] | None = None,
    ) -> Description:
        """``lcm_describe``: a summary, large file or message by id, with what lies below it.

        With *conversation*, ids outside its family are unknown (nothing leaks across).
        """
        scope = None
        if conversation is not None:
            scope = self.store.family_ids(self.conversation(conversation))
        return describe_id(self.services, ident, scope=scope, token_cap=token_cap, lines=lines)

    def create_grant(
        self,
        conversation: ConversationRef,
        *,
        family: bool = True,
        token_cap: int | None = None,
        max_depth: int | None = None,
        ttl_seconds: int | None = None,
        purpose: str | None = None,
    ) -> Grant:
        """A delegation grant over a conversation (and its family): what a sub-agent may expand.

        Defaults: ``max_expand_tokens``, ``grant_max_depth``, ``grant_ttl_seconds``.
        """
        return grants.grant_for(
            self.services,
            self.conversation(conversation),
            family=family,
            token_cap=token_cap,
            max_depth=max_depth,
            ttl_seconds=ttl_seconds,
            purpose=purpose,
        )

    def revoke_grant(self, grant_id: str) -> None:
        """Revoke a delegation grant now."""
        grants.revoke(self.store, grant_id)

    def expand(
        self,
        grant_id: str,
        summary_ids: Sequence[str],
        *,
        max_depth: int | None = None,
        include_messages: bool = True,
        token_cap: int | None = None,
    ) -> ExpandResult:
        """``lcm_expand``: walk the DAG down from *summary_ids*, within what the grant allows."""
        return expand_dag(
            self.services,
            grant_id,
            summary_ids,
            max_depth=max_depth,
            include_messages=include_messages,
            token_cap=token_cap,
        )

    def expand_query(
        self,
        prompt: str,
        *,
        conversation: ConversationRef,
        query: str | None = None,
        summary_ids: Sequence[str] | None = None,
        max_tokens: int | None = None,
    ) -> ExpandQueryResult:
        """``lcm_expand_query``: answer *prompt* from the history below the summaries.

        Runs under a delegation grant that is revoked when it ends; see
        :mod:`lossless.retrieval.expand_query`.
        """
        return expand_query_answer(
            self.services,
            prompt,
            conversation=self.conversation(conversation),
            query=query,
            summary_ids=summary_ids,
            max_tokens=max_tokens,
        )

    def summarize_session(
        self, conversation: ConversationRef, *, full: bool = False
    ) -> SessionSummary:
        """Bring the conversation's session summary up to date; returns its latest version.

        Incremental: only the messages after the latest version are read (none: that version
        is returned unchanged, without a summarizer call). ``full=True`` summarizes every
        message again. A run that summarizes stores a new version; none is ever overwritten.
        See :mod:`lossless.sessions`.
        """
        conv = self.conversation(conversation)
        with self._session_locks.hold(conv.conversation_id):
            return summarize_session_versions(self.services, conv, full=full)

    def session_summaries(self, conversation: ConversationRef) -> list[SessionSummary]:
        """Every version of the conversation's session summary, oldest first."""
        return self.store.session_summaries(self.conversation(conversation).conversation_id)

    def wait_for_session_summaries(self, timeout: float | None = None) -> list[SessionSummary]:
        """Wait (at most *timeout* seconds in all) for queued automatic session summaries.

        Returns the versions of the runs that finished; runs still going stay queued. Failed
        runs were logged by the worker and are dropped.
        """
        return self.services.background.wait(timeout, kind="session")

    def _auto_summarize(self, conversation_id: int, added: int, last_id: int) -> None:
        """After *added* messages were stored: queue a session summary when the conversation's
        message count crossed a multiple of ``sessions.summarize_interval``. Never raises:
        the messages are stored, and a later run covers them."""
        try:
            count = self.store.message_seq(last_id)  # seqs have no gaps: the count
            interval = self.config.sessions.summarize_interval
            if count // interval > (count - added) // interval:
                # A run already going runs once more when done: it covers the new messages.
                self.services.background.submit(
                    ("session", conversation_id),
                    lambda: self.summarize_session(conversation_id),
                    again=True,
                )
        except Exception:  # ingest succeeded; the summary must not turn it into a failure
            logger.exception("could not queue the session summary of %s", conversation_id)

    def transplant(
        self, source: ConversationRef, target: ConversationRef, *, apply: bool = False
    ) -> TransplantPlan:
        """Copy *source*'s context summaries, the DAG beneath them and the messages they
        cover into *target*, prepended to its context (see :mod:`lossless.transplant`).

        A dry run unless *apply*; the plan says what it copies (``problem`` says why it would
        be refused). With *apply*, a refused transplant raises
        :class:`~lossless.transplant.TransplantError` and changes nothing.
        """
        return transplant_conversation(
            self.services, self.conversation(source), self.conversation(target), apply_it=apply
        )

    def rewrite(
        self,
        summary_ids: Sequence[str] = (),
        *,
        depth: int | None = None,
        everything: bool = False,
        conversation: ConversationRef | None = None,
        apply: bool = False,
    ) -> RewriteReport:
        """Re-summarize summaries with the configured summarizer: those named, those of
        *depth*, or *everything* (within *conversation* when given). A dry run unless
        *apply*; see :mod:`lossless.maintenance`."""
        conv = self.conversation(conversation).conversation_id if conversation else None
        entries = maintenance.chosen(
            self.services, summary_ids, depth=depth, everything=everything, conversation_id=conv
        )
        return maintenance.rewrite(self.services, entries, apply=apply)

    def repair(
        self, *, conversation: ConversationRef | None = None, apply: bool = False
    ) -> RewriteReport:
        """Re-summarize the summaries the deterministic fallback wrote or that were cut to
        size, shallowest first (``lossless doctor --apply``). A dry run unless *apply*."""
        conv = self.conversation(conversation).conversation_id if conversation else None
        return maintenance.rewrite(
            self.services, maintenance.degraded(self.services, conv), apply=apply
        )

    def dissolve(self, summary_id: str) -> list[ContextItem]:
        """Undo a condensation: put a context summary's sources back in its place; the
        summary is kept, retired as ``dissolved``. Returns the items put back."""
        return maintenance.dissolve(self.services, summary_id)

    def backfill(
        self,
        path: str | os.PathLike[str],
        *,
        into: ConversationRef | None = None,
        single_root: bool = False,
        apply: bool = False,
    ) -> BackfillReport:
        """Import an old transcript as its own conversation, compact it (to one root summary
        with *single_root*) and, with *into*, transplant it there. A dry run unless *apply*."""
        target = self.conversation(into).conversation_id if into is not None else None
        return maintenance.backfill(
            self.services, path, into=target, single_root=single_root, apply=apply
        )

    def chat_context_query(
        self,
        *,
        conversation: ConversationRef | None = None,
        family: bool = True,
        kind: QueryKind = "both",
        role: str | None = None,
        tool_name: str | None = None,
        execution_id: str | None = None,
        status: str | None = None,
        since: str | None = None,
        before: str | None = None,
        text: str | None = None,
        limit: int = 20,
        offset: int = 0,
        order: QueryOrder = "newest",
    ) -> ContextQueryResult:
        """``chat_context_query``: the stored chat frames and the tool-execution log, filtered
        and paged (see :mod:`lossless.retrieval.context_query`). With *conversation*, its
        family (only itself with ``family=False``); without, the whole store."""
        ids = None
        if conversation is not None:
            conv = self.conversation(conversation)
            ids = self.store.family_ids(conv) if family else [conv.conversation_id]
        return query_context(
            self.store,
            conversation_ids=ids,
            kind=kind,
            role=role,
            tool_name=tool_name,
            execution_id=execution_id,
            status=status,
            since=since,
            before=before,
            text=text,
            limit=limit,
            offset=offset,
            order=order,
        )

    def resume(self, conversation: ConversationRef, *, latest: bool = False) -> ResumeSummary:
        """The resume summary (see :mod:`lossless.resume`): as injected into the assembled
        context — the messages up to the compaction boundary — or, with *latest*, of every
        stored message. ``upto_seq`` is ``None`` when nothing was compacted yet."""
        conv = self.conversation(conversation).conversation_id
        return resume_summary(self.services, conv, latest=latest)

    def backup(self, dest: str | os.PathLike[str]) -> BackupReport:
        """An online copy of the store (and its large files) at *dest*, checked with
        ``doctor``; writers keep going meanwhile. See :mod:`lossless.backup`."""
        return backup_store(self.store, self.files_dir, dest)

    def context(self, conversation: ConversationRef) -> list[ContextItem]:
        """The conversation's active context items, in order."""
        return self.store.context(self.conversation(conversation).conversation_id)

    def summary(self, summary_id: str) -> Summary:
        """One summary by id."""
        return self.store.get_summaries([summary_id])[0]

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
            self.services,
            Path(transcript),
            format=format,
            session_id=session_id,
            progress=progress,
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
        transcript does not stop the others: it gets a report with ``mode="failed"`` (or
        ``passed_over``: a file that is not a transcript) and the problem. *progress* receives
        bytes done and total over all the files.
        """
        return import_transcripts(self.services, path, format=format, progress=progress)

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
            "database": self.store.location,
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
            "summarizer": {
                "name": self.summarizer.name,
                "model": self.summarizer.model,
                "offline": self.summarizer.offline,
                "guards": guard_state(self.summarizer),
            },
        }
