"""A block as it came is stored without the text its part's columns hold already, and reads
back exactly: any block, the ones that look like the stored form included."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lossless import Config, Engine
from lossless.codec import dumps
from lossless.model import NormalizedMessage, NormalizedPart
from lossless.sample import generate_session
from lossless.store import packed_json
from lossless.store.raw_blocks import Columns, pack, unpack

LONG = "the deploy waits for the canary, then rolls out to every region " * 3

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.text(max_size=40),
    st.sampled_from([LONG, "\u0000", "\u0000raw", "\u0000v", "text"]),
)
_keys = st.one_of(st.text(max_size=8), st.sampled_from(["\u0000", "\u0000raw", "\u0000v", "text"]))
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=12,
)


def round_trip(raw: Any, text: str | None, output: str | None, tool_input: str | None) -> Any:
    columns = Columns(text, output, tool_input)
    return unpack(pack(raw, columns), columns)


@settings(max_examples=400)
@given(
    raw=_json,
    text=st.one_of(st.none(), st.just(LONG), st.text(min_size=24, max_size=60)),
    output=st.one_of(st.none(), st.just(LONG + "!"), st.text(max_size=60)),
    tool_input=st.one_of(st.none(), _json.map(dumps)),
)
def test_every_block_reads_back_exactly(
    raw: Any, text: str | None, output: str | None, tool_input: str | None
) -> None:
    assert dumps(round_trip(raw, text, output, tool_input)) == dumps(raw)


_ids = st.one_of(st.none(), st.sampled_from(["toolu_1", "call_9", ""]), st.text(max_size=8))


@settings(max_examples=400)
@given(
    kind=st.sampled_from(["text", "tool_use", "tool_result", "thinking", 7]),
    text=st.one_of(st.none(), st.text(max_size=20)),
    output=st.one_of(st.none(), st.text(max_size=20)),
    tool_input=st.one_of(st.none(), _json),
    call_id=_ids,
    name=_ids,
    is_error=st.booleans(),
    flags=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_a_block_shaped_like_its_columns_reads_back_exactly(
    kind: Any,
    text: str | None,
    output: str | None,
    tool_input: Any,
    call_id: str | None,
    name: str | None,
    is_error: bool,
    flags: list[bool],
) -> None:
    """Blocks made of a part's columns (or nearly: a key more, a value apart, one missing,
    another order) are stored by their shape's letter only when that is exact."""
    raw: dict[Any, Any] = {"type": kind}
    if flags[0]:
        raw["text"] = text
    if flags[1]:
        raw["id"], raw["name"], raw["input"] = call_id, name, tool_input
    if flags[2]:
        raw["tool_use_id"], raw["content"] = call_id, output if flags[3] else text
    if flags[4]:
        raw["is_error"] = is_error if flags[5] else int(is_error)
    stored_input = None if tool_input is None else dumps(tool_input)
    columns = Columns(text, output, stored_input, call_id, name, is_error)
    stored = pack(raw, columns)
    assert dumps(unpack(stored, columns)) == dumps(raw)


def test_the_commonest_blocks_are_stored_as_their_shape_alone() -> None:
    call = {"path": "src/app.py"}
    cases = [
        ({"type": "text", "text": "hi"}, Columns(text="hi")),
        (
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": call},
            Columns(tool_input=dumps(call), tool_call_id="toolu_1", tool_name="read"),
        ),
        (
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": False},
            Columns(tool_output="ok", tool_call_id="toolu_1"),
        ),
        (
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
            Columns(tool_output="ok", tool_call_id="toolu_1"),
        ),
    ]
    for raw, columns in cases:
        stored = pack(raw, columns)
        assert len(stored) == 5 and stored.startswith("~t1~"), stored
        assert dumps(unpack(stored, columns)) == dumps(raw)
    # a key more, or the error flag apart from the column's: the block's JSON, as before
    extra = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    assert not pack(extra, Columns(text="hi")).startswith("~t1~")
    failed = {"type": "tool_result", "tool_use_id": "t", "content": "ok", "is_error": True}
    assert not pack(failed, Columns(tool_output="ok", tool_call_id="t")).startswith("~t1~")


def test_a_part_built_by_hand_keeps_its_block_exactly(engine: Engine) -> None:
    """A part given to the store directly may carry the error flag as 1 or (SQLite takes it;
    PostgreSQL refuses the batch) an id as a number: its columns read back as a bool and as
    text, so its block is kept as it came, never made again from them."""
    blocks = [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": 1},
        {"type": "tool_result", "tool_use_id": 5, "content": "ok"},
    ]
    parts = [
        NormalizedPart(
            slot="content",
            type="tool_result",
            tool_call_id="t1",
            tool_output="ok",
            is_error=1,
            raw=blocks[0],  # type: ignore[arg-type]
        ),
        NormalizedPart(
            slot="content",
            type="tool_result",
            tool_call_id=5,
            tool_output="ok",  # type: ignore[arg-type]
            raw=blocks[1],
        ),
    ]
    if engine.store.backend != "sqlite":
        blocks, parts = blocks[:1], parts[:1]
    norm = NormalizedMessage(
        role="user",
        content="ok\nok",
        token_count=2,
        parts=parts,
        source_format="anthropic",
        envelope={"f": {"role": "user", "content": None}, "s": {"content": "l"}},
    )
    engine.ingest_batch("s", [norm])
    (message,) = engine.messages("s")
    assert [dumps(p.raw) for p in message.parts] == [dumps(b) for b in blocks]


def test_blocks_that_look_like_the_stored_form_read_back_as_they_came() -> None:
    deep: Any = LONG
    for _ in range(600):  # deeper than the walk goes: kept whole
        deep = [deep]
    for raw in (
        {"\u0000raw": {"\u0000": "text"}, "\u0000v": 1},
        {"\u0000raw": LONG, "\u0000v": 0},
        {"\u0000": "text"},
        {"type": "text", "text": LONG, "\u0000": 1},
        {"type": "text", "text": LONG, "extra": ({"\u0000": "text"},)},  # a tuple hides it
        {"type": "text", "text": LONG, 1: "a key that is no string"},
        "~r1~" + LONG,
        deep,
    ):
        assert dumps(round_trip(raw, LONG, None, None)) == dumps(raw)


def test_rows_stored_before_read_as_they_always_did(engine: Engine) -> None:
    """A block stored whole before blocks were packed (a row of an older store), even one
    shaped like a packed block, reads back as it was stored."""
    engine.ingest("s", {"role": "user", "content": [{"type": "text", "text": LONG}]})
    old = {"\u0000raw": {"\u0000": "text"}, "\u0000v": 1}
    with engine.store.transaction() as conn:
        conn.execute("UPDATE message_parts SET raw = ?", (dumps(old),))
    (message,) = engine.messages("s")
    assert [p.raw for p in message.parts] == [old]


def test_a_tool_result_is_stored_once_and_read_back_exactly(engine: Engine) -> None:
    output = "\n".join(f"line {i}: {LONG}" for i in range(40))
    call = {"path": "src/app.py", "limit": 400, "why": LONG}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": LONG}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "reading it " + LONG},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": call},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": output},
                # a block shaped like the stored form stays what it is
                {"type": "text", "text": LONG, "note": {"\u0000raw": LONG, "\u0000v": 1}},
            ],
        },
    ]
    engine.ingest_batch("s", messages, format="anthropic")
    for sent, stored in zip(messages, engine.messages("s"), strict=True):
        assert [dumps(p.raw) for p in stored.parts] == [dumps(b) for b in sent["content"]]
    # the output is in its part's column once, not again in the block as it came
    rows = engine.store.fetchall("SELECT raw, tool_output FROM message_parts")
    assert sum(output in (r[1] or "") for r in rows) == 1
    assert not any(output in (r[0] or "") for r in rows)
    assert not any(LONG in (r[0] or "") for r in rows if r[0] and "note" not in r[0])


# --- a message's host facts, compressed --------------------------------------------------


@settings(max_examples=300)
@given(facts=st.dictionaries(st.text(max_size=12), _json, max_size=12))
def test_every_host_fact_reads_back_exactly(facts: dict[str, Any]) -> None:
    text = dumps({"entry": facts})
    stored = packed_json.pack(text)
    assert packed_json.unpack(stored) == text
    assert len(stored) <= len(text)


def test_a_transcripts_facts_are_stored_compressed_and_read_back_whole(
    new_db: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Claude Code session imported twice, once with its facts and envelopes compressed and
    once as they were stored before: every message reads back the same, and the compressed
    store holds its facts in under half the bytes, its envelopes in fewer."""
    transcript = tmp_path / "session.jsonl"
    lines = [json.dumps(o) for o in generate_session(30, format="claude_code")]
    transcript.write_text("\n".join(lines) + "\n")

    def imported(db: str) -> tuple[list[Any], int, int]:
        with Engine.open(db, config=Config()) as engine:
            engine.import_path(transcript, format="claude_code")
            (conv,) = engine.conversations()
            read = [
                (m.metadata, m.envelope, [p.raw for p in m.parts])
                for m in engine.messages(conv.conversation.conversation_id)
            ]
            facts, envelopes = engine.store.fetchall(
                "SELECT sum(length(metadata)), sum(length(envelope)) FROM messages"
            )[0]
            return read, int(facts), int(envelopes)

    packed, packed_size, packed_envelopes = imported(new_db())
    monkeypatch.setattr(packed_json, "pack", lambda text: text)
    plain, plain_size, plain_envelopes = imported(new_db())
    assert packed == plain and any(m for m, _, _ in packed) and any(e for _, e, _ in packed)
    assert packed_size < plain_size / 2
    assert packed_envelopes < plain_envelopes
