"""Expansion grants: the rows that bound what a delegated expansion may read.

Only the rows: whether a grant still allows something (expiry, revocation, its budget) is
decided by :mod:`lossless.retrieval.grants`, which calls these inside one transaction where it
must (a read joins an open transaction; a write in one is a savepoint).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codec import dumps, loads
from ..model import Grant
from .core import StoreCore

__all__ = ["GrantStore"]

_COLS = "grant_id, conversation_ids, max_depth, token_cap, tokens_used, expires_at, revoked_at"


def _grant(row: Sequence[Any]) -> Grant:
    return Grant(
        grant_id=str(row[0]),
        conversation_ids=tuple(int(c) for c in loads(str(row[1]))),
        max_depth=int(row[2]),
        token_cap=int(row[3]),
        tokens_used=int(row[4]),
        expires_at=str(row[5]),
        revoked_at=None if row[6] is None else str(row[6]),
    )


class GrantStore(StoreCore):
    """Expansion grants."""

    def insert_grant(self, grant: Grant, *, created_at: str, purpose: str | None = None) -> None:
        """Store a new grant (its conversation ids sorted and without repeats)."""
        with self.transaction() as conn:
            conn.execute(
                f"INSERT INTO grants ({_COLS}, purpose, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    grant.grant_id,
                    dumps(sorted(set(grant.conversation_ids))),
                    grant.max_depth,
                    grant.token_cap,
                    grant.tokens_used,
                    grant.expires_at,
                    grant.revoked_at,
                    purpose,
                    created_at,
                ),
            )

    def get_grant(self, grant_id: str) -> Grant | None:
        """The grant as stored, expired or revoked alike (``None`` if there is none)."""
        rows = self.fetchall(f"SELECT {_COLS} FROM grants WHERE grant_id = ?", (grant_id,))
        return _grant(rows[0]) if rows else None

    def charge_grant(self, grant_id: str, tokens: int) -> None:
        """Add *tokens* to what the grant has used (the caller checked its budget, in the
        same transaction)."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE grants SET tokens_used = tokens_used + ? WHERE grant_id = ?",
                (tokens, grant_id),
            )

    def revoke_grant(self, grant_id: str, at: str) -> bool:
        """Mark the grant revoked at *at*; whether it was (not if already revoked, or
        unknown)."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE grants SET revoked_at = ? WHERE grant_id = ? AND revoked_at IS NULL",
                (at, grant_id),
            )
            return int(cur.rowcount) > 0

    def revoke_expired_grants(self, at: str) -> int:
        """Mark every grant that expired by *at* and is not revoked as revoked at *at*;
        returns how many."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE grants SET revoked_at = ? WHERE revoked_at IS NULL AND expires_at <= ?",
                (at, at),
            )
            return max(int(cur.rowcount), 0)
