"""``lossless info``: where this invocation's store, configuration, large files and logs are,
which settings file was read, and which summarizers are installed. It opens nothing."""

from __future__ import annotations

import os
import platform
import sqlite3
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ..config import default_config_path, default_data_dir
from ..engine.base import files_dir_for
from ..integrations.claude_code import CLAUDE_CODE
from ..integrations.hooks import default_log_path
from ..summarize.registry import available
from .output import State, emit_json, json_option, pass_state, stdout


@click.command("info")
@json_option
@pass_state
def info_command(state: State, as_json: bool) -> None:
    """Where lossless keeps things for this invocation (the store, the config file read, the
    large files, the hooks' logs), the summarizer in use and the ones installed, and the
    versions. Opens nothing and makes nothing."""
    database = state.database()
    config_file = Path(
        state.config_path or os.environ.get("LOSSLESS_CONFIG") or default_config_path()
    ).expanduser()
    data: dict[str, Any] = {
        "store": database,
        "store_from": _store_source(state),
        "store_exists": "://" in database or Path(database).exists(),
        "store_bytes": None if "://" in database else _size(Path(database)),
        "config_file": str(config_file),
        "config_read": config_file.is_file(),
        "files": None if "://" in database else str(files_dir_for(state.config, Path(database))),
        "data_dir": str(default_data_dir()),
        "hook_logs": str(default_log_path(CLAUDE_CODE).parent),
        "summarizer": state.config.summarizer,
        "summarizers_installed": available(),
        "lossless": __version__,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    if as_json:
        emit_json(data)
        return
    size = data["store_bytes"]
    there = (
        f"{size:,} bytes"
        if size is not None
        else "a server"
        if data["store_exists"]
        else "not made yet"
    )
    rows = [
        ("store", f"{database} ({there}; from {data['store_from']})"),
        ("config", f"{config_file} ({'read' if data['config_read'] else 'not there: defaults'})"),
        ("large files", data["files"] or "beside the PostgreSQL store's id, in the data dir"),
        ("data dir", data["data_dir"]),
        ("hook logs", data["hook_logs"]),
        (
            "summarizer",
            f"{data['summarizer']} (installed: {', '.join(data['summarizers_installed'])})",
        ),
        ("versions", f"lossless {__version__}, Python {data['python']}, SQLite {data['sqlite']}"),
    ]
    for label, value in rows:
        stdout.print(f"{label:<12}{value}", highlight=False, markup=False)


def _store_source(state: State) -> str:
    if state.db_on_command_line:
        return "--db"
    if state.db is not None and os.environ.get("LOSSLESS_DB"):
        return "LOSSLESS_DB"
    if state.config.db:
        return "the config's db"
    return "the default"


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
