"""Claude Code hooks: real transcripts (generated in Claude Code's format, grown between hook
calls), the hook protocol over stdin/stdout, and the settings install."""

from __future__ import annotations

import io
import itertools
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.assemble import UNTRUSTED_NOTE
from lossless.integrations.claude_code import CLAUDE_CODE
from lossless.integrations.hooks import (
    DEFAULT_MAX_CHARS,
    EVENTS,
    HookInput,
    default_log_path,
    reinjection,
    run_hook,
    session_start_output,
)
from lossless.resume import HEADER as RESUME_HEADER
from lossless.sample import generate_session

#: Claude Code's limit for a hook's added context, in characters (its documentation).
CONTEXT_LIMIT = 10_000

SESSION = "5b0c6a1e-2f4d-4c1a-9e8b-0d3f7a6c2b91"
LOSSLESS = Path(sys.executable).parent / "lossless"

Hook = Callable[..., Any]


@pytest.fixture(autouse=True)
def _logs_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook log (user log dir) and ~/.claude live in the test's directory."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def lines_of(turns: int, session: str = SESSION) -> list[str]:
    """A generated session as Claude Code transcript lines (every line a user/assistant entry)."""
    return [
        json.dumps(o) for o in generate_session(turns, format="claude_code", session_id=session)
    ]


def turn_start(lines: list[str], near: int) -> int:
    """The index of the first user request at or after line *near* (a turn boundary)."""
    for i in range(near, len(lines)):
        entry = json.loads(lines[i])
        if entry["type"] == "user" and isinstance(entry["message"]["content"], str):
            return i
    raise AssertionError("no user request after that line")


def write(path: Path, lines: list[str], mode: str = "w") -> Path:
    with path.open(mode, encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in lines)
    return path


def host_compaction(last_uuid: str, n: int = 1) -> list[str]:
    """The two lines Claude Code appends when it compacts: the boundary and its summary."""
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/work/inventory",
        "sessionId": SESSION,
        "version": "2.1.37",
        "gitBranch": "main",
    }
    boundary = {
        **base,
        "parentUuid": None,
        "logicalParentUuid": last_uuid,
        "type": "system",
        "subtype": "compact_boundary",
        "content": "Conversation compacted",
        "isMeta": False,
        "level": "info",
        "compactMetadata": {"trigger": "auto", "preTokens": 155_000},
        "uuid": f"boundary-{n}",
        "timestamp": "2026-03-03T09:00:00.000Z",
    }
    summary = {
        **base,
        "parentUuid": f"boundary-{n}",
        "type": "user",
        "message": {
            "role": "user",
            "content": "This session is being continued from a previous conversation that ran"
            " out of context. The conversation is summarized below: HOST-SUMMARY",
        },
        "isVisibleInTranscriptOnly": True,
        "isCompactSummary": True,
        "uuid": f"compact-summary-{n}",
        "timestamp": "2026-03-03T09:00:01.000Z",
    }
    return [json.dumps(boundary), json.dumps(summary)]


def last_uuid(path: Path) -> str:
    return str(json.loads(path.read_text().splitlines()[-1])["uuid"])


def payload(event: str, transcript: Path | None, **fields: Any) -> dict[str, Any]:
    """What Claude Code writes to a command hook's stdin."""
    data: dict[str, Any] = {
        "session_id": SESSION,
        "cwd": "/work/inventory",
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }
    if transcript is not None:
        data["transcript_path"] = str(transcript)
    return data


@pytest.fixture
def hook(run_cli, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hook:  # type: ignore[no-untyped-def]
    """Call ``lossless --db DB hook claude-code EVENT`` in-process with *data* on stdin."""

    def call(event: str, data: dict[str, Any] | str, *args: str, db: Path = db_path) -> Any:
        text = data if isinstance(data, str) else json.dumps(data)
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
        return run_cli("--db", str(db), "hook", "claude-code", event, *args)

    return call


def log_text() -> str:
    path = default_log_path(CLAUDE_CODE)
    return path.read_text(encoding="utf-8") if path.exists() else ""


@pytest.fixture
def store(db_path: Path) -> Iterator[Callable[[], Engine]]:
    """Open the hooks' database afresh (each call a new engine, closed at the end)."""
    opened: list[Engine] = []

    def open_() -> Engine:
        engine = Engine.open(db_path, config=Config())
        opened.append(engine)
        return engine

    yield open_
    for engine in opened:
        engine.close()


def message_count(store: Callable[[], Engine]) -> int:
    return store().store.message_count()


def context_of(out: str) -> str:
    data = json.loads(out)
    assert data["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    return str(data["hookSpecificOutput"]["additionalContext"])


# --- PreCompact / SessionEnd: the transcript goes in, once ------------------------------------


def test_precompact_imports_the_transcript_and_compacts_it_with_a_full_sweep(
    hook: Hook, store: Callable[[], Engine], tmp_path: Path
) -> None:
    lines = lines_of(200)
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines)

    res = hook("PreCompact", payload("PreCompact", transcript, trigger="auto"))

    assert (res.code, res.out) == (0, "")
    engine = store()
    conv = engine.conversation(SESSION)
    assert engine.store.message_count(conv.conversation_id) == len(lines)
    summaries = [i for i in engine.context(conv.conversation_id) if i.summary_id]
    assert summaries, "a full sweep leaves summaries in the context"
    # A full sweep leaves nothing a leaf pass could still take: a second sweep does nothing.
    assert not engine.compact(conv.conversation_id, mode="full").passes
    assert f"PreCompact/auto session={SESSION}" in log_text()
    assert f"import=full imported={len(lines)}" in log_text()


def test_hooks_import_only_what_the_transcript_gained_between_calls(
    hook: Hook, store: Callable[[], Engine], tmp_path: Path
) -> None:
    lines = lines_of(120)
    cut = turn_start(lines, len(lines) // 2)
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines[:cut])

    assert hook("PreCompact", payload("PreCompact", transcript, trigger="manual")).code == 0
    assert message_count(store) == cut
    assert hook("PreCompact", payload("PreCompact", transcript, trigger="manual")).code == 0
    assert message_count(store) == cut
    assert "import=unchanged imported=0" in log_text()

    write(transcript, lines[cut:], mode="a")  # the session went on
    res = hook("SessionEnd", payload("SessionEnd", transcript, reason="prompt_input_exit"))
    assert (res.code, res.out) == (0, "")
    assert message_count(store) == len(lines)
    assert f"import=tail imported={len(lines) - cut} already_stored=0" in log_text()

    assert hook("SessionEnd", payload("SessionEnd", transcript, reason="other")).code == 0
    assert message_count(store) == len(lines)
    engine = store()
    stored = engine.messages(SESSION)
    assert len({m.external_id for m in stored}) == len(lines) == len(stored)


def test_the_hosts_compaction_is_stored_as_its_own_record_never_as_the_users_words(
    hook: Hook, store: Callable[[], Engine], tmp_path: Path
) -> None:
    lines = lines_of(40)
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines)
    hook("PreCompact", payload("PreCompact", transcript, trigger="auto"))
    write(transcript, host_compaction(last_uuid(transcript)), mode="a")

    hook("SessionStart", payload("SessionStart", transcript, source="compact"))

    engine = store()
    assert engine.store.message_count() == len(lines) + 2
    boundary, summary = engine.messages(SESSION)[-2:]
    assert (boundary.host_meta, summary.host_meta) == ("compact_boundary", "host_summary")
    assert "HOST-SUMMARY" in summary.content
    [recorded] = engine.conversation(SESSION).metadata["host_compactions"]
    assert recorded["summary_uuid"] == "compact-summary-1"
    resume = engine.resume(SESSION, latest=True)
    assert "HOST-SUMMARY" not in resume.text  # not the goal, not the current task


# --- SessionStart: the context goes back ------------------------------------------------------


def test_session_start_after_compact_reinjects_summaries_and_the_resume_summary(
    hook: Hook, store: Callable[[], Engine], tmp_path: Path
) -> None:
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(200))
    hook("PreCompact", payload("PreCompact", transcript, trigger="auto"))
    write(transcript, host_compaction(last_uuid(transcript)), mode="a")

    res = hook("SessionStart", payload("SessionStart", transcript, source="compact"))

    assert res.code == 0
    assert len(res.out.rstrip("\n")) <= DEFAULT_MAX_CHARS
    text = context_of(res.out)
    engine = store()
    conv = engine.conversation(SESSION)
    newest = [i.summary_id for i in engine.context(conv.conversation_id) if i.summary_id][-1]
    assert f'<summary id="{newest}"' in text
    assert UNTRUSTED_NOTE in text
    assert RESUME_HEADER in text
    assert "Current task: Turn 198" in text  # the resume summary covers the whole session
    assert f'conversation="{SESSION}"' in text
    assert text.index(f'<summary id="{newest}"') < text.index(RESUME_HEADER)
    assert "reinjected=" in log_text()


def test_session_start_output_stays_within_a_smaller_max_chars(hook: Hook, tmp_path: Path) -> None:
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(200))
    hook("PreCompact", payload("PreCompact", transcript, trigger="auto"))

    small = hook(
        "SessionStart", payload("SessionStart", transcript, source="compact"), "--max-chars", "3000"
    )
    assert len(small.out.rstrip("\n")) <= 3000
    assert RESUME_HEADER in context_of(small.out)

    tiny = hook(
        "SessionStart", payload("SessionStart", transcript, source="compact"), "--max-chars", "600"
    )
    assert tiny.code == 0
    assert len(tiny.out.rstrip("\n")) <= 600
    assert context_of(tiny.out).startswith("[lossless]")


def test_a_summary_too_long_for_the_room_left_is_cut_with_a_pointer_to_it(
    engine: Engine, tmp_path: Path
) -> None:
    engine.bootstrap(write(tmp_path / f"{SESSION}.jsonl", lines_of(200)))
    conv = engine.conversation(SESSION).conversation_id
    engine.compact(conv, mode="full")

    result = reinjection(engine, conv, CLAUDE_CODE, max_chars=DEFAULT_MAX_CHARS)

    assert result.summaries_shown >= 1
    assert result.summaries_total > result.summaries_shown
    assert "lcm_describe sum_" in result.text and "to fit Claude Code's limit" in result.text
    assert result.text.count("<summary ") == result.text.count("</summary>")
    assert f"{result.summaries_total - result.summaries_shown} older summaries" in result.text


def test_reinjected_context_is_measured_as_claude_code_counts_non_ascii_text(
    tmp_path: Path,
) -> None:
    config = Config(fresh_tail_count=4, leaf_chunk_tokens=2_000)
    with Engine.open(tmp_path / "u.db", config=config) as engine:
        for n in range(120):
            engine.ingest(
                SESSION,
                {
                    "role": "user" if n % 2 == 0 else "assistant",
                    "content": f'第{n}回: 在庫のキャッシュを直す 🚀🚀 «quotes» "and" \\slashes\\ '
                    * 6,
                },
            )
        engine.compact(SESSION, mode="full")
        conv = engine.conversation(SESSION).conversation_id
        for limit in (1_200, 4_000, DEFAULT_MAX_CHARS):
            out = session_start_output(reinjection(engine, conv, CLAUDE_CODE, max_chars=limit).text)
            assert len(out.encode("utf-16-le")) // 2 <= limit  # JavaScript string length
            assert "🚀" in json.loads(out)["hookSpecificOutput"]["additionalContext"]


def test_session_start_on_startup_or_clear_prints_nothing_and_opens_no_store(
    hook: Hook, db_path: Path, tmp_path: Path
) -> None:
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(5))
    for source in ("startup", "clear"):
        res = hook("SessionStart", payload("SessionStart", transcript, source=source))
        assert (res.code, res.out) == (0, "")
    assert not db_path.exists()


def test_session_start_on_resume_reinjects_only_once_the_host_has_compacted(
    hook: Hook, tmp_path: Path
) -> None:
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(80))
    hook("SessionEnd", payload("SessionEnd", transcript, reason="prompt_input_exit"))

    uncompacted = hook("SessionStart", payload("SessionStart", transcript, source="resume"))
    assert (uncompacted.code, uncompacted.out) == (0, "")

    write(transcript, host_compaction(last_uuid(transcript)), mode="a")
    resumed = hook("SessionStart", payload("SessionStart", transcript, source="resume"))
    text = context_of(resumed.out)
    assert text.startswith("[lossless] Claude Code compacted this conversation")
    assert RESUME_HEADER in text


def hook_context_line(parent: str, text: str, n: int = 1) -> str:
    """The attachment Claude Code writes for what a SessionStart hook added to the context."""
    return json.dumps(
        {
            "parentUuid": parent,
            "isSidechain": False,
            "attachment": {
                "type": "hook_additional_context",
                "content": [text],
                "hookName": "SessionStart",
                "toolUseID": "SessionStart",
                "hookEvent": "SessionStart",
            },
            "type": "attachment",
            "uuid": f"hook-context-{n}",
            "timestamp": "2026-03-03T09:00:02.000Z",
            "renderedRole": "system",
            "sessionId": SESSION,
        }
    )


def test_a_resumed_window_gets_lossless_context_once_per_compaction(
    hook: Hook, tmp_path: Path
) -> None:
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(80))
    hook("PreCompact", payload("PreCompact", transcript, trigger="auto"))
    write(transcript, host_compaction(last_uuid(transcript)), mode="a")
    compact = hook("SessionStart", payload("SessionStart", transcript, source="compact"))
    # Claude Code records what the hook added after the compaction, and keeps it in the
    # window it resumes: a resume adds no second copy.
    write(transcript, [hook_context_line(last_uuid(transcript), context_of(compact.out))], mode="a")
    for _ in range(3):
        again = hook("SessionStart", payload("SessionStart", transcript, source="resume"))
        assert (again.code, again.out) == (0, "")
    assert "holds lossless's context already" in log_text()

    # The next compaction drops it: the next resume (no compact hook ran) puts it back once.
    write(transcript, host_compaction(last_uuid(transcript), n=2), mode="a")
    resumed = hook("SessionStart", payload("SessionStart", transcript, source="resume"))
    assert context_of(resumed.out).startswith("[lossless] Claude Code compacted")
    write(
        transcript,
        [hook_context_line(last_uuid(transcript), context_of(resumed.out), n=2)],
        mode="a",
    )
    assert hook("SessionStart", payload("SessionStart", transcript, source="resume")).out == ""


def test_session_start_after_a_compaction_no_hook_saw_imports_compacts_and_reinjects(
    hook: Hook, store: Callable[[], Engine], tmp_path: Path
) -> None:
    # The hooks were installed after the session began: PreCompact never ran.
    lines = lines_of(200)
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines)
    write(transcript, host_compaction(last_uuid(transcript)), mode="a")

    res = hook("SessionStart", payload("SessionStart", transcript, source="compact"))

    text = context_of(res.out)
    assert "<summary id=" in text and RESUME_HEADER in text
    engine = store()
    assert engine.store.message_count() == len(lines) + 2
    assert any(i.summary_id for i in engine.context(SESSION))
    assert "compaction_passes=" in log_text()


def test_the_stop_hook_captures_each_turn_reading_only_what_the_transcript_gained(
    hook: Hook, store: Callable[[], Engine], tmp_path: Path
) -> None:
    lines = lines_of(300)
    cuts = [turn_start(lines, n) for n in (200, 600, 900)] + [len(lines)]
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines[: cuts[0]])
    hook("Stop", payload("Stop", transcript, stop_hook_active=False))
    assert message_count(store) == cuts[0]
    for before, after in itertools.pairwise(cuts):
        write(transcript, lines[before:after], mode="a")
        res = hook(
            "UserPromptSubmit" if after == len(lines) else "Stop", payload("Stop", transcript)
        )
        assert (res.code, res.out) == (0, "")
        assert message_count(store) == after
    # Each call read the lines the file gained, never the file again.
    imports = [line for line in log_text().splitlines() if "import=" in line]
    assert [line.split("import=")[1].split()[0] for line in imports] == [
        "full",
        "tail",
        "tail",
        "tail",
    ]
    assert [int(line.split("imported=")[1].split()[0]) for line in imports] == [
        b - a for a, b in itertools.pairwise([0, *cuts])
    ]


def test_a_host_record_is_stored_but_never_read_as_the_users_request(
    hook: Hook, store: Callable[[], Engine], tmp_path: Path
) -> None:
    def user(uuid: str, parent: str | None, content: Any, **extra: Any) -> str:
        return json.dumps(
            {
                "parentUuid": parent,
                "isSidechain": False,
                "type": "user",
                "message": {"role": "user", "content": content},
                "uuid": uuid,
                "timestamp": "2026-03-02T09:00:00.000Z",
                "sessionId": SESSION,
                **extra,
            }
        )

    caveat = (
        "<local-command-caveat>Caveat: the messages below were generated by the user while"
        " running local commands.</local-command-caveat>"
    )
    lines = [
        json.dumps({"type": "file-history-snapshot", "messageId": "u-0", "snapshot": {}}),
        json.dumps({"type": "queue-operation", "operation": "enqueue", "sessionId": SESSION}),
        user("c-1", None, caveat, isMeta=True),
        user(
            "c-2",
            "c-1",
            "<command-name>/init</command-name>\n<command-message>init</command-message>",
        ),
        user("c-3", "c-2", "<local-command-stdout>Initialized</local-command-stdout>"),
        user("u-1", "c-3", "Add retries to the HTTP client, three at most"),
        json.dumps(
            {
                "parentUuid": "u-1",
                "isSidechain": False,
                "type": "assistant",
                "message": {
                    "id": "msg_s",
                    "role": "assistant",
                    "model": "<synthetic>",
                    "content": [{"type": "text", "text": "No response requested."}],
                },
                "uuid": "a-1",
                "timestamp": "2026-03-02T09:00:01.000Z",
                "sessionId": SESSION,
            }
        ),
        user("u-2", "a-1", "/compact"),
    ]
    transcript = write(tmp_path / "renamed-copy.jsonl", lines)
    hook("Stop", payload("Stop", transcript))
    engine = store()
    # The session is the entries' sessionId, not the file's name.
    stored = engine.messages(SESSION)
    assert [(m.external_id, m.host_meta) for m in stored] == [
        ("c-1", "caveat"),
        ("c-2", "command"),
        ("c-3", "command_output"),
        ("u-1", None),
        ("a-1", "synthetic"),
        ("u-2", None),
    ]
    resume = engine.resume(SESSION, latest=True)
    assert resume.goal == ["Add retries to the HTTP client, three at most"]
    # A second file with the same entries is the same conversation: nothing twice.
    copy = write(tmp_path / "another-name.jsonl", lines)
    hook("Stop", payload("Stop", copy))
    assert len(store().messages(SESSION)) == len(stored)
    assert [c.conversation.session_id for c in store().conversations()] == [SESSION]


def test_session_start_for_a_session_never_stored_prints_nothing(
    hook: Hook, tmp_path: Path
) -> None:
    res = hook("SessionStart", payload("SessionStart", None, source="compact"))
    assert (res.code, res.out) == (0, "")
    assert "no stored conversation for this session" in log_text()


def test_session_start_reinjects_what_is_stored_when_the_transcript_is_gone(
    hook: Hook, tmp_path: Path
) -> None:
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(60))
    hook("PreCompact", payload("PreCompact", transcript, trigger="auto"))
    transcript.unlink()

    res = hook("SessionStart", payload("SessionStart", transcript, source="compact"))

    assert res.code == 0
    assert RESUME_HEADER in context_of(res.out)
    assert f"import before reinjection: {transcript} is not a file" in log_text()


@pytest.mark.slow
def test_session_start_on_a_large_imported_transcript_reads_nothing_again(
    hook: Hook, store: Callable[[], Engine], tmp_path: Path
) -> None:
    lines = lines_of(2_000)
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines)
    hook("SessionEnd", payload("SessionEnd", transcript, reason="clear"))
    assert message_count(store) == len(lines)
    write(transcript, host_compaction(last_uuid(transcript)), mode="a")
    engine = store()

    first = run_hook(
        engine,
        HookInput.parse(json.dumps(payload("SessionStart", transcript, source="compact"))),
        CLAUDE_CODE,
    )
    again = run_hook(
        engine,
        HookInput.parse(json.dumps(payload("SessionStart", transcript, source="compact"))),
        CLAUDE_CODE,
    )

    assert (first.import_mode, first.imported) == ("tail", 2)  # only the two new lines read
    assert (again.import_mode, again.imported) == ("unchanged", 0)  # the file is not read
    assert engine.store.message_count() == len(lines) + 2
    assert first.summaries_shown >= 1
    assert len(first.stdout) <= DEFAULT_MAX_CHARS
    assert "Current task: Turn 1998" in context_of(first.stdout)
    assert again.stdout == ""  # once per compaction


# --- never failing the host -------------------------------------------------------------------


@pytest.mark.parametrize(
    "stdin",
    ["", "not json at all", "[1, 2, 3]", '{"hook_event_name": "PreCompact"', "null"],
)
def test_malformed_hook_input_exits_0_prints_nothing_and_is_logged(
    hook: Hook, db_path: Path, stdin: str
) -> None:
    res = hook("PreCompact", stdin)

    assert (res.code, res.out) == (0, "")
    assert "lossless hook claude-code PreCompact failed: the hook input on stdin is not" in (
        log_text()
    )
    assert "the hook failed" in res.err
    assert not db_path.exists()


def test_a_hook_input_over_the_limit_is_refused_naming_the_setting(
    hook: Hook, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45, point 5: the hook holds at most ``max_line_bytes`` of its input."""
    monkeypatch.setenv("LOSSLESS_MAX_LINE_BYTES", "100000")
    big = json.dumps({"hook_event_name": "PreCompact", "padding": "x" * 300_000})
    res = hook("PreCompact", big)
    assert (res.code, res.out) == (0, "")
    said = " ".join(res.err.split())
    assert "the hook input of 300,0" in said and "max_line_bytes" in said, said
    assert not db_path.exists()


def test_a_missing_transcript_is_logged_and_the_hook_exits_0(hook: Hook, tmp_path: Path) -> None:
    gone = tmp_path / "nowhere" / f"{SESSION}.jsonl"
    for event in ("PreCompact", "SessionEnd"):
        res = hook(event, payload(event, gone, trigger="auto"))
        assert (res.code, res.out) == (0, "")
    assert f"{gone} is not a file" in log_text()
    res = hook("PreCompact", payload("PreCompact", None))
    assert res.code == 0
    assert "has no transcript_path" in log_text()


def test_events_lossless_does_not_handle_exit_0_without_opening_the_store(
    hook: Hook, db_path: Path
) -> None:
    res = hook("Notification", {"session_id": SESSION, "hook_event_name": "Notification"})
    assert (res.code, res.out) == (0, "")
    res = hook("PreCompact", {"session_id": SESSION, "hook_event_name": "PreToolUse"})
    assert res.code == 0
    assert "nothing to do on Notification" in log_text()
    assert "nothing to do on PreToolUse" in log_text()
    assert not db_path.exists()


def test_unknown_options_and_a_bad_max_chars_never_make_a_usage_error(
    hook: Hook, tmp_path: Path
) -> None:
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(60))
    hook("PreCompact", payload("PreCompact", transcript))
    res = hook(
        "SessionStart",
        payload("SessionStart", transcript, source="compact"),
        "--max-chars",
        "lots",
        "--future-flag",
    )
    assert res.code == 0
    assert len(res.out.rstrip("\n")) <= DEFAULT_MAX_CHARS
    assert RESUME_HEADER in context_of(res.out)
    assert "--max-chars 'lots' is not a number" in log_text()


def test_a_locked_database_is_logged_and_the_hook_exits_0(
    hook: Hook,
    store: Callable[[], Engine],
    db_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = lines_of(30)
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines)
    store().close()  # the database exists, migrated
    monkeypatch.setattr("lossless.store.sqlite.BUSY_TIMEOUT_MS", 200)
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        res = hook("PreCompact", payload("PreCompact", transcript, trigger="auto"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    assert (res.code, res.out) == (0, "")
    assert "database is locked" in log_text()
    assert hook("PreCompact", payload("PreCompact", transcript)).code == 0
    assert message_count(store) == len(lines)


def test_a_database_that_cannot_be_opened_is_logged_and_the_hook_exits_0(
    hook: Hook, tmp_path: Path
) -> None:
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(5))
    not_a_db = tmp_path / "store-is-a-directory"
    not_a_db.mkdir()
    res = hook("PreCompact", payload("PreCompact", transcript), db=not_a_db)
    assert (res.code, res.out) == (0, "")
    assert "PreCompact failed" in log_text()


def test_a_config_error_is_logged_not_a_usage_error(
    hook: Hook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOSSLESS_FRESH_TAIL_COUNT", "many")
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines_of(5))
    res = hook("PreCompact", payload("PreCompact", transcript))
    assert (res.code, res.out) == (0, "")
    assert "fresh_tail_count" in log_text()


def test_the_log_file_can_be_chosen(hook: Hook, tmp_path: Path) -> None:
    chosen = tmp_path / "logs" / "mine.log"
    hook("PreCompact", "{oops", "--log-file", str(chosen))
    assert "not JSON" in chosen.read_text()
    assert not default_log_path(CLAUDE_CODE).exists()


# --- the real console script, as Claude Code runs it ------------------------------------------


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOSSLESS_")}
    env.update(
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        XDG_DATA_HOME=str(tmp_path / "xdg-data"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        HOME=str(tmp_path / "home"),
    )
    return env


def test_the_installed_commands_speak_the_hook_protocol_over_real_stdin_and_stdout(
    tmp_path: Path,
) -> None:
    env = clean_env(tmp_path)
    db = tmp_path / "hooks.db"
    printed = subprocess.run(
        [str(LOSSLESS), "--db", str(db), "hooks", "claude-code", "--json"],
        capture_output=True,
        env=env,
        timeout=60,
        check=True,
    )
    hooks = json.loads(printed.stdout)["settings"]["hooks"]
    command = {event: hooks[event][0]["hooks"][0]["command"] for event in EVENTS}
    lines = lines_of(150)
    cut = turn_start(lines, 500)
    transcript = write(tmp_path / f"{SESSION}.jsonl", lines[:cut])

    def run(event: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
        # As Claude Code does: the command through a shell, the input on stdin.
        return subprocess.run(
            command[event], shell=True, input=stdin, capture_output=True, env=env, timeout=120
        )

    def send(event: str, **fields: Any) -> bytes:
        return json.dumps(payload(event, transcript, **fields)).encode()

    first = run("PreCompact", send("PreCompact", trigger="auto"))
    assert (first.returncode, first.stdout) == (0, b"")
    write(transcript, lines[cut:], mode="a")
    end = run("SessionEnd", send("SessionEnd", reason="logout"))
    assert (end.returncode, end.stdout) == (0, b"")
    write(transcript, host_compaction(last_uuid(transcript)), mode="a")
    start = run("SessionStart", send("SessionStart", source="compact"))
    assert start.returncode == 0
    out = start.stdout.decode("utf-8")
    assert len(out.rstrip("\n")) <= DEFAULT_MAX_CHARS < CONTEXT_LIMIT
    text = context_of(out)
    assert RESUME_HEADER in text and "<summary id=" in text
    broken = run("SessionStart", b"\x00 not json")
    assert (broken.returncode, broken.stdout) == (0, b"")
    with Engine.open(db, config=Config()) as engine:
        assert engine.store.message_count() == len(lines) + 2  # with the host's two records
