"""Hostile and malformed input, fuzzed: never a crash or a hang, a clear error or a right answer.

What each fuzzer feeds and what it expects:

* transcript importers (OpenClaw, Claude Code, messages JSONL and JSON array) — good lines
  mixed with junk JSON, junk text, junk bytes and broken entries, through
  ``Engine.import_path`` / ``bootstrap``: the good lines are imported, each bad one is a
  report problem with its line number, nothing is stored twice on a second import;
* message normalization (``Engine.ingest``) — arbitrary JSON values and near-shapes: stored
  and read back equal, or refused with a :class:`~lossless.errors.LosslessError` that says why;
* the full-text query sanitizer and the regex mode of ``lcm_grep`` — arbitrary text and
  patterns: hits or :class:`~lossless.retrieval.grep.GrepError`, never an SQLite error; a
  catastrophic pattern returns within the bound with ``truncated``;
* id parsing (``sum_``, ``file_``, ``msg#``, grant ids, conversation refs) — ``NotFoundError``
  or ``GrantError``, never a ``KeyError`` / ``IndexError`` / ``ValueError``;
* the MCP server's tool arguments, through the SDK's in-memory client — a result, or a
  refusal that says why (never the SDK's generic crash report);
* the config loader — arbitrary TOML-ish text and ``LOSSLESS_*`` values: a valid Config or a
  :class:`~lossless.errors.ConfigError` naming the key.

Cases the fuzzers found are kept below as plain regression tests.

``LOSSLESS_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest tests/test_fuzz.py`` searches
deeper (the default keeps the file well under a minute).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import string
import time
import tomllib
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import regex
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lossless import Config, ConfigError, Engine, LosslessError, NotFoundError, load_config
from lossless.errors import ImportProblem
from lossless.ingest.reconcile import ReconcileReport
from lossless.ingest.shapes import FORMATS
from lossless.ingest.transcripts import FORMATS as TRANSCRIPT_FORMATS
from lossless.retrieval.grants import GrantError
from lossless.retrieval.grep import GrepError, GrepResult, grep
from lossless.timestamps import format_ts, now

# --- settings ------------------------------------------------------------------------------

#: Every fuzzer's example count when set (e.g. 5000 for a long local run).
DEEP = os.environ.get("LOSSLESS_FUZZ_EXAMPLES")


def fuzz(examples: int, *, deadline_ms: int | None = 5_000) -> settings:
    """Settings for one fuzzer: *examples* by default, ``LOSSLESS_FUZZ_EXAMPLES`` if set.

    The deadline is a hang detector, not a benchmark: an example that takes seconds where
    milliseconds are normal has hung somewhere (hypothesis re-runs it before failing).
    """
    return settings(
        max_examples=int(DEEP) if DEEP else examples,
        deadline=None if deadline_ms is None else timedelta(milliseconds=deadline_ms),
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


# --- strategies ----------------------------------------------------------------------------

CHARS = st.characters()
TEXT = st.text(CHARS, max_size=30)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | INT64
    | st.integers()  # big integers are valid JSON and stored exactly
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=10,
)

KEYS = [
    "role", "content", "type", "tool_calls", "tool_call_id", "name", "id", "call_id",
    "arguments", "output", "function_call", "function", "stopReason", "api", "timestamp",
    "toolCallId", "toolName", "isError", "command", "exitCode", "summary", "input", "text",
    "status", "source", "tool_use_id", "is_error", "thinking", "parts", "external_id",
    "created_at", "metadata", "custom", "action",
]  # fmt: skip
ROLES = [
    "user", "assistant", "system", "developer", "tool", "function", "toolResult",
    "bashExecution", "custom", "hookMessage", "model", "",
]  # fmt: skip
BLOCK_TYPES = [
    "message", "function_call", "function_call_output", "reasoning", "text", "tool_use",
    "tool_result", "thinking", "redacted_thinking", "image", "toolCall", "input_text",
    "output_text", "refusal", "image_url", "file", "document", "server_tool_use",
    "web_search_call", "mcp_call", "custom_tool_call_output", "item_reference", "compaction",
    "summary_text", "input_image", "mcp_tool_result",
]  # fmt: skip
VOCAB = st.sampled_from(ROLES + BLOCK_TYPES)
BLOCK = st.dictionaries(st.sampled_from(KEYS) | TEXT, VOCAB | JSON, max_size=5)
FIELD_VALUE = VOCAB | JSON | st.lists(BLOCK | JSON, max_size=4) | BLOCK
#: Dicts built from the keys and values real message shapes use, with anything in between.
NEAR_SHAPES = st.dictionaries(st.sampled_from(KEYS) | TEXT, FIELD_VALUE, max_size=6)

_conversations = itertools.count()


def attempt(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, BaseException | None]:
    """``call(*args, **kwargs)``: its result, or the exception it raised (to be judged)."""
    try:
        return call(*args, **kwargs), None
    except Exception as exc:
        return None, exc


def said_why(error: BaseException | None, *kinds: type[BaseException]) -> bool:
    """Whether *error* is one of *kinds* (default: any LosslessError) with a message."""
    return isinstance(error, kinds or (LosslessError,)) and bool(str(error).strip())


def fresh(prefix: str = "fz") -> str:
    """A session id no other example of the run uses (examples share the engine)."""
    return f"{prefix}-{next(_conversations)}"


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    """One engine per fuzzer (on each back end); its examples write to conversations of
    their own."""
    config = Config().replace(
        fresh_tail_count=2,
        leaf_chunk_tokens=150,
        leaf_target_tokens=20,
        condensed_target_tokens=20,
        leaf_min_fanout=2,
        condensed_min_fanout=2,
        large_file_token_threshold=200,
    )
    with Engine.open(new_db(), config=config) as eng:
        yield eng


# --- message normalization -----------------------------------------------------------------


def assert_stored_exactly_or_refused(engine: Engine, message: Any, **kwargs: Any) -> None:
    original = copy.deepcopy(message)
    result, error = attempt(engine.ingest, fresh(), message, **kwargs)
    if error is not None:
        assert said_why(error), repr(error)
        return
    assert result.inserted == 1
    stored = engine.get_message(result.message_ids[0])
    assert stored.to_source() == original
    assert message == original  # ingest never changes the caller's value


@fuzz(250)
@given(message=JSON | NEAR_SHAPES)
@example(message=[{"role": "user", "content": "a list is not a message"}])
@example(message={"role": ["user"], "content": "an unhashable role"})
@example(message={"role": "user", "content": 5})
@example(message={"type": 7})
@example(message={"role": "assistant", "tool_calls": "call_1"})
@example(message={"role": "toolResult", "content": [{"type": {"nested": "type"}}]})
@example(message={"role": "user", "content": "x", "timestamp": 10**30})
@example(message={"role": "user", "content": "x", "timestamp": -(10**30), "stopReason": 1})
@example(message={"type": "function_call", "arguments": '{"a": NaN}', "call_id": "c"})
@example(message={"role": "user", "content": [{"type": "text", "text": 1e308}]})
@example(message={"\x00lossless:wtf8": {"role": "user"}})
def test_any_json_value_is_stored_exactly_or_refused_with_a_lossless_error(
    engine: Engine, message: Any
) -> None:
    assert_stored_exactly_or_refused(engine, message)


@fuzz(150)
@given(message=NEAR_SHAPES | JSON, fmt=st.sampled_from([*FORMATS, "bogus", ""]))
@example(message={"role": "user", "parts": [{}]}, fmt="lossless")
@example(message={"role": "user", "parts": "abc"}, fmt="lossless")
@example(message={"role": "user", "metadata": "ab"}, fmt="lossless")
@example(message={"role": "user", "created_at": 5}, fmt="lossless")
@example(message={"role": "user", "created_at": "not a time"}, fmt="lossless")
@example(message={"role": "tool", "content": [7, None, "x"]}, fmt="anthropic")
def test_a_named_format_stores_exactly_or_refuses_with_a_lossless_error(
    engine: Engine, message: Any, fmt: str
) -> None:
    assert_stored_exactly_or_refused(engine, message, format=fmt or None)


def test_an_unknown_shape_is_an_unknown_shape_error_saying_what_was_expected(
    engine: Engine,
) -> None:
    from lossless import UnknownShapeError

    for bad in ({"hello": "world"}, "text", 42, None, [], {"role": None, "content": "x"}):
        with pytest.raises(UnknownShapeError, match=r"expected|must be|not"):
            engine.ingest(fresh(), bad)
    # An item that names a role or type lossless does not know is kept, exactly.
    odd = {"role": "wizard", "content": "x"}
    conv = fresh()
    engine.ingest(conv, odd)
    assert [m.to_source() for m in engine.messages(conv)] == [odd]


# --- transcript importers ------------------------------------------------------------------

#: Keys that place an entry in a transcript's tree or lane; junk lines never carry them, so
#: the good lines stay the active branch and the test can say exactly what must be imported.
_TREE_KEYS = frozenset(
    {"id", "parentId", "uuid", "parentUuid", "logicalParentUuid", "isSidechain", "sessionId"}
)


#: First-line types that name a transcript format: junk never carries them, so the format
#: detected from the first line is the one the test wrote.
_HEADER_TYPES = frozenset({"session", "summary", "file-history-snapshot"})


def _untreed(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: v
            for k, v in value.items()
            if k not in _TREE_KEYS
            and not (k == "type" and isinstance(v, str) and v in _HEADER_TYPES)
        }
    return value


JUNK_LINE = st.one_of(
    JSON.map(_untreed).map(lambda v: json.dumps(v).encode()),
    NEAR_SHAPES.map(_untreed).map(lambda v: json.dumps(v).encode()),
    st.text(CHARS.filter(lambda c: c not in "\n"), max_size=40).map(
        lambda t: t.encode("utf-8", "surrogatepass")
    ),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ")),
    st.sampled_from([b"{", b'{"type": "message"', b"\xff\xfe", b"null", b"\x00", b"}{"]),
).filter(lambda line: not line.strip().startswith(b"["))
# A file whose first line starts with "[" is read as one JSON array (its own fuzzer below).


def _good_text(i: int) -> str:
    return f"good line {i} kiwi{i}x"


def _good_line(fmt: str, session: str, i: int, previous: str | None) -> dict[str, Any]:
    text = _good_text(i)
    if fmt == "openclaw":
        message = {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}
        return {"type": "message", "id": f"e{i}", "parentId": previous, "message": message}
    if fmt == "claude_code":
        return {
            "type": "user",
            "sessionId": session,
            "uuid": f"u{i}",
            "parentUuid": previous,
            "message": {"role": "user", "content": text},
        }
    if fmt == "codex":
        content = [{"type": "input_text", "text": text}]
        item = {"type": "message", "role": "user", "content": content}
        return {"timestamp": "2026-11-25T08:00:00Z", "type": "response_item", "payload": item}
    if fmt == "hermes":
        return {"row": i, "timestamp": 1.0, "message": {"role": "user", "content": text}}
    if fmt == "lossless":
        message = {"role": "user", "content": text}
        return {
            "conversation_id": 1,
            "external_id": f"x{i}",
            "format": "openai_chat",
            "message": message,
        }
    return {"role": "user", "content": text}


def _broken_line(fmt: str, session: str, i: int, previous: str | None, junk: Any) -> bytes:
    """A line of the tree whose message is junk (not an object: the line is unreadable)."""
    if fmt == "messages":
        return json.dumps(_untreed(junk) if isinstance(junk, dict) else {"content": junk}).encode()
    entry = _good_line(fmt, session, i, previous)
    entry["payload" if fmt == "codex" else "message"] = _untreed(junk)
    return json.dumps(entry).encode()


def _header(fmt: str, session: str) -> bytes | None:
    if fmt == "openclaw":
        return json.dumps({"type": "session", "version": 3, "id": session}).encode()
    if fmt == "claude_code":
        return json.dumps({"type": "summary", "sessionId": session, "summary": "t"}).encode()
    if fmt == "codex":
        return json.dumps({"type": "session_meta", "payload": {"id": session}}).encode()
    if fmt == "hermes":
        return json.dumps({"type": "hermes_session", "id": session}).encode()
    if fmt == "lossless":
        conversation = {"conversation_id": 1, "session_id": session, "session_key": None}
        header = {"type": "lossless_export", "version": 1, "conversations": [conversation]}
        return json.dumps(header).encode()
    return None


#: The formats that hold conversations (not the traces a host writes beside them).
IMPORTABLE = sorted(n for n, f in TRANSCRIPT_FORMATS.items() if f.not_a_transcript is None)

LINE_KINDS = st.lists(
    st.one_of(
        st.just(("good", None)),
        st.tuples(st.just("junk"), JUNK_LINE),
        st.tuples(st.just("broken"), JSON | NEAR_SHAPES),
        st.just(("blank", None)),
    ),
    max_size=12,
)


def _write_transcript(
    path: Path, fmt: str, kinds: list[tuple[str, Any]]
) -> tuple[str, dict[int, str], set[int]]:
    """Write the lines; returns the session, {line number: good text}, junk line numbers."""
    session = path.stem
    lines: list[bytes] = []
    header = _header(fmt, session)
    if header is not None:
        lines.append(header)
    good: dict[int, str] = {}
    bad: set[int] = set()
    previous: str | None = None
    for i, (kind, payload) in enumerate(kinds):
        if kind == "good":
            entry = _good_line(fmt, session, i, previous)
            lines.append(json.dumps(entry).encode())
            good[len(lines)] = _good_text(i)
        elif kind == "broken":
            lines.append(_broken_line(fmt, session, i, previous, payload))
            bad.add(len(lines))
        else:
            lines.append(payload if kind == "junk" else b"   ")
            bad.update([len(lines)] if kind == "junk" else [])
            continue  # no id: it links nothing
        previous = f"e{i}" if fmt == "openclaw" else f"u{i}" if fmt == "claude_code" else None
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return session, good, bad


def _stored_texts(engine: Engine, reports: list[ReconcileReport]) -> list[str]:
    out: list[str] = []
    for report in reports:
        if report.conversation_id:
            out += [m.content for m in engine.store.get_messages(report.conversation_id)]
    return out


@fuzz(120, deadline_ms=10_000)
@given(fmt=st.sampled_from(IMPORTABLE), kinds=LINE_KINDS, named=st.booleans())
def test_every_importer_keeps_the_good_lines_and_reports_each_bad_one_by_line(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, fmt: str, kinds: Any, named: bool
) -> None:
    path = tmp_path_factory.mktemp("imp") / f"{fresh(fmt)}.jsonl"
    _, good, bad = _write_transcript(path, fmt, kinds)
    reports, error = attempt(engine.import_path, path, format=fmt if named else None)
    if error is not None:  # a file that is not a transcript at all
        assert said_why(error), repr(error)
        return
    if any(r.mode == "failed" for r in reports):  # auto-detection met a junk first line
        assert not named and all(p.reason.strip() for r in reports for p in r.problems)
        return
    for report in reports:
        for problem in report.problems:  # reported by its line, and only bad lines are
            assert problem.line in bad and problem.reason.strip(), (problem, bad)
    stored = _stored_texts(engine, reports)
    for text in good.values():
        assert text in stored
    again = engine.import_path(path, format=fmt if named else None)
    assert sum(r.imported for r in again) == 0  # nothing is stored twice


@fuzz(80, deadline_ms=10_000)
@given(
    elements=st.lists(
        st.one_of(st.just("good"), JSON, NEAR_SHAPES.map(_untreed)), min_size=1, max_size=10
    ),
    damage=st.one_of(
        st.none(),
        st.tuples(st.just("cut"), st.floats(0, 1)),
        st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=8)),
    ),
)
def test_a_json_array_keeps_every_element_before_the_damage(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, elements: list[Any], damage: Any
) -> None:
    parts: list[bytes] = []
    good: list[tuple[int, str]] = []  # (end offset, text)
    offset = 1
    for i, element in enumerate(elements):
        value = {"role": "user", "content": _good_text(i)} if element == "good" else element
        data = json.dumps(value).encode()
        if element == "good":
            good.append((offset + len(data), _good_text(i)))
        parts.append(data)
        offset += len(data) + 2
    blob = b"[" + b",\n".join(parts) + b"]\n"
    intact = len(blob)
    if damage is not None:
        at = int(damage[1] * len(blob))
        blob = blob[:at] if damage[0] == "cut" else blob[:at] + damage[2] + blob[at:]
        intact = at
    path = tmp_path_factory.mktemp("arr") / f"{fresh('array')}.json"
    path.write_bytes(blob)
    reports, error = attempt(engine.import_path, path, format="messages")
    if error is not None:
        assert said_why(error), repr(error)
        return
    stored = _stored_texts(engine, reports)
    for end, text in good:
        if end < intact:
            assert text in stored
    for report in reports:
        assert all(p.reason.strip() for p in report.problems)


@fuzz(150)
@given(data=st.binary(max_size=300), fmt=st.sampled_from([None, *sorted(TRANSCRIPT_FORMATS)]))
@example(data=b"\xef\xbb\xbf[]", fmt=None)
@example(data=b"[1, 2", fmt=None)
@example(data=b'{"type": "session"}\n\xff\n', fmt=None)
@example(data=b'{"sessionId": 5}\n', fmt=None)
@example(data=b'{"type": "session", "id": ["x"]}\n', fmt=None)
@example(data=b"[" * 200, fmt="messages")
@example(data=b'{"role": "user", "content": "x"}', fmt=None)  # no final newline
def test_arbitrary_bytes_import_or_fail_with_a_clear_error(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, data: bytes, fmt: str | None
) -> None:
    path = tmp_path_factory.mktemp("bytes") / f"{fresh('raw')}.jsonl"
    path.write_bytes(data)
    reports, error = attempt(engine.bootstrap, path, format=fmt)
    if error is not None:
        assert said_why(error), repr(error)
        return
    for report in reports:
        assert all(isinstance(p, ImportProblem) and p.reason for p in report.problems)


ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252"]


@fuzz(120)
@given(
    texts=st.lists(
        st.text(st.characters(codec="latin-1"), min_size=1, max_size=40), min_size=1, max_size=5
    ),
    encoding=st.sampled_from(ENCODINGS),
)
@example(texts=["héllo", "plain"], encoding="latin-1")
@example(texts=["plain", "wörld"], encoding="utf-16")
def test_a_file_in_any_encoding_imports_exactly_or_each_line_says_it_is_not_utf8(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, texts: list[str], encoding: str
) -> None:
    session = fresh("enc")
    lines = [{"role": "user", "content": t} for t in texts]
    path = tmp_path_factory.mktemp("enc") / f"{session}.jsonl"
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    try:
        path.write_bytes(body.encode(encoding))
    except UnicodeEncodeError:
        return  # a text this encoding cannot hold
    reports, error = attempt(engine.import_path, path, format="messages")
    assert error is None, repr(error)
    [report] = reports
    stored = [m.to_source() for m in engine.messages(session)] if report.imported else []
    assert all("UTF-8" in p.reason for p in report.problems), report.problems
    if encoding.startswith(("utf-16", "utf-32")):  # refused whole, never misread line by line
        assert stored == [] and [p.line for p in report.problems] == [1]
        assert encoding[:6].upper() in report.problems[0].reason
        return
    # Otherwise each line is what its bytes say as UTF-8, or a problem at its number.
    expected, bad = [], []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        try:
            expected.append(json.loads(raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8")))
        except UnicodeDecodeError:
            bad.append(number)
    assert stored == expected
    assert [p.line for p in report.problems] == bad
    if encoding.startswith("utf-8"):
        assert stored == lines


def test_lines_after_a_json_array_are_reported_not_ignored(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "looks-like-an-array.jsonl"
    path.write_text('[]\n{"role": "user", "content": "a line after the array"}\n')
    [report] = engine.import_path(path)
    assert report.imported == 1 or report.problems


@pytest.mark.parametrize("fmt", ["openclaw", "claude_code"])
@pytest.mark.parametrize("damage", ["not json", "no message"])
def test_a_corrupt_line_in_a_transcript_tree_does_not_drop_the_history_before_it(
    engine: Engine, tmp_path: Path, fmt: str, damage: str
) -> None:
    session = fresh(fmt)
    lines = [_header(fmt, session) or b""]
    previous = None
    for i in range(4):
        lines.append(json.dumps(_good_line(fmt, session, i, previous)).encode())
        previous = f"e{i}" if fmt == "openclaw" else f"u{i}"
    if damage == "not json":
        lines[2] = lines[2][:-7]  # a torn write: the id is in the line, but it is not JSON
    else:
        entry = json.loads(lines[2])
        entry["message"] = None
        lines[2] = json.dumps(entry).encode()
    path = tmp_path / f"{session}.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    [report] = engine.import_path(path)
    assert [p.line for p in report.problems] == [3]
    stored = [m.content for m in engine.messages(session)]
    assert stored == [_good_text(0), _good_text(2), _good_text(3)]


@pytest.mark.parametrize("layout", ["jsonl", "jsonl-first", "array"])
def test_deeply_nested_json_never_aborts_an_import(
    engine: Engine, tmp_path: Path, layout: str
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    good = json.dumps({"role": "user", "content": "a good line"})
    path = tmp_path / f"{layout}.jsonl"
    if layout == "jsonl":
        path.write_text(f"{good}\n{deep}\n{good.replace('good', 'fine')}\n")
    elif layout == "jsonl-first":
        path.write_text(f"{deep}\n{good}\n")
    else:
        path.write_text(f"[{good}, {deep}, {good}]")
    reports = engine.import_path(path, format="messages")
    assert all(p.line >= 1 for r in reports for p in r.problems)
    assert any(r.imported for r in reports) or layout == "jsonl-first"


def test_a_transcript_whose_name_is_not_utf8_is_imported(engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "projects"
    folder.mkdir()
    (folder / os.fsdecode(b"caf\xe9.jsonl")).write_text('{"role": "user", "content": "bonjour"}\n')
    (folder / "plain.jsonl").write_text('{"role": "user", "content": "hello"}\n')
    assert sorted(r.imported for r in engine.import_path(folder)) == [1, 1]
    assert [r.imported for r in engine.import_path(folder)] == [0, 0]  # nothing twice


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_timestamps_at_the_edge_of_the_calendar_never_abort_an_import(
    engine: Engine, tmp_path: Path, stamp: str
) -> None:
    path = tmp_path / "edge.jsonl"
    lines = [
        {"role": "user", "content": "before", "timestamp": stamp},
        {"role": "user", "content": "after"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    started = format_ts(now())
    [report] = engine.import_path(path)
    assert report.imported == 2  # the time is not usable: the ingest time stands in
    imported = engine.messages(report.conversation_id)
    assert [m.to_source() for m in imported] == lines  # the stamp itself is kept as written
    tool_result = {"role": "toolResult", "content": "x", "timestamp": stamp}
    conv = fresh()
    engine.ingest(conv, tool_result)
    [stored] = engine.messages(conv)
    assert stored.to_source() == tool_result
    assert (stored.role, stored.content) == ("tool", "x")
    for message in (*imported, stored):
        assert started <= message.created_at <= format_ts(now())


def test_a_message_nested_deeper_than_json_can_encode_is_refused(engine: Engine) -> None:
    value: Any = "x"
    for _ in range(5_000):
        value = [value]
    with pytest.raises(LosslessError, match="nested"):
        engine.ingest(fresh(), {"role": "user", "content": [{"type": "custom", "data": value}]})


# --- the full-text sanitizer ---------------------------------------------------------------


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    """A conversation with messages, a summary and a large file to search."""
    for i in range(10):
        engine.ingest("seed", {"role": "user", "content": f"deploy step {i}: the timeout was 90s"})
    engine.ingest("seed", {"role": "assistant", "content": "日本語テキスト and AND OR NOT NEAR"})
    engine.ingest("seed", {"role": "user", "content": "a" * 3_000 + "b"})
    body = "\n".join(f"def handler_{i}():\n    return {i}" for i in range(100))
    engine.ingest("seed", {"role": "user", "content": f'<file name="h.py">{body}</file>'})
    engine.compact("seed")
    return engine


NO_WILDCARDS = st.characters()
FTS_TEXT = st.one_of(
    st.text(
        st.sampled_from(list("\"*:^()-+{}[]., 'AND OR NOT NEAR deploy 日本 \\\t")) | NO_WILDCARDS,
        max_size=40,
    ),
    st.text(st.sampled_from(string.printable), max_size=40),
)


@fuzz(300)
@given(
    text=FTS_TEXT,
    sort=st.sampled_from(["recency", "relevance"]),
    scope=st.sampled_from(["messages", "summaries", "both", "files"]),
)
@example(text='deploy AND "', sort="relevance", scope="both")
@example(text='"" "', sort="recency", scope="both")
@example(text="NEAR(deploy timeout, 2)", sort="relevance", scope="both")
@example(text="deploy* OR col:umn ^x -y", sort="relevance", scope="messages")
@example(text="\"''\"", sort="recency", scope="both")
@example(text="0/0\x000", sort="recency", scope="messages")
@example(text="hello\x00world", sort="recency", scope="both")
@example(text="%_%", sort="recency", scope="messages")
@example(text="\\", sort="relevance", scope="summaries")
def test_any_text_in_full_text_mode_gives_hits_or_a_grep_error(
    seeded: Engine, text: str, sort: Any, scope: Any
) -> None:
    result, error = attempt(seeded.grep, text, conversation="seed", sort=sort, scope=scope)
    if error is not None:
        assert said_why(error, GrepError), repr(error)
        return
    assert isinstance(result, GrepResult)
    assert all(
        h.conversation_id == seeded.conversation("seed").conversation_id for h in result.hits
    )


@fuzz(150)
@given(text=FTS_TEXT, role=st.sampled_from([None, "user", "tool"]))
@example(text="0/0\x000", role=None)
def test_any_text_in_chat_context_query_gives_frames_or_a_grep_error(
    seeded: Engine, text: str, role: str | None
) -> None:
    result, error = attempt(seeded.chat_context_query, conversation="seed", text=text, role=role)
    if error is not None:
        assert said_why(error, GrepError), repr(error)
        return
    seed = seeded.conversation("seed").conversation_id
    assert all(f.conversation_id == seed for f in result.frames)
    assert all(e.conversation_id == seed for e in result.executions)
    if role is not None:
        assert all(f.role == role for f in result.frames)
    assert len(result.frames) <= 20 and len(result.executions) <= 20


@fuzz(40, deadline_ms=15_000)
@given(text=FTS_TEXT.filter(str.strip))
def test_any_question_to_expand_query_gives_an_answer_or_a_grep_error(
    seeded: Engine, text: str
) -> None:
    answer, error = attempt(seeded.expand_query, text, conversation="seed")
    if error is not None:
        assert said_why(error, GrepError), repr(error)
        return
    assert answer.answer.strip()
    live = seeded.store.fetchall("SELECT count(*) FROM grants WHERE revoked_at IS NULL")[0][0]
    assert live == 0  # the grant is revoked whatever the question


#: Text as it is stored and searched for; a '"' delimits phrases in full_text mode, so a
#: needle holding one is not a verbatim substring query.
NEEDLE = st.one_of(
    st.text(NO_WILDCARDS.filter(lambda c: c != '"'), min_size=3, max_size=20),
    st.text(st.sampled_from(string.printable.replace('"', "")), min_size=3, max_size=20),
).filter(lambda t: len(t.strip()) >= 3)


@fuzz(150)
@given(needle=NEEDLE, sort=st.sampled_from(["recency", "relevance"]))
@example(needle="100%_done", sort="recency")
@example(needle="back\\slash", sort="recency")
@example(needle="ÉCOLE", sort="relevance")
@example(needle="x_y", sort="recency")
@example(needle="nul\x00byte", sort="recency")
@example(needle="日本語テキスト", sort="relevance")
@example(needle="İstanbul", sort="recency")
def test_text_stored_in_a_message_is_found_by_searching_for_it(
    engine: Engine, needle: str, sort: Any
) -> None:
    conv = fresh()
    mid = engine.ingest(conv, {"role": "user", "content": f"before {needle} after"}).message_ids[0]
    try:
        hits = engine.grep(needle, conversation=conv, sort=sort).hits
    except GrepError:
        return  # regex-looking text or no words: refused, with the two modes explained
    assert f"msg#{mid}" in [h.id for h in hits]


_GREP_IN_A_CHILD = """
import sys
from lossless import Config, Engine
with Engine.open(sys.argv[1], config=Config()) as engine:
    engine.ingest("s", {"role": "user", "content": "deploy step 1: the timeout was 90s"})
    engine.grep(sys.argv[2], conversation="s")
"""


@pytest.mark.parametrize("pattern", ["日_abcd", "日%abcd", "貶_ Nﶒ:"])
def test_wildcards_in_a_substring_search_never_crash_the_process(
    tmp_path: Path, pattern: str
) -> None:
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", _GREP_IN_A_CHILD, str(tmp_path / "child.db"), pattern],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]


# --- the regex mode ------------------------------------------------------------------------

REGEX_TEXT = st.text(
    st.sampled_from(list("ab()[]{}*+?|^$.\\-,0123456789:=!<>PpwWdDsSbBLN&~")) | CHARS,
    min_size=1,
    max_size=30,
)
BOUND = 0.5
SLACK = 3.0  # scheduling on a loaded machine; a hang takes far longer


@fuzz(300, deadline_ms=10_000)
@given(pattern=REGEX_TEXT, scope=st.sampled_from(["messages", "summaries", "both", "files"]))
@example(pattern="(a+)+$", scope="messages")
@example(pattern="(?:a|aa)+c", scope="both")
@example(pattern="a{99999999999999999999}", scope="messages")
@example(pattern="\\L<words>", scope="messages")
@example(pattern="(?P<x>a)(?P=y)", scope="messages")
@example(pattern="(?(1)a|b)", scope="messages")
@example(pattern="[[:alpha:]]", scope="messages")
@example(pattern="\\p{Foo}", scope="messages")
@example(pattern="(?V1)[[a]--[b]]", scope="messages")
def test_any_pattern_in_regex_mode_gives_hits_or_a_grep_error_within_the_bound(
    seeded: Engine, pattern: str, scope: Any
) -> None:
    started = time.monotonic()
    result, error = attempt(
        grep, seeded.store, pattern, mode="regex", scope=scope, max_seconds=BOUND
    )
    if error is not None:
        assert said_why(error, GrepError), repr(error)
        assert "regular expression" in str(error) or "empty" in str(error)
        return
    assert time.monotonic() - started < BOUND + SLACK
    assert result.scanned <= 200_000


@fuzz(100)
@given(needle=st.text(CHARS, min_size=1, max_size=20))
def test_an_escaped_regex_finds_the_text_it_escapes(engine: Engine, needle: str) -> None:
    conv = fresh()
    mid = engine.ingest(conv, {"role": "user", "content": f"<{needle}>"}).message_ids[0]
    try:
        hits = engine.grep(regex.escape(needle), conversation=conv, mode="regex").hits
    except GrepError:
        assert not needle.strip()  # only an empty pattern is refused
        return
    assert f"msg#{mid}" in [h.id for h in hits]


CATASTROPHIC = ["(a+)+$", "(a|aa)+$", "(a|a)*$", "(?:a+)+c", "((a*)*)*$"]


def test_a_catastrophic_pattern_returns_within_the_default_bound_truncated(
    seeded: Engine,
) -> None:
    started = time.monotonic()
    result = seeded.grep("(a+)+$", conversation="seed", mode="regex", scope="messages")
    elapsed = time.monotonic() - started
    assert result.truncated
    assert elapsed < 2.0 + SLACK  # grep's max_seconds (2 s) plus scheduling


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_over_many_rows_stop_at_the_time_bound(
    engine: Engine, pattern: str
) -> None:
    conv = fresh()
    engine.ingest_batch(conv, [{"role": "user", "content": "a" * 4_000 + "b"}] * 30)
    started = time.monotonic()
    result = grep(engine.store, pattern, mode="regex", max_seconds=0.3)
    elapsed = time.monotonic() - started
    assert elapsed < 0.3 + SLACK
    if result.scanned < 30:  # it stopped before reading every row: only the bound does that
        assert result.truncated


def test_the_row_bound_stops_a_regex_scan(engine: Engine) -> None:
    conv = fresh()
    engine.ingest_batch(conv, [{"role": "user", "content": f"row {i}"} for i in range(40)])
    result = grep(engine.store, "n.v.r.th.re", mode="regex", max_rows=10)  # no literal to look up
    assert result.truncated and result.scanned <= 11 and result.hits == []


@pytest.mark.parametrize("depth", [1_000, 50_000])
def test_a_deeply_nested_regex_is_a_grep_error(seeded: Engine, depth: int) -> None:
    with pytest.raises(GrepError):
        seeded.grep("(" * depth + "a" + ")" * depth, mode="regex")


# --- id parsing ----------------------------------------------------------------------------

HEX = st.text("0123456789abcdef", min_size=16, max_size=16)


IDENTS = st.one_of(
    TEXT,
    TEXT.map(lambda t: "sum_" + t),
    TEXT.map(lambda t: "file_" + t),
    TEXT.map(lambda t: "msg#" + t),
    st.integers(min_value=-5, max_value=2**63 - 1).map(lambda n: f"msg#{n}"),
    HEX.map(lambda h: "sum_" + h),
    HEX.map(lambda h: "file_" + h),
    st.sampled_from(["../", "/", "file_../../", "sum_../", "msg#../"]).flatmap(
        lambda p: TEXT.map(lambda t: p + t)
    ),
)


@fuzz(300)
@given(ident=IDENTS, scoped=st.booleans())
@example(ident="msg#", scoped=False)
@example(ident="msg#-1", scoped=False)
@example(ident="msg#0", scoped=True)
@example(ident=" msg#1 ", scoped=True)
@example(ident="msg#1.5", scoped=False)
@example(ident="msg#1e3", scoped=False)
@example(ident="sum_", scoped=False)
@example(ident="file_", scoped=False)
@example(ident="file_../../etc/passwd", scoped=False)
@example(ident="file_0123456789abcdef/../../x", scoped=False)
@example(ident="file_0123456789abcdef\n", scoped=False)
@example(ident="FILE_0123456789ABCDEF", scoped=False)
@example(ident="/etc/passwd", scoped=False)
@example(ident="\x00", scoped=False)
def test_any_id_is_described_or_not_found(seeded: Engine, ident: str, scoped: bool) -> None:
    found, error = attempt(seeded.describe, ident, conversation="seed" if scoped else None)
    if error is not None:
        assert said_why(error, NotFoundError, GrantError), repr(error)
        return
    assert found.id.strip() == ident.strip() or found.kind == "message"


@fuzz(200)
@given(ident=IDENTS)
def test_any_id_is_a_large_file_or_not_found(seeded: Engine, ident: str) -> None:
    for read in (seeded.large_file, seeded.read_large_file):
        _, error = attempt(read, ident)
        assert error is None or said_why(error, NotFoundError), repr(error)


@fuzz(200)
@given(idents=st.lists(IDENTS, min_size=1, max_size=3), grant_ref=TEXT | HEX)
@example(idents=["sum_0123456789abcdef"], grant_ref="grant_" + "0" * 32)
@example(idents=["msg#1"], grant_ref="")
def test_any_id_or_grant_is_expanded_or_refused(
    seeded: Engine, idents: list[str], grant_ref: str
) -> None:
    grant = seeded.create_grant("seed")
    for grant_id in (grant.grant_id, grant_ref, "grant_" + grant_ref):
        _, error = attempt(seeded.expand, grant_id, idents, include_messages=True)
        assert error is None or said_why(error, NotFoundError, GrantError), repr(error)
    seeded.revoke_grant(grant.grant_id)


@fuzz(200)
@given(ref=TEXT | INT64)
@example(ref="")
@example(ref="0")
@example(ref=-1)
def test_any_conversation_ref_resolves_or_is_not_found(seeded: Engine, ref: str | int) -> None:
    _, error = attempt(seeded.conversation, ref)
    assert error is None or said_why(error, NotFoundError), repr(error)


@pytest.mark.parametrize("ident", ["msg#²", "msg#¹²", "msg#" + "9" * 30])
def test_message_ids_int_cannot_read_are_not_found(seeded: Engine, ident: str) -> None:
    with pytest.raises(NotFoundError):
        seeded.describe(ident)


@pytest.mark.parametrize("call", ["conversation", "get_message", "grep"])
def test_integers_beyond_64_bits_are_refused_or_not_found(seeded: Engine, call: str) -> None:
    with pytest.raises(LosslessError):
        if call == "conversation":
            seeded.conversation(2**64)
        elif call == "get_message":
            seeded.get_message(10**30)
        else:
            seeded.grep("deploy", conversation=10**30)


@pytest.mark.parametrize(
    "call",
    [
        "grep_pattern",
        "grep_since",
        "conversation",
        "ingest_session",
        "describe_summary",
        "expand_grant",
        "expand_summary",
        "context_query_tool",
        "expand_query",
    ],
)
def test_lone_surrogates_in_lookups_are_a_clear_error_or_no_match(
    seeded: Engine, call: str
) -> None:
    bad = "x\ud800y"
    grant = seeded.create_grant("seed").grant_id
    calls = {
        "grep_pattern": lambda: seeded.grep(f"deploy {bad}", sort="relevance"),
        "grep_since": lambda: seeded.grep("deploy", since=bad),
        "conversation": lambda: seeded.conversation(bad),
        "ingest_session": lambda: seeded.ingest(bad, {"role": "user", "content": "x"}),
        "describe_summary": lambda: seeded.describe(f"sum_{bad}"),
        "expand_grant": lambda: seeded.expand(f"grant_{bad}", ["sum_0123456789abcdef"]),
        "expand_summary": lambda: seeded.expand(grant, [f"sum_{bad}"]),
        "context_query_tool": lambda: seeded.chat_context_query(tool_name=bad),
        "expand_query": lambda: seeded.expand_query(f"what about {bad}?", conversation="seed"),
    }
    _, error = attempt(calls[call])
    if error is not None and not isinstance(error, LosslessError):
        raise error


# --- the MCP server's arguments --------------------------------------------------------------

TIME_TEXT = st.one_of(
    st.datetimes(
        min_value=datetime(2, 1, 1),
        max_value=datetime(9998, 12, 31),
        timezones=st.none() | st.timezones(),
    ).map(lambda d: d.isoformat()),
    TEXT,
)
REF = TEXT | st.integers().map(str)
MCP_CALLS = st.one_of(
    st.builds(
        lambda pattern, mode, scope, sort: (
            "lcm_grep",
            {"pattern": pattern, "mode": mode, "scope": scope, "sort": sort},
        ),
        FTS_TEXT,
        st.sampled_from(["full_text", "regex"]),
        st.sampled_from(["both", "messages", "summaries", "files"]),
        st.sampled_from(["relevance", "recency"]),
    ),
    st.builds(
        lambda since, before, conv: (
            "lcm_grep",
            {"pattern": "deploy", "since": since, "before": before, "conversation": conv},
        ),
        st.none() | TIME_TEXT,
        st.none() | TIME_TEXT,
        st.none() | REF | INT64,
    ),
    st.builds(
        lambda ident, lines, cap: ("lcm_describe", {"id": ident, "lines": lines, "token_cap": cap}),
        IDENTS,
        st.none() | st.text("0123456789: -x", max_size=8),
        st.none() | st.integers(1, 2**62),
    ),
    st.builds(
        lambda conv, after, limit, summaries: (
            "get_history",
            {
                "conversation": conv,
                "after_seq": after,
                "limit": limit,
                "include_summaries": summaries,
            },
        ),
        st.none() | REF | INT64,
        st.integers(0, 2**62),
        st.integers(1, 200),
        st.booleans(),
    ),
    st.builds(
        lambda text, tool, execution, since, offset: (
            "chat_context_query",
            {
                "text": text,
                "tool_name": tool,
                "execution_id": execution,
                "since": since,
                "offset": offset,
            },
        ),
        st.none() | FTS_TEXT,
        st.none() | TEXT,
        st.none() | TEXT,
        st.none() | TIME_TEXT,
        st.integers(0, 2**62),
    ),
    st.builds(
        lambda prompt, ids, conv: (
            "lcm_expand_query",
            {"prompt": prompt, "summary_ids": ids, "conversation": conv},
        ),
        FTS_TEXT,
        st.none() | st.lists(IDENTS, max_size=3),
        st.none() | st.just("seed") | REF,
    ),
)


async def _mcp_call(engine: Engine, pinned: bool, tool: str, args: dict[str, Any]) -> Any:
    from mcp import Client

    from lossless.mcp_server import build_server

    server = build_server(engine, conversation="seed" if pinned else None)
    async with Client(server) as client:
        return await client.call_tool(tool, {k: v for k, v in args.items() if v is not None})


@fuzz(120, deadline_ms=15_000)
@given(call=MCP_CALLS, pinned=st.booleans())
@example(call=("lcm_describe", {"id": "msg#1", "lines": "0:0"}), pinned=True)
@example(call=("lcm_describe", {"id": "msg#1", "lines": "5:2"}), pinned=False)
@example(call=("lcm_describe", {"id": "msg#1", "lines": "1:"}), pinned=False)
@example(call=("lcm_grep", {"pattern": "deploy", "since": "yesterday"}), pinned=False)
@example(call=("get_history", {"conversation": True}), pinned=False)
@example(call=("lcm_expand_query", {"prompt": "?", "summary_ids": [" "]}), pinned=False)
def test_any_mcp_tool_arguments_give_a_result_or_an_error_that_says_why(
    seeded: Engine, call: tuple[str, dict[str, Any]], pinned: bool
) -> None:
    import anyio

    tool, args = call
    result = anyio.run(_mcp_call, seeded, pinned, tool, args)
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:  # the SDK's crash path says only "Error executing tool <name>"
        assert tool in text and "pydantic" not in text and "validation error" not in text, text
        assert len(text) > len(f"Error executing tool {tool}: ") + 5, text


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("lcm_describe", {"id": "msg#1", "lines": "²:3"}),
        ("lcm_describe", {"id": "msg#²"}),
        ("lcm_describe", {"id": "msg#" + "9" * 30}),
        ("lcm_grep", {"pattern": "deploy", "conversation": 10**30}),
        ("lcm_grep", {"pattern": "deploy", "conversation": "9" * 30}),
        ("lcm_grep", {"pattern": "deploy", "since": "0001-01-01T00:00:00+01:00"}),
        ("lcm_grep", {"pattern": "(" * 3_000 + ")" * 3_000, "mode": "regex"}),
        ("get_history", {"conversation": "seed", "after_seq": 10**30}),
        ("chat_context_query", {"offset": 10**30}),
    ],
)
def test_hostile_mcp_arguments_are_refused_with_a_reason(
    seeded: Engine, tool: str, args: dict[str, Any]
) -> None:
    import anyio

    result = anyio.run(_mcp_call, seeded, False, tool, args)
    text = "".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error or (tool in text and "pydantic" not in text), text


# --- the wire: serve requests and MCP lines --------------------------------------------------

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def _serve_params() -> st.SearchStrategy[Any]:
    """Params as a host would get them wrong: the declared names with any values, unknown
    names, and values that are not objects at all."""
    from lossless.serve.methods import METHODS

    names = sorted({p.name for m in METHODS.values() for p in m.params} | {"bogus"})
    near = st.dictionaries(st.sampled_from(names), JSON_VALUES | st.sampled_from(["seed", "1"]))
    return near | JSON_VALUES


def _serve_requests() -> st.SearchStrategy[Any]:
    from lossless.serve.methods import METHODS

    ids = st.none() | st.integers(-(2**63), 2**63) | TEXT | st.booleans() | st.just([1])
    method = st.sampled_from([*METHODS, "rpc.discover", "nope"]) | TEXT | st.integers()
    request = st.fixed_dictionaries(
        {"jsonrpc": st.sampled_from(["2.0", "2.0", "1.0"]) | JSON_SCALARS, "method": method},
        optional={"id": ids, "params": _serve_params()},
    )
    return request | JSON_VALUES | st.lists(request, max_size=3)


def _check_reply(request: Any, reply: dict[str, Any]) -> None:
    assert reply["jsonrpc"] == "2.0"
    assert ("result" in reply) != ("error" in reply), reply
    if "error" in reply:
        error = reply["error"]
        assert isinstance(error["code"], int) and error["code"] != -32603, reply  # no crash
        assert isinstance(error["message"], str) and len(error["message"]) > 10, reply
        assert "Traceback" not in error["message"]


@fuzz(150, deadline_ms=15_000)
@given(request=_serve_requests())
@example(request={"jsonrpc": "2.0", "id": 1, "method": "grep", "params": {"pattern": 5}})
@example(request={"jsonrpc": "2.0", "id": 2, "method": "status", "params": 3})
@example(request={"jsonrpc": "2.0", "id": 3, "method": "ingest", "params": None})
@example(request={"jsonrpc": None, "id": 0, "method": "bootstrap", "params": {"a": {"\ud800": 1}}})
@example(request={"jsonrpc": "2.0", "id": 2**64, "method": "grep", "params": {"pattern": "\ud83d"}})
def test_any_serve_request_gets_a_json_rpc_answer_that_says_why(
    seeded: Engine, request: Any
) -> None:
    import asyncio

    from lossless.serve.server import Dispatcher

    dispatcher = Dispatcher(seeded, workers=2)
    try:
        raw = asyncio.run(dispatcher.answer(json.dumps(request)))
    finally:
        dispatcher.close()
    requests = request if isinstance(request, list) and request else [request]
    # (json, not orjson: a reply may carry a lone surrogate the request sent, escaped.)
    replies = [] if raw is None else json.loads(raw)
    replies = [replies] if isinstance(replies, dict) else replies
    # A request with an id is answered under that id; a notification (a well-formed request
    # without one) is not; a malformed one is answered with id null.
    assert len(replies) <= len(requests)
    for reply in replies:
        _check_reply(None, reply)
    for req in requests:
        rid = req.get("id") if isinstance(req, dict) else None
        if isinstance(rid, int | str) and not isinstance(rid, bool):
            assert any(r["id"] == rid for r in replies), (req, replies)
    if raw is None:
        assert all(isinstance(r, dict) and "id" not in r for r in requests)


@fuzz(200)
@given(
    lines=st.lists(
        st.binary(max_size=60)
        | JSON_VALUES.map(lambda v: json.dumps(v).encode())
        | _serve_requests().map(lambda v: json.dumps(v).encode()),
        min_size=1,
        max_size=6,
    )
)
@example(lines=[b'{"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": [1]}'])
@example(lines=[b"\xff\xfe", b"   ", b'{"jsonrpc": "2.0", "id": 9, "result": 5}'])
def test_any_line_reaching_the_mcp_stdio_guard_is_passed_on_or_answered_once(
    lines: list[bytes],
) -> None:
    import io

    import anyio
    import mcp_types

    from lossless.mcp_server import _Guard, _Wire

    wire = io.BytesIO()
    guard = _Guard(
        io.BytesIO(b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines)), _Wire(wire)
    )

    async def read_all() -> list[str]:
        return [line async for line in guard]

    passed = anyio.run(read_all)
    answers = [json.loads(line) for line in wire.getvalue().splitlines()]
    for text in passed:  # what reaches the SDK is a message it reads
        mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    for answer in answers:
        assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] in (-32700, -32600, -32602)
        assert len(answer["error"]["message"]) > 20
    # Every line is passed on, answered, blank, or a reply to the server (never answered).
    assert len(passed) + len(answers) <= len(lines)
    for line in lines:
        text = line.replace(b"\n", b" ").strip()
        if not text:
            continue
        try:
            value = json.loads(text)
        except ValueError:
            continue
        rid = value.get("id") if isinstance(value, dict) else None
        if isinstance(rid, int | str) and not isinstance(rid, bool) and "method" in value:
            answered = [a for a in answers if a["id"] == rid]
            reached = [t for t in passed if json.loads(t).get("id") == rid]
            assert answered or reached, (line, answers, passed)


# --- the config loader ---------------------------------------------------------------------

SECTIONS = ["sessions", "resume", "redact", "guards", "custom_provider", "profiles.p1"]


def _keys(cls: type, prefix: str = "") -> list[str]:
    import dataclasses

    out = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        out.append(prefix + f.name)
    return out


def _all_keys() -> dict[str, list[str]]:
    from lossless.config import (
        CustomProviderConfig,
        GuardsConfig,
        ProviderProfile,
        RedactConfig,
        ResumeConfig,
        SessionsConfig,
    )

    return {
        "": _keys(Config),
        "sessions": _keys(SessionsConfig),
        "resume": _keys(ResumeConfig),
        "redact": _keys(RedactConfig),
        "guards": _keys(GuardsConfig),
        "custom_provider": _keys(CustomProviderConfig),
        "profiles.p1": _keys(ProviderProfile),
    }


KEYS_BY_SECTION = _all_keys()
ALL_KEY_NAMES = sorted({k for keys in KEYS_BY_SECTION.values() for k in keys})


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string (no surrogates)


TOML_VALUE = st.one_of(
    INT64.map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=64)
    .map(repr)
    .filter(lambda r: "e" not in r or "." in r),
    st.sampled_from(["true", "false", "0", "-1", "1.0", "0.5", "1e3", "0x10", "[]", "{}"]),
    st.sampled_from(["openai", "anthropic", "extractive", "scripted", '"openai"', '"x"']),
    TEXT.map(_toml_string),
    st.lists(TEXT.map(_toml_string), max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.lists(INT64.map(str), max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.sampled_from(ALL_KEY_NAMES).map(lambda k: "{ " + k + " = 1 }"),
    st.text(st.sampled_from(list("=[]{}\"'#.,- \tab01")), max_size=8),
)
TOML_LINE = st.one_of(
    st.tuples(st.sampled_from(ALL_KEY_NAMES) | TEXT.filter(str.isidentifier), TOML_VALUE).map(
        lambda kv: f"{kv[0]} = {kv[1]}"
    ),
    st.sampled_from([*SECTIONS, "profiles", "nowhere", "sessions.deeper"]).map(lambda s: f"[{s}]"),
    st.text(CHARS.filter(lambda c: c not in "\r\n"), max_size=20),
)
TOML_DOC = st.lists(TOML_LINE, max_size=8).map("\n".join)


def assert_valid(config: Config) -> None:
    """Every numeric setting the loader accepted is finite and within its declared bounds."""
    import dataclasses

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
                continue
            if isinstance(value, dict):
                for name, section in value.items():
                    walk(section, f"{prefix}{f.name}.{name}.")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            key = prefix + f.name
            assert math.isfinite(value), key
            assert isinstance(value, float) or -(2**63) <= value < 2**63, key
            lo, hi = f.metadata.get("minimum"), f.metadata.get("maximum")
            assert lo is None or value >= lo, key
            assert hi is None or value <= hi, key
            choices = f.metadata.get("choices")
            assert not choices or value in choices, key

    walk(config, "")


@fuzz(300)
@given(doc=TOML_DOC)
@example(doc="fresh_tail_count = -1")
@example(doc="sessions = 5")
@example(doc="[sessions]\nsummarize_interval = 0")
@example(doc="[profiles.p1]\nmodel = 'x'")
@example(doc='[profiles."bad name"]\nprovider = "openai"')
@example(doc="profiles = 3")
@example(doc="[profiles]\np1 = 3")
@example(doc='redact = { patterns = "not a list" }')
@example(doc="[redact]\npatterns = [1, 2]")
@example(doc="context_threshold = 2")
@example(doc="context_threshold = true")
@example(doc='summarizer = ""')
@example(doc="fresh_tail_max_tokens = 0")
@example(doc="data_dir = 5")
@example(doc="[guards]\ntimeout_seconds = 0.0")
def test_any_config_file_loads_or_is_a_config_error_naming_the_key(
    tmp_path_factory: pytest.TempPathFactory, doc: str
) -> None:
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    path.write_bytes(doc.encode("utf-8", "surrogatepass"))
    try:
        config = load_config(path, env={})
    except ConfigError as exc:
        message = str(exc)
        try:
            tomllib.loads(doc.encode("utf-8", "surrogatepass").decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            assert "not valid TOML" in message
            return
        assert "config key '" in message, message
        key = message.split("config key '", 1)[1].split("'", 1)[0]
        assert any(part and part in doc for part in key.split(".")), (key, doc)
        return
    assert_valid(config)


def _env_names() -> list[str]:
    names = []
    for section, keys in KEYS_BY_SECTION.items():
        if section.startswith("profiles"):
            continue
        for key in keys:
            names.append(("LOSSLESS_" + (f"{section}_" if section else "") + key).upper())
    return names


ENV_NAMES = _env_names()


ENV_VALUE = st.one_of(
    TEXT,
    INT64.map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["", " ", "none", "null", "true", "off", "YES", "0", "-1", "1_000", "[]"]),
    st.sampled_from(['["a", "b"]', '["("]', "[1]", '{"a": 1}', "0.5", "1.5", " 42 "]),
)


@fuzz(300)
@given(env=st.dictionaries(st.sampled_from(ENV_NAMES), ENV_VALUE, max_size=4))
@example(env={"LOSSLESS_REDACT_PATTERNS": "not json"})
@example(env={"LOSSLESS_SESSIONS_SUMMARIZE_INTERVAL": "1.5"})
@example(env={"LOSSLESS_FRESH_TAIL_MAX_TOKENS": ""})
@example(env={"LOSSLESS_CONTEXT_THRESHOLD": "0"})
@example(env={"LOSSLESS_GUARDS_MAX_RETRIES": "-1"})
@example(env={"LOSSLESS_CONFIG": ""})
def test_any_environment_value_loads_or_is_a_config_error_naming_the_variable(
    env: dict[str, str],
) -> None:
    try:
        config = load_config(env=env)
    except ConfigError as exc:
        message = str(exc)
        assert any(f"(from {name})" in message for name in env), message
        return
    assert_valid(config)


def test_a_config_variable_naming_a_missing_file_or_a_directory_is_a_config_error(
    tmp_path: Path,
) -> None:
    for target in (tmp_path / "missing.toml", tmp_path):
        with pytest.raises(ConfigError, match="does not exist"):
            load_config(env={"LOSSLESS_CONFIG": str(target)})


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"fresh_tail_count = 3\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"config\.toml"):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("doc", "env"),
    [
        ("context_threshold = nan", {}),
        ("[guards]\ntimeout_seconds = inf", {}),
        ("", {"LOSSLESS_COMPACTION_TARGET": "nan"}),
        ("", {"LOSSLESS_GUARDS_WINDOW_SECONDS": "inf"}),
        (f"context_threshold = {10**400}", {}),
    ],
)
def test_non_finite_numbers_are_refused_by_the_config_loader(
    tmp_path: Path, doc: str, env: dict[str, str]
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(doc)
    with pytest.raises(ConfigError, match="config key"):
        load_config(path, env=env)


@pytest.mark.parametrize(
    "env",
    [
        {"LOSSLESS_MAX_EXPAND_TOKENS": str(10**20)},
        {"LOSSLESS_GRANT_TTL_SECONDS": str(10**12)},
    ],
)
def test_integer_settings_the_engine_cannot_use_are_refused(env: dict[str, str]) -> None:
    [name] = env
    with pytest.raises(ConfigError, match=rf"config key '\w+' .*\(from {name}\)"):
        load_config(env=env)
