"""lossless: lossless context management for LLM agents.

Every message is stored forever; old stretches of the active context are replaced by a DAG of
summaries; the agent can search and drill back to the exact originals.

The public names below are imported on first use, so that a command which needs none of them
(``lossless mcp`` answering its client's handshake, ``lossless --help``) starts without loading
the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Config, SessionsConfig, load_config
    from .engine import Engine
    from .errors import (
        ConfigError,
        ConflictError,
        ImportProblem,
        LosslessError,
        NoStore,
        NotFoundError,
        StoreError,
        UnknownShapeError,
    )
    from .ingest.reconcile import ReconcileReport
    from .model import (
        Conversation,
        ConversationStats,
        IngestResult,
        Message,
        Part,
        StoredMessage,
    )
    from .tokens import TokenCounter, estimate_tokens

__version__ = "0.1.0"

#: Where each public name lives.
_HOMES = {
    "Config": "config",
    "SessionsConfig": "config",
    "load_config": "config",
    "Engine": "engine",
    "ConfigError": "errors",
    "ConflictError": "errors",
    "ImportProblem": "errors",
    "LosslessError": "errors",
    "NoStore": "errors",
    "NotFoundError": "errors",
    "StoreError": "errors",
    "UnknownShapeError": "errors",
    "ReconcileReport": "ingest.reconcile",
    "Conversation": "model",
    "ConversationStats": "model",
    "IngestResult": "model",
    "Message": "model",
    "Part": "model",
    "StoredMessage": "model",
    "TokenCounter": "tokens",
    "estimate_tokens": "tokens",
}

__all__ = [
    "Config",
    "ConfigError",
    "ConflictError",
    "Conversation",
    "ConversationStats",
    "Engine",
    "ImportProblem",
    "IngestResult",
    "LosslessError",
    "Message",
    "NoStore",
    "NotFoundError",
    "Part",
    "ReconcileReport",
    "SessionsConfig",
    "StoreError",
    "StoredMessage",
    "TokenCounter",
    "UnknownShapeError",
    "__version__",
    "estimate_tokens",
    "load_config",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'lossless' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
