"""``lossless forget``: the owner takes text out of the store for good.

What can be forgotten: a conversation, its family (the conversations sharing its session
key), a range of its messages (``msg#A..msg#B``), or every message holding a text (as typed,
any case; the originals of masked secrets are searched too, so a secret's value finds the
messages that held it). A dry run says what would go, changing nothing.

The store does the forgetting in one transaction (:mod:`lossless.store.forget`): each
message becomes a tombstone, and its text leaves the messages, parts, both word indexes and
the substring index, the summaries that covered it (replaced by a marker that says what was
forgotten and when; ``lossless rewrite`` summarizes them again from what remains), large
files, session summaries, the tool log and kept originals. Then the back end is asked to make
the freed space unreadable (:meth:`~lossless.store.Store.purge_freed`: on SQLite, merged
indexes, VACUUM with secure delete, an emptied write-ahead log; on PostgreSQL, the tables
rewritten) and the large files are deleted from disk: the **scrub**.

The scrub is recorded as due in the forget's own transaction (``scrubs_due``) and the record
deleted once it is done, so a forget stopped after its commit (killed, a full disk, a lost
connection) is finished by the next command that opens the store
(:func:`finish_scrubs`), by ``lossless forget --finish`` or ``doctor --repair``; ``doctor``
reports one still due. A scrub being done by a live process is left to it.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .errors import ArgumentError, NotFoundError, StoreError
from .model import Conversation
from .retrieval.grep import grep as grep_store
from .retrieval.tools import MAX_LIMIT, MAX_REACH
from .store.archive_files import ARCHIVE_SCRUB
from .store.forget import DueScrub
from .timestamps import format_ts, now, parse_ts

if TYPE_CHECKING:
    from .services import Services

__all__ = [
    "ForgetReport",
    "ForgetUnfinished",
    "ScrubReport",
    "being_finished",
    "finish_scrubs",
    "forget",
    "forget_ids",
]

#: A scrub claimed by a process on another machine (a shared PostgreSQL store) is taken
#: over once its claim is this old (one on this machine: once its process is gone).
CLAIM_SECONDS = 3600


@dataclass
class ForgetReport:
    """What a forget took out (or, in a dry run, would)."""

    what: str
    conversations: list[int]
    messages: int
    first_ids: list[str]
    summaries: int
    files: int
    session_summaries: int
    tool_executions: int
    originals: int
    context_items: int
    dry_run: bool
    forgotten_at: str | None = None
    purged: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def forget(
    services: Services,
    conversations: list[Conversation],
    *,
    whole: bool,
    message_range: tuple[int, int] | None = None,
    matching: str | None = None,
    dry_run: bool = False,
    allow_reimport: bool = False,
) -> ForgetReport:
    """Forget messages of *conversations* (see the module doc): all of them (*whole*), those
    in *message_range* (message ids, both ends included), or those holding *matching*."""
    store = services.store
    conv_ids = [c.conversation_id for c in conversations]
    if whole:
        what = "conversation" if len(conversations) == 1 else "family"
        ids = store.message_ids_of(conv_ids)
    elif message_range is not None:
        first, last = message_range
        if first > last:
            raise ArgumentError(f"the range msg#{first}..msg#{last} is empty: give the lower first")
        ids = [m for m in store.message_ids_of(conv_ids) if first <= m <= last]
        if not ids:
            raise NotFoundError(
                f"no message of {_names(conversations)} lies in msg#{first}..msg#{last}:"
                " `lossless show` lists a conversation's messages with their ids"
            )
        what = f"messages msg#{first}..msg#{last}"
    elif matching is not None:
        ids = _matching(services, matching, conv_ids if conversations else None)
        what = "messages matching a search"
    else:
        raise ArgumentError("say what to forget: a conversation, a message range or a search")
    ids = ids if whole else store.not_forgotten(ids)
    stamp = format_ts(now())
    touched = sorted(set(store.conversations_of(ids))) if ids else []
    with services.lock(*touched):
        counts = store.forget_messages(
            touched,
            ids,
            marker=_marker(services, stamp[:10]),
            whole=conv_ids if whole else (),
            how=what,
            dry_run=dry_run,
            allow_reimport=allow_reimport,
        )
    report = ForgetReport(
        what=what,
        conversations=touched,
        messages=counts.messages,
        first_ids=[f"msg#{m}" for m in ids[:10]],
        summaries=len(counts.summaries),
        files=len(counts.files),
        session_summaries=counts.session_summaries,
        tool_executions=counts.tool_executions,
        originals=counts.originals,
        context_items=counts.context_items,
        dry_run=dry_run,
    )
    if dry_run:
        return report
    if not ids:
        # Nothing new to forget; an earlier forget's scrub may still be due.
        scrubbed = finish_scrubs(services)
        report.purged = scrubbed.steps if scrubbed else []
        return report
    report.forgotten_at = stamp
    try:
        scrubbed = finish_scrubs(services)
    except StoreError as exc:
        raise ForgetUnfinished(report, exc) from exc
    report.purged = scrubbed.steps if scrubbed else []
    return report


def _marker(services: Services, day: str) -> Callable[[str], tuple[str, int]]:
    """What a summary over forgotten messages says instead of its text."""

    def marker(summary_id: str) -> tuple[str, int]:
        text = (
            f"[forgotten on {day}: messages below this summary were forgotten at the owner's"
            f" request, and its text with them. What remains below it: lcm_describe"
            f" {summary_id}; `lossless rewrite` summarizes it again.]"
        )
        return text, services.tokens.count(text)

    return marker


def forget_ids(services: Services, message_ids: Sequence[int], *, how: str) -> int:
    """Forget *message_ids* in one transaction (a retention rule's batch), leaving the scrub
    of the freed space due for :func:`finish_scrubs` (run once after every batch); the
    messages forgotten."""
    store = services.store
    ids = store.not_forgotten(list(message_ids))
    if not ids:
        return 0
    touched = sorted(set(store.conversations_of(ids)))
    with services.lock(*touched):
        counts = store.forget_messages(
            touched, ids, marker=_marker(services, format_ts(now())[:10]), how=how
        )
    return counts.messages


class ForgetUnfinished(StoreError):
    """A forget committed (its messages are tombstones, no read finds their text) whose scrub
    of the freed space did not finish: the text's bytes remain in the store's files until it
    does. ``report`` says what was forgotten."""

    def __init__(self, report: ForgetReport, cause: StoreError) -> None:
        self.report = report
        super().__init__(
            f"forgot {report.messages:,} message(s) of conversation(s)"
            f" {', '.join(map(str, report.conversations))}: no search, view or export shows"
            f" their text any more; but the scrub of the space it left did not finish"
            f" ({_reason(cause)}), so its bytes remain in the store's files for now. Fix what"
            " stopped"
            " it and run `lossless forget --finish` (the next lossless command tries too;"
            " `lossless doctor` reports it until it is done)"
        )


def _reason(cause: StoreError) -> str:
    """What stopped a scrub, without the advice a failed write's error gives about itself
    (that nothing of *it* was stored: true of the scrub's step, not of the forget)."""
    return str(cause).split("; nothing of this write was stored")[0]


@dataclass
class ScrubReport:
    """The scrubs a call finished: what each forget was, and the steps taken."""

    what: list[str]
    steps: list[str]
    files: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def finish_scrubs(services: Services) -> ScrubReport | None:
    """Finish every forget's scrub still due that no live process is finishing: delete its
    large files, make the freed space unreadable, and record it done. ``None`` when none was
    due (or the ones due are being finished by another process). Raises :class:`StoreError`
    when the scrub cannot finish (a full disk, a read-only file): it stays due."""
    store = services.store
    if not store.scrubs_due():
        return None
    claim = f"{socket.gethostname()}:{os.getpid()}"
    mine = store.claim_scrubs(claim, _abandoned)
    if not mine:
        return None
    files = rewritten = 0
    for scrub in mine:
        for relative in scrub.files:
            if relative.startswith(ARCHIVE_SCRUB):
                # An archive file that held forgotten messages: written again without them
                # (or deleted when it held nothing else), then the old file deleted.
                rewritten += store.rewrite_archive(relative.removeprefix(ARCHIVE_SCRUB))
                continue
            path = services.files_dir / relative
            if path.exists():
                path.unlink()
                files += 1
    steps = store.purge_freed()
    store.scrubs_done([s.scrub_id for s in mine])
    if files:
        steps.insert(0, f"deleted {files:,} large file(s)")
    if rewritten:
        steps.insert(0, f"wrote {rewritten:,} archive file(s) again without the forgotten messages")
    return ScrubReport(what=[s.what for s in mine], steps=steps, files=files)


def being_finished(scrub: DueScrub) -> str | None:
    """Who is finishing *scrub* now, in words (``None``: no other live process is)."""
    if scrub.claimed_by is None or _abandoned(scrub):
        return None
    host, _, pid = scrub.claimed_by.rpartition(":")
    if host == socket.gethostname() and pid == str(os.getpid()):
        return None  # this process: it tried, and says so itself
    return f"process {pid} on {host} has been finishing it since {scrub.claimed_at}"


def _abandoned(scrub: DueScrub) -> bool:
    """Whether the process that claimed *scrub* stopped before finishing it."""
    host, _, pid = (scrub.claimed_by or "").rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # alive, another user's
        return False
    claimed = parse_ts(scrub.claimed_at) if scrub.claimed_at else None
    return claimed is None or now() - claimed > timedelta(seconds=CLAIM_SECONDS)


def _matching(services: Services, text: str, conversation_ids: list[int] | None) -> list[int]:
    """The messages holding *text* (any case), their masked originals included; at most
    :data:`MAX_REACH` of them (more is refused: a forget that large is a conversation's)."""
    if not text.strip():
        raise ArgumentError("the text to forget is empty")
    pattern = "(?i)" + re.escape(text)
    found: list[int] = []
    offset = 0
    while True:
        page = grep_store(
            services.store,
            pattern,
            conversation_ids=conversation_ids,
            mode="regex",
            scope="messages",
            sort="recency",
            limit=MAX_LIMIT,
            offset=offset,
            reveal=True,
            max_rows=10_000_000,
            max_seconds=120.0,
        )
        if page.truncated:
            raise ArgumentError(
                "the search for that text stopped at its time bound before reading every"
                " message: narrow it to a conversation (--conversation), or forget by range"
            )
        found += [int(h.id.removeprefix("msg#")) for h in page.hits]
        if not page.more:
            # Archived messages' text is in their archive files: read there too.
            found += services.store.archived_holding(text, conversation_ids)
            return sorted(set(found))
        offset += MAX_LIMIT
        if offset + MAX_LIMIT > MAX_REACH:
            raise ArgumentError(
                f"more than {MAX_REACH - MAX_LIMIT:,} messages hold that text: forget their"
                " conversations, or narrow it to one (--conversation)"
            )


def _names(conversations: list[Conversation]) -> str:
    return ", ".join(f"conversation {c.conversation_id} ({c.session_id})" for c in conversations)
