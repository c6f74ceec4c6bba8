"""The messages a version takes, in chunks within the chunk budget; a message larger than a
chunk goes in pieces (nothing of it is dropped)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ..model import StoredMessage
from ..summarize.base import SourceItem

if TYPE_CHECKING:
    from ..services import Services

#: Messages read from the store at a time while chunks are formed.
PAGE_MESSAGES = 500


def message_chunks(
    services: Services, conversation_id: int, after: int | None, end_seq: int
) -> Iterator[list[StoredMessage]]:
    """The messages after message id *after* up to seq *end_seq*, in chunks of at most the
    chunk budget (a message larger than that is a chunk of its own)."""
    budget = chunk_tokens(services)
    chunk: list[StoredMessage] = []
    used = 0
    cursor = after
    while True:
        page = services.store.messages_after(conversation_id, cursor, limit=PAGE_MESSAGES)
        page = [m for m in page if m.seq <= end_seq]
        if not page:
            break
        for message in page:
            if chunk and used + message.token_count > budget:
                yield chunk
                chunk, used = [], 0
            chunk.append(message)
            used += message.token_count
        cursor = page[-1].message_id
        if page[-1].seq >= end_seq:
            break
    if chunk:
        yield chunk


def chunk_tokens(services: Services) -> int:
    """New-message tokens per summarizer call: ``sessions.chunk_tokens``, else
    ``leaf_chunk_tokens``."""
    return services.config.sessions.chunk_tokens or services.config.leaf_chunk_tokens


def groups(sources: Sequence[SourceItem], budget: int) -> Iterator[tuple[SourceItem, ...]]:
    """Consecutive runs of *sources* of at most *budget* tokens (at least one item each)."""
    group: list[SourceItem] = []
    used = 0
    for item in sources:
        if group and used + item.tokens > budget:
            yield tuple(group)
            group, used = [], 0
        group.append(item)
        used += item.tokens
    if group:
        yield tuple(group)


def source_items(services: Services, chunk: Sequence[StoredMessage]) -> tuple[SourceItem, ...]:
    """Messages as source items; one larger than the chunk budget goes in pieces (nothing of
    it is dropped)."""
    budget = chunk_tokens(services)
    out: list[SourceItem] = []
    for m in chunk:
        ref = f"msg#{m.message_id}"
        if m.token_count <= budget:
            out.append(
                SourceItem(ref, m.speaker, m.content, m.created_at, m.created_at, m.token_count)
            )
            continue
        # Pieces of about nine tenths of a chunk: token counts are not exactly proportional.
        size = len(m.content) * budget * 9 // (10 * max(m.token_count, 1))
        pieces = _split(m.content, max(1, size))
        for n, piece in enumerate(pieces, 1):
            out.append(
                SourceItem(
                    f"{ref} (part {n} of {len(pieces)})",
                    m.speaker,
                    piece,
                    m.created_at,
                    m.created_at,
                    services.tokens.count(piece),
                )
            )
    return tuple(out)


def _split(text: str, size: int) -> list[str]:
    """*text* in pieces of at most *size* characters, cut at a line or a space when one is
    near the end of a piece."""
    pieces: list[str] = []
    while len(text) > size:
        cut = max(text.rfind("\n", 0, size), text.rfind(" ", 0, size))
        if cut < size // 2:
            cut = size
        pieces.append(text[:cut])
        text = text[cut:].lstrip("\n ")
    if text or not pieces:
        pieces.append(text)
    return pieces
