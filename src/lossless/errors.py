"""Errors raised by lossless.

Every error carries a message that says what went wrong *and* what to do about it. The CLI
turns them into exit codes at its boundary; library callers catch :class:`LosslessError`.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "ConfigError",
    "ConflictError",
    "ImportProblem",
    "LosslessError",
    "NoStore",
    "NotATranscript",
    "NotFoundError",
    "StoreError",
    "UnknownShapeError",
]


class LosslessError(Exception):
    """Base class of every error lossless raises on purpose."""

    exit_code = 1


class ConfigError(LosslessError):
    """A configuration key is unknown or has a value outside what it accepts."""

    exit_code = 2


class ArgumentError(LosslessError):
    """A call's arguments do not fit what the operation declares (a missing or unknown
    name, a wrong type, a value outside its limits)."""

    exit_code = 2


class NotFoundError(LosslessError):
    """A conversation, message, summary or file id does not exist."""

    exit_code = 4


class UnknownShapeError(LosslessError):
    """A message does not have any of the shapes lossless understands."""

    exit_code = 2


class StoreError(LosslessError):
    """The database cannot be opened, migrated or written."""

    exit_code = 5


class NoStore(StoreError):
    """No store exists where a command that only reads was pointed (nothing was created)."""


class ConflictError(LosslessError):
    """The store changed underneath an operation; retrying it is safe."""

    exit_code = 6


class ImportProblem(LosslessError):
    """One line of a transcript could not be imported (the rest still is)."""

    exit_code = 3

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}")


class NotATranscript(ImportProblem):
    """A file a host writes beside its transcripts (a trace, an index): recognised, and not
    imported; a folder import passes it over and says so."""
