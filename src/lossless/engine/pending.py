"""The engine's provisional summaries: finishing them off the turn, and what is pending."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..compaction.finish import FELL_BACK_KEY, FinishProgress, FinishReport, finish
from ..summarize.guards import guard_state
from ..timestamps import parse_ts
from .base import ConversationRef, Facade

__all__ = ["Pending"]


class Pending(Facade):
    """Provisional summaries: written at once by the offline summarizer while a model
    summarizer's summaries are on their way (see :mod:`lossless.compaction.finish`)."""

    #: Conversations this engine has looked at for provisional summaries left by an earlier
    #: process (once each: they are then finished with the turn's own).
    _finish_checked: set[int]

    def finish_summaries(
        self,
        conversation: ConversationRef | None = None,
        *,
        deadline: float | None = None,
        stop: threading.Event | None = None,
        concurrency: int | None = None,
        progress: FinishProgress | None = None,
    ) -> FinishReport:
        """Put the model's summaries in place of the provisional ones (of *conversation*, or
        of the whole store), here and now: up to ``guards.concurrency`` calls at once,
        condensed summaries once their sources are final, until ``guards.run_seconds`` (or
        *deadline*, ``time.monotonic()`` seconds) or *stop*. What is left stays provisional
        for the next run. *progress* gets (done, pending) after each summary."""
        conv_id = None if conversation is None else self.conversation(conversation).conversation_id
        return finish(
            self.services,
            conv_id,
            deadline=deadline,
            stop=stop,
            concurrency=concurrency,
            progress=progress,
        )

    def wait_for_summaries(self, timeout: float | None = None) -> list[FinishReport]:
        """Wait (at most *timeout* seconds in all) for the background runs finishing
        provisional summaries; the reports of those that ended."""
        return self.services.background.wait(timeout, kind="finish")

    def pending_summaries(self, conversation: ConversationRef | None = None) -> dict[str, Any]:
        """What waits for the model: the provisional summaries (of *conversation*, or of the
        store), the oldest one's age, the runs whose model kept failing (kept as the offline
        summarizer wrote them, with the reason), and the summarizer's guards."""
        conv = None if conversation is None else self.conversation(conversation)
        found = self.store.pending_summaries(None if conv is None else conv.conversation_id)
        age = None
        if found.oldest_at is not None:
            oldest = parse_ts(found.oldest_at)
            if oldest is not None:
                age = max(0.0, (datetime.now(UTC) - oldest).total_seconds())
        failures = [
            {"conversation_id": c, **said}
            for c, said in self.store.conversations_marked(FELL_BACK_KEY)
            if conv is None or c == conv.conversation_id
        ]
        return {
            "provisional": found.summaries,
            "oldest_at": found.oldest_at,
            "oldest_age_seconds": None if age is None else round(age, 1),
            "summarizer": self.summarizer.name,
            "model_summaries": not self.summarizer.offline,
            "fell_back": failures,
            "guards": guard_state(self.summarizer),
        }

    def finish_elsewhere(self, finisher: Callable[[int], None] | None) -> None:
        """Hand provisional summaries to *finisher* (called with the conversation's id when a
        compaction wrote some, or an earlier process left some) instead of this engine's
        background queue: what a short process does whose exit must not wait for a model (a
        hook starts ``lossless finish`` as a process of its own). ``None``: the queue."""
        self.services.finish_later = finisher or self._finish_later

    def _finish_later(self, conversation_id: int) -> None:
        """Finish *conversation_id*'s provisional summaries in the background queue (a run
        asked while one is going runs once more after it)."""
        self._finish_checked.add(conversation_id)
        services = self.services
        self.services.background.submit(
            ("finish", conversation_id),
            lambda: finish(services, conversation_id),
            again=True,
        )

    def _finish_left(self, conversation_id: int) -> None:
        """Once per conversation and engine: provisional summaries an earlier process left
        (it ended, or was killed, before their model summaries came) are finished too."""
        if conversation_id in self._finish_checked or self.summarizer.offline:
            return
        self._finish_checked.add(conversation_id)
        if self.store.pending_summaries(conversation_id).summaries:
            finish_later = self.services.finish_later
            if finish_later is not None:
                finish_later(conversation_id)
