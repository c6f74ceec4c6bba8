"""The project's own :class:`~lossless.model.Message` (or its dict form)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...codec import LIST, clean_text
from ...errors import UnknownShapeError
from ...model import ROLES, Message, NormalizedMessage, NormalizedPart, Part
from .blocks import clean_str, envelope, join_text

_MESSAGE_KEYS = frozenset({"role", "content", "parts", "external_id", "created_at", "metadata"})


def normalize(data: Any) -> NormalizedMessage:
    """A :class:`Message`, or a mapping with a Message's keys and nothing else."""
    if isinstance(data, Mapping):
        extra = set(data) - _MESSAGE_KEYS
        if extra:
            raise UnknownShapeError(
                f"a lossless Message has no keys {', '.join(sorted(map(str, extra)))}; "
                f"it has {', '.join(sorted(_MESSAGE_KEYS))} (put anything else in metadata)"
            )
        try:
            data = Message.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnknownShapeError(f"not a lossless Message: {exc}") from exc
    if not isinstance(data, Message):
        raise UnknownShapeError("format 'lossless' takes a lossless.Message")
    if data.role not in ROLES:
        raise UnknownShapeError(
            f"lossless Message has role {data.role!r}; expected one of {', '.join(ROLES)}"
        )
    if not isinstance(data.content, str):
        raise UnknownShapeError("lossless Message content must be a string")
    for p in data.parts:
        if not isinstance(p, Part) or not isinstance(p.type, str):
            raise UnknownShapeError(
                f"lossless Message parts must be lossless.Part values with a string type, not {p!r}"
            )
    parts = [
        NormalizedPart(
            slot="parts",
            type=clean_text(p.type),
            text=clean_str(p.text),
            tool_call_id=clean_str(p.tool_call_id),
            tool_name=clean_str(p.tool_name),
            tool_input=p.tool_input,
            tool_output=clean_str(p.tool_output),
            is_error=p.is_error,
            raw=p.to_dict(),
        )
        for p in data.parts
    ]
    content = clean_text(data.content)
    payload = data.to_dict()
    slots = {"parts": LIST}
    return NormalizedMessage(
        role=data.role,
        content=content if content or not parts else join_text(parts),
        token_count=0,
        parts=parts,
        source_format="lossless",
        envelope=envelope(payload, slots),
        external_id=data.external_id,
        created_at=data.created_at,
    )
