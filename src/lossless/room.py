"""The host's room: what a model's window leaves a conversation's messages.

A host sends the model more than the messages lossless assembles: its own system prompt, its
tool schemas, context it injects, the turn under way; and it keeps part of the window for the
reply. The messages' budget is what is left::

    room = window - overhead (the host's own part) - reply (the reserve for the answer)

``overhead`` is measured whenever the host reports a whole prompt's size next to messages
lossless counted itself (a provider's ``prompt_tokens`` for a request whose messages lossless
assembled, OpenClaw's ``currentTokenCount``, Hermes's ``current_tokens``): the difference is the
host's. A measurement is kept per conversation (``conversations.metadata["room"]``), so the next
turn, in a new process, starts right; until there is one, ``room.host_share`` of the window is
assumed. When the host's own part and the reply leave less than ``room.min_tokens``, the
messages still get that much, and the conversation records one warning naming the figures
(:func:`overflow_warning`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .timestamps import format_ts, now

if TYPE_CHECKING:
    from .config import RoomConfig
    from .services import Services

__all__ = [
    "ROOM_KEY",
    "HostCompaction",
    "Room",
    "default_room",
    "measure",
    "overflow_warning",
    "recorded",
    "room_for",
]

logger = logging.getLogger(__name__)

#: Where a conversation keeps its measured room (``conversations.metadata``).
ROOM_KEY = "room"
#: Where a conversation records the room it was warned about (once per figures).
WARNED_KEY = "room_warned"
#: A measurement within this share of the recorded one is not written again.
MEASURE_SLACK = 0.02


@dataclass(frozen=True)
class Room:
    """A host's window and what it leaves the conversation's messages."""

    window: int
    #: The host's own part of the prompt: system prompt, tools, injected context.
    overhead: int
    #: Kept for the model's reply.
    reply: int
    #: ``measured`` (from the host's figures), ``host`` (the host named it), ``recorded`` (a
    #: measurement kept from an earlier turn), ``default`` (``room.host_share``).
    source: str
    #: The least the messages get, whatever the host leaves.
    minimum: int = 1_024
    measured_at: str | None = None

    @property
    def available(self) -> int:
        """What the window leaves the messages (negative when the host's part alone is over)."""
        return self.window - self.overhead - self.reply

    @property
    def budget(self) -> int:
        """The messages' budget: what is available, and never less than the minimum."""
        return max(self.minimum, self.available)

    def budget_after(self, pending: int) -> int:
        """The messages' budget when the host sends *pending* tokens after them (the turn
        under way): what is left, and never less than the minimum."""
        return max(self.minimum, self.available - max(0, pending))

    @property
    def overflows(self) -> bool:
        """The host's own part and the reply leave less than the minimum."""
        return self.available < self.minimum

    def describe(self) -> str:
        """The arithmetic in words: ``window 40,000 - host 22,113 (measured) - reply 8,000 =
        9,887 tokens for the messages``."""
        said = (
            f"window {self.window:,} - host {self.overhead:,} ({self.source}) - reply"
            f" {self.reply:,} = {self.available:,} tokens for the messages"
        )
        if self.overflows:
            said += f" (less than the minimum: they get {self.budget:,})"
        return said

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``lossless context --json`` and ``serve status`` show)."""
        return {
            "window": self.window,
            "overhead": self.overhead,
            "reply": self.reply,
            "budget": self.budget,
            "source": self.source,
            "measured_at": self.measured_at,
            "overflows": self.overflows,
            "warning": overflow_warning(self) if self.overflows else None,
        }


@dataclass(frozen=True)
class HostCompaction:
    """What a compaction a host asked for did, in the host's terms: its whole prompt before
    and after (the host's own part plus the messages lossless gives it), and, when nothing
    was compacted, why (a reason hosts accept: ``already under target`` when the messages fit
    the target, ``already compacted`` when nothing more can be summarized)."""

    compacted: bool
    tokens_before: int
    tokens_after: int
    #: The messages' tokens in the context before, and as the next assembly gives them.
    messages_before: int
    messages_after: int
    target: int
    room: Room
    reason: str | None
    passes: int
    stopped: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``serve``'s ``compact_for_host``)."""
        return {
            "compacted": self.compacted,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "target": self.target,
            "reason": self.reason,
            "passes": self.passes,
            "stopped": self.stopped,
            "room": self.room.to_dict(),
        }


def recorded(metadata: Mapping[str, Any], minimum: int = 1_024) -> Room | None:
    """The room a conversation's metadata keeps, if any."""
    kept = metadata.get(ROOM_KEY)
    if not isinstance(kept, Mapping):
        return None
    try:
        return Room(
            window=int(kept["window"]),
            overhead=int(kept["overhead"]),
            reply=int(kept["reply"]),
            source="recorded",
            minimum=minimum,
            measured_at=str(kept.get("measured_at") or "") or None,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _reply(cfg: RoomConfig, window: int, reply: int | None) -> int:
    """The reply reserve: the host's, else ``room.reply_tokens``; at most a quarter of the
    window (a host's larger reserve is its own compaction margin, not what a reply needs:
    OpenClaw 2026.7 keeps 20,000 tokens of a 32,000-token window)."""
    wanted = cfg.reply_tokens if reply is None else max(0, reply)
    return min(wanted, window // 4)


def default_room(
    cfg: RoomConfig, window: int, *, hint: int | None = None, reply: int | None = None
) -> Room:
    """The room before the host's figures measured anything: ``room.host_share`` of the
    window taken to be the host's (or *hint*, a lower bound the host gives, when larger)."""
    window = max(1, int(window))
    overhead = max(int(window * cfg.host_share), hint or 0)
    return Room(window, overhead, _reply(cfg, window, reply), "default", cfg.min_tokens)


def room_for(
    services: Services,
    conversation_id: int,
    window: int,
    *,
    overhead: int | None = None,
    reply: int | None = None,
    hint: int | None = None,
) -> Room:
    """The room of *conversation_id*'s messages in a *window*-token window.

    *overhead*: the host's own part, when the host names it. Otherwise the conversation's
    recorded measurement, else ``room.host_share`` of the window (or *hint*, a lower bound the
    host's figures give before any measurement, when larger). *reply*: the host's reserve for
    the answer (default ``room.reply_tokens``, at most a quarter of the window)."""
    cfg = services.config.room
    window = max(1, int(window))
    conv = services.store.get_conversation(conversation_id)
    kept = recorded(conv.metadata, cfg.min_tokens)
    if overhead is not None:
        room = Room(window, max(0, overhead), _reply(cfg, window, reply), "host", cfg.min_tokens)
    elif kept is not None:
        reply = kept.reply if reply is None else reply
        room = replace(kept, window=window, reply=_reply(cfg, window, reply))
    else:
        room = default_room(cfg, window, hint=hint, reply=reply)
    _warn_once(services, conversation_id, conv.metadata, room)
    return room


def measure(
    services: Services,
    conversation_id: int,
    *,
    window: int,
    prompt_tokens: int,
    messages_tokens: int,
    reply: int | None = None,
) -> Room:
    """Record what a host's whole prompt of *prompt_tokens* says of its own part: the prompt
    less the *messages_tokens* lossless counted in it (the messages it assembled, and the turn
    under way). Kept in the conversation's metadata; returns the room it gives."""
    cfg = services.config.room
    overhead = max(0, int(prompt_tokens) - int(messages_tokens))
    conv = services.store.get_conversation(conversation_id)
    kept = recorded(conv.metadata, cfg.min_tokens)
    reply = _reply(cfg, window, reply if reply is not None else (kept.reply if kept else None))
    room = Room(window, overhead, reply, "measured", cfg.min_tokens, format_ts(now()))
    unchanged = (
        kept is not None
        and kept.window == window
        and kept.reply == reply
        and abs(kept.overhead - overhead) <= MEASURE_SLACK * max(1, window)
    )
    if not unchanged:
        services.store.update_conversation(
            conversation_id,
            metadata={
                ROOM_KEY: {
                    "window": window,
                    "overhead": overhead,
                    "reply": reply,
                    "measured_at": room.measured_at,
                }
            },
        )
    _warn_once(services, conversation_id, conv.metadata, room)
    return room


def overflow_warning(room: Room, host: str = "the host") -> str:
    """The one warning for a window the host's own part leaves (almost) no room in."""
    return (
        f"{host}'s own prompt (system prompt, tools: ~{room.overhead:,} tokens,"
        f" {room.source}) and its reply reserve ({room.reply:,}) leave"
        f" {max(0, room.available):,} of the {room.window:,}-token window for the"
        f" conversation; lossless gives it {room.budget:,} (room.min_tokens), so requests may"
        f" not fit. Give the model a larger window (the host's context window setting), or"
        f" make the host's own prompt smaller (fewer tools or instructions)."
    )


def _warn_once(
    services: Services, conversation_id: int, metadata: Mapping[str, Any], room: Room
) -> None:
    """Log :func:`overflow_warning` once per conversation and window."""
    if not room.overflows:
        return
    said = metadata.get(WARNED_KEY)
    if isinstance(said, Mapping) and said.get("window") == room.window:
        return
    logger.warning("conversation %s: %s", conversation_id, overflow_warning(room))
    services.store.update_conversation(
        conversation_id,
        metadata={WARNED_KEY: {"window": room.window, "overhead": room.overhead}},
    )
