"""The ingest path: a message of any shape → normalized, its secrets redacted, its large files
kept outside its text → stored at the end of its conversation and of its context.

One batch is one transaction (:meth:`~lossless.store.Store.append_messages`), under the
conversation's lock. Only an external id the caller gives (a transcript's entry id) makes a
message a repeat; everything else is appended, exactly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..codec import dumps
from ..model import Conversation, IngestResult, NormalizedMessage
from ..redact import snapshot
from .files import externalize as externalize_text
from .shapes import keep_text_in_parts, normalize

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["append", "externalize", "files_taken_back", "prepare"]


def prepare(
    services: Services,
    message: Any,
    *,
    format: str | None = None,
    external_id: str | None = None,
    created_at: datetime | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> NormalizedMessage:
    """One message normalized with the services' token counter, its secrets masked (the
    original kept as it was) or, with ``redact.enabled``, removed (the original sealed when
    ``redact.keep_originals``)."""
    norm = normalize(
        message,
        format=format,
        external_id=external_id,
        created_at=created_at,
        metadata=metadata,
        counter=services.tokens,
    )
    redactor = services.redactor
    if redactor is not None and redactor.may_hold(norm):
        redact = services.config.redact
        if redact.mask and not redact.enabled:
            # Masking keeps the original as it came (the snapshot holds the values the
            # redaction replaces, never changes: written out only when a secret went).
            before = snapshot(norm)
            norm.redactions = redactor.message(norm)
            if norm.redactions:
                norm.sealed, norm.kept_plain = dumps(before).encode("utf-8"), True
        else:
            original = snapshot(norm) if services.sealer is not None else None
            norm.redactions = redactor.message(norm)
            if norm.redactions and services.sealer is not None and original is not None:
                norm.sealed = services.sealer.seal(original)
        if norm.redactions:
            norm.token_count = services.tokens.count(norm.content)
    return norm


def externalize(
    services: Services,
    conversation_id: int,
    norm: NormalizedMessage,
    created: list[Path] | None = None,
) -> None:
    """Keep the large files of *norm* outside its plain text (its parts stay exact); the files
    written for the first time are added to *created*."""
    threshold = services.config.large_file_token_threshold
    if len(norm.content) < threshold or services.tokens.count(norm.content) <= threshold:
        return  # a token is at least a character for any tokenizer
    results = [p for p in norm.parts if p.type == "tool_result"]
    whole = norm.role == "tool" and len(results) == 1
    content, records = externalize_text(
        norm.content,
        conversation_id=conversation_id,
        files_dir=services.files_dir,
        threshold=threshold,
        whole=whole,
        name=f"{results[0].tool_name or 'tool'}-output.txt" if whole else None,
        created=created,
    )
    if records:
        keep_text_in_parts(norm)
        norm.content = content
        norm.large_files = records
        norm.token_count = services.tokens.count(content)


def append(
    services: Services, conversation: Conversation, norms: list[NormalizedMessage]
) -> IngestResult:
    """Store *norms* at the end of *conversation*, in one transaction under its lock.

    Large files are written before the transaction; if anything fails, the files this batch
    wrote for the first time are removed again, so a refused batch leaves nothing behind."""
    with files_taken_back() as created:
        for norm in norms:
            externalize(services, conversation.conversation_id, norm, created)
        with services.lock(conversation.conversation_id):
            ids, skipped = services.store.append_messages(conversation, norms)
    return IngestResult(conversation.conversation_id, tuple(ids), skipped)


@contextlib.contextmanager
def files_taken_back() -> Iterator[list[Path]]:
    """A list for the large files a batch writes, taken back if the batch fails (best effort:
    a file that cannot be removed is what ``lossless doctor`` reports as a stray file)."""
    created: list[Path] = []
    try:
        yield created
    except BaseException:
        for path in created:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
