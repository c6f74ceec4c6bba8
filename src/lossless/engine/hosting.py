"""The engine's side of a host's window: the room the messages have, what the host's figures
say of its own part, and a compaction the host asks for (see :mod:`lossless.room`)."""

from __future__ import annotations

import logging
import threading

from ..assemble import assemble as assemble_context
from ..compaction import compact as compact_context
from ..compaction import log_run
from ..room import HostCompaction, Room, measure, room_for
from ..services import BoundedCache
from .base import ConversationRef, Facade

__all__ = ["Hosting"]

logger = logging.getLogger(__name__)

#: Where a conversation records the compaction a host last asked for (``metadata``): the
#: newest context item it saw and its target, so a host asking again in the same turn with
#: the same or a higher target gets the answer without another run.
ASKED_KEY = "host_compaction"


class Hosting(Facade):
    """The host's room, measured and kept per conversation, and host-asked compaction."""

    #: conversation id → the tokens of its newest assembly in this process (what a host's
    #: next reported prompt size is measured against).
    _assembled: BoundedCache[int, int]

    def room(
        self,
        conversation: ConversationRef,
        window: int,
        *,
        overhead: int | None = None,
        reply: int | None = None,
        hint: int | None = None,
    ) -> Room:
        """The room *conversation*'s messages have in a host's *window*: the window less the
        host's own part (named by *overhead*, else measured earlier and kept, else
        ``room.host_share`` of the window, or *hint* when larger) less the reply reserve
        (*reply*, else the kept one, else ``room.reply_tokens``; at most a quarter of the
        window). Its :attr:`~Room.budget` is
        what to assemble and compact within. A window the host's own part leaves less than
        ``room.min_tokens`` is logged once per conversation
        (:func:`~lossless.room.overflow_warning`).
        """
        conv = self.conversation(conversation, create=True)
        room = room_for(
            self.services, conv.conversation_id, window, overhead=overhead, reply=reply, hint=hint
        )
        if room.overflows:  # its warning may have been recorded in the metadata
            self._by_session.pop(conv.session_id, None)
        return room

    def measure_room(
        self,
        conversation: ConversationRef,
        *,
        window: int,
        prompt_tokens: int,
        pending_tokens: int = 0,
        messages_tokens: int | None = None,
        reply: int | None = None,
    ) -> Room | None:
        """Learn the host's own part from a whole prompt it sent: *prompt_tokens* (a
        provider's usage, or the host's own estimate) less the messages lossless gave it
        (*messages_tokens*, by default its newest assembly of the conversation in this
        process) less *pending_tokens* (what the host added after them: the turn under way).
        Kept for the conversation's next turns; ``None`` when there is nothing to measure
        against (no assembly in this process and no *messages_tokens*)."""
        conv = self.conversation(conversation, create=True)
        if messages_tokens is None:
            messages_tokens = self._assembled.get(conv.conversation_id)
            if messages_tokens is None:
                return None
        if prompt_tokens <= 0:
            return None
        self._by_session.pop(conv.session_id, None)  # its metadata is written anew
        return measure(
            self.services,
            conv.conversation_id,
            window=window,
            prompt_tokens=prompt_tokens,
            messages_tokens=messages_tokens + max(0, pending_tokens),
            reply=reply,
        )

    def compact_for_host(
        self,
        conversation: ConversationRef,
        room: Room,
        *,
        host_tokens: int | None = None,
        full: bool = False,
        instructions: str | None = None,
        stop: threading.Event | None = None,
        deadline: float | None = None,
        format: str = "anthropic",
    ) -> HostCompaction:
        """Compact because the host asked (its prompt is over its own limit): down to
        ``compaction_target`` of the *room* (``context_threshold`` of it when lower, as a turn
        would), shrinking the fresh tail to the newest exchange if
        that is what it takes (:meth:`Engine.compact` with ``force``). The answer is in the
        host's terms (its whole prompt: *host_tokens* before, the host's own part plus the
        next assembly after) and says why when nothing was compacted: ``already under target``
        (the messages fit) or ``already compacted`` (nothing more can be summarized: what is
        left is the newest exchange, which the assembly shows within the room, clipped if it
        must be). A host asking again in the same turn with the same or a higher target gets
        the answer without another run. *full* (a user's ``/compact``): every eligible pass,
        then down to the target."""
        conv = self.conversation(conversation)
        cid = conv.conversation_id
        cfg = self.config
        target = max(1, int(room.budget * min(cfg.compaction_target, cfg.context_threshold)))
        context = self.store.context(cid)
        before = sum(i.tokens for i in context)
        newest = context[-1].ref if context else None
        asked = conv.metadata.get(ASKED_KEY)
        again = (
            isinstance(asked, dict)
            and asked.get("newest") == newest
            and int(asked.get("target") or 0) <= target
            and not full
        )
        passes, stopped = 0, False
        if not again and (before > target or full):
            report = compact_context(
                self.services,
                cid,
                mode="full" if full else "incremental",
                until=None if full and before <= target else target,
                budget=room.budget,
                deadline=deadline,
                force=True,
                instructions=instructions,
                stop=stop,
            )
            log_run(report, "host")
            passes, stopped = len(report.passes), report.stopped
            context = self.store.context(cid)
            self._by_session.pop(conv.session_id, None)
            self.store.update_conversation(
                cid,
                metadata={
                    ASKED_KEY: {"newest": context[-1].ref if context else None, "target": target}
                },
            )
        after = sum(i.tokens for i in context)
        with self.store.read():
            shown = assemble_context(self.services, cid, room.budget, format=format).tokens
        if passes:
            reason = None
        elif after <= target:
            reason = (
                f"already under target: the conversation's messages take {after:,} tokens of"
                f" the {target:,} lossless aims for in a room of {room.budget:,}"
            )
        else:
            reason = (
                "already compacted: nothing more can be summarized (the newest exchange is"
                f" {after:,} tokens); the next request carries {shown:,} tokens of messages,"
                f" within the room of {room.budget:,}"
            )
        overhead = room.overhead
        return HostCompaction(
            compacted=passes > 0,
            tokens_before=host_tokens if host_tokens is not None else overhead + before,
            tokens_after=overhead + shown,
            messages_before=before,
            messages_after=shown,
            target=target,
            room=room,
            reason=reason,
            passes=passes,
            stopped=stopped,
        )
