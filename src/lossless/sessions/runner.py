"""The update: the latest version and the messages after it → the next version, chunk by
chunk, each chunk summarized by the model (read leniently, retried, else the fallback) or
extracted deterministically."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import NotFoundError
from ..model import Conversation, SessionSummary, StoredMessage
from ..summarize.base import Level, SourceItem, Summarizer, SummaryRequest, SummaryResult
from ..summarize.escalation import CAP_FACTOR, climb, truncate_to_tokens
from ..summarize.extractive import EXPAND_PREFIX, ExtractiveSummarizer
from ..summarize.guards import GuardedSummarizer
from ..summarize.prompts import session_prompt, session_system_prompt
from ..timestamps import format_ts, now
from .chunks import chunk_tokens, groups, message_chunks, source_items
from .draft import (
    MAX_CODE_REFERENCES,
    MAX_DECISIONS,
    MAX_KEY_POINTS,
    MAX_TOPICS,
    SessionDraft,
    dedup,
)
from .extraction import extract
from .reply import parse_reply

if TYPE_CHECKING:
    from ..services import Services

logger = logging.getLogger(__name__)

#: Output allowance for the lists, on top of the overview's share of a model's reply.
LIST_OUTPUT_TOKENS = 2_000


def summarize_session(
    services: Services, conv: Conversation, *, full: bool = False
) -> SessionSummary:
    """Bring a conversation's session summary up to date; see :mod:`lossless.sessions`.

    Returns the new version, or the latest one unchanged when no message came after it (and
    not *full*). The caller serializes runs on one conversation (:meth:`Engine.summarize_session`
    does); a version written meanwhile by another process makes the store refuse this one
    with :class:`~lossless.errors.ConflictError`.
    """
    cid = conv.conversation_id
    store = services.store
    latest = store.latest_session_summary(cid)
    newest = store.last_messages(cid, 1)
    if not newest:
        raise NotFoundError(
            f"conversation {cid} has no messages yet; there is nothing to summarize"
        )
    end_seq = newest[0].seq  # messages stored after this point wait for the next version
    base = None if full else latest
    if (
        base is not None
        and base.last_message_id is not None
        and store.message_seq(base.last_message_id) >= end_seq
    ):
        return base  # nothing new: no summarizer call, no new version
    draft = SessionDraft.of(base) if base is not None else None
    until = (
        store.get_message(base.last_message_id).created_at
        if base is not None and base.last_message_id is not None
        else None
    )
    runner = _Runner(services)
    first_id: int | None = base.first_message_id if base is not None else None
    last_id: int | None = None
    processed = 0
    for chunk in message_chunks(services, cid, base.last_message_id if base else None, end_seq):
        if first_id is None:
            first_id = chunk[0].message_id
        runner.covered_from = first_id
        draft = runner.step(draft, chunk, until)
        last_id = chunk[-1].message_id
        until = chunk[-1].created_at
        processed += len(chunk)
    if draft is None or last_id is None:  # unreachable: a message after base exists
        raise NotFoundError(f"conversation {cid} has no messages to summarize")
    version = (latest.version if latest is not None else 0) + 1
    created = format_ts(now())
    digest = hashlib.sha256(
        f"{cid}\0{version}\0{created}\0{draft.overview}".encode("utf-8", "surrogatepass")
    ).hexdigest()
    summary = SessionSummary(
        session_summary_id="ss_" + digest[:16],
        conversation_id=cid,
        version=version,
        summary=draft.overview,
        topics=tuple(draft.topics),
        decisions=tuple(draft.decisions),
        code_references=tuple(draft.code_references),
        key_points=tuple(draft.key_points),
        first_message_id=first_id,
        last_message_id=last_id,
        message_count=(base.message_count if base is not None else 0) + processed,
        messages_processed=processed,
        is_incremental=base is not None,
        model=runner.model_name(),
        created_at=created,
    )
    store.insert_session_summary(summary)
    return summary


def is_extractive(summarizer: Summarizer) -> bool:
    """Whether *summarizer* is the extractive one (guarded or not): it gets the deterministic
    path instead of a structured prompt."""
    inner = summarizer.inner if isinstance(summarizer, GuardedSummarizer) else summarizer
    return isinstance(inner, ExtractiveSummarizer)


class _Runner:
    """Summarizes the chunks of one run and remembers which model wrote them."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.summarizer = services.summarizer
        self.config = services.config.sessions
        self.extractive = is_extractive(self.summarizer)
        self.models: list[str | None] = []
        #: The first message the draft being continued covers (it names the draft).
        self.covered_from: int | None = None

    def model_name(self) -> str | None:
        if "fallback" in self.models:
            return "fallback"
        named = [m for m in self.models if m]
        return named[-1] if named else self.summarizer.model

    def step(
        self, previous: SessionDraft | None, chunk: Sequence[StoredMessage], until: str | None
    ) -> SessionDraft:
        sources = source_items(self.services, chunk)
        if self.extractive:  # no input limit: a message in pieces is read in one go
            self.models.append(self.summarizer.model)
            return extract(previous, chunk, self._overview(previous, sources, self.summarizer))
        # A message larger than a chunk came in pieces: one request per piece, chained.
        draft = previous
        for group in groups(sources, chunk_tokens(self.services)):
            draft = self._model_step(draft, chunk, group, until)
        if draft is None:  # unreachable: a chunk has a message
            raise ValueError("an empty chunk")
        return draft

    def _overview(
        self, previous: SessionDraft | None, sources: tuple[SourceItem, ...], writer: Summarizer
    ) -> str:
        """The extractive overview of the previous overview and the new messages."""
        items = sources
        # The previous footer goes: the new one says what this overview leaves out.
        text = "\n".join(
            line
            for line in (previous.overview if previous is not None else "").splitlines()
            if not line.startswith(EXPAND_PREFIX)
        ).strip()
        if text:
            stamp = sources[0].earliest_at
            ref = f"msg#{self.covered_from}" if self.covered_from else "previous summary"
            count = self.services.tokens.count(text)
            items = (SourceItem(ref, "summary", text, stamp, stamp, count), *sources)
        request = SummaryRequest(
            kind="session",
            depth=0,
            level="normal",
            sources=items,
            target_tokens=self.config.target_tokens,
            temperature=0.0,
            system=session_system_prompt(),
            prompt="",
            previous_context=previous.overview if previous is not None else None,
            max_output_tokens=CAP_FACTOR * self.config.target_tokens,
        )
        try:
            return writer.summarize(request).text.strip()
        except Exception as exc:  # a guarded extractive summarizer can refuse (spend guard)
            logger.warning("session overview by %s failed: %s", writer.name, exc)
            logger.debug("session overview by %s failed", writer.name, exc_info=exc)
            return ExtractiveSummarizer().summarize(request).text.strip()

    def _model_step(
        self,
        previous: SessionDraft | None,
        chunk: Sequence[StoredMessage],
        sources: tuple[SourceItem, ...],
        until: str | None,
    ) -> SessionDraft:
        previous_json = previous.to_json() if previous is not None else None

        def request(level: Level, target_tokens: int, temperature: float) -> SummaryRequest:
            return SummaryRequest(
                kind="session",
                depth=0,
                level=level,
                sources=sources,
                target_tokens=target_tokens,
                temperature=temperature,
                system=session_system_prompt(),
                prompt=session_prompt(
                    sources,
                    previous=previous_json,
                    until=until,
                    level=level,
                    target_tokens=target_tokens,
                    max_topics=MAX_TOPICS,
                ),
                previous_context=previous_json,
                max_output_tokens=CAP_FACTOR * target_tokens + LIST_OUTPUT_TOKENS,
            )

        def accept(
            result: SummaryResult, level: Level, _target: int
        ) -> tuple[SessionDraft | None, str]:
            draft = parse_reply(result.text or "")
            if draft is None:
                logger.warning(
                    "session summary by %s (%s) is not the JSON object asked for: %.200r",
                    self.summarizer.name,
                    level,
                    result.text,
                )
                return None, "not the JSON object asked for"
            return draft, ""

        draft, _, model, _ = climb(
            self.summarizer,
            request,
            accept,
            target_tokens=self.config.target_tokens,
            floor=50,
        )
        if draft is not None:
            self.models.append(model)
            return self._bounded(draft)
        self.models.append("fallback")
        return extract(previous, chunk, self._overview(previous, sources, ExtractiveSummarizer()))

    def _bounded(self, draft: SessionDraft) -> SessionDraft:
        """A model's draft within the caps (a runaway reply never grows the store unbounded)."""
        counter = self.services.tokens
        return SessionDraft(
            truncate_to_tokens(draft.overview, CAP_FACTOR * self.config.target_tokens, counter),
            dedup(draft.topics)[:MAX_TOPICS],
            dedup(draft.decisions)[-MAX_DECISIONS:],
            dedup(draft.code_references)[-MAX_CODE_REFERENCES:],
            dedup(draft.key_points)[-MAX_KEY_POINTS:],
        )
