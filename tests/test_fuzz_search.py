"""Hostile input to search and lookups, fuzzed (see tests/test_fuzz.py): the full-text
sanitizer, the regex mode and its bounds, and id parsing."""

from __future__ import annotations

import string
import time
from pathlib import Path
from typing import Any

import pytest
import regex
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_support import (  # noqa: F401 - fixtures, used by name
    CHARS,
    FTS_TEXT,
    HEX,
    IDENTS,
    INT64,
    NO_WILDCARDS,
    TEXT,
    attempt,
    engine,
    fresh,
    fuzz,
    said_why,
    seeded,
)
from lossless import Engine, LosslessError, NotFoundError
from lossless.retrieval.grants import GrantError
from lossless.retrieval.grep import GrepError, GrepResult, grep

# --- the full-text sanitizer ---------------------------------------------------------------


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
@example(needle="0\u0b58\x00:", sort="recency")
@example(
    needle="\u3040\x000", sort="recency"
)  # a NUL, kept in the substring  # an unassigned code point: a word character
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
