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
- :func:`mend` (``lossless doctor --repair``) fixes what ``doctor`` finds that needs neither
  a model nor a backup: full-text indexes that do not match their text are rebuilt, context
  ordinals with gaps are renumbered in order, and large files no stored row names (left by an
  interrupted ingest) are deleted.

Every change is one transaction; no stored row is ever deleted. Model calls happen before the
transaction, so a failing summarizer leaves the store as it was.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import doctor
from .compaction import Compactor
from .compaction.compactor import message_sources, summary_sources
from .errors import ConflictError, LosslessError
from .forget import finish_scrubs
from .ingest.paths import import_path
from .ingest.transcripts import detect_transcript_format, head_values
from .model import ContextItem, Summary
from .summarize.escalation import TRUNCATION_MARKER
from .transplant import TransplantPlan, transplant

if TYPE_CHECKING:
    from .config import Config
    from .services import Services

__all__ = [
    "BackfillReport",
    "RewriteEntry",
    "RewriteReport",
    "backfill",
    "degraded",
    "dissolve",
    "mend",
    "rewrite",
]


@dataclass
class RewriteEntry:
    """One summary to rewrite, and what became of it."""

    summary: Summary
    reason: str  # asked | fallback | forgotten | truncated
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


def chosen(
    services: Services,
    summary_ids: Sequence[str] = (),
    *,
    depth: int | None = None,
    everything: bool = False,
    conversation_id: int | None = None,
) -> list[RewriteEntry]:
    """The summaries a rewrite asks for: those named (refusing one retired already), those of
    *depth*, or *everything* (within *conversation_id* when given)."""
    store = services.store
    if summary_ids:
        picked = store.get_summaries(list(dict.fromkeys(summary_ids)))
        for summary in picked:
            if summary.retired_reason:
                successor = f"; its successor is {summary.superseded_by}" * bool(
                    summary.superseded_by
                )
                raise ConflictError(
                    f"{summary.summary_id} was {summary.retired_reason} already{successor}"
                )
    elif depth is not None or everything:
        picked = store.live_summaries(conversation_id, depth=depth)
    else:
        raise ValueError("name summaries, a depth, or everything")
    return [RewriteEntry(s, "asked") for s in picked]


def degraded(services: Services, conversation_id: int | None = None) -> list[RewriteEntry]:
    """Live summaries written by the deterministic fallback, truncated, or withdrawn by a
    forget, shallowest first."""
    return [
        RewriteEntry(summary, why)
        for summary, why in services.store.degraded_summaries(conversation_id, TRUNCATION_MARKER)
    ]


def rewrite(services: Services, entries: list[RewriteEntry], *, apply: bool) -> RewriteReport:
    """Re-summarize *entries* (see the module docstring); a dry run unless *apply*.

    A summary whose rewrite still ends in the deterministic fallback is left as it is
    (``skipped`` says so) — replacing a fallback with a fallback gains nothing.
    """
    entries = sorted(entries, key=lambda e: (e.summary.depth, e.summary.created_at))
    report = RewriteReport(entries)
    if not apply or not entries:
        return report
    conversations = sorted({e.summary.conversation_id for e in entries})
    compactor = Compactor(services, config=_untimed(services))
    with services.lock(*conversations):
        replaced: dict[str, Summary] = {}
        for entry in entries:
            old = entry.summary
            parent_ids, message_ids = services.store.summary_sources(old.summary_id)
            if old.kind == "leaf":
                sources = message_sources(services.store.message_texts(message_ids))
            else:
                parents = [
                    replaced.get(p) or services.store.get_summaries([p])[0] for p in parent_ids
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
            services.store.replace_summaries(pairs)
    report.applied = True
    return report


def dissolve(services: Services, summary_id: str) -> list[ContextItem]:
    """Put a context summary's sources back in its place; returns the items put back."""
    summary = services.store.get_summaries([summary_id])[0]
    with services.lock(summary.conversation_id):
        return services.store.dissolve_summary(summary_id)


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
    services: Services,
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
    reports = import_path(services, file)
    failed = [r for r in reports if r.mode in ("failed", "passed_over")]
    if failed:
        raise failed[0].problems[0]
    conv = services.store.find_conversation(identity.session_id)
    if conv is None:
        raise LosslessError(f"{file} holds no messages to backfill")
    report.conversation_id = conv.conversation_id
    report.imported = sum(r.imported for r in reports)
    with services.lock(conv.conversation_id):
        if single_root:
            compactor = Compactor(
                services,
                config=_untimed(services).replace(fresh_tail_count=0),
            )
            while True:
                before = len(services.store.context(conv.conversation_id))
                round_ = compactor.until_under(conv.conversation_id, 1)
                report.passes += len(round_.passes)
                after = len(services.store.context(conv.conversation_id))
                if after <= 1 or after >= before:
                    break
        else:
            report.passes += len(
                Compactor(services, config=_untimed(services))
                .full_sweep(conv.conversation_id)
                .passes
            )
    report.context_summaries = len(services.store.context_summaries(conv.conversation_id))
    if into is not None:
        target = services.store.get_conversation(into)
        report.transplant = transplant(services, conv, target, apply_it=True)
    report.applied = True
    return report


def _untimed(services: Services) -> Config:
    """The engine's settings without the per-run time limit: maintenance is a batch job the
    user started and waits for; falling back half-way would only make work for later."""
    return services.config.replace(guards={"run_seconds": None})


def mend(services: Services) -> list[str]:
    """Fix what :func:`lossless.doctor.check` finds that needs neither a model nor a backup
    (see the module docstring); what was done, one line each (empty: nothing to fix)."""
    store = services.store
    done: list[str] = []
    scrubbed = finish_scrubs(services)
    if scrubbed is not None:
        done.append(
            f"finished the scrub of a forget that had stopped ({'; '.join(scrubbed.what)}):"
            f" {'; '.join(scrubbed.steps)}"
        )
    if store.fts_problems():
        store.rebuild_fts()
        done.append("rebuilt the full-text indexes from the stored text")
    for gap in store.ordinal_gaps():
        store.renumber_context(gap.conversation_id)
        done.append(
            f"renumbered the {gap.items} context items of conversation {gap.conversation_id}"
            f" (ordinals {gap.low}..{gap.high}) as 0..{gap.items - 1}, in their order"
        )
    root = services.files_dir.resolve()
    for problem in doctor.stray_files(store, services.files_dir):
        (root / problem.ids).unlink(missing_ok=True)
        done.append(f"deleted {root / problem.ids}, a file no stored message names")
    if store.archive_dir is not None:
        for path in doctor.stray_archives(store, store.archive_dir):
            path.unlink(missing_ok=True)
            done.append(f"deleted {path}, an archive file no stored message names")
    return done
