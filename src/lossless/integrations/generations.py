"""A framework session as a family of lossless conversations, one generation at a time.

Frameworks let their users *clear* a session; lossless forgets nothing. A session ``S`` is the
conversation ``S``; clearing it archives that conversation (kept, searchable) and goes on in
``S#2``, then ``S#3``, ... — one family (``session_key`` = ``S``), so recall still reaches the
earlier generations. Each generation records its place in the conversation's metadata under
the integration's own key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import load_config
from ..engine import Engine
from ..model import Conversation
from ..timestamps import format_ts, now

__all__ = ["Generations", "engine_for"]


def engine_for(store_or_engine: Engine | str | os.PathLike[str] | None) -> tuple[Engine, bool]:
    """An adapter's engine: the caller's (``False``: the caller closes it), or one opened on
    the store's path or URL (``None``: the default store; ``True``: the adapter closes it)."""
    if isinstance(store_or_engine, Engine):
        return store_or_engine, False
    return Engine.open(store_or_engine, config=load_config()), True


@dataclass(frozen=True)
class Generations:
    """The generations of sessions kept under metadata key *key*."""

    key: str

    def state(self, conversation: Conversation) -> dict[str, Any]:
        """What the metadata says of the conversation's generation."""
        value = conversation.metadata.get(self.key)
        return dict(value) if isinstance(value, Mapping) else {}

    def current(self, engine: Engine, session_id: str) -> Conversation:
        """The session's current conversation: the newest of ``S``, ``S#2``, ``S#3``, ...; a
        fresh one when that was archived (a clear stopped halfway)."""
        conv = engine.find_conversation(session_id)
        if conv is None:
            conv = engine.conversation(session_id, create=True, session_key=session_id)
            return engine.update_conversation(
                conv.conversation_id,
                metadata={self.key: {"session": session_id, "generation": 1}},
            )
        if conv.session_key is None:  # stored before it was a session: it starts the family
            conv = engine.update_conversation(conv.conversation_id, session_key=session_id)
        generation = 1
        while (later := engine.find_conversation(f"{session_id}#{generation + 1}")) is not None:
            conv, generation = later, generation + 1
        if conv.status == "archived":
            return self._next(engine, conv, session_id, generation + 1)
        return conv

    def _next(
        self, engine: Engine, previous: Conversation, session_id: str, generation: int
    ) -> Conversation:
        conv = engine.conversation(
            f"{session_id}#{generation}",
            create=True,
            session_key=previous.session_key or session_id,
        )
        return engine.update_conversation(
            conv.conversation_id,
            metadata={
                self.key: {
                    "session": session_id,
                    "generation": generation,
                    "continues": previous.conversation_id,
                }
            },
        )

    def clear(self, engine: Engine, conversation_id: int, session_id: str) -> Conversation:
        """Archive the conversation and start the next of the session's family (an empty
        conversation is kept as it is: there is nothing to clear)."""
        with engine.lock(conversation_id):
            conv = engine.conversation(conversation_id)
            if engine.message_count(conversation_id) == 0:
                return conv
            generation = int(self.state(conv).get("generation", 1))
            state = {**self.state(conv), "archived_at": format_ts(now())}
            archived = engine.update_conversation(
                conversation_id, status="archived", metadata={self.key: state}
            )
            return self._next(engine, archived, session_id, generation + 1)
