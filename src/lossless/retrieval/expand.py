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

from ..errors import NotFoundError
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
    #: Why the walk stopped early (the cap, what set it, the first item that did not fit, and
    #: what to do), when it did.
    stopped: str | None = None
    #: The grant's tokens left after this expansion was charged.
    grant_tokens_left: int | None = None
    #: The first item that did not fit: (id, tokens).
    next_item: tuple[str, int] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out: dict[str, Any] = {
            "nodes": [asdict(n) for n in self.nodes],
            "tokens": self.tokens,
            "truncated": self.truncated,
            "grant_tokens_left": self.grant_tokens_left,
        }
        if self.stopped:
            out["stopped"] = self.stopped
        return out


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
    asked = token_cap or services.config.max_expand_tokens
    cap = min(asked, grant.tokens_left)
    allowed = set(grant.conversation_ids)
    result = ExpandResult()
    frontier: list[tuple[str, int]] = [(sid, 0) for sid in summary_ids]
    seen: set[str] = set()
    while frontier and not result.truncated:
        sid, level = frontier.pop(0)
        if sid in seen:
            continue
        seen.add(sid)
        try:
            summary = store.get_summaries([sid])[0]
        except NotFoundError:
            summary = None
        if summary is None or summary.conversation_id not in allowed:
            # the same words for a summary of another conversation and one nobody has
            raise grant_store.GrantError(
                f"{sid} is outside this grant's conversations, or no summary at all; it cannot"
                " be expanded here (lcm_describe of the grant's summaries names the ids below)"
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
    result.grant_tokens_left = grant.tokens_left - result.tokens
    if result.truncated and result.next_item is not None:
        result.stopped = _why_stopped(
            result,
            cap,
            by_grant=grant.tokens_left < asked,
            by_caller=token_cap is not None,
        )
    return result


def _why_stopped(result: ExpandResult, cap: int, *, by_grant: bool, by_caller: bool) -> str:
    """What stopped the walk, in words a model acts on."""
    item, tokens = result.next_item or ("", 0)
    if by_grant:
        bound = f"the grant has {cap:,} tokens left"
        advice = "ask the user for a new grant, or lcm_describe the id to read it in pieces"
    else:
        bound = f"the cap is {cap:,} tokens" + (
            " (token_cap)" if by_caller else " (max_expand_tokens)"
        )
        advice = (
            f"ask again with token_cap of at least {result.tokens + tokens:,}, fewer"
            " summary_ids, max_depth lower, or include_messages false"
        )
    done = (
        f"returned {len(result.nodes)} item(s), {result.tokens:,} tokens; "
        if result.nodes
        else "nothing returned: "
    )
    return f"{done}{item} ({tokens:,} tokens) did not fit: {bound}; {advice}"


def _take(result: ExpandResult, node: ExpandedNode, cap: int) -> bool:
    if result.tokens + node.tokens > cap:
        result.truncated = True
        result.next_item = (node.id, node.tokens)
        return False
    result.nodes.append(node)
    result.tokens += node.tokens
    return True
