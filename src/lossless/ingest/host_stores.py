"""Hosts that keep their transcripts in SQLite rather than in files.

* **OpenClaw** 2026.9 and later: ``agents/<agent>/agent/openclaw-agent.sqlite``, table
  ``transcript_events`` — one row per transcript event, the same JSON objects its session
  files hold line by line (a ``session`` header, then entries with ``id``/``parentId``);
  events of 1 KiB or more may be stored zstd-compressed (``pip install 'lossless[openclaw]'``
  reads those).
* **Hermes Agent**: ``$HERMES_HOME/state.db``, tables ``sessions`` and ``messages`` — one row
  per OpenAI chat message. When Hermes compresses a session in place, it keeps the old rows
  (``active = 0``) and writes the compressed list as new rows; the copies of messages it kept
  carry the original's time, so a row with the same message *and* the same time as an earlier
  row of its session is a copy, not something said again.

Each session is read as the transcript it amounts to and reconciled like a transcript file
(:func:`~lossless.ingest.reconcile.reconcile_file`): by the host's own ids (OpenClaw's event
ids, Hermes's row ids), so importing again stores nothing twice. The database is opened read
only; a host may go on writing it.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from ..codec import chat_fingerprint
from ..errors import ImportProblem
from ..services import Services
from .formats.hermes import hermes_artefact
from .reconcile import Progress, ReconcileReport, reconcile_file

__all__ = ["HOST_STORE_NAMES", "host_store_kind", "import_host_store", "is_sqlite"]

SQLITE_MAGIC = b"SQLite format 3\x00"
#: The file names a folder import looks for.
HOST_STORE_NAMES = ("openclaw-agent.sqlite", "state.db")
ZSTD_HINT = "pip install 'lossless[openclaw]'"


def is_sqlite(path: Path) -> bool:
    """Whether *path* is a SQLite database (by its first bytes)."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def host_store_kind(path: Path) -> str | None:
    """``openclaw`` or ``hermes`` for a host's SQLite database, else ``None``."""
    if not is_sqlite(path):
        return None
    try:
        with closing(_connect(path)) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "transcript_events" in tables:
                return "openclaw"
            if {"sessions", "messages"} <= tables:
                columns = {r[1] for r in db.execute("PRAGMA table_info(messages)")}
                if {"session_id", "role", "content", "tool_calls"} <= columns:
                    return "hermes"
    except sqlite3.Error:
        return None
    return None


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)


def import_host_store(
    services: Services, path: Path, *, progress: Progress | None = None
) -> list[ReconcileReport]:
    """Import every session of a host's database; one report per conversation fed."""
    kind = host_store_kind(path)
    if kind is None:
        raise ImportProblem(str(path), 1, "not an OpenClaw or Hermes Agent database")
    reader = _openclaw_sessions if kind == "openclaw" else _hermes_sessions
    reports: list[ReconcileReport] = []
    with closing(_connect(path)) as db, tempfile.TemporaryDirectory() as tmp:
        for session_id, lines in reader(db, path):
            view = Path(tmp) / "session.jsonl"
            with view.open("wb") as out:
                for line in lines:
                    out.write(line + b"\n")
            for report in reconcile_file(
                services, view, format=kind, session_id=session_id, progress=progress
            ):
                report.path = f"{path.resolve()}#{session_id}"
                for problem in report.problems:
                    problem.path = report.path
                if not (report.imported or report.off_branch_stored or report.problems):
                    report.mode = "unchanged"  # read whole each time: say when nothing was new
                reports.append(report)
    return reports


def _openclaw_sessions(db: sqlite3.Connection, path: Path) -> Iterator[tuple[str, list[bytes]]]:
    rows = db.execute(
        "SELECT session_id, seq, event_json, event_zstd FROM transcript_events"
        " ORDER BY session_id, seq"
    )
    current: str | None = None
    lines: list[bytes] = []
    for session_id, seq, text, packed in rows:
        if session_id != current:
            if current is not None:
                yield current, lines
            current, lines = session_id, []
        if text is not None:
            lines.append(text.encode())
        elif packed is not None:
            lines.append(_unzstd(bytes(packed), path, seq))
    if current is not None:
        yield current, lines


def _unzstd(packed: bytes, path: Path, seq: int) -> bytes:
    try:
        import zstandard
    except ModuleNotFoundError:
        raise ImportProblem(
            str(path),
            seq,
            f"event {seq} is stored zstd-compressed; to read it: {ZSTD_HINT}",
        ) from None
    return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(packed))


#: The columns of a Hermes message row that are the message (others are its bookkeeping).
_HERMES_FIELDS = ("role", "content", "tool_call_id", "tool_calls", "name", "reasoning")


def _hermes_sessions(db: sqlite3.Connection, path: Path) -> Iterator[tuple[str, list[bytes]]]:
    db.row_factory = sqlite3.Row
    columns = {r[1] for r in db.execute("PRAGMA table_info(messages)")}
    session_columns = {r[1] for r in db.execute("PRAGMA table_info(sessions)")}
    titled = "display_name" in session_columns
    sessions = db.execute(
        "SELECT id" + (", display_name" if titled else "") + " FROM sessions ORDER BY started_at"
    ).fetchall()
    for session in sessions:
        rows = db.execute(
            "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session["id"],)
        ).fetchall()
        header: dict[str, Any] = {"type": "hermes_session", "id": session["id"]}
        if titled and session["display_name"]:
            header["title"] = session["display_name"]
        lines = [json.dumps(header).encode()]
        for row, message in _said(rows, columns):
            entry = {"row": row["id"], "timestamp": row["timestamp"], "message": message}
            lines.append(json.dumps(entry, ensure_ascii=False).encode())
        yield str(session["id"]), lines


#: Rows a compression writes in one go are this close in time (Hermes stamps them 1 µs apart).
_REWRITE_GAP = 2e-6


def _said(
    rows: list[sqlite3.Row], columns: set[str]
) -> Iterator[tuple[sqlite3.Row, dict[str, Any]]]:
    """The rows that are messages said, without the copies compressions wrote: a row whose
    message an earlier row holds, at the same time, or written in a compression's block (rows
    stamped microseconds apart, as nothing said in a conversation is), or that is one of
    Hermes's own compression artefacts (its summary, its task-list note: said once, whenever
    a later compression copies it)."""
    times = [float(r["timestamp"] or 0) for r in rows]
    seen: dict[str, set[float]] = {}
    for i, row in enumerate(rows):
        message = _hermes_message(row, columns)
        key = chat_fingerprint(message)
        in_block = (i > 0 and abs(times[i] - times[i - 1]) <= _REWRITE_GAP) or (
            i + 1 < len(rows) and abs(times[i + 1] - times[i]) <= _REWRITE_GAP
        )
        earlier = seen.setdefault(key, set())
        artefact = hermes_artefact(message.get("content")) is not None
        if earlier and (in_block or times[i] in earlier or artefact):
            continue
        earlier.add(times[i])
        yield row, message


def _hermes_message(row: sqlite3.Row, columns: set[str]) -> dict[str, Any]:
    message: dict[str, Any] = {}
    for name in _HERMES_FIELDS:
        if name not in columns or row[name] is None:
            continue
        value = row[name]
        if name == "tool_calls" and isinstance(value, str):
            with contextlib.suppress(ValueError):  # else kept as the text it is
                value = json.loads(value)
        message[name] = value
    if "tool_name" in columns and row["tool_name"] and "name" not in message:
        message["name"] = row["tool_name"]
    return message
