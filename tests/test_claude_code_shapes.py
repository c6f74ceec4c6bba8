"""What Claude Code 2.1.x writes around a compaction and beside the conversation, read back:
one branch across every ``/compact``, and the host's own records kept out of the user's
words, the context and a search's ranking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.integrations.claude_code import CLAUDE_CODE
from lossless.integrations.hooks import HookInput, run_hook

SESSION = "0fe61f41-f25a-4669-9aa0-a0433ddeb8ee"


class Transcript:
    """Claude Code transcript lines, each hung from the previous one unless told."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.last: str | None = None

    def add(self, kind: str, uuid: str, parent: str | None = "", **fields: Any) -> str:
        entry = {
            "parentUuid": self.last if parent == "" else parent,
            "isSidechain": False,
            "type": kind,
            "uuid": uuid,
            "timestamp": f"2026-12-06T13:{len(self.lines):02d}:00.000Z",
            "sessionId": SESSION,
            "version": "2.1.332",
            **fields,
        }
        self.lines.append(entry)
        self.last = uuid
        return uuid

    def user(self, uuid: str, text: str, parent: str | None = "", **fields: Any) -> str:
        return self.add("user", uuid, parent, message={"role": "user", "content": text}, **fields)

    def assistant(self, uuid: str, text: str) -> str:
        message = {
            "id": f"msg_{uuid}",
            "role": "assistant",
            "model": "claude-opus-5-5",
            "content": [{"type": "text", "text": text}],
        }
        return self.add("assistant", uuid, message=message)

    def turn(self, n: int, text: str) -> None:
        self.user(f"u{n}", text)
        self.assistant(f"a{n}", f"Reply to: {text}")

    def compact(self, n: int, *, caveat_from_before: bool) -> None:
        """An interactive ``/compact``: the boundary (naming the entry before it), the summary,
        then the command's caveat, the command and its output. With *caveat_from_before*
        the caveat hangs from the entry before the compaction, as the issue's transcripts
        show; otherwise from the summary, as print mode writes it."""
        before = self.last
        self.add(
            "system",
            f"boundary-{n}",
            None,
            subtype="compact_boundary",
            content="Conversation compacted",
            logicalParentUuid=before,
            compactMetadata={"trigger": "manual", "preTokens": 9000},
        )
        self.user(
            f"summary-{n}",
            "This session is being continued from a previous conversation. HOST-SUMMARY",
            isCompactSummary=True,
            isVisibleInTranscriptOnly=True,
        )
        caveat = (
            "<local-command-caveat>The command below was run directly in Claude Code, not sent"
            " to you.</local-command-caveat>"
        )
        self.user(f"caveat-{n}", caveat, before if caveat_from_before else "", isMeta=True)
        self.user(f"command-{n}", "<command-name>/compact</command-name>")
        self.user(f"output-{n}", "<local-command-stdout>Compacted</local-command-stdout>")

    def write(self, path: Path) -> Path:
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        return path


def test_two_interactive_compacts_are_one_branch_whichever_entry_the_caveat_hangs_from(
    tmp_path: Path,
) -> None:
    for caveat_from_before in (True, False):
        t = Transcript()
        t.turn(1, "Plan the retry policy")
        t.turn(2, "yes")
        t.compact(1, caveat_from_before=caveat_from_before)
        t.turn(3, "Now write the backoff table")
        t.turn(4, "Add jitter")
        t.compact(2, caveat_from_before=caveat_from_before)
        t.turn(5, "Summarise")
        path = t.write(tmp_path / f"{SESSION}.jsonl")
        with Engine.open(tmp_path / f"store-{caveat_from_before}.db", config=Config()) as engine:
            [report] = engine.import_path(path)
            assert report.off_branch == 0 and report.off_branch_stored == 0, report
            assert [c.conversation.session_id for c in engine.conversations()] == [SESSION]
            stored = [m.external_id for m in engine.messages(SESSION)]
            assert stored == [line["uuid"] for line in t.lines], caveat_from_before
            compactions = engine.conversation(SESSION).metadata["host_compactions"]
            assert [c["summary_uuid"] for c in compactions] == ["summary-1", "summary-2"]


def test_the_live_hooks_keep_one_branch_across_an_interactive_compact(tmp_path: Path) -> None:
    """The Stop hook reads what the transcript gained: the compaction and the turn after it
    land in the session's own conversation, recorded as the host's compaction."""
    t = Transcript()
    t.turn(1, "Plan the retry policy")
    path = t.write(tmp_path / f"{SESSION}.jsonl")
    stop = HookInput(event="Stop", session_id=SESSION, transcript_path=str(path))
    with Engine.open(tmp_path / "store.db", config=Config()) as engine:
        run_hook(engine, stop, CLAUDE_CODE)
        t.compact(1, caveat_from_before=True)
        t.turn(2, "Now write the backoff table")
        t.write(path)
        outcome = run_hook(engine, stop, CLAUDE_CODE)
        assert outcome.import_mode == "tail", outcome
        assert [c.conversation.session_id for c in engine.conversations()] == [SESSION]
        assert [m.external_id for m in engine.messages(SESSION)] == [
            line["uuid"] for line in t.lines
        ]
        [compaction] = engine.conversation(SESSION).metadata["host_compactions"]
        assert compaction["summary_uuid"] == "summary-1"
    with Engine.open(tmp_path / "fresh.db", config=Config()) as fresh:
        [report] = fresh.import_path(path)
        assert report.off_branch == 0, report


def test_the_hosts_records_of_itself_are_kept_but_out_of_search_and_context(
    tmp_path: Path,
) -> None:
    """``deferred_tools_record`` (raw JSON, carried by no request) and
    ``mcp_instructions_delta`` (raw JSON in 2.1.197, rendered as system text in 2.1.332) are
    one kind whatever the version: the host's records, stored, never the user's words, found
    by no default search, shown in no context."""
    t = Transcript()
    t.turn(1, "Plan the retry policy")
    tools = {"type": "deferred_tools_record", "entries": [{"name": "mcp__x__zebrafinch"}]}
    t.add("attachment", "tools-record", attachment=tools)
    old = {"type": "mcp_instructions_delta", "addedNames": ["x"], "addedBlocks": ["zebrafinch"]}
    t.add("attachment", "instructions-old", attachment=old)
    t.add(
        "attachment",
        "instructions-new",
        attachment=old,
        rendered=[{"content": "<system-reminder>\n# MCP Server Instructions zebrafinch"}],
        renderedRole="system",
    )
    t.turn(2, "Now the zebrafinch backoff table")
    path = t.write(tmp_path / f"{SESSION}.jsonl")
    with Engine.open(tmp_path / "store.db", config=Config()) as engine:
        engine.import_path(path)
        stored = {m.external_id: m for m in engine.messages(SESSION)}
        records = [stored[k] for k in ("tools-record", "instructions-old", "instructions-new")]
        assert [(m.role, m.host_meta) for m in records] == [("system", "host_record")] * 3
        assert "zebrafinch" in records[0].content  # kept exactly, for show and export
        hits = {h.id for h in engine.grep("zebrafinch", conversation=SESSION).hits}
        assert f"msg#{stored['u2'].message_id}" in hits
        assert hits.isdisjoint(f"msg#{m.message_id}" for m in records)
        context = json.dumps(engine.assemble(SESSION, token_budget=50_000).messages)
        assert "mcp__x__zebrafinch" not in context and "MCP Server Instructions" not in context
        assert "Now the zebrafinch backoff table" in context
