"""Bootstrap reconciliation: bring the store up to date with a transcript file.

The spec's algorithm, made incremental and safe to repeat:

1. If the conversation has a checkpoint for this file and the file is the same file grown
   by appends (same path, format, first line and header id; not smaller; the bytes of the
   last line read are unchanged), only the new tail is read (*tail* mode). Otherwise the
   whole file is read (*full* mode): a new file, a rewritten or rotated one, a truncated one.
2. Pass one reads ids, parent ids and byte offsets of every entry. For tree formats the
   active branch is the path from the last entry back to the root (following parent ids);
   entries on abandoned branches are counted, not imported.
3. The anchor is the newest active-branch entry already stored, matched on stable entry ids
   (falling back to matching role and text when the store has no ids from this file). Only
   what follows the anchor is imported, and any entry whose id is already stored is skipped
   anyway, so replaying the same file never duplicates a message.
4. Pass two seeks to the selected entries, normalizes them and stores them in batches, each
   batch one transaction; the checkpoint is written last. Every entry carries a stable id,
   so a crash between the transcript write and the store write (or in the middle of an
   import) is repaired by the next bootstrap without storing anything twice.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..codec import safe_id
from ..errors import (
    ImportProblem,
    LosslessError,
    NotATranscript,
    UnknownShapeError,
)
from ..model import Checkpoint, Conversation, NormalizedMessage
from .branches import Skeleton, active_path
from .entries import Entry, FileIdentity, Line, TranscriptFormat
from .pipeline import externalize, files_taken_back, prepare
from .progress import (
    Progress,
)
from .progress import (
    forward as _forward,
)
from .progress import (
    indexing as _indexing,
)
from .progress import (
    read_so_far as _read_so_far,
)
from .transcripts import (
    FORMATS,
    check_encoding,
    detect_transcript_format,
    get_format,
    head_hash,
    head_values,
    iter_json_array,
    no_known_shape,
    over_limit,
    parse_json,
    read_lines,
)

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["Progress", "ReconcileReport", "reconcile_file"]


BATCH_MESSAGES = 1000
BATCH_BYTES = 8 << 20
#: Parsed entries of files up to this size stay in memory between the two passes; larger
#: files are read again in pass two so memory stays flat.
CACHE_BYTES = 32 << 20
#: How many of the newest stored messages a content anchor is matched against.
ANCHOR_WINDOW = 32


@dataclass
class ReconcileReport:
    """What reconciling one file (one lane of it) did."""

    path: str
    format: str
    session_id: str
    conversation_id: int
    mode: str = "full"
    imported: int = 0
    already_stored: int = 0
    off_branch: int = 0
    #: Of the off-branch messages, how many this run stored (in ``branch_conversation_id``).
    off_branch_stored: int = 0
    branch_conversation_id: int | None = None
    missing_before_anchor: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    #: The lines that were not imported (mode ``failed``: why the file was not read;
    #: ``passed_over``: why it needed no reading).
    problems: list[ImportProblem] = field(default_factory=list)

    @property
    def not_imported(self) -> list[ImportProblem]:
        """What this file holds that is not in the store: its bad lines, or the file itself
        when it could not be read (empty when all of it was imported; a file passed over,
        not being a transcript, has nothing to import)."""
        return [] if self.mode == "passed_over" else self.problems

    @classmethod
    def failed(cls, path: Path, problem: ImportProblem) -> ReconcileReport:
        """The report of a file that could not be read as a transcript at all (mode
        ``failed``), or that is not one (mode ``passed_over``: a trace, an index)."""
        mode = "passed_over" if isinstance(problem, NotATranscript) else "failed"
        return cls(str(path), "", "", 0, mode=mode, problems=[problem])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for ``--json``)."""
        return {
            "path": self.path,
            "format": self.format,
            "session_id": self.session_id,
            "conversation_id": self.conversation_id,
            "mode": self.mode,
            "imported": self.imported,
            "already_stored": self.already_stored,
            "off_branch": self.off_branch,
            "off_branch_stored": self.off_branch_stored,
            "branch_conversation_id": self.branch_conversation_id,
            "missing_before_anchor": self.missing_before_anchor,
            "skipped": dict(self.skipped),
            "problems": [p.to_dict() for p in self.problems],
        }


@dataclass
class _Scan:
    entries: list[Skeleton] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    problems: list[ImportProblem] = field(default_factory=list)
    #: Messages of the file in other lanes than this one.
    elsewhere: int = 0
    end_offset: int = 0
    end_line: int = 0
    last_line_start: int = 0
    last_line_hash: str = hashlib.sha256(b"").hexdigest()
    last_entry_id: str | None = None
    title: str | None = None
    status: str | None = None
    host_compactions: list[dict[str, Any]] = field(default_factory=list)
    cache: bool = True


#: The passes already made over a file in one import, by where they started (byte offset,
#: line number): each lane's findings. A file of many lanes is read once, not once a lane.
_Scans = dict[tuple[int, int], dict[str, _Scan]]


def reconcile_file(
    services: Services,
    path: str | Path,
    *,
    format: str | None = None,  # the public keyword is "format"
    session_id: str | None = None,
    progress: Progress | None = None,
) -> list[ReconcileReport]:
    """Reconcile the store with one transcript file; one report per conversation it feeds."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise LosslessError(f"{file} is not a file; give the path of a transcript")
    limit = services.config.max_file_bytes
    if (size := file.stat().st_size) > limit:
        raise ImportProblem(
            str(file), 0, over_limit("the file", size, limit, "max_file_bytes"), "too_large"
        )
    check_encoding(file)
    fmt = get_format(format) if format else detect_transcript_format(file)
    if fmt.not_a_transcript is not None:
        raise NotATranscript(str(file), 1, fmt.not_a_transcript)
    try:
        head, is_array = head_values(file)
    except ImportProblem:
        if not format:
            raise
        # The format was given: read on, and report the broken first line like any other.
        head, is_array = [], False
    if is_array and fmt.name != "messages":
        raise ImportProblem(
            str(file), 1, f"a JSON array is not a {fmt.name} transcript", "unreadable"
        )
    identity = fmt.identify(file, head)
    if session_id:
        identity.session_id = session_id
    if identity.lane_sessions == {} and fmt.name == "claude_code":
        identity.lane = "sidechain"
    lanes = [identity.lane, *(n for n in identity.lane_sessions if n != identity.lane)]
    scans: _Scans = {}
    progress = _forward(progress)
    main = _reconcile_lane(services, file, fmt, identity, lanes, scans, is_array, progress)
    reports = [main[0]]
    for name in lanes[1:]:
        side_id, side_key = identity.lane_sessions[name]
        # An unchanged file is not read: another lane is looked at when it has a
        # conversation (whose checkpoint says so, and keeps what it could not import).
        if main[1] or (main[0].mode == "unchanged" and services.store.find_conversation(side_id)):
            side = FileIdentity(fmt.name, side_id, None, session_key=side_key, lane=name)
            report = _reconcile_lane(services, file, fmt, side, lanes, scans, is_array, progress)[0]
            # A line that is not JSON belongs to no lane: the main report names it.
            said = {(p.line, p.reason) for p in reports[0].problems}
            report.problems = [p for p in report.problems if (p.line, p.reason) not in said]
            reports.append(report)
    return reports


class _Target:
    """The conversation a lane feeds, held under its lock. One that does not exist yet is
    created in the transaction of the first batch stored into it, so a file none of whose
    messages can be stored creates nothing."""

    def __init__(
        self,
        services: Services,
        session_id: str,
        session_key: str | None,
        conv: Conversation | None,
    ) -> None:
        self.services = services
        self.session_id = session_id
        self.session_key = session_key
        self.conv = conv
        self._held = ExitStack()
        if conv is not None:
            self._held.enter_context(services.lock(conv.conversation_id))

    def get(self) -> Conversation:
        """The conversation, created now if need be (call inside the batch's transaction)."""
        if self.conv is None:
            self.conv = self.services.store.get_or_create_conversation(
                self.session_id, session_key=self.session_key
            )
            self._held.enter_context(self.services.lock(self.conv.conversation_id))
        return self.conv

    def __enter__(self) -> _Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self._held.close()


def _reconcile_lane(
    services: Services,
    file: Path,
    fmt: TranscriptFormat,
    identity: FileIdentity,
    lanes: list[str],
    scans: _Scans,
    is_array: bool,
    progress: Progress | None,
    *,
    force_full: bool = False,
) -> tuple[ReconcileReport, int]:
    """Reconcile the lane of *identity* (one of the file's *lanes*); returns its report and
    how many messages the file holds in other lanes."""
    lane = identity.lane
    store = services.store
    conv = store.find_conversation(identity.session_id)
    with _Target(services, identity.session_id, identity.session_key, conv) as target:
        resolved = safe_id(str(file.resolve()))  # a file name need not be UTF-8
        size = file.stat().st_size
        hh = head_hash(file)
        cp = store.get_checkpoint(conv.conversation_id) if conv is not None else None
        report = ReconcileReport(
            resolved, fmt.name, identity.session_id, conv.conversation_id if conv else 0
        )
        start, line_no = 0, 0
        known: list[ImportProblem] = []
        if (
            not force_full
            and not is_array
            and cp is not None
            and cp.path == resolved
            and cp.format == fmt.name
            and cp.head_hash == hh
            and cp.header_id == identity.header_id
            and size >= cp.size
            and _last_line_unchanged(file, cp)
        ):
            start, line_no = cp.offset, cp.line_no
            # The lines before the tail are not read again; what they held that could not be
            # imported is still not imported, and is said again.
            known = [
                ImportProblem(str(file), n, reason, kind, known=True)
                for n, kind, reason in cp.problems
                if n <= cp.line_no
            ]
            report.mode = "tail"
            if size == cp.offset:
                report.mode = "unchanged"
                report.problems = known
                return report, 0
        tree = fmt.tree and lane == "main"
        if lane not in scans.get((start, line_no), {}):
            # This lane first: the lines no lane can claim are reported with it.
            order = [lane, *(other for other in lanes if other != lane)]
            scans[start, line_no] = _scan(
                file,
                fmt,
                order,
                start,
                line_no,
                is_array,
                size,
                progress,
                services.config.max_line_bytes,
            )
        scan = scans[start, line_no][lane]
        report.skipped = scan.skipped
        report.problems = known + scan.problems
        broken = [p.line for p in scan.problems]
        branch = active_path(scan.entries, tree, broken)
        report.off_branch = len(branch.off)
        messages = [e for e in branch.path if e.is_message]
        if conv is None and not messages and not branch.off:
            report.mode = "empty"  # nothing created, nothing recorded as imported
            return report, scan.elsewhere
        ids = [e.entry_id for e in messages if e.entry_id is not None]
        existing = store.existing_external_ids(conv.conversation_id, ids) if conv else set()
        if report.mode == "tail" and conv is not None:
            unknown_junction = (
                branch.junction is not None
                and not (cp is not None and branch.junction == cp.last_entry_id)
                and not store.existing_external_ids(conv.conversation_id, [branch.junction])
            )
            if branch.detached or unknown_junction:
                # The new entries continue (or branch off) entries before the tail that we
                # never imported, or that only the whole tree can place: read it all.
                return _reconcile_lane(
                    services,
                    file,
                    fmt,
                    identity,
                    lanes,
                    scans,
                    is_array,
                    progress,
                    force_full=True,
                )
        selected = messages
        if report.mode == "full" and messages and conv is not None:
            anchor, missing = _anchor(services, conv, file, fmt, messages, existing, report)
            if anchor >= 0:
                report.missing_before_anchor = missing
                selected = messages[anchor + 1 :]
        todo = [e for e in selected if e.entry_id not in existing]
        report.already_stored = len(selected) - len(todo) + (len(messages) - len(selected))
        report.imported = _import(services, target, file, fmt, todo, report, progress, size)
        if branch.off:
            _store_off_branch(services, target, identity, file, fmt, branch.off, existing, report)
        report.problems.sort(key=lambda p: p.line)  # (found by the scan, then by the import)
        if target.conv is None and not report.off_branch_stored:
            # Not one message could be stored: nothing created, nothing recorded, and the
            # next import reads the file again (and says again what it could not store).
            report.mode = "empty"
            return report, scan.elsewhere
        with store.transaction():  # (only its abandoned branches were: the family's head)
            conv = target.get()
        report.conversation_id = conv.conversation_id
        final = Checkpoint(
            conversation_id=conv.conversation_id,
            path=resolved,
            format=fmt.name,
            header_id=identity.header_id,
            head_hash=hh,
            size=max(size, scan.end_offset),
            offset=0 if is_array else scan.end_offset,
            line_no=0 if is_array else scan.end_line,
            last_line_start=scan.last_line_start,
            last_line_hash=scan.last_line_hash,
            last_entry_id=scan.last_entry_id or (cp.last_entry_id if cp and start else None),
            problems=tuple((p.line, p.kind, p.reason) for p in report.problems),
        )
        with store.transaction():
            store.put_checkpoint(final)
            _record_host_facts(services, conv, scan)
    if report.imported or report.off_branch_stored:
        # Large batches leave the trigram index behind; an import finishes it.
        store.catch_up_indexes(progress=_indexing(progress, start, size))
    return report, scan.elsewhere


def _store_off_branch(
    services: Services,
    target: _Target,
    identity: FileIdentity,
    file: Path,
    fmt: TranscriptFormat,
    off: list[Skeleton],
    on_main: set[str],
    report: ReconcileReport,
) -> None:
    """Keep the messages the active branch leaves out (an abandoned edit, a rewind) in the
    session's ``<session>:branches`` conversation, a member of its family: stored, searchable,
    never in the main context. Ids already stored in either conversation are skipped."""
    store = services.store
    session_id = f"{identity.session_id}:branches"
    main = target.conv
    key = identity.session_key or (main.session_key if main else None) or identity.session_id
    ids = [e.entry_id for e in off if e.entry_id is not None]
    seen = set(on_main)
    if main is not None:
        seen |= store.existing_external_ids(main.conversation_id, ids)
    found = store.find_conversation(session_id)
    if found is not None:
        report.branch_conversation_id = found.conversation_id
        seen |= store.existing_external_ids(found.conversation_id, ids)
    todo = [e for e in off if e.entry_id not in seen]
    if todo:
        with _Target(services, session_id, key, found) as branches:
            report.off_branch_stored = _import(
                services, branches, file, fmt, todo, report, None, file.stat().st_size
            )
            if branches.conv is not None:
                report.branch_conversation_id = branches.conv.conversation_id


def _last_line_unchanged(file: Path, cp: Checkpoint) -> bool:
    if cp.offset == 0:
        return True
    with file.open("rb") as handle:
        handle.seek(cp.last_line_start)
        data = handle.read(cp.offset - cp.last_line_start)
    return hashlib.sha256(data).hexdigest() == cp.last_line_hash


def _scan(
    file: Path,
    fmt: TranscriptFormat,
    lanes: list[str],
    start: int,
    line_no: int,
    is_array: bool,
    size: int,
    progress: Progress | None,
    line_limit: int,
) -> dict[str, _Scan]:
    """One pass over *file* from *start*: what each of *lanes* holds. The lines that cannot
    be read belong to no lane: they are the first lane's problems (reported once)."""
    cache = size - start <= CACHE_BYTES
    found = {lane: _Scan(end_offset=start, end_line=line_no, cache=cache) for lane in lanes}
    scan = found[lanes[0]]  # the file's own findings: problems, where it ends
    messages: Counter[str] = Counter()
    with file.open("rb") as handle:
        lines = (
            iter_json_array(handle)
            if is_array
            else read_lines(handle, start, line_no, limit=line_limit)
        )
        for line in lines:
            if line.error is not None:
                scan.problems.append(
                    ImportProblem(str(file), line.line_no, line.error, "malformed")
                )
            else:
                try:
                    entry = fmt.entry(line)
                except ValueError as exc:
                    scan.problems.append(
                        ImportProblem(str(file), line.line_no, str(exc), "unreadable")
                    )
                else:
                    stray = _stray(fmt, entry, line.value)
                    if stray is not None:
                        kind, reason = stray
                        scan.problems.append(ImportProblem(str(file), line.line_no, reason, kind))
                    else:
                        if entry.is_message:
                            messages[entry.lane] += 1
                        if entry.lane in found:
                            _note(found[entry.lane], entry)
                        elif entry.is_message and fmt.names_lanes:
                            scan.problems.append(
                                ImportProblem(
                                    str(file),
                                    line.line_no,
                                    f"a message of {entry.lane}, which the file's header does"
                                    " not name: not imported (name it in the header, or move"
                                    " the line to a file of its own)",
                                    "unreadable",
                                )
                            )
            if line.raw:
                scan.last_line_start = line.start
                scan.last_line_hash = hashlib.sha256(line.raw).hexdigest()
            scan.end_offset = line.end
            # A last line read before its newline was written: the newline, when it comes,
            # ends this same line, so the next read must not count it as a new one.
            complete = not line.raw or line.raw.endswith(b"\n")
            scan.end_line = line.line_no if complete else line.line_no - 1
            if progress is not None:
                progress(_read_so_far(line.end, start, size, storing=False), size)
    total = sum(messages.values())
    for lane, each in found.items():
        each.elsewhere = total - messages[lane]
        each.end_offset, each.end_line = scan.end_offset, scan.end_line
        each.last_line_start, each.last_line_hash = scan.last_line_start, scan.last_line_hash
    return found


def _stray(fmt: TranscriptFormat, entry: Entry, value: Any) -> tuple[str, str] | None:
    """Why a line *fmt* skips is not one of its own to skip, when it is not: a message of
    another format, or an object of no shape any format knows (kind, reason)."""
    if entry.is_message or fmt.owns(value):
        return None
    foreign = _foreign_format(fmt, value)
    if foreign is not None:
        return "other_format", (
            f"a {foreign} line inside a {fmt.name} transcript, not imported: a file is read in"
            f" one format (move the line to a file of its own, or, if the whole file is"
            f" {foreign}, import it with --format {foreign})"
        )
    if isinstance(value, Mapping) and not isinstance(value.get("type"), str):
        return "unknown_shape", f"{no_known_shape(value)} (the file is read as {fmt.name})"
    return None


def _foreign_format(fmt: TranscriptFormat, value: Any) -> str | None:
    """The other format whose message *value* unmistakably is (a line *fmt* skips)."""
    for other in FORMATS.values():
        if other is not fmt and other.not_a_transcript is None and other.claims(value):
            return other.name
    return None


def _note(scan: _Scan, entry: Entry) -> None:
    if entry.title:
        scan.title = entry.title
    if entry.status:
        scan.status = entry.status
    if entry.host_compaction is not None:
        scan.host_compactions.append(entry.host_compaction)
    if entry.skip is not None:
        scan.skipped[entry.skip] += 1
    if entry.entry_id is not None:
        scan.last_entry_id = entry.entry_id
    if entry.is_message or entry.entry_id is not None:
        scan.entries.append(
            Skeleton(
                entry.line_no,
                entry.start,
                entry.end,
                entry.entry_id,
                entry.parent_id,
                entry.is_message,
                entry if scan.cache and entry.is_message else None,
                entry.answers if entry.is_message else (),
                entry.group if entry.is_message else None,
                entry.bridge,
            )
        )


def _anchor(
    services: Services,
    conv: Conversation,
    file: Path,
    fmt: TranscriptFormat,
    messages: list[Skeleton],
    existing: set[str],
    report: ReconcileReport,
) -> tuple[int, int]:
    """Index in *messages* of the newest entry already stored (or -1), and how many entries
    before it are missing from the store."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].entry_id in existing:
            missing = [e for e in messages[:i] if e.entry_id not in existing]
            return i, _missing(services, file, fmt, missing, report)
    store = services.store
    stored_count = store.message_count(conv.conversation_id)
    if not stored_count:
        return -1, 0
    # No ids in common: the store was fed live (without entry ids). Match on role and text:
    # the position where the longest run of the newest stored messages lines up with the
    # file; among equally long runs, the one where the stored count says the file was cut.
    window = store.last_messages(conv.conversation_id, min(stored_count, ANCHOR_WINDOW))
    wanted = [_content_key(m.role, m.content) for m in window]
    # (index in messages, key) of the entries that normalize; the others were never stored.
    seen: list[tuple[int, bytes]] = []
    failed: list[tuple[int, ImportProblem]] = []
    with file.open("rb") as handle:
        for i, skel in enumerate(messages):
            try:
                norm = _load(services, file, fmt, skel, handle)
            except (LosslessError, ValueError) as exc:
                failed.append((i, _unstored(file, skel, exc)))
                continue
            if norm is not None:
                seen.append((i, _content_key(norm.role, norm.content)))
    need = min(2, len(wanted))
    best, best_rank = -1, (0, 0)
    for pos, (_, key) in enumerate(seen):
        if key != wanted[-1]:
            continue
        run = 1
        while run < len(wanted) and run <= pos and seen[pos - run][1] == wanted[-1 - run]:
            run += 1
        if run < need:
            continue
        rank = (run, -abs(pos - (stored_count - 1)))
        if best < 0 or rank > best_rank:
            best, best_rank = pos, rank
    if best < 0:
        return -1, 0  # everything is imported, and what fails is reported then
    anchor = seen[best][0]
    report.problems.extend(problem for i, problem in failed if i < anchor)
    return anchor, max(0, best + 1 - stored_count)


def _missing(
    services: Services,
    file: Path,
    fmt: TranscriptFormat,
    missing: list[Skeleton],
    report: ReconcileReport,
) -> int:
    """How many of the entries before the anchor that the store lacks are messages it could
    have stored; those that cannot be read as one (an earlier import left them out for it)
    are reported as the bad lines they are."""
    count = 0
    with file.open("rb") as handle:
        for skel in missing:
            try:
                _load(services, file, fmt, skel, handle)
            except (LosslessError, ValueError) as exc:
                report.problems.append(_unstored(file, skel, exc))
            else:
                count += 1
    return count


def _content_key(role: str, content: str) -> bytes:
    digest = hashlib.blake2b(role.encode() + b"\0", digest_size=16)
    digest.update(content.encode("utf-8", errors="surrogatepass"))
    return digest.digest()


def _load(
    services: Services, file: Path, fmt: TranscriptFormat, skel: Skeleton, handle: Any = None
) -> NormalizedMessage | None:
    if skel.entry is not None:
        entry = skel.entry
        skel.entry = None  # used once; let it go
        return _normalize_entry(services, entry, skel.entry_id)
    if handle is None:
        with file.open("rb") as own:
            return _load(services, file, fmt, skel, own)
    handle.seek(skel.start)
    raw = handle.read(skel.end - skel.start)
    value = parse_json(raw)
    entry = fmt.entry(Line(skel.line_no, skel.start, skel.end, raw, value=value))
    return _normalize_entry(services, entry, skel.entry_id)


def _normalize_entry(
    services: Services, entry: Entry, external_id: str | None
) -> NormalizedMessage:
    """An entry's message, normalized with its stable id; one that does not fit the shape its
    format expects is kept whole as an item of an unknown kind (never dropped). A tombstone
    (an export's forgotten message) stays one: its role, place and time, no text."""
    if entry.forgotten_at is not None:
        role = entry.message.get("role") if isinstance(entry.message, dict) else None
        return NormalizedMessage(
            role=role if isinstance(role, str) and role else "user",
            content="",
            token_count=0,
            parts=[],
            source_format=entry.shape or "unknown",
            envelope=None,
            external_id=external_id,
            created_at=entry.created_at,
            host_meta=entry.host_meta,
            forgotten_at=entry.forgotten_at,
        )
    try:
        norm = prepare(
            services,
            entry.message,
            format=entry.shape,
            external_id=external_id,
            created_at=entry.created_at,
            metadata=entry.metadata,
        )
    except UnknownShapeError:
        if entry.shape is None:
            raise
        norm = prepare(
            services,
            entry.message,
            format="unknown",
            external_id=external_id,
            created_at=entry.created_at,
            metadata=entry.metadata,
        )
    norm.host_meta = entry.host_meta
    return norm


def _import(
    services: Services,
    target: _Target,
    file: Path,
    fmt: TranscriptFormat,
    todo: list[Skeleton],
    report: ReconcileReport,
    progress: Progress | None,
    size: int,
) -> int:
    imported = 0
    batch: list[NormalizedMessage] = []
    batch_bytes = 0
    store = services.store

    def flush() -> None:
        nonlocal imported, batch, batch_bytes
        if batch:
            with files_taken_back() as created, store.transaction():
                conv = target.get()
                for norm in batch:
                    externalize(services, conv.conversation_id, norm, created)
                ids, _ = store.append_messages(conv, batch)
            imported += len(ids)
        batch = []
        batch_bytes = 0

    with file.open("rb") as handle:
        for skel in todo:
            try:
                norm = _load(services, file, fmt, skel, handle)
            except (LosslessError, ValueError) as exc:
                report.problems.append(_unstored(file, skel, exc))
                continue
            if norm is None:
                continue
            batch.append(norm)
            batch_bytes += skel.end - skel.start
            if len(batch) >= BATCH_MESSAGES or batch_bytes >= BATCH_BYTES:
                flush()
            if progress is not None:
                progress(_read_so_far(skel.end, todo[0].start, size, storing=True), size)
    flush()
    return imported


def _unstored(file: Path, skel: Skeleton, exc: Exception) -> ImportProblem:
    """The problem of an entry that could not be made a message."""
    kind = "unknown_shape" if isinstance(exc, UnknownShapeError) else "unreadable"
    return ImportProblem(str(file), skel.line_no, str(exc), kind)


def _compaction_key(compaction: Mapping[str, Any]) -> tuple[Any, ...]:
    """What tells a host's compactions apart: its summary's entry id, or, for a host whose
    summaries carry none (Codex), where and when it was written."""
    uuid = compaction.get("summary_uuid")
    if uuid is not None:
        return ("uuid", uuid)
    return ("at", compaction.get("line"), compaction.get("timestamp"))


def _record_host_facts(services: Services, conv: Conversation, scan: _Scan) -> None:
    updates: dict[str, Any] = {}
    if scan.host_compactions:
        known = list(conv.metadata.get("host_compactions", []))
        seen = {_compaction_key(c) for c in known}
        known += [c for c in scan.host_compactions if _compaction_key(c) not in seen]
        updates["host_compactions"] = known
    status = scan.status if scan.status != conv.status else None
    if updates or status or (scan.title and scan.title != conv.title):
        services.store.update_conversation(
            conv.conversation_id, title=scan.title, metadata=updates or None, status=status
        )
