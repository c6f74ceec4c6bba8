"""Retention: ``lossless prune`` moves old text out of the store, as the owner's policy says.

Nothing leaves unless the ``[retention]`` section asks (docs/retention.md). Its rules reach the
messages of some *kinds* (tool outputs, host records, sub-agents' conversations, or all),
optionally only in conversations idle for a while, and do one of two things:

* **archive** (``archive_after_days``): the messages' text moves to a compressed archive file
  beside the store (:mod:`lossless.store.archive_files`) and the summaries over them stay as they
  are. A message is archived only when it is out of the active context and a summary covers
  it, or when its conversation has had no new message for ``context_idle_days`` (its context
  is then read back from the archive if it is assembled again), so what the model sees and
  what the summaries say do not change; ``show``, ``export``
  and the recall tools read an archived message back exactly, and ``lossless archives
  restore`` puts it back in the store.
* **forget** (``forget_after_days``): the messages are forgotten as ``lossless forget`` does
  (the summaries over them then say what was forgotten).

With ``max_store_bytes`` set and ``at_cap`` on, a store past the cap's warning line
(:data:`~lossless.doctor.CAP_WARN_SHARE`) has messages of the rules' kinds archived oldest
first, whatever their age, until it is under that line.

Each batch of at most ``retention.batch`` messages is one transaction (after its archive file
is written and flushed): a prune stopped at any point has moved whole batches or nothing of a
batch, and live writers wait at most one batch. At the end the freed space is given back to
the disk (:meth:`~lossless.store.Store.purge_freed`), unless asked not to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from .config import RetentionConfig
from .doctor import CAP_WARN_SHARE, store_cap
from .errors import StoreError
from .forget import finish_scrubs, forget_ids
from .store.archive_files import write_archive
from .timestamps import format_ts
from .timestamps import now as current_time

if TYPE_CHECKING:
    from .services import Services

__all__ = ["PruneReport", "RuleReport", "prune"]

#: Batches an at-cap prune archives at most in one run.
_CAP_ROUNDS = 10_000
#: Times a batch is chosen again when the store changed under it.
_RETRIES = 5


@dataclass
class RuleReport:
    """What one rule moved (or, in a dry run, would)."""

    rule: str
    action: str
    messages: int = 0
    #: Bytes of the messages' text in the store (text, envelopes, host facts, parts).
    text_bytes: int = 0
    #: Bytes of the archive files written.
    archive_bytes: int = 0
    archives: list[str] = field(default_factory=list)
    conversations: int = 0
    oldest: str | None = None
    newest: str | None = None


@dataclass
class PruneReport:
    """What a prune did (or, with ``dry_run``, would do)."""

    dry_run: bool
    rules: list[RuleReport]
    #: The store's size before and after (database, write-ahead log, large files).
    bytes_before: int
    bytes_after: int
    #: What giving the freed space back did (empty in a dry run, or when not asked).
    reclaimed: list[str] = field(default_factory=list)
    #: The cap and the line an at-cap prune aims under (``None`` without a cap).
    max_store_bytes: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.rules)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**asdict(self), "messages": self.messages}


#: A rule: its name, its action (``archive`` or ``forget``), the age in days it reaches (``None``
#: at the cap: any age, oldest first, until the store is under the line), the kinds it reaches.
_Rule = tuple[str, str, float | None, tuple[str, ...]]


def _policy_rules(policy: RetentionConfig, at_cap: bool) -> list[_Rule]:
    """Each rule the policy has, in the order they run."""
    rules: list[_Rule] = []
    kinds = tuple(policy.kinds)
    if policy.forget_after_days:
        days = policy.forget_after_days
        rules.append((f"forget after {days:g} days", "forget", days, kinds))
    if policy.archive_after_days:
        days = policy.archive_after_days
        rules.append((f"archive after {days:g} days", "archive", days, kinds))
    if at_cap:
        rules.append((f"archive at the cap: {', '.join(kinds)}", "archive", None, kinds))
        wider = tuple(policy.at_cap_kinds)
        if set(wider) != set(kinds):
            rules.append((f"archive at the cap: {', '.join(wider)}", "archive", None, wider))
    return rules


@contextmanager
def _one_at_a_time(folder: Path | None, wait: bool) -> Iterator[bool]:
    """Whether this process holds the prune lock of the store's archive folder (one prune
    at a time per store on a machine); without *wait*, ``False`` at once when another has it."""
    if folder is None or fcntl is None:  # pragma: no cover - Windows: no advisory locks
        yield True
        return
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".prune.lock").open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prune(
    services: Services,
    *,
    dry_run: bool = False,
    policy: RetentionConfig | None = None,
    reclaim: bool = True,
    wait: bool = True,
    progress: Callable[[RuleReport], None] | None = None,
    now: datetime | None = None,
) -> PruneReport:
    """Apply the retention *policy* (the configured one unless given); see the module doc.
    Ages are counted back from *now* (this moment unless given: a simulation's clock). One
    prune runs at a time per store: another waits for it, or, without *wait*, returns at
    once saying so."""
    with _one_at_a_time(None if dry_run else services.store.archive_dir, wait) as mine:
        if not mine:
            size = store_cap(services.store, services.files_dir, 1)
            bytes_now = size.size if size else 0
            return PruneReport(
                dry_run, [], bytes_now, bytes_now, notes=["another prune is running: left to it"]
            )
        return _prune(services, dry_run, policy, reclaim, progress, now or current_time())


def _prune(
    services: Services,
    dry_run: bool,
    policy: RetentionConfig | None,
    reclaim: bool,
    progress: Callable[[RuleReport], None] | None,
    now: datetime,
) -> PruneReport:
    store = services.store
    config = services.config
    policy = policy or config.retention
    cap_limit = config.max_store_bytes or None
    before = store_cap(store, services.files_dir, 1)
    size_before = before.size if before else 0
    report = PruneReport(dry_run, [], size_before, size_before, max_store_bytes=cap_limit)
    at_cap = policy.at_cap and cap_limit is not None
    if policy.at_cap and cap_limit is None:
        report.notes.append("retention.at_cap is on but max_store_bytes is 0 (no cap): skipped")
    rules = _policy_rules(policy, at_cap)
    if not rules:
        report.notes.append(
            "the retention policy moves nothing: set retention.archive_after_days,"
            " retention.forget_after_days or retention.at_cap (docs/retention.md)"
        )
        return report
    idle_before = _days_ago(now, policy.idle_days) if policy.idle_days else None
    context_idle_before = (
        _days_ago(now, policy.context_idle_days) if policy.context_idle_days else None
    )
    moved_any = False
    cap_need: int | None = None  # what the cap's rules must free together
    counted: set[int] = set()  # what a dry run's rules have counted
    cap_freed = 0
    for name, action, days, kinds in rules:
        rule = RuleReport(name, action)
        report.rules.append(rule)
        archive = action == "archive"
        if days is None:
            assert cap_limit is not None
            if cap_need is None:  # once for the cap's rules: what they must free together
                cap_need = _used(services) - int(cap_limit * CAP_WARN_SHARE)
            need: int | None = cap_need - cap_freed
            if need is not None and need <= 0:
                if not cap_freed:
                    report.notes.append(
                        f"the store ({_used(services) / 1e6:,.1f} MB in use) is under"
                        f" {100 * CAP_WARN_SHARE:.0f}% of max_store_bytes: nothing archived for"
                        " the cap"
                    )
                continue
        else:
            need = None
        before_id = _days_ago(now, days) if days is not None else None
        seen_convs: set[int] = set()
        after: tuple[str, int] | None = None
        freed = 0
        retries = 0
        line = int(cap_limit * CAP_WARN_SHARE) if cap_limit is not None else 0
        rounds = 0  # (an age rule ends when nothing is left to move; the cap's are bounded)
        while days is not None or rounds < _CAP_ROUNDS:
            rounds += 1
            batch = store.retention_candidates(
                context_idle_before=context_idle_before,
                kinds=kinds,
                before=before_id,
                idle_before=idle_before,
                archive=archive,
                limit=policy.batch,
                after=after if dry_run else None,
            )
            if not batch:
                break
            if dry_run:
                # Nothing moves in a dry run: a message an earlier rule counted is not
                # counted again by a later one.
                after = (batch[-1][2], batch[-1][0])
                batch = [b for b in batch if b[0] not in counted]
                if not batch:
                    continue
                counted.update(b[0] for b in batch)
            if need is not None and dry_run:
                batch = _enough(batch, need - freed)
            ids = [b[0] for b in batch]
            size = sum(b[3] for b in batch)
            if not dry_run:
                if archive:
                    if not _archive_batch(services, ids, size, name, rule, context_idle_before):
                        # The store changed under the batch (a forget, a new context, another
                        # prune): choose again, a few times.
                        retries += 1
                        if retries > _RETRIES:
                            report.notes.append(
                                f"{name}: the store kept changing under the batch; stopped"
                                f" after {_RETRIES} tries (run `lossless prune` again)"
                            )
                            break
                        continue
                else:
                    forget_ids(services, ids, how=f"retention: {name}")
                moved_any = True
            rule.messages += len(ids)
            rule.text_bytes += size
            seen_convs.update(b[1] for b in batch)
            rule.oldest = rule.oldest or batch[0][2]
            rule.newest = batch[-1][2]
            after = (batch[-1][2], batch[-1][0])
            freed += size
            if progress is not None:
                progress(rule)
            if need is not None and cap_limit is not None:
                # Enough once the bytes moved reach what had to be freed, or (a back end that
                # tells its free space) once the store measures under the line: a search
                # index keeps what it took out until its segments merge (at the end), so the
                # measure alone lags and would move more than needed.
                measured = not dry_run and store.free_bytes() is not None
                if freed >= need or (measured and _used(services) <= line):
                    break
        rule.conversations = len(seen_convs)
        if days is None:
            cap_freed += freed
    if dry_run:
        return report
    if any(r.action == "forget" and r.messages for r in report.rules):
        scrubbed = finish_scrubs(services)  # also gives the freed space back
        report.reclaimed += scrubbed.steps if scrubbed else []
    elif moved_any and reclaim:
        report.reclaimed += store.purge_freed()
    after_cap = store_cap(store, services.files_dir, 1)
    report.bytes_after = after_cap.size if after_cap else 0
    return report


def _archive_batch(
    services: Services,
    ids: list[int],
    size: int,
    rule_name: str,
    rule: RuleReport,
    context_idle_before: str | None,
) -> bool:
    """Write one batch's archive file, then move the batch in one transaction; ``False``
    (and no file left) when a message of it no longer qualifies."""
    store = services.store
    records = store.archive_records(ids)
    folder = store.archive_dir
    if folder is None:
        raise StoreError("this store was opened without an archive folder: prune through lossless")
    written = write_archive(folder, {"rule": rule_name, "messages": len(ids)}, records)
    try:
        convs = sorted({int(r["row"][1]) for r in records})
        with services.lock(*convs):
            moved = store.commit_archive(
                written,
                ids,
                text_bytes=size,
                rule=rule_name,
                context_idle_before=context_idle_before,
            )
    except BaseException:
        written.discard()
        raise
    if not moved:
        written.discard()
        return False
    written.publish()
    rule.archive_bytes += written.bytes
    rule.archives.append(written.path.name)
    return True


def _enough(batch: list[tuple[int, int, str, int]], need: int) -> list[tuple[int, int, str, int]]:
    """The first of *batch* whose bytes reach *need* (a dry run's estimate of the cap)."""
    total = 0
    for i, row in enumerate(batch):
        total += row[3]
        if total >= need:
            return batch[: i + 1]
    return batch


def _used(services: Services) -> int:
    """The store's bytes in use: its size less the free pages a database file holds."""
    cap = store_cap(services.store, services.files_dir, 1)
    return (cap.size if cap else 0) - (services.store.free_bytes() or 0)


def _days_ago(now: datetime, days: float) -> str:
    return format_ts(now - timedelta(days=days))
