"""``lcm_expand``: walk the DAG down from summaries, under a delegation grant.

From each given summary the walk reads the summaries it was made from, depth by depth, down to
``max_depth`` levels (and, optionally, the source messages of the leaves reached), stopping at
the token cap. Every summary read must belong to one of the grant's conversations, the depth
may not exceed the grant's, and the tokens returned are charged to the grant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from . import grants as grant_store

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["ExpandResult", "ExpandedNode", "expand"]


@dataclass(frozen=True)
class ExpandedNode:
    """A summary or message read by the expansion."""

    id: str
    kind: str  # leaf | condensed | message
    level: int  # 0 = a summary asked for, 1 = one step down, ...
    tokens: int
    content: str


@dataclass
class ExpandResult:
    """What an expansion returned."""

    nodes: list[ExpandedNode] = field(default_factory=list)
    tokens: int = 0
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "nodes": [asdict(n) for n in self.nodes],
            "tokens": self.tokens,
            "truncated": self.truncated,
        }


def expand(
    services: Services,
    grant_id: str,
    summary_ids: Sequence[str],
    *,
    max_depth: int | None = None,
    include_messages: bool = True,
    token_cap: int | None = None,
) -> ExpandResult:
    """Expand *summary_ids* under the grant (see the module docstring)."""
    store = services.store
    grant = grant_store.check(store, grant_id)
    depth = grant.max_depth if max_depth is None else max_depth
    if depth > grant.max_depth:
        raise grant_store.GrantError(
            f"this grant allows expanding {grant.max_depth} level(s) down, not {depth}"
        )
    cap = min(token_cap or services.config.max_expand_tokens, grant.tokens_left)
    allowed = set(grant.conversation_ids)
    result = ExpandResult()
    frontier: list[tuple[str, int]] = [(sid, 0) for sid in summary_ids]
    seen: set[str] = set()
    while frontier and not result.truncated:
        sid, level = frontier.pop(0)
        if sid in seen:
            continue
        seen.add(sid)
        summary = store.get_summaries([sid])[0]
        if summary.conversation_id not in allowed:
            raise grant_store.GrantError(
                f"{sid} is outside this grant's conversations; it cannot be expanded here"
            )
        if not _take(
            result,
            ExpandedNode(sid, summary.kind, level, summary.token_count, summary.content),
            cap,
        ):
            break
        parents, messages = store.summary_sources(sid)
        if level < depth:
            frontier.extend((p, level + 1) for p in parents)
        if include_messages and level < depth and messages:
            for m in store.get_messages_by_id(messages):
                node = ExpandedNode(
                    f"msg#{m.message_id}", "message", level + 1, m.token_count, m.content
                )
                if not _take(result, node, cap):
                    break
    if result.tokens:
        grant_store.charge(store, grant_id, result.tokens)
    return result


def _take(result: ExpandResult, node: ExpandedNode, cap: int) -> bool:
    if result.tokens + node.tokens > cap:
        result.truncated = True
        return False
    result.nodes.append(node)
    result.tokens += node.tokens
    return True
