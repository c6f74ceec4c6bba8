"""The engine's reads: conversations, messages, summaries, the context, large files,
session summaries, the resume summary, exports and the store's totals."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..doctor import store_cap
from ..export import as_stored, revealing
from ..export import export as export_conversations
from ..ingest.files import read_file
from ..model import (
    ContextItem,
    ConversationStats,
    LargeFile,
    SessionSummary,
    StoredMessage,
    Summary,
)
from ..resume import ResumeSummary
from ..resume import resume as resume_summary
from ..room import recorded
from ..store.space import Space, space_of
from ..summarize.guards import guard_state
from .base import ConversationRef, Facade

__all__ = ["Reads"]


class Reads(Facade):
    """Reading what is stored (never a write)."""

    def conversations(self, *, archived: bool | None = None) -> list[ConversationStats]:
        """The conversations with their counts, oldest first: every one (the default), only
        the archived ones (``archived=True``) or only the others (``archived=False``: what
        the listings show)."""
        return self.store.list_conversations(archived=archived)

    def archived_ids(self) -> list[int]:
        """The ids of the archived conversations."""
        return self.store.archived_conversation_ids()

    def message_count(self, conversation: ConversationRef) -> int:
        """How many messages the conversation stores."""
        return self.store.message_count(self.conversation(conversation).conversation_id)

    def messages(
        self, conversation: ConversationRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        """Stored messages of a conversation in order."""
        conv = self.conversation(conversation)
        return self.store.get_messages(conv.conversation_id, after_seq=after_seq, limit=limit)

    def export(
        self,
        conversation: ConversationRef | None = None,
        *,
        family: bool = False,
        format: str = "jsonl",
        reveal: bool = False,
    ) -> Iterator[str]:
        """A conversation, its family (with *family*: every conversation sharing its session
        key) or, without one, every conversation, written out in *format*: ``jsonl``
        (lossless's own, which ``import_path`` reads back exactly), ``markdown``, ``openai`` or
        ``anthropic`` (see :mod:`lossless.export`). Yields pieces of text each ending with a
        newline, read from the store as they are taken; the conversation and the format are
        checked before the first. Masked secrets stay masked unless *reveal*."""
        conv = None if conversation is None else self.conversation(conversation)
        view = revealing(self.services) if reveal else as_stored
        return export_conversations(self.services, conv, format, family=family, view=view)

    def last_request(self, conversation: ConversationRef, *, within: int = 64) -> str | None:
        """The text of the newest user request among the conversation's newest *within*
        messages (a tool loop's results come after it), or ``None``: what a framework adapter
        whose request is stored already hands a prompt-aware assembly as its focus."""
        conv = self.conversation(conversation)
        for message in reversed(self.store.last_messages(conv.conversation_id, within)):
            if message.role == "user" and message.host_meta is None and message.content.strip():
                return message.content
        return None

    def get_message(self, message_id: int) -> StoredMessage:
        """One stored message by id (``msg#<id>``)."""
        return self.store.get_message(message_id)

    def context(self, conversation: ConversationRef) -> list[ContextItem]:
        """The conversation's active context items, in order."""
        return self.store.context(self.conversation(conversation).conversation_id)

    def context_summaries(self, conversation: ConversationRef) -> list[tuple[Summary, list[str]]]:
        """The summaries in the conversation's active context, in order, each with the ids of
        the summaries it was made from."""
        conv = self.conversation(conversation).conversation_id
        summaries = self.store.context_summaries(conv)
        parents = self.store.parents_of([s.summary_id for s in summaries])
        return [(s, parents[s.summary_id]) for s in summaries]

    def summary(self, summary_id: str) -> Summary:
        """One summary by id."""
        return self.store.get_summaries([summary_id])[0]

    def session_summaries(
        self, conversation: ConversationRef | None = None
    ) -> list[SessionSummary]:
        """Every version of the conversation's session summary (of every conversation
        without one), oldest first."""
        if conversation is None:
            return self.store.session_summaries()
        return self.store.session_summaries(self.conversation(conversation).conversation_id)

    def latest_session_summary(self, conversation: ConversationRef) -> SessionSummary | None:
        """The conversation's newest session summary version, or ``None``."""
        conv = self.conversation(conversation).conversation_id
        return self.store.latest_session_summary(conv)

    def summaries(self, summary_ids: Sequence[str]) -> list[Summary]:
        """Summaries by id (unknown ids left out), in the order asked."""
        return self.store.get_summaries(list(summary_ids))

    def summary_sources(self, summary_id: str) -> tuple[list[str], list[int]]:
        """What a summary was made from: the summaries (condensed) and message ids (leaf)."""
        return self.store.summary_sources(summary_id)

    def covering(self, ref: str | int) -> list[str]:
        """The summaries made from *ref*: the leaves covering a message id, or the condensed
        summaries made from a summary id."""
        return self.store.covering(ref)

    def summary_counts(self, conversation: ConversationRef) -> dict[int, int]:
        """The conversation's summaries by depth."""
        return self.store.summary_counts(self.conversation(conversation).conversation_id)

    def messages_by_id(self, message_ids: Sequence[int]) -> list[StoredMessage]:
        """Stored messages by id, in the order asked."""
        return self.store.get_messages_by_id(list(message_ids))

    def family_ids(self, conversation: ConversationRef) -> list[int]:
        """The conversations of *conversation*'s family (sharing its session key)."""
        return self.store.family_ids(self.conversation(conversation))

    def large_files(self, conversation: ConversationRef) -> list[LargeFile]:
        """The large files of a conversation, oldest first."""
        return self.store.large_files(self.conversation(conversation).conversation_id)

    @property
    def location(self) -> str:
        """Where the store is (a file's path, or a server's URL without its password)."""
        return self.store.location

    def large_file(self, file_id: str) -> LargeFile:
        """The record of a large file (id, name, size, exploration summary, ...)."""
        return self.store.get_large_file(file_id)

    def read_large_file(self, file_id: str) -> str:
        """The full content of a large file."""
        return read_file(self.files_dir, self.store.get_large_file(file_id))

    def resume(self, conversation: ConversationRef, *, latest: bool = False) -> ResumeSummary:
        """The resume summary (see :mod:`lossless.resume`): as injected into the assembled
        context — the messages up to the compaction boundary — or, with *latest*, of every
        stored message. ``upto_seq`` is ``None`` when nothing was compacted yet."""
        conv = self.conversation(conversation).conversation_id
        return resume_summary(self.services, conv, latest=latest)

    def host_compaction_seq(self, conversation: ConversationRef) -> int | None:
        """Where the host last compacted the conversation (the seq of its newest compaction
        record), or ``None`` when it never did."""
        conv = self.conversation(conversation).conversation_id
        return self.store.host_record_seq(conv, ("compact_boundary", "host_summary"))

    def reinjected_since(self, conversation: ConversationRef, seq: int, mark: str) -> bool:
        """Whether a hook's output stored after *seq* holds *mark* (the host's window already
        has what a hook put back)."""
        conv = self.conversation(conversation).conversation_id
        return self.store.host_record_mentions(conv, "hook_output", seq, mark)

    def space(self, *, top: int = 10, days: int = 14) -> Space:
        """Where the store's bytes are: each table and index, the *top* conversations by
        the text they hold, and the text of each of the last *days* days with messages
        (``lossless stats --space``)."""
        return space_of(self.store, top=top, days=days)

    def stats(self) -> dict[str, Any]:
        """Totals over the whole store (what ``lossless stats`` shows)."""
        convs = self.conversations()
        by_depth: dict[int, int] = {}
        for c in convs:
            for depth, n in c.summaries_by_depth.items():
                by_depth[depth] = by_depth.get(depth, 0) + n
        rooms = [
            (c.conversation, room)
            for c in convs
            if (room := recorded(c.conversation.metadata, self.config.room.min_tokens))
        ]
        tightest = min(rooms, key=lambda pair: pair[1].budget, default=None)
        return {
            "database": self.store.location,
            "backend": self.store.backend,
            "conversations": len(convs),
            "host_rooms": {
                "measured": len(rooms),
                "at_minimum": sum(1 for _, room in rooms if room.overflows),
                "tightest": None
                if tightest is None
                else {"session_id": tightest[0].session_id, **tightest[1].to_dict()},
            },
            "messages": sum(c.message_count for c in convs),
            "message_tokens": sum(c.message_tokens for c in convs),
            "summaries": sum(c.summary_count for c in convs),
            "summaries_by_depth": dict(sorted(by_depth.items())),
            "context_items": sum(c.context_items for c in convs),
            "context_tokens": sum(c.context_tokens for c in convs),
            "bytes": self.store.database_size(),
            "cap": cap.to_dict()
            if (cap := store_cap(self.store, self.files_dir, self.config.max_store_bytes))
            else None,
            "migrations": self.store.applied_migrations(),
            "summarizer": {
                "name": self.summarizer.name,
                "model": self.summarizer.model,
                "offline": self.summarizer.offline,
                "guards": guard_state(self.summarizer),
            },
        }
