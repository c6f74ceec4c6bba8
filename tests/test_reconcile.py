"""Bootstrap reconciliation: replay, append, truncation, rotation, crashes, anchors, branches.

The property under test everywhere: whatever happened to the transcript or the store,
bootstrapping brings the store up to date with the file's active branch and never stores a
message twice nor removes one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from lossless import Engine, doctor
from lossless.errors import StoreError
from lossless.ingest import reconcile
from lossless.sample import generate_session
from lossless.store.base import Store

SID = "5c1d2e3f-0000-4000-8000-00000000abcd"


# --- helpers -------------------------------------------------------------------------------


def dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def write_lines(path: Path, objs: Iterable[Any]) -> Path:
    path.write_text("".join(dump(o) for o in objs), encoding="utf-8")
    return path


def append_lines(path: Path, objs: Iterable[Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write("".join(dump(o) for o in objs))


def session_lines(turns: int, session_id: str = SID, fmt: str = "openclaw") -> list[dict[str, Any]]:
    """A generated session; fewer turns give a prefix of more turns (same seed)."""
    return list(generate_session(turns, format=fmt, session_id=session_id))


def message_ids(lines: Iterable[dict[str, Any]]) -> list[str]:
    return [o["id"] for o in lines if o.get("type") == "message"]


def stored_ids(engine: Engine, session_id: str = SID) -> list[str | None]:
    return [m.external_id for m in engine.messages(session_id)]


def assert_consistent(engine: Engine) -> None:
    """Doctor finds nothing, and no conversation holds an external id twice."""
    assert doctor.check(engine.store) == []
    dupes = engine.store.fetchall(
        "SELECT conversation_id, external_id, count(*) FROM messages"
        " WHERE external_id IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1"
    )
    assert dupes == []


def header(session_id: str = SID, ts: str = "2026-03-02T09:00:00Z") -> dict[str, Any]:
    return {"type": "session", "version": 3, "id": session_id, "timestamp": ts, "cwd": "/w"}


def msg(entry_id: str, parent: str | None, role: str, text: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": role,
        "content": [{"type": "text", "text": text}],
        "timestamp": 1772442000000,
    }
    if role == "assistant":
        message.update(
            api="anthropic-messages",
            provider="anthropic",
            model="claude-sonnet-4-5",
            stopReason="stop",
        )
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-03-02T09:00:05Z",
        "message": message,
    }


def chain(
    prefix: str, count: int, parent: str | None = None, start: int = 1
) -> list[dict[str, Any]]:
    """*count* alternating user/assistant entries, each the child of the previous one."""
    out = []
    for i in range(start, start + count):
        entry_id = f"{prefix}{i:07d}"
        out.append(msg(entry_id, parent, "user" if i % 2 else "assistant", f"{prefix} text {i}"))
        parent = entry_id
    return out


# --- replay and append ---------------------------------------------------------------------


def test_bootstrapping_the_same_file_twice_imports_nothing_the_second_time(
    engine: Engine, tmp_path: Path
) -> None:
    lines = session_lines(6)
    path = write_lines(tmp_path / "s.jsonl", lines)

    [first] = engine.bootstrap(path)
    count = engine.store.message_count()
    [second] = engine.bootstrap(path)

    assert first.imported == count == len(message_ids(lines))
    assert second.mode == "unchanged"
    assert second.imported == 0
    assert engine.store.message_count() == count
    assert_consistent(engine)


def test_appended_lines_are_read_as_a_tail_and_imported_exactly_once(
    engine: Engine, tmp_path: Path
) -> None:
    lines = session_lines(9)
    cut = len(session_lines(6))
    path = write_lines(tmp_path / "s.jsonl", lines[:cut])
    engine.bootstrap(path)
    before = engine.store.message_count()
    old_size = path.stat().st_size

    append_lines(path, lines[cut:])
    read_upto: list[int] = []
    [report] = engine.bootstrap(path, progress=lambda done, _total: read_upto.append(done))

    new = len(message_ids(lines[cut:]))
    assert report.mode == "tail"
    # Every byte position reported while reading lies in the appended part.
    assert read_upto
    assert min(read_upto) > old_size
    assert report.imported == new
    assert engine.store.message_count() == before + new
    assert stored_ids(engine) == message_ids(lines)
    [again] = engine.bootstrap(path)
    assert again.mode == "unchanged"
    assert_consistent(engine)


def test_a_tail_read_reports_a_bad_line_before_the_checkpoint_again_without_reading_it(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        dump(header())
        + "".join(dump(o) for o in chain("a", 3))
        + "{truncated garbage\n"
        + "".join(dump(o) for o in chain("a", 2, parent="a0000003", start=4)),
        encoding="utf-8",
    )
    [first] = engine.bootstrap(path)
    assert [p.line for p in first.problems] == [5]
    old_size = path.stat().st_size

    append_lines(path, chain("a", 2, parent="a0000005", start=6))
    with path.open("a") as handle:
        handle.write("not json either\n")  # line 10
    append_lines(path, chain("a", 1, parent="a0000007", start=8))
    read_upto: list[int] = []
    [second] = engine.bootstrap(path, progress=lambda done, _total: read_upto.append(done))

    assert second.mode == "tail"
    assert min(read_upto) > old_size  # line 5 was not read again, and is still named
    assert [(p.line, p.kind, p.known) for p in second.problems] == [
        (5, "malformed", True),
        (10, "malformed", False),
    ]
    assert second.imported == 3
    assert stored_ids(engine) == [f"a{i:07d}" for i in range(1, 9)]
    assert_consistent(engine)


def test_lines_written_to_the_transcript_but_never_stored_are_imported_on_bootstrap(
    engine: Engine, tmp_path: Path
) -> None:
    # The host stored each message live (with its entry id), then crashed after writing
    # more lines to the transcript but before handing them to lossless.
    lines = session_lines(6)
    entries = [o for o in lines if o["type"] == "message"]
    stored_live = 17
    for entry in entries[:stored_live]:
        engine.ingest(SID, entry["message"], format="openclaw", external_id=entry["id"])
    path = write_lines(tmp_path / "s.jsonl", lines)

    [report] = engine.bootstrap(path)

    assert report.imported == len(entries) - stored_live
    assert report.missing_before_anchor == 0
    assert stored_ids(engine) == [e["id"] for e in entries]
    assert [m.to_source() for m in engine.messages(SID)] == [e["message"] for e in entries]
    assert_consistent(engine)


# --- truncation, rotation, rewrites --------------------------------------------------------


def test_a_truncated_file_is_reread_in_full_without_duplicating_or_deleting(
    engine: Engine, tmp_path: Path
) -> None:
    entries = chain("t", 10)
    path = write_lines(tmp_path / "s.jsonl", [header(), *entries])
    engine.bootstrap(path)

    write_lines(path, [header(), *entries[:6]])
    [report] = engine.bootstrap(path)

    assert report.mode == "full"
    assert report.imported == 0
    assert stored_ids(engine) == [e["id"] for e in entries]

    # The shorter file then grows again from its new end.
    append_lines(path, chain("u", 2, parent="t0000006", start=7))
    [grown] = engine.bootstrap(path)
    assert grown.imported == 2
    assert stored_ids(engine)[-2:] == ["u0000007", "u0000008"]
    assert engine.store.message_count() == 12
    assert_consistent(engine)


def test_a_rotated_file_with_a_new_first_line_is_reconciled_in_full(
    engine: Engine, tmp_path: Path
) -> None:
    old = chain("r", 6)
    path = write_lines(tmp_path / "s.jsonl", [header(ts="2026-03-02T09:00:00Z"), *old])
    engine.bootstrap(path)

    # The host rotated the session into a successor file at the same path: a new header
    # line, the kept tail of the history, and new entries.
    new = chain("r", 3, parent="r0000006", start=7)
    write_lines(path, [header(ts="2026-03-02T11:00:00Z"), *old[4:], *new])
    [report] = engine.bootstrap(path)

    assert report.mode == "full"
    assert report.imported == 3
    assert stored_ids(engine) == [e["id"] for e in old + new]
    assert_consistent(engine)


def test_a_file_replaced_by_another_session_feeds_a_new_conversation_and_keeps_the_old(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_lines(tmp_path / "s.jsonl", [header(SID), *chain("o", 4)])
    engine.bootstrap(path)

    other = "99999999-0000-4000-8000-000000000000"
    write_lines(path, [header(other), *chain("n", 3)])
    [report] = engine.bootstrap(path)

    assert report.session_id == other
    assert report.imported == 3
    assert stored_ids(engine, SID) == [f"o{i:07d}" for i in range(1, 5)]
    assert stored_ids(engine, other) == [f"n{i:07d}" for i in range(1, 4)]
    assert_consistent(engine)


def test_a_rotated_claude_code_file_with_a_new_first_line_imports_only_new_entries(
    engine: Engine, tmp_path: Path
) -> None:
    lines = session_lines(3, session_id=SID, fmt="claude_code")
    path = write_lines(tmp_path / f"{SID}.jsonl", lines[:-4])
    engine.bootstrap(path)

    summary = {
        "type": "summary",
        "summary": "Inventory service work",
        "leafUuid": lines[-5]["uuid"],
    }
    write_lines(path, [summary, *lines])
    [report] = engine.bootstrap(path)

    assert report.mode == "full"
    assert report.imported == 4
    assert stored_ids(engine) == [o["uuid"] for o in lines]
    assert engine.conversation(SID).title == "Inventory service work"
    assert_consistent(engine)


def test_a_same_size_rewrite_of_the_last_line_is_noticed(engine: Engine, tmp_path: Path) -> None:
    entries = chain("s", 5)
    path = write_lines(tmp_path / "s.jsonl", [header(), *entries])
    engine.bootstrap(path)
    size = path.stat().st_size

    # The host rewrote its last entry in place: same length, different id and text.
    replacement = msg("S0000005", "s0000004", "user", "S text 5")
    write_lines(path, [header(), *entries[:4], replacement])
    assert path.stat().st_size == size
    [report] = engine.bootstrap(path)

    assert report.mode == "full"
    assert report.imported == 1
    assert stored_ids(engine) == [*(e["id"] for e in entries), "S0000005"]
    assert_consistent(engine)


# --- crashes inside lossless ---------------------------------------------------------------


def test_an_import_that_fails_part_way_is_completed_by_the_next_bootstrap(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = session_lines(4)
    path = write_lines(tmp_path / "s.jsonl", lines)
    monkeypatch.setattr(reconcile, "BATCH_MESSAGES", 5)
    real = Store.append_messages
    calls = {"n": 0}

    def failing(self: Store, conversation: Any, messages: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise StoreError("disk I/O error (simulated)")
        return real(self, conversation, messages)

    monkeypatch.setattr(type(engine.store), "append_messages", failing)
    with pytest.raises(StoreError):
        engine.bootstrap(path)
    assert engine.store.message_count() == 5  # the first batch was committed

    monkeypatch.setattr(type(engine.store), "append_messages", real)
    [report] = engine.bootstrap(path)

    expected = message_ids(lines)
    assert report.imported == len(expected) - 5
    assert engine.store.message_count() == len(expected)
    assert set(stored_ids(engine)) == set(expected)
    assert stored_ids(engine) == expected
    assert_consistent(engine)


def test_a_tail_import_that_fails_part_way_is_completed_by_the_next_bootstrap(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = session_lines(8)
    cut = len(session_lines(3))
    path = write_lines(tmp_path / "s.jsonl", lines[:cut])
    engine.bootstrap(path)
    append_lines(path, lines[cut:])
    monkeypatch.setattr(reconcile, "BATCH_MESSAGES", 4)
    real = Store.append_messages
    calls = {"n": 0}

    def failing(self: Store, conversation: Any, messages: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise StoreError("database is locked (simulated)")
        return real(self, conversation, messages)

    monkeypatch.setattr(type(engine.store), "append_messages", failing)
    with pytest.raises(StoreError):
        engine.bootstrap(path)
    monkeypatch.setattr(type(engine.store), "append_messages", real)
    engine.bootstrap(path)

    assert stored_ids(engine) == message_ids(lines)
    assert_consistent(engine)


# --- anchors -------------------------------------------------------------------------------


@pytest.mark.parametrize("stored_live", [1, 2, 5, 6, 7, 12, 20, 33, 50])
def test_a_store_fed_live_without_ids_is_continued_after_its_last_message(
    engine: Engine, tmp_path: Path, stored_live: int
) -> None:
    # The sample session repeats short exchanges ("ok" / "Continuing with the next item.",
    # identical tool outputs), so only the right alignment imports the right messages.
    lines = session_lines(10)
    entries = [o for o in lines if o["type"] == "message"]
    for entry in entries[:stored_live]:
        engine.ingest(SID, entry["message"])  # no external id: the host fed it live
    path = write_lines(tmp_path / "s.jsonl", lines)

    [report] = engine.bootstrap(path)

    assert report.imported == len(entries) - stored_live
    assert report.missing_before_anchor == 0
    msgs = engine.messages(SID)
    assert [m.to_source() for m in msgs] == [e["message"] for e in entries]
    assert [m.external_id for m in msgs[stored_live:]] == [e["id"] for e in entries[stored_live:]]
    [again] = engine.bootstrap(path)
    assert again.imported == 0
    assert_consistent(engine)


@pytest.mark.parametrize("bad_at", [0, 1, 2, 3])
def test_a_live_fed_messages_list_with_a_bad_line_still_finds_its_anchor(
    engine: Engine, tmp_path: Path, bad_at: int
) -> None:
    chat = [
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "second"},
        {"role": "user", "content": "third"},
    ]
    for message in chat[:4]:
        engine.ingest("chat", message)
    lines: list[Any] = [*chat]
    lines.insert(bad_at, {"speaker": "nobody"})
    path = write_lines(tmp_path / "chat.jsonl", lines)

    [report] = engine.bootstrap(path, format="messages")

    assert [p.line for p in report.problems] == [bad_at + 1]
    assert report.missing_before_anchor == 0
    assert [m.content for m in engine.messages("chat")] == [c["content"] for c in chat]
    assert_consistent(engine)


# --- branches ------------------------------------------------------------------------------


def test_a_branch_switch_appended_after_a_checkpoint_imports_the_new_branch_once(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_lines(tmp_path / "s.jsonl", [header(), *chain("b", 4)])
    engine.bootstrap(path)

    # The user went back to b0000002 and continued from there.
    append_lines(path, chain("c", 2, parent="b0000002", start=3))
    [report] = engine.bootstrap(path)

    assert report.imported == 2
    assert stored_ids(engine) == [
        "b0000001",
        "b0000002",
        "b0000003",
        "b0000004",
        "c0000003",
        "c0000004",
    ]
    [again] = engine.bootstrap(path)
    assert again.imported == 0
    assert_consistent(engine)


def test_switching_back_to_an_abandoned_branch_imports_its_messages_once(
    engine: Engine, tmp_path: Path
) -> None:
    old_branch = chain("x", 2, parent="m0000002", start=3)
    new_branch = chain("y", 2, parent="m0000002", start=3)
    path = write_lines(tmp_path / "s.jsonl", [header(), *chain("m", 2), *old_branch, *new_branch])
    [first] = engine.bootstrap(path)
    assert first.off_branch == 2
    assert stored_ids(engine) == ["m0000001", "m0000002", "y0000003", "y0000004"]

    # Back on the first branch: the next entry continues x0000004.
    append_lines(path, [msg("x0000005", "x0000004", "user", "back on x")])
    [report] = engine.bootstrap(path)

    assert report.imported == 3
    assert stored_ids(engine) == [
        "m0000001",
        "m0000002",
        "y0000003",
        "y0000004",
        "x0000003",
        "x0000004",
        "x0000005",
    ]
    assert_consistent(engine)


def test_a_branch_appended_from_a_settings_entry_is_imported(
    engine: Engine, tmp_path: Path
) -> None:
    settings = {
        "type": "model_change",
        "id": "mc000001",
        "parentId": None,
        "timestamp": "2026-03-02T09:00:01Z",
        "provider": "anthropic",
        "modelId": "x",
    }
    entries = chain("k", 4, parent="mc000001")
    path = write_lines(tmp_path / "s.jsonl", [header(), settings, *entries])
    engine.bootstrap(path)

    # /tree back to the very start: a new first question hangs from the settings entry.
    append_lines(path, chain("q", 2, parent="mc000001"))
    [report] = engine.bootstrap(path)

    assert report.imported == 2
    assert stored_ids(engine) == [*(e["id"] for e in entries), "q0000001", "q0000002"]
    assert_consistent(engine)


# --- Claude Code specifics -----------------------------------------------------------------


def cc(uuid: str, parent: str | None, kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message = {
            "id": extra.pop("msg_id", f"msg_{uuid}"),
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-6",
            "content": content,
        }
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/w",
        "sessionId": SID,
        "version": "2.1.72",
        "gitBranch": "main",
        "type": kind,
        "message": message,
        "uuid": uuid,
        "timestamp": "2026-08-04T18:00:00.000Z",
        **extra,
    }


def test_a_claude_code_compaction_appended_after_a_checkpoint_is_crossed(
    engine: Engine, tmp_path: Path
) -> None:
    before = [
        cc("u-1", None, "user", "Add pagination"),
        cc("a-1", "u-1", "assistant", [{"type": "text", "text": "Done."}]),
    ]
    path = write_lines(tmp_path / f"{SID}.jsonl", before)
    engine.bootstrap(path)

    boundary = {
        **cc("cb-1", None, "system", None),
        "logicalParentUuid": "a-1",
        "subtype": "compact_boundary",
        "content": "Conversation compacted",
        "compactMetadata": {"trigger": "manual", "preTokens": 120000},
    }
    del boundary["message"]
    summary = {
        **cc(
            "cs-1",
            "cb-1",
            "user",
            "This session is being continued from a previous conversation. Summary: SUMMARY-TEXT",
        ),
        "isCompactSummary": True,
        "isVisibleInTranscriptOnly": True,
    }
    after = [
        cc("u-2", "cs-1", "user", "Now add tests"),
        cc("a-2", "u-2", "assistant", [{"type": "text", "text": "Added."}]),
    ]
    append_lines(path, [boundary, summary, *after])
    [report] = engine.bootstrap(path)

    assert report.mode == "tail"
    assert report.imported == 4
    assert stored_ids(engine) == ["u-1", "a-1", "cb-1", "cs-1", "u-2", "a-2"]
    [summary] = [m for m in engine.messages(SID) if "SUMMARY-TEXT" in m.content]
    assert summary.host_meta == "host_summary"
    assert len(engine.conversation(SID).metadata["host_compactions"]) == 1

    # Reading everything again records the host compaction once, not twice.
    with engine.store.transaction() as conn:
        conn.execute("DELETE FROM transcript_checkpoints")
    [full] = engine.bootstrap(path)
    assert full.imported == 0
    assert len(engine.conversation(SID).metadata["host_compactions"]) == 1
    assert_consistent(engine)


PARALLEL = [
    cc("u-1", None, "user", "Write 2 files in parallel"),
    cc(
        "AAA",
        "u-1",
        "assistant",
        [{"type": "thinking", "thinking": "both", "signature": "s"}],
        msg_id="msg_P",
    ),
    cc(
        "BBB",
        "AAA",
        "assistant",
        [{"type": "tool_use", "id": "toolu_a", "name": "Write", "input": {"file_path": "a.md"}}],
        msg_id="msg_P",
    ),
    cc(
        "CCC",
        "BBB",
        "assistant",
        [{"type": "tool_use", "id": "toolu_b", "name": "Write", "input": {"file_path": "b.md"}}],
        msg_id="msg_P",
    ),
    cc(
        "DDD",
        "BBB",
        "user",
        [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "wrote a.md"}],
    ),
    cc(
        "EEE",
        "CCC",
        "user",
        [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "wrote b.md"}],
    ),
    cc("FFF", "EEE", "assistant", [{"type": "text", "text": "Created both files."}]),
    cc("u-2", "FFF", "user", "thanks"),
]


@pytest.mark.parametrize("cut", range(1, len(PARALLEL)))
def test_parallel_tool_calls_bootstrapped_mid_write_lose_nothing(
    engine: Engine, tmp_path: Path, cut: int
) -> None:
    path = write_lines(tmp_path / f"{SID}.jsonl", PARALLEL[:cut])
    engine.bootstrap(path)
    append_lines(path, PARALLEL[cut:])
    [report] = engine.bootstrap(path)

    assert report.missing_before_anchor == 0
    assert stored_ids(engine) == [o["uuid"] for o in PARALLEL]
    assert_consistent(engine)


def test_parallel_tool_calls_bootstrapped_after_every_line_lose_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / f"{SID}.jsonl"
    path.write_text("")
    for line in PARALLEL:
        append_lines(path, [line])
        engine.bootstrap(path)
    assert stored_ids(engine) == [o["uuid"] for o in PARALLEL]
    assert_consistent(engine)


def test_sidechain_entries_appended_later_reach_the_sidechain_conversation(
    engine: Engine, tmp_path: Path
) -> None:
    side = {"isSidechain": True, "agentId": "ab12"}
    path = write_lines(
        tmp_path / f"{SID}.jsonl",
        [
            cc("u-1", None, "user", "Look for the cache config"),
            {**cc("s-1", None, "user", "search CACHE_URL"), **side},
        ],
    )
    engine.bootstrap(path)

    append_lines(
        path,
        [
            {**cc("s-2", "s-1", "assistant", [{"type": "text", "text": "in settings.py"}]), **side},
            cc("a-1", "u-1", "assistant", [{"type": "text", "text": "It is in settings.py."}]),
        ],
    )
    reports = engine.bootstrap(path)

    assert [r.imported for r in reports] == [1, 1]
    assert stored_ids(engine) == ["u-1", "a-1"]
    assert stored_ids(engine, f"{SID}:sidechain") == ["s-1", "s-2"]
    assert_consistent(engine)


# --- JSON arrays and indexes ---------------------------------------------------------------


def test_a_json_array_that_grew_imports_only_its_new_elements(
    engine: Engine, tmp_path: Path
) -> None:
    chat = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(6)
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat[:4]))
    engine.bootstrap(path)

    path.write_text(json.dumps(chat, indent=2))
    [report] = engine.bootstrap(path)

    assert report.imported == 2
    assert [m.content for m in engine.messages("chat")] == [c["content"] for c in chat]
    assert_consistent(engine)


def test_a_large_import_leaves_no_message_waiting_for_the_trigram_index(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_lines(tmp_path / "s.jsonl", session_lines(15))
    [report] = engine.bootstrap(path)
    assert report.imported >= 100
    assert engine.store.pending_index_rows() == 0
    assert_consistent(engine)
