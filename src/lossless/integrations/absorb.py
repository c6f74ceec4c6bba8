"""Storing a framework's working message list, which it hands over whole, again and again.

Some hosts never say which messages are new: they hand the whole list they will send the model
(Hermes Agent's ``compress`` and hooks, a Pydantic AI history processor), and may have replaced
part of it with what lossless gave them last time. :class:`Absorber` stores what the
conversation lacks, once, in order:

* after each hand-over the conversation's metadata records how many messages of the list are
  stored and a fingerprint of the last (for the list handed over and for the list lossless
  handed back); when the next list still agrees with one of them, the rest is new;
* otherwise (the host changed the list) the longest run of it that the stored messages end with
  is taken as stored, and what follows is new (what comes before it — older messages
  lossless showed because the request was about them — is stored already).

Messages lossless itself put into the list (its summaries) are never stored back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine import Engine

__all__ = ["Absorber"]


@dataclass(frozen=True)
class Absorber:
    """How one integration's lists are stored (see the module docstring)."""

    #: The metadata key the anchor is kept under.
    key: str
    #: The shape the messages are stored in.
    format: str
    #: What identifies a message, whatever the host adds to it (applied to what it hands
    #: over and to what the store reads back).
    fingerprint: Callable[[Any], str]
    #: Whether a message is lossless's own (a summary it handed the host).
    ours: Callable[[Any], bool]
    #: The message as it is to be stored (the host's bookkeeping taken off).
    clean: Callable[[Any], Any] = lambda message: message

    def absorb(self, engine: Engine, session_id: str, working: Sequence[Any]) -> int:
        """Store the messages of *working* the conversation lacks, in order; returns how
        many were stored. Handing the same list over again stores nothing."""
        conv = engine.conversation(session_id, create=True)
        held = (conv.metadata or {}).get(self.key) or []
        anchors = [held] if isinstance(held, dict) else held
        known = [
            a["seen"]
            for a in anchors
            if isinstance(a, dict)
            and isinstance(a.get("seen"), int)
            and 0 < a["seen"] <= len(working)
            and self.fingerprint(working[a["seen"] - 1]) == a.get("last")
        ]
        if known:
            new = list(working[max(known) :])
        else:
            new = self._unstored(engine, conv.conversation_id, working)
        kept = [self.clean(m) for m in new if not self.ours(m)]
        if kept:
            engine.ingest_batch(conv.conversation_id, kept, format=self.format)
        self.mark(engine, session_id, working)
        return len(kept)

    def mark(self, engine: Engine, session_id: str, *lists: Sequence[Any]) -> None:
        """Record that every message of each of *lists* is stored (or is lossless's own):
        the list the host handed over, and the one lossless handed back, which the host goes
        on from."""
        anchors = [{"seen": len(w), "last": self.fingerprint(w[-1])} for w in lists if w]
        if anchors:
            engine.update_conversation(session_id, metadata={self.key: anchors})

    def _unstored(self, engine: Engine, conversation_id: int, working: Sequence[Any]) -> list[Any]:
        body = [m for m in working if not self.ours(m)]
        if not body:
            return []
        total = engine.message_count(conversation_id)
        tail = engine.messages(conversation_id, after_seq=max(0, total - len(body)))
        stored = [self.fingerprint(m.to_source()) for m in tail]
        wanted = [self.fingerprint(m) for m in body]
        # The longest run of the list that the stored messages end with; older messages
        # lossless showed for the request (a prompt-aware assembly) may come before it.
        for k in range(min(len(stored), len(wanted)), 0, -1):
            for start in range(len(wanted) - k + 1):
                if wanted[start : start + k] == stored[-k:]:
                    return body[start + k :]
        return body
