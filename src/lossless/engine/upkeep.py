"""The engine's upkeep: session summaries, transplant, rewriting and dissolving summaries,
backfill, backups."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from .. import doctor, maintenance
from ..backup import BackupReport
from ..backup import backup as backup_store
from ..compaction import CompactionPlan
from ..compaction import plan as plan_compaction
from ..doctor import Problem, StoreCap
from ..errors import ArgumentError, StoreError
from ..forget import ForgetReport, ScrubReport, finish_scrubs
from ..forget import forget as forget_messages
from ..maintenance import BackfillReport, RewriteReport
from ..model import ContextItem, SessionSummary
from ..services import ConversationLocks
from ..sessions import summarize_session as summarize_session_versions
from ..store.forget import DueScrub
from ..transplant import TransplantPlan
from ..transplant import transplant as transplant_conversation
from .base import ConversationRef, Facade

__all__ = ["Upkeep"]

logger = logging.getLogger(__name__)


class Upkeep(Facade):
    """Work on what is stored: session summaries, transplant, maintenance, backups,
    forgetting."""

    #: Session summaries: one run per conversation at a time (never the ingest lock: a
    #: model call must not hold up ingest).
    _session_locks: ConversationLocks

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
        plan = transplant_conversation(
            self.services, self.conversation(source), self.conversation(target), apply_it=apply
        )
        if plan.applied:  # the copies of a large batch: their index entries now, not later
            self.finish_indexes()
        return plan

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

    def mend(self) -> list[str]:
        """``lossless doctor --repair``: fix what :meth:`check` finds that needs neither a
        model nor a backup (indexes, context ordinals, stray files; see
        :func:`lossless.maintenance.mend`); what was done, one line each."""
        return maintenance.mend(self.services)

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

    def backup(self, dest: str | os.PathLike[str]) -> BackupReport:
        """An online copy of the store (and its large files) at *dest*, checked with
        ``doctor``; writers keep going meanwhile. See :mod:`lossless.backup`."""
        return backup_store(self.store, self.files_dir, dest)

    def check(self, *, degraded: bool = False, full: bool = False) -> list[Problem]:
        """``lossless doctor``: every integrity check of the store and its large files (an
        empty list: consistent); with *degraded*, also the summaries a repair would redo;
        with *full*, SQLite's full ``integrity_check`` of the file instead of its quick one."""
        return (
            doctor.check(self.store, degraded=degraded, full=full)
            + doctor.stray_files(self.store, self.files_dir)
            + doctor.archive_problems(self.store, self.store.archive_dir, full=full)
        )

    def check_notes(self) -> list[str]:
        """The checks :meth:`check` could not run here (a read-only database file), each
        with why and what to do instead, and a store near its cap (:meth:`cap`); empty when
        every check ran and the store is well under its cap."""
        cap = self.cap()
        near = [cap.warning()] if cap is not None and cap.near else []
        return doctor.notes(self.store) + near

    def cap(self) -> StoreCap | None:
        """The store's size against ``max_store_bytes`` (``None`` without a cap): its
        database, write-ahead log and large files."""
        return doctor.store_cap(self.store, self.files_dir, self.config.max_store_bytes)

    def finish_indexes(self) -> int:
        """Bring the search indexes a large import left behind up to date, and merge the
        index segments it left and copy its write-ahead log into the database (SQLite), so
        that the turns after it do not wait for those merges or that copy; rows indexed."""
        rows = self.store.catch_up_indexes()
        self.store.merge_indexes()
        return rows

    def rebuild_indexes(self) -> None:
        """Rebuild the full-text indexes from the stored text."""
        self.store.rebuild_fts()

    def compaction_plan(self, conversation: ConversationRef) -> CompactionPlan:
        """What compacting the conversation would do now (a dry run: nothing changes)."""
        return plan_compaction(self.services, self.conversation(conversation).conversation_id)

    def finish_forgets(self) -> ScrubReport | None:
        """Finish the scrub of every forget that stopped after its commit (see
        :mod:`lossless.forget`): ``None`` when none is due or another live process is doing
        it. Raises :class:`~lossless.errors.StoreError` when it cannot finish (it stays due)."""
        return finish_scrubs(self.services)

    def scrubs_due(self) -> list[DueScrub]:
        """The forgets whose scrub is not finished yet (killed, a full disk; or another
        process is finishing it), oldest first."""
        return self.store.scrubs_due()

    #: The scrubs this engine's opening finished (see :meth:`_finish_forgets_on_open`).
    finished_on_open: ScrubReport | None = None

    def _finish_forgets_on_open(self) -> None:
        """What opening a store does about a forget's scrub left due: finish it, saying so;
        when it cannot, say why and leave it due (doctor reports it)."""
        try:
            done = self.finish_forgets()
        except StoreError as exc:
            logger.warning("%s; `lossless forget --finish` tries again", exc)
            return
        self.finished_on_open = done
        if done is not None:
            logger.warning(
                "finished the scrub of a forget that had stopped after its commit (%s): %s",
                "; ".join(done.what),
                "; ".join(done.steps),
            )

    def forget(
        self,
        conversation: ConversationRef | None = None,
        *,
        family: bool = False,
        messages: tuple[int, int] | None = None,
        matching: str | None = None,
        dry_run: bool = False,
        allow_reimport: bool = False,
    ) -> ForgetReport:
        """Forget for good (see :mod:`lossless.forget`): *conversation* whole (its *family*
        too), or its messages in *messages* (message ids, both ends included), or the
        messages holding the text *matching* (in *conversation* or its family, or anywhere).
        *dry_run* says what would go and changes nothing."""
        convs = []
        if conversation is not None:
            conv = self.conversation(conversation)
            convs = (
                [self.conversation(c) for c in self.store.family_ids(conv)] if family else [conv]
            )
        elif messages is not None:
            raise ArgumentError("a message range needs its conversation")
        whole = conversation is not None and messages is None and matching is None
        return forget_messages(
            self.services,
            convs,
            whole=whole,
            message_range=messages,
            matching=matching,
            dry_run=dry_run,
            allow_reimport=allow_reimport,
        )
