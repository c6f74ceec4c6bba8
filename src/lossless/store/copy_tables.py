"""What ``lossless migrate-store`` copies: every table of a store, in foreign-key order, with
the columns copied and the key each is copied in the order of (see :mod:`.copy` for how).

Not ``migrations`` (each store keeps its own), nor ``scrubs_due`` (a forget's scrub of the
source's own files: the copy never holds the text it freed), nor the search indexes (each
engine builds its own), nor generated columns (PostgreSQL's ``content_tsv``), nor the
neighbours' words it indexes (``context_tsv``, made again by the target).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TABLES", "Table"]


@dataclass(frozen=True)
class Table:
    """One table as ``migrate-store`` copies it."""

    name: str
    #: The columns copied, in this order, as they are written in SQL (``"offset"`` quoted).
    columns: tuple[str, ...]
    #: The primary key (or, for ``summaries``, the unique ``rowid``): the copy order.
    key: tuple[str, ...]
    #: Columns that may point at a row copied later in the same table: written as NULL with
    #: the row, then filled once the whole table is there (the key must be one column).
    deferred: tuple[str, ...] = ()
    #: A small table the schema itself fills (``index_state``): copied whole, with an
    #: upsert of the rows that differ, by every run.
    seeded: bool = False
    #: Whether every key column is an integer (ordered alike by every engine).
    integer_key: bool = True

    def __post_init__(self) -> None:
        if self.deferred and len(self.key) != 1:
            raise ValueError(f"{self.name}: deferred columns need a one-column key")

    @property
    def column_list(self) -> str:
        return ", ".join(self.columns)

    def positions(self, names: Sequence[str]) -> list[int]:
        return [self.columns.index(n) for n in names]


#: Every table of a store, in foreign-key order; not ``migrations`` (each store keeps its
#: own) nor the search indexes (each engine builds its own).
TABLES: tuple[Table, ...] = (
    Table(
        "conversations",
        (
            "conversation_id",
            "session_id",
            "session_key",
            "title",
            "status",
            "metadata",
            "created_at",
            "updated_at",
            "summary",
            "summary_version",
            "context_version",
            "namespace",
        ),
        ("conversation_id",),
    ),
    Table(
        "messages",
        (
            "message_id",
            "conversation_id",
            "seq",
            "role",
            "content",
            "token_count",
            "created_at",
            "external_id",
            "source_format",
            "envelope",
            "metadata",
            "host_meta",
            "forgotten_at",
            "archived_at",
        ),
        ("message_id",),
    ),
    Table(
        "message_parts",
        (
            "part_id",
            "message_id",
            "session_id",
            "ordinal",
            "slot",
            "part_type",
            "text",
            "tool_call_id",
            "tool_name",
            "tool_input",
            "tool_output",
            "is_error",
            "raw",
        ),
        ("part_id",),
    ),
    Table(
        "summaries",
        (
            # SQLite's implicit rowid, PostgreSQL's identity column: the search indexes key
            # on it, and it orders summaries created in the same instant.
            "rowid",
            "summary_id",
            "conversation_id",
            "kind",
            "depth",
            "content",
            "token_count",
            "created_at",
            "earliest_at",
            "latest_at",
            "descendant_count",
            "file_ids",
            "model",
            "retired_at",
            "retired_reason",
            "superseded_by",
        ),
        ("rowid",),
        # a rewritten summary names its successor, a newer row
        deferred=("superseded_by",),
    ),
    Table(
        "summary_parents",
        ("summary_id", "parent_summary_id", "ordinal"),
        ("summary_id", "parent_summary_id"),
        integer_key=False,
    ),
    Table(
        "summary_messages",
        ("summary_id", "message_id", "ordinal"),
        ("summary_id", "message_id"),
        integer_key=False,
    ),
    Table(
        "context_items",
        ("conversation_id", "ordinal", "item_type", "message_id", "summary_id", "created_at"),
        ("conversation_id", "ordinal"),
    ),
    Table(
        "large_files",
        (
            "file_id",
            "conversation_id",
            "message_id",
            "file_name",
            "mime_type",
            "byte_size",
            "token_count",
            "sha256",
            "storage_path",
            "exploration_summary",
            "created_at",
        ),
        ("file_id",),
        integer_key=False,
    ),
    Table(
        "transcript_checkpoints",
        (
            "conversation_id",
            "path",
            "format",
            "header_id",
            "head_hash",
            "size",
            '"offset"',
            "line_no",
            "last_line_start",
            "last_line_hash",
            "last_entry_id",
            "problems",
            "updated_at",
        ),
        ("conversation_id",),
    ),
    Table("index_state", ("name", "upto"), ("name",), seeded=True, integer_key=False),
    Table(
        "grants",
        (
            "grant_id",
            "conversation_ids",
            "max_depth",
            "token_cap",
            "tokens_used",
            "purpose",
            "created_at",
            "expires_at",
            "revoked_at",
        ),
        ("grant_id",),
        integer_key=False,
    ),
    Table(
        "session_summaries",
        (
            "session_summary_id",
            "conversation_id",
            "version",
            "summary",
            "topics",
            "decisions",
            "code_references",
            "key_points",
            "first_message_id",
            "last_message_id",
            "message_count",
            "messages_processed",
            "is_incremental",
            "model",
            "created_at",
        ),
        ("session_summary_id",),
        integer_key=False,
    ),
    Table(
        "tool_executions",
        (
            "execution_id",
            "conversation_id",
            "call_message_id",
            "result_message_id",
            "tool_name",
            "input",
            "output",
            "output_file_id",
            "status",
            "error",
            "started_at",
            "finished_at",
            "duration_ms",
        ),
        ("conversation_id", "execution_id"),
        integer_key=False,
    ),
    Table(
        "context_removals",
        ("message_id", "conversation_id", "removed_at"),
        ("message_id",),
    ),
    Table(
        "redacted_originals",
        ("message_id", "sealed", "secrets", "plain"),
        ("message_id",),
    ),
    Table("store_settings", ("name", "value"), ("name",), integer_key=False),
    Table(
        "forgotten",
        (
            "forget_id",
            "conversation_id",
            "what",
            "messages",
            "first_message_id",
            "last_message_id",
            "details",
            "forgotten_at",
        ),
        ("forget_id",),
    ),
    Table(
        "archives",
        (
            "archive_id",
            "name",
            "messages",
            "bytes",
            "text_bytes",
            "sha256",
            "rule",
            "created_at",
        ),
        ("archive_id",),
    ),
    Table(
        "archived_messages",
        ("message_id", "archive_id", "member_offset", "member_bytes", "line"),
        ("message_id",),
    ),
    Table(
        "access_tokens",
        (
            "token_id",
            "secret_hash",
            "namespace",
            "role",
            "sessions",
            "label",
            "created_at",
            "expires_at",
            "revoked_at",
        ),
        ("token_id",),
        integer_key=False,
    ),
    Table(
        "audit_log",
        (
            "audit_id",
            "at",
            "actor",
            "namespace",
            "action",
            "conversation_id",
            "session_id",
            "outcome",
            "detail",
        ),
        ("audit_id",),
    ),
)
