"""What the hostile-input fuzzers share (tests/test_fuzz*.py): their settings, the strategies
that make hostile values, the helpers that judge an outcome, and the engine fixtures."""

from __future__ import annotations

import itertools
import os
import string
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from lossless import Config, Engine, LosslessError

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
REF = TEXT | st.integers().map(str)
