"""``lossless export`` and ``Engine.export``: the JSONL that imports back exactly (a property
over generated conversations, on each back end), Markdown for people, the providers' arrays,
files written whole or not at all, and ``show`` through a pager on a terminal."""

from __future__ import annotations

import json
import os
import pty
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lossless
from lossless import Config, Engine, Message, NotFoundError, Part
from lossless.errors import ArgumentError
from lossless.export import FORMATS, export, write_atomically
from lossless.model import HOST_META, StoredMessage

# --- what "the same" means -----------------------------------------------------------------


def message_row(m: StoredMessage) -> tuple[Any, ...]:
    """Everything a stored message is, but its store-local ids."""
    return (
        m.seq,
        m.role,
        m.content,
        m.token_count,
        m.created_at,
        m.external_id,
        m.source_format,
        m.envelope,
        m.metadata,
        m.host_meta,
        tuple(
            (
                p.ordinal,
                p.slot,
                p.type,
                p.text,
                p.tool_call_id,
                p.tool_name,
                p.tool_input,
                p.tool_output,
                p.is_error,
                p.raw,
            )
            for p in m.parts
        ),
        m.to_source(),
    )


def snapshot(engine: Engine) -> dict[str, Any]:
    """Every conversation with messages (by session id: its family, title, status) and its
    messages, in order."""
    return {
        c.session_id: (
            (c.session_key, c.title, c.status),
            [message_row(m) for m in engine.messages(c.conversation_id)],
        )
        for c in (stats.conversation for stats in engine.conversations() if stats.message_count)
    }


def round_trip(source: Engine, target_db: str, path: Path, **kwargs: Any) -> Engine:
    """Export *source* (everything unless told) to *path*, import it into *target_db*."""
    path.write_bytes("".join(source.export(**kwargs)).encode("utf-8"))
    target = Engine.open(target_db, config=source.config, create=True)
    reports = target.import_path(path)
    assert all(r.format == "lossless" and not r.problems for r in reports), reports
    return target


# --- generated conversations ---------------------------------------------------------------

TEXT = st.text(max_size=30)
NAME = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=8)
SCALAR = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT
SCALAR |= st.floats(allow_nan=False, allow_infinity=False)
JSONISH = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
ARGS = st.dictionaries(NAME, JSONISH, max_size=3)


def chat(role: str, **fields: Any) -> st.SearchStrategy[tuple[Any, str | None]]:
    return st.fixed_dictionaries({"role": st.just(role), **fields}).map(lambda m: (m, None))


TEXT_BLOCK = st.fixed_dictionaries({"type": st.just("text"), "text": TEXT})
IMAGE_URL = st.fixed_dictionaries(
    {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": NAME})}
)
CALL = st.fixed_dictionaries(
    {
        "id": NAME,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": NAME, "arguments": ARGS.map(json.dumps)}),
    }
)
ANTHROPIC_BLOCK = st.one_of(
    TEXT_BLOCK,
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": TEXT, "signature": NAME}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": NAME, "name": NAME, "input": ARGS}),
)
TOOL_RESULT = st.fixed_dictionaries(
    {
        "type": st.just("tool_result"),
        "tool_use_id": NAME,
        "content": TEXT | st.lists(TEXT_BLOCK, max_size=2),
        "is_error": st.booleans(),
    }
)
RESPONSES_ITEM = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": NAME,
            "name": NAME,
            "arguments": ARGS.map(json.dumps),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": NAME, "output": TEXT}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("message"),
            "role": st.just("assistant"),
            "content": st.lists(
                st.fixed_dictionaries({"type": st.just("output_text"), "text": TEXT}),
                min_size=1,
                max_size=2,
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("reasoning"),
            "id": NAME,
            "summary": st.lists(
                st.fixed_dictionaries({"type": st.just("summary_text"), "text": TEXT}),
                max_size=2,
            ),
        }
    ),
)
LOSSLESS_PART = st.one_of(
    st.builds(Part, type=st.just("text"), text=TEXT),
    st.builds(
        Part,
        type=st.just("tool_call"),
        tool_call_id=NAME,
        tool_name=NAME,
        tool_input=ARGS,
    ),
    st.builds(
        Part,
        type=st.just("tool_result"),
        tool_call_id=NAME,
        tool_output=TEXT,
        is_error=st.booleans(),
    ),
)

#: (message, format to ingest it as): every shape lossless reads, plain to many-parted.
MESSAGE = st.one_of(
    chat("user", content=TEXT),  # plain text; the empty string too
    chat("assistant", content=TEXT),
    chat("system", content=TEXT),
    chat("user", content=st.lists(TEXT_BLOCK | IMAGE_URL, min_size=1, max_size=3)),
    chat("assistant", content=st.none() | TEXT, tool_calls=st.lists(CALL, min_size=1, max_size=2)),
    chat("tool", tool_call_id=NAME, content=TEXT),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.lists(ANTHROPIC_BLOCK, min_size=1)}
    ).map(lambda m: (m, "anthropic")),
    st.fixed_dictionaries(
        {"role": st.just("user"), "content": st.lists(TOOL_RESULT, min_size=1, max_size=2)}
    ).map(lambda m: (m, "anthropic")),
    RESPONSES_ITEM.map(lambda m: (m, None)),
    st.builds(
        Message,
        role=st.sampled_from(["user", "assistant", "tool"]),
        content=TEXT,
        parts=st.lists(LOSSLESS_PART, max_size=3).map(tuple),
        created_at=st.none() | st.datetimes(min_value=datetime(1990, 1, 1), timezones=st.just(UTC)),
        metadata=st.dictionaries(NAME, SCALAR, max_size=2),
    ).map(lambda m: (m, "lossless")),
    st.fixed_dictionaries({"type": st.just("a_future_item"), "payload": JSONISH}).map(
        lambda m: (m, None)
    ),
)

WHEN = st.none() | st.datetimes(
    min_value=datetime(1990, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
)


@st.composite
def conversation(draw: st.DrawFn) -> dict[str, Any]:
    """A conversation: family, title, status, and messages each with or without an external
    id, a time, metadata, a host record kind."""
    messages = []
    for n, (message, fmt) in enumerate(draw(st.lists(MESSAGE, min_size=1, max_size=6))):
        messages.append(
            {
                "message": message,
                "format": fmt,
                "external_id": draw(st.none() | TEXT.map(lambda t, n=n: f"{n}:{t}")),
                "created_at": draw(WHEN),
                "metadata": draw(st.none() | st.dictionaries(NAME, JSONISH, max_size=2)),
                "host_meta": draw(st.none() | st.sampled_from(HOST_META)),
            }
        )
    return {
        "session_key": draw(st.sampled_from([None, "family"])),
        "title": draw(st.none() | TEXT.filter(bool)),
        "status": draw(st.sampled_from(["active", "archived"])),
        "messages": messages,
    }


def store(engine: Engine, conversations: list[dict[str, Any]]) -> None:
    for n, conv in enumerate(conversations):
        session = f"session-{n}-é"
        engine.conversation(session, create=True, session_key=conv["session_key"])
        for m in conv["messages"]:
            norm = engine.normalize(
                m["message"],
                format=m["format"],
                external_id=m["external_id"],
                created_at=m["created_at"],
                metadata=m["metadata"],
            )
            norm.host_meta = m["host_meta"]
            engine.ingest_batch(session, [norm])
        engine.update_conversation(session, title=conv["title"], status=conv["status"])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(conversations=st.lists(conversation(), min_size=1, max_size=3))
def test_a_jsonl_export_imports_into_a_fresh_store_as_every_message_and_part_exactly(
    new_db: Callable[[], str], tmp_path: Path, conversations: list[dict[str, Any]]
) -> None:
    with Engine.open(new_db(), config=Config(), create=True) as source:
        store(source, conversations)
        path = tmp_path / "export.jsonl"
        with round_trip(source, new_db(), path) as target:
            assert snapshot(target) == snapshot(source)
            # Importing it again stores nothing twice.
            target.import_path(path)
            assert snapshot(target) == snapshot(source)


# --- fixed cases ---------------------------------------------------------------------------


@pytest.fixture
def source(db: str) -> Iterator[Engine]:
    """A store with two conversations of one family, tool calls and reasoning."""
    with Engine.open(db, config=Config(), create=True) as engine:
        engine.conversation("main", create=True, session_key="fam")
        engine.ingest("main", {"role": "user", "content": "list the files"})
        engine.ingest(
            "main",
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "ls will do", "signature": "sig"},
                    {"type": "text", "text": "Listing them."},
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}},
                ],
            },
        )
        engine.ingest(
            "main",
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py\nb.py"}],
            },
        )
        engine.ingest("main", {"role": "assistant", "content": "Two files: a.py and b.py."})
        engine.update_conversation("main", title="Listing files")
        engine.conversation("main:side", create=True, session_key="fam")
        engine.ingest("main:side", {"role": "user", "content": "a side question"})
        engine.conversation("other", create=True)
        engine.ingest("other", {"role": "user", "content": "not in the family"})
        yield engine


def test_a_whole_store_export_gives_each_conversation_its_session_family_title_and_status(
    source: Engine, new_db: Callable[[], str], tmp_path: Path
) -> None:
    source.archive("other")
    with round_trip(source, new_db(), tmp_path / "all.jsonl") as target:
        assert snapshot(target) == snapshot(source)
        convs = {c.conversation.session_id: c.conversation for c in target.conversations()}
        assert convs["main"].title == "Listing files"
        assert convs["main"].session_key == convs["main:side"].session_key == "fam"
        assert convs["other"].status == "archived"


def test_a_family_export_holds_the_family_and_nothing_else(
    source: Engine, new_db: Callable[[], str], tmp_path: Path
) -> None:
    path = tmp_path / "fam.jsonl"
    with round_trip(source, new_db(), path, conversation="main:side", family=True) as target:
        assert [c.conversation.session_id for c in target.conversations()] == [
            "main",
            "main:side",
        ]
        family = snapshot(source)
        del family["other"]
        assert snapshot(target) == family


def test_a_claude_code_transcript_survives_export_and_import(
    db: str, new_db: Callable[[], str], tmp_path: Path
) -> None:
    from lossless.sample import generate_session

    session = "0b6c1a2e-0000-4000-8000-000000000001"
    lines = list(generate_session(4, format="claude_code", session_id=session))
    last = lines[-1]["uuid"]
    lines += [
        {
            **lines[0],
            "uuid": "cmd-1",
            "parentUuid": last,
            "message": {"role": "user", "content": "<command-name>/init</command-name>"},
        },
        {**lines[0], "uuid": "side-1", "parentUuid": None, "isSidechain": True},
        {"type": "summary", "summary": "Pagination work", "leafUuid": "cmd-1"},
    ]
    transcript = tmp_path / f"{session}.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with Engine.open(db, config=Config(), create=True) as engine:
        engine.import_path(transcript)
        kinds = {m.host_meta for m in engine.messages(session)}
        assert "command" in kinds
        assert len(engine.conversations()) == 2  # the sidechain in the family
        with round_trip(engine, new_db(), tmp_path / "cc.jsonl") as target:
            assert snapshot(target) == snapshot(engine)
            assert target.conversation(session).title == "Pagination work"


def test_a_message_kept_outside_its_text_is_exported_whole_and_stored_the_same_again(
    new_db: Callable[[], str], tmp_path: Path
) -> None:
    config = Config().replace(large_file_token_threshold=100)
    big = "\n".join(f"line {n}: " + "data " * 20 for n in range(200))
    with Engine.open(new_db(), config=config, create=True) as engine:
        engine.ingest("s", {"role": "tool", "tool_call_id": "c1", "content": big})
        stored = engine.messages("s")[0]
        assert "[large file file_" in stored.content  # the file is outside the text
        text = "".join(engine.export("s"))
        assert json.loads(text.splitlines()[2])["message"]["content"] == big
        assert big in "".join(engine.export("s", format="markdown"))
        assert json.loads("".join(engine.export("s", format="openai")))[0]["content"] == big
        with round_trip(engine, new_db(), tmp_path / "big.jsonl") as target:
            assert snapshot(target) == snapshot(engine)
            assert target.large_files("s")[0].byte_size == engine.large_files("s")[0].byte_size


def test_half_a_surrogate_pair_is_exported_as_json_escapes_and_imported_back(
    engine: Engine, new_db: Callable[[], str], tmp_path: Path
) -> None:
    engine.ingest("s", {"role": "user", "content": "half \ud83d a pair"})
    text = "".join(engine.export("s"))
    text.encode("utf-8")  # writable as UTF-8
    assert "\\ud83d" in text
    "".join(engine.export("s", format="markdown")).encode("utf-8")
    with round_trip(engine, new_db(), tmp_path / "s.jsonl") as target:
        assert snapshot(target) == snapshot(engine)


def test_an_export_of_a_newer_version_is_refused_saying_to_upgrade(
    engine: Engine, tmp_path: Path
) -> None:
    engine.ingest("s", {"role": "user", "content": "hi"})
    lines = "".join(engine.export("s")).splitlines()
    header = json.loads(lines[0])
    path = tmp_path / "future.jsonl"
    path.write_text("\n".join([json.dumps({**header, "version": 99}), *lines[1:]]) + "\n")
    (report,) = engine.import_path(path)
    assert report.mode == "failed"
    assert "upgrade lossless" in report.problems[0].reason


# --- for people, and for the providers -----------------------------------------------------


def test_markdown_has_a_heading_per_conversation_and_folds_reasoning_and_tools(
    source: Engine,
) -> None:
    text = "".join(source.export("main", family=True, format="markdown"))
    assert text.startswith("# Listing files\n")
    assert "\n# main:side\n" in text
    assert "session `main`" in text and "family `fam`" in text and "4 messages" in text
    roles = [line.split(" · ")[0] for line in text.splitlines() if line.startswith("### ")]
    assert roles == ["### user", "### assistant", "### tool", "### assistant", "### user"]
    assert "<summary>reasoning</summary>\n\nls will do\n" in text
    assert '<summary>tool call: bash</summary>\n\n```json\n{\n  "cmd": "ls"\n}\n```' in text
    assert "<summary>tool output: bash</summary>\n\n```\na.py\nb.py\n```" in text
    assert text.index("list the files") < text.index("Listing them.") < text.index("Two files")
    first = source.messages("main")[0]
    assert f"### user · {first.created_at[:10]} {first.created_at[11:19]} UTC" in text


def test_markdown_leaves_the_summaries_out(db: str) -> None:
    config = Config().replace(
        fresh_tail_count=2, leaf_chunk_tokens=150, leaf_target_tokens=20, leaf_min_fanout=2
    )
    with Engine.open(db, config=config, create=True) as engine:
        for n in range(30):
            engine.ingest("s", {"role": "user", "content": f"question {n} about the parser"})
            engine.ingest("s", {"role": "assistant", "content": f"answer {n}: see parse.py"})
        engine.compact("s")
        summaries = [s for s, _ in engine.context_summaries("s")]
        assert summaries
        text = "".join(engine.export("s", format="markdown"))
        assert text.count("\n### ") == 60
        assert all(s.content not in text for s in summaries)
        assert summaries[0].summary_id not in text


def test_the_openai_array_has_the_tool_call_and_its_answer_in_order(source: Engine) -> None:
    messages = json.loads("".join(source.export("main", format="openai")))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    call = messages[1]["tool_calls"][0]
    assert call["function"] == {"name": "bash", "arguments": '{"cmd": "ls"}'}
    assert messages[2] == {"role": "tool", "tool_call_id": "t1", "content": "a.py\nb.py"}


def test_the_anthropic_array_keeps_its_own_blocks_and_alternates_roles(source: Engine) -> None:
    messages = json.loads("".join(source.export("main", format="anthropic")))
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[1]["content"][0] == {
        "type": "thinking",
        "thinking": "ls will do",
        "signature": "sig",
    }
    assert messages[2]["content"][0]["type"] == "tool_result"


def test_several_conversations_in_a_provider_format_are_a_json_line_each(
    source: Engine,
) -> None:
    lines = "".join(source.export(format="anthropic")).splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["session_id"] for r in rows] == ["main", "main:side", "other"]
    assert rows[1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a side question"}]}
    ]


def test_every_format_writes_each_message_through_the_one_view(source: Engine) -> None:
    def masked(message: StoredMessage) -> StoredMessage:
        parts = tuple(
            replace(p, text="***" if p.text else p.text, raw="***" if p.raw else p.raw)
            for p in message.parts
        )
        return replace(message, content="***", parts=parts, envelope=None)

    conv = source.conversation("other")
    for fmt in FORMATS:
        text = "".join(export(source.services, conv, fmt, view=masked))
        assert "***" in text, fmt
        assert "not in the family" not in text, fmt


# --- errors --------------------------------------------------------------------------------


def test_an_unknown_conversation_or_format_is_refused_before_anything_is_written(
    source: Engine,
) -> None:
    with pytest.raises(NotFoundError, match="lossless conversations"):
        source.export("nobody")
    with pytest.raises(ArgumentError, match="jsonl, markdown, openai, anthropic"):
        source.export("main", format="xml")
    with pytest.raises(ArgumentError, match="name the conversation"):
        source.export(family=True)


def test_a_file_is_replaced_only_once_the_export_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text("the previous export\n")

    def failing() -> Iterator[str]:
        yield "a first line\n"
        raise RuntimeError("the store went away")

    with pytest.raises(RuntimeError):
        write_atomically(path, failing())
    assert path.read_text() == "the previous export\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]  # no temporary file left behind
    assert write_atomically(path, iter(["é\n"])) == 3
    assert path.read_text(encoding="utf-8") == "é\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# --- the command ---------------------------------------------------------------------------


def test_export_then_import_through_the_command_line(
    run_cli: Any, source: Engine, db: str, new_db: Callable[[], str], tmp_path: Path
) -> None:
    out = tmp_path / "main.jsonl"
    res = run_cli("--db", db, "export", "main", "--family", "--output", str(out))
    assert res.code == 0, res
    assert res.out == "" and f"wrote {out}" in res.err
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    target = new_db()
    res = run_cli("--db", target, "import", str(out))
    assert res.code == 0, res
    assert "→ conversation 1 (main): 4 imported" in res.out
    assert "→ conversation 2 (main:side): 1 imported" in res.out
    with Engine.open(target) as engine:
        family = snapshot(source)
        del family["other"]
        assert snapshot(engine) == family
    again = run_cli("--db", target, "import", str(out))
    assert "0 imported" in again.out and "(file unchanged)" in again.out


def test_export_writes_to_stdout_in_each_format(run_cli: Any, source: Engine, db: str) -> None:
    jsonl = run_cli("--db", db, "export", "--all")
    assert jsonl.code == 0, jsonl
    assert json.loads(jsonl.out.splitlines()[0])["type"] == "lossless_export"
    assert len(jsonl.out.splitlines()) == 1 + 3 + 6  # header, conversations, messages
    markdown = run_cli("--db", db, "export", "1", "--format", "markdown")
    assert markdown.out.startswith("# Listing files\n")
    openai = run_cli("--db", db, "export", "main", "--format", "openai")
    assert json.loads(openai.out)[0] == {"role": "user", "content": "list the files"}


def test_export_says_what_is_wrong(run_cli: Any, source: Engine, db: str, tmp_path: Path) -> None:
    missing = run_cli("--db", db, "export", "nobody")
    assert missing.code == 4 and "list them with `lossless conversations`" in missing.err
    bad = run_cli("--db", db, "export", "main", "--format", "xml")
    assert bad.code == 2 and "'xml' is not one of" in bad.err
    neither = run_cli("--db", db, "export")
    assert neither.code == 2 and "--all" in neither.err
    both = run_cli("--db", db, "export", "main", "--all")
    assert both.code == 2
    no_store = run_cli("--db", str(tmp_path / "nothing.db"), "export", "--all")
    assert no_store.code == 5 and "no lossless store" in no_store.err
    assert not (tmp_path / "nothing.db").exists()
    nowhere = run_cli("--db", db, "export", "main", "-o", str(tmp_path / "no" / "x.jsonl"))
    assert nowhere.code == 1 and "cannot write" in nowhere.err


# --- show through a pager ------------------------------------------------------------------


def run_on_a_terminal(db: str, tmp_path: Path, *args: str) -> tuple[str, str]:
    """``lossless show`` with a terminal for stdin and stdout, and a $PAGER that keeps what
    it is given: (what the terminal showed, what the pager got)."""
    paged = tmp_path / "paged.txt"
    paged.unlink(missing_ok=True)
    pager = tmp_path / "pager.py"
    pager.write_text(f"import sys\nopen({str(paged)!r}, 'w').write(sys.stdin.read())\n")
    env = {
        **os.environ,
        "PAGER": f"{sys.executable} {pager}",
        "PYTHONPATH": str(Path(lossless.__file__).parents[1]),
    }
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lossless", "--db", db, "show", "s", *args],
        stdin=child,
        stdout=child,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return shown.decode(), paged.read_text() if paged.exists() else ""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_show_pages_through_the_pager_on_a_terminal_unless_told_not_to(
    db: str, tmp_path: Path
) -> None:
    with Engine.open(db, config=Config(), create=True) as engine:
        engine.ingest("s", {"role": "user", "content": "paged words"})
    shown, paged = run_on_a_terminal(db, tmp_path)
    assert "paged words" in paged and "paged words" not in shown
    shown, paged = run_on_a_terminal(db, tmp_path, "--no-pager")
    assert "paged words" in shown and paged == ""
    shown, paged = run_on_a_terminal(db, tmp_path, "--json")
    assert '"paged words"' in shown and paged == ""


def test_show_writes_straight_through_when_piped(run_cli: Any, engine: Engine, db: str) -> None:
    engine.ingest("s", {"role": "user", "content": "piped words"})
    res = run_cli("--db", db, "show", "s")
    assert res.code == 0 and "piped words" in res.out


def test_masked_secrets_stay_masked_unless_reveal(tmp_path: Path, run_cli: Any) -> None:
    key = "sk-proj-" + "Rt5" * 10
    db = str(tmp_path / "s.db")
    with Engine.open(db) as engine:
        engine.ingest("k", {"role": "user", "content": f"deploy with {key}"})
        masked = "".join(engine.export("k"))
        shown = "".join(engine.export("k", reveal=True))
    assert key not in masked and "[secret:openai-key#" in masked
    assert key in shown
    # The revealed file imports back as it came: the secret masked again on the way in, and
    # its original kept.
    path = tmp_path / "k.jsonl"
    path.write_text(shown)
    with Engine.open(tmp_path / "t.db") as other:
        other.import_path(path)
        (m,) = other.messages("k")
        assert (
            key not in m.content and other.reveal(m.message_id)["content"] == f"deploy with {key}"
        )
    cli = run_cli("--db", db, "export", "k", "--format", "markdown")
    assert cli.code == 0 and key not in cli.out
    assert key in run_cli("--db", db, "export", "k", "--format", "markdown", "--reveal").out
