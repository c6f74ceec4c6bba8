"""``lossless serve``: the engine over JSON-RPC 2.0 for hosts that are not Python."""

from __future__ import annotations

import dataclasses
import os
import secrets
import stat
import sys
from pathlib import Path

import click

from ..engine import Engine
from ..integrations.finisher import finish_if_pending
from ..serve.http import IDLE_SECONDS, MAX_CONNECTIONS, REQUEST_SECONDS
from .mcp import MIN_TOKEN_CHARS, is_loopback
from .output import State, pass_state, stderr


def _address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r} is not HOST:PORT, e.g. 127.0.0.1:8766")
    return host.strip("[]") or "127.0.0.1", int(port)


@click.command("serve")
@click.option("--stdio", is_flag=True, help="Newline-delimited JSON-RPC on stdin/stdout (default).")
@click.option("--http", "http", metavar="HOST:PORT", help="JSON-RPC over HTTP (POST /) instead.")
@click.option(
    "--unix",
    "unix_socket",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="JSON-RPC over HTTP on this unix socket (mode 600) instead of a TCP address.",
)
@click.option(
    "--token",
    envvar="LOSSLESS_SERVE_TOKEN",
    metavar="TOKEN",
    help="With --http: the bearer token clients must send (default: a new random one)."
    " Env: LOSSLESS_SERVE_TOKEN.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --http: write the token to this file (mode 600) for clients to read.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --token-file: replace what is there even when it is a symbolic link or not"
    " the user's own file.",
)
@click.option(
    "--transcript-root",
    "transcript_roots",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="FOLDER",
    help="With --http: a folder bootstrap may read transcripts under (repeatable; default:"
    " the installed hosts' transcript folders).",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="With --http: allow an address other than loopback (the token still guards it).",
)
@click.option(
    "--workers", type=click.IntRange(1, 64), default=8, show_default=True, help="Worker threads."
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(0.1, 3600),
    default=REQUEST_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="With --http/--unix: a request's headers and body must arrive within this (408).",
)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(0.1, 3600),
    default=IDLE_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="With --http/--unix: close a kept-alive connection idle this long.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 1_000_000),
    default=MAX_CONNECTIONS,
    show_default=True,
    help="With --http/--unix: open connections past which a request gets a 503.",
)
@click.option(
    "--foreground-compaction",
    is_flag=True,
    help="Compact inside after_turn instead of in the background.",
)
@click.option("--db", metavar="PATH", help="Database file or URL; the same as `lossless --db`.")
@pass_state
def serve_command(
    state: State,
    stdio: bool,
    http: str | None,
    unix_socket: Path | None,
    token: str | None,
    token_file: Path | None,
    force: bool,
    transcript_roots: tuple[Path, ...],
    allow_remote: bool,
    workers: int,
    request_timeout: float,
    idle_timeout: float,
    max_connections: int,
    foreground_compaction: bool,
    db: str | None,
) -> None:
    """Serve the engine over JSON-RPC 2.0 (docs/serve.md).

    Methods: bootstrap, ingest, ingest_batch, after_turn, assemble, compact, grep, describe,
    expand, expand_query, session_summary, resume, status, doctor, tools, call_tool,
    wait_for_compaction; rpc.discover lists them with their parameters. With --stdio (the
    default) a host spawns the server as its child and closing stdin stops it; with --http
    several hosts share one server on a loopback address.
    """
    from ..serve import serve_http, serve_stdio
    from ..serve.http import Limits

    if sum(map(bool, (stdio, http, unix_socket))) > 1:
        raise click.UsageError("give one of --stdio, --http HOST:PORT and --unix PATH")
    if db is not None:
        state.db = db
    # A request never waits for a summarizer: compaction after a turn runs in the background.
    state._config = dataclasses.replace(
        state.config, background_compaction=not foreground_compaction
    )
    if http is None and unix_socket is None:
        engine = state.engine(create=True)
        try:
            serve_stdio(engine, workers=workers)
        finally:
            _finish_after(state, engine)
        return
    host, port = _address(http) if http is not None else ("127.0.0.1", 0)
    if unix_socket is None and not is_loopback(host) and not allow_remote:
        raise click.UsageError(
            f"{host} is not a loopback address: the server would answer the network. Serve on"
            " 127.0.0.1, or add --allow-remote (clients still need the token)"
        )
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise click.UsageError(
            f"the token is too short to guess-proof; use at least {MIN_TOKEN_CHARS} characters"
        )
    given = token is not None
    token = token or secrets.token_urlsafe(32)
    if token_file is None and not given and not sys.stderr.isatty():
        # Not printed where logs keep it: written (owner-only) where the user's files are.
        token_file = default_token_file()
    if token_file is not None:
        write_token_file(token_file, token, force=force)
    engine = state.engine(create=True)

    def ready(bound: int) -> None:
        if token_file is not None:
            where = f"in {token_file}"
        elif given:
            where = "the one given"
        else:
            where = token  # a terminal: the user reads it here
        address = f"[{host}]" if ":" in host else host
        url = f"http://{address}:{bound}/" if unix_socket is None else f"unix:{unix_socket}"
        stderr.print(
            f"lossless serve: JSON-RPC on {url} (bearer token: {where}); Ctrl-C stops it",
            highlight=False,
            soft_wrap=True,
        )

    try:
        serve_http(
            engine,
            host=host,
            port=port,
            token=token,
            workers=workers,
            ready=ready,
            transcript_roots=list(transcript_roots) or default_transcript_roots(),
            unix_socket=unix_socket,
            limits=Limits(request_timeout, idle_timeout, max_connections),
        )
    finally:
        _finish_after(state, engine)


def write_token_file(path: Path, token: str, *, force: bool = False) -> None:
    """Put *token* in *path* as a new file only its owner can read: written to a file made
    new beside it (``O_EXCL``, ``O_NOFOLLOW``, mode 600) and renamed over *path*, so neither
    an old file's mode nor a symbolic link's target is ever written through. What is at
    *path* already is replaced when it is a regular file of this user (the token of an
    earlier start); anything else (a link, another user's file, not a file) only with
    *force*."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        found = path.lstat()
    except FileNotFoundError:
        found = None
    if found is not None and not force:
        what = None
        if stat.S_ISLNK(found.st_mode):
            what = "is a symbolic link"
        elif not stat.S_ISREG(found.st_mode):
            what = "is not a regular file"
        elif found.st_uid != os.getuid():
            what = "belongs to another user"
        if what is not None:
            raise click.UsageError(
                f"the token file {path} {what}; remove it, name another, or add --force to"
                " replace it (the link or file itself, never what it points to)"
            )
    fresh = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.replace(fresh, path)
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise


def default_transcript_roots() -> list[Path]:
    """The folders the installed hosts write their transcripts in (Claude Code's projects,
    Codex's sessions, OpenClaw's agents), as their own settings place them."""
    from ..sync import HOSTS, openclaw_agents

    return [*HOSTS["claude-code"](), *HOSTS["codex"](), openclaw_agents()]


def default_token_file() -> Path:
    """Where ``serve --http`` keeps the token it made when stderr is not a terminal."""
    import platformdirs

    return Path(platformdirs.user_state_dir("lossless")) / "serve-token"


def _finish_after(state: State, engine: Engine) -> None:
    """The server stops (its host's turn ended, or it was told to): provisional summaries the
    model has not replaced yet are finished by a process of its own."""
    options = ["--db", state.database()]
    if state.config_path:
        options += ["--config", state.config_path]
    finish_if_pending(engine, options)
