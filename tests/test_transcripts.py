"""Transcript importers: OpenClaw v3/v1, Claude Code, plain message lists; malformed input.

Every transcript here is written by the test itself, line by line, following the real
formats (OpenClaw / pi session v3, Claude Code ``~/.claude/projects`` JSONL), or generated
with :func:`lossless.sample.write_session`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lossless import Engine, doctor
from lossless.cli.main import cli
from lossless.errors import ImportProblem, LosslessError
from lossless.ingest import reconcile
from lossless.ingest.transcripts import iter_json_array
from lossless.model import StoredMessage
from lossless.sample import write_session
from lossless.timestamps import format_ts, parse_ts

# --- helpers -------------------------------------------------------------------------------


def write_jsonl(path: Path, objs: Iterable[Any], *, mode: str = "w") -> Path:
    with path.open(mode, encoding="utf-8") as handle:
        for obj in objs:
            handle.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return path


def stored(engine: Engine, session_id: str) -> list[StoredMessage]:
    return engine.messages(session_id)


def assert_consistent(engine: Engine) -> None:
    """The store passes doctor and no conversation holds an external id twice."""
    assert doctor.check(engine.store) == []
    dupes = engine.store.fetchall(
        "SELECT conversation_id, external_id, count(*) FROM messages"
        " WHERE external_id IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1"
    )
    assert dupes == []


def all_text(messages: Iterable[StoredMessage]) -> str:
    """Everything a stored message holds: its text and its source form."""
    return "\n".join(m.content + json.dumps(m.to_source(), ensure_ascii=False) for m in messages)


SESSION = "b7300bff-a214-4c11-97ae-eab26883c67a"


def oc_header(session_id: str = SESSION, **extra: Any) -> dict[str, Any]:
    return {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": "2026-04-08T01:03:43.107Z",
        "cwd": "/Users/x/.openclaw/workspace",
        **extra,
    }


def oc_entry(
    kind: str, entry_id: str, parent: str | None, ts: str, **fields: Any
) -> dict[str, Any]:
    return {"type": kind, "id": entry_id, "parentId": parent, "timestamp": ts, **fields}


def oc_user(
    entry_id: str, parent: str | None, text: str, ts: str = "2026-04-08T01:04:00.000Z"
) -> dict[str, Any]:
    ms = int(parse_ts(ts).timestamp() * 1000)  # type: ignore[union-attr]
    message = {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ms}
    return oc_entry("message", entry_id, parent, ts, message=message)


def oc_assistant(
    entry_id: str, parent: str | None, text: str, ts: str = "2026-04-08T01:04:05.000Z"
) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input": 10,
            "output": 5,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 15,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
        },
        "stopReason": "stop",
        "timestamp": 1775610245000,
    }
    return oc_entry("message", entry_id, parent, ts, message=message)


def openclaw_session(path: Path) -> Path:
    """A realistic v3 session: settings entries, a tool round trip, host compaction, label, name."""
    lines = [
        oc_header(),
        oc_entry(
            "model_change",
            "7f59d586",
            None,
            "2026-04-08T01:03:43.116Z",
            provider="anthropic",
            modelId="claude-sonnet-4-5",
        ),
        oc_entry(
            "thinking_level_change",
            "9b229e99",
            "7f59d586",
            "2026-04-08T01:03:43.116Z",
            thinkingLevel="off",
        ),
        oc_entry(
            "custom",
            "40821ce7",
            "9b229e99",
            "2026-04-08T01:03:43.117Z",
            customType="model-snapshot",
            data={
                "timestamp": 1775610223117,
                "provider": "anthropic",
                "modelApi": "anthropic-messages",
                "modelId": "claude-sonnet-4-5",
            },
        ),
        oc_entry(
            "message",
            "2b3c4d5e",
            "40821ce7",
            "2026-04-08T01:03:50.000Z",
            message={
                "role": "user",
                "content": [{"type": "text", "text": "fix the failing test"}],
                "timestamp": 1775610230000,
            },
        ),
        oc_entry(
            "message",
            "3c4d5e6f",
            "2b3c4d5e",
            "2026-04-08T01:03:54.000Z",
            message={
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": "run the tests first",
                        "thinkingSignature": "EuY...",
                    },
                    {"type": "text", "text": "Running tests."},
                    {
                        "type": "toolCall",
                        "id": "toolu_01",
                        "name": "bash",
                        "arguments": {"command": "npm test"},
                    },
                ],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": {
                    "input": 900,
                    "output": 40,
                    "cacheRead": 0,
                    "cacheWrite": 0,
                    "totalTokens": 940,
                    "cost": {
                        "input": 0.0027,
                        "output": 0.0006,
                        "cacheRead": 0,
                        "cacheWrite": 0,
                        "total": 0.0033,
                    },
                },
                "stopReason": "toolUse",
                "timestamp": 1775610234000,
            },
        ),
        oc_entry(
            "message",
            "4d5e6f70",
            "3c4d5e6f",
            "2026-04-08T01:03:57.000Z",
            message={
                "role": "toolResult",
                "toolCallId": "toolu_01",
                "toolName": "bash",
                "content": [{"type": "text", "text": "1 failing: expected 20 items, got 19"}],
                "details": {},
                "isError": False,
                "timestamp": 1775610237000,
            },
        ),
        oc_entry(
            "compaction",
            "f6a7b8c9",
            "4d5e6f70",
            "2026-04-08T02:10:00.000Z",
            summary="HOST-SUMMARY: user asked to fix tests",
            firstKeptEntryId="2b3c4d5e",
            tokensBefore=50000,
            details={"readFiles": ["src/a.ts"], "modifiedFiles": []},
        ),
        oc_entry(
            "label",
            "j0k1l2m3",
            "f6a7b8c9",
            "2026-04-08T02:30:00.000Z",
            targetId="2b3c4d5e",
            label="checkpoint-1",
        ),
        oc_entry(
            "session_info", "k1l2m3n4", "j0k1l2m3", "2026-04-08T02:35:00.000Z", name="Fix tests"
        ),
        oc_assistant(
            "5e6f7081",
            "k1l2m3n4",
            "The off-by-one is in list_items; fixed.",
            "2026-04-08T02:36:00.000Z",
        ),
    ]
    return write_jsonl(path, lines)


def cc_base(session_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/u/app",
        "sessionId": session_id,
        "version": "2.1.37",
        "gitBranch": "main",
        **extra,
    }


def cc_user(
    sid: str, uuid: str, parent: str | None, content: Any, ts: str, **extra: Any
) -> dict[str, Any]:
    return {
        **cc_base(sid, **extra),
        "parentUuid": parent,
        "type": "user",
        "message": {"role": "user", "content": content},
        "uuid": uuid,
        "timestamp": ts,
    }


def cc_assistant(
    sid: str,
    uuid: str,
    parent: str | None,
    msg_id: str,
    blocks: list[dict[str, Any]],
    ts: str,
    *,
    stop: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        **cc_base(sid, **extra),
        "parentUuid": parent,
        "type": "assistant",
        "message": {
            "model": "claude-opus-4-6",
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 2,
                "cache_creation_input_tokens": 10408,
                "cache_read_input_tokens": 14265,
                "output_tokens": 85,
                "service_tier": "standard",
            },
        },
        "requestId": "req_011C" + msg_id[-4:],
        "uuid": uuid,
        "timestamp": ts,
    }


def cc_tool_result(
    sid: str, uuid: str, parent: str, tool_id: str, output: str, ts: str, **extra: Any
) -> dict[str, Any]:
    entry = cc_user(
        sid,
        uuid,
        parent,
        [{"type": "tool_result", "tool_use_id": tool_id, "content": output, "is_error": False}],
        ts,
        **extra,
    )
    entry["toolUseResult"] = {
        "stdout": output,
        "stderr": "",
        "interrupted": False,
        "isImage": False,
    }
    entry["sourceToolAssistantUUID"] = parent
    return entry


CC = "2b4ed4c0-1111-4222-8333-944445555666"


# --- OpenClaw v3 ---------------------------------------------------------------------------


def test_openclaw_messages_are_imported_and_settings_entries_are_skipped_but_counted(
    engine: Engine, tmp_path: Path
) -> None:
    path = openclaw_session(tmp_path / "session.jsonl")
    [report] = engine.bootstrap(path)

    msgs = stored(engine, SESSION)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert report.imported == 4
    assert report.off_branch == 0
    assert report.problems == []
    assert dict(report.skipped) == {
        "session header": 1,
        "model_change": 1,
        "thinking_level_change": 1,
        "custom": 1,
        "compaction": 1,
        "label": 1,
        "session_info": 1,
    }
    # The host's own compaction summary is not a message of the conversation.
    assert "HOST-SUMMARY" not in all_text(msgs)
    assert_consistent(engine)


def test_openclaw_assistant_blocks_become_reasoning_text_and_tool_call_parts(
    engine: Engine, tmp_path: Path
) -> None:
    engine.bootstrap(openclaw_session(tmp_path / "session.jsonl"))
    user, assistant, tool, _ = stored(engine, SESSION)

    assert user.content == "fix the failing test"
    assert [p.type for p in assistant.parts] == ["reasoning", "text", "tool_call"]
    call = assistant.parts[2]
    assert (call.tool_call_id, call.tool_name, call.tool_input) == (
        "toolu_01",
        "bash",
        {"command": "npm test"},
    )
    [result] = tool.parts
    assert result.type == "tool_result"
    assert result.tool_call_id == "toolu_01"
    assert result.tool_output == "1 failing: expected 20 items, got 19"
    assert [m.external_id for m in stored(engine, SESSION)] == [
        "2b3c4d5e",
        "3c4d5e6f",
        "4d5e6f70",
        "5e6f7081",
    ]
    assert_consistent(engine)


def test_openclaw_session_name_header_id_and_entry_timestamps_describe_the_conversation(
    engine: Engine, tmp_path: Path
) -> None:
    [report] = engine.bootstrap(openclaw_session(tmp_path / "session.jsonl"))

    conv = engine.conversation(SESSION)
    assert report.session_id == SESSION
    assert conv.session_id == SESSION
    assert conv.title == "Fix tests"
    first = stored(engine, SESSION)[0]
    # The entry's ISO timestamp, not the ingest time.
    assert first.created_at == format_ts(parse_ts("2026-04-08T01:03:50.000Z"))  # type: ignore[arg-type]
    assert_consistent(engine)


def test_openclaw_messages_round_trip_to_the_exact_objects_in_the_file(
    engine: Engine, tmp_path: Path
) -> None:
    path = openclaw_session(tmp_path / "session.jsonl")
    engine.bootstrap(path)

    in_file = [
        json.loads(line)["message"]
        for line in path.read_text(encoding="utf-8").splitlines()
        if json.loads(line)["type"] == "message"
    ]
    assert [m.to_source() for m in stored(engine, SESSION)] == in_file
    assert_consistent(engine)


def test_openclaw_branched_file_imports_only_the_branch_continued_last(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "branched.jsonl",
        [
            oc_header(),
            oc_user("a0000001", None, "What port does the service use?"),
            oc_assistant("a0000002", "a0000001", "It listens on 8043."),
            oc_user("a0000003", "a0000002", "ABANDONED: switch to port 9000"),
            oc_assistant("a0000004", "a0000003", "ABANDONED: switched to 9000."),
            # The user went back to a0000002 and asked something else; this branch is last.
            oc_user("a0000005", "a0000002", "Add a health check instead."),
            oc_entry(
                "label",
                "a0000006",
                "a0000005",
                "2026-04-08T01:05:00.000Z",
                targetId="a0000005",
                label="health",
            ),
            oc_assistant("a0000007", "a0000006", "Added /healthz."),
        ],
    )
    [report] = engine.bootstrap(path)

    msgs = stored(engine, SESSION)
    assert [m.external_id for m in msgs] == ["a0000001", "a0000002", "a0000005", "a0000007"]
    assert report.off_branch == 2
    assert report.imported == 4
    assert "ABANDONED" not in all_text(msgs)
    assert_consistent(engine)


def test_openclaw_version_1_file_without_ids_imports_linearly_and_reimports_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    header = {
        "type": "session",
        "id": "v1-session",
        "timestamp": "2025-06-01T10:00:00.000Z",
        "cwd": "/w",
        "provider": "anthropic",
        "modelId": "claude-sonnet-4",
        "thinkingLevel": "off",
    }
    texts = ["first question", "first answer", "second question", "second answer"]
    entries = [
        {
            "type": "message",
            "timestamp": f"2025-06-01T10:00:0{i}.000Z",
            "message": {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": [{"type": "text", "text": t}],
                "timestamp": 1748772000000 + i,
            },
        }
        for i, t in enumerate(texts)
    ]
    path = write_jsonl(tmp_path / "v1.jsonl", [header, *entries])

    [first] = engine.bootstrap(path)
    assert first.imported == 4
    assert [m.content for m in stored(engine, "v1-session")] == texts

    [again] = engine.bootstrap(path)
    assert again.imported == 0
    # Even a full re-read (the checkpoint forgotten) adds nothing: ids are line positions.
    with engine.store.transaction() as conn:
        conn.execute("DELETE FROM transcript_checkpoints")
    [full] = engine.bootstrap(path)
    assert full.mode == "full"
    assert full.imported == 0
    assert engine.store.message_count() == 4
    assert_consistent(engine)


def test_sample_openclaw_session_imports_every_message(engine: Engine, tmp_path: Path) -> None:
    path = write_session(tmp_path / "demo.jsonl", 12, session_id="demo-oc")
    expected = sum(1 for line in path.open() if json.loads(line)["type"] == "message")
    [report] = engine.bootstrap(path)
    assert report.imported == expected
    assert engine.store.message_count() == expected
    assert_consistent(engine)


# --- Claude Code ---------------------------------------------------------------------------


def claude_code_session(path: Path) -> Path:
    sid = CC
    lines = [
        {"type": "summary", "summary": "Fix auth bug", "leafUuid": "u-9"},
        {
            "type": "file-history-snapshot",
            "messageId": "613a3e70",
            "snapshot": {
                "messageId": "613a3e70",
                "trackedFileBackups": {},
                "timestamp": "2026-02-18T12:14:30.526Z",
            },
            "isSnapshotUpdate": False,
        },
        cc_user(sid, "u-1", None, "Fix the failing test", "2026-02-18T11:43:58.858Z"),
        cc_assistant(
            sid,
            "a-1",
            "u-1",
            "msg_017T",
            [{"type": "thinking", "thinking": "Run the tests first.", "signature": "Eu..."}],
            "2026-02-18T11:44:01.000Z",
        ),
        cc_assistant(
            sid,
            "a-2",
            "a-1",
            "msg_017T",
            [{"type": "text", "text": "I'll run the test suite."}],
            "2026-02-18T11:44:01.500Z",
        ),
        cc_assistant(
            sid,
            "a-3",
            "a-2",
            "msg_017T",
            [
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "Bash",
                    "input": {"command": "npm test"},
                }
            ],
            "2026-02-18T11:44:02.000Z",
            stop="tool_use",
        ),
        cc_tool_result(sid, "u-2", "a-3", "toolu_01", "1 failing", "2026-02-18T11:44:05.000Z"),
        {
            "type": "file-history-snapshot",
            "messageId": "u-2",
            "snapshot": {
                "messageId": "u-2",
                "trackedFileBackups": {},
                "timestamp": "2026-02-18T11:44:05.100Z",
            },
            "isSnapshotUpdate": True,
        },
        cc_assistant(
            sid,
            "a-4",
            "u-2",
            "msg_018X",
            [{"type": "text", "text": "Fixed the off-by-one in paginate()."}],
            "2026-02-18T11:44:09.000Z",
            stop="end_turn",
        ),
    ]
    return write_jsonl(path, lines)


def test_claude_code_assistant_split_over_lines_is_stored_line_by_line_in_order(
    engine: Engine, tmp_path: Path
) -> None:
    [report] = engine.bootstrap(claude_code_session(tmp_path / f"{CC}.jsonl"))

    msgs = stored(engine, CC)
    assert [m.external_id for m in msgs] == ["u-1", "a-1", "a-2", "a-3", "u-2", "a-4"]
    assert [m.role for m in msgs] == [
        "user",
        "assistant",
        "assistant",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [m.to_source()["id"] for m in msgs[1:4]] == ["msg_017T"] * 3
    assert [p.type for p in msgs[1].parts] == ["reasoning"]
    assert report.imported == 6
    assert report.session_id == CC
    assert engine.conversation(CC).session_key == CC
    assert_consistent(engine)


def test_claude_code_tool_use_and_its_result_share_the_call_id(
    engine: Engine, tmp_path: Path
) -> None:
    engine.bootstrap(claude_code_session(tmp_path / f"{CC}.jsonl"))
    msgs = {m.external_id: m for m in stored(engine, CC)}

    [call] = msgs["a-3"].parts
    [result] = [p for p in msgs["u-2"].parts if p.type == "tool_result"]
    assert call.type == "tool_call"
    assert call.tool_call_id == result.tool_call_id == "toolu_01"
    assert call.tool_input == {"command": "npm test"}
    assert result.tool_output == "1 failing"
    assert_consistent(engine)


def test_claude_code_summary_and_snapshot_lines_are_skipped_and_counted(
    engine: Engine, tmp_path: Path
) -> None:
    [report] = engine.bootstrap(claude_code_session(tmp_path / f"{CC}.jsonl"))
    assert report.skipped["summary"] == 1
    assert report.skipped["file-history-snapshot"] == 2
    assert engine.conversation(CC).title == "Fix auth bug"
    assert_consistent(engine)


def test_claude_code_messages_round_trip_to_the_file_objects(
    engine: Engine, tmp_path: Path
) -> None:
    path = claude_code_session(tmp_path / f"{CC}.jsonl")
    engine.bootstrap(path)
    in_file = [
        obj["message"]
        for obj in map(json.loads, path.read_text(encoding="utf-8").splitlines())
        if obj["type"] in ("user", "assistant")
    ]
    assert [m.to_source() for m in stored(engine, CC)] == in_file
    assert_consistent(engine)


def compacted_claude_code_session(path: Path, sid: str = CC) -> Path:
    summary_text = (
        "This session is being continued from a previous conversation that ran out of "
        "context. The summary below covers the earlier portion of the conversation.\n\n"
        "Summary:\n1. HOST-COMPACT-SUMMARY the user wants pagination"
    )
    lines = [
        cc_user(sid, "u-1", None, "Add cursor pagination to /items", "2026-08-04T17:00:00.000Z"),
        cc_assistant(
            sid,
            "a-1",
            "u-1",
            "msg_A1",
            [{"type": "text", "text": "Reading api.py."}],
            "2026-08-04T17:00:05.000Z",
        ),
        cc_user(sid, "u-2", "a-1", "Use a base64 cursor.", "2026-08-04T17:01:00.000Z"),
        {
            **cc_base(sid, version="2.1.72"),
            "parentUuid": None,
            "logicalParentUuid": "u-2",
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "isMeta": False,
            "level": "info",
            "compactMetadata": {
                "trigger": "auto",
                "preTokens": 166909,
                "postTokens": 6060,
                "durationMs": 119274,
            },
            "uuid": "cb-1",
            "timestamp": "2026-08-04T18:26:01.000Z",
        },
        {
            **cc_user(sid, "cs-1", "cb-1", summary_text, "2026-08-04T18:26:02.000Z"),
            "isCompactSummary": True,
            "isVisibleInTranscriptOnly": True,
        },
        cc_assistant(
            sid,
            "a-2",
            "cs-1",
            "msg_A2",
            [{"type": "text", "text": "Continuing: cursor is base64 of the last id."}],
            "2026-08-04T18:26:10.000Z",
        ),
        cc_user(sid, "u-3", "a-2", "Great, add a test.", "2026-08-04T18:27:00.000Z"),
    ]
    return write_jsonl(path, lines)


def test_claude_code_history_on_both_sides_of_a_host_compaction_is_imported(
    engine: Engine, tmp_path: Path
) -> None:
    [report] = engine.bootstrap(compacted_claude_code_session(tmp_path / f"{CC}.jsonl"))

    msgs = stored(engine, CC)
    assert [m.external_id for m in msgs] == ["u-1", "a-1", "u-2", "cb-1", "cs-1", "a-2", "u-3"]
    assert [m.host_meta for m in msgs] == [
        None,
        None,
        None,
        "compact_boundary",
        "host_summary",
        None,
        None,
    ]
    assert report.off_branch == 0
    assert_consistent(engine)


def test_claude_code_compact_summary_is_kept_as_the_hosts_record_and_as_a_compaction(
    engine: Engine, tmp_path: Path
) -> None:
    engine.bootstrap(compacted_claude_code_session(tmp_path / f"{CC}.jsonl"))

    [summary] = [m for m in stored(engine, CC) if "HOST-COMPACT-SUMMARY" in m.content]
    assert (summary.role, summary.host_meta) == ("user", "host_summary")
    [compaction] = engine.conversation(CC).metadata["host_compactions"]
    assert compaction["summary_uuid"] == "cs-1"
    assert compaction["boundary_uuid"] == "cb-1"
    # Not the user's words: the goal of the resume summary is the first real request.
    assert engine.resume(CC, latest=True).goal[0].startswith("Add cursor pagination")
    assert_consistent(engine)


@pytest.mark.parametrize("link", ["logical_parent", "preserved_segment", "none"])
def test_a_compacted_transcript_whose_boundary_names_an_entry_not_in_the_file_imports_whole(
    engine: Engine, tmp_path: Path, link: str
) -> None:
    path = compacted_claude_code_session(tmp_path / f"{CC}.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    boundary = next(obj for obj in lines if obj.get("subtype") == "compact_boundary")
    missing = "e-not-in-this-file"
    if link == "logical_parent":
        boundary["logicalParentUuid"] = missing
    elif link == "preserved_segment":
        del boundary["logicalParentUuid"]
        boundary["compactMetadata"]["preservedSegment"] = {"tailUuid": missing}
    else:
        del boundary["logicalParentUuid"]
    write_jsonl(path, lines)

    [report] = engine.bootstrap(path)

    ids = [m.external_id for m in stored(engine, CC)]
    assert ids == ["u-1", "a-1", "u-2", "cb-1", "cs-1", "a-2", "u-3"]
    assert (report.off_branch, report.imported) == (0, 7)
    assert_consistent(engine)


def test_messages_off_the_active_branch_are_stored_in_the_sessions_branches_conversation(
    engine: Engine, tmp_path: Path
) -> None:
    # The user rewound to u-1 and asked again: a-1/u-2/a-2 are an abandoned branch.
    path = write_jsonl(
        tmp_path / f"{CC}.jsonl",
        [
            cc_user(CC, "u-1", None, "Plan the release", "2026-08-04T17:00:00.000Z"),
            cc_assistant(
                CC,
                "a-1",
                "u-1",
                "m1",
                [{"type": "text", "text": "Draft A"}],
                "2026-08-04T17:00:01.000Z",
            ),
            cc_user(CC, "u-2", "a-1", "No, shorter", "2026-08-04T17:00:02.000Z"),
            cc_assistant(
                CC,
                "a-2",
                "u-2",
                "m2",
                [{"type": "text", "text": "Draft B"}],
                "2026-08-04T17:00:03.000Z",
            ),
            cc_assistant(
                CC,
                "a-3",
                "u-1",
                "m3",
                [{"type": "text", "text": "Draft C"}],
                "2026-08-04T17:00:04.000Z",
            ),
        ],
    )
    [report] = engine.bootstrap(path)
    assert [m.external_id for m in stored(engine, CC)] == ["u-1", "a-3"]
    branches = engine.conversation(f"{CC}:branches")
    assert [m.content for m in stored(engine, branches.session_id)] == [
        "Draft A",
        "No, shorter",
        "Draft B",
    ]
    assert (report.off_branch, report.off_branch_stored) == (3, 3)
    assert report.branch_conversation_id == branches.conversation_id
    assert branches.session_key == engine.conversation(CC).session_key  # one family
    # Found by a search of the session's family.
    hits = [h for h in engine.grep("Draft", conversation=CC).hits if "Draft" in h.snippet]
    assert sorted(h.conversation_id for h in hits) == sorted(
        [engine.conversation(CC).conversation_id] + [branches.conversation_id] * 2
    )
    again = engine.bootstrap(path, session_id=None)
    assert again[0].mode == "unchanged"
    (tmp_path / "copy.jsonl").write_bytes(path.read_bytes())
    [copied] = engine.bootstrap(tmp_path / "copy.jsonl")
    assert (copied.imported, copied.off_branch_stored) == (0, 0)
    assert_consistent(engine)


def test_claude_code_inline_sidechain_entries_form_their_own_conversation(
    engine: Engine, tmp_path: Path
) -> None:
    sid = CC
    side: dict[str, Any] = {"isSidechain": True, "agentId": "a1b2c3d"}
    path = write_jsonl(
        tmp_path / f"{sid}.jsonl",
        [
            cc_user(
                sid, "u-1", None, "Find where the cache is configured", "2026-02-18T10:00:00.000Z"
            ),
            cc_assistant(
                sid,
                "a-1",
                "u-1",
                "msg_1",
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_task",
                        "name": "Task",
                        "input": {"prompt": "search for CACHE_URL"},
                    }
                ],
                "2026-02-18T10:00:02.000Z",
            ),
            cc_user(
                sid,
                "s-1",
                None,
                "SIDECHAIN: search for CACHE_URL",
                "2026-02-18T10:00:03.000Z",
                **side,
            ),
            cc_assistant(
                sid,
                "s-2",
                "s-1",
                "msg_s2",
                [{"type": "text", "text": "SIDECHAIN: found in settings.py"}],
                "2026-02-18T10:00:04.000Z",
                **side,
            ),
            cc_tool_result(
                sid,
                "u-2",
                "a-1",
                "toolu_task",
                "CACHE_URL is in settings.py",
                "2026-02-18T10:00:05.000Z",
            ),
            cc_assistant(
                sid,
                "a-2",
                "u-2",
                "msg_2",
                [{"type": "text", "text": "It is set in src/inventory/settings.py."}],
                "2026-02-18T10:00:06.000Z",
            ),
        ],
    )
    reports = engine.bootstrap(path)

    assert [r.session_id for r in reports] == [sid, f"{sid}:sidechain"]
    main = stored(engine, sid)
    assert [m.external_id for m in main] == ["u-1", "a-1", "u-2", "a-2"]
    assert "SIDECHAIN" not in all_text(main)
    side_conv = engine.conversation(f"{sid}:sidechain")
    assert side_conv.session_key == sid
    assert [m.external_id for m in stored(engine, f"{sid}:sidechain")] == ["s-1", "s-2"]
    assert_consistent(engine)


def test_claude_code_subagent_file_becomes_an_agent_conversation_of_its_session(
    engine: Engine, tmp_path: Path
) -> None:
    sid = CC
    side: dict[str, Any] = {"isSidechain": True, "agentId": "def456"}
    folder = tmp_path / sid / "subagents"
    folder.mkdir(parents=True)
    path = write_jsonl(
        folder / "agent-def456.jsonl",
        [
            cc_user(
                sid,
                "g-1",
                None,
                "Search the repo for CACHE_URL",
                "2026-02-18T10:00:03.000Z",
                **side,
            ),
            cc_assistant(
                sid,
                "g-2",
                "g-1",
                "msg_g2",
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_g",
                        "name": "Grep",
                        "input": {"pattern": "CACHE_URL"},
                    }
                ],
                "2026-02-18T10:00:04.000Z",
                **side,
            ),
            cc_tool_result(
                sid,
                "g-3",
                "g-2",
                "toolu_g",
                "src/inventory/settings.py:3",
                "2026-02-18T10:00:05.000Z",
                **side,
            ),
            cc_assistant(
                sid,
                "g-4",
                "g-3",
                "msg_g4",
                [{"type": "text", "text": "CACHE_URL is defined in settings.py line 3."}],
                "2026-02-18T10:00:06.000Z",
                **side,
            ),
        ],
    )
    [report] = engine.bootstrap(path)

    assert report.session_id == f"{sid}:agent-def456"
    conv = engine.conversation(f"{sid}:agent-def456")
    assert conv.session_key == sid
    assert [m.external_id for m in stored(engine, conv.session_id)] == ["g-1", "g-2", "g-3", "g-4"]
    assert engine.store.find_conversation(sid) is None
    assert_consistent(engine)


def test_claude_code_results_of_parallel_tool_calls_are_all_imported(
    engine: Engine, tmp_path: Path
) -> None:
    # Parallel tool calls make a tree (anthropics/claude-code#37779): the first result hangs
    # off the first tool_use line, a sibling of the second tool_use line.
    sid = CC
    path = write_jsonl(
        tmp_path / f"{sid}.jsonl",
        [
            cc_user(sid, "u-1", None, "Write 2 files in parallel", "2026-03-23T10:00:00.000Z"),
            cc_assistant(
                sid,
                "AAA",
                "u-1",
                "msg_P",
                [{"type": "thinking", "thinking": "two writes", "signature": "x"}],
                "2026-03-23T10:00:01.000Z",
            ),
            cc_assistant(
                sid,
                "BBB",
                "AAA",
                "msg_P",
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_a",
                        "name": "Write",
                        "input": {"file_path": "a.md"},
                    }
                ],
                "2026-03-23T10:00:02.000Z",
            ),
            cc_assistant(
                sid,
                "CCC",
                "BBB",
                "msg_P",
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_b",
                        "name": "Write",
                        "input": {"file_path": "b.md"},
                    }
                ],
                "2026-03-23T10:00:03.000Z",
                stop="tool_use",
            ),
            cc_tool_result(sid, "DDD", "BBB", "toolu_a", "wrote a.md", "2026-03-23T10:00:04.000Z"),
            cc_tool_result(sid, "EEE", "CCC", "toolu_b", "wrote b.md", "2026-03-23T10:00:05.000Z"),
            cc_assistant(
                sid,
                "FFF",
                "EEE",
                "msg_Q",
                [{"type": "text", "text": "Created both files."}],
                "2026-03-23T10:00:06.000Z",
                stop="end_turn",
            ),
        ],
    )
    [report] = engine.bootstrap(path)

    msgs = stored(engine, sid)
    assert [m.external_id for m in msgs] == ["u-1", "AAA", "BBB", "CCC", "DDD", "EEE", "FFF"]
    assert report.off_branch == 0
    calls = {p.tool_call_id for m in msgs for p in m.parts if p.type == "tool_call"}
    results = {p.tool_call_id for m in msgs for p in m.parts if p.type == "tool_result"}
    assert calls == results == {"toolu_a", "toolu_b"}
    assert_consistent(engine)


def test_sample_claude_code_session_imports_every_entry(engine: Engine, tmp_path: Path) -> None:
    path = write_session(tmp_path / "cc.jsonl", 8, format="claude_code", session_id="sample-cc-1")
    lines = path.read_text(encoding="utf-8").splitlines()
    [report] = engine.bootstrap(path)
    assert report.imported == len(lines)
    assert [m.to_source() for m in stored(engine, "sample-cc-1")] == [
        json.loads(line)["message"] for line in lines
    ]
    assert_consistent(engine)


def test_importing_a_directory_imports_every_transcript_in_it(
    engine: Engine, tmp_path: Path
) -> None:
    root = tmp_path / "projects"
    (root / "-home-u-app" / CC / "subagents").mkdir(parents=True)
    openclaw_session(root / "openclaw.jsonl")
    claude_code_session(root / "-home-u-app" / f"{CC}.jsonl")
    write_jsonl(
        root / "-home-u-app" / CC / "subagents" / "agent-zz9.jsonl",
        [
            cc_user(
                CC,
                "z-1",
                None,
                "subagent prompt",
                "2026-02-18T10:00:00.000Z",
                isSidechain=True,
                agentId="zz9",
            )
        ],
    )
    (root / "-home-u-app" / "notes.txt").write_text("not a transcript")
    (root / "messages.json").write_text(
        json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    )

    reports = engine.import_path(root)

    assert sorted(r.session_id for r in reports) == sorted(
        [SESSION, CC, f"{CC}:agent-zz9", "messages"]
    )
    assert engine.store.message_count() == 4 + 6 + 1 + 2
    assert_consistent(engine)


def test_a_directory_with_claude_code_sidecar_files_still_imports_its_transcripts(
    engine: Engine, tmp_path: Path
) -> None:
    folder = tmp_path / "-home-u-app" / CC / "subagents"
    folder.mkdir(parents=True)
    (folder / "agent-zz9.meta.json").write_text(
        json.dumps({"agentType": "general-purpose", "spawnDepth": 1, "model": "claude-opus-4-6"})
    )
    claude_code_session(tmp_path / "-home-u-app" / f"{CC}.jsonl")
    (tmp_path / "-home-u-app" / "sessions-index.json").write_text(
        json.dumps({"version": 1, "entries": []}, indent=2)
    )

    engine.import_path(tmp_path)

    assert [m.external_id for m in stored(engine, CC)] == ["u-1", "a-1", "a-2", "a-3", "u-2", "a-4"]
    assert_consistent(engine)


# --- plain message lists -------------------------------------------------------------------

MIXED = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "What is in settings.py?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "settings.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "PORT = 8043"},
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "And the cache?"}],
    },
    {"type": "function_call", "call_id": "fc_2", "name": "grep", "arguments": '{"q": "CACHE"}'},
    {"type": "function_call_output", "call_id": "fc_2", "output": "CACHE_URL = redis://..."},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking the tests too."},
            {
                "type": "tool_use",
                "id": "toolu_9",
                "name": "bash",
                "input": {"command": "pytest -q"},
            },
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "42 passed"}],
    },
    {"role": "assistant", "content": "Port 8043, Redis cache, tests pass — ünïcødé ✓"},
]


def test_messages_jsonl_of_mixed_shapes_imports_each_line_and_round_trips(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "mixed.jsonl", MIXED)
    [report] = engine.bootstrap(path)

    msgs = stored(engine, "mixed")
    assert report.format == "messages"
    assert report.imported == len(MIXED)
    assert [m.source_format for m in msgs] == [
        "openai_chat",
        "openai_chat",
        "openai_chat",
        "openai_chat",
        "openai_responses",
        "openai_responses",
        "openai_responses",
        "anthropic",
        "anthropic",
        "openai_chat",
    ]
    assert [m.to_source() for m in msgs] == MIXED
    assert msgs[2].parts[0].tool_call_id == msgs[3].parts[0].tool_call_id == "call_1"

    [again] = engine.bootstrap(path)
    assert again.imported == 0
    assert engine.store.message_count() == len(MIXED)
    assert_consistent(engine)


def test_messages_json_array_file_imports_and_reimports_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(MIXED, ensure_ascii=False, indent=2), encoding="utf-8")

    [report] = engine.bootstrap(path)
    assert report.imported == len(MIXED)
    assert [m.to_source() for m in stored(engine, "chat")] == MIXED

    [again] = engine.bootstrap(path)
    assert again.imported == 0
    assert engine.store.message_count() == len(MIXED)
    assert_consistent(engine)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 64, 1 << 20])
def test_json_array_streaming_gives_the_same_elements_at_any_chunk_size(chunk_size: int) -> None:
    data = [*MIXED, {"role": "user", "content": "multi-byte: é ü 日本語 🚀 " * 20}, [1, 2], "x"]
    raw = json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8")
    assert len(raw) > 64

    lines = list(iter_json_array(io.BytesIO(raw), chunk_size=chunk_size))

    assert [line.error for line in lines] == [None] * len(data)
    assert [line.value for line in lines] == data
    assert [line.line_no for line in lines] == list(range(1, len(data) + 1))
    # Each element's byte span holds exactly that element's JSON text.
    for line in lines:
        assert json.loads(raw[line.start : line.end]) == line.value


def test_json_array_streaming_reports_a_broken_element_after_the_good_ones() -> None:
    raw = (
        b'[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": oops}]'
    )
    lines = list(iter_json_array(io.BytesIO(raw), chunk_size=8))
    assert [line.value for line in lines[:2]] == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    assert lines[2].line_no == 3
    assert lines[2].error is not None


def test_large_json_array_read_back_from_disk_keeps_non_ascii_text(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files above CACHE_BYTES are read twice: pass two seeks to each element's byte span.
    monkeypatch.setattr(reconcile, "CACHE_BYTES", 0)
    data = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Grüße Nr. {i} — 東京 ✓"}
        for i in range(30)
    ]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    [report] = engine.bootstrap(path)

    assert report.problems == []
    assert [m.to_source() for m in stored(engine, "big")] == data
    assert_consistent(engine)


# --- malformed lines -----------------------------------------------------------------------


def test_a_bad_json_line_is_reported_with_its_line_number_and_the_rest_is_imported(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "s.jsonl"
    good = [
        oc_header(),
        oc_user("b0000001", None, "one"),
        oc_assistant("b0000002", "b0000001", "two"),
    ]
    write_jsonl(path, good)
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"type":"message","id":"broken","parentId":"b0000002",\n')  # line 4
    write_jsonl(
        path,
        [oc_user("b0000003", "b0000002", "three"), oc_assistant("b0000004", "b0000003", "four")],
        mode="a",
    )

    [report] = engine.bootstrap(path)

    [problem] = report.problems
    assert problem.line == 4
    assert problem.path == str(path.resolve())
    assert "JSON" in problem.reason
    assert [m.content for m in stored(engine, SESSION)] == ["one", "two", "three", "four"]
    assert_consistent(engine)


def test_a_line_of_valid_json_with_an_unknown_message_shape_is_reported(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "msgs.jsonl",
        [
            {"role": "user", "content": "hello"},
            {"speaker": "bob", "says": "hi"},
            {"role": "assistant", "content": "hi there"},
        ],
    )
    [report] = engine.bootstrap(path)

    [problem] = report.problems
    assert problem.line == 2
    assert "shape" in problem.reason
    assert [m.content for m in stored(engine, "msgs")] == ["hello", "hi there"]
    assert_consistent(engine)


def test_an_openclaw_message_entry_without_a_message_object_is_reported(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "s.jsonl",
        [
            oc_header(),
            oc_user("c0000001", None, "one"),
            {
                "type": "message",
                "id": "c0000002",
                "parentId": "c0000001",
                "timestamp": "2026-04-08T01:05:00.000Z",
                "message": "oops",
            },
            oc_assistant("c0000003", "c0000001", "three"),
        ],
    )
    [report] = engine.bootstrap(path)
    assert [p.line for p in report.problems] == [3]
    assert [m.content for m in stored(engine, SESSION)] == ["one", "three"]
    assert_consistent(engine)


def test_cli_import_exits_3_and_names_the_bad_line_on_stderr(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "msgs.jsonl", [{"role": "user", "content": "a"}])
    with path.open("a") as handle:
        handle.write("{not json\n")
    write_jsonl(path, [{"role": "assistant", "content": "b"}], mode="a")
    db = tmp_path / "cli.db"

    result = CliRunner().invoke(cli, ["--db", str(db), "import", str(path)])

    assert result.exit_code == 3, result.output
    assert f"{path.resolve()}:2" in result.stderr
    with Engine.open(db) as eng:
        assert [m.content for m in eng.messages("msgs")] == ["a", "b"]


def test_lines_of_another_format_inside_a_transcript_are_reported_not_skipped(
    tmp_path: Path,
) -> None:
    codex_line = {
        "type": "response_item",
        "timestamp": "2026-01-01T00:00:02Z",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "pasted from a Codex rollout"}],
        },
    }
    path = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            cc_user(CC, "u1", None, "hello from Claude Code", "2026-01-01T00:00:00Z"),
            {"role": "user", "content": "a chat message pasted in"},
            codex_line,
            cc_user(CC, "u2", "u1", "still Claude Code", "2026-01-01T00:00:03Z"),
        ],
    )
    db = tmp_path / "cli.db"

    result = CliRunner().invoke(cli, ["--db", str(db), "import", str(path)])

    assert result.exit_code == 3, result.output
    assert f"{path.resolve()}:2: a messages line inside a claude_code transcript" in result.stderr
    assert f"{path.resolve()}:3: a codex line inside a claude_code transcript" in result.stderr
    assert "--format codex" in result.stderr
    with Engine.open(db) as eng:
        assert [m.content for m in eng.messages(CC)] == [
            "hello from Claude Code",
            "still Claude Code",
        ]


def test_cli_import_exits_0_on_a_clean_file_and_says_what_it_imported(tmp_path: Path) -> None:
    path = openclaw_session(tmp_path / "s.jsonl")
    db = tmp_path / "cli.db"

    result = CliRunner().invoke(cli, ["--db", str(db), "import", str(path)])

    assert result.exit_code == 0, result.output + result.stderr
    assert "4 imported" in result.stdout
    assert result.stderr == ""
    again = CliRunner().invoke(cli, ["--db", str(db), "import", str(path)])
    assert again.exit_code == 0
    assert "0 imported" in again.stdout


def test_a_half_written_last_line_is_not_an_error_and_is_imported_once_complete(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "s.jsonl"
    write_jsonl(path, [oc_header(), oc_user("d0000001", None, "one")])
    last = json.dumps(oc_assistant("d0000002", "d0000001", "two"))
    with path.open("a") as handle:
        handle.write(last[:25])  # the host is half-way through writing line 3

    [first] = engine.bootstrap(path)
    assert first.problems == []
    assert [m.content for m in stored(engine, SESSION)] == ["one"]

    with path.open("a") as handle:
        handle.write(last[25:] + "\n")
    [second] = engine.bootstrap(path)
    assert second.problems == []
    assert second.imported == 1
    assert [m.content for m in stored(engine, SESSION)] == ["one", "two"]
    assert_consistent(engine)


def test_line_numbers_stay_right_after_a_final_line_that_lacked_its_newline(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "msgs.jsonl"
    path.write_text('{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}')
    engine.bootstrap(path)  # line 2 parses, so it is imported even without its newline

    with path.open("a") as handle:
        handle.write(
            '\n{"role": "user", "content": "c"}\nnot json\n{"role": "user", "content": "d"}\n'
        )
    [report] = engine.bootstrap(path)

    assert [p.line for p in report.problems] == [4]
    assert [m.content for m in stored(engine, "msgs")] == ["a", "b", "c", "d"]
    assert_consistent(engine)


# --- format detection ----------------------------------------------------------------------


def test_an_empty_file_is_a_clear_import_problem(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(ImportProblem, match="empty"):
        engine.bootstrap(path)


def test_a_file_whose_first_line_is_not_json_is_a_clear_import_problem(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text("\n# my notes\n{}\n")
    # The junk line does not decide; the first JSON line ({}) is no known shape: say so.
    with pytest.raises(ImportProblem, match="pass --format"):
        engine.bootstrap(path)
    assert engine.store.message_count() == 0
    path.write_text("\n# my notes\n# no JSON at all\n")
    with pytest.raises(ImportProblem, match="no line after it is JSON either") as info:
        engine.bootstrap(path)
    assert info.value.line == 2


def test_an_unrecognisable_first_object_asks_for_format(engine: Engine, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "odd.jsonl", [{"speaker": "bob", "says": "hi"}])
    with pytest.raises(ImportProblem, match="--format"):
        engine.bootstrap(path)


def test_format_option_forces_a_format_the_first_line_does_not_reveal(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "odd.jsonl",
        [
            {"speaker": "bob", "says": "hi"},
            {"role": "user", "content": "real question"},
            {"role": "assistant", "content": "real answer"},
        ],
    )
    [report] = engine.bootstrap(path, format="messages")
    assert report.format == "messages"
    assert [p.line for p in report.problems] == [1]
    assert [m.content for m in stored(engine, "odd")] == ["real question", "real answer"]
    assert_consistent(engine)


def test_format_option_forces_a_format_even_when_the_first_line_is_broken(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text('{"role": "user", "con\n')
    write_jsonl(
        path, [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], mode="a"
    )

    [report] = engine.bootstrap(path, format="messages")

    assert [p.line for p in report.problems] == [1]
    assert [m.content for m in stored(engine, "chat")] == ["q", "a"]
    assert_consistent(engine)


def test_cli_format_option_overrides_detection(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "odd.jsonl",
        [
            {"speaker": "bob", "says": "hi"},
            {"role": "user", "content": "real question"},
        ],
    )
    db = tmp_path / "cli.db"

    detected = CliRunner().invoke(cli, ["--db", str(db), "import", str(path)])
    assert detected.exit_code == 3
    assert "--format" in detected.output

    forced = CliRunner().invoke(cli, ["--db", str(db), "import", "--format", "messages", str(path)])
    assert forced.exit_code == 3
    assert f"{path.resolve()}:1" in forced.stderr
    with Engine.open(db) as eng:
        assert [m.content for m in eng.messages("odd")] == ["real question"]


def test_a_broken_transcript_in_a_directory_does_not_stop_the_others(
    engine: Engine, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "many"
    folder.mkdir()
    (folder / "z-empty.jsonl").write_text("")
    claude_code_session(folder / f"{CC}.jsonl")
    reports = engine.import_path(folder)
    assert [r.mode for r in reports] == ["full", "failed"]
    assert "empty" in reports[1].problems[0].reason
    assert len(stored(engine, CC)) == 6
    res = run_cli("--db", str(tmp_path / "cli.db"), "import", str(folder))
    assert res.code == 3
    assert "z-empty.jsonl" in res.err


def test_entry_ids_with_lone_surrogates_import_once(engine: Engine, tmp_path: Path) -> None:
    lines = [
        {"type": "session", "version": 3, "id": "sur", "timestamp": "2026-01-01T00:00:00Z"},
        {
            "type": "message",
            "id": "a\ud800",
            "parentId": None,
            "timestamp": "2026-01-01T00:00:01Z",
            "message": {"role": "user", "content": "first"},
        },
        {
            "type": "message",
            "id": "a\ud801",
            "parentId": "a\ud800",
            "timestamp": "2026-01-01T00:00:02Z",
            "message": {"role": "user", "content": "second"},
        },
    ]
    path = tmp_path / "sur.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert engine.bootstrap(path)[0].imported == 2
    path.unlink()
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))  # rewritten: full re-read
    assert engine.bootstrap(path)[0].imported == 0
    assert [m.content for m in engine.messages("sur")] == ["first", "second"]


# --- Codex CLI rollouts ------------------------------------------------------------------------

CODEX_SESSION = "01a211dd-f8bf-7430-85a6-d837cc403ec3"


class Rollout:
    """Lines as Codex 0.169 writes them: ``{timestamp, ordinal, type, payload}``."""

    def __init__(self, session: str = CODEX_SESSION) -> None:
        self.lines: list[dict[str, Any]] = []
        self.line("session_meta", {"id": session, "session_id": session, "cwd": "/w"})

    def line(self, kind: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
        obj = {
            "timestamp": f"2026-11-25T08:41:{len(self.lines):02d}.000Z",
            "ordinal": len(self.lines),
            "type": kind,
            "payload": payload,
            **extra,
        }
        self.lines.append(obj)
        return obj

    def item(self, payload: dict[str, Any], kinds: list[str] | None = None, **meta: Any) -> None:
        if kinds is not None:
            payload = {
                **payload,
                "internal_chat_message_metadata_passthrough": {"content_item_kinds": kinds},
            }
        self.line("response_item", payload, metadata={"history_sequence": len(self.lines), **meta})

    def turn(self, said: str, reply: str, reply_id: str) -> None:
        self.line("event_msg", {"type": "task_started"})
        self.line("turn_context", {"cwd": "/w"})
        self.item(
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "hook ctx"}],
            },
            ["hooks.additional_context"],
        )
        user = [{"type": "input_text", "text": said}]
        self.item({"type": "message", "role": "user", "content": user}, ["user.text"])
        self.line(
            "event_msg",
            {"type": "item_completed", "item": {"type": "UserMessage", "content": user}},
        )
        self.item(
            {
                "type": "reasoning",
                "id": "rs_fixed",
                "summary": [{"type": "summary_text", "text": f"thinking about {said}"}],
            }
        )
        out = [{"type": "output_text", "text": reply, "annotations": []}]
        self.line(
            "event_msg",
            {"type": "item_completed", "item": {"type": "AgentMessage", "id": reply_id}},
        )
        self.item(
            {"type": "message", "role": "assistant", "id": reply_id, "content": out}, ["unknown"]
        )
        self.line("event_msg", {"type": "task_complete", "last_agent_message": reply})

    def write(self, path: Path) -> Path:
        return write_jsonl(path, self.lines)


def codex_rollout() -> Rollout:
    r = Rollout()
    r.item(
        {
            "type": "message",
            "role": "developer",
            "content": [
                {
                    "type": "input_text",
                    "text": "<permissions instructions>read-only</permissions instructions>",
                }
            ],
        },
        ["permissions.instructions"],
    )
    r.item(
        {
            "type": "message",
            "role": "user",
            "content": [
                {
                    "type": "input_text",
                    "text": "<environment_context><cwd>/w</cwd></environment_context>",
                }
            ],
        },
        ["environments.environment_context"],
    )
    r.turn("Port the parser to Rust", "Starting with the lexer.", "msg_fixed")
    r.turn("same text", "Reply to: same text", "msg_fixed")
    r.turn("same text", "Reply to: same text", "msg_fixed")
    r.item(
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "exec_command",
            "arguments": '{"cmd": "cargo test"}',
        }
    )
    r.item({"type": "function_call_output", "call_id": "call_1", "output": "test result: ok"})
    return r


def test_a_codex_rollout_imports_every_message_once_identical_turns_included(
    engine: Engine, tmp_path: Path
) -> None:
    rollout = codex_rollout()
    path = rollout.write(tmp_path / f"rollout-2026-11-25T08-41-29-{CODEX_SESSION}.jsonl")

    [report] = engine.bootstrap(path)

    assert (report.format, report.session_id) == ("codex", CODEX_SESSION)
    msgs = stored(engine, CODEX_SESSION)
    items = [line["payload"] for line in rollout.lines if line["type"] == "response_item"]
    assert [m.to_source() for m in msgs] == items  # each stored exactly, once
    said = [m.content for m in msgs if m.role == "user" and m.host_meta is None]
    assert said == ["Port the parser to Rust", "same text", "same text"]
    replies = [m.content for m in msgs if m.role == "assistant" and m.parts[0].type == "text"]
    assert replies.count("Reply to: same text") == 2  # the model server reused the id
    assert {m.host_meta for m in msgs if m.role == "system"} == {"system", "hook_output"}
    assert report.skipped["event_msg item_completed"] == 6
    # The tool call and its output are parts lossless reads.
    execution = engine.chat_context_query(conversation=CODEX_SESSION, kind="executions")
    assert [e["tool_name"] for e in execution.to_dict()["executions"]] == ["exec_command"]
    assert engine.resume(CODEX_SESSION, latest=True).goal[0] == "Port the parser to Rust"
    assert_consistent(engine)

    # Again: nothing twice. Grown: only the new lines are read.
    assert engine.bootstrap(path)[0].mode == "unchanged"
    rollout.turn("one more", "Done.", "msg_fixed")
    rollout.write(path)
    [grown] = engine.bootstrap(path)
    assert (grown.mode, grown.imported) == ("tail", 4)
    assert len(stored(engine, CODEX_SESSION)) == len(items) + 4


def test_a_codex_compaction_keeps_its_summary_as_the_hosts_record(
    engine: Engine, tmp_path: Path
) -> None:
    rollout = codex_rollout()
    summary = [{"type": "output_text", "text": "SUMMARY: parser half ported", "annotations": []}]
    rollout.item(
        {"type": "message", "role": "assistant", "id": "msg_s", "content": summary},
        ["unknown"],
        compaction_output=True,
    )
    rollout.line(
        "compacted",
        {"message": "Another language model started... SUMMARY", "replacement_history": []},
    )
    rollout.turn("after the compaction", "Continuing.", "msg_fixed")
    [report] = engine.bootstrap(rollout.write(tmp_path / "rollout.jsonl"))

    kinds = [(m.content[:8], m.host_meta) for m in stored(engine, CODEX_SESSION)]
    assert ("SUMMARY:", "host_summary") in kinds
    assert report.skipped["compacted (its summary is the compaction_output item)"] == 1
    assert engine.host_compaction_seq(CODEX_SESSION) is not None
    # An older rollout keeps its summary only in the compacted line: then that is stored.
    old = Rollout(session="old-session")
    old.turn("hi", "hello", "m1")
    old.line("compacted", {"message": "OLD-SUMMARY of the work"})
    engine.bootstrap(old.write(tmp_path / "old.jsonl"))
    [kept] = [m for m in stored(engine, "old-session") if "OLD-SUMMARY" in m.content]
    assert kept.host_meta == "host_summary"


def test_an_openclaw_trajectory_is_named_and_passed_over_never_filed_under_a_session(
    engine: Engine, tmp_path: Path
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    write_jsonl(folder / f"{SESSION}.jsonl", [oc_header(), oc_user("c0000001", None, "one")])
    base = {"traceSchema": "openclaw-trajectory", "schemaVersion": 1, "sessionId": SESSION}
    write_jsonl(
        folder / f"{SESSION}.trajectory.jsonl",
        [{**base, "type": "session.started", "seq": 1}, {**base, "type": "model.completed"}],
    )
    write_jsonl(
        folder / f"{SESSION}.checkpoint.0f0e.jsonl", [oc_header(), oc_user("c9", None, "x")]
    )
    (folder / "junk.jsonl").write_text('{"foo": 1}\n')
    (folder / "empty-session.jsonl").write_text(json.dumps(oc_header("empty")) + "\n")

    reports = engine.import_path(folder)

    by_name = {Path(r.path).name: r for r in reports}
    assert by_name[f"{SESSION}.trajectory.jsonl"].mode == "passed_over"
    assert "trajectory" in by_name[f"{SESSION}.trajectory.jsonl"].problems[0].reason
    assert by_name["junk.jsonl"].mode == "failed"
    assert by_name["empty-session.jsonl"].mode == "empty"
    copy = by_name[f"{SESSION}.checkpoint.0f0e.jsonl"]  # a host's copy of the session
    assert copy.mode == "passed_over" and "same entries" in copy.problems[0].reason
    assert [m.content for m in stored(engine, SESSION)] == ["one"]
    # Nothing was created for the files that held no conversation.
    assert [c.conversation.session_id for c in engine.conversations()] == [SESSION]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_line_with_a_non_json_number_is_reported_not_stored_as_null(
    tmp_path: Path, constant: str
) -> None:
    # Python's json.dumps writes these; they are not JSON, and storing them as null would
    # alter the message.
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"role": "user", "content": "before"}\n'
        f'{{"role": "user", "content": "scored", "score": {constant}}}\n'
        '{"role": "user", "content": "after"}\n'
    )
    with Engine.open(tmp_path / "s.db") as engine:
        (report,) = engine.import_path(path)
        assert [m.content for m in engine.messages(report.conversation_id)] == ["before", "after"]
    assert [(p.line, constant in p.reason) for p in report.problems] == [(2, True)]


def test_a_pipe_or_a_device_is_refused_for_what_it_is(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with Engine.open(tmp_path / "s.db") as engine:
        for path in (fifo, Path("/dev/zero")):
            with pytest.raises(LosslessError, match="not a regular file or a directory"):
                engine.import_path(path)


def test_a_json_array_with_a_byte_order_mark_imports_like_bom_jsonl(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    array = tmp_path / "a.json"
    array.write_bytes(
        bom + b'[{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]'
    )
    lines = tmp_path / "l.jsonl"
    lines.write_bytes(
        bom + b'{"role": "user", "content": "one"}\n{"role": "user", "content": "two"}\n'
    )
    with Engine.open(tmp_path / "s.db") as engine:
        for path in (array, lines):
            (report,) = engine.import_path(path)
            assert report.problems == []
            assert [m.content for m in engine.messages(report.conversation_id)] == ["one", "two"]


def test_one_junk_first_line_is_reported_and_the_rest_imported(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'JUNK\x00LINE\n{"role": "user", "content": "kept"}\n')
    with Engine.open(tmp_path / "s.db") as engine:
        (report,) = engine.import_path(path)
        assert [m.content for m in engine.messages(report.conversation_id)] == ["kept"]
    assert [p.line for p in report.problems] == [1]
    nothing = tmp_path / "n.jsonl"
    nothing.write_bytes(b"not json\nnor this\n")
    with Engine.open(tmp_path / "s.db") as engine:
        (failed,) = engine.import_path(nothing)
    assert failed.mode == "failed" and "--format" in failed.problems[0].reason


def test_a_file_whose_only_line_holds_nan_says_why_it_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "nan.jsonl"
    path.write_text('{"role": "user", "content": NaN}\n')
    with Engine.open(tmp_path / "s.db") as engine:
        (report,) = engine.import_path(path)
        assert engine.store.message_count() == 0
    [problem] = report.problems
    assert problem.line == 1 and "NaN is not JSON" in problem.reason
