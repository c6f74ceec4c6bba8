"""The façade's base: the services, the configuration the engine was opened with, and how
a conversation a caller names is found (an id, a session id, or the row itself)."""

from __future__ import annotations

import hashlib
import os
from contextlib import AbstractContextManager
from pathlib import Path

from ..codec import safe_id
from ..config import Config, default_data_dir
from ..errors import NotFoundError
from ..model import Conversation, qualify, writing_namespace
from ..services import Services
from ..store import Store
from ..summarize import Summarizer
from ..tokens import TokenCounter

__all__ = [
    "ConversationRef",
    "Facade",
    "database_target",
    "default_db_path",
    "files_dir_for",
]

#: A conversation by id (int), by external session id (str), or the row itself.
ConversationRef = int | str | Conversation


def default_db_path() -> Path:
    """``lossless.db`` in the platform's user data directory."""
    return default_data_dir() / "lossless.db"


def database_target(target: str | os.PathLike[str] | None, config: Config) -> str | Path:
    """The store to open: *target*, else ``config.db``, else ``LOSSLESS_DB``, else the
    default file in the user data directory."""
    chosen = target if target is not None else config.db or os.environ.get("LOSSLESS_DB")
    return os.fspath(chosen) if chosen else default_db_path()


def files_dir_for(config: Config, database: Path | Store) -> Path:
    """Where large files are kept: ``data_dir/files``, else ``<database>-files`` beside a
    SQLite file, else (a PostgreSQL store) ``files-postgresql-<hash of the URL>`` in the
    user data directory."""
    if config.data_dir:
        return Path(config.data_dir).expanduser() / "files"
    if isinstance(database, Store):
        if database.path is None:  # a server's store: one folder per database and schema
            digest = hashlib.sha256(database.location.encode()).hexdigest()[:12]
            return default_db_path().parent / f"files-{database.backend}-{digest}"
        database = database.path
    return database.with_name(database.name + "-files")


class Facade:
    """What every part of the engine shares: :attr:`services`, and conversation lookup."""

    services: Services
    #: session id → conversation; ids never change, so the hot path skips the lookup.
    _by_session: dict[str, Conversation]

    @property
    def store(self) -> Store:
        """The store."""
        return self.services.store

    @property
    def config(self) -> Config:
        """The configuration."""
        return self.services.config

    @property
    def token_counter(self) -> TokenCounter:
        """How tokens are counted."""
        return self.services.tokens

    @property
    def summarizer(self) -> Summarizer:
        """What writes the summaries (another may be set: the next run uses it)."""
        return self.services.summarizer

    @summarizer.setter
    def summarizer(self, summarizer: Summarizer) -> None:
        self.services.summarizer = summarizer

    @property
    def files_dir(self) -> Path:
        """Where large files are kept: ``data_dir/files``, else ``<database>-files`` beside it."""
        return self.services.files_dir

    def conversation(
        self, ref: ConversationRef, *, create: bool = False, session_key: str | None = None
    ) -> Conversation:
        """Resolve *ref*: an int is a conversation id, a str an external session id.

        With ``create=True`` an unknown session id starts a new conversation (in the family
        *session_key* when given).
        """
        if isinstance(ref, Conversation):
            return ref
        if isinstance(ref, bool) or not isinstance(ref, int | str):
            raise TypeError(f"a conversation is an int id or a str session id, not {ref!r}")
        if isinstance(ref, int):
            return self.store.get_conversation(ref)
        # lone surrogates spelled out, as in every stored id; within a namespaced request,
        # its namespace's conversation of that name
        ref = qualify(writing_namespace.get(), safe_id(ref))
        cached = self._by_session.get(ref)
        if cached is not None:
            return cached
        found = self.store.find_conversation(ref)
        if found is None:
            if not create:
                raise NotFoundError(
                    f"no conversation with session id {ref!r};"
                    " list them with `lossless conversations`"
                )
            found = self.store.get_or_create_conversation(ref, session_key=session_key)
        self._by_session[ref] = found
        return found

    def lookup(self, ref: ConversationRef) -> Conversation:
        """A conversation a person or a model named: an id, a session id, or text that spells
        a number (tried as an id first, then as a session id: a host's session ids may be
        numbers too). The one place references from the CLI, the MCP tools and the hooks are
        resolved."""
        if isinstance(ref, bool):  # JSON true is no conversation
            raise NotFoundError(f"{ref!r} is not a conversation id or session id")
        if isinstance(ref, str) and ref.strip().isascii() and ref.strip().isdigit():
            try:
                return self.conversation(int(ref))
            except NotFoundError:
                found = self.find_conversation(ref)
                if found is not None:
                    return found
                raise
        return self.conversation(ref)

    def find_conversation(self, session_id: str) -> Conversation | None:
        """The conversation of an external session id, or ``None`` (nothing is created)."""
        try:
            return self.conversation(session_id)
        except NotFoundError:
            return None

    def lock(self, *conversation_ids: int) -> AbstractContextManager[None]:
        """Hold the conversations' locks (taken in id order, so two callers never deadlock):
        serializes mutations of a conversation."""
        return self.services.locks.hold(*conversation_ids)
