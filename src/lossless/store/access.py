"""Namespaces, access tokens and the audit log: the rows ``lossless serve`` shares between
its tenants (see :mod:`lossless.access` for what they mean).

Only rows: a token's secret arrives here already hashed, and whether a token still allows a
request (expiry, revocation, its role) is decided above the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model import DEFAULT_NAMESPACE
from .core import NO_LIMIT, StoreCore

__all__ = ["AccessStore", "AuditRow", "TokenRow"]

_TOKEN_COLS = (
    "token_id, secret_hash, namespace, role, sessions, label, created_at, expires_at, revoked_at"
)
_AUDIT_COLS = "audit_id, at, actor, namespace, action, conversation_id, session_id, outcome, detail"


@dataclass(frozen=True)
class TokenRow:
    """An ``access_tokens`` row."""

    token_id: str
    secret_hash: str
    namespace: str
    role: str
    sessions: str | None
    label: str | None
    created_at: str
    expires_at: str | None
    revoked_at: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, without the hash."""
        return {
            "token_id": self.token_id,
            "namespace": self.namespace,
            "role": self.role,
            "sessions": self.sessions,
            "label": self.label,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True)
class AuditRow:
    """An ``audit_log`` row."""

    audit_id: int
    at: str
    actor: str
    namespace: str | None
    action: str
    conversation_id: int | None
    session_id: str | None
    outcome: str
    detail: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "audit_id": self.audit_id,
            "at": self.at,
            "actor": self.actor,
            "namespace": self.namespace or DEFAULT_NAMESPACE,
            "action": self.action,
            "conversation_id": self.conversation_id,
            "session_id": self.session_id,
            "outcome": self.outcome,
            "detail": self.detail,
        }


def _token(row: Sequence[Any]) -> TokenRow:
    return TokenRow(*(None if v is None else str(v) for v in row))  # type: ignore[arg-type]


def _audit(row: Sequence[Any]) -> AuditRow:
    return AuditRow(
        audit_id=int(row[0]),
        at=str(row[1]),
        actor=str(row[2]),
        namespace=None if row[3] is None else str(row[3]),
        action=str(row[4]),
        conversation_id=None if row[5] is None else int(row[5]),
        session_id=None if row[6] is None else str(row[6]),
        outcome=str(row[7]),
        detail=None if row[8] is None else str(row[8]),
    )


class AccessStore(StoreCore):
    """Namespaces' conversations, access tokens and the audit log."""

    def namespace_conversations(self, namespace: str) -> list[tuple[int, str]]:
        """Every conversation of *namespace* as ``(conversation_id, stored session id)``, by
        id (the owner's, ``default``, are those with no namespace)."""
        if namespace == DEFAULT_NAMESPACE:
            rows = self.fetchall(
                "SELECT conversation_id, session_id FROM conversations"
                " WHERE namespace IS NULL ORDER BY conversation_id"
            )
        else:
            rows = self.fetchall(
                "SELECT conversation_id, session_id FROM conversations"
                " WHERE namespace = ? ORDER BY conversation_id",
                (namespace,),
            )
        return [(int(r[0]), str(r[1])) for r in rows]

    def insert_token(self, row: TokenRow) -> None:
        """Store a new token (its secret already hashed)."""
        with self.transaction() as conn:
            conn.execute(
                f"INSERT INTO access_tokens ({_TOKEN_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.token_id,
                    row.secret_hash,
                    row.namespace,
                    row.role,
                    row.sessions,
                    row.label,
                    row.created_at,
                    row.expires_at,
                    row.revoked_at,
                ),
            )

    def get_token(self, token_id: str) -> TokenRow | None:
        """The token as stored, expired or revoked alike (``None`` if there is none)."""
        rows = self.fetchall(
            f"SELECT {_TOKEN_COLS} FROM access_tokens WHERE token_id = ?", (token_id,)
        )
        return _token(rows[0]) if rows else None

    def list_tokens(self, namespace: str | None = None) -> list[TokenRow]:
        """Every token (of *namespace*), oldest first."""
        where, params = ("", ()) if namespace is None else (" WHERE namespace = ?", (namespace,))
        rows = self.fetchall(
            f"SELECT {_TOKEN_COLS} FROM access_tokens{where} ORDER BY created_at, token_id",
            params,
        )
        return [_token(r) for r in rows]

    def revoke_token(self, token_id: str, at: str) -> bool:
        """Mark the token revoked at *at*; ``False`` when there is no such live token."""
        with self.transaction() as conn:
            done = conn.execute(
                "UPDATE access_tokens SET revoked_at = ? WHERE token_id = ? AND revoked_at IS NULL"
                " RETURNING token_id",
                (at, token_id),
            ).fetchone()
        return done is not None

    def append_audit(
        self,
        *,
        at: str,
        actor: str,
        namespace: str | None,
        action: str,
        outcome: str,
        conversation_id: int | None = None,
        session_id: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Add one line to the audit log (in a transaction of its own)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO audit_log (at, actor, namespace, action, conversation_id,"
                " session_id, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    at,
                    actor,
                    None if namespace == DEFAULT_NAMESPACE else namespace,
                    action,
                    conversation_id,
                    session_id,
                    outcome,
                    detail,
                ),
            )

    def read_audit(
        self,
        *,
        namespace: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRow]:
        """The audit log's lines, newest first, filtered (``namespace='default'``: the
        owner's)."""
        where: list[str] = []
        params: list[Any] = []
        if namespace == DEFAULT_NAMESPACE:
            where.append("namespace IS NULL")
        elif namespace is not None:
            where.append("namespace = ?")
            params.append(namespace)
        for column, value in (("actor", actor), ("action", action)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("at >= ?")
            params.append(since)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self.fetchall(
            f"SELECT {_AUDIT_COLS} FROM audit_log{clause} ORDER BY audit_id DESC LIMIT ?",
            (*params, NO_LIMIT if limit is None else limit),
        )
        return [_audit(r) for r in rows]
