"""Importing a path: a transcript file, or every transcript below a directory, each through
:func:`~lossless.ingest.reconcile.reconcile_file`; the files hosts keep beside their
transcripts are named and passed over."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ImportProblem, LosslessError, NotATranscript, NotFoundError
from .reconcile import Progress, ReconcileReport, reconcile_file

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["import_path", "transcript_files"]


def import_path(
    services: Services,
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    progress: Progress | None = None,
) -> list[ReconcileReport]:
    """Import a transcript file, or every transcript below a directory.

    In a directory, ``.jsonl`` and ``.json`` files are read. A file that cannot be read as a
    transcript does not stop the others: it gets a report with ``mode="failed"`` and the
    problem. A file a host keeps beside its transcripts (Claude Code's
    ``sessions-index.json`` and sub-agent ``.meta.json`` sidecars, OpenClaw's
    ``sessions.json``, traces and copies of a session) gets one with ``mode="passed_over"``
    and why. *progress* receives bytes done and total over all the files.
    """
    root = Path(path).expanduser()
    files = transcript_files(root)
    total = sum(f.stat().st_size for f in files)
    base = 0
    reports: list[ReconcileReport] = []
    for file in files:

        def advance(done: int, _size: int, offset: int = base) -> None:
            if progress is not None:
                progress(offset + done, total)

        copy = (_host_copy(file) or _leads_out(file, root)) if root.is_dir() else None
        if copy is not None:
            reports.append(ReconcileReport.failed(file, NotATranscript(str(file), 0, copy)))
            base += file.stat().st_size
            continue
        try:
            reports.extend(reconcile_file(services, file, format=format, progress=advance))
        except ImportProblem as problem:
            sidecar = _sidecar(file) if format is None else None
            if sidecar is not None and not isinstance(problem, NotATranscript):
                problem = NotATranscript(str(file), 0, sidecar)
            reports.append(ReconcileReport.failed(file, problem))
        base += file.stat().st_size
    return reports


#: Files hosts keep beside their transcripts, by name: JSON, and never a transcript.
_SIDECARS = {
    "sessions-index.json": "Claude Code's index of the sessions of a project",
    "sessions.json": "OpenClaw's index of an agent's sessions",
}


def _sidecar(file: Path) -> str | None:
    """What a host's own file beside its transcripts is (None: not one lossless knows)."""
    if file.name.endswith(".meta.json"):
        return "Claude Code's sidecar of a sub-agent (its type and model), not a transcript"
    known = _SIDECARS.get(file.name)
    return f"{known}, not a transcript" if known else None


#: Copies a host keeps of a transcript beside it (OpenClaw's pre-compaction checkpoints and
#: the backups of a file it found corrupt): the same session as the file itself, so a folder
#: import leaves them to be named one by one.
_HOST_COPIES = re.compile(r"\.checkpoint\.[^/]*\.jsonl$|\.jsonl\.corrupt-[^/]*\.jsonl$")


def _host_copy(file: Path) -> str | None:
    """Why a folder import leaves *file* out when it is a host's copy of a session."""
    if not _HOST_COPIES.search(file.name):
        return None
    if ".checkpoint." in file.name:
        what = "a copy OpenClaw kept before a compaction"
    else:
        what = "a copy OpenClaw kept of a file it found corrupt"
    return (
        f"{what}: the session's own file holds the same entries (import the copy by name to"
        " read it)"
    )


def _leads_out(file: Path, root: Path) -> str | None:
    """Why a folder import leaves *file* out when it is a symbolic link (or below one) that
    leads out of the folder: a folder import reads what is in the folder."""
    try:
        target = file.resolve()
        inside = target.is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return "a symbolic link that leads nowhere (a loop)"
    if inside:
        return None
    return (
        f"a symbolic link to {target}, out of the folder: a folder import reads what is in the"
        " folder (import the target by name to read it)"
    )


def transcript_files(root: Path) -> list[Path]:
    """The transcript files a path names: itself, or the ``.jsonl``/``.json`` files below it
    (hosts' own copies of a transcript among them: :func:`import_path` names and passes them
    over)."""
    if root.is_file():
        return [root]
    if root.is_dir():
        return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))
    if root.exists():
        raise LosslessError(
            f"{root} is not a regular file or a directory (a pipe, a device, a socket): a"
            " transcript is read twice and from offsets, so save it to a file and import that"
        )
    raise NotFoundError(f"{root} does not exist; give a transcript file or a directory of them")
