"""The engine's retention: ``prune`` (archive or forget what the policy says), the archive
files, and ``unarchive`` (their text back in the store)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from ..config import Config, RetentionConfig
from ..errors import ArgumentError, NotFoundError
from ..retention import PruneReport, RuleReport, prune
from ..store.archive import ArchiveRow
from .base import Facade

__all__ = ["Retention", "archive_dir_for"]


def archive_dir_for(config: Config, files_dir: Path) -> Path:
    """Where archive files go: ``retention.archive_dir``, else a folder beside the large
    files' (``archive`` beside ``files``, ``<database>-archive`` beside
    ``<database>-files``)."""
    if config.retention.archive_dir:
        return Path(config.retention.archive_dir).expanduser()
    name = files_dir.name
    if name == "files":
        return files_dir.with_name("archive")
    if name.endswith("-files"):
        return files_dir.with_name(name.removesuffix("-files") + "-archive")
    if name.startswith("files-"):
        return files_dir.with_name("archive-" + name.removeprefix("files-"))
    return files_dir.with_name(name + "-archive")


class Retention(Facade):
    """Moving old text out of the store (see :mod:`lossless.retention`)."""

    @property
    def archive_dir(self) -> Path:
        """Where this store's archive files are."""
        folder = self.store.archive_dir
        assert folder is not None  # the engine sets it when it opens the store
        return folder

    def prune(
        self,
        *,
        dry_run: bool = False,
        policy: RetentionConfig | None = None,
        reclaim: bool = True,
        wait: bool = True,
        progress: Callable[[RuleReport], None] | None = None,
        now: datetime | None = None,
    ) -> PruneReport:
        """Apply the retention policy (the configured one unless *policy*): archive or
        forget what it names, in bounded transactions; *dry_run* says what would go and
        changes nothing; *reclaim* gives the freed space back to the disk at the end. One
        prune runs at a time per store: without *wait*, another's running returns at once. Ages
        count back from *now* (this moment unless given)."""
        return prune(
            self.services,
            dry_run=dry_run,
            policy=policy,
            reclaim=reclaim,
            wait=wait,
            progress=progress,
            now=now,
        )

    def archives(self) -> list[ArchiveRow]:
        """Every archive file the store names, oldest first."""
        return self.store.archives()

    def restore_archives(self, names: Sequence[str] = (), *, every: bool = False) -> int:
        """Put the text of the messages archived in the archive files *names* (or in all
        of them, *every*) back in the store; each file is then written again without them,
        or deleted when emptied. Messages put back."""
        if not names and not every:
            raise ArgumentError("name the archive files to read back (`lossless archives`), or all")
        if names:
            known = {a.name for a in self.store.archives()}
            for name in names:
                if name not in known:
                    raise NotFoundError(
                        f"no archive {name!r} in this store; `lossless archives` lists them"
                    )
        ids = self.store.archived_ids(None if every else list(names))
        done = 0
        for start in range(0, len(ids), self.config.retention.batch):
            chunk = ids[start : start + self.config.retention.batch]
            convs = sorted({m.conversation_id for m in self.store.get_messages_by_id(chunk)})
            with self.services.lock(*convs):
                held = self.store.restore_archived(chunk)
            for name in held:
                # No file keeps the lines of a message back in the store (a forget of it
                # later must find its text in one place only).
                self.store.rewrite_archive(name)
            done += len(chunk)
        return done
