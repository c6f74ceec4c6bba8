"""The ``lossless`` command line, run through its real entry point."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from lossless import Config, Engine
from lossless.cli.main import COMMANDS, cli
from lossless.sample import write_session

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_has_help_and_a_section_in_the_cli_docs() -> None:
    docs = (ROOT / "docs" / "cli.md").read_text()
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None, f"{name} is listed but does not load"
        assert command.help and command.help.strip(), f"{name} has no help text"
        assert re.search(rf"^## `lossless {name}`", docs, re.M), f"{name} missing in docs/cli.md"


def test_the_command_list_is_each_commands_own_help_and_loads_none_of_them() -> None:
    """`lossless --help` lists every command by the first paragraph of its own help, without
    importing any command (it took ~0.5 s importing all of them, the engine included)."""
    ctx = click.Context(cli)
    for name, (_, listed) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None
        assert listed == command.get_short_help_str(10_000), f"{name}: the list's line drifted"
    probe = (
        "import sys\n"
        "sys.argv = ['lossless', '--help']\n"
        "from lossless.cli.main import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('lossless'))))\n"
    )
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    *shown, loaded = done.stdout.splitlines()
    modules = set(loaded.split())
    assert "lossless.engine" not in modules, sorted(modules)
    commands = {home.partition(":")[0] for home, _ in COMMANDS.values()}
    assert not {f"lossless.cli.{m}" for m in commands} & modules, sorted(modules)
    listed = {line.split()[0] for line in shown if line.startswith("  ") and line.split()}
    assert set(COMMANDS) <= listed
    assert all(len(line) <= 80 for line in shown)
    # A shell completing the command's name loads none either.
    completing = {
        **env,
        "_LOSSLESS_COMPLETE": "bash_complete",
        "COMP_WORDS": "lossless ",
        "COMP_CWORD": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", probe.replace("'--help'", "")],
        capture_output=True,
        text=True,
        env=completing,
    )
    *offered, loaded = done.stdout.splitlines()
    assert {line.removeprefix("plain,") for line in offered} >= set(COMMANDS), offered
    assert "lossless.engine" not in set(loaded.split()), loaded


def test_import_then_list_show_and_stats(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "x.db")
    transcript = write_session(tmp_path / "s.jsonl", 10, session_id="sess-a")
    res = run_cli("--db", db, "import", str(transcript))
    assert res.code == 0, res
    assert "68 imported" in res.out

    listing = run_cli("--db", db, "conversations", "--json")
    rows = json.loads(listing.out)
    assert [(r["session_id"], r["messages"]) for r in rows] == [("sess-a", 68)]

    shown = run_cli("--db", db, "show", "sess-a", "--json", "--source", "--limit", "3")
    data = json.loads(shown.out)
    assert [m["seq"] for m in data["messages"]] == [1, 2, 3]
    first_line = json.loads(transcript.read_text().splitlines()[1])
    assert data["messages"][0]["source"] == first_line["message"]

    by_id = run_cli("--db", db, "show", "1")
    assert "Turn 0: please add pagination" in by_id.out

    stats = json.loads(run_cli("--db", db, "stats", "--json").out)
    assert stats["messages"] == 68
    assert stats["conversations"] == 1

    again = run_cli("--db", db, "import", str(transcript))
    assert "0 imported" in again.out and "(file unchanged)" in again.out


def test_db_comes_from_the_environment(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "env.db"
    monkeypatch.setenv("LOSSLESS_DB", str(db))
    transcript = write_session(tmp_path / "s.jsonl", 2)
    assert run_cli("import", str(transcript)).code == 0
    assert db.exists()


def test_without_db_the_user_data_dir_is_used(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("stats").code == 5  # reading: no store there yet, and none is made
    assert not (tmp_path / "xdg-data" / "lossless" / "lossless.db").exists()
    transcript = write_session(tmp_path / "s.jsonl", 2)
    assert run_cli("import", str(transcript)).code == 0  # writing makes it there
    assert (tmp_path / "xdg-data" / "lossless" / "lossless.db").exists()
    assert run_cli("stats").code == 0


def test_unknown_conversation_is_a_clear_error_with_exit_code_4(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    transcript = write_session(tmp_path / "s.jsonl", 2)
    assert run_cli("--db", str(tmp_path / "x.db"), "import", str(transcript)).code == 0
    res = run_cli("--db", str(tmp_path / "x.db"), "show", "999")
    assert res.code == 4
    assert "no conversation with id 999" in res.err
    assert "Traceback" not in res.err + res.out


def test_doctor_exit_codes_follow_the_findings(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "x.db"
    transcript = write_session(tmp_path / "s.jsonl", 3)
    run_cli("--db", str(db), "import", str(transcript))
    ok = run_cli("--db", str(db), "doctor")
    assert ok.code == 0 and "no problems" in ok.out
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM context_items WHERE ordinal = 1")
        conn.execute("UPDATE context_items SET ordinal = -1 WHERE ordinal = 0")
    bad = run_cli("--db", str(db), "doctor", "--json")
    assert bad.code == 1
    report = json.loads(bad.out)
    assert report["ok"] is False
    assert {p["check"] for p in report["problems"]} >= {"context ordinals", "reachability"}


def test_bad_config_is_reported_with_the_key(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "c.toml"
    cfg.write_text("leaf_chunk_tokenz = 5\n")
    res = run_cli("--config", str(cfg), "--db", str(tmp_path / "x.db"), "stats")
    assert res.code == 2
    assert "leaf_chunk_tokenz" in res.err


def test_config_command_shows_overrides(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LOSSLESS_FRESH_TAIL_COUNT", "12")
    res = run_cli("config", "--json")
    assert json.loads(res.out)["fresh_tail_count"] == 12


def test_demo_replays_with_compaction_and_recovers_the_first_turn(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("demo", "--turns", "300", "--budget", "16000", "--json")
    assert res.code == 0, res
    report = json.loads(res.out)
    assert report["messages_stored"] == 2040
    assert report["doctor_problems"] == 0
    assert report["context_tokens"] < report["raw_tokens"] / 3
    assert report["peak_context_tokens"] <= 16000
    assert int(report["summaries_by_depth"]["0"]) > 0
    trail = report["retrieved"]
    assert trail["seq"] == 4
    assert "cursor-based pagination" in trail["text"]
    assert trail["chain_to_context"][-1]["in_context"] is True


def test_compact_and_its_dry_run(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "x.db")
    transcript = write_session(tmp_path / "s.jsonl", 200, session_id="long")
    assert run_cli("--db", db, "import", str(transcript)).code == 0
    plan = json.loads(run_cli("--db", db, "compact", "long", "--dry-run", "--json").out)
    assert plan["leaf_passes_about"] >= 1
    assert json.loads(run_cli("--db", db, "stats", "--json").out)["summaries"] == 0
    done = json.loads(run_cli("--db", db, "compact", "long", "--json").out)
    assert done["tokens_after"] < done["tokens_before"]
    assert done["passes"] and done["passes"][0]["kind"] == "leaf"
    listed = json.loads(run_cli("--db", db, "conversations", "--json").out)[0]
    assert listed["summaries"] == len(done["passes"])
    assert listed["messages"] == 1360
    until = run_cli("--db", db, "compact", "long", "--until", "5000")
    assert until.code == 0
    assert "target 5,000" in until.out


def test_replay_reports_compaction_per_turn(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    transcript = write_session(tmp_path / "s.jsonl", 120)
    res = run_cli("replay", str(transcript), "--budget", "12000", "--json")
    assert res.code == 0, res
    data = json.loads(res.out)
    assert data["turns"] == 120
    assert data["messages"] == 816
    assert data["compaction_events"]
    assert data["peak_context_tokens"] <= 12000
    text = run_cli("replay", str(transcript), "--budget", "12000")
    assert "compacted:" in text.out
    assert "replayed 120 turns" in text.out


def test_the_installed_console_script_runs(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("lossless")
    if not exe.exists():
        pytest.skip("console script not installed next to this interpreter")
    transcript = write_session(tmp_path / "s.jsonl", 2)
    subprocess.run(
        [str(exe), "--db", str(tmp_path / "x.db"), "import", str(transcript)],
        capture_output=True,
        timeout=60,
        check=True,
    )
    out = subprocess.run(
        [str(exe), "--db", str(tmp_path / "x.db"), "stats", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout)["messages"] == 16  # two turns of a generated session


def test_context_prints_the_assembled_messages_in_each_format(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LOSSLESS_FILL_BUDGET", "false")  # the summaries, not what they cover
    db = str(tmp_path / "x.db")
    transcript = write_session(tmp_path / "s.jsonl", 60, session_id="ctx")
    assert run_cli("--db", db, "import", str(transcript)).code == 0
    assert run_cli("--db", db, "compact", "ctx").code == 0
    for fmt in ("anthropic", "openai", "responses"):
        res = run_cli("--db", db, "context", "ctx", "--budget", "50000", "--format", fmt, "--json")
        assert res.code == 0, res
        data = json.loads(res.out)
        assert data["summaries"] >= 1
        assert "<summary id=" in json.dumps(data["messages"][0])
    text = run_cli("--db", db, "context", "ctx", "--budget", "50000")
    assert text.out.startswith("conversation 1:")


def test_context_within_the_room_a_hosts_window_leaves(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "x.db")
    transcript = write_session(tmp_path / "s.jsonl", 60, session_id="room")
    assert run_cli("--db", db, "import", str(transcript)).code == 0
    # No window on record and none given: say what to give.
    bare = run_cli("--db", db, "context", "room")
    assert bare.code != 0 and "--window" in bare.err and "--budget" in bare.err
    # A window: a quarter of it taken to be the host's until measured, 4,096 for the reply.
    res = run_cli("--db", db, "context", "room", "--window", "16000", "--json")
    assert res.code == 0, res
    data = json.loads(res.out)
    assert data["room"]["source"] == "default" and data["budget"] == 16000 - 4000 - 4000
    assert data["tokens"] <= data["budget"]
    # What a host measured is kept: the next call needs no window.
    with Engine.open(db, config=Config()) as engine:
        engine.measure_room("room", window=16000, prompt_tokens=9_000, messages_tokens=3_000)
    text = run_cli("--db", db, "context", "room")
    assert text.code == 0, text
    assert text.out.startswith("room: window 16,000 - host 6,000 (recorded) - reply 4,000")
    stats = run_cli("--db", db, "stats")
    assert "host rooms     1 measured; tightest room: 6,000 of a 16,000-token window" in stats.out


def test_grep_finds_across_messages_and_summaries_and_explains_modes(
    run_cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "x.db")
    transcript = write_session(tmp_path / "s.jsonl", 60, session_id="g")
    assert run_cli("--db", db, "import", str(transcript)).code == 0
    assert run_cli("--db", db, "compact", "g").code == 0
    res = run_cli(
        "--db",
        db,
        "grep",
        "cursor based pagination",
        "--sort",
        "recency",
        "--limit",
        "50",
        "--json",
    )
    ids = [h["id"] for h in json.loads(res.out)["hits"]]
    assert any(i.startswith("msg#") for i in ids) and any(i.startswith("sum_") for i in ids)
    bad = run_cli("--db", db, "grep", "dep.*timeout")
    assert bad.code == 2 and "--mode regex" in bad.err
    # Page by page: the first page says where the next starts, the pages follow on.
    first = run_cli("--db", db, "grep", "cursor based pagination", "--limit", "3")
    assert "(more: --offset 3 for the next 3)" in first.out
    pages = [
        json.loads(
            run_cli(
                "--db", db, "grep", "pagination", "--limit", "3", "--offset", str(n), "--json"
            ).out
        )
        for n in (0, 3)
    ]
    both = json.loads(run_cli("--db", db, "grep", "pagination", "--limit", "6", "--json").out)
    assert pages[0]["more"] is True and pages[0]["next_offset"] == 3
    assert [h["id"] for p in pages for h in p["hits"]] == [h["id"] for h in both["hits"]]


def test_half_a_surrogate_pair_exports_as_json_a_terminal_can_print(tmp_path: Path) -> None:
    path = tmp_path / "half.jsonl"
    path.write_text('{"role": "user", "content": "half \\ud83d emoji"}\n')
    db = str(tmp_path / "s.db")
    run = [sys.executable, "-m", "lossless", "--db", db]
    assert subprocess.run([*run, "import", str(path)], capture_output=True).returncode == 0
    shown = subprocess.run(
        [*run, "show", "half", "--json", "--source"],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert shown.returncode == 0, shown.stderr.decode()
    source = json.loads(shown.stdout)["messages"][0]["source"]
    assert source == {"role": "user", "content": "half \ud83d emoji"}  # exactly what came


def test_revoking_a_mistyped_grant_says_so_and_leaves_the_real_one_live(
    run_cli: Any, tmp_path: Path
) -> None:
    from lossless import Engine

    db = str(tmp_path / "g.db")
    with Engine.open(db) as engine:
        engine.ingest("s", {"role": "user", "content": "hello"})
        real = engine.create_grant("s").grant_id
    typo = run_cli("--db", db, "grant", "--revoke", real[:-1] + "x")
    assert typo.code == 4 and "nothing was revoked" in typo.err
    with Engine.open(db) as engine:
        assert engine.check_grant(real).revoked_at is None  # still live
    first = run_cli("--db", db, "grant", "--revoke", real)
    again = run_cli("--db", db, "grant", "--revoke", real)
    assert (first.code, again.code) == (0, 0)
    assert first.out.startswith("revoked") and again.out.startswith("already revoked")
    deep = run_cli("--db", db, "grant", "s", "--depth", "999")
    assert deep.code != 0 and "0 to 32 levels" in deep.err


def test_an_unreachable_summarizer_is_one_line_each_and_a_traceback_only_with_debug(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "x.db")
    for session in ("u", "v"):
        transcript = write_session(tmp_path / f"{session}.jsonl", 60, session_id=session)
        assert run_cli("--db", db, "import", str(transcript)).code == 0
    monkeypatch.setenv("LOSSLESS_SUMMARIZER", "openai")
    monkeypatch.setenv("LOSSLESS_SUMMARIZER_MODEL", "m")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there

    done = run_cli("--db", db, "compact", "u")

    # The context was compacted (provisional summaries, at once); the model's could not be
    # made: they stay provisional for the next run, which the exit code and one line say.
    assert done.code == 3
    assert "1 provisional" in done.out and "0 of 1 provisional summaries finished" in done.out
    lines = done.err.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("warning: summarizer openai failed for 1 summary")
    assert "could not reach openai at 127.0.0.1:9; check the base URL and the network" in lines[0]
    assert lines[1].startswith("left: 1 summary still provisional")
    assert "Traceback" not in done.err

    again = run_cli("--debug", "--db", db, "compact", "v")
    assert again.code == 3 and "Traceback" in again.err


def test_a_store_that_does_not_exist_is_an_error_for_commands_that_read(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    typo = tmp_path / "nested" / "lossles.db"
    for args in (
        ["conversations"],
        ["stats"],
        ["grep", "deploy"],
        ["show", "1"],
        ["context", "1", "--budget", "1000"],
        ["doctor"],
    ):
        done = run_cli("--db", str(typo), *args)
        assert done.code == 5, (args, done)
        assert f"no lossless store at {typo}" in done.err and "--db" in done.err
    assert not typo.parent.exists()  # nothing was made, not even the folder

    # Writing commands make the store, but not a folder that is not there (a typo, most
    # often): that is refused, saying how to make it.
    transcript = write_session(tmp_path / "s.jsonl", 5, session_id="s")
    refused = run_cli("--db", str(typo), "import", str(transcript))
    assert refused.code == 2 and f"mkdir -p {typo.parent}" in refused.err, refused
    assert not typo.parent.exists()
    typo.parent.mkdir()
    assert run_cli("--db", str(typo), "import", str(transcript)).code == 0
    assert run_cli("--db", str(typo), "conversations").code == 0
    # LOSSLESS_DB names the user's own store, which demo leaves be.
    monkeypatch.setenv("LOSSLESS_DB", str(tmp_path / "mine.db"))
    assert run_cli("demo", "--turns", "20").code == 0
    assert not (tmp_path / "mine.db").exists()
    demo_db = tmp_path / "demo.db"
    assert run_cli("--db", str(demo_db), "demo", "--turns", "20").code == 0
    again = run_cli("--db", str(demo_db), "demo", "--turns", "20")
    assert again.code == 2 and "already holds the demo's session" in again.err


def test_rename_archive_and_unarchive_change_what_is_listed_and_searched(
    run_cli: Any, tmp_path: Path
) -> None:
    db = str(tmp_path / "a.db")
    for session, seed in (("sess-a", 7), ("sess-b", 8)):
        path = write_session(tmp_path / f"{session}.jsonl", 6, session_id=session, seed=seed)
        assert run_cli("--db", db, "import", str(path)).code == 0

    def listed(*options: str) -> list[str]:
        return [
            r["session_id"]
            for r in json.loads(run_cli("--db", db, "conversations", "--json", *options).out)
        ]

    def searched(*options: str) -> set[int]:
        res = run_cli("--db", db, "grep", "pagination", "--limit", "200", "--json", *options)
        return {h["conversation_id"] for h in json.loads(res.out)["hits"]}

    renamed = run_cli("--db", db, "rename", "sess-b", "Cursor pagination")
    assert renamed.code == 0 and "is titled: Cursor pagination" in renamed.out
    archived = run_cli("--db", db, "archive", "2", "sess-b")  # one conversation, named twice
    assert archived.code == 0 and archived.out.count("archived conversation 2") == 1
    assert listed() == ["sess-a"]
    assert listed("--archived") == ["sess-b"]
    assert listed("--all") == ["sess-a", "sess-b"]
    assert searched() == {1}
    assert searched("--include-archived") == {1, 2}
    assert searched("--conversation", "sess-b") == {2}  # named: searched whatever its status
    table = run_cli("--db", db, "conversations", "--all").out
    assert "archived Cursor pagination" in table
    assert "1 archived not listed" in run_cli("--db", db, "conversations").err
    again = run_cli("--db", db, "archive", "2", "--json")
    assert json.loads(again.out) == [
        {
            "conversation_id": 2,
            "session_id": "sess-b",
            "session_key": None,
            "title": "Cursor pagination",
            "status": "archived",
            "changed": False,
        }
    ]
    assert run_cli("--db", db, "archive", "2", "nope").code == 4  # nothing changed then
    assert run_cli("--db", db, "unarchive", "sess-b").code == 0
    assert listed() == ["sess-a", "sess-b"] and searched() == {1, 2}
    row = json.loads(run_cli("--db", db, "conversations", "--json").out)[1]
    assert row["first_message_at"] < row["last_message_at"] and row["source"] == "openclaw"


def test_the_conversations_list_piped_is_one_whole_line_a_conversation(tmp_path: Path) -> None:
    """Piped (COLUMNS set or not), a listing is for a program: nothing cut, never wrapped; on
    a terminal it fits (test_listings_fit_80_and_160_columns_and_are_whole_when_piped)."""
    db = str(tmp_path / "w.db")
    run = [sys.executable, "-m", "lossless", "--db", db]
    session = "0f9e8d7c-5b1a-4c2e-9f3d-7a6b5c4d3e2f"
    path = write_session(tmp_path / "cc.jsonl", 4, session_id=session, format="claude_code")
    assert subprocess.run([*run, "import", str(path)], capture_output=True).returncode == 0
    title = "Paginate the /items endpoint with cursors,\nkeeping the public API stable " * 3
    assert subprocess.run([*run, "rename", session, title], capture_output=True).returncode == 0
    assert subprocess.run([*run, "archive", "1"], capture_output=True).returncode == 0
    env = {**os.environ, "COLUMNS": "80", "PYTHONIOENCODING": "utf-8"}
    shown = subprocess.run([*run, "conversations", "--all"], capture_output=True, env=env)
    lines = shown.stdout.decode().splitlines()
    assert shown.returncode == 0 and len(lines) == 2  # a header and one line: never wrapped
    header, row = lines
    assert header.split() == ["id", "session", "source", "first", "last", "msgs", "sums", "title"]
    assert row.split()[:3] == ["1", session, "claude_code"]
    assert row.endswith(" archived " + " ".join(title.split()))


def test_json_may_come_before_the_command_and_every_json_view_of_a_message_says_whose_it_is(
    run_cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "x.db")
    lines = [
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "sessionId": "s",
            "message": {"role": "user", "content": "Deploy on Friday"},
        },
        {
            "type": "user",
            "uuid": "u2",
            "parentUuid": "u1",
            "sessionId": "s",
            "message": {"role": "user", "content": "<command-name>/compact</command-name>"},
        },
    ]
    transcript = tmp_path / "s.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert run_cli("--db", db, "import", str(transcript)).code == 0
    host = 2
    before = run_cli("--db", db, "--json", "show", "s")
    after = run_cli("--db", db, "show", "s", "--json")
    assert before.code == 0 and before.out == after.out, before
    shown = json.loads(before.out)["messages"]
    assert [m["host_meta"] for m in shown] == [None, "command"]
    described = json.loads(run_cli("--db", db, "--json", "describe", f"msg#{host}").out)
    assert described["metadata"]["host_meta"] == "command"
    refused = run_cli("--db", db, "--json", "tui")
    assert refused.code == 2 and "prints no JSON" in refused.err


def test_every_error_is_one_lowercase_error_line(run_cli: Any, tmp_path: Path) -> None:
    """click's usage errors and lossless's own errors read the same way."""
    usage = run_cli("--db", str(tmp_path / "x.db"), "conversations", "--no-such-flag")
    own = run_cli("--db", str(tmp_path / "x.db"), "show", "nobody")
    for res in (usage, own):
        assert res.err.count("error: ") == 1 and "Error:" not in res.err, res.err
    assert usage.code == 2 and "lossless conversations [OPTIONS]" in usage.err


def test_a_transcript_given_as_the_store_is_named_for_what_it_is(
    run_cli: Any, tmp_path: Path
) -> None:
    """Not "damaged" with restore advice: a JSONL file is not a SQLite database, and the
    error says how to import it; nothing is written beside it."""
    transcript = write_session(tmp_path / "s.jsonl", 3, session_id="s")
    before = transcript.read_bytes()
    for args in (["stats"], ["import", str(transcript)]):
        done = run_cli("--db", str(transcript), *args)
        assert done.code == 5, done
        assert "is not a SQLite database" in done.err and "lossless import" in done.err
        assert "damaged" not in done.err
    assert transcript.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]


@pytest.mark.parametrize("command", ["conversations", "sessions"])
def test_listings_fit_80_and_160_columns_and_are_whole_when_piped(
    run_cli: Any, tmp_path: Path, command: str
) -> None:
    """At 80 and 160 columns every column is there, its header whole, the line within the
    width; piped, nothing is cut and no line ends in padding."""
    from rich.console import Console

    from lossless.cli import conversations, sessions
    from lossless.cli.output import listing_table

    db = tmp_path / "l.db"
    long_title = "the harbour crane schedule, the berth plan and the night shift rota " * 2
    with Engine.open(db, config=Config()) as engine:
        for n in range(3):
            engine.ingest(f"session-{n}-{'x' * 30}", {"role": "user", "content": f"turn {n}"})
        engine.rename(1, long_title.strip())
        engine.summarize_session(1)
        stats = engine.conversations()
        versions = engine.session_summaries()
    piped = run_cli("--db", str(db), command)
    assert piped.code == 0, piped
    lines = piped.out.splitlines()
    assert all(line == line.rstrip() for line in lines)
    assert long_title.strip() in piped.out
    if command == "conversations":
        columns = conversations.listing(stats)
    else:
        history = {v.conversation_id: [v] for v in versions}
        columns = sessions.columns(stats, history, summaries=False)
    for width in (80, 160):
        console = Console(width=width, color_system=None)
        with console.capture() as shown:
            console.print(listing_table(columns, width))
        rendered = shown.get().splitlines()
        assert all(len(line) <= width for line in rendered), rendered
        header = rendered[0].split()
        assert header == [c.name for c in columns], rendered[0]
        assert rendered[1].endswith("…"), rendered[1]  # the long title, cut to fit


def test_the_conventions_of_llm_and_sqlite_utils_hold(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--db` after the command, short flags for the common options, and `lossless info`
    saying where everything is without making anything."""
    db = tmp_path / "c.db"
    transcript = write_session(tmp_path / "s.jsonl", 6, session_id="conv-a")
    assert run_cli("import", "-f", "openclaw", "--db", str(db), str(transcript)).code == 0
    write_session(tmp_path / "t.jsonl", 9, session_id="conv-b")  # its last message is later
    assert run_cli("import", str(tmp_path / "t.jsonl"), "--db", str(db)).code == 0
    listed = run_cli("conversations", "-n", "1", "--db", str(db))
    assert listed.code == 0 and "conv-b" in listed.out and "conv-a" not in listed.out, listed
    found = run_cli("grep", "-n", "1", "--json", "-c", "conv-a", "--db", str(db), "the")
    assert found.code == 0 and len(json.loads(found.out)["hits"]) == 1, found
    out = tmp_path / "a.md"
    assert run_cli("export", "conv-a", "-f", "markdown", "-o", str(out), "--db", str(db)).code == 0
    assert out.read_text().startswith("# ")

    monkeypatch.setenv("HOME", str(tmp_path))
    missing = tmp_path / "not-yet.db"
    info = run_cli("info", "--db", str(missing), "--json")
    data = json.loads(info.out)
    assert data["store"] == str(missing) and data["store_from"] == "--db"
    assert data["store_exists"] is False and not missing.exists()
    assert "extractive" in data["summarizers_installed"]
    said = run_cli("--db", str(db), "info").out
    assert f"{db} (" in said and "from --db" in said and "summarizer" in said
