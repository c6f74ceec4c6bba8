"""``lossless tokens`` and ``lossless audit``: the access tokens of ``lossless serve`` and
the audit log of what their holders (and the owner) did (docs/security.md)."""

from __future__ import annotations

import click
from rich.text import Text

from ..access import ROLES, TokenRow, local_actor, parse_expiry
from ..model import DEFAULT_NAMESPACE, check_namespace
from .output import Column, State, emit_json, json_option, pass_state, print_listing, stdout


@click.group("tokens")
def tokens_command() -> None:
    """Create, list and revoke the access tokens of `lossless serve` (a namespace each)."""


@tokens_command.command("create")
@click.option(
    "--namespace",
    required=True,
    help="The namespace the token reaches ('default': the owner's own conversations).",
)
@click.option(
    "--role",
    type=click.Choice(ROLES),
    default="write",
    show_default=True,
    help="read: assemble, search, recall; write: also store turns and compact; admin: also"
    " read the namespace's audit log.",
)
@click.option("--sessions", metavar="GLOB", help="Only session ids matching GLOB (e.g. 'bot-*').")
@click.option("--expires", metavar="WHEN", help="A span (30d, 12h, 90m, 2w) or an ISO-8601 time.")
@click.option("--label", help="A note for `tokens list` (who holds it).")
@json_option
@pass_state
def tokens_create_command(
    state: State,
    namespace: str,
    role: str,
    sessions: str | None,
    expires: str | None,
    label: str | None,
    as_json: bool,
) -> None:
    """Make a token for one namespace and print it once: the store keeps only its hash.

    A client sends it as `Authorization: Bearer TOKEN` to `lossless serve --http`; it sees
    only its namespace's conversations (another's are unknown to it, never forbidden).
    """
    check_namespace(namespace)
    expires_at = parse_expiry(expires) if expires is not None else None
    token, row = state.engine(create=True).create_token(
        namespace=namespace,
        role=role,
        sessions=sessions,
        expires_at=expires_at,
        label=label,
    )
    if as_json:
        emit_json({**row.to_dict(), "token": token})
        return
    click.echo(token)
    stdout.print(
        f"[dim]{row.token_id}: namespace {namespace}, role {role}"
        + (f", sessions {sessions}" if sessions else "")
        + (f", expires {expires_at}" if expires_at else "")
        + ". Shown once: the store keeps only its hash.[/]",
        highlight=False,
    )


@tokens_command.command("list")
@click.option("--namespace", help="Only this namespace's tokens.")
@json_option
@pass_state
def tokens_list_command(state: State, namespace: str | None, as_json: bool) -> None:
    """List the tokens (never their secrets): id, namespace, role, sessions, state."""
    if namespace is not None:
        check_namespace(namespace)
    rows = state.engine(create=True).tokens(namespace)
    if as_json:
        emit_json([r.to_dict() for r in rows])
        return
    if not rows:
        stdout.print("no tokens; make one with `lossless tokens create --namespace NAME`")
        return

    def state_of(r: TokenRow) -> str:
        if r.revoked_at:
            return f"revoked {r.revoked_at[:16]}"
        return f"expires {r.expires_at[:16]}" if r.expires_at else "live"

    print_listing(
        [
            Column("token", [Text(r.token_id) for r in rows]),
            Column("namespace", [Text(r.namespace) for r in rows]),
            Column("role", [Text(r.role) for r in rows]),
            Column("sessions", [Text(r.sessions or "*") for r in rows]),
            Column("state", [Text(state_of(r)) for r in rows]),
            Column("label", [Text(r.label or "") for r in rows]),
        ]
    )


@tokens_command.command("revoke")
@click.argument("token_id")
@pass_state
def tokens_revoke_command(state: State, token_id: str) -> None:
    """Revoke TOKEN_ID (tok_…): every server refuses it from its next request."""
    row = state.engine(create=True).revoke_token(token_id.partition(".")[0])
    stdout.print(f"revoked {row.token_id} (namespace {row.namespace})", highlight=False)


@click.command("audit")
@click.option("--namespace", help="Only this namespace's lines ('default': the owner's).")
@click.option("--actor", help="Only this actor's lines (a token id, owner, local:USER).")
@click.option("--action", help="Only this action's lines (after_turn, forget, token_create, ...).")
@click.option("--since", metavar="TIME", help="Only lines at or after this ISO-8601 time.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@json_option
@pass_state
def audit_command(
    state: State,
    namespace: str | None,
    actor: str | None,
    action: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Who did what to which conversation, and when, newest first: writes over `lossless
    serve --http`, forgets, exports, token changes and failed authentications. It names
    tokens by id and holds no message text."""
    if namespace is not None and namespace != DEFAULT_NAMESPACE:
        check_namespace(namespace)
    rows = state.engine().audit_log(
        namespace=namespace, actor=actor, action=action, since=since, limit=limit
    )
    if as_json:
        emit_json([r.to_dict() for r in rows])
        return
    if not rows:
        stdout.print("the audit log has no such lines", highlight=False)
        return
    print_listing(
        [
            Column("at", [Text(r.at[:19].replace("T", " ")) for r in rows]),
            Column("actor", [Text(r.actor) for r in rows]),
            Column("namespace", [Text(r.namespace or DEFAULT_NAMESPACE) for r in rows]),
            Column("action", [Text(r.action) for r in rows]),
            Column(
                "conversation",
                [Text("" if r.conversation_id is None else str(r.conversation_id)) for r in rows],
                justify="right",
            ),
            Column("session", [Text(r.session_id or "") for r in rows], most=24),
            Column("outcome", [Text(r.outcome) for r in rows]),
            Column("detail", [Text(r.detail or "") for r in rows]),
        ]
    )


__all__ = ["audit_command", "local_actor", "tokens_command"]
