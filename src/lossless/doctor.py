"""Integrity checks (``lossless doctor``): read-only; each problem names ids and a fix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .store.base import Store
from .summarize.escalation import TRUNCATION_MARKER

__all__ = ["Problem", "check", "stray_files"]

_LIMIT = 1000  # rows reported per check; a damaged store can have millions


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


_REACHABLE = """
WITH RECURSIVE reach(summary_id) AS (
  SELECT summary_id FROM context_items WHERE item_type = 'summary'
  UNION
  SELECT sp.parent_summary_id FROM summary_parents sp JOIN reach r ON sp.summary_id = r.summary_id
),
placed(message_id) AS (
  SELECT message_id FROM context_items WHERE message_id IS NOT NULL
  UNION SELECT message_id FROM context_removals
  UNION SELECT sm.message_id FROM summary_messages sm JOIN reach r ON r.summary_id = sm.summary_id
)
SELECT m.conversation_id, m.message_id FROM messages m
WHERE m.message_id IN (SELECT message_id FROM messages EXCEPT SELECT message_id FROM placed)
ORDER BY m.message_id LIMIT ?
"""


def check(store: Store, *, degraded: bool = False) -> list[Problem]:
    """Run every integrity check; an empty list means the store is consistent. With
    *degraded*, also list the summaries ``doctor --apply`` would re-summarize (written by the
    deterministic fallback, or cut to size): not damage, but worse than they could be."""
    problems: list[Problem] = []
    add = problems.append

    for table, rowid, parent, _ in store.foreign_key_problems():
        add(
            Problem(
                "foreign keys",
                f"{table} rowid {rowid}",
                f"points at a missing row of {parent}",
                "restore from a backup; lossless never deletes rows, so something else did",
            )
        )

    for conv, count, low, high in store.fetchall(
        "SELECT conversation_id, count(*), min(ordinal), max(ordinal) FROM context_items"
        " GROUP BY conversation_id HAVING min(ordinal) <> 0 OR max(ordinal) <> count(*) - 1"
    ):
        add(
            Problem(
                "context ordinals",
                f"conversation {conv}",
                f"{count} items with ordinals {low}..{high}, expected 0..{count - 1}",
                "renumber the conversation's context_items in ordinal order",
            )
        )

    for conv, ordinal, kind, ident in store.fetchall(
        "SELECT ci.conversation_id, ci.ordinal, ci.item_type,"
        " coalesce(CAST(ci.message_id AS TEXT), ci.summary_id)"
        " FROM context_items ci"
        " LEFT JOIN messages m ON m.message_id = ci.message_id"
        " LEFT JOIN summaries s ON s.summary_id = ci.summary_id"
        " WHERE (ci.item_type = 'message' AND (m.message_id IS NULL"
        "        OR m.conversation_id <> ci.conversation_id))"
        "    OR (ci.item_type = 'summary' AND (s.summary_id IS NULL"
        "        OR s.conversation_id <> ci.conversation_id))"
        " LIMIT ?",
        (_LIMIT,),
    ):
        add(
            Problem(
                "context items",
                f"conversation {conv} ordinal {ordinal}",
                f"{kind} {ident} is missing or belongs to another conversation",
                "point the item at a row of its own conversation (transplant copies rows)",
            )
        )

    for conv, mid in store.fetchall(_REACHABLE, (_LIMIT,)):
        add(
            Problem(
                "reachability",
                f"msg#{mid}",
                f"message of conversation {conv} is neither in the context nor under a"
                " summary in it",
                "re-attach it: append it to the context or link it from the summary that"
                " replaced it",
            )
        )

    for sid, kind in store.fetchall(
        "SELECT s.summary_id, s.kind FROM summaries s WHERE"
        " (s.kind = 'leaf' AND NOT EXISTS"
        "   (SELECT 1 FROM summary_messages sm WHERE sm.summary_id = s.summary_id))"
        " OR (s.kind = 'condensed' AND NOT EXISTS"
        "   (SELECT 1 FROM summary_parents sp WHERE sp.summary_id = s.summary_id))"
        " LIMIT ?",
        (_LIMIT,),
    ):
        add(
            Problem(
                "summary sources",
                sid,
                f"{kind} summary has no sources",
                "dissolve it or re-link its sources",
            )
        )

    for sid, other, conv in store.fetchall(
        "SELECT sm.summary_id, 'msg#' || sm.message_id, s.conversation_id FROM summary_messages sm"
        " JOIN summaries s ON s.summary_id = sm.summary_id"
        " JOIN messages m ON m.message_id = sm.message_id"
        " WHERE m.conversation_id <> s.conversation_id"
        " UNION ALL"
        " SELECT sp.summary_id, sp.parent_summary_id, s.conversation_id FROM summary_parents sp"
        " JOIN summaries s ON s.summary_id = sp.summary_id"
        " JOIN summaries p ON p.summary_id = sp.parent_summary_id"
        " WHERE p.conversation_id <> s.conversation_id"
        " LIMIT ?",
        (_LIMIT,),
    ):
        add(
            Problem(
                "cross-conversation",
                f"{sid} -> {other}",
                f"summary of conversation {conv} links a source of another conversation",
                "copy the source into the conversation (as transplant does)",
            )
        )

    for sid, parent, depth, pdepth in store.fetchall(
        "SELECT sp.summary_id, sp.parent_summary_id, s.depth, p.depth FROM summary_parents sp"
        " JOIN summaries s ON s.summary_id = sp.summary_id"
        " JOIN summaries p ON p.summary_id = sp.parent_summary_id"
        " WHERE p.depth >= s.depth LIMIT ?",
        (_LIMIT,),
    ):
        add(
            Problem(
                "dag depth",
                f"{sid} -> {parent}",
                f"depth {depth} summary made from a depth {pdepth} summary (must be shallower)",
                "dissolve the summary and condense again",
            )
        )

    for ident, where in store.fetchall(
        "SELECT ci.summary_id, 'the context of conversation ' || ci.conversation_id"
        " FROM context_items ci JOIN summaries s ON s.summary_id = ci.summary_id"
        " WHERE s.retired_at IS NOT NULL"
        " UNION ALL"
        " SELECT sp.parent_summary_id, 'live summary ' || sp.summary_id FROM summary_parents sp"
        " JOIN summaries c ON c.summary_id = sp.summary_id"
        " JOIN summaries p ON p.summary_id = sp.parent_summary_id"
        " WHERE c.retired_at IS NULL AND p.retired_at IS NOT NULL"
        " LIMIT ?",
        (_LIMIT,),
    ):
        add(
            Problem(
                "retired summaries",
                ident,
                f"retired (rewritten or dissolved) but still used by {where}",
                "point the user at the summary's successor (superseded_by), or dissolve it",
            )
        )

    found = store.degraded_summaries(None, TRUNCATION_MARKER) if degraded else []
    for summary, why in found[:_LIMIT]:
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
                "`lossless doctor --apply` re-summarizes it with the configured summarizer",
            )
        )

    for index, ident, detail in store.fts_problems():
        add(
            Problem(
                "full-text index",
                f"{index} {ident}",
                detail,
                "rebuild the indexes: `lossless doctor --rebuild-fts`",
            )
        )
    return problems


def stray_files(store: Store, files_dir: Path) -> list[Problem]:
    """Files under *files_dir* that no ``large_files`` row names: written by an ingest that
    was interrupted before its transaction committed (the file is written first). They hold
    nothing the store refers to."""
    if not files_dir.is_dir():
        return []
    known = {str(r[0]) for r in store.fetchall("SELECT storage_path FROM large_files")}
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
                    f"delete {path}; the ingest that wrote it stored nothing and can be run again",
                )
            )
            if len(problems) >= _LIMIT:
                break
    return problems
