"""Work on the summary DAG after the fact: rewrite, repair and dissolve summaries.

- :func:`rewrite` re-summarizes chosen summaries with the configured summarizer, shallowest
  first, so a rewritten condensed summary is made from the rewritten versions of its sources.
  Each new summary takes its predecessor's place in the context and under the summaries made
  from it; the predecessor is kept, retired as ``rewritten`` and naming its successor.
- :func:`degraded` finds the summaries ``lossless doctor --apply`` repairs this way: written
  by the deterministic fallback, or cut to size (they end with the truncation marker).
- :func:`dissolve` undoes a condensation: the sources of a summary in the context go back in
  its place and the summary is retired as ``dissolved``.
- :func:`backfill` imports an old transcript as its own conversation, compacts it (down to
  one root summary if asked) and can transplant the result into another conversation.

Every change is one transaction; nothing is ever deleted. Model calls happen before the
transaction, so a failing summarizer leaves the store as it was.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .compaction import Compactor, message_sources, summary_sources
from .errors import LosslessError
from .ingest.transcripts import detect_transcript_format, head_values
from .model import ContextItem, Summary
from .summarize.escalation import TRUNCATION_MARKER
from .transplant import TransplantPlan

if TYPE_CHECKING:
    from .config import Config
    from .engine import Engine

__all__ = [
    "BackfillReport",
    "RewriteEntry",
    "RewriteReport",
    "backfill",
    "degraded",
    "dissolve",
    "rewrite",
]


@dataclass
class RewriteEntry:
    """One summary to rewrite, and what became of it."""

    summary: Summary
    reason: str  # asked | fallback | truncated
    new_id: str | None = None
    new_tokens: int | None = None
    level: str | None = None  # normal | aggressive | fallback
    skipped: str | None = None  # why it was left as it is

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        s = self.summary
        return {
            "summary_id": s.summary_id,
            "conversation_id": s.conversation_id,
            "kind": s.kind,
            "depth": s.depth,
            "tokens": s.token_count,
            "reason": self.reason,
            "new_id": self.new_id,
            "new_tokens": self.new_tokens,
            "level": self.level,
            "skipped": self.skipped,
        }


@dataclass
class RewriteReport:
    """What a rewrite did (or, without ``applied``, would do)."""

    entries: list[RewriteEntry] = field(default_factory=list)
    applied: bool = False
    calls: int = 0

    @property
    def rewritten(self) -> list[RewriteEntry]:
        """The entries that were replaced."""
        return [e for e in self.entries if e.new_id is not None and e.skipped is None]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "applied": self.applied,
            "summaries": [e.to_dict() for e in self.entries],
            "rewritten": len(self.rewritten),
            "summarizer_calls": self.calls,
        }


def degraded(engine: Engine, conversation_id: int | None = None) -> list[RewriteEntry]:
    """Live summaries written by the deterministic fallback or truncated, shallowest first."""
    return [
        RewriteEntry(summary, why)
        for summary, why in engine.store.degraded_summaries(conversation_id, TRUNCATION_MARKER)
    ]


def rewrite(engine: Engine, entries: list[RewriteEntry], *, apply: bool) -> RewriteReport:
    """Re-summarize *entries* (see the module docstring); a dry run unless *apply*.

    A summary whose rewrite still ends in the deterministic fallback is left as it is
    (``skipped`` says so) — replacing a fallback with a fallback gains nothing.
    """
    entries = sorted(entries, key=lambda e: (e.summary.depth, e.summary.created_at))
    report = RewriteReport(entries)
    if not apply or not entries:
        return report
    conversations = sorted({e.summary.conversation_id for e in entries})
    compactor = Compactor(engine, engine.summarizer, config=_untimed(engine))
    with engine.lock(*conversations):
        replaced: dict[str, Summary] = {}
        for entry in entries:
            old = entry.summary
            parent_ids, message_ids = engine.store.summary_sources(old.summary_id)
            if old.kind == "leaf":
                sources = message_sources(engine.store.get_messages_by_id(message_ids))
            else:
                parents = [
                    replaced.get(p) or engine.store.get_summaries([p])[0] for p in parent_ids
                ]
                sources = summary_sources(parents)
            new, outcome, calls = compactor.summarize(
                old.conversation_id,
                "leaf" if old.kind == "leaf" else "condensed",
                old.depth,
                sources,
                None,
                descendants=old.descendant_count,
                file_ids=old.file_ids,
            )
            report.calls += calls
            entry.level = outcome.level
            if outcome.level == "fallback":
                entry.skipped = "the summarizer failed again; left as it is"
                continue
            entry.new_id, entry.new_tokens = new.summary_id, new.token_count
            replaced[old.summary_id] = new
        pairs = [(e.summary.summary_id, replaced[e.summary.summary_id]) for e in report.rewritten]
        if pairs:
            engine.store.replace_summaries(pairs)
    report.applied = True
    return report


def dissolve(engine: Engine, summary_id: str) -> list[ContextItem]:
    """Put a context summary's sources back in its place; returns the items put back."""
    summary = engine.summary(summary_id)
    with engine.lock(summary.conversation_id):
        return engine.store.dissolve_summary(summary_id)


@dataclass
class BackfillReport:
    """What a backfill did (or, without ``applied``, would do)."""

    path: str
    format: str
    session_id: str
    single_root: bool
    into: int | None
    applied: bool = False
    conversation_id: int | None = None
    imported: int = 0
    passes: int = 0
    context_summaries: int = 0
    transplant: TransplantPlan | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "format": self.format,
            "session_id": self.session_id,
            "single_root": self.single_root,
            "into": self.into,
            "applied": self.applied,
            "conversation_id": self.conversation_id,
            "imported": self.imported,
            "passes": self.passes,
            "context_summaries": self.context_summaries,
            "transplant": self.transplant.to_dict() if self.transplant else None,
        }


def backfill(
    engine: Engine,
    path: str | os.PathLike[str],
    *,
    into: int | None = None,
    single_root: bool = False,
    apply: bool = False,
) -> BackfillReport:
    """Import an old transcript as its own conversation, compact it — with *single_root*,
    everything including the fresh tail, down to one root summary where the DAG allows — and
    with *into*, transplant the result into that conversation. A dry run unless *apply*
    (it then only identifies the transcript)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise LosslessError(f"{file} is not a file; give the path of one transcript")
    fmt = detect_transcript_format(file)
    head, _ = head_values(file)
    identity = fmt.identify(file, head)
    report = BackfillReport(str(file), fmt.name, identity.session_id, single_root, into)
    if not apply:
        return report
    reports = engine.import_path(file)
    failed = [r for r in reports if r.mode in ("failed", "passed_over")]
    if failed:
        raise failed[0].problems[0]
    conv = engine.conversation(identity.session_id)
    report.conversation_id = conv.conversation_id
    report.imported = sum(r.imported for r in reports)
    with engine.lock(conv.conversation_id):
        if single_root:
            compactor = Compactor(
                engine,
                engine.summarizer,
                config=_untimed(engine).replace(fresh_tail_count=0),
            )
            while True:
                before = len(engine.store.context(conv.conversation_id))
                round_ = compactor.until_under(conv.conversation_id, 1)
                report.passes += len(round_.passes)
                after = len(engine.store.context(conv.conversation_id))
                if after <= 1 or after >= before:
                    break
        else:
            report.passes += len(
                Compactor(engine, engine.summarizer, config=_untimed(engine))
                .full_sweep(conv.conversation_id)
                .passes
            )
    report.context_summaries = len(engine.store.context_summaries(conv.conversation_id))
    if into is not None:
        report.transplant = engine.transplant(conv.conversation_id, into, apply=True)
    report.applied = True
    return report


def _untimed(engine: Engine) -> Config:
    """The engine's settings without the per-run time limit: maintenance is a batch job the
    user started and waits for; falling back half-way would only make work for later."""
    return engine.config.replace(guards={"run_seconds": None})
