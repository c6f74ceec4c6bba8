"""Items lossless does not know: any item that names a ``type`` or a ``role`` (a new SDK
release's item, a host's own record), stored whole and read back exactly, never refused."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ...codec import SCALAR, WHOLE, clean_text, dumps
from ...model import NormalizedMessage, NormalizedPart
from . import chat, openclaw
from .blocks import item_text

# The warning keeps the logger of the public entry point, the name users filter on.
logger = logging.getLogger("lossless.ingest.shapes")

#: Roles of any supported shape, for an unknown item that names one.
_ANY_ROLE = {**chat.ROLES, **openclaw.ROLES}
_warned: set[str] = set()


def keeps_as_unknown(data: Any) -> bool:
    """An item that names a type or a role: kept verbatim when its shape does not fit."""
    return isinstance(data, Mapping) and (
        isinstance(data.get("type"), str) or isinstance(data.get("role"), str)
    )


def unknown_kind(data: Mapping[str, Any]) -> str:
    """How an unknown item names itself: its type, else its role."""
    kind = data.get("type")
    return kind if isinstance(kind, str) else f"role {data.get('role')}"


def normalize(data: Mapping[str, Any]) -> NormalizedMessage:
    """An item of a type or role lossless does not know: stored whole (read back exactly),
    its strings as its plain text; a warning names the kind once per process."""
    kind = unknown_kind(data)
    if kind not in _warned:
        _warned.add(kind)
        logger.warning(
            "stored an item of a kind lossless does not know (%s) verbatim; it reads back"
            " exactly and its text is searchable",
            clean_text(kind)[:80],
        )
    role = data.get("role")
    text = item_text(data)
    part = NormalizedPart(slot=WHOLE, type="other", text=text or None, raw=data)
    return NormalizedMessage(
        role=_ANY_ROLE.get(role, "assistant") if isinstance(role, str) else "assistant",
        content=text or dumps(data),
        token_count=0,
        parts=[part],
        source_format="unknown",
        envelope={"f": {}, "s": {WHOLE: SCALAR}},
    )
