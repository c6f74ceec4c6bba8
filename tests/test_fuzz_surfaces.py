"""Hostile input at the edges, fuzzed (see tests/test_fuzz.py): the MCP server's tool
arguments, the serve and MCP wires, and the config loader."""

from __future__ import annotations

import json
import math
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_support import (  # noqa: F401 - fixtures, used by name
    CHARS,
    FTS_TEXT,
    IDENTS,
    INT64,
    REF,
    TEXT,
    engine,
    fuzz,
    seeded,
)
from lossless import Config, ConfigError, Engine, load_config

# --- the MCP server's arguments --------------------------------------------------------------

TIME_TEXT = st.one_of(
    st.datetimes(
        min_value=datetime(2, 1, 1),
        max_value=datetime(9998, 12, 31),
        timezones=st.none() | st.timezones(),
    ).map(lambda d: d.isoformat()),
    TEXT,
)

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

    from lossless.mcp_front import Opening
    from lossless.mcp_server import _Guard, _Wire

    wire = io.BytesIO()
    said = io.BytesIO(b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines))
    guard = _Guard(Opening(said, wire, front=False).start(), _Wire(wire))

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
