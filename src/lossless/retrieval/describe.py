"""``lcm_describe``: what an id is, before expanding it.

* ``sum_…`` — the summary's metadata, the summaries it was made from (parents) and those made
  from it (children), a manifest of the subtree below it (each node with its tokens, the
  running total, and whether that total fits a token cap), then its content.
* ``file_…`` — the large file's record and exploration summary, and its content (or a range
  of lines) on request.
* ``msg#N`` — the stored message, and the summaries that cover it.

A conversation scope (a list of conversation ids) makes ids of other conversations unknown:
describe never shows another family's content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import LosslessError, NotFoundError
from ..ingest.files import read_file
from ..model import check_file_id

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["Description", "ManifestEntry", "describe"]


@dataclass(frozen=True)
class ManifestEntry:
    """One node below a summary, in the order an expansion would read them."""

    id: str
    kind: str  # leaf | condensed | message
    depth: int | None
    tokens: int
    cumulative_tokens: int
    fits: bool


@dataclass
class Description:
    """What :func:`describe` found."""

    id: str
    kind: str  # summary | file | message
    conversation_id: int
    metadata: dict[str, Any]
    content: str | None
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    manifest: list[ManifestEntry] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data = asdict(self)
        data["manifest"] = [asdict(m) for m in self.manifest]
        return data


def _check_scope(conversation_id: int, scope: Sequence[int] | None, ident: str) -> None:
    if scope is not None and conversation_id not in scope:
        raise NotFoundError(f"no {ident} in this conversation's family; search with lcm_grep")


def parse_lines(value: str | None) -> tuple[int, int] | None:
    """A line range given as ``FIRST:LAST`` (``None`` when empty); a clear error otherwise."""
    if value is None or not value.strip():
        return None
    first, sep, last = value.partition(":")
    if not sep or not all(n.strip().isascii() and n.strip().isdigit() for n in (first, last)):
        raise LosslessError(f"lines must be FIRST:LAST, e.g. 10:40, not {value!r}")
    return int(first), int(last)


def describe(
    services: Services,
    ident: str,
    *,
    scope: Sequence[int] | None = None,
    token_cap: int | None = None,
    lines: tuple[int, int] | None = None,
    with_content: bool = True,
) -> Description:
    """Describe a summary, large file or message id (see the module docstring).

    With a *scope*, an id outside it and an id no conversation has get the same answer: a
    scoped caller learns nothing of what lies beyond its conversations."""
    if scope is None:
        return _describe(services, ident, None, token_cap, lines, with_content)
    try:
        return _describe(services, ident, scope, token_cap, lines, with_content)
    except NotFoundError:
        raise NotFoundError(
            f"no {ident.strip()!r} among the conversations these tools can see; find ids with"
            " lcm_grep (they look like sum_0123456789abcdef, file_0123456789abcdef or msg#42)"
        ) from None


def _describe(
    services: Services,
    ident: str,
    scope: Sequence[int] | None,
    token_cap: int | None,
    lines: tuple[int, int] | None,
    with_content: bool,
) -> Description:
    ident = ident.strip()
    if not ident.isascii():  # every id is ASCII; int() and SQLite refuse the rest
        shown = ident.encode("ascii", "backslashreplace").decode()
        raise NotFoundError(f"{shown!r} is not an id lossless knows; ids look like msg#42")
    if ident.startswith("sum_"):
        return _summary(services, ident, scope, token_cap or services.config.max_expand_tokens)
    if ident.startswith("file_"):
        return _file(services, check_file_id(ident), scope, lines, with_content)
    if ident.startswith("msg#") and ident[4:].isdigit():
        return _message(services, int(ident[4:]), scope)
    raise NotFoundError(
        f"{ident!r} is not an id lossless knows; ids look like sum_0123456789abcdef, "
        "file_0123456789abcdef or msg#42"
    )


def _summary(services: Services, ident: str, scope: Sequence[int] | None, cap: int) -> Description:
    store = services.store
    summary = store.get_summaries([ident])[0]
    _check_scope(summary.conversation_id, scope, ident)
    parents, messages = store.summary_sources(ident)
    manifest: list[ManifestEntry] = []
    total = 0
    # Depth first, in source order: the order an expansion reads the subtree in.
    stack: list[str] = list(reversed(parents))
    for mid, tokens in _message_tokens(services, messages):
        total += tokens
        manifest.append(ManifestEntry(f"msg#{mid}", "message", None, tokens, total, total <= cap))
    while stack:
        sid = stack.pop()
        node = store.get_summaries([sid])[0]
        total += node.token_count
        manifest.append(
            ManifestEntry(sid, node.kind, node.depth, node.token_count, total, total <= cap)
        )
        below, node_messages = store.summary_sources(sid)
        stack.extend(reversed(below))
        for mid, tokens in _message_tokens(services, node_messages):
            total += tokens
            manifest.append(
                ManifestEntry(f"msg#{mid}", "message", None, tokens, total, total <= cap)
            )
    return Description(
        id=ident,
        kind="summary",
        conversation_id=summary.conversation_id,
        metadata={**summary.to_dict(), "token_cap": cap, "content": None},
        content=summary.content,
        parents=parents,
        children=store.covering(ident),
        manifest=manifest,
    )


def _message_tokens(services: Services, message_ids: Sequence[int]) -> list[tuple[int, int]]:
    if not message_ids:
        return []
    return [(m.message_id, m.token_count) for m in services.store.get_messages_by_id(message_ids)]


def _file(
    services: Services,
    ident: str,
    scope: Sequence[int] | None,
    lines: tuple[int, int] | None,
    with_content: bool,
) -> Description:
    record = services.store.get_large_file(ident)
    _check_scope(record.conversation_id, scope, ident)
    content = read_file(services.files_dir, record) if with_content else None
    if content is not None and lines is not None:
        first, last = lines
        content = "\n".join(content.splitlines()[max(first, 1) - 1 : last])
    metadata = asdict(record)
    return Description(ident, "file", record.conversation_id, metadata, content)


def _message(services: Services, message_id: int, scope: Sequence[int] | None) -> Description:
    message = services.store.get_message(message_id)
    ident = f"msg#{message_id}"
    _check_scope(message.conversation_id, scope, ident)
    metadata = {
        "seq": message.seq,
        "role": message.role,
        "host_meta": message.host_meta,
        "created_at": message.created_at,
        "token_count": message.token_count,
        "external_id": message.external_id,
        "source_format": message.source_format,
        "parts": [p.type for p in message.parts],
    }
    return Description(
        ident,
        "message",
        message.conversation_id,
        metadata,
        message.content,
        children=services.store.covering(message_id),
    )
