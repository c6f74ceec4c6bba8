"""Who may do what: namespaces, access tokens and the audit log of a shared store.

A store holds namespaces (a team, a user, an agent fleet). ``lossless serve`` answers each
request for a :class:`Caller`: the server's owner (its own token, the stdio client, the local
CLI) reaches every namespace; the holder of an access token reaches one namespace, with one
role, and optionally only the session ids matching a glob. A conversation outside a caller's
reach answers as an unknown one would ("not found"), never "forbidden".

Tokens are made with ``lossless tokens create``: ``tok_<12 hex>.<secret>``, shown once; the
store keeps the id and an argon2id hash of the secret (argon2-cffi). A server verifies a
token's hash once and remembers the verdict by the token's SHA-256, but reads the token's row
on every request, so a revocation or an expiry holds at once, on every server of a database.

The audit log records who (a token id, ``owner``, ``local:USER``; never a token) did what
(writes, forgets, exports, token changes, failed authentications) to which conversation and
when; nothing of message text.
"""

from __future__ import annotations

import fnmatch
import getpass
import hashlib
import logging
import re
import secrets
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from .errors import ArgumentError, ConfigError, NotFoundError
from .model import DEFAULT_NAMESPACE, check_namespace
from .store.access import AuditRow, TokenRow
from .timestamps import format_ts, now, parse_ts

if TYPE_CHECKING:
    from .store.base import Store

__all__ = [
    "OWNER",
    "ROLES",
    "AuditRow",
    "Caller",
    "Role",
    "TokenRow",
    "Tokens",
    "audit",
    "create_token",
    "local_actor",
    "parse_expiry",
    "revoke_token",
    "token_id_of",
]

logger = logging.getLogger(__name__)

Role = Literal["read", "write", "admin"]
#: The roles, each allowing what the one before it does and more: ``read`` (assemble,
#: search, recall tools, status), ``write`` (ingest, after_turn, bootstrap, compaction) and
#: ``admin`` (the namespace's audit log too).
ROLES: tuple[Role, ...] = ("read", "write", "admin")
_TOKEN_ID = re.compile(r"^tok_[0-9a-f]{12}$")
#: How many verified tokens a server remembers (by SHA-256) before it hashes one again.
_VERIFIED_KEPT = 1024
#: How long a wrong secret is refused from memory, without hashing it again.
_REFUSED_SECONDS = 300.0


@dataclass(frozen=True)
class Caller:
    """Who a request comes from, and what it may reach."""

    #: A token id, ``owner`` (the server's own token or stdio client) or ``local:USER``.
    actor: str
    #: The one namespace it reaches (``None``: all of them, the owner).
    namespace: str | None = None
    role: Role = "admin"
    #: A glob the host's session ids it reaches must match (``None``: every one).
    sessions: str | None = None

    @property
    def is_owner(self) -> bool:
        """Whether it reaches the whole store."""
        return self.namespace is None

    def may(self, role: Role) -> bool:
        """Whether its role allows what *role* does."""
        return ROLES.index(self.role) >= ROLES.index(role)

    def reaches(self, session_id: str) -> bool:
        """Whether a host's (unqualified) *session_id* is within its sessions glob."""
        return self.sessions is None or fnmatch.fnmatchcase(session_id, self.sessions)


#: The owner of the store: every namespace, every method.
OWNER = Caller("owner")


def local_actor() -> str:
    """The actor the audit log names for the local CLI: ``local:`` and the user's name."""
    try:
        return "local:" + getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return "local:?"


def _hasher() -> Any:
    """argon2id at OWASP's smallest memory setting (19 MiB, two passes): a token's secret is
    32 random bytes, nothing to guess, so the hash guards a stolen table, and a request
    with a wrong secret must stay cheap to refuse."""
    try:
        from argon2 import PasswordHasher
    except ImportError:
        raise ConfigError(
            "access tokens are hashed with argon2-cffi, which is not installed; install"
            " lossless[http] (pip install 'lossless[http]')"
        ) from None
    return PasswordHasher(time_cost=2, memory_cost=19_456, parallelism=1)


_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_expiry(text: str, *, at: datetime | None = None) -> str:
    """When a token given ``--expires TEXT`` expires: ``30d``, ``12h``, ``90m``, ``2w`` from
    now, or an ISO-8601 date or time; an :class:`ArgumentError` saying so otherwise."""
    start = at or now()
    text = text.strip()
    match = re.fullmatch(r"(\d{1,6})\s*([mhdw])", text)
    if match:
        return format_ts(start + timedelta(seconds=int(match[1]) * _UNITS[match[2]]))
    try:
        when = parse_ts(text)
    except (ValueError, TypeError):
        when = None
    if when is None:
        raise ArgumentError(
            f"--expires {text!r} is neither a span (30d, 12h, 90m, 2w) nor an ISO-8601 time"
            " (2027-01-31 or 2027-01-31T12:00:00Z)"
        )
    if when <= start:
        raise ArgumentError(f"--expires {text!r} is in the past; give a later time")
    return format_ts(when)


def create_token(
    store: Store,
    *,
    namespace: str,
    role: str,
    sessions: str | None = None,
    expires_at: str | None = None,
    label: str | None = None,
    actor: str | None = None,
) -> tuple[str, TokenRow]:
    """A new token for *namespace* with *role*: the token itself (shown once: the store keeps
    only its hash) and its stored row. Recorded in the audit log."""
    check_namespace(namespace)
    if role not in ROLES:
        raise ArgumentError(f"a token's role is one of {', '.join(ROLES)}, not {role!r}")
    if sessions is not None and (not sessions.strip() or len(sessions) > 256):
        raise ArgumentError("--sessions is a glob of session ids (e.g. 'bot-*'), 1 to 256 chars")
    token_id = "tok_" + secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    row = TokenRow(
        token_id=token_id,
        secret_hash=_hasher().hash(secret),
        namespace=namespace,
        role=role,
        sessions=sessions,
        label=label,
        created_at=format_ts(now()),
        expires_at=expires_at,
        revoked_at=None,
    )
    store.insert_token(row)
    audit(
        store,
        actor or local_actor(),
        "token_create",
        namespace=namespace,
        detail=f"{token_id} role={role}" + (f" sessions={sessions}" if sessions else ""),
    )
    return f"{token_id}.{secret}", row


def revoke_token(store: Store, token_id: str, *, actor: str | None = None) -> TokenRow:
    """Revoke *token_id* now (every server refuses it from its next request). Recorded in
    the audit log; a :class:`NotFoundError` when there is no such token, or it was revoked."""
    row = store.get_token(token_id)
    if row is None or not store.revoke_token(token_id, format_ts(now())):
        raise NotFoundError(
            f"no live token {token_id!r}; `lossless tokens list` shows the tokens and which"
            " are revoked"
        )
    audit(store, actor or local_actor(), "token_revoke", namespace=row.namespace, detail=token_id)
    revoked = store.get_token(token_id)
    assert revoked is not None
    return revoked


class Tokens:
    """A server's check of the tokens its requests present (thread-safe)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._verified: OrderedDict[bytes, str] = OrderedDict()
        self._refused: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()
        # One thread hashes, one secret at a time: a flood of wrong secrets for a known
        # token id costs one core, and the hash's memory is one thread's, reused (each
        # thread that hashed would keep its own 19 MiB in its allocator's arena).
        self._hashing = ThreadPoolExecutor(1, thread_name_prefix="lossless-token-hash")

    def caller(self, presented: str) -> Caller | None:
        """The caller a presented token stands for, or ``None`` when it is unknown, wrong,
        expired or revoked (the same answer for each: nothing tells a guesser which)."""
        token_id, dot, secret = presented.partition(".")
        if not dot or not _TOKEN_ID.match(token_id) or not secret:
            return None
        row = self.store.get_token(token_id)
        if row is None or row.revoked_at is not None:
            return None
        if row.expires_at is not None and row.expires_at <= format_ts(now()):
            return None
        digest = hashlib.sha256(presented.encode()).digest()
        clock = time.monotonic()
        with self._lock:
            known = self._verified.get(digest)
            if known is not None:
                self._verified.move_to_end(digest)
            refused_at = self._refused.get(digest)
        if known != row.secret_hash:
            if refused_at is not None and clock - refused_at < _REFUSED_SECONDS:
                return None
            good = self._hashing.submit(self._check, digest, row.secret_hash, secret).result()
            with self._lock:
                kept = self._verified if good else self._refused
                kept[digest] = row.secret_hash if good else clock  # type: ignore[assignment]
                while len(kept) > _VERIFIED_KEPT:
                    kept.popitem(last=False)
            if not good:
                return None
        role: Role = row.role  # type: ignore[assignment]
        return Caller(token_id, row.namespace, role, row.sessions)

    def _check(self, digest: bytes, secret_hash: str, secret: str) -> bool:
        with self._lock:  # a request queued before may have verified it meanwhile
            if self._verified.get(digest) == secret_hash:
                return True
        return self._verify(secret_hash, secret)

    @staticmethod
    def _verify(secret_hash: str, secret: str) -> bool:
        from argon2.exceptions import VerificationError, VerifyMismatchError

        try:
            return bool(_hasher().verify(secret_hash, secret))
        except (VerifyMismatchError, VerificationError, ValueError):
            return False


def token_id_of(presented: str) -> str:
    """The id part of a presented token when it has the shape of one, else ``unknown`` (for
    the audit log of a failed authentication: never the secret)."""
    token_id = presented.partition(".")[0]
    return token_id if _TOKEN_ID.match(token_id) else "unknown"


def audit(
    store: Store,
    actor: str,
    action: str,
    *,
    namespace: str | None = DEFAULT_NAMESPACE,
    outcome: str = "ok",
    conversation_id: int | None = None,
    session_id: str | None = None,
    detail: str | None = None,
) -> None:
    """Add a line to the audit log; a store that cannot take it is logged, not raised (the
    work it records is done)."""
    try:
        store.append_audit(
            at=format_ts(now()),
            actor=actor,
            namespace=namespace,
            action=action,
            outcome=outcome,
            conversation_id=conversation_id,
            session_id=session_id,
            detail=detail,
        )
    except Exception as exc:  # noqa: BLE001 - the audit must not undo or hide the work
        logger.warning("the audit log could not take %s by %s: %s", action, actor, exc)
