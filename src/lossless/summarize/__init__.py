"""Summarizers: the interface, the registry, prompts, escalation and the built-in providers."""

from __future__ import annotations

from .base import (
    AuthError,
    RateLimitedError,
    SourceItem,
    Summarizer,
    SummarizerError,
    SummarizerTimeout,
    SummaryRequest,
    SummaryResult,
)
from .escalation import TRUNCATION_MARKER, Outcome, escalate
from .extractive import ExtractiveSummarizer
from .registry import available, create, register
from .scripted import Delay, ScriptedSummarizer

__all__ = [
    "TRUNCATION_MARKER",
    "AuthError",
    "Delay",
    "ExtractiveSummarizer",
    "Outcome",
    "RateLimitedError",
    "ScriptedSummarizer",
    "SourceItem",
    "Summarizer",
    "SummarizerError",
    "SummarizerTimeout",
    "SummaryRequest",
    "SummaryResult",
    "available",
    "create",
    "escalate",
    "register",
]
