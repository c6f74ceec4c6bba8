"""Delegation grants: a scoped, expiring, token-capped right to expand.

A grant names the conversations a sub-agent may read, how deep it may walk the DAG, and how
many tokens it may take in all. Grant ids are random secrets; an unknown, expired or revoked
grant is refused, and a request outside the grant's conversations, beyond its depth or past
its remaining tokens is refused with a clear error.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from ..codec import dumps, loads
from ..config import MAX_GRANT_TTL
from ..errors import LosslessError
from ..timestamps import format_ts, now

if TYPE_CHECKING:
    from ..model import Conversation
    from ..services import Services
    from ..store.base import Store

__all__ = ["Grant", "GrantError", "charge", "check", "create", "revoke", "sweep"]


class GrantError(LosslessError):
    """A grant does not allow what was asked (unknown, expired, revoked, or out of scope)."""

    exit_code = 7


@dataclass(frozen=True)
class Grant:
    """A delegation grant as stored."""

    grant_id: str
    conversation_ids: tuple[int, ...]
    max_depth: int
    token_cap: int
    tokens_used: int
    expires_at: str
    revoked_at: str | None

    @property
    def tokens_left(self) -> int:
        """Tokens the grant still allows."""
        return max(0, self.token_cap - self.tokens_used)


_COLS = "grant_id, conversation_ids, max_depth, token_cap, tokens_used, expires_at, revoked_at"


def _grant(row: Sequence[object]) -> Grant:
    return Grant(
        grant_id=str(row[0]),
        conversation_ids=tuple(int(c) for c in loads(str(row[1]))),
        max_depth=int(row[2]),  # type: ignore[call-overload]
        token_cap=int(row[3]),  # type: ignore[call-overload]
        tokens_used=int(row[4]),  # type: ignore[call-overload]
        expires_at=str(row[5]),
        revoked_at=None if row[6] is None else str(row[6]),
    )


def create(
    store: Store,
    conversation_ids: Sequence[int],
    *,
    token_cap: int,
    max_depth: int,
    ttl_seconds: int,
    purpose: str | None = None,
) -> Grant:
    """Create a grant over *conversation_ids*."""
    if not conversation_ids:
        raise GrantError("a grant needs at least one conversation")
    if not 1 <= ttl_seconds <= MAX_GRANT_TTL:
        raise GrantError(f"a grant lives from 1 to {MAX_GRANT_TTL} seconds, not {ttl_seconds}")
    if not (0 <= token_cap < 2**63 and -1 <= max_depth < 2**63):
        raise GrantError("a grant's token cap and depth must be whole numbers SQLite can store")
    grant_id = "grant_" + secrets.token_hex(16)
    created = now()
    with store.transaction() as conn:
        conn.execute(
            f"INSERT INTO grants ({_COLS}, purpose, created_at)"
            " VALUES (?, ?, ?, ?, 0, ?, NULL, ?, ?)",
            (
                grant_id,
                dumps(sorted(set(conversation_ids))),
                max_depth,
                token_cap,
                format_ts(created + timedelta(seconds=ttl_seconds)),
                purpose,
                format_ts(created),
            ),
        )
    return check(store, grant_id)


def check(store: Store, grant_id: str) -> Grant:
    """The grant, if it exists, has not expired and was not revoked; :class:`GrantError`
    otherwise (the error does not say which, to forged ids as to real ones)."""
    if not isinstance(grant_id, str) or not grant_id.isascii():  # grant ids are ASCII
        raise GrantError("this grant is unknown, expired or revoked; ask for a new one")
    rows = store.fetchall(f"SELECT {_COLS} FROM grants WHERE grant_id = ?", (grant_id,))
    if not rows:
        raise GrantError("this grant is unknown, expired or revoked; ask for a new one")
    grant = _grant(rows[0])
    if grant.revoked_at is not None or grant.expires_at <= format_ts(now()):
        raise GrantError("this grant is unknown, expired or revoked; ask for a new one")
    return grant


def charge(store: Store, grant_id: str, tokens: int) -> Grant:
    """Count *tokens* against the grant (one transaction); refuse past its cap."""
    with store.transaction() as conn:
        grant = check(store, grant_id)
        if tokens > grant.tokens_left:
            raise GrantError(
                f"this grant allows {grant.tokens_left} more tokens, not {tokens}; ask for less"
            )
        conn.execute(
            "UPDATE grants SET tokens_used = tokens_used + ? WHERE grant_id = ?", (tokens, grant_id)
        )
    return check(store, grant_id)


def revoke(store: Store, grant_id: str) -> None:
    """Revoke a grant now (revoking twice, or an unknown id, is not an error)."""
    with store.transaction() as conn:
        conn.execute(
            "UPDATE grants SET revoked_at = ? WHERE grant_id = ? AND revoked_at IS NULL",
            (format_ts(now()), grant_id),
        )


def sweep(store: Store) -> int:
    """Mark every expired grant revoked; returns how many."""
    stamp = format_ts(now())
    with store.transaction() as conn:
        cur = conn.execute(
            "UPDATE grants SET revoked_at = ? WHERE revoked_at IS NULL AND expires_at <= ?",
            (stamp, stamp),
        )
        return max(int(cur.rowcount), 0)


def grant_for(
    services: Services,
    conversation: Conversation,
    *,
    family: bool = True,
    token_cap: int | None = None,
    max_depth: int | None = None,
    ttl_seconds: int | None = None,
    purpose: str | None = None,
) -> Grant:
    """A grant over *conversation* (and its family): what a sub-agent may expand. Expired
    grants are swept first. Defaults: ``max_expand_tokens``, ``grant_max_depth``,
    ``grant_ttl_seconds``."""
    store = services.store
    cfg = services.config
    ids = store.family_ids(conversation) if family else [conversation.conversation_id]
    sweep(store)
    return create(
        store,
        ids,
        token_cap=token_cap or cfg.max_expand_tokens,
        max_depth=cfg.grant_max_depth if max_depth is None else max_depth,
        ttl_seconds=ttl_seconds or cfg.grant_ttl_seconds,
        purpose=purpose,
    )
