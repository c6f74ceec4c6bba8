"""Integrity checks (``lossless doctor``): read-only; each problem names ids and a fix."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import LosslessError
from .forget import being_finished
from .store.archive_files import partial_of
from .store.base import Store
from .summarize.escalation import TRUNCATION_MARKER

__all__ = [
    "CAP_WARN_SHARE",
    "Problem",
    "StoreCap",
    "archive_problems",
    "check",
    "notes",
    "store_cap",
    "stray_archives",
    "stray_files",
]

_LIMIT = 1000  # rows reported per check; a damaged store can have millions
_FROM_BACKUP = "restore the latest backup (`lossless restore BACKUP`)"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the store."""

    check: str
    ids: str
    detail: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"check": self.check, "ids": self.ids, "detail": self.detail, "fix": self.fix}


#: The share of ``max_store_bytes`` from which doctor, stats and the hooks' log warn.
CAP_WARN_SHARE = 0.8


@dataclass(frozen=True)
class StoreCap:
    """A store's size (database, write-ahead log, large files) against its cap."""

    size: int
    limit: int

    @property
    def share(self) -> float:
        return self.size / self.limit

    @property
    def near(self) -> bool:
        """At :data:`CAP_WARN_SHARE` of the cap or over it."""
        return self.share >= CAP_WARN_SHARE

    def warning(self) -> str:
        over = "over" if self.size > self.limit else "near"
        return (
            f"the store is {over} its cap: {self.size / 1e6:,.1f} MB of max_store_bytes"
            f" {self.limit / 1e6:,.1f} MB ({100 * self.share:.0f}%); raise the cap, or make"
            " room: `lossless forget` what is not needed, `lossless stats --space` shows"
            " where the bytes are"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.size,
            "max_store_bytes": self.limit,
            "share": round(self.share, 4),
            "near": self.near,
        }


def store_cap(store: Store, files_dir: Path, limit: int) -> StoreCap | None:
    """*store*'s size (its database, write-ahead log and the large files in *files_dir*)
    against *limit* bytes; ``None`` when *limit* is 0 (no cap)."""
    if not limit:
        return None
    files = 0
    if files_dir.is_dir():
        files = sum(p.stat().st_size for p in files_dir.rglob("*") if p.is_file())
    return StoreCap(sum(store.database_size().values()) + files, limit)


def check(store: Store, *, degraded: bool = False, full: bool = False) -> list[Problem]:
    """Run every integrity check; an empty list means the store is consistent. With
    *degraded*, also list the summaries ``doctor --apply`` would re-summarize (written by the
    deterministic fallback, or cut to size): not damage, but worse than they could be.

    On SQLite the file itself is checked first, page by page: ``PRAGMA quick_check`` (every
    page and record readable, no index row missing its table row), or with *full* ``PRAGMA
    integrity_check`` (also every index's content against its table)."""
    problems: list[Problem] = []
    add = problems.append

    for detail in file_problems(store, full=full):
        add(
            Problem(
                "database file",
                str(store.location),
                detail,
                f"{_FROM_BACKUP}; or save what is readable with `sqlite3 FILE .recover`",
            )
        )
    if problems:
        return problems  # the checks below read a damaged file: what they say adds nothing

    for scrub in store.scrubs_due():
        who = being_finished(scrub)
        doing = f" ({who})" if who else ""
        add(
            Problem(
                "unfinished forget",
                f"forget of {scrub.due_at}",
                f"the forget ({scrub.what}) committed, but the scrub of the space it freed did"
                f" not finish{doing}: the forgotten text's bytes remain in the store's files",
                "`lossless forget --finish` (or `lossless doctor --repair`) finishes it; on a"
                " full disk, free space about the size of the database first",
            )
        )

    for table, rowid, parent, _ in store.foreign_key_problems():
        add(
            Problem(
                "foreign keys",
                f"{table} rowid {rowid}",
                f"points at a missing row of {parent}",
                f"{_FROM_BACKUP}; lossless never deletes rows, so something else did",
            )
        )

    for conv, count, low, high in store.ordinal_gaps():
        add(
            Problem(
                "context ordinals",
                f"conversation {conv}",
                f"{count} items with ordinals {low}..{high}, expected none below 0",
                "`lossless doctor --repair` renumbers them, in their order",
            )
        )

    for conv, ordinal, kind, ident in store.dangling_items(_LIMIT):
        add(
            Problem(
                "context items",
                f"conversation {conv} ordinal {ordinal}",
                f"{kind} {ident} is missing or belongs to another conversation",
                "point the item at a row of its own conversation (transplant copies rows), or"
                f" {_FROM_BACKUP}",
            )
        )

    for conv, mid in store.unplaced_messages(_LIMIT):
        add(
            Problem(
                "reachability",
                f"msg#{mid}",
                f"message of conversation {conv} is neither in the context nor under a"
                " summary in it",
                "re-attach it: append it to the context or link it from the summary that"
                f" replaced it, or {_FROM_BACKUP}",
            )
        )

    for sid, kind in store.orphan_summaries(_LIMIT):
        add(
            Problem(
                "summary sources",
                sid,
                f"{kind} summary has no sources",
                f"re-link its sources, or {_FROM_BACKUP}",
            )
        )

    for link in store.cross_conversation_links(_LIMIT):
        other = f"msg#{link.source}" if link.source_type == "message" else link.source
        conv = link.conversation_id
        add(
            Problem(
                "cross-conversation",
                f"{link.summary_id} -> {other}",
                f"summary of conversation {conv} links a source of another conversation",
                f"copy the source into the conversation (as transplant does), or {_FROM_BACKUP}",
            )
        )

    for sid, parent, depth, pdepth in store.depth_violations(_LIMIT):
        add(
            Problem(
                "dag depth",
                f"{sid} -> {parent}",
                f"depth {depth} summary made from a depth {pdepth} summary (must be shallower)",
                "`lossless dissolve` the summary and compact again",
            )
        )

    for use in store.retired_but_live(_LIMIT):
        where = (
            f"the context of conversation {use.user}"
            if use.user_type == "context"
            else f"live summary {use.user}"
        )
        add(
            Problem(
                "retired summaries",
                use.summary_id,
                f"retired (rewritten or dissolved) but still used by {where}",
                f"point the user at the summary's successor (superseded_by), or {_FROM_BACKUP}",
            )
        )

    found = store.degraded_summaries(None, TRUNCATION_MARKER) if degraded else []
    # A forget's marker is what the owner asked for, not damage: never a problem (`lossless
    # rewrite` summarizes what remains below one, when the owner wants that).
    found = [(s, why) for s, why in found if why != "forgotten"]
    for summary, why in found[:_LIMIT]:
        fix = "`lossless doctor --apply` re-summarizes it with the configured summarizer"
        detail = (
            "written by the deterministic fallback (the summarizer failed)"
            if why == "fallback"
            else "cut to size (ends with the truncation marker)"
        )
        add(
            Problem(
                "degraded summaries",
                summary.summary_id,
                f"depth {summary.depth} summary of conversation {summary.conversation_id} {detail}",
                fix,
            )
        )

    for index, ident, detail in store.fts_problems():
        add(
            Problem(
                "full-text index",
                f"{index} {ident}",
                detail,
                "`lossless doctor --repair` rebuilds the indexes from the stored text",
            )
        )
    return problems


def notes(store: Store) -> list[str]:
    """The checks :func:`check` could not run here, each with why and what to do instead."""
    reason = store.fts_unchecked()
    return [reason] if reason else []


def stray_files(store: Store, files_dir: Path) -> list[Problem]:
    """Files under *files_dir* that no ``large_files`` row names: written by an ingest that
    was interrupted before its transaction committed (the file is written first). They hold
    nothing the store refers to."""
    if not files_dir.is_dir():
        return []
    known = store.storage_paths()
    root = files_dir.resolve()
    problems = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = str(path.relative_to(root))
        if relative not in known:
            problems.append(
                Problem(
                    "stray files",
                    relative,
                    "a file no stored message refers to (left by an interrupted ingest)",
                    f"`lossless doctor --repair` deletes it (or delete {path}); the ingest"
                    " that wrote it stored nothing and can be run again",
                )
            )
            if len(problems) >= _LIMIT:
                break
    return problems


#: An archive file no row names is reported (and ``--repair`` deletes it) once it is this old:
#: a younger one may be a running prune's, written just before its transaction.
STRAY_ARCHIVE_SECONDS = 600


def archive_problems(store: Store, folder: Path | None, *, full: bool = False) -> list[Problem]:
    """The archive files (:mod:`lossless.store.archive_files`) missing, changed or unreadable
    (*full*: each file's SHA-256 against the one recorded), archived messages no archive
    names, files a stopped prune left half-made, and archive files no row names."""
    problems: list[Problem] = []
    rows = store.archives()
    for mid in store.unfiled_archived(_LIMIT):
        problems.append(
            Problem(
                "archives",
                f"msg#{mid}",
                "marked archived, but no archive names it: its text cannot be read back",
                _FROM_BACKUP,
            )
        )
    if folder is None:
        return problems
    for row in rows:
        path = folder / row.name
        if not path.is_file() and partial_of(path).is_file():
            path = partial_of(path)  # committed, not yet named: the next read names it
        fix = f"put the file back from a copy (backup, another disk) as {folder / row.name}"
        if not path.is_file():
            detail = f"missing: the text of {row.messages:,} archived messages is in it"
            problems.append(Problem("archives", row.name, detail, fix))
            continue
        size = path.stat().st_size
        if size != row.bytes:
            detail = f"{size:,} bytes on disk, {row.bytes:,} when written: the file was changed"
            problems.append(Problem("archives", row.name, detail, fix))
        elif full and _sha256(path) != row.sha256:
            problems.append(
                Problem("archives", row.name, "its SHA-256 differs from when it was written", fix)
            )
    for path in stray_archives(store, folder, rows):
        problems.append(
            Problem(
                "stray archives",
                path.name,
                "an archive file a prune stopped before its transaction committed: it holds"
                " nothing the store names",
                f"`lossless doctor --repair` deletes it (or delete {path})",
            )
        )
    known = {r.name for r in rows}
    for path in sorted(folder.glob("archive-*.jsonl.gz")):
        if path.name not in known and _old(path):
            problems.append(
                Problem(
                    "unnamed archives",
                    path.name,
                    "an archive file this store does not name: another store's (a folder"
                    " shared through retention.archive_dir), or one a restore or forget stopped"
                    " before deleting",
                    "if no other store keeps its archives here, delete it",
                )
            )
    return problems


def stray_archives(store: Store, folder: Path, rows: list[Any] | None = None) -> list[Path]:
    """Half-made archive files in *folder* (``NAME.partial``) whose name no ``archives``
    row holds, older than :data:`STRAY_ARCHIVE_SECONDS` (a younger one may be a running
    prune's)."""
    if not folder.is_dir():
        return []
    known = {r.name for r in (store.archives() if rows is None else rows)}
    return [
        p
        for p in sorted(folder.glob("archive-*.jsonl.gz.partial"))
        if p.is_file() and p.name.removesuffix(".partial") not in known and _old(p)
    ]


def _old(path: Path) -> bool:
    return path.stat().st_mtime < time.time() - STRAY_ARCHIVE_SECONDS


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_problems(store: Store, *, full: bool = False) -> list[str]:
    """What SQLite's own check finds wrong in the database file (empty: nothing; always empty
    on PostgreSQL, which checks its pages itself)."""
    if store.backend != "sqlite":
        return []
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = store.fetchall(f"PRAGMA {pragma}(100)")
    except (LosslessError, sqlite3.DatabaseError) as exc:
        return [f"SQLite's {pragma} cannot read it: {exc}"]
    found = [str(r[0]) for r in rows if str(r[0]) != "ok"]
    return [f"SQLite's {pragma}: {line}" for line in found]
