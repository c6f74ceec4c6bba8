"""``lossless import-store``: moving in from the stores of lossless-claw (OpenClaw's plugin)
and hermes-lcm (Hermes Agent's), with their summaries and the context the user had.

Both keep what lossless keeps — every message, a DAG of summaries over them, an active
context — in a SQLite file of their own, read here without changing it (opened read only; the
peer may go on writing it). Per conversation, one transaction brings over:

* the **messages**, in order, each under an external id naming its row
  (``lossless-claw:<message_id>``, ``hermes-lcm:<store_id>``), so importing again stores
  nothing twice and takes only what is new. lossless-claw's messages are rebuilt as OpenClaw
  messages from its parts, whose metadata holds each original content block; hermes-lcm's are
  OpenAI chat messages. A message that cannot be read in its shape is kept whole, verbatim;
* the **summaries** with their DAG links (a leaf's messages, a condensed summary's sources,
  in order): lossless-claw's keep their ids (the same ``sum_`` form); a hermes-lcm node gets an
  id derived from its node id;
* the **active context**: lossless-claw's ``context_items`` as they are; hermes-lcm keeps none,
  so it is made the way hermes-lcm assembles it — the summaries no other summary condensed,
  deepest first, then the session's messages after its compaction frontier (after the host's
  system prompt, which hermes-lcm never summarizes).

What is not brought is said in the report: large files lossless-claw keeps on disk stay there
(their messages keep lossless-claw's reference to them).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import ImportProblem, LosslessError, UnknownShapeError
from ..model import NormalizedMessage, Summary
from ..services import Services
from ..timestamps import format_ts, now, parse_ts
from .pipeline import prepare

__all__ = ["PEERS", "PeerReport", "import_store"]

#: The stores lossless moves in from.
PEERS = ("lossless-claw", "hermes-lcm")


@dataclass
class PeerReport:
    """What importing one conversation of a peer's store did."""

    source: str
    session_id: str
    conversation_id: int
    messages_imported: int = 0
    messages_already: int = 0
    summaries_imported: int = 0
    summaries_already: int = 0
    context_items: int = 0
    #: Messages kept whole because their shape could not be read (never dropped).
    kept_verbatim: int = 0
    #: What was not brought over, and where it is.
    not_brought: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class _Conversation:
    """One conversation of a peer's store, read and ready to write."""

    session_id: str
    session_key: str | None
    title: str | None
    metadata: dict[str, Any]
    #: (external id, message, shape, time) in order.
    messages: list[tuple[str, Any, str, Any]]
    summaries: list[Summary]
    #: summary id → external ids of its messages / ids of its source summaries.
    leaf_messages: dict[str, list[str]]
    sources: dict[str, list[str]]
    #: ("message", external id) | ("summary", summary id), in order.
    context: list[tuple[str, str]]
    not_brought: list[str] = field(default_factory=list)


def import_store(services: Services, source: str, path: str | os.PathLike[str]) -> list[PeerReport]:
    """Import every conversation of a lossless-claw or hermes-lcm database (see the module
    docstring); one report per conversation."""
    if source not in PEERS:
        raise LosslessError(f"unknown store {source!r}; lossless imports from {', '.join(PEERS)}")
    file = Path(path).expanduser()
    if not file.is_file():
        raise LosslessError(f"{file} is not a file; give the path of the {source} database")
    try:
        db = sqlite3.connect(f"file:{file.resolve()}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        with closing(db):
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            needed = (
                {"summaries", "context_items"} if source == "lossless-claw" else {"summary_nodes"}
            )
            if not ({"messages"} | needed) <= tables:
                raise ImportProblem(
                    str(file), 1, f"not a {source} database (it has no {', '.join(sorted(needed))})"
                )
            reader = _claw if source == "lossless-claw" else _hermes_lcm
            return [_write(services, source, conv) for conv in reader(db, file)]
    except sqlite3.DatabaseError as exc:
        raise ImportProblem(str(file), 1, f"cannot read it as a {source} database: {exc}") from exc


def _write(services: Services, source: str, peer: _Conversation) -> PeerReport:
    """One conversation, in one transaction: messages, then summaries, links and context."""
    store = services.store
    with store.transaction():
        conv = store.get_or_create_conversation(peer.session_id, session_key=peer.session_key)
        report = PeerReport(source, peer.session_id, conv.conversation_id)
        report.not_brought = peer.not_brought
        with services.lock(conv.conversation_id):
            ids = [ext for ext, *_ in peer.messages]
            stored = store.existing_external_ids(conv.conversation_id, ids)
            norms = []
            for ext, message, shape, created in peer.messages:
                if ext in stored:
                    continue
                norm, verbatim = _normalize(services, message, shape, ext, created)
                report.kept_verbatim += verbatim
                norms.append(norm)
            new_ids, _ = store.append_messages(conv, norms) if norms else ([], 0)
            report.messages_imported = len(new_ids)
            report.messages_already = len(stored)
            by_ext = store.message_ids_by_external(conv.conversation_id, ids)
            summaries = [replace(s, conversation_id=conv.conversation_id) for s in peer.summaries]
            leaves = {
                sid: [by_ext[e] for e in exts if e in by_ext]
                for sid, exts in peer.leaf_messages.items()
            }
            context: list[tuple[str, int | str]] = [
                ("message", by_ext[ref]) if kind == "message" else ("summary", ref)
                for kind, ref in peer.context
                if kind == "summary" or ref in by_ext
            ]
            report.summaries_imported = store.adopt_dag(
                conv.conversation_id, summaries, leaves, peer.sources, context
            )
            report.summaries_already = len(summaries) - report.summaries_imported
            report.context_items = len(context)
            if peer.title or peer.metadata:
                store.update_conversation(
                    conv.conversation_id, title=peer.title, metadata={source: peer.metadata}
                )
    return report


def _normalize(
    services: Services, message: Any, shape: str, external_id: str, created: Any
) -> tuple[NormalizedMessage, int]:
    """The message in its shape; one that is not read in it is kept whole (``unknown``)."""
    try:
        return prepare(
            services, message, format=shape, external_id=external_id, created_at=created
        ), 0
    except UnknownShapeError:
        return prepare(
            services, message, format="unknown", external_id=external_id, created_at=created
        ), 1


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def _ts(value: Any) -> str | None:
    parsed = parse_ts(value) if value not in (None, "") else None
    return None if parsed is None else format_ts(parsed)


# --- lossless-claw -------------------------------------------------------------------------


def _claw(db: sqlite3.Connection, path: Path) -> Iterator[_Conversation]:
    conv_cols = _columns(db, "conversations")
    parts_table = "message_parts" in {
        r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    rows = db.execute("SELECT * FROM conversations ORDER BY conversation_id").fetchall()
    sessions = [r["session_id"] for r in rows]
    for row in rows:
        cid = row["conversation_id"]
        session = row["session_id"]
        if sessions.count(session) > 1:  # generations of one session: one conversation each
            session = f"{session}:{cid}"
        extra: dict[str, Any] = {
            k: row[k]
            for k in ("session_key", "active", "archived_at", "archive_cause")
            if k in conv_cols
        }
        messages = []
        for m in db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY seq", (cid,)
        ).fetchall():
            parts = (
                db.execute(
                    "SELECT * FROM message_parts WHERE message_id = ? ORDER BY ordinal",
                    (m["message_id"],),
                ).fetchall()
                if parts_table
                else []
            )
            messages.append(
                (
                    f"lossless-claw:{m['message_id']}",
                    _claw_message(m, parts),
                    "openclaw",
                    parse_ts(m["created_at"]),
                )
            )
        summaries, leaves, sources = _claw_dag(db, cid)
        context = [
            ("message", f"lossless-claw:{c['message_id']}")
            if c["item_type"] == "message"
            else ("summary", str(c["summary_id"]))
            for c in db.execute(
                "SELECT * FROM context_items WHERE conversation_id = ? ORDER BY ordinal", (cid,)
            )
        ]
        not_brought = (
            [
                f"large file {f['file_id']} ({f['file_name'] or 'unnamed'}): stays at"
                f" {f['storage_uri']}; its message keeps lossless-claw's reference"
                for f in db.execute(
                    "SELECT * FROM large_files WHERE conversation_id = ? ORDER BY created_at",
                    (cid,),
                )
            ]
            if "large_files" in {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            else []
        )
        yield _Conversation(
            session,
            row["session_key"] if "session_key" in conv_cols else None,
            row["title"] if "title" in conv_cols else None,
            {"conversation_id": cid, **extra},
            messages,
            summaries,
            leaves,
            sources,
            context,
            not_brought,
        )


def _claw_message(row: sqlite3.Row, parts: list[sqlite3.Row]) -> dict[str, Any]:
    """An OpenClaw message rebuilt from lossless-claw's row and parts (each part's metadata
    holds its original block; the columns stand in where it does not)."""
    if not parts:
        role = "toolResult" if row["role"] == "tool" else row["role"]
        return {"role": role, "content": row["content"]}
    metas = [_meta(p) for p in parts]
    head = metas[0]
    role = str(head.get("originalRole") or ("toolResult" if row["role"] == "tool" else row["role"]))
    blocks = [_block(p, meta) for p, meta in zip(parts, metas, strict=True)]
    message: dict[str, Any] = {"role": role, "content": blocks}
    if role == "toolResult":
        message["toolCallId"] = head.get("toolCallId") or parts[0]["tool_call_id"]
        message["toolName"] = head.get("toolName") or parts[0]["tool_name"]
        message["isError"] = bool(head.get("isError", False))
    elif role == "assistant":
        for key, field_name in (
            ("provider", "modelProvider"),
            ("api", "modelApi"),
            ("model", "modelId"),
        ):
            if head.get(field_name):
                message[key] = head[field_name]
    return message


def _meta(part: sqlite3.Row) -> dict[str, Any]:
    try:
        meta = json.loads(part["metadata"] or "{}")
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def _block(part: sqlite3.Row, meta: Mapping[str, Any]) -> Any:
    raw = meta.get("raw")
    if isinstance(raw, dict):
        return raw
    kind = part["part_type"]
    if kind == "reasoning":
        return {"type": "thinking", "thinking": part["text_content"] or ""}
    if kind == "tool" and part["tool_call_id"]:
        try:
            arguments = json.loads(part["tool_input"] or "{}")
        except ValueError:
            arguments = part["tool_input"]
        return {
            "type": "toolCall",
            "id": part["tool_call_id"],
            "name": part["tool_name"],
            "arguments": arguments,
        }
    if kind == "text" or part["text_content"] is not None:
        return {"type": "text", "text": part["text_content"] or ""}
    # A part of a kind OpenClaw messages do not have: its columns, as they are.
    return {
        "type": f"lossless-claw:{kind}",
        **{k: part[k] for k in part.keys() if part[k] is not None},  # noqa: SIM118 (a Row)
    }


def _claw_dag(
    db: sqlite3.Connection, cid: int
) -> tuple[list[Summary], dict[str, list[str]], dict[str, list[str]]]:
    cols = _columns(db, "summaries")
    order = "depth, created_at" if "depth" in cols else "created_at"
    summaries = []
    for s in db.execute(
        f"SELECT * FROM summaries WHERE conversation_id = ? ORDER BY {order}, summary_id", (cid,)
    ):
        try:
            files = tuple(json.loads(s["file_ids"])) if "file_ids" in cols else ()
        except ValueError:
            files = ()
        summaries.append(
            Summary(
                summary_id=s["summary_id"],
                conversation_id=cid,
                kind=s["kind"],
                depth=s["depth"] if "depth" in cols else 0,
                content=s["content"],
                token_count=s["token_count"],
                created_at=_ts(s["created_at"]) or format_ts(now()),
                earliest_at=_ts(s["earliest_at"]) if "earliest_at" in cols else None,
                latest_at=_ts(s["latest_at"]) if "latest_at" in cols else None,
                descendant_count=s["descendant_count"] if "descendant_count" in cols else 0,
                file_ids=files,
                model=s["model"] if "model" in cols else None,
            )
        )
    ids = [s.summary_id for s in summaries]
    leaves: dict[str, list[str]] = {sid: [] for sid in ids}
    sources: dict[str, list[str]] = {sid: [] for sid in ids}
    for sid, mid in db.execute(
        "SELECT sm.summary_id, sm.message_id FROM summary_messages sm JOIN summaries s"
        " USING (summary_id) WHERE s.conversation_id = ? ORDER BY sm.summary_id, sm.ordinal",
        (cid,),
    ):
        leaves[sid].append(f"lossless-claw:{mid}")
    # summary_parents: summary_id is the condensed summary, parent_summary_id one of its sources.
    for sid, source in db.execute(
        "SELECT sp.summary_id, sp.parent_summary_id FROM summary_parents sp JOIN summaries s"
        " USING (summary_id) WHERE s.conversation_id = ? ORDER BY sp.summary_id, sp.ordinal",
        (cid,),
    ):
        sources[sid].append(source)
    return summaries, leaves, sources


# --- hermes-lcm ----------------------------------------------------------------------------


def _node_id(node: int) -> str:
    """The summary id of a hermes-lcm node (the same on every import)."""
    return "sum_" + hashlib.sha256(f"hermes-lcm:{node}".encode()).hexdigest()[:16]


def _hermes_lcm(db: sqlite3.Connection, path: Path) -> Iterator[_Conversation]:
    msg_cols = _columns(db, "messages")
    node_cols = _columns(db, "summary_nodes")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    nodes = db.execute("SELECT * FROM summary_nodes ORDER BY depth, node_id").fetchall()
    cited: set[int] = set()
    below: dict[int, int] = {}
    for n in nodes:
        srcs = [int(x) for x in json.loads(n["source_ids"] or "[]")]
        if n["source_type"] == "nodes":
            cited.update(srcs)
            below[n["node_id"]] = sum(1 + below.get(x, 0) for x in srcs)
    sessions = [
        r[0]
        for r in db.execute(
            "SELECT session_id FROM messages GROUP BY session_id ORDER BY min(store_id)"
        )
    ]
    for session in sessions:
        rows = db.execute(
            "SELECT * FROM messages WHERE session_id = ? ORDER BY store_id", (session,)
        ).fetchall()
        messages = [
            (
                f"hermes-lcm:{r['store_id']}",
                _chat(r, msg_cols),
                "openai_chat",
                parse_ts(r["timestamp"]),
            )
            for r in rows
        ]
        mine = [n for n in nodes if n["session_id"] == session]
        summaries, leaves, sources = [], {}, {}
        for n in mine:
            sid = _node_id(n["node_id"])
            srcs = [int(x) for x in json.loads(n["source_ids"] or "[]")]
            leaf = n["source_type"] != "nodes"
            summaries.append(
                Summary(
                    summary_id=sid,
                    conversation_id=0,
                    kind="leaf" if leaf else "condensed",
                    depth=n["depth"],
                    content=n["summary"],
                    token_count=n["token_count"] or 0,
                    created_at=_ts(n["created_at"]) or format_ts(now()),
                    earliest_at=_ts(n["earliest_at"]) if "earliest_at" in node_cols else None,
                    latest_at=_ts(n["latest_at"]) if "latest_at" in node_cols else None,
                    descendant_count=below.get(n["node_id"], 0),
                    file_ids=(),
                    model=None,
                )
            )
            if leaf:
                leaves[sid] = [f"hermes-lcm:{x}" for x in srcs]
            else:
                sources[sid] = [_node_id(x) for x in srcs]
        frontier = _frontier(db, session, tables, mine)
        open_nodes = sorted(
            (n for n in mine if n["node_id"] not in cited),
            key=lambda n: (-n["depth"], n["created_at"], n["node_id"]),
        )
        # The host's system prompt (hermes-lcm never summarizes it) opens the context, as it
        # opened the session; then the summaries nothing condensed, then the fresh tail.
        context = (
            [
                ("message", f"hermes-lcm:{r['store_id']}")
                for r in rows
                if r["store_id"] <= frontier and r["role"] == "system"
            ]
            + [("summary", _node_id(n["node_id"])) for n in open_nodes]
            + [("message", f"hermes-lcm:{r['store_id']}") for r in rows if r["store_id"] > frontier]
        )
        conversation = rows[0]["conversation_id"] if rows and "conversation_id" in msg_cols else ""
        yield _Conversation(
            session,
            conversation or None,
            None,
            {"conversation_id": conversation, "frontier_store_id": frontier},
            messages,
            summaries,
            leaves,
            sources,
            context,
        )


def _chat(row: sqlite3.Row, columns: set[str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": row["role"], "content": row["content"]}
    if "tool_calls" in columns and row["tool_calls"]:
        try:
            message["tool_calls"] = json.loads(row["tool_calls"])
        except ValueError:
            message["tool_calls"] = row["tool_calls"]
    if "tool_call_id" in columns and row["tool_call_id"]:
        message["tool_call_id"] = row["tool_call_id"]
    if "tool_name" in columns and row["tool_name"]:
        message["name"] = row["tool_name"]
    return message


def _frontier(
    db: sqlite3.Connection, session: str, tables: set[str], nodes: list[sqlite3.Row]
) -> int:
    """The last message hermes-lcm folded into a summary for *session*: the lifecycle row's
    frontier, else the last message a leaf of the session covers."""
    if "lcm_lifecycle_state" in tables:
        cols = _columns(db, "lcm_lifecycle_state")
        row = db.execute(
            "SELECT current_frontier_store_id FROM lcm_lifecycle_state"
            " WHERE current_session_id = ?",
            (session,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        if {"last_finalized_session_id", "last_finalized_frontier_store_id"} <= cols:
            row = db.execute(
                "SELECT last_finalized_frontier_store_id FROM lcm_lifecycle_state"
                " WHERE last_finalized_session_id = ?",
                (session,),
            ).fetchone()
            if row is not None:
                return int(row[0])
    covered = [
        int(x)
        for n in nodes
        if n["source_type"] != "nodes"
        for x in json.loads(n["source_ids"] or "[]")
    ]
    return max(covered, default=0)
