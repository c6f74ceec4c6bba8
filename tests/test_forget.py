"""lossless forget: the text leaves everything that held it, on both back ends; tombstones keep
the DAG, the context and a transcript's reconciliation whole; the SQLite files hold no byte of
it afterwards."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.errors import ArgumentError, NotFoundError
from lossless.sample import write_session
from lossless.summarize import ScriptedSummarizer

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    large_file_token_threshold=200,
)
WORD = "quokkaplinth"  # found nowhere else
FILE_WORD = "zanzibarquill"


def seeded(engine: Engine) -> list[int]:
    """A conversation whose messages 5..8 hold WORD (a text, a tool call and its result, a
    large file), compacted, with a session summary; returns its message ids."""
    for i in range(4):
        engine.ingest("s", {"role": "user", "content": f"plain note {i}: " + "filler " * 12})
    engine.ingest("s", {"role": "user", "content": f"remember {WORD} for the vault"})
    engine.ingest(
        "s",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_q",
                    "type": "function",
                    "function": {"name": "save", "arguments": json.dumps({"word": WORD})},
                }
            ],
        },
    )
    engine.ingest("s", {"role": "tool", "tool_call_id": "call_q", "content": f"saved {WORD}"})
    body = "\n".join(f"line {i} {FILE_WORD} {WORD}" for i in range(120))
    engine.ingest("s", {"role": "user", "content": f'<file name="notes.txt">{body}</file>'})
    for i in range(8):
        engine.ingest("s", {"role": "user", "content": f"later note {i}: " + "filler " * 12})
    engine.compact("s")
    engine.summarize_session("s")
    return [m.message_id for m in engine.messages("s")]


def everything_said(engine: Engine) -> str:
    """What a person or a model can get out of the store about conversation s."""
    out = [json.dumps([m.to_source() for m in engine.messages("s")])]
    out += [s.content for s in engine.store.live_summaries(None)]
    out += [json.dumps(engine.assemble("s", token_budget=100_000).messages)]
    out += [json.dumps(engine.chat_context_query(conversation="s").to_dict())]
    out += [
        v.summary for v in engine.store.session_summaries(engine.conversation("s").conversation_id)
    ]
    return "\n".join(out)


@pytest.fixture
def engine(new_db: Callable[[], str], tmp_path: Path) -> Any:
    config = SMALL.replace(data_dir=str(tmp_path / "data"))
    with Engine.open(new_db(), config=config, summarizer=ScriptedSummarizer()) as eng:
        yield eng


def test_forgetting_a_range_takes_its_text_out_of_everything(engine: Engine) -> None:
    ids = seeded(engine)
    assert WORD in everything_said(engine)
    assert engine.grep(WORD).hits and engine.large_files("s")
    files = [engine.files_dir / f.storage_path for f in engine.large_files("s")]
    assert all(p.exists() for p in files)

    plan = engine.forget("s", messages=(ids[4], ids[7]), dry_run=True)
    assert plan.messages == 4 and plan.summaries >= 1 and plan.files == 1
    assert plan.tool_executions == 1 and plan.session_summaries == 1
    assert WORD in everything_said(engine)  # a dry run changes nothing

    done = engine.forget("s", messages=(ids[4], ids[7]))
    assert done.messages == 4 and done.forgotten_at is not None
    said = everything_said(engine)
    assert WORD not in said and FILE_WORD not in said
    for mode in ("full_text", "regex"):
        assert engine.grep(WORD, mode=mode).hits == []  # type: ignore[arg-type]
    assert engine.grep(WORD[2:9]).hits == []  # the substring index too
    assert engine.grep(FILE_WORD, scope="files").hits == []
    assert not any(p.exists() for p in files) and engine.large_files("s") == []
    # Tombstones keep their places; the others are untouched.
    kept = engine.messages("s")
    assert [m.message_id for m in kept] == ids
    assert [m.content for m in kept[4:8]] == ["", "", "", ""]
    assert kept[3].content.startswith("plain note 3") and kept[8].content.startswith("later")
    # The summaries that covered them say what happened, and when.
    markers = [s for s in engine.store.live_summaries(None) if s.model == "forgotten"]
    assert markers and all(done.forgotten_at[:10] in s.content for s in markers)
    log = engine.store.forgotten_log()
    assert log[0]["messages"] == 4 and WORD not in json.dumps(log)
    assert engine.check() == []
    # The search still works around the hole, and the next turn goes on.
    assert engine.grep("later note").hits
    engine.ingest("s", {"role": "user", "content": "after the forget"})
    assert engine.check() == []


def test_matching_forgets_what_holds_the_text_and_a_masked_secret_by_its_value(
    engine: Engine,
) -> None:
    key = "sk-proj-" + "Q7w" * 10
    engine.ingest("a", {"role": "user", "content": f"use {key} for staging"})
    engine.ingest("a", {"role": "user", "content": "nothing to see"})
    engine.ingest("b", {"role": "user", "content": f"Remember {WORD.upper()} too"})
    # The secret is masked: the stored text does not hold it, its kept original does.
    assert key not in engine.messages("a")[0].content
    report = engine.forget(matching=key)
    assert report.messages == 1 and report.originals == 1
    assert engine.grep(key, reveal=True).hits == []
    assert engine.messages("a")[1].content == "nothing to see"
    # Any case, and only where asked.
    assert engine.forget("a", matching=WORD).messages == 0
    assert engine.forget(matching=WORD).messages == 1
    assert engine.messages("b")[0].content == ""
    assert engine.check() == []


def test_forgetting_the_first_messages_of_a_context_keeps_it_whole(engine: Engine) -> None:
    """Found by the fuzzer: the context's first items forgotten left ordinals from 2 up,
    which the renumbering moved onto each other (a UNIQUE violation: nothing forgotten)."""
    ids = list(
        engine.ingest_batch(
            "f", [{"role": "user", "content": f"m{i}"} for i in range(4)]
        ).message_ids
    )
    engine.forget("f", messages=(ids[0], ids[1]))
    conv = engine.conversation("f").conversation_id
    assert [i.ordinal for i in engine.store.context(conv)] == [0, 1]
    assert [m.content for m in engine.messages("f")] == ["", "", "m2", "m3"]
    assert engine.check() == []


def test_bad_requests_say_what_to_do(engine: Engine) -> None:
    ids = seeded(engine)
    with pytest.raises(NotFoundError, match="lossless show"):
        engine.forget("s", messages=(ids[-1] + 10, ids[-1] + 20))
    with pytest.raises(ArgumentError, match="lower first"):
        engine.forget("s", messages=(ids[5], ids[2]))
    with pytest.raises(ArgumentError, match="empty"):
        engine.forget(matching="   ")
    with pytest.raises(NotFoundError):
        engine.forget("nobody")


def test_the_bytes_are_gone_from_the_sqlite_files(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with Engine.open(db, config=SMALL, summarizer=ScriptedSummarizer()) as engine:
        engine.ingest("k", {"role": "user", "content": "keep this one"})
        ids = seeded(engine)

        def on_disk() -> bytes:
            return b"".join(p.read_bytes() for p in tmp_path.glob("f.db*") if p.is_file())

        assert WORD.encode() in on_disk()  # the check can fail
        engine.forget("s", messages=(ids[0], ids[-1]))
        assert engine.check() == []
        data = on_disk()
        assert WORD.encode() not in data and b"plain note" not in data
        assert engine.grep("keep this").hits


def test_a_forgotten_transcript_is_not_imported_again_unless_asked(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_session(tmp_path / "t.jsonl", 30, session_id="t")
    first = engine.import_path(path)[0]
    stored = engine.messages("t")
    assert first.imported == len(stored) > 0
    engine.forget("t")
    again = engine.import_path(path)[0]
    assert again.imported == 0
    assert [m.content for m in engine.messages("t")] == [""] * len(stored)
    assert engine.conversation("t").title is None
    # With --allow-reimport, the next import stores the transcript again.
    engine.forget("t", allow_reimport=True)
    back = engine.import_path(path)[0]
    assert back.imported == len(stored)
    assert [m.content for m in engine.messages("t")][len(stored) :] == [m.content for m in stored]
    assert engine.check() == []


def test_the_cli_asks_first_and_says_what_went(run_cli: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "c.db")
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps(
            [
                {"role": "user", "content": "my locker code is 7431"},
                {"role": "assistant", "content": "noted"},
            ]
        )
    )
    assert run_cli("--db", db, "import", str(path), "--format", "messages").code == 0
    dry = run_cli("--db", db, "forget", "m", "--matching", "locker code", "--dry-run")
    assert dry.code == 0 and "would forget 1 message(s)" in dry.out and "msg#1" in dry.out
    refused = run_cli("--db", db, "forget", "m", "--matching", "locker code")
    assert refused.code == 2 and "--yes" in refused.err
    done = run_cli("--db", db, "forget", "m", "--matching", "locker code", "--yes", "--json")
    assert done.code == 0 and json.loads(done.out)["messages"] == 1
    shown = run_cli("--db", db, "show", "m")
    assert "7431" not in shown.out and "noted" in shown.out
    assert run_cli("--db", db, "doctor").code == 0
    bad = run_cli("--db", db, "forget", "m", "--messages", "x..y")
    assert bad.code == 2 and "msg#12..msg#40" in bad.err


def test_an_export_keeps_tombstones_and_its_import_keeps_the_numbering(
    engine: Engine, new_db: Callable[[], str], tmp_path: Path
) -> None:
    """Issue 45, point 7: a forgotten message is a tombstone in the export too, so importing
    the export into a new store gives every message its number back (not 9 -> 8)."""
    for i in range(1, 11):
        text = f"message {i}" + (f" with {WORD}" if i == 5 else "")
        engine.ingest("e", {"role": "user" if i % 2 else "assistant", "content": text})
    engine.forget("e", matching=WORD)
    dump = "".join(engine.export("e"))
    assert WORD not in dump
    lines = [json.loads(x) for x in dump.splitlines()]
    gone = [x for x in lines if x.get("forgotten_at")]
    assert [(x["seq"], x["message"]) for x in gone] == [(5, {"role": "user", "content": ""})]
    path = tmp_path / "e.jsonl"
    path.write_text(dump)
    with Engine.open(new_db(), config=SMALL) as other:
        other.import_path(path)
        back = other.messages("e")
        assert [(m.seq, m.content) for m in back] == [
            (m.seq, m.content) for m in engine.messages("e")
        ]
        assert [m.seq for m in back if m.forgotten_at] == [5]
        assert [m.message_id for m in back] == [m.message_id for m in engine.messages("e")]
        # Out of the active context, as a forget leaves it; the store is consistent.
        assembled = json.dumps(other.assemble("e", token_budget=10_000).messages)
        assert "message 4" in assembled and "message 6" in assembled
        assert '"content": ""' not in assembled
        assert other.check() == []
        again = [json.loads(x) for x in "".join(other.export("e")).splitlines()]
        assert [x for x in again if "seq" in x] == [x for x in lines if "seq" in x]
        assert other.import_path(path)[0].imported == 0  # and a second import adds nothing
    markdown = "".join(engine.export("e", format="markdown"))
    assert "forgotten on" in markdown and WORD not in markdown
    api = json.dumps(json.loads("".join(engine.export("e", format="openai"))))
    assert "message 6" in api and '"content": ""' not in api


@pytest.mark.parametrize("whole", [True, False])
def test_doctor_is_clean_after_a_forget(tmp_path: Path, run_cli: Any, whole: bool) -> None:  # type: ignore[no-untyped-def]
    """A forget's markers are the owner's doing, not damage: doctor says ok afterwards,
    whether the whole compacted conversation went or a part of it."""
    db = tmp_path / "f.db"
    config = SMALL.replace(data_dir=str(tmp_path / "data"))
    with Engine.open(db, config=config) as engine:
        ids = seeded(engine)
        assert engine.context_summaries("s")  # compacted: there are summaries to mark
    what = ["s"] if whole else ["s", "--messages", f"msg#{ids[4]}..msg#{ids[7]}"]
    done = run_cli("--db", str(db), "forget", *what, "--yes")
    assert done.code == 0, done
    checked = run_cli("--db", str(db), "doctor")
    assert checked.code == 0 and "degraded" not in checked.out, checked
