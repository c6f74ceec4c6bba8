"""Delegation grants: a scoped, expiring, token-capped right to expand.

A grant names the conversations a sub-agent may read, how deep it may walk the DAG, and how
many tokens it may take in all. Grant ids are random secrets; an unknown, expired or revoked
grant is refused, and a request outside the grant's conversations, beyond its depth or past
its remaining tokens is refused with a clear error.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from ..config import MAX_GRANT_DEPTH, MAX_GRANT_TTL
from ..errors import LosslessError, NotFoundError
from ..model import Grant
from ..timestamps import format_ts, now

if TYPE_CHECKING:
    from ..model import Conversation
    from ..services import Services
    from ..store.base import Store

# Grant is the stored record (lossless.model); it is named here too, where callers use it.
__all__ = ["Grant", "GrantError", "charge", "check", "create", "grant_for", "revoke", "sweep"]

_REFUSED = "this grant is unknown, expired or revoked; ask for a new one"


class GrantError(LosslessError):
    """A grant does not allow what was asked (unknown, expired, revoked, or out of scope)."""

    exit_code = 7


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
    if not 0 <= token_cap < 2**63:
        raise GrantError("a grant's token cap must be a whole number SQLite can store")
    if not -1 <= max_depth <= MAX_GRANT_DEPTH:
        raise GrantError(
            f"a grant expands 0 to {MAX_GRANT_DEPTH} levels below the summaries it names (-1: as"
            f" deep as the DAG goes), not {max_depth}"
        )
    created = now()
    grant = Grant(
        grant_id="grant_" + secrets.token_hex(16),
        conversation_ids=tuple(sorted(set(conversation_ids))),
        max_depth=max_depth,
        token_cap=token_cap,
        tokens_used=0,
        expires_at=format_ts(created + timedelta(seconds=ttl_seconds)),
        revoked_at=None,
    )
    store.insert_grant(grant, created_at=format_ts(created), purpose=purpose)
    return check(store, grant.grant_id)


def check(store: Store, grant_id: str) -> Grant:
    """The grant, if it exists, has not expired and was not revoked; :class:`GrantError`
    otherwise (the error does not say which, to forged ids as to real ones)."""
    if not isinstance(grant_id, str) or not grant_id.isascii():  # grant ids are ASCII
        raise GrantError(_REFUSED)
    grant = store.get_grant(grant_id)
    if grant is None or grant.revoked_at is not None or grant.expires_at <= format_ts(now()):
        raise GrantError(_REFUSED)
    return grant


def charge(store: Store, grant_id: str, tokens: int) -> Grant:
    """Count *tokens* against the grant (one transaction); refuse past its cap."""
    with store.transaction():
        grant = check(store, grant_id)
        if tokens > grant.tokens_left:
            raise GrantError(
                f"this grant allows {grant.tokens_left} more tokens, not {tokens}; ask for less"
            )
        store.charge_grant(grant_id, tokens)
    return check(store, grant_id)


def revoke(store: Store, grant_id: str) -> bool:
    """Revoke a grant now; ``False`` when it was revoked already. An id no grant has is a
    :class:`~lossless.errors.NotFoundError` (a mistyped id must not look revoked while the real
    grant stays live)."""
    if store.revoke_grant(grant_id, format_ts(now())):
        return True
    if store.get_grant(grant_id) is None:
        raise NotFoundError(
            f"no grant {grant_id!r}; check the id (it was printed when the grant was made):"
            " nothing was revoked"
        )
    return False


def sweep(store: Store) -> int:
    """Mark every expired grant revoked; returns how many."""
    return store.revoke_expired_grants(format_ts(now()))


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
