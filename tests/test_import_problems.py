"""What an import could not store is named, with its place, on every import (issue 19).

A bad line (not JSON, of no known shape) and a skipped file are reported each time a file is
imported — the first time, when it grew, and when it is unchanged and not read at all — and
the exit code says so (3) unless ``--skip-bad`` accepts them. Nothing is stored twice, and a
file none of whose messages can be stored creates no conversation.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine, doctor
from lossless.model import StoredMessage

CC = "5464f1db-22b4-4136-ae64-a5ad4a8c57a4"


def write_jsonl(path: Path, objs: Iterable[Any], *, mode: str = "w") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode, encoding="utf-8") as handle:
        for obj in objs:
            handle.write(json.dumps(obj) + "\n")
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


def cc_line(uuid: str, parent: str | None, text: str, role: str = "user", **extra: Any) -> Any:
    """One Claude Code transcript entry of session :data:`CC`."""
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": CC,
        "type": role,
        "message": {"role": role, "content": [{"type": "text", "text": text}]},
        "uuid": uuid,
        "timestamp": "2026-02-18T10:00:00.000Z",
        **extra,
    }


GOOD = [
    {"role": "user", "content": "Where is the cache configured?"},
    {"role": "assistant", "content": "In settings.py, CACHE_URL."},
]


def chat_with_bad_lines(path: Path) -> Path:
    """Two good lines, a line cut in the middle (3), an object of no shape (4), a good one."""
    lines = [json.dumps(m) for m in GOOD]
    lines += ['{"role": "user", "content": "and the', '{"foo": 1}']
    lines += [json.dumps({"role": "user", "content": "Thanks."})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def bad_lines(err: str, path: Path) -> list[str]:
    """The lines of stderr naming a line of *path* that was not imported."""
    return [line for line in err.splitlines() if line.startswith(f"not imported {path}:")]


def test_good_lines_are_imported_and_each_bad_line_is_named_with_its_number(
    db: str, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    path = chat_with_bad_lines(tmp_path / "chat.jsonl")

    res = run_cli("--db", db, "import", str(path))

    assert res.code == 3
    said = bad_lines(res.err, path)
    assert [line.split(": ")[0] for line in said] == [
        f"not imported {path}:3",
        f"not imported {path}:4",
    ]
    assert "not valid JSON" in said[0]
    assert "unknown message shape (keys: foo)" in said[1]
    assert "2 line(s) not imported; 3 message(s) were" in res.err
    with Engine.open(db) as engine:
        assert [m.content for m in stored(engine, "chat")] == [
            "Where is the cache configured?",
            "In settings.py, CACHE_URL.",
            "Thanks.",
        ]


def test_importing_the_same_file_again_names_the_bad_lines_again_and_stores_nothing_twice(
    db: str, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    path = chat_with_bad_lines(tmp_path / "chat.jsonl")
    first = run_cli("--db", db, "import", str(path))

    again = run_cli("--db", db, "import", str(path))

    assert "(file unchanged)" in again.out
    assert again.code == first.code == 3
    assert bad_lines(again.err, path) == bad_lines(first.err, path)
    with Engine.open(db) as engine:
        assert len(stored(engine, "chat")) == 3
        assert [c.conversation.session_id for c in engine.conversations()] == ["chat"]
        assert_consistent(engine)


def test_skip_bad_accepts_the_bad_lines_still_naming_them(db: str, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = chat_with_bad_lines(tmp_path / "chat.jsonl")

    first = run_cli("--db", db, "import", "--skip-bad", str(path))
    again = run_cli("--db", db, "import", "--skip-bad", str(path))

    for res in (first, again):
        assert res.code == 0
        assert len(bad_lines(res.err, path)) == 2
        assert "not imported (accepted: --skip-bad)" in res.err
    with Engine.open(db) as engine:
        assert len(stored(engine, "chat")) == 3


def test_the_json_report_gives_each_bad_line_its_number_kind_and_reason(
    db: str, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    path = chat_with_bad_lines(tmp_path / "chat.jsonl")
    run_cli("--db", db, "import", str(path))

    res = run_cli("--db", db, "import", "--json", str(path))

    [report] = json.loads(res.out)
    assert report["mode"] == "unchanged"
    assert [(p["line"], p["kind"], p["known"]) for p in report["problems"]] == [
        (3, "malformed", True),
        (4, "unknown_shape", True),
    ]
    assert res.code == 3


def test_a_grown_file_names_the_bad_lines_of_the_part_it_does_not_read_again(
    engine: Engine, tmp_path: Path
) -> None:
    path = chat_with_bad_lines(tmp_path / "chat.jsonl")
    engine.import_path(path)
    write_jsonl(path, [{"role": "assistant", "content": "You are welcome."}, [1, 2]], mode="a")

    [report] = engine.import_path(path)

    assert (report.mode, report.imported) == ("tail", 1)
    assert [(p.line, p.kind, p.known) for p in report.not_imported] == [
        (3, "malformed", True),
        (4, "unknown_shape", True),
        (7, "unknown_shape", False),
    ]
    assert all(p.path == str(path) and p.reason for p in report.not_imported)
    assert len(stored(engine, "chat")) == 4


def test_a_json_array_names_its_bad_element_on_every_import(engine: Engine, tmp_path: Path) -> None:
    # An array is read whole each time; its bad element sits before messages already stored.
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([GOOD[0], {"foo": 1}, GOOD[1]]), encoding="utf-8")

    for _ in range(2):
        [report] = engine.import_path(path)
        assert [(p.line, p.kind) for p in report.not_imported] == [(2, "unknown_shape")]
        assert report.missing_before_anchor == 0
    assert len(stored(engine, "chat")) == 2


def test_a_file_none_of_whose_messages_can_be_stored_creates_no_conversation(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "junk.json"
    path.write_text(json.dumps([{"foo": 1}, {"bar": 2}]), encoding="utf-8")

    for _ in range(2):  # nothing recorded: the second import reads it again, and says so
        [report] = engine.import_path(path)
        assert (report.mode, report.conversation_id) == ("empty", 0)
        assert [(p.line, p.kind) for p in report.not_imported] == [
            (1, "unknown_shape"),
            (2, "unknown_shape"),
        ]
    assert engine.conversations() == []


def test_a_folder_with_junk_names_each_file_it_skipped_and_creates_nothing_from_them(
    db: str, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / "junk.json").write_text('{"foo": 1}\n')
    (folder / "photo.jsonl").write_bytes(bytes(range(256)) * 4)
    (folder / "empty.jsonl").write_text("")
    (folder / "old.jsonl").write_bytes(gzip.compress(b'{"role": "user", "content": "hi"}\n'))
    write_jsonl(folder / "chat.jsonl", GOOD)

    res = run_cli("--db", db, "import", str(folder))

    assert res.code == 3
    skipped = [line for line in res.err.splitlines() if line.startswith("skipped file ")]
    assert [line.split(": ")[0] for line in skipped] == [
        f"skipped file {folder / 'empty.jsonl'}",
        f"skipped file {folder / 'junk.json'}",
        f"skipped file {folder / 'old.jsonl'}",
        f"skipped file {folder / 'photo.jsonl'}",
    ]
    assert "the file is empty" in skipped[0]
    assert "an object of no shape lossless knows (keys: foo)" in skipped[1]
    assert "gzip-compressed data, not JSON text" in skipped[2]
    assert "not UTF-8 text" in skipped[3]
    assert "4 file(s) not imported; 2 message(s) were" in res.err
    with Engine.open(db) as engine:
        assert [c.conversation.session_id for c in engine.conversations()] == ["chat"]
        reports = engine.import_path(folder)
    failed = {Path(r.path).name: r.not_imported[0] for r in reports if r.mode == "failed"}
    assert {name: (p.line, p.kind) for name, p in failed.items()} == {
        "empty.jsonl": (0, "empty"),
        "junk.json": (1, "unknown_shape"),
        "old.jsonl": (1, "malformed"),
        "photo.jsonl": (1, "malformed"),
    }
    assert run_cli("--db", db, "import", "--skip-bad", str(folder)).code == 0


def test_the_files_a_host_keeps_beside_its_transcripts_are_named_and_not_errors(
    db: str, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    project = tmp_path / "-home-u-app"
    write_jsonl(project / f"{CC}.jsonl", [cc_line("u-1", None, "Find the cache")])
    (project / "sessions-index.json").write_text(json.dumps({"version": 1}, indent=2))
    (project / CC / "subagents").mkdir(parents=True)
    (project / CC / "subagents" / "agent-zz9.meta.json").write_text('{"agentType": "x"}')

    res = run_cli("--db", db, "import", str(tmp_path))

    assert res.code == 0, res.err
    assert f"{project / 'sessions-index.json'}: passed over: Claude Code's index" in res.out
    assert "agent-zz9.meta.json: passed over: Claude Code's sidecar of a sub-agent" in res.out


def test_a_bad_line_of_a_file_with_a_sidechain_is_named_once(
    engine: Engine, tmp_path: Path
) -> None:
    side = {"isSidechain": True, "agentId": "a1b2c3d"}
    path = write_jsonl(
        tmp_path / f"{CC}.jsonl",
        [cc_line("u-1", None, "Find the cache"), cc_line("s-1", None, "SIDECHAIN", **side)],
    )
    with path.open("a") as handle:
        handle.write("{cut short\n")
    write_jsonl(path, [cc_line("a-1", "u-1", "Found it.", "assistant")], mode="a")

    for _ in range(2):
        reports = engine.bootstrap(path)
        assert [r.session_id for r in reports] == [CC, f"{CC}:sidechain"]
        assert [p.line for r in reports for p in r.not_imported] == [3]
    assert len(stored(engine, CC)) == 2
    assert_consistent(engine)


def test_an_object_of_no_shape_in_a_host_transcript_is_named_not_skipped_as_bookkeeping(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / f"{CC}.jsonl",
        [
            cc_line("u-1", None, "Find the cache"),
            {"foo": 1},
            {"type": "queue-operation", "operation": "enqueue"},  # Claude Code's own
            cc_line("a-1", "u-1", "Found it.", "assistant"),
        ],
    )

    [report] = engine.import_path(path)

    assert [(p.line, p.kind) for p in report.not_imported] == [(2, "unknown_shape")]
    assert "(keys: foo)" in report.not_imported[0].reason
    assert dict(report.skipped) == {"queue-operation": 1}
    assert len(stored(engine, CC)) == 2


@pytest.mark.parametrize("ending", [b"\n", b""])
def test_a_line_over_the_limit_is_reported_and_never_held_whole(
    tmp_path: Path, ending: bytes
) -> None:
    """A line longer than a transcript line may be (a file of zeros with no line break in
    place of a transcript) is one error line, read a piece at a time, naming the limit and
    its setting; the lines around it are imported."""
    path = tmp_path / "chat.jsonl"
    first = json.dumps({"role": "user", "content": "before the flood"}).encode() + b"\n"
    last = json.dumps({"role": "user", "content": "after the flood"}).encode() + b"\n"
    with path.open("wb") as handle:
        handle.write(first)
        for _ in range(5):
            handle.write(b"\0" * (1 << 20))
        handle.write(ending)
        if ending:
            handle.write(last)
    config = Config().replace(max_line_bytes=1 << 20)
    with Engine.open(tmp_path / "s.db", config=config) as engine:
        [report] = engine.import_path(path, format="messages")
        said = [m.content for m in engine.messages(report.session_id)]
    assert said == (["before the flood", "after the flood"] if ending else ["before the flood"])
    [problem] = report.problems
    assert problem.line == 2 and "over the limit of 1,048,576" in problem.reason
    assert "max_line_bytes" in problem.reason and "LOSSLESS_MAX_LINE_BYTES" in problem.reason


def test_a_file_over_the_limit_is_refused_naming_the_setting(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text(
        "".join(json.dumps({"role": "user", "content": f"line {i}"}) + "\n" for i in range(5000))
    )
    db = str(tmp_path / "s.db")
    monkeypatch.setenv("LOSSLESS_MAX_FILE_BYTES", "100000")
    refused = run_cli("--db", db, "import", str(path), "--format", "messages")
    assert refused.code == 3, refused
    said = " ".join(refused.out.split() + refused.err.split())
    assert f"{path.stat().st_size:,} bytes" in said and "max_file_bytes" in said, said
    monkeypatch.delenv("LOSSLESS_MAX_FILE_BYTES")
    assert run_cli("--db", db, "import", str(path), "--format", "messages").code == 0


def test_a_head_of_zeros_is_not_held_whole(tmp_path: Path) -> None:
    """Telling what a file is reads at most its first megabyte: a file that is one long line
    (zeros, no line break) is said to be no transcript without being read into memory."""
    path = tmp_path / "zeros.jsonl"
    with path.open("wb") as handle:
        for _ in range(8):
            handle.write(b"\0" * (1 << 20))
    with Engine.open(tmp_path / "s.db", config=Config()) as engine:
        [report] = engine.import_path(path)
    assert report.mode == "failed"
    assert "8,388,608 bytes with no line break" in report.problems[0].reason


def test_a_repeated_json_key_is_said_once_and_its_last_value_kept(
    run_cli: Any, tmp_path: Path
) -> None:
    """Issue 45, point 8: ``{"a":1,"a":2}`` is stored as JSON readers read it (the last
    value), and the import says so, once, rather than dropping the first value silently."""
    path = tmp_path / "dup.jsonl"
    path.write_text(
        '{"role":"user","content":"first","content":"second"}\n'
        '{"role":"assistant","content":"x","content":"y"}\n'
        '{"role":"user","content":"plain"}\n'
    )
    db = str(tmp_path / "d.db")
    done = run_cli("--db", db, "import", str(path), "--format", "messages")
    assert done.code == 0, done
    assert done.err.count("repeats the key 'content'") == 1, done.err
    shown = run_cli("--db", db, "show", "dup")
    assert "second" in shown.out and "first" not in shown.out


def test_import_progress_only_goes_forward_and_ends_at_the_files_size(tmp_path: Path) -> None:
    """Both passes over a file count on one scale: the bar never goes back (it went from
    100% to 0% between them), and it ends at the total."""
    from lossless.sample import write_session

    (tmp_path / "a").mkdir()
    first = write_session(tmp_path / "a" / "one.jsonl", 60, session_id="one")
    write_session(tmp_path / "a" / "two.jsonl", 40, session_id="two")
    seen: list[tuple[int, int]] = []
    with Engine.open(tmp_path / "p.db", config=Config()) as engine:
        engine.import_path(first.parent, progress=lambda done, total: seen.append((done, total)))
    done = [d for d, _ in seen]
    total = sum(f.stat().st_size for f in first.parent.iterdir())
    assert done == sorted(done), "progress went back"
    assert {t for _, t in seen} == {total} and done[-1] == total


def test_import_progress_ends_when_the_import_is_searchable_whole(tmp_path: Path) -> None:
    """The bar reaches its end only when the entries large batches leave for the end (the
    trigram and surroundings indexes) are made: it sat at 100% for some seconds of a long
    import before (1.6 s of 11 on a 38 MB transcript), with no word of what it was doing."""
    from lossless.sample import write_session

    transcript = write_session(tmp_path / "long.jsonl", 300, session_id="long")
    with Engine.open(tmp_path / "p.db", config=Config()) as engine:
        behind_at_the_end: list[int] = []
        seen: list[int] = []

        def progress(done: int, total: int) -> None:
            seen.append(done)
            if done == total:
                behind_at_the_end.append(engine.store.pending_index_rows())

        engine.import_path(transcript, progress=progress)
    assert seen == sorted(seen) and seen[-1] == transcript.stat().st_size
    assert behind_at_the_end and set(behind_at_the_end) == {0}, behind_at_the_end
