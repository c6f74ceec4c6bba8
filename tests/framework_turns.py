"""What the framework adapters' tests say: a small compaction config and numbered turns, the
first of which holds the detail recalled at the end."""

from __future__ import annotations

from lossless import Config

#: Small enough that twenty turns compact (leaf passes, then a condensed one).
SMALL = Config().replace(
    fresh_tail_count=4,
    leaf_chunk_tokens=300,
    leaf_target_tokens=60,
    condensed_target_tokens=60,
    leaf_min_fanout=3,
    condensed_min_fanout=2,
)
DETAIL = "The staging database password rotates every Thursday."


def question(i: int, *, steps: int = 8) -> str:
    """Turn *i*'s question (turn 0 carries :data:`DETAIL`); *steps* make it longer."""
    extra = f" {DETAIL}" if i == 0 else ""
    if not steps:
        return f"Turn {i}: how is service {i} deployed, and what is its canary share?{extra}"
    said = " ".join(f"step{k} checks stage {k} of its pipeline" for k in range(steps))
    return f"Turn {i}: how is service {i} deployed? {said}{extra}"


def answer(i: int) -> str:
    """The scripted model's answer to turn *i*."""
    return f"Service {i} ships blue-green behind the balancer with a {i % 7 + 1} percent canary."


def unrelated(i: int) -> str:
    """Turn *i* of a session whose turns share no word with each other or with a question
    about :data:`DETAIL` (turn 0 carries it): only that turn is about it."""
    said = " ".join(f"w{i}x{k}" for k in range(60))
    return f"{said} {DETAIL}" if i == 0 else said
