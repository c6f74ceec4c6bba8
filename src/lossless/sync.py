"""Find the transcripts the installed agent hosts write, import what is new, and follow them.

Each host keeps its sessions in a folder of its own:

* Claude Code — ``$CLAUDE_CONFIG_DIR/projects`` (default ``~/.claude/projects``);
* Codex CLI — ``$CODEX_HOME/sessions`` (default ``~/.codex/sessions``);
* OpenClaw — ``$OPENCLAW_STATE_DIR/agents/<agent>/sessions`` (default ``~/.openclaw``), the
  session files of the releases that keep them as files, and
  ``agents/<agent>/agent/openclaw-agent.sqlite``, the database 2026.9 keeps them in;
* Hermes Agent — ``$HERMES_HOME/state.db`` (default ``~/.hermes``).

:func:`sync` imports every transcript below the folders that exist (the import reads only
what a file gained since its checkpoint, so a pass over unchanged files costs a few reads
each). :func:`watch` then follows them: file-system events (the ``watchdog`` package, the
``watch`` extra) name the files that changed, and each is imported after it has been quiet
for a moment. A host that is still writing its last line leaves it for the next pass: a line
without its newline is stored only once it is whole.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import LosslessError
from .ingest.host_stores import HOST_STORE_NAMES

if TYPE_CHECKING:
    from .engine import Engine
    from .ingest.reconcile import ReconcileReport

__all__ = ["HOSTS", "HostFolder", "SyncReport", "host_folders", "sync", "watch"]

logger = logging.getLogger(__name__)

WATCH_HINT = "lossless sync --watch follows files with watchdog: pip install 'lossless[watch]'"
#: Seconds a changed file must stay quiet before it is imported (a host writes a turn in
#: several appends).
QUIET_SECONDS = 0.3


@dataclass(frozen=True)
class HostFolder:
    """Where one host keeps its transcripts: a folder, or the database it keeps them in."""

    host: str
    path: Path

    @property
    def exists(self) -> bool:
        """Whether it is there (the host is installed and has written sessions)."""
        return self.path.exists()


def _home() -> Path:
    return Path.home()


def _claude_code() -> list[Path]:
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return [Path(base).expanduser() / "projects" if base else _home() / ".claude" / "projects"]


def _codex() -> list[Path]:
    base = os.environ.get("CODEX_HOME")
    return [Path(base).expanduser() / "sessions" if base else _home() / ".codex" / "sessions"]


def openclaw_agents() -> Path:
    """The folder of OpenClaw's agents (each keeps its sessions below it)."""
    return (
        Path(os.environ.get("OPENCLAW_STATE_DIR") or _home() / ".openclaw").expanduser() / "agents"
    )


def _openclaw() -> list[Path]:
    agents = openclaw_agents()
    if not agents.is_dir():
        return [agents]
    found = []
    for agent in sorted(p for p in agents.iterdir() if p.is_dir()):
        found += [agent / "sessions", agent / "agent" / "openclaw-agent.sqlite"]
    return found


def _hermes() -> list[Path]:
    base = os.environ.get("HERMES_HOME")
    return [(Path(base).expanduser() if base else _home() / ".hermes") / "state.db"]


#: Each host's folders, found from its own environment variables and defaults.
HOSTS: dict[str, Callable[[], list[Path]]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "openclaw": _openclaw,
    "hermes": _hermes,
}


def host_folders(hosts: Iterable[str] | None = None) -> list[HostFolder]:
    """The transcript folders of *hosts* (default: every host lossless knows)."""
    chosen = list(hosts) if hosts else list(HOSTS)
    unknown = [h for h in chosen if h not in HOSTS]
    if unknown:
        raise LosslessError(f"unknown host {', '.join(unknown)}; lossless syncs {', '.join(HOSTS)}")
    return [HostFolder(host, path) for host in chosen for path in HOSTS[host]()]


@dataclass
class SyncReport:
    """What one pass did, per file imported."""

    folders: list[HostFolder]
    reports: list[ReconcileReport] = field(default_factory=list)

    @property
    def imported(self) -> int:
        """Messages stored by the pass."""
        return sum(r.imported + r.off_branch_stored for r in self.reports)

    @property
    def problems(self) -> int:
        """Lines or files that could not be imported."""
        return sum(len(r.not_imported) for r in self.reports)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "folders": [
                {"host": f.host, "path": str(f.path), "exists": f.exists} for f in self.folders
            ],
            "imported": self.imported,
            "files": [r.to_dict() for r in self.reports if r.mode != "unchanged"],
            "unchanged": sum(1 for r in self.reports if r.mode == "unchanged"),
        }


def sync(engine: Engine, folders: list[HostFolder]) -> SyncReport:
    """Import what is new below each existing folder."""
    report = SyncReport(folders)
    for folder in folders:
        if folder.exists:
            report.reports += engine.import_path(folder.path)
    return report


def watch(
    engine: Engine,
    folders: list[HostFolder],
    on_import: Callable[[list[ReconcileReport]], None],
    stop: threading.Event,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Follow *folders* until *stop* is set: each transcript that changes is imported once it
    has been quiet for :data:`QUIET_SECONDS`; *on_import* gets the reports of each import,
    and *on_ready* is called once the folders are watched.

    Folders that do not exist yet are watched from their nearest existing parent, so a host
    installed while the watch runs is picked up.
    """
    try:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer
    except ModuleNotFoundError as exc:
        raise LosslessError(WATCH_HINT) from exc
    changed: queue.Queue[Path] = queue.Queue()
    roots = [f.path for f in folders]
    # A database is watched through its folder (its writes land in its -wal file beside it).
    bases = [r.parent if r.suffix in (".sqlite", ".db") else r for r in roots]

    class Changes(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            if event.event_type not in ("created", "modified", "moved", "closed"):
                return
            raw = getattr(event, "dest_path", "") or event.src_path
            path = _watched(Path(os.fsdecode(raw)))
            if path is not None and any(_below(path, r) for r in roots):
                changed.put(path)

    observer = Observer()
    watched: set[Path] = set()
    for root in bases:
        base = root
        while not base.is_dir() and base != base.parent:
            base = base.parent
        if base not in watched:
            observer.schedule(Changes(), str(base), recursive=True)
            watched.add(base)
    observer.start()
    # A change made while the watch was starting has no event: one pass over the folders
    # now (cheap: checkpoints) catches it, and from here on the events say what changed.
    try:
        for folder in folders:
            if folder.exists:
                on_import(engine.import_path(folder.path))
        if on_ready is not None:
            on_ready()
        pending: dict[Path, float] = {}
        while not stop.is_set():
            wait = (
                max(0.0, min(pending.values()) + QUIET_SECONDS - time.monotonic())
                if pending
                else 0.5
            )
            try:
                pending[changed.get(timeout=wait)] = time.monotonic()
                continue
            except queue.Empty:
                pass
            now = time.monotonic()
            ready = [p for p, t in pending.items() if now - t >= QUIET_SECONDS]
            for path in ready:
                del pending[path]
                if not any(_within(path, r) for r in roots):
                    logger.warning(
                        "not following %s: a symbolic link out of the watched folders", path
                    )
                    continue
                if path.is_file():
                    try:
                        on_import(engine.import_path(path))
                    except LosslessError as exc:
                        logger.warning("could not import %s: %s", path, exc)
    except KeyboardInterrupt:
        # Told to stop (Ctrl-C, SIGTERM) in the middle of anything: what each import stored
        # is stored (batch by batch, with its checkpoint); the next run reads on from there.
        stop.set()
    finally:
        observer.stop()
        observer.join(timeout=5)


def _watched(path: Path) -> Path | None:
    """The file to import when *path* changed: a transcript, or a host's database (a write to
    its ``-wal`` or ``-shm`` file is a write to it)."""
    if path.suffix in (".jsonl", ".json"):
        return path
    name = path.name.removesuffix("-wal").removesuffix("-shm")
    return path.with_name(name) if name in HOST_STORE_NAMES else None


def _within(path: Path, root: Path) -> bool:
    """Whether *path*, its links followed, is still below *root* (its links followed)."""
    try:
        return _below(path.resolve(), root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def _below(path: Path, root: Path) -> bool:
    if path == root:
        return True
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True
