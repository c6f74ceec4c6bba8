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

The fuzzers for normalization and the importers are in this file; search and lookups in
tests/test_fuzz_search.py; the MCP server, the wires and the config loader in
tests/test_fuzz_surfaces.py; what they share in tests/fuzz_support.py. Cases the fuzzers
found are kept beside them as plain regression tests.

``LOSSLESS_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest tests/test_fuzz*.py`` searches
deeper (the default keeps the file well under a minute).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_support import (
    CHARS,
    JSON,
    NEAR_SHAPES,
    attempt,
    engine,  # noqa: F401 - fixtures, used by name
    fresh,
    fuzz,
    said_why,
)
from lossless import Engine, LosslessError, Message
from lossless.errors import ImportProblem
from lossless.ingest.reconcile import ReconcileReport
from lossless.ingest.shapes import FORMATS
from lossless.ingest.transcripts import FORMATS as TRANSCRIPT_FORMATS
from lossless.timestamps import format_ts, now

# --- message normalization -----------------------------------------------------------------


def assert_stored_exactly_or_refused(engine: Engine, message: Any, **kwargs: Any) -> None:
    original = copy.deepcopy(message)
    result, error = attempt(engine.ingest, fresh(), message, **kwargs)
    if error is not None:
        assert said_why(error), repr(error)
        return
    assert result.inserted == 1
    stored = engine.get_message(result.message_ids[0])
    if kwargs.get("format") == "lossless" and isinstance(original, dict):
        # The lossless format's mapping is a Message's dict form: it reads back as that Message.
        assert stored.to_source() == Message.from_dict(original)
    else:
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
@example(message={"role": "user"}, fmt="lossless")
@example(message={"role": "user", "parts": [{"type": "text", "text": "x"}]}, fmt="lossless")
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
