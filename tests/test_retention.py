"""Retention (issue 48): ``lossless prune`` archives old tool outputs to compressed files and
every archived message still reads back exactly; restore, forget, the cap, doctor, and a prune
killed anywhere, on both back ends."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine
from lossless.config import RetentionConfig
from lossless.errors import StoreError
from lossless.sample import write_session
from lossless.summarize import ScriptedSummarizer, SummaryRequest

CHILD = Path(__file__).with_name("forget_child.py")
#: Archive the tool outputs older than about nine seconds (the sample's are from March).
POLICY = RetentionConfig(
    archive_after_days=0.0001, kinds=("tool_outputs",), batch=40, context_idle_days=0
)
PHRASE = "ossifrage-lanthorn"  # found nowhere else


def fill(target: str, data_dir: Path, folder: Path) -> str:
    """A Claude Code session of 60 turns (tool outputs of about 1.5 kB) imported and
    compacted, and a conversation whose tool output holds PHRASE past its start; the
    session's id."""
    path = write_session(
        folder / "session.jsonl", 60, format="claude_code", session_id="sess", payload_bytes=1500
    )
    config = Config().replace(data_dir=str(data_dir), fresh_tail_count=6)
    with Engine.open(target, config=config) as engine:
        engine.import_path(str(path))
        engine.compact("sess")
        for i in range(6):
            at = {"created_at": datetime(2026, 4, 1, 9, i, tzinfo=UTC)}
            engine.ingest(
                "vault", {"role": "user", "content": f"step {i}: " + "filler " * 30}, **at
            )
            engine.ingest(
                "vault",
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "read", "arguments": json.dumps({"n": i})},
                        }
                    ],
                },
                **at,
            )
            # Line and paragraph separators a JSON line may hold as they are (U+2028, U+0085).
            body = "row\u2028 " * 200 + (PHRASE if i == 2 else "plain\x85\u2029") + " end"
            engine.ingest(
                "vault", {"role": "tool", "tool_call_id": f"call_{i}", "content": body}, **at
            )
        engine.compact("vault")
        engine.finish_indexes()
    return "sess"


def snapshot(engine: Engine) -> dict[str, Any]:
    """What a person or a model can read of the store: every message exactly, the live
    summaries, each conversation's assembled context."""
    out: dict[str, Any] = {}
    for stats in engine.store.list_conversations():
        conv = stats.conversation
        out[conv.session_id] = {
            "messages": [repr(m) for m in engine.messages(conv.session_id)],
            "sources": json.dumps([m.to_source() for m in engine.messages(conv.session_id)]),
            "context": json.dumps(
                engine.assemble(conv.session_id, token_budget=200_000).messages, sort_keys=True
            ),
        }
    out["summaries"] = sorted(s.content for s in engine.store.live_summaries(None))
    return out


def stored_rows(engine: Engine) -> list[Any]:
    """The message and part rows as the store holds them (what a restore must give back)."""
    return engine.store.fetchall(
        "SELECT message_id, content, envelope, metadata, archived_at FROM messages"
        " ORDER BY message_id"
    ) + engine.store.fetchall(
        "SELECT part_id, message_id, ordinal, text, tool_input, tool_output, raw"
        " FROM message_parts ORDER BY part_id"
    )


def archived(engine: Engine) -> list[int]:
    rows = engine.store.fetchall(
        "SELECT message_id FROM messages WHERE archived_at IS NOT NULL ORDER BY message_id"
    )
    return [int(r[0]) for r in rows]


def archive_text(folder: Path) -> str:
    """Every archive file in *folder*, decompressed."""
    return "".join(
        gzip.decompress(p.read_bytes()).decode() for p in sorted(folder.glob("archive-*"))
    )


@pytest.fixture
def filled(
    backend: str, new_db: Callable[[], str], tmp_path: Path
) -> Callable[[str], tuple[str, Path]]:
    """``filled(name)``: a filled store of its own and its data folder."""
    template = tmp_path / "template"
    if backend == "sqlite":
        template.mkdir()
        fill(str(template / "t.db"), template / "data", template)

    def make(name: str) -> tuple[str, Path]:
        home = tmp_path / name
        if backend == "sqlite":
            shutil.copytree(template, home)
            return str(home / "t.db"), home / "data"
        home.mkdir()
        target = new_db()
        fill(target, home / "data", home)
        return target, home / "data"

    return make


@pytest.fixture
def opened(filled: Callable[[str], tuple[str, Path]]) -> Iterator[Engine]:
    target, data = filled("one")
    config = Config().replace(data_dir=str(data), retention=POLICY.__dict__)
    with Engine.open(target, config=config) as engine:
        yield engine


def test_archived_tool_outputs_read_back_exactly_and_the_summaries_stay(opened: Engine) -> None:
    engine = opened
    before = snapshot(engine)
    rows_before = stored_rows(engine)
    plan = engine.prune(dry_run=True)
    # A dry run says what would move, with bytes, and changes nothing.
    assert plan.messages > 20 and plan.rules[0].text_bytes > plan.messages * 1000
    assert stored_rows(engine) == rows_before
    assert not engine.archive_dir.exists() or not list(engine.archive_dir.iterdir())

    report = engine.prune()
    ids = archived(engine)
    assert report.messages == plan.messages == len(ids)
    assert len(report.rules[0].archives) == len(engine.archives()) >= 2  # batches of 40
    assert all((engine.archive_dir / a.name).is_file() for a in engine.archives())
    # Only tool outputs, only messages out of the context and under a summary.
    for message in engine.store.get_messages_by_id(ids):
        assert message.role == "tool" or any(p.type == "tool_result" for p in message.parts)
    in_context = {
        int(r[0])
        for r in engine.store.fetchall(
            "SELECT message_id FROM context_items WHERE item_type = 'message'"
        )
    }
    assert not in_context & set(ids)
    # The store keeps a row with the start of the text; no parts, envelope or host facts.
    for content, envelope, metadata in engine.store.fetchall(
        "SELECT content, envelope, metadata FROM messages WHERE archived_at IS NOT NULL"
    ):
        assert len(content) <= 220 and envelope is None and metadata is None
    assert not engine.store.fetchall(
        "SELECT 1 FROM message_parts p JOIN messages m ON m.message_id = p.message_id"
        " WHERE m.archived_at IS NOT NULL"
    )
    # Everything a reader sees is as it was: messages, sources, context, summaries.
    assert snapshot(engine) == before
    assert engine.check() == []
    # The vault's tool output is archived, found by its first words, and read back whole.
    vault = [m for m in engine.messages("vault") if m.message_id in ids and PHRASE in m.content]
    assert len(vault) == 1
    assert (
        PHRASE
        not in engine.store.fetchall(
            "SELECT content FROM messages WHERE message_id = ?", (vault[0].message_id,)
        )[0][0]
    )
    assert PHRASE in archive_text(engine.archive_dir)
    # A second prune finds nothing new.
    assert engine.prune().messages == 0


def test_restore_puts_every_row_back_as_it_was(opened: Engine) -> None:
    engine = opened
    rows_before = stored_rows(engine)
    before = snapshot(engine)
    engine.prune()
    names = [a.name for a in engine.archives()]
    assert len(names) >= 2
    # One archive back: its file goes, the others stay.
    engine.restore_archives([names[0]])
    assert [a.name for a in engine.archives()] == names[1:]
    assert not (engine.archive_dir / names[0]).exists()
    assert engine.restore_archives(every=True) > 0
    assert archived(engine) == [] and engine.archives() == []
    assert list(engine.archive_dir.glob("archive-*")) == []
    assert stored_rows(engine) == rows_before
    assert snapshot(engine) == before
    assert engine.check() == []
    with pytest.raises(Exception, match="no archive"):
        engine.restore_archives(["archive-nothing.jsonl.gz"])


def test_a_forget_takes_archived_text_out_of_the_archive_files(opened: Engine) -> None:
    engine = opened
    engine.prune()
    assert PHRASE in archive_text(engine.archive_dir)
    kept = [a.name for a in engine.archives()]
    report = engine.forget(matching=PHRASE)
    assert report.messages == 1
    assert PHRASE not in archive_text(engine.archive_dir)
    # The archive that held it was written again under a new name; the others are as they were.
    now = [a.name for a in engine.archives()]
    assert len(set(kept) - set(now)) == 1 and len(set(now) - set(kept)) <= 1
    assert sorted(p.name for p in engine.archive_dir.glob("archive-*")) == sorted(now)
    gone = [m for m in engine.messages("vault") if m.forgotten_at is not None]
    assert len(gone) == 1 and gone[0].content == ""
    # The other archived messages still read back, and the store is whole.
    assert all(m.content for m in engine.store.get_messages_by_id(archived(engine)))
    assert engine.check() == []


def test_doctor_names_a_missing_archive_and_repairs_a_stray_one(opened: Engine) -> None:
    engine = opened
    engine.prune()
    first = engine.archives()[0]
    path = engine.archive_dir / first.name
    moved = path.with_name("elsewhere.gz")
    path.rename(moved)
    problems = engine.check()
    assert [(p.check, p.ids) for p in problems] == [("archives", first.name)]
    one = engine.store.archived_ids([first.name])[0]
    with pytest.raises(StoreError, match="which is missing: put the archive file back"):
        engine.store.get_message(one)
    moved.rename(path)
    assert engine.check() == []
    # A half-made file no row names (a prune stopped before its transaction), once it is old.
    stray = engine.archive_dir / "archive-20260101T000000-deadbeef.jsonl.gz.partial"
    stray.write_bytes(gzip.compress(b"{}\n"))
    assert engine.check() == []  # young: a live prune's, maybe
    old = time.time() - 3600
    os.utime(stray, (old, old))
    assert [p.check for p in engine.check()] == ["stray archives"]
    assert any("deleted" in line for line in engine.mend())
    assert not stray.exists() and engine.check() == []
    # A whole file no row names: another store's, maybe: said, never deleted.
    other = engine.archive_dir / "archive-20260101T000000-0123abcd.jsonl.gz"
    other.write_bytes(gzip.compress(b"{}\n"))
    os.utime(other, (old, old))
    assert [p.check for p in engine.check()] == ["unnamed archives"]
    engine.mend()
    assert other.exists()


def test_at_the_cap_the_oldest_tool_outputs_go_until_the_store_is_under_the_line(
    backend: str, filled: Callable[[str], tuple[str, Path]]
) -> None:
    target, data = filled("cap")
    with Engine.open(target, config=Config().replace(data_dir=str(data))) as engine:
        size = engine.cap() or None
        assert size is None  # no cap set
        used = sum(engine.store.database_size().values()) - (engine.store.free_bytes() or 0)
    # A cap the store is past the warning line of (80%), by about a fifth of its size.
    cap = int(used / 0.8 * 0.8)
    config = Config().replace(
        data_dir=str(data),
        max_store_bytes=cap,
        retention={"at_cap": True, "kinds": ["tool_outputs"], "batch": 10},
    )
    with Engine.open(target, config=config) as engine:
        assert engine.cap() is not None and engine.cap().near  # type: ignore[union-attr]
        assert any("near or over" in n or "its cap" in n for n in engine.check_notes())
        before = snapshot(engine)
        report = engine.prune()
        assert report.messages > 0
        ids = archived(engine)
        # Oldest first: every archived tool output is older than every one that could go.
        left = engine.store.retention_candidates(
            kinds=["tool_outputs"], before=None, idle_before=None, archive=True, limit=1
        )
        newest = max(m.created_at for m in engine.store.get_messages_by_id(ids))
        assert not left or newest <= left[0][2]
        assert snapshot(engine) == before
        if backend == "sqlite":
            # Measured: the file, VACUUMed, is under the warning line.
            assert engine.cap().share < 0.8  # type: ignore[union-attr]
            assert not engine.cap().near  # type: ignore[union-attr]


def test_prune_from_the_cli(
    filled: Callable[[str], tuple[str, Path]], run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, data = filled("cli")
    monkeypatch.setenv("LOSSLESS_DATA_DIR", str(data))
    result = run_cli("prune", "--dry-run", "--db", target)
    assert result.code == 0 and "the retention policy moves nothing" in result.out
    monkeypatch.setenv("LOSSLESS_RETENTION_ARCHIVE_AFTER_DAYS", "0.0001")
    result = run_cli("prune", "--dry-run", "--json", "--db", target)
    dry = json.loads(result.out)
    assert result.code == 0 and dry["dry_run"] and dry["messages"] > 20
    assert "no archives" in run_cli("archives", "--db", target).out
    result = run_cli("prune", "--json", "--db", target)
    done = json.loads(result.out)
    assert result.code == 0 and done["messages"] == dry["messages"]
    listed = json.loads(run_cli("archives", "--json", "--db", target).out)
    assert sum(a["messages"] for a in listed["archives"]) == done["messages"]
    result = run_cli("archives", "restore", "--all", "--db", target)
    assert result.code == 0, result.err
    assert f"put {done['messages']:,} archived message(s) back" in result.out


# --- killed anywhere ------------------------------------------------------------------------

NAMED = ["archive-written", "in-transaction", "archive-committed", "purging"]


def lossless(
    target: str, data: Path, *args: str, point: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LOSSLESS_DATA_DIR": str(data),
        "LOSSLESS_RETENTION_ARCHIVE_AFTER_DAYS": "0.0001",
        "LOSSLESS_RETENTION_BATCH": "25",
    }
    env.pop("LOSSLESS_DB", None)
    prefix = (
        [sys.executable, str(CHILD), point, "--"] if point else [sys.executable, "-m", "lossless"]
    )
    return subprocess.run(
        [*prefix, "--db", target, *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_a_prune_killed_anywhere_loses_nothing(
    backend: str, filled: Callable[[str], tuple[str, Path]]
) -> None:
    target, data = filled("whole")
    with Engine.open(target, config=Config().replace(data_dir=str(data))) as engine:
        before = snapshot(engine)
    began = time.monotonic()
    done = lossless(target, data, "prune")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    with Engine.open(target, config=Config().replace(data_dir=str(data))) as engine:
        expected = archived(engine)
    points = NAMED + (["vm:40"] if backend == "sqlite" else [])
    points += [f"after:{took * f:.3f}" for f in (0.4, 0.8)]
    for point in points:
        target, data = filled(point.replace(":", "-"))
        killed = lossless(target, data, "prune", point=point)
        if point in NAMED or point.startswith("vm:"):
            assert killed.returncode == -9, (point, killed.stdout, killed.stderr)
        # Whatever was moved reads back as it was; the store is whole.
        with Engine.open(target, config=Config().replace(data_dir=str(data))) as engine:
            assert snapshot(engine) == before, point
            assert engine.check() == [], point
        # The user runs the prune again: it finishes the work.
        again = lossless(target, data, "prune")
        assert again.returncode == 0, (point, again.stderr)
        with Engine.open(target, config=Config().replace(data_dir=str(data))) as engine:
            assert archived(engine) == expected, point
            assert snapshot(engine) == before, point
            assert engine.check() == [], point
            named = {a.name for a in engine.archives()}
            on_disk = {p.name for p in engine.archive_dir.glob("archive-*")}
            # A file a kill left before its transaction is the only extra, and no row names it.
            assert named <= on_disk, point
            assert all(n.endswith(".jsonl.gz") or n.endswith(".partial") for n in on_disk - named)


def test_a_hook_past_the_cap_line_starts_a_prune_that_brings_the_store_under_it(
    backend: str, filled: Callable[[str], tuple[str, Path]], tmp_path: Path
) -> None:
    """With `retention.at_cap`, a host's hook that finds the store past 80% of its cap
    starts `lossless prune --if-free` in a process of its own; the store ends under the line."""
    target, data = filled("hook")
    session = next((Path(__file__).parents[1] / "examples" / "claude-code").glob("*.jsonl"))
    transcript = tmp_path / session.name
    shutil.copy(session, transcript)
    log = tmp_path / "hooks.log"
    with Engine.open(target, config=Config().replace(data_dir=str(data))) as engine:
        size = engine.store.database_size()["database"]
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "LOSSLESS_DATA_DIR": str(data),
        "LOSSLESS_MAX_STORE_BYTES": str(int(size / 0.9)),  # the store at about 90% of it
        "LOSSLESS_RETENTION_AT_CAP": "true",
    }
    env.pop("LOSSLESS_DB", None)
    hook = json.dumps(
        {"session_id": session.stem, "transcript_path": str(transcript), "hook_event_name": "Stop"}
    )
    command = [sys.executable, "-m", "lossless", "--db", target, "hook", "claude-code"]
    ran = subprocess.run(
        [*command, "--log-file", str(log)],
        input=hook,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "`lossless prune` started (retention.at_cap)" in log.read_text()
    deadline = time.monotonic() + 120
    while "moved " not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "moved " in log.read_text(), log.read_text()
    config = Config().replace(
        data_dir=str(data), max_store_bytes=int(size / 0.9), retention={"at_cap": True}
    )
    with Engine.open(target, config=config) as engine:
        assert engine.archives() and archived(engine)
        if backend == "sqlite":
            assert not engine.cap().near  # type: ignore[union-attr]
        assert engine.check() == []


def test_a_summary_written_again_over_archived_messages_reads_their_whole_text(
    opened: Engine,
) -> None:
    """`lossless rewrite` (and `doctor --apply`) summarize a leaf's messages again: the
    summarizer is given an archived message's whole text, not the start the store keeps."""
    engine = opened
    engine.prune()
    (vault,) = [m for m in engine.messages("vault") if PHRASE in m.content]
    assert vault.message_id in archived(engine)
    (leaf,) = [
        s
        for s in engine.store.live_summaries(None, depth=0)
        if vault.message_id in engine.store.summary_sources(s.summary_id)[1]
    ]
    seen: list[str] = []

    def answer(request: SummaryRequest) -> str:
        seen.extend(s.text for s in request.sources)
        return "the vault steps, read again"

    engine.services.summarizer = ScriptedSummarizer(default=answer)
    engine.rewrite([leaf.summary_id], apply=True)
    assert any(PHRASE in text for text in seen), seen
    assert engine.check() == []


def test_what_reads_an_archived_message_through_other_tables_reads_it_whole(
    opened: Engine,
) -> None:
    """The tool log (chat_context_query's executions) and a transplant copy an archived
    message's whole text, not the start the store keeps."""
    engine = opened
    log_before = engine.chat_context_query(conversation="vault", kind="executions").to_dict()
    engine.prune()
    assert engine.chat_context_query(conversation="vault", kind="executions").to_dict() == (
        log_before
    )
    found = engine.chat_context_query(conversation="vault", kind="executions", text="end")
    assert found.to_dict()["executions"], "the log's text filter reads the start it keeps"
    engine.ingest("other", {"role": "user", "content": "a conversation to copy into"})
    engine.transplant("vault", "other", apply=True)
    copies = [m for m in engine.messages("other") if PHRASE in m.content]
    assert len(copies) == 1 and copies[0].content.endswith(" end")
    (source,) = [m for m in engine.messages("vault") if PHRASE in m.content]
    assert copies[0].to_source() == source.to_source()
    assert engine.check() == []


def test_a_missing_archive_stops_a_forget_by_text_that_needs_it_and_no_other(
    opened: Engine,
) -> None:
    engine = opened
    engine.prune()
    for archive in engine.archives():
        (engine.archive_dir / archive.name).rename(engine.archive_dir / (archive.name + ".away"))
    engine.ingest("fresh", {"role": "user", "content": f"a live {PHRASE} note"})
    # A forget within a conversation holding no archived message reads no archive.
    assert engine.forget("fresh", matching=PHRASE).messages == 1
    with pytest.raises(StoreError, match=r"cannot read the archive file .* nothing was forgotten"):
        engine.forget(matching=PHRASE)


def test_a_copy_into_the_same_archive_folder_gets_files_of_its_own(
    new_db: Callable[[], str], backend: str, tmp_path: Path
) -> None:
    """`migrate-store` with one data folder for both stores: the copy's archive rows name
    copies of their own, so a forget in one store never takes a file the other reads."""
    if backend != "sqlite":
        pytest.skip("one pair of back ends is enough: the copy is the same either way")
    from lossless.migrate_store import migrate_store

    data = tmp_path / "data"
    source, target = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    fill(source, data, tmp_path)
    config = Config().replace(data_dir=str(data), retention=POLICY.__dict__)
    with Engine.open(source, config=config) as a:
        a.prune()
        with Engine.open(target, config=config) as b:
            migrate_store(a.store, b.store)
            assert {x.name for x in a.archives()}.isdisjoint(x.name for x in b.archives())
            before = snapshot(b)
            a.forget(matching=PHRASE)
    with Engine.open(target, config=config) as b:
        assert snapshot(b) == before and b.check() == []
        assert any(PHRASE in m.content for m in b.messages("vault"))


def test_a_conversation_left_for_a_month_has_its_context_archived_and_assembled_alike(
    opened: Engine,
) -> None:
    """`retention.context_idle_days`: the messages of an idle conversation's active context
    may go too; assembling it again reads them back, and gives what it gave before."""
    engine = opened
    before = snapshot(engine)
    in_context = {
        int(r[0])
        for r in engine.store.fetchall(
            "SELECT message_id FROM context_items WHERE item_type = 'message'"
        )
    }
    report = engine.prune(policy=RetentionConfig(archive_after_days=0.0001, batch=40))
    ids = set(archived(engine))
    assert report.messages == len(ids) and ids & in_context
    # Only tool outputs, still; the context now reads some of them from the archive files.
    for message in engine.store.get_messages_by_id(sorted(ids)):
        assert message.role == "tool" or any(p.type == "tool_result" for p in message.parts)
    assert snapshot(engine) == before
    assert engine.check() == []
    # A conversation that is not idle keeps its context in the store.
    engine.ingest("vault", {"role": "user", "content": "back again"})
    engine.restore_archives(every=True)
    engine.prune(policy=RetentionConfig(archive_after_days=0.0001, batch=40))
    vault = {m.message_id for m in engine.messages("vault")}
    assert not set(archived(engine)) & vault & in_context


def test_after_a_new_turn_an_idle_conversations_archive_still_restores(opened: Engine) -> None:
    """An idle conversation's newest messages archived, then a new turn stores parts (on
    SQLite a new part takes the largest id stored plus one): a restore still puts every
    archived message back, its parts under ids of their own where those were taken."""
    engine = opened
    before = [m.to_source() for m in engine.messages("vault")]
    engine.prune(policy=RetentionConfig(archive_after_days=0.0001, batch=40))
    assert set(archived(engine)) & {m.message_id for m in engine.messages("vault")[-3:]}
    engine.ingest("vault", {"role": "user", "content": "back again"})
    engine.ingest(
        "vault",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "ls"}}],
        },
    )
    assert engine.restore_archives(every=True) > 0
    assert [m.to_source() for m in engine.messages("vault")][: len(before)] == before
    assert engine.check() == []


def test_the_tool_log_shows_each_executions_own_latest_result(opened: Engine) -> None:
    """A call id used twice (a model may repeat one), and twice in one message: the log's
    output is its own result message's last one, before and after that message is archived."""
    engine = opened
    at = {"created_at": datetime(2026, 5, 1, 9, 0, tzinfo=UTC)}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_r", "type": "function", "function": {"name": "run"}}],
    }
    engine.ingest("reuse", call, **at)
    engine.ingest("reuse", {"role": "tool", "tool_call_id": "call_r", "content": "OLD " * 60}, **at)
    engine.ingest("reuse", {"role": "user", "content": "again please " * 20}, **at)
    engine.ingest("reuse", call, **at)
    engine.ingest(
        "reuse",
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_r", "content": "FIRST " * 40},
                {"type": "tool_result", "tool_use_id": "call_r", "content": "NEWEST " * 40},
            ],
        },
        format="anthropic",
        **at,
    )
    for i in range(12):
        engine.ingest("reuse", {"role": "user", "content": f"later {i} " * 40}, **at)
    engine.compact("reuse")

    def outputs() -> list[str]:
        found = engine.chat_context_query(conversation="reuse", kind="executions")
        return [e.output or "" for e in found.executions]

    before = outputs()
    assert before and all(o.startswith("NEWEST") for o in before), before
    engine.prune(policy=RetentionConfig(archive_after_days=0.0001, batch=40))
    assert outputs() == before


def test_a_dry_run_at_the_cap_counts_what_the_prune_then_moves(
    filled: Callable[[str], tuple[str, Path]],
) -> None:
    target, data = filled("dry-cap")
    with Engine.open(target, config=Config().replace(data_dir=str(data))) as engine:
        used = sum(engine.store.database_size().values()) - (engine.store.free_bytes() or 0)
    config = Config().replace(
        data_dir=str(data),
        max_store_bytes=int(used * 0.7),  # the cap's rules must free a good part of it
        retention={"at_cap": True, "kinds": ["tool_outputs"], "batch": 10},
    )
    with Engine.open(target, config=config) as engine:
        dry = engine.prune(dry_run=True)
        real = engine.prune()
        assert [(r.rule, r.messages) for r in dry.rules] == [
            (r.rule, r.messages) for r in real.rules
        ]
        assert len(dry.rules) == 2 and dry.rules[1].messages > 0
