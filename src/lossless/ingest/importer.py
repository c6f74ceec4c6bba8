"""``lossless import``: transcript files, and the SQLite databases some hosts keep instead.

A path is a transcript file, a host's database (:mod:`.host_stores`), or a folder: its
transcript files (:func:`~lossless.ingest.reconcile.import_path`) and the host databases below
it, found by their names (``openclaw-agent.sqlite``, ``state.db``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ImportProblem
from ..services import Services
from .host_stores import HOST_STORE_NAMES, host_store_kind, import_host_store, is_sqlite
from .paths import import_path as import_transcripts
from .reconcile import Progress, ReconcileReport

__all__ = ["import_path"]


def import_path(
    services: Services,
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    progress: Progress | None = None,
) -> list[ReconcileReport]:
    """Import what *path* holds (see the module docstring); one report per conversation."""
    root = Path(path).expanduser()
    if root.is_file() and format is None and is_sqlite(root):
        if host_store_kind(root) is None:
            problem = ImportProblem(
                str(root),
                1,
                "a SQLite database, but not OpenClaw's (openclaw-agent.sqlite) or Hermes"
                " Agent's (state.db); lossless imports transcripts (JSONL, JSON) and those"
                " hosts' databases (a lossless store moves with `lossless migrate-store`)",
            )
            return [ReconcileReport.failed(root, problem)]
        return import_host_store(services, root, progress=progress)
    reports = import_transcripts(services, root, format=format, progress=progress)
    if root.is_dir() and format is None:
        for name in HOST_STORE_NAMES:
            for found in sorted(root.rglob(name)):
                if host_store_kind(found) is not None:
                    reports.extend(import_host_store(services, found, progress=progress))
    return reports
