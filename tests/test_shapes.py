"""Message shapes through the real store: exact round trips, derived facts, idempotency, errors.

Every round trip here goes all the way through SQLite: ``engine.ingest`` (or ``ingest_batch``)
writes the message, ``engine.get_message`` / ``engine.messages`` read it back, and
``StoredMessage.to_source()`` must give back a value equal to what was ingested.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lossless import Engine, IngestResult, Message, Part, StoredMessage, UnknownShapeError
from lossless.model import PART_TYPES

# --- helpers -------------------------------------------------------------------------------

_conv_ids = itertools.count()

#: 60 examples keep the file fast; SHAPES_EXAMPLES=1000 runs a deeper search.
PROPERTY = settings(
    max_examples=int(os.environ.get("SHAPES_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fresh_conversation() -> str:
    """A session id no other example of the run uses (hypothesis shares the engine fixture)."""
    return f"conv-{next(_conv_ids)}"


def ingest_one(engine: Engine, message: Any, **kwargs: Any) -> StoredMessage:
    conv = fresh_conversation()
    result = engine.ingest(conv, message, **kwargs)
    assert result.inserted == 1, result
    assert result.skipped == 0
    return engine.get_message(result.message_ids[0])


def assert_round_trip(engine: Engine, message: Any) -> StoredMessage:
    """Ingest *message* into a fresh conversation and check both read paths give it back."""
    conv = fresh_conversation()
    result = engine.ingest(conv, message)
    assert result.inserted == 1, result
    stored = engine.get_message(result.message_ids[0])
    assert stored.to_source() == message
    listed = engine.messages(conv)
    assert [m.message_id for m in listed] == list(result.message_ids)
    assert listed[0].to_source() == message
    return stored


def assert_batch_round_trip(engine: Engine, messages: list[Any]) -> None:
    conv = fresh_conversation()
    ids = [f"ext-{i}" for i in range(len(messages))]
    result = engine.ingest_batch(conv, messages, external_ids=ids)
    assert result.inserted == len(messages)
    assert result.skipped == 0
    stored = engine.messages(conv)
    assert [m.message_id for m in stored] == list(result.message_ids)
    assert [m.seq for m in stored] == list(range(1, len(messages) + 1))
    assert [m.to_source() for m in stored] == messages
    for mid, original in zip(result.message_ids, messages, strict=True):
        assert engine.get_message(mid).to_source() == original


_SURROGATE = re.compile("[\ud800-\udfff]")


def message_count(engine: Engine, conv: str) -> int:
    found = engine.store.find_conversation(conv)
    return 0 if found is None else engine.store.message_count(found.conversation_id)


# --- strategies ----------------------------------------------------------------------------

#: Hand-picked hard strings: empty, NUL and control characters, CJK, emoji (astral and ZWJ
#: sequences), combining marks, right-to-left text and overrides, BOM, line separators and
#: lone surrogates (which are not valid UTF-8 and must still come back exactly).
SPECIAL_TEXTS = [
    "",
    "\x00",
    "a\x00b",
    "\x01\x02\x1b[31m\x7f",
    "\r\n\t\x0b\x0c",
    "中文字符与标点，。",
    "日本語のテキスト",
    "한국어 문장",
    "😀",
    "👩\u200d👩\u200d👧\u200d👦",
    "\U0001f9d1\U0001f3fd\u200d\U0001f680",
    "e\u0301 n\u0303 a\u0308\u0308\u0308",
    "مرحبا بالعالم",
    "שלום עולם",
    "\u202eevil\u202c",
    "\ufeffbom",
    "\u2028\u2029",
    "\ud800",
    "\udfff",
    "x\ud83dy",
    "\udc00\ud800",
    '{"json": "looking", "but": [1, 2}',
    "\\u0000 \\ud800 escaped-looking",
]

_any_char = st.characters(exclude_categories=())  # includes surrogates (Cs)
texts = st.lists(
    st.one_of(st.sampled_from(SPECIAL_TEXTS), st.text(_any_char, max_size=12), st.text(max_size=8)),
    max_size=4,
).map("".join)
nonempty_texts = texts.filter(bool)
ids = st.one_of(
    st.from_regex(r"(call|toolu|fc|msg|rs)_[A-Za-z0-9]{1,16}", fullmatch=True),
    nonempty_texts,
)
names = st.one_of(st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True), nonempty_texts)
b64 = st.binary(max_size=24).map(lambda b: b.hex())

json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=2**63, max_value=2**70),  # beyond 64 bits, still JSON
        st.floats(allow_nan=False, allow_infinity=False),
        texts,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=12,
)
json_objects = st.dictionaries(texts, json_values, max_size=4)


def with_extras(base: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Add unknown keys (prefixed so they never collide with a shape's own keys)."""
    extras = st.dictionaries(texts.map(lambda k: "x_" + k), json_values, max_size=2)
    return st.builds(lambda b, e: {**b, **e}, base, extras)


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> Any:
    return st.fixed_dictionaries(
        {k: v if isinstance(v, st.SearchStrategy) else st.just(v) for k, v in required.items()},
        optional={
            k: v if isinstance(v, st.SearchStrategy) else st.just(v)
            for k, v in (optional or {}).items()
        },
    )


def argument_strings() -> st.SearchStrategy[str]:
    """Function-call arguments: JSON text (ASCII-escaped or not) or any non-JSON string."""
    return st.one_of(
        st.builds(lambda v, a: json.dumps(v, ensure_ascii=a), json_objects, st.booleans()),
        texts,
        st.sampled_from(["", "{", "NaN", "Infinity", "-Infinity", "1e999", "[1,2,]", "null"]),
    )


# OpenAI Chat Completions

chat_text_part = obj({"type": "text", "text": texts})
chat_parts = st.one_of(
    chat_text_part,
    obj(
        {
            "type": "image_url",
            "image_url": obj(
                {
                    "url": st.one_of(
                        st.just("https://example.com/a.png"),
                        b64.map(lambda d: f"data:image/png;base64,{d}"),
                    )
                },
                {"detail": st.sampled_from(["auto", "low", "high"])},
            ),
        }
    ),
    obj(
        {
            "type": "input_audio",
            "input_audio": obj({"data": b64, "format": st.sampled_from(["wav", "mp3"])}),
        }
    ),
    obj({"type": "file", "file": obj({}, {"file_id": ids, "filename": texts, "file_data": b64})}),
    obj({"type": "refusal", "refusal": texts}),
)
chat_tool_call = obj(
    {
        "id": ids,
        "type": "function",
        "function": obj({"name": names, "arguments": argument_strings()}),
    }
)
chat_messages = with_extras(
    st.one_of(
        obj(
            {
                "role": st.sampled_from(["system", "developer", "user"]),
                "content": st.one_of(texts, st.lists(chat_parts, max_size=4)),
            },
            {"name": names},
        ),
        obj(
            {
                "role": "assistant",
                "content": st.one_of(
                    st.none(), texts, st.lists(st.one_of(chat_text_part, chat_parts), max_size=3)
                ),
            },
            {
                "tool_calls": st.lists(chat_tool_call, max_size=3),
                "name": names,
                "refusal": st.one_of(st.none(), texts),
            },
        ),
        obj(
            {
                "role": "tool",
                "tool_call_id": ids,
                "content": st.one_of(texts, st.lists(chat_text_part, max_size=3)),
            },
            {"name": names},
        ),
    )
)
# Plain two-key messages take a fast path; make sure it is exercised on its own too.
plain_chat_messages = obj(
    {"role": st.sampled_from(["system", "developer", "user", "assistant"]), "content": texts}
)

# OpenAI Responses

annotation = obj(
    {
        "type": "url_citation",
        "start_index": st.integers(0, 100),
        "end_index": st.integers(0, 100),
        "url": st.just("https://example.com"),
        "title": texts,
    }
)
responses_input_parts = st.one_of(
    obj({"type": "input_text", "text": texts}),
    obj(
        {"type": "input_image", "detail": st.sampled_from(["auto", "low", "high"])},
        {"image_url": b64.map(lambda d: f"data:image/png;base64,{d}"), "file_id": ids},
    ),
    obj({"type": "input_file"}, {"file_id": ids, "filename": texts, "file_data": b64}),
)
responses_output_parts = st.one_of(
    obj(
        {"type": "output_text", "text": texts, "annotations": st.lists(annotation, max_size=2)},
        {"logprobs": st.lists(json_objects, max_size=1)},
    ),
    obj({"type": "refusal", "refusal": texts}),
)
responses_items = with_extras(
    st.one_of(
        # EasyInputMessage: no "type"
        obj(
            {
                "role": st.sampled_from(["user", "assistant", "system", "developer"]),
                "content": st.one_of(texts, st.lists(responses_input_parts, max_size=3)),
            }
        ),
        obj(
            {
                "type": "message",
                "role": st.sampled_from(["user", "system", "developer"]),
                "content": st.lists(responses_input_parts, max_size=3),
            },
            {"id": ids, "status": st.sampled_from(["completed", "in_progress"])},
        ),
        obj(
            {
                "type": "message",
                "role": "assistant",
                "content": st.lists(responses_output_parts, max_size=3),
            },
            {"id": ids, "status": st.sampled_from(["completed", "incomplete"])},
        ),
        obj(
            {
                "type": "function_call",
                "call_id": ids,
                "name": names,
                "arguments": argument_strings(),
            },
            {"id": ids, "status": st.sampled_from(["completed", "in_progress"])},
        ),
        obj(
            {
                "type": "function_call_output",
                "call_id": ids,
                "output": st.one_of(texts, st.lists(st.one_of(responses_input_parts), max_size=3)),
            },
            {"id": ids, "status": st.sampled_from(["completed", "incomplete", "failed"])},
        ),
        obj(
            {
                "type": "reasoning",
                "id": ids,
                "summary": st.lists(obj({"type": "summary_text", "text": texts}), max_size=3),
            },
            {
                "encrypted_content": b64,
                "content": st.lists(obj({"type": "reasoning_text", "text": texts}), max_size=2),
            },
        ),
        obj(
            {"type": "custom_tool_call", "call_id": ids, "name": names, "input": texts},
            {"id": ids},
        ),
        obj(
            {
                "type": "web_search_call",
                "id": ids,
                "status": "completed",
                "action": obj({"type": "search", "query": texts}),
            }
        ),
        st.builds(
            lambda kind, body: {"type": kind, **body},
            st.one_of(st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True), nonempty_texts).map(
                lambda s: s + "_call"
            ),
            st.dictionaries(
                st.sampled_from(
                    [
                        "id",
                        "call_id",
                        "status",
                        "arguments",
                        "input",
                        "action",
                        "name",
                        "payload",
                        "result",
                    ]
                ),
                json_values,
                max_size=4,
            ),
        ),
    )
)

# Anthropic Messages

anthropic_text = obj(
    {"type": "text", "text": texts},
    {"citations": st.one_of(st.none(), st.lists(json_objects, max_size=1))},
)
anthropic_image = obj(
    {
        "type": "image",
        "source": obj(
            {
                "type": "base64",
                "media_type": st.sampled_from(["image/png", "image/jpeg"]),
                "data": b64,
            }
        ),
    }
)
anthropic_blocks = st.one_of(
    anthropic_text,
    anthropic_image,
    obj(
        {
            "type": "document",
            "source": obj({"type": "text", "media_type": "text/plain", "data": texts}),
        },
        {"title": texts, "context": texts},
    ),
    obj({"type": "tool_use", "id": ids, "name": names, "input": json_objects}),
    obj(
        {
            "type": "tool_result",
            "tool_use_id": ids,
            "content": st.one_of(
                texts, st.lists(st.one_of(anthropic_text, anthropic_image), max_size=3)
            ),
        },
        {"is_error": st.booleans()},
    ),
    obj({"type": "thinking", "thinking": texts, "signature": b64}),
    obj({"type": "redacted_thinking", "data": b64}),
    obj(
        {"type": "server_tool_use", "id": ids, "name": st.just("web_search"), "input": json_objects}
    ),
    st.builds(
        lambda kind, body: {**body, "type": kind},
        st.one_of(
            st.from_regex(r"x_[a-z_]{1,12}", fullmatch=True), nonempty_texts.map(lambda s: "x_" + s)
        ),
        json_objects,
    ),
)
anthropic_messages = with_extras(
    obj(
        {
            "role": st.sampled_from(["user", "assistant"]),
            "content": st.one_of(texts, st.lists(anthropic_blocks, max_size=4)),
        }
    )
)

# OpenClaw (pi) session messages

timestamps_ms = st.integers(946_684_800_000, 4_102_444_800_000)  # 2000 .. 2100
openclaw_image = obj(
    {"type": "image", "data": b64, "mimeType": st.sampled_from(["image/png", "image/jpeg"])}
)
openclaw_text = obj({"type": "text", "text": texts}, {"textSignature": b64})
openclaw_usage = obj(
    {
        "input": st.integers(0, 10**6),
        "output": st.integers(0, 10**6),
        "cacheRead": st.integers(0, 10**6),
        "cacheWrite": st.integers(0, 10**6),
        "totalTokens": st.integers(0, 10**7),
        "cost": obj(
            {"input": st.floats(0, 10), "output": st.floats(0, 10), "total": st.floats(0, 20)}
        ),
    }
)
openclaw_messages = with_extras(
    st.one_of(
        obj(
            {
                "role": "user",
                "content": st.one_of(
                    texts, st.lists(st.one_of(openclaw_text, openclaw_image), max_size=3)
                ),
                "timestamp": timestamps_ms,
            }
        ),
        obj(
            {
                "role": "assistant",
                "content": st.lists(
                    st.one_of(
                        openclaw_text,
                        obj({"type": "thinking", "thinking": texts}, {"thinkingSignature": b64}),
                        obj(
                            {
                                "type": "toolCall",
                                "id": ids,
                                "name": names,
                                "arguments": json_objects,
                            }
                        ),
                    ),
                    max_size=4,
                ),
                "api": st.sampled_from(
                    ["anthropic-messages", "openai-responses", "openai-completions"]
                ),
                "provider": st.sampled_from(["anthropic", "openai", "google"]),
                "model": texts,
                "usage": openclaw_usage,
                "stopReason": st.sampled_from(["stop", "length", "toolUse", "error", "aborted"]),
                "timestamp": timestamps_ms,
            },
            {"errorMessage": texts},
        ),
        obj(
            {
                "role": "toolResult",
                "toolCallId": ids,
                "toolName": names,
                "content": st.lists(st.one_of(openclaw_text, openclaw_image), max_size=3),
                "isError": st.booleans(),
                "timestamp": timestamps_ms,
            },
            {"details": json_values},
        ),
    )
)

# lossless.Message

parts = st.builds(
    Part,
    type=st.one_of(st.sampled_from(PART_TYPES), nonempty_texts),
    text=st.one_of(st.none(), texts),
    tool_call_id=st.one_of(st.none(), ids),
    tool_name=st.one_of(st.none(), names),
    tool_input=json_values,
    tool_output=st.one_of(st.none(), texts),
    is_error=st.booleans(),
    raw=json_values,
)
lossless_messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "system", "tool"]),
    content=texts,
    parts=st.lists(parts, max_size=3).map(tuple),
    external_id=st.one_of(st.none(), ids),
    created_at=st.one_of(
        st.none(),
        st.datetimes(
            min_value=datetime(1900, 1, 1),
            max_value=datetime(2200, 1, 1),
            timezones=st.sampled_from(
                [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
            ),
        ),
        st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    ),
    metadata=json_objects,
)

ALL_SHAPES = {
    "openai_chat": chat_messages,
    "openai_responses": responses_items,
    "anthropic": anthropic_messages,
    "openclaw": openclaw_messages,
    "lossless": lossless_messages,
}


# --- 1. exact round trips through the store ------------------------------------------------


@PROPERTY
@given(message=chat_messages)
def test_openai_chat_messages_round_trip_exactly(engine: Engine, message: dict[str, Any]) -> None:
    assert_round_trip(engine, message)


@PROPERTY
@given(message=plain_chat_messages)
def test_plain_role_and_text_messages_round_trip_exactly(
    engine: Engine, message: dict[str, Any]
) -> None:
    stored = assert_round_trip(engine, message)
    assert not _SURROGATE.search(stored.content)


@PROPERTY
@given(item=responses_items)
def test_openai_responses_items_round_trip_exactly(engine: Engine, item: dict[str, Any]) -> None:
    assert_round_trip(engine, item)


@PROPERTY
@given(message=anthropic_messages)
def test_anthropic_messages_round_trip_exactly(engine: Engine, message: dict[str, Any]) -> None:
    assert_round_trip(engine, message)


@PROPERTY
@given(message=openclaw_messages)
def test_openclaw_messages_round_trip_exactly(engine: Engine, message: dict[str, Any]) -> None:
    assert_round_trip(engine, message)


@PROPERTY
@given(message=lossless_messages)
def test_lossless_message_reads_back_equal_to_the_message(engine: Engine, message: Message) -> None:
    stored = assert_round_trip(engine, message)
    rebuilt = stored.to_source()
    assert isinstance(rebuilt, Message)
    assert rebuilt.parts == message.parts
    assert rebuilt.created_at == message.created_at


@PROPERTY
@given(batch=st.lists(st.one_of(*ALL_SHAPES.values(), plain_chat_messages), min_size=1, max_size=6))
def test_a_batch_of_mixed_shapes_round_trips_exactly_and_in_order(
    engine: Engine, batch: list[Any]
) -> None:
    assert_batch_round_trip(engine, batch)


@PROPERTY
@given(
    shape=st.sampled_from(sorted(ALL_SHAPES)),
    data=st.data(),
)
def test_ingesting_with_the_format_named_round_trips_exactly(
    engine: Engine, shape: str, data: st.DataObject
) -> None:
    message = data.draw(ALL_SHAPES[shape])
    conv = fresh_conversation()
    result = engine.ingest(conv, message, format=shape)
    stored = engine.get_message(result.message_ids[0])
    assert stored.source_format == shape
    assert stored.to_source() == message


@PROPERTY
@given(message=st.one_of(*ALL_SHAPES.values()))
def test_stored_text_columns_are_valid_utf8_even_when_the_source_has_lone_surrogates(
    engine: Engine, message: Any
) -> None:
    stored = ingest_one(engine, message)
    assert not _SURROGATE.search(stored.content)
    for part in stored.parts:
        for value in (part.text, part.tool_call_id, part.tool_name, part.tool_output, part.type):
            assert value is None or not _SURROGATE.search(value)
    assert stored.external_id is None or not _SURROGATE.search(stored.external_id)


@pytest.mark.parametrize(
    "message",
    [
        # Two lone surrogates that happen to form a pair are not the astral character.
        {"role": "user", "content": "\ud800\udfff", "x_pair": "\udbff\udc00"},
        {"role": "user", "content": "\U000103ff", "x_astral": "\U0010fc00"},
        {"role": "user", "content": [{"type": "text", "text": "a\ud83d\ude00b"}]},
        # Integers beyond 64 bits are JSON numbers and must not come back as floats.
        {"role": "user", "content": "n", "x_big": 2**64, "x_neg": -(2**63) - 1},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": {"n": 123456789012345678901}}
            ],
        },
        # Non-JSON tool arguments holding a lone surrogate (they land in the plain text).
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "x\ud800"}}
            ],
        },
        {"type": "custom_tool_call", "call_id": "c", "name": "patch", "input": "\udc00"},
        {"type": "\ud800_call", "id": "x"},
        {"role": "tool", "tool_call_id": "call_\ud800", "content": "out"},
        # Values that look like the store's own escape hatches are still plain data.
        {"role": "user", "content": "w", "x": {"\x00lossless:wtf8": "\x00\ufdd0abc"}},
        {"\x00lossless:wtf8": 1, "type": "function_call_output", "call_id": "c", "output": ""},
        Message(
            role="tool",
            content="r",
            external_id="m\udfff",
            parts=(
                Part(
                    type="tool_result",
                    tool_call_id="c\ud800",
                    tool_name="n\udc00",
                    tool_output="o",
                    raw={"\ud800": ["\udfff"]},
                ),
            ),
        ),
    ],
    ids=[
        "surrogate-pair-code-points",
        "astral-chars",
        "surrogate-pair-in-block",
        "ints-beyond-64-bits",
        "big-int-tool-input",
        "chat-args-with-surrogate",
        "custom-tool-input-surrogate",
        "unknown-call-type-surrogate",
        "tool-call-id-surrogate",
        "wrapper-lookalike-nested",
        "wrapper-lookalike-key",
        "lossless-surrogate-ids",
    ],
)
def test_json_edge_values_round_trip_exactly(engine: Engine, message: Any) -> None:
    assert_round_trip(engine, message)
    assert_batch_round_trip(engine, [message])


@pytest.mark.parametrize(
    "value",
    [
        {"\x00lossless:wtf8": "\x00\ufdd0x"},
        {"\x00lossless:wtf8": {"\x00lossless:wtf8": "\ud800"}},
        {"big": 2**80, "s": "\ud800\udc00", "astral": "\U00010000"},
        ["\x00\ufdd0", "\ufdd0", 10**30, -(10**30), 1.5e300],
    ],
)
def test_tool_inputs_read_back_as_the_exact_json_value(engine: Engine, value: Any) -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": value}],
    }
    stored = assert_round_trip(engine, message)
    (call,) = stored.parts
    assert call.tool_input == value
    assert type(call.tool_input) is type(value)


def test_lossless_message_without_parts_round_trips_exactly(engine: Engine) -> None:
    msg = Message(role="user", content="just text 中文 😀")
    assert assert_round_trip(engine, msg).content == "just text 中文 😀"


# Large tool outputs (fixed examples: hypothesis is the wrong tool for size)

_CHUNK = "résultat 結果 😀 line\x00\n"
BIG = (_CHUNK * (2_000_000 // len(_CHUNK) + 1))[:2_000_000]
BIG_WITH_SURROGATE = BIG[:1_000_000] + "\ud800" + BIG[:500_000]


@pytest.mark.parametrize(
    "big", [BIG, BIG_WITH_SURROGATE], ids=["2MB-unicode", "1.5MB-lone-surrogate"]
)
@pytest.mark.parametrize(
    "make",
    [
        lambda out: {"role": "tool", "tool_call_id": "call_big", "content": out},
        lambda out: {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_big", "content": out}],
        },
        lambda out: {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_big",
                    "content": [{"type": "text", "text": out}],
                }
            ],
        },
        lambda out: {"type": "function_call_output", "call_id": "call_big", "output": out},
        lambda out: {
            "role": "toolResult",
            "toolCallId": "call_big",
            "toolName": "bash",
            "content": [{"type": "text", "text": out}],
            "isError": False,
            "timestamp": 1_700_000_000_000,
        },
    ],
    ids=["chat-tool", "anthropic-str", "anthropic-blocks", "responses-output", "openclaw"],
)
def test_megabyte_tool_outputs_round_trip_exactly_and_leave_the_context_as_files(
    engine: Engine, make: Callable[[str], Any], big: str
) -> None:
    message = make(big)
    stored = assert_round_trip(engine, message)
    assert stored.role == "tool"
    result_parts = [p for p in stored.parts if p.type == "tool_result"]
    assert len(result_parts) == 1
    assert result_parts[0].tool_output is not None
    assert BIG[:1_000_000] in result_parts[0].tool_output  # the part keeps it all
    # Far above large_file_token_threshold: the plain text holds a reference, the file the rest.
    assert len(stored.content) < 2_000
    assert stored.token_count < 1_000
    [record] = engine.store.large_files(message_ids=[stored.message_id])
    assert record.file_id in stored.content
    assert engine.read_large_file(record.file_id) == result_parts[0].tool_output


def test_megabyte_tool_call_arguments_round_trip_exactly(engine: Engine) -> None:
    args = json.dumps({"path": "big.txt", "text": BIG}, ensure_ascii=False)
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "write", "arguments": args}}
        ],
    }
    stored = assert_round_trip(engine, message)
    (call,) = stored.parts
    assert call.tool_input == {"path": "big.txt", "text": BIG}


# --- 2. derived facts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "role"),
    [
        ({"role": "developer", "content": "be brief"}, "system"),
        ({"role": "developer", "content": [{"type": "text", "text": "be brief"}]}, "system"),
        ({"role": "system", "content": "be brief"}, "system"),
        (
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "be brief"}],
            },
            "system",
        ),
        ({"role": "tool", "tool_call_id": "c1", "content": "42"}, "tool"),
        ({"type": "function_call_output", "call_id": "c1", "output": "42"}, "tool"),
        ({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}, "assistant"),
        ({"type": "reasoning", "id": "rs_1", "summary": []}, "assistant"),
        (
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "b"},
                ],
            },
            "tool",
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
                    {"type": "text", "text": "and also this"},
                ],
            },
            "user",
        ),
        (
            {
                "role": "toolResult",
                "toolCallId": "c1",
                "toolName": "read",
                "content": [{"type": "text", "text": "file body"}],
                "isError": False,
                "timestamp": 1_700_000_000_000,
            },
            "tool",
        ),
        (Message(role="tool", content="x"), "tool"),
    ],
)
def test_roles_are_mapped_to_the_four_stored_roles(engine: Engine, message: Any, role: str) -> None:
    assert ingest_one(engine, message).role == role


def test_chat_tool_call_names_and_arguments_are_in_the_searchable_text(engine: Engine) -> None:
    stored = ingest_one(
        engine,
        {
            "role": "assistant",
            "content": "let me look",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "grep_files", "arguments": '{"pattern": "needle42"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "shell", "arguments": "not json: ls -la /tmp"},
                },
            ],
        },
    )
    assert "let me look" in stored.content
    assert "grep_files" in stored.content
    assert "needle42" in stored.content
    assert "shell" in stored.content
    assert "not json: ls -la /tmp" in stored.content
    calls = [p for p in stored.parts if p.type == "tool_call"]
    assert [(p.tool_call_id, p.tool_name) for p in calls] == [
        ("call_a", "grep_files"),
        ("call_b", "shell"),
    ]
    assert calls[0].tool_input == {"pattern": "needle42"}
    assert calls[1].tool_input == "not json: ls -la /tmp"


@pytest.mark.parametrize("arguments", ["NaN", "Infinity", "-Infinity", "1e999", "[NaN]"])
def test_tool_arguments_that_are_not_strict_json_are_kept_verbatim(
    engine: Engine, arguments: str
) -> None:
    stored = ingest_one(
        engine,
        {"type": "function_call", "call_id": "c1", "name": "calc", "arguments": arguments},
    )
    (call,) = stored.parts
    assert call.tool_input == arguments
    assert arguments in stored.content


def test_chat_tool_output_is_searchable_and_linked_to_its_call(engine: Engine) -> None:
    stored = ingest_one(
        engine,
        {
            "role": "tool",
            "tool_call_id": "call_a",
            "name": "grep_files",
            "content": "found needle42 in a.txt",
        },
    )
    assert stored.role == "tool"
    assert "found needle42 in a.txt" in stored.content
    (part,) = stored.parts
    assert part.type == "tool_result"
    assert part.tool_call_id == "call_a"
    assert part.tool_name == "grep_files"
    assert part.tool_output == "found needle42 in a.txt"
    assert part.is_error is False


def test_anthropic_tool_use_and_results_carry_ids_inputs_and_errors(engine: Engine) -> None:
    call = ingest_one(
        engine,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should search", "signature": "sig=="},
                {"type": "text", "text": "Searching."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "web_search",
                    "input": {"query": "quokka facts", "limit": 3},
                },
            ],
        },
    )
    assert call.role == "assistant"
    for needle in ("I should search", "Searching.", "web_search", "quokka facts"):
        assert needle in call.content
    assert [p.type for p in call.parts] == ["reasoning", "text", "tool_call"]
    tool = call.parts[2]
    assert (tool.tool_call_id, tool.tool_name) == ("toolu_1", "web_search")
    assert tool.tool_input == {"query": "quokka facts", "limit": 3}

    result = ingest_one(
        engine,
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "quokkas smile"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                        },
                    ],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "timeout",
                    "is_error": True,
                },
            ],
        },
    )
    assert result.role == "tool"
    assert "quokkas smile" in result.content
    assert "timeout" in result.content
    assert [(p.tool_call_id, p.is_error) for p in result.parts] == [
        ("toolu_1", False),
        ("toolu_2", True),
    ]
    assert result.parts[1].tool_output == "timeout"


def test_responses_function_calls_and_outputs_carry_ids_and_text(engine: Engine) -> None:
    call = ingest_one(
        engine,
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_9",
            "name": "get_weather",
            "arguments": '{"city": "Zürich"}',
            "status": "completed",
        },
    )
    assert call.role == "assistant"
    assert "get_weather" in call.content
    assert "Zürich" in call.content
    (part,) = call.parts
    assert (part.type, part.tool_call_id, part.tool_name) == ("tool_call", "call_9", "get_weather")
    assert part.tool_input == {"city": "Zürich"}

    out = ingest_one(
        engine,
        {
            "type": "function_call_output",
            "call_id": "call_9",
            "output": [{"type": "input_text", "text": "sunny, 21°C"}],
            "status": "failed",
        },
    )
    assert out.role == "tool"
    assert "sunny, 21°C" in out.content
    (part,) = out.parts
    assert (part.type, part.tool_call_id, part.is_error) == ("tool_result", "call_9", True)

    hosted = ingest_one(
        engine,
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "platypus venom"},
        },
    )
    (part,) = hosted.parts
    assert part.type == "tool_call"
    assert part.tool_name == "web_search"
    assert "platypus venom" in hosted.content

    reasoning = ingest_one(
        engine,
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "compared two options"}],
            "encrypted_content": "gAAAA",
        },
    )
    assert reasoning.parts[0].type == "reasoning"
    assert "compared two options" in reasoning.content


def test_openclaw_tool_calls_and_results_carry_ids_names_and_errors(engine: Engine) -> None:
    call = ingest_one(
        engine,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "reading"},
                {
                    "type": "toolCall",
                    "id": "tc_1",
                    "name": "read",
                    "arguments": {"path": "notes/ünïcode.md"},
                },
            ],
            "api": "anthropic-messages",
            "provider": "anthropic",
            "model": "claude",
            "usage": {"input": 1, "output": 2},
            "stopReason": "toolUse",
            "timestamp": 1_700_000_000_000,
        },
    )
    assert "read" in call.content
    assert "notes/ünïcode.md" in call.content
    tool = call.parts[1]
    assert (tool.type, tool.tool_call_id, tool.tool_name) == ("tool_call", "tc_1", "read")
    assert tool.tool_input == {"path": "notes/ünïcode.md"}

    result = ingest_one(
        engine,
        {
            "role": "toolResult",
            "toolCallId": "tc_1",
            "toolName": "read",
            "content": [{"type": "text", "text": "ENOENT: no such file"}],
            "isError": True,
            "details": {"code": 2},
            "timestamp": 1_700_000_000_500,
        },
    )
    assert result.role == "tool"
    assert "ENOENT: no such file" in result.content
    (part,) = result.parts
    assert (part.type, part.tool_call_id, part.tool_name, part.is_error) == (
        "tool_result",
        "tc_1",
        "read",
        True,
    )
    assert part.tool_output == "ENOENT: no such file"


def test_lossless_message_parts_keep_their_typed_fields(engine: Engine) -> None:
    msg = Message(
        role="assistant",
        content="",
        parts=(
            Part(type="text", text="checking the log"),
            Part(type="tool_call", tool_call_id="c7", tool_name="tail", tool_input={"lines": 20}),
            Part(type="tool_result", tool_call_id="c7", tool_output="boom", is_error=True),
        ),
        external_id="m-1",
    )
    stored = ingest_one(engine, msg)
    assert "checking the log" in stored.content
    assert "tail" in stored.content
    assert "boom" in stored.content
    assert [
        (p.type, p.tool_call_id, p.tool_name, p.tool_input, p.is_error) for p in stored.parts
    ] == [
        ("text", None, None, None, False),
        ("tool_call", "c7", "tail", {"lines": 20}, False),
        ("tool_result", "c7", None, None, True),
    ]
    assert stored.external_id == "m-1"


def test_token_count_is_positive_for_any_nonempty_text(engine: Engine) -> None:
    for text in ["a", " ", "\x00", "e\u0301", "😀", "\ud800", "שלום", "中"]:
        stored = ingest_one(engine, {"role": "user", "content": text})
        assert stored.token_count > 0, repr(text)
    assert ingest_one(engine, {"role": "user", "content": ""}).token_count == 0


@PROPERTY
@given(message=st.one_of(*ALL_SHAPES.values()))
def test_every_message_with_text_costs_tokens(engine: Engine, message: Any) -> None:
    stored = ingest_one(engine, message)
    if stored.content:
        assert stored.token_count > 0
    else:
        assert stored.token_count >= 0


def test_cjk_text_costs_more_tokens_than_ascii_of_the_same_length(engine: Engine) -> None:
    ascii_msg = ingest_one(engine, {"role": "user", "content": "abcd" * 50})
    cjk_msg = ingest_one(engine, {"role": "user", "content": "漢字仮名" * 50})
    assert cjk_msg.token_count > ascii_msg.token_count
    more = ingest_one(engine, {"role": "user", "content": "漢字仮名" * 100})
    assert more.token_count > cjk_msg.token_count


def test_images_cost_tokens_even_without_text(engine: Engine) -> None:
    stored = ingest_one(
        engine,
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}],
        },
    )
    assert stored.token_count > 0
    assert stored.parts[0].type == "image"


# --- 3. idempotency ------------------------------------------------------------------------


def test_the_same_message_with_the_same_external_id_is_stored_once(engine: Engine) -> None:
    msg = {"role": "user", "content": "hello"}
    first = engine.ingest("s", msg, external_id="e-1")
    second = engine.ingest("s", msg, external_id="e-1")
    assert (first.inserted, first.skipped) == (1, 0)
    assert (second.inserted, second.skipped) == (0, 1)
    assert second.message_ids == ()
    assert len(engine.messages("s")) == 1


def test_identical_content_without_external_id_is_stored_at_each_position(
    engine: Engine,
) -> None:
    msg = {"role": "user", "content": "ok"}
    engine.ingest("s", msg)
    engine.ingest("s", {"role": "assistant", "content": "sure"})
    again = engine.ingest("s", msg)
    assert (again.inserted, again.skipped) == (1, 0)
    stored = engine.messages("s")
    assert [m.to_source() for m in stored] == [msg, {"role": "assistant", "content": "sure"}, msg]
    assert [m.seq for m in stored] == [1, 2, 3]


@pytest.mark.parametrize(
    "message",
    [
        {"role": "tool", "tool_call_id": "call_1", "content": "out"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "f",
            "arguments": "{}",
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call_output", "call_id": "call_1", "output": "x"},
        {"role": "assistant", "id": "__fake_id__", "content": "same reply"},
    ],
)
def test_a_live_append_keeps_an_item_whose_own_id_was_seen_before(
    engine: Engine, message: Any
) -> None:
    # Hosts reuse ids (the Agents SDK gives every Chat Completions reply "__fake_id__"):
    # an id inside the item is kept with it, but never decides that it is a repeat.
    first = engine.ingest("s", message)
    second = engine.ingest("s", message)
    batch = engine.ingest_batch("s", [message, message])
    assert (first.inserted, second.inserted, batch.inserted) == (1, 1, 2)
    stored = engine.messages("s")
    assert [m.to_source() for m in stored] == [message] * 4
    assert [m.external_id for m in stored] == [None] * 4


@pytest.mark.parametrize("message", [Message(role="user", content="hi", external_id="mine")])
def test_an_external_id_the_caller_gives_makes_reingestion_a_no_op(
    engine: Engine, message: Any
) -> None:
    first = engine.ingest("s", message)
    assert engine.get_message(first.message_ids[0]).external_id == "mine"
    second = engine.ingest("s", message)
    assert (second.inserted, second.skipped) == (0, 1)
    plain = {"role": "tool", "tool_call_id": "call_1", "content": "out"}
    batch = engine.ingest_batch("s", [plain, plain], external_ids=["e1", "e1"])
    again = engine.ingest("s", plain, external_id="e1")
    assert (batch.inserted, batch.skipped, again.skipped) == (1, 1, 1)
    assert len(engine.messages("s")) == 2


def test_external_ids_are_scoped_to_their_conversation(engine: Engine) -> None:
    msg = {"role": "tool", "tool_call_id": "call_1", "content": "out"}
    assert engine.ingest("a", msg, external_id="t1").inserted == 1
    assert engine.ingest("b", msg, external_id="t1").inserted == 1


def test_a_batch_repeating_an_item_stores_it_each_time(engine: Engine) -> None:
    out = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    result = engine.ingest_batch(
        "s",
        [{"role": "user", "content": "go"}, out, {"role": "assistant", "content": "done"}, out],
    )
    assert isinstance(result, IngestResult)
    assert (result.inserted, result.skipped) == (4, 0)
    assert [m.to_source() for m in engine.messages("s")] == [
        {"role": "user", "content": "go"},
        out,
        {"role": "assistant", "content": "done"},
        out,
    ]


def test_a_batch_with_explicit_repeated_external_ids_stores_the_first(engine: Engine) -> None:
    result = engine.ingest_batch(
        "s",
        [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
        external_ids=["same", "same"],
    )
    assert (result.inserted, result.skipped) == (1, 1)
    assert [m.content for m in engine.messages("s")] == ["one"]


def test_ids_that_differ_only_in_lone_surrogates_are_not_merged(engine: Engine) -> None:
    a = {"type": "function_call_output", "id": "out_\ud800", "call_id": "c", "output": "A"}
    b = {"type": "function_call_output", "id": "out_\udfff", "call_id": "c", "output": "B"}
    assert engine.ingest("s", a, external_id=a["id"]).inserted == 1
    assert engine.ingest("s", b, external_id=b["id"]).inserted == 1
    assert engine.ingest("s", a, external_id=a["id"]).skipped == 1
    assert [m.to_source() for m in engine.messages("s")] == [a, b]


def test_a_batch_with_one_unknown_shape_stores_nothing(engine: Engine) -> None:
    engine.ingest("s", {"role": "user", "content": "before"})
    batch = [
        {"role": "user", "content": "fine"},
        {"role": "tool", "tool_call_id": "c1", "content": "also fine"},
        {"nonsense": True},
        {"role": "assistant", "content": "never stored"},
    ]
    with pytest.raises(UnknownShapeError):
        engine.ingest_batch("s", batch)
    assert message_count(engine, "s") == 1
    assert [m.content for m in engine.messages("s")] == ["before"]
    # The whole batch, fixed, goes in afterwards: nothing half-stored blocks it.
    batch[2] = {"role": "user", "content": "fixed"}
    assert engine.ingest_batch("s", batch).inserted == 4
    assert message_count(engine, "s") == 5


def test_a_failed_batch_does_not_create_its_conversation(engine: Engine) -> None:
    with pytest.raises(UnknownShapeError):
        engine.ingest_batch("new", [{"role": "user", "content": "x"}, 42])
    assert message_count(engine, "new") == 0


# --- 4. bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("just a string", "mapping"),
        (["role", "user"], "mapping"),
        (42, "mapping"),
        (None, "mapping"),
        ({}, "expected"),
        ({"foo": 1, "bar": 2}, "expected"),
        ({"content": "no role"}, "expected"),
        ({"role": None, "content": "x"}, "expected"),
        ({"role": ["user"], "content": "x"}, "expected"),
        ({"role": {"name": "user"}, "content": "x"}, "expected"),
        ({"type": 7}, "expected"),
    ],
)
def test_bad_input_raises_unknown_shape_error_saying_what_was_expected(
    engine: Engine, message: Any, expected: str
) -> None:
    with pytest.raises(UnknownShapeError, match=re.escape(expected)):
        engine.ingest("s", message)
    assert message_count(engine, "s") == 0


@pytest.mark.parametrize(
    ("message", "role", "text"),
    [
        ({"role": "robot", "content": "beep"}, "assistant", "beep"),
        ({"role": "user", "content": 42}, "user", "{"),
        ({"role": "user", "content": {"text": "hi"}}, "user", "hi"),
        ({"role": "tool", "tool_call_id": "c", "content": 3.5}, "tool", "c"),
        ({"type": "message", "role": "robot", "content": []}, "assistant", "{"),
        ({"role": "toolResult", "content": {"x": "1"}}, "tool", "1"),
        (
            {"type": "program", "id": "pg_1", "code": "weather tools", "status": "done"},
            "assistant",
            "weather tools",
        ),
        ({"type": "brand_new_item", "payload": {"note": "kept"}}, "assistant", "kept"),
    ],
)
def test_an_item_of_an_unknown_kind_is_kept_verbatim_with_one_warning(
    engine: Engine,
    caplog: pytest.LogCaptureFixture,
    message: Any,
    role: str,
    text: str,
) -> None:
    engine.ingest("s", message)
    engine.ingest("s", message)
    stored = engine.messages("s")
    assert [m.to_source() for m in stored] == [message, message]
    assert {(m.role, m.source_format) for m in stored} == {(role, "unknown")}
    assert stored[0].content.startswith(text)


def test_an_unknown_kind_is_named_in_one_warning_however_often_it_comes(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    kind = f"item_kind_{uuid.uuid4().hex}"  # never warned of before in this process
    with caplog.at_level(logging.WARNING, logger="lossless.ingest.shapes"):
        for n in range(3):
            engine.ingest("s", {"type": kind, "n": str(n)})
    warned = [r.getMessage() for r in caplog.records if kind in r.getMessage()]
    assert len(warned) == 1
    assert "verbatim" in warned[0]
    assert [m.to_source()["n"] for m in engine.messages("s")] == ["0", "1", "2"]


def test_an_unknown_item_passes_through_responses_assembly_and_counts_its_text(
    engine: Engine,
) -> None:
    item = {"type": "widget_state", "id": "w_1", "widgets": [{"name": "get_weather"}]}
    engine.ingest("s", {"role": "user", "content": "which tools?"})
    engine.ingest("s", item)
    ctx = engine.assemble("s", 10_000, format="responses")
    assert ctx.messages[-1] == item
    assert engine.messages("s")[-1].token_count > 0
    plain = engine.assemble("s", 10_000, format="openai")
    assert "get_weather" in json.dumps(plain.messages)


@pytest.mark.parametrize(
    ("fmt", "message", "expected"),
    [
        ("anthropic", {"role": "tool", "content": "x"}, "expected one of user, assistant"),
        ("anthropic", {"role": "user", "content": 1}, "must be a string"),
        ("openai_chat", {"role": "toolResult", "content": "x"}, "expected one of"),
        ("openai_responses", {"role": "user", "content": True}, "must be a string"),
        ("openclaw", {"role": "developer", "content": "x"}, "expected one of"),
        ("openclaw", ["not", "a", "dict"], "must be a mapping"),
        ("lossless", "not a message", "lossless.Message"),
        ("nonsense", {"role": "user", "content": "x"}, "use one of"),
    ],
)
def test_a_named_format_rejects_messages_that_do_not_fit_it(
    engine: Engine, fmt: str, message: Any, expected: str
) -> None:
    with pytest.raises(UnknownShapeError, match=re.escape(expected)):
        engine.ingest("s", message, format=fmt)


@pytest.mark.parametrize(
    "message",
    [
        Message(role="robot", content="x"),  # type: ignore[arg-type]
        Message(role="user", content=None),  # type: ignore[arg-type]
        Message(role="user", content=["a"]),  # type: ignore[arg-type]
    ],
)
def test_a_malformed_lossless_message_is_rejected(engine: Engine, message: Message) -> None:
    with pytest.raises(UnknownShapeError, match="lossless Message"):
        engine.ingest("s", message)


def test_unhashable_block_types_are_kept_rather_than_crashing(engine: Engine) -> None:
    message = {"role": "user", "content": [{"type": ["text"], "text": "odd"}, {"type": {}}]}
    stored = assert_round_trip(engine, message)
    assert [p.type for p in stored.parts] == ["other", "other"]
    assert "odd" in stored.content


# --- 5. created_at -------------------------------------------------------------------------


_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def _expected_stamp(ms: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@PROPERTY
@given(ms=timestamps_ms)
def test_openclaw_millisecond_timestamps_become_created_at_exactly(engine: Engine, ms: int) -> None:
    for message in (
        {"role": "user", "content": "hi", "timestamp": ms},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "hello"}],
            "api": "openai-responses",
            "provider": "openai",
            "model": "gpt",
            "usage": {"input": 1, "output": 1},
            "stopReason": "stop",
            "timestamp": ms,
        },
        {
            "role": "toolResult",
            "toolCallId": "c",
            "toolName": "ls",
            "content": [{"type": "text", "text": "a b"}],
            "isError": False,
            "timestamp": ms,
        },
    ):
        stored = ingest_one(engine, message)
        assert stored.created_at == _expected_stamp(ms), message
        assert stored.to_source() == message


def test_far_future_openclaw_timestamps_keep_exact_milliseconds(engine: Engine) -> None:
    ms = 252_883_846_593_008  # 9983-07-28T08:56:33.008Z
    stored = ingest_one(engine, {"role": "user", "content": "from the future", "timestamp": ms})
    assert stored.created_at == _expected_stamp(ms)


def test_openclaw_timestamps_keep_sub_second_precision(engine: Engine) -> None:
    stored = ingest_one(
        engine,
        {
            "role": "toolResult",
            "toolCallId": "c",
            "toolName": "ls",
            "content": [{"type": "text", "text": "x"}],
            "isError": False,
            "timestamp": 1_700_000_000_123,
        },
    )
    assert stored.created_at == "2023-11-14T22:13:20.123000Z"


def test_an_explicit_created_at_wins_and_is_stored_in_utc(engine: Engine) -> None:
    when = datetime(2024, 2, 29, 23, 59, 59, 987654, tzinfo=timezone(timedelta(hours=2)))
    stored = ingest_one(engine, {"role": "user", "content": "leap"}, created_at=when)
    assert stored.created_at == "2024-02-29T21:59:59.987654Z"
    msg = Message(role="user", content="own", created_at=when)
    stored = ingest_one(engine, msg)
    assert stored.created_at == "2024-02-29T21:59:59.987654Z"
    assert stored.to_source() == msg


def test_without_a_source_time_the_ingest_time_is_used(engine: Engine) -> None:
    before = datetime.now(UTC)
    engine.ingest("s", {"role": "user", "content": "first"})
    engine.ingest("s", {"role": "assistant", "content": "second"})
    after = datetime.now(UTC)
    first, second = engine.messages("s")
    for stored in (first, second):
        assert _STAMP.match(stored.created_at), stored.created_at
        moment = datetime.strptime(stored.created_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert before <= moment <= after
    assert first.created_at < second.created_at
