"""Errors raised by lossless.

Every error carries a message that says what went wrong *and* what to do about it. The CLI
turns them into exit codes at its boundary; library callers catch :class:`LosslessError`.
"""

from __future__ import annotations

__all__ = [
    "PROBLEM_KINDS",
    "AccessError",
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


class AccessError(LosslessError):
    """A caller's access token does not allow what it asked (its role, or its sessions).

    Never raised for a conversation or id beyond a caller's namespace: those are unknown
    (:class:`NotFoundError`) to it, so nothing says they exist."""

    exit_code = 7


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
    """A line of a transcript that could not be imported (the rest still is), or a file that
    could not be read as a transcript at all.

    ``kind`` says which, in a word a program can act on (:data:`PROBLEM_KINDS`); ``reason``
    says it for a person. ``known`` marks a bad line an earlier import found in lines this
    run did not read again (the file's unchanged part): still not imported, reported again.
    """

    exit_code = 3

    def __init__(
        self,
        path: str,
        line: int,
        reason: str,
        kind: str = "unreadable",
        *,
        known: bool = False,
    ) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        self.kind = kind
        self.known = known
        super().__init__(f"{path}:{line}: {reason}")

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form: where (``line``: 0 for the file as a whole), what and why."""
        return {"line": self.line, "kind": self.kind, "reason": self.reason, "known": self.known}


#: What :attr:`ImportProblem.kind` may be, and what it means.
PROBLEM_KINDS = {
    "malformed": "not JSON, or not UTF-8 text",
    "unknown_shape": "JSON of no message or entry shape lossless knows",
    "other_format": "a message of another transcript format than the file's",
    "unreadable": "a record its format could not read (a field of the wrong type, ...)",
    "empty": "the file holds nothing",
    "too_large": "a file over the size an import reads (the setting max_file_bytes)",
    "not_a_transcript": "a file a host keeps beside its transcripts (passed over, no error)",
}


class NotATranscript(ImportProblem):
    """A file a host writes beside its transcripts (a trace, an index): recognised, and not
    imported; a folder import passes it over and says so."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(path, line, reason, "not_a_transcript")
