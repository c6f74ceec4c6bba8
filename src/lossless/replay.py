"""Replay a transcript turn by turn, as an agent host would drive the engine.

The transcript is first read into a scratch store (so every format and the reconciliation
rules apply), then fed to the target engine one turn at a time — a turn is a user message and
everything up to the next one — with ``after_turn`` and a token budget, recording what
compaction did after each turn. Messages keep their original ids and times.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .model import StoredMessage
from .timestamps import parse_ts

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["ReplayReport", "TurnRecord", "replay_messages", "replay_transcript", "turns_of"]


@dataclass(frozen=True)
class TurnRecord:
    """One replayed turn."""

    turn: int
    messages: int
    context_tokens: int
    raw_tokens: int
    passes: int
    summaries_written: dict[int, int]
    error: str | None = None


@dataclass
class ReplayReport:
    """What a replay did, turn by turn and in total."""

    conversation_id: int
    budget: int
    turns: list[TurnRecord] = field(default_factory=list)

    @property
    def compaction_turns(self) -> list[TurnRecord]:
        """The turns after which compaction wrote summaries."""
        return [t for t in self.turns if t.passes]

    @property
    def peak_context_tokens(self) -> int:
        """The largest context after any turn."""
        return max((t.context_tokens for t in self.turns), default=0)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "conversation_id": self.conversation_id,
            "budget": self.budget,
            "turns": len(self.turns),
            "messages": sum(t.messages for t in self.turns),
            "final_context_tokens": self.turns[-1].context_tokens if self.turns else 0,
            "raw_tokens": self.turns[-1].raw_tokens if self.turns else 0,
            "peak_context_tokens": self.peak_context_tokens,
            "compaction_events": [
                {
                    "turn": t.turn,
                    "passes": t.passes,
                    "summaries": {str(k): v for k, v in t.summaries_written.items()},
                    "context_tokens": t.context_tokens,
                }
                for t in self.compaction_turns
            ],
            "errors": [{"turn": t.turn, "error": t.error} for t in self.turns if t.error],
        }


def turns_of(messages: Sequence[StoredMessage]) -> Iterator[list[StoredMessage]]:
    """Group messages into turns: each user message starts one."""
    turn: list[StoredMessage] = []
    for m in messages:
        if m.role == "user" and turn:
            yield turn
            turn = []
        turn.append(m)
    if turn:
        yield turn


def replay_messages(
    engine: Engine,
    session_id: str,
    messages: Sequence[StoredMessage],
    budget: int,
    *,
    on_turn: Callable[[TurnRecord], None] | None = None,
) -> ReplayReport:
    """Feed stored *messages* (from another store) into *engine* turn by turn."""
    conv = engine.conversation(session_id, create=True)
    report = ReplayReport(conv.conversation_id, budget)
    raw = 0
    for n, turn in enumerate(turns_of(messages), start=1):
        norms = [
            engine.normalize(
                m.to_source(),
                format=m.source_format,
                external_id=m.external_id or f"replay:{m.message_id}",
                created_at=parse_ts(m.created_at),
                metadata=m.metadata,
            )
            for m in turn
        ]
        raw += sum(x.token_count for x in norms)
        result = engine.after_turn(conv.conversation_id, norms, token_budget=budget)
        written: dict[int, int] = {}
        passes = 0
        if result.compaction is not None:
            passes = len(result.compaction.passes)
            written = result.compaction.by_depth()
        tokens = (
            result.compaction.tokens_after
            if result.compaction is not None
            else sum(i.tokens for i in engine.context(conv.conversation_id))
        )
        record = TurnRecord(
            turn=n,
            messages=len(turn),
            context_tokens=tokens,
            raw_tokens=raw,
            passes=passes,
            summaries_written=written,
            error=result.error,
        )
        report.turns.append(record)
        if on_turn is not None:
            on_turn(record)
    return report


def replay_transcript(
    engine: Engine,
    transcript: str | Path,
    budget: int,
    *,
    format: str | None = None,
    session_id: str | None = None,
    on_turn: Callable[[TurnRecord], None] | None = None,
) -> ReplayReport:
    """Read *transcript* (any supported format) and replay it into *engine*."""
    from .engine import Engine

    with tempfile.TemporaryDirectory(prefix="lossless-replay-") as scratch:
        with Engine.open(Path(scratch) / "source.db", config=engine.config) as source:
            reports = source.bootstrap(transcript, format=format)
            if not reports or reports[0].mode == "failed":
                problems = reports[0].problems if reports else []
                raise problems[0] if problems else ValueError(f"nothing to replay in {transcript}")
            main = reports[0]
            messages = source.messages(main.conversation_id)
        return replay_messages(
            engine, session_id or main.session_id, messages, budget, on_turn=on_turn
        )
