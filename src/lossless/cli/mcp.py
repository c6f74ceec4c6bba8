"""``lossless mcp`` (the MCP server) and ``lossless grant`` (delegation grants for it)."""

from __future__ import annotations

import importlib.util
import ipaddress
import threading
from dataclasses import asdict
from typing import Any

import click

from .output import State, emit_json, json_option, pass_state, stderr, stdout

#: The shortest bearer token accepted (a token must not be guessable).
MIN_TOKEN_CHARS = 16


class MissingSdk(click.ClickException):
    """The MCP SDK is not installed (printed as is: Rich markup would eat "[mcp]")."""

    exit_code = 2


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("mcp")
@click.option("--http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="With --http: the address.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="With --http."
)
@click.option(
    "--conversation",
    "-c",
    metavar="CONV",
    help="Pin the server to this conversation's family (id or session id).",
)
@click.option(
    "--grant",
    "grant_id",
    metavar="GRANT_ID",
    help="Serve a grant holder: lcm_expand under this grant, no lcm_expand_query.",
)
@click.option(
    "--token",
    envvar="LOSSLESS_MCP_TOKEN",
    metavar="TOKEN",
    help="With --http: require Authorization: Bearer TOKEN (required off loopback)."
    " Env: LOSSLESS_MCP_TOKEN.",
)
@click.option("--db", metavar="PATH", help="Database file; the same as `lossless --db PATH mcp`.")
@pass_state
def mcp_command(
    state: State,
    http: bool,
    host: str,
    port: int,
    conversation: str | None,
    grant_id: str | None,
    token: str | None,
    db: str | None,
) -> None:
    """Serve the recall tools to MCP clients (Claude Code, Claude Desktop, Cursor, ...).

    Tools: lcm_grep, lcm_describe, lcm_expand_query and lcm_list_conversations; with --grant,
    lcm_expand instead of lcm_expand_query. Speaks stdio unless --http (streamable HTTP at
    http://HOST:PORT/mcp, on 127.0.0.1 by default). Needs pip install 'lossless[mcp]'.
    """
    if conversation is not None and grant_id is not None:
        raise click.UsageError("give --conversation or --grant, not both: a grant has its scope")
    if http and not is_loopback(host) and not token:
        raise click.UsageError(
            f"serving on {host} exposes the whole store to the network: give --token TOKEN (or"
            " LOSSLESS_MCP_TOKEN) so that clients must send it, or serve on 127.0.0.1"
        )
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise click.UsageError(
            f"the token is too short to guess-proof; use at least {MIN_TOKEN_CHARS} characters,"
            ' e.g. python -c "import secrets; print(secrets.token_urlsafe(32))"'
        )
    if db is not None:
        state.db = db
    if importlib.util.find_spec("mcp") is None:
        raise MissingSdk(
            "the MCP server needs the official MCP Python SDK: pip install 'lossless[mcp]'"
        )
    if http or conversation is not None or grant_id is not None:
        server = _build(state, conversation=conversation, grant_id=grant_id)
        if http:
            guarded = "; clients must send the bearer token" if token else ""
            stderr.print(
                f"lossless MCP server (streamable HTTP) on http://{host}:{port}/mcp{guarded};"
                " Ctrl-C stops it",
                highlight=False,
            )
        _serve(server, http=http, host=host, port=port, token=token if http else None)
        return
    # The store's scope on stdio: the client's handshake is answered while the SDK loads and
    # the store opens on another thread (lossless.mcp_front). The wire is taken first, before
    # that thread competes for the interpreter.
    from ..mcp_front import open_wire

    # stdout belongs to the protocol on stdio: nothing else may be printed there.
    opening = open_wire()
    built: list[Any] = []

    def build() -> None:
        try:
            built.append(_build(state))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, raised there
            built.append(exc)

    builder = threading.Thread(target=build, name="lossless-mcp-build", daemon=True)
    builder.start()
    builder.join()
    if isinstance(built[0], BaseException):
        raise built[0]
    _serve(built[0], opening=opening)


def _build(state: State, *, conversation: str | None = None, grant_id: str | None = None) -> Any:
    """The MCP server over the store *state* names. The default store is made on first use; a
    store named (--db, LOSSLESS_DB, the config) that does not exist yet is waited for: each
    tool call says where it is expected until a host's first turn or an import makes it (a
    host starts its MCP server before its first hook runs)."""
    try:
        from ..mcp_server import build_server
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("mcp", "mcp_types", "pydantic"):
            raise
        raise MissingSdk(str(exc)) from None
    from ..errors import NoStore
    from .conversations import resolve

    create = state.db is None and not state.config.db
    if conversation is not None or grant_id is not None:
        engine = state.engine(create=create)
        pinned = resolve(engine, conversation).conversation_id if conversation else None
        return build_server(engine, conversation=pinned, grant_id=grant_id)
    try:
        return build_server(state.engine(create=create))
    except NoStore as exc:
        stderr.print(
            f"warning: {exc}; serving anyway: the tools answer once the store is made",
            highlight=False,
        )
        return build_server(lambda: state.engine(create=False))


def _serve(server: Any, **how: Any) -> None:
    from ..mcp_server import serve

    serve(server, **how)


@click.command("grant")
@click.argument("conversation", required=False)
@click.option("--ttl", type=click.IntRange(min=1), metavar="SECONDS", help="Lifetime.")
@click.option("--cap", type=click.IntRange(min=1), metavar="TOKENS", help="Tokens it may expand.")
@click.option("--depth", type=click.IntRange(min=0), help="Levels it may expand down.")
@click.option("--only", is_flag=True, help="That conversation alone, not its family.")
@click.option("--revoke", "revoke_id", metavar="GRANT_ID", help="Revoke this grant instead.")
@json_option
@pass_state
def grant_command(
    state: State,
    conversation: str | None,
    ttl: int | None,
    cap: int | None,
    depth: int | None,
    only: bool,
    revoke_id: str | None,
    as_json: bool,
) -> None:
    """Make a delegation grant over CONVERSATION for a sub-agent, or --revoke one.

    Prints the grant id (for `lossless mcp --grant GRANT_ID`). The grant covers the
    conversation's family (--only: itself), expires after --ttl seconds (default
    grant_ttl_seconds), and allows --cap tokens (max_expand_tokens) and --depth levels
    (grant_max_depth) of expansion in all.
    """
    from .conversations import resolve

    engine = state.engine()
    if revoke_id is not None:
        if conversation is not None:
            raise click.UsageError("give a CONVERSATION to grant or --revoke GRANT_ID, not both")
        newly = engine.revoke_grant(revoke_id)
        if as_json:
            emit_json({"grant_id": revoke_id, "revoked": True, "already": not newly})
        else:
            said = "revoked" if newly else "already revoked"
            stdout.print(f"{said} {revoke_id}", highlight=False)
        return
    if conversation is None:
        raise click.UsageError("name the CONVERSATION to grant (or --revoke GRANT_ID)")
    conv = resolve(engine, conversation)
    grant = engine.create_grant(
        conv.conversation_id,
        family=not only,
        token_cap=cap,
        max_depth=depth,
        ttl_seconds=ttl,
        purpose="lossless grant",
    )
    if as_json:
        emit_json(asdict(grant))
        return
    stdout.print(grant.grant_id, highlight=False)
    stderr.print(
        f"conversations {', '.join(map(str, grant.conversation_ids))}; depth {grant.max_depth};"
        f" {grant.token_cap:,} tokens; expires {grant.expires_at}",
        highlight=False,
    )
