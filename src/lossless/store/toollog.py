"""The tool-execution log, written from the stored messages' tool-call and tool-result parts.

Used inside the store's transactions (a batch of messages and the executions they carry are
one write) and by the migration that logs the messages stored before the log existed.

A call's input and a result's output are their parts' own (``message_parts.tool_input`` and
``tool_output``): the log does not hold them again (``input`` and ``output`` stay NULL) and
its readers take them from the parts (:data:`INPUT_SQL`, :data:`OUTPUT_SQL`). Rows logged
before this hold their own copies, which the readers take first.
"""

from __future__ import annotations

from ..timestamps import parse_ts
from .connection import Connection

__all__ = ["ERROR_CHARS", "INPUT_SQL", "OUTPUT_SQL", "record_tool_executions"]

#: How much of a failed call's output is kept as its error text.
ERROR_CHARS = 500

#: An execution's input (of ``tool_executions e``): its own copy, else its call part's (the
#: first, as the log keeps the first call of an id).
INPUT_SQL = (
    "coalesce(e.input, (SELECT p.tool_input FROM message_parts p"
    " WHERE p.message_id = e.call_message_id AND p.part_type = 'tool_call'"
    " AND p.tool_call_id = e.execution_id ORDER BY p.ordinal LIMIT 1))"
)
#: An execution's output (of ``tool_executions e``): its own copy, else its result part's (the
#: last of its message, as the log's status is the last result's).
OUTPUT_SQL = (
    "coalesce(e.output, (SELECT p.tool_output FROM message_parts p"
    " WHERE p.message_id = e.result_message_id AND p.part_type = 'tool_result'"
    " AND p.tool_call_id = e.execution_id ORDER BY p.ordinal DESC LIMIT 1))"
)


def record_tool_executions(
    conn: Connection, conversation_id: int | None, first_id: int, last_id: int
) -> int:
    """Log the tool calls and results of messages ``first_id..last_id`` (of one
    conversation, or of all when ``None``); returns how many parts were logged.

    A call makes a ``pending`` execution; its result (matched by tool call id within the
    conversation) completes it with the output, ``ok`` or ``error``, the finish time and the
    duration. A result whose call is not stored still gets a row. Re-logging is harmless.
    """
    # The id range is what selects the rows (a batch's ids are consecutive); the unary plus
    # keeps the planner from walking the conversation's whole (conversation_id, seq) index.
    where = "" if conversation_id is None else " AND +m.conversation_id = ?"
    params: list[object] = [first_id, last_id]
    if conversation_id is not None:
        params.append(conversation_id)
    rows = conn.execute(
        "SELECT m.conversation_id, m.message_id, m.created_at, p.part_type, p.tool_call_id,"
        " p.tool_name, p.tool_input, p.tool_output, p.is_error,"
        " (SELECT f.file_id FROM large_files f WHERE f.message_id = m.message_id LIMIT 1)"
        " FROM message_parts p JOIN messages m ON m.message_id = p.message_id"
        " WHERE m.message_id BETWEEN ? AND ?"
        f"{where} AND p.part_type IN ('tool_call', 'tool_result')"
        " AND p.tool_call_id IS NOT NULL ORDER BY m.message_id, p.ordinal",
        params,
    ).fetchall()
    for conv, mid, at, kind, call_id, name, _input, output, is_error, file_id in rows:
        if kind == "tool_call":
            conn.execute(
                "INSERT INTO tool_executions (execution_id, conversation_id,"
                " call_message_id, tool_name, status, started_at)"
                " VALUES (?, ?, ?, ?, 'pending', ?) ON CONFLICT DO NOTHING",
                (call_id, conv, mid, name, at),
            )
            continue
        status = "error" if is_error else "ok"
        error = (output or "")[:ERROR_CHARS] if is_error else None
        found = conn.execute(
            "SELECT started_at FROM tool_executions WHERE conversation_id = ? AND execution_id = ?",
            (conv, call_id),
        ).fetchone()
        if found is None:
            conn.execute(
                "INSERT INTO tool_executions (execution_id, conversation_id, result_message_id,"
                " tool_name, output_file_id, status, error, finished_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (call_id, conv, mid, name, file_id, status, error, at),
            )
            continue
        # (output = NULL: a row logged before may hold an older result's copy)
        conn.execute(
            "UPDATE tool_executions SET result_message_id = ?, output = NULL,"
            " output_file_id = ?, status = ?, error = ?, finished_at = ?, duration_ms = ?,"
            " tool_name = coalesce(tool_name, ?)"
            " WHERE conversation_id = ? AND execution_id = ?",
            (mid, file_id, status, error, at, _duration(found[0], at), name, conv, call_id),
        )
    return len(rows)


def _duration(started: str | None, finished: str) -> int | None:
    begin, end = parse_ts(started), parse_ts(finished)
    if begin is None or end is None or end < begin:
        return None
    return int((end - begin).total_seconds() * 1000)
