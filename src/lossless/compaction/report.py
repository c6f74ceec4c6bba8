"""What a compaction run did: each written pass, and the run's report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class PassResult:
    """One written pass."""

    kind: Literal["leaf", "condensed"]
    summary_id: str
    depth: int
    sources: int
    tokens_before: int
    tokens_after: int
    level: str
    calls: int
    #: Written at once by the offline summarizer; the model's summary replaces it.
    provisional: bool = False

    @property
    def saved(self) -> int:
        """Tokens the pass took out of the active context."""
        return self.tokens_before - self.tokens_after


@dataclass
class CompactionReport:
    """What a compaction run did."""

    conversation_id: int
    mode: str
    tokens_before: int
    tokens_after: int = 0
    passes: list[PassResult] = field(default_factory=list)
    target: int | None = None
    rounds: int = 0
    errors: list[str] = field(default_factory=list)
    #: The run stopped early because its caller asked it to (a host's abort).
    stopped: bool = False
    #: The run reached its time limit (``guards.run_seconds``): what is left stays due.
    out_of_time: bool = False
    #: Set when a forced run shrank the fresh tail: the tail's tokens it left.
    tail_tokens: int | None = None

    @property
    def summarizer_calls(self) -> int:
        """Summarizer calls made (escalation can make two per pass)."""
        return sum(p.calls for p in self.passes)

    @property
    def provisional(self) -> int:
        """Passes written provisional (their model summaries still to come)."""
        return sum(p.provisional for p in self.passes)

    @property
    def reached_target(self) -> bool | None:
        """For ``until`` runs: whether the context ended at or under the target."""
        return None if self.target is None else self.tokens_after <= self.target

    def by_depth(self) -> dict[int, int]:
        """Summaries written, by depth."""
        out: dict[int, int] = {}
        for p in self.passes:
            out[p.depth] = out.get(p.depth, 0) + 1
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "conversation_id": self.conversation_id,
            "mode": self.mode,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "target": self.target,
            "reached_target": self.reached_target,
            "rounds": self.rounds,
            "summarizer_calls": self.summarizer_calls,
            "summaries_by_depth": {str(k): v for k, v in self.by_depth().items()},
            "passes": [
                {
                    "kind": p.kind,
                    "summary_id": p.summary_id,
                    "depth": p.depth,
                    "sources": p.sources,
                    "tokens_before": p.tokens_before,
                    "tokens_after": p.tokens_after,
                    "level": p.level,
                    "provisional": p.provisional,
                }
                for p in self.passes
            ],
            "errors": self.errors,
            "stopped": self.stopped,
            "out_of_time": self.out_of_time,
            "provisional": self.provisional,
            "tail_tokens": self.tail_tokens,
        }
