"""lossless: lossless context management for LLM agents.

Every message is stored forever; old stretches of the active context are replaced by a DAG of
summaries; the agent can search and drill back to the exact originals.
"""

from __future__ import annotations

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
from .model import Conversation, ConversationStats, IngestResult, Message, Part, StoredMessage
from .tokens import TokenCounter, estimate_tokens

__version__ = "0.1.0"

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
