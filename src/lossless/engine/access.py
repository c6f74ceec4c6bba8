"""The engine's access control: namespaces, the access tokens of ``lossless serve`` and the
audit log (see :mod:`lossless.access`)."""

from __future__ import annotations

from ..access import AuditRow, TokenRow, Tokens, audit, create_token, revoke_token
from .base import Facade

__all__ = ["Access"]


class Access(Facade):
    """Namespaces, tokens and the audit log."""

    def namespace_conversations(self, namespace: str) -> list[tuple[int, str]]:
        """Every conversation of *namespace* as ``(conversation_id, stored session id)``."""
        return self.store.namespace_conversations(namespace)

    def create_token(
        self,
        *,
        namespace: str,
        role: str,
        sessions: str | None = None,
        expires_at: str | None = None,
        label: str | None = None,
        actor: str | None = None,
    ) -> tuple[str, TokenRow]:
        """A new access token (shown once) and its stored row (see
        :func:`lossless.access.create_token`)."""
        return create_token(
            self.store,
            namespace=namespace,
            role=role,
            sessions=sessions,
            expires_at=expires_at,
            label=label,
            actor=actor,
        )

    def tokens(self, namespace: str | None = None) -> list[TokenRow]:
        """Every access token (of *namespace*), oldest first, without secrets."""
        return self.store.list_tokens(namespace)

    def revoke_token(self, token_id: str, *, actor: str | None = None) -> TokenRow:
        """Revoke an access token now (see :func:`lossless.access.revoke_token`)."""
        return revoke_token(self.store, token_id, actor=actor)

    def token_check(self) -> Tokens:
        """What a server checks presented tokens with."""
        return Tokens(self.store)

    def audit_log(
        self,
        *,
        namespace: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRow]:
        """The audit log's lines, newest first, filtered."""
        return self.store.read_audit(
            namespace=namespace, actor=actor, action=action, since=since, limit=limit
        )

    def record(
        self,
        actor: str,
        action: str,
        *,
        namespace: str | None = None,
        outcome: str = "ok",
        conversation_id: int | None = None,
        session_id: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Add a line to the audit log (never raises: see :func:`lossless.access.audit`)."""
        audit(
            self.store,
            actor,
            action,
            namespace=namespace,
            outcome=outcome,
            conversation_id=conversation_id,
            session_id=session_id,
            detail=detail,
        )
