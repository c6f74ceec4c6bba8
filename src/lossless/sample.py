"""A deterministic generator of realistic agent sessions (for the demo, tests and benchmarks).

The session is a coding agent working on a small service: the user asks for changes, the
assistant reasons, reads and edits files, runs tests that sometimes fail, and records
decisions. Facts a later reader needs (file paths, error messages, ports, versions,
decisions and their reasons) are spread through it, so retrieval has something to find.
The same ``seed`` and ``turns`` always give the same bytes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["SESSION_FORMATS", "generate_session", "write_session"]

SESSION_FORMATS = ("openclaw", "claude_code")

_FILES = [
    "src/inventory/api.py",
    "src/inventory/models.py",
    "src/inventory/cache.py",
    "src/inventory/reservations.py",
    "src/inventory/settings.py",
    "tests/test_api.py",
    "tests/test_reservations.py",
    "migrations/0007_add_sku_index.sql",
    "docs/operations.md",
]
_FEATURES = [
    (
        "pagination to the /items endpoint",
        "cursor-based pagination",
        "offsets drift under concurrent inserts",
    ),
    (
        "a stock reservation timeout",
        "a 15 minute reservation TTL",
        "abandoned carts held stock for days",
    ),
    (
        "rate limiting on /orders",
        "a token bucket of 50 requests per minute",
        "the mobile client retries aggressively",
    ),
    (
        "a cache for product lookups",
        "Redis with a 300 second TTL",
        "PostgreSQL was at 80% CPU on reads",
    ),
    (
        "an index on orders.sku",
        "a partial index WHERE status = 'open'",
        "full-table scans took 1.8 s",
    ),
    ("structured logging", "JSON logs with a request_id field", "grep across hosts was impossible"),
    (
        "a health check",
        "/healthz returning build sha and db latency",
        "the load balancer needed a probe",
    ),
    ("retry on deadlocks", "3 retries with jittered backoff", "nightly imports hit deadlock 40P01"),
]
_ERRORS = [
    "KeyError: 'sku'",
    "AssertionError: expected 20 items, got 19",
    "psycopg.errors.DeadlockDetected: deadlock detected (SQLSTATE 40P01)",
    "TimeoutError: reservation lock not acquired after 5.0s",
    "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'",
    "redis.exceptions.ConnectionError: Error 111 connecting to localhost:6379",
]
_CHATTER = [
    "Thanks, that looks good.",
    "ok",
    "Great, carry on.",
    "Sounds right to me.",
    "Nice.",
]
_CODE_LINES = [
    "def list_items(cursor: str | None = None, limit: int = 20) -> Page:",
    "    query = select(Item).order_by(Item.id).limit(limit + 1)",
    "    if cursor is not None:",
    "        query = query.where(Item.id > decode_cursor(cursor))",
    "RESERVATION_TTL = timedelta(minutes=15)",
    "class Reservation(Base):",
    "    __tablename__ = 'reservations'",
    "    sku: Mapped[str] = mapped_column(index=True)",
    "CACHE_URL = os.environ.get('CACHE_URL', 'redis://localhost:6379/0')",
    "async def reserve(sku: str, quantity: int) -> Reservation:",
    "    async with session.begin():",
    "        stock = await session.get(Stock, sku, with_for_update=True)",
    "LOG_FORMAT = 'json'",
    "PORT = 8043",
]


class _Session:
    def __init__(
        self, turns: int, seed: int, payload_bytes: int, start: datetime | None = None
    ) -> None:
        self.rng = random.Random(seed)
        self.turns = turns
        self.payload_bytes = payload_bytes
        self.clock = start or datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)
        self.tool_counter = 0

    def tick(self, low: float = 2.0, high: float = 40.0) -> datetime:
        self.clock += timedelta(seconds=self.rng.uniform(low, high))
        return self.clock

    def call_id(self) -> str:
        self.tool_counter += 1
        return f"toolu_{self.tool_counter:06d}"

    def file_body(self, path: str) -> str:
        lines = [f"# {path}"]
        lines += [self.rng.choice(_CODE_LINES) for _ in range(self.rng.randint(6, 18))]
        body = "\n".join(lines)
        if self.payload_bytes:
            filler = " ".join(self.rng.choice(_CODE_LINES) for _ in range(8))
            while len(body) < self.payload_bytes:
                body += "\n" + filler
        return body

    def turns_iter(self) -> Iterator[list[dict[str, Any]]]:
        """Yield one turn at a time as neutral events (role, blocks)."""
        for turn in range(self.turns):
            feature, choice, reason = _FEATURES[turn % len(_FEATURES)]
            path = self.rng.choice(_FILES)
            events: list[dict[str, Any]] = []
            kind = turn % 5
            if kind == 4:
                events.append({"role": "user", "text": self.rng.choice(_CHATTER)})
                events.append(
                    {"role": "assistant", "blocks": [("text", "Continuing with the next item.")]}
                )
                yield events
                continue
            ask = (
                f"Turn {turn}: please add {feature}. Keep the public API of {path} stable."
                if kind in (0, 2)
                else f"Turn {turn}: the test run fails with {self.rng.choice(_ERRORS)} in {path};"
                " fix it."
            )
            events.append({"role": "user", "text": ask})
            read_id = self.call_id()
            events.append(
                {
                    "role": "assistant",
                    "blocks": [
                        ("thinking", f"I should read {path} before changing it."),
                        ("text", f"Reading {path} first."),
                        ("tool", read_id, "read_file", {"path": path}),
                    ],
                }
            )
            events.append(
                {
                    "role": "tool",
                    "id": read_id,
                    "name": "read_file",
                    "output": self.file_body(path),
                    "error": False,
                }
            )
            edit_id = self.call_id()
            events.append(
                {
                    "role": "assistant",
                    "blocks": [
                        ("text", f"Decision: use {choice} because {reason}."),
                        (
                            "tool",
                            edit_id,
                            "edit_file",
                            {"path": path, "old": "pass", "new": choice},
                        ),
                    ],
                }
            )
            events.append(
                {
                    "role": "tool",
                    "id": edit_id,
                    "name": "edit_file",
                    "output": f"Edited {path}: 1 hunk applied.",
                    "error": False,
                }
            )
            test_id = self.call_id()
            failed = self.rng.random() < 0.3
            events.append(
                {
                    "role": "assistant",
                    "blocks": [
                        ("tool", test_id, "bash", {"command": "pytest -q tests/test_api.py"})
                    ],
                }
            )
            output = (
                f"FAILED tests/test_api.py::test_turn_{turn} - {self.rng.choice(_ERRORS)}\n"
                "1 failed, 41 passed in 3.2s"
                if failed
                else "42 passed in 3.1s"
            )
            events.append(
                {"role": "tool", "id": test_id, "name": "bash", "output": output, "error": failed}
            )
            summary = (
                f"The change to {path} is in but one test still fails; I will look at it next."
                if failed
                else f"Done: {feature} is in {path}, tests pass (42 passed)."
            )
            events.append({"role": "assistant", "blocks": [("text", summary)]})
            yield events


def _openclaw_lines(session: _Session, session_id: str) -> Iterator[dict[str, Any]]:
    yield {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": session.clock.isoformat().replace("+00:00", "Z"),
        "cwd": "/work/inventory",
    }
    parent: str | None = None
    counter = 0
    for events in session.turns_iter():
        for ev in events:
            counter += 1
            entry_id = f"{counter:08x}"
            ts = session.tick()
            stamp_ms = int(ts.timestamp() * 1000)
            if ev["role"] == "user":
                message: dict[str, Any] = {
                    "role": "user",
                    "content": [{"type": "text", "text": ev["text"]}],
                    "timestamp": stamp_ms,
                }
            elif ev["role"] == "assistant":
                content = []
                for block in ev["blocks"]:
                    if block[0] == "text":
                        content.append({"type": "text", "text": block[1]})
                    elif block[0] == "thinking":
                        content.append({"type": "thinking", "thinking": block[1]})
                    else:
                        content.append(
                            {
                                "type": "toolCall",
                                "id": block[1],
                                "name": block[2],
                                "arguments": block[3],
                            }
                        )
                message = {
                    "role": "assistant",
                    "content": content,
                    "api": "anthropic-messages",
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-5",
                    "stopReason": "toolUse"
                    if any(b[0] == "tool" for b in ev["blocks"])
                    else "stop",
                    "timestamp": stamp_ms,
                }
            else:
                message = {
                    "role": "toolResult",
                    "toolCallId": ev["id"],
                    "toolName": ev["name"],
                    "content": [{"type": "text", "text": ev["output"]}],
                    "isError": ev["error"],
                    "timestamp": stamp_ms,
                }
            yield {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": ts.isoformat().replace("+00:00", "Z"),
                "message": message,
            }
            parent = entry_id


def _claude_code_lines(session: _Session, session_id: str) -> Iterator[dict[str, Any]]:
    parent: str | None = None
    counter = 0
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/work/inventory",
        "sessionId": session_id,
        "version": "2.1.37",
        "gitBranch": "main",
    }
    for events in session.turns_iter():
        for ev in events:
            counter += 1
            uuid = f"{session_id[:8]}-{counter:012d}"
            ts = session.tick().isoformat().replace("+00:00", "Z")
            if ev["role"] == "user":
                entry = {
                    **base,
                    "parentUuid": parent,
                    "type": "user",
                    "message": {"role": "user", "content": ev["text"]},
                    "uuid": uuid,
                    "timestamp": ts,
                }
            elif ev["role"] == "assistant":
                content = []
                for block in ev["blocks"]:
                    if block[0] == "text":
                        content.append({"type": "text", "text": block[1]})
                    elif block[0] == "thinking":
                        content.append(
                            {"type": "thinking", "thinking": block[1], "signature": "sig"}
                        )
                    else:
                        content.append(
                            {
                                "type": "tool_use",
                                "id": block[1],
                                "name": block[2],
                                "input": block[3],
                            }
                        )
                entry = {
                    **base,
                    "parentUuid": parent,
                    "type": "assistant",
                    "message": {
                        "id": f"msg_{counter:08d}",
                        "type": "message",
                        "role": "assistant",
                        "model": "claude-sonnet-4-5",
                        "content": content,
                    },
                    "requestId": f"req_{counter:08d}",
                    "uuid": uuid,
                    "timestamp": ts,
                }
            else:
                entry = {
                    **base,
                    "parentUuid": parent,
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": ev["id"],
                                "content": ev["output"],
                                "is_error": ev["error"],
                            }
                        ],
                    },
                    "uuid": uuid,
                    "timestamp": ts,
                }
            yield entry
            parent = uuid


def generate_session(
    turns: int = 200,
    *,
    seed: int = 7,
    format: str = "openclaw",
    session_id: str = "demo-session",
    payload_bytes: int = 0,
    start: datetime | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield the JSONL objects of a generated session transcript.

    *payload_bytes* pads each file read to about that size (to make large transcripts);
    *start* is when it begins (2026-03-02 09:00 UTC unless given).
    """
    session = _Session(turns, seed, payload_bytes, start)
    if format == "openclaw":
        return _openclaw_lines(session, session_id)
    if format == "claude_code":
        return _claude_code_lines(session, session_id)
    raise ValueError(f"unknown session format {format!r}; use one of {', '.join(SESSION_FORMATS)}")


def write_session(
    path: str | Path,
    turns: int = 200,
    *,
    seed: int = 7,
    format: str = "openclaw",
    session_id: str = "demo-session",
    payload_bytes: int = 0,
    start: datetime | None = None,
) -> Path:
    """Write a generated transcript to *path* (JSONL) and return the path."""
    target = Path(path)
    with target.open("w", encoding="utf-8") as handle:
        for obj in generate_session(
            turns,
            seed=seed,
            format=format,
            session_id=session_id,
            payload_bytes=payload_bytes,
            start=start,
        ):
            handle.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return target
