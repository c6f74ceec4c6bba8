"""Model providers over real HTTP, their credentials, and the guards around them.

The ``openai`` and ``anthropic`` summarizers talk, through their official SDKs, to a local
pytest-httpserver that answers in each provider's wire format (Chat Completions, Messages).
No test needs the internet or a real key; windows and cooldowns run on a fake clock.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from lossless import Config, ConfigError, Engine, load_config
from lossless.config import CustomProviderConfig, GuardsConfig, ProviderProfile
from lossless.summarize import (
    TRUNCATION_MARKER,
    AuthError,
    Delay,
    ExtractiveSummarizer,
    RateLimitedError,
    ScriptedSummarizer,
    SourceItem,
    Summarizer,
    SummarizerError,
    SummarizerTimeout,
    SummaryRequest,
    available,
)
from lossless.summarize.anthropic import AnthropicSummarizer
from lossless.summarize.guards import (
    CircuitOpenError,
    GuardedSummarizer,
    SpendLimitError,
    guard,
    guard_state,
)
from lossless.summarize.openai import OpenAISummarizer
from lossless.summarize.prompts import system_prompt
from lossless.summarize.providers import build_summarizer, resolve_provider

KEY = "sk-test-Zq8v3N4kWd1RlY0pT7hS2mBx"
ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
STANDARD_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture(autouse=True)
def _no_provider_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own keys, endpoints and proxies never reach these tests."""
    for name in STANDARD_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def _server() -> Iterator[HTTPServer]:
    server = HTTPServer(host="127.0.0.1", threaded=True)  # a slow answer blocks no other
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.fixture
def server(_server: HTTPServer) -> Iterator[HTTPServer]:
    """The local fake provider, with no handlers and an empty log."""
    _server.clear()
    yield _server
    _server.clear()


@pytest.fixture
def slow_server() -> Iterator[HTTPServer]:
    """A server of its own for a test whose answers come late: requests still running when
    the test ends cannot reach the shared server's log."""
    server = HTTPServer(host="127.0.0.1", threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


class FakeClock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_767_600_000.0 + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --- the two wire formats ----------------------------------------------------------------------


def chat_completion(text: str, *, prompt_tokens: int = 412, completion_tokens: int = 57) -> Any:
    """A Chat Completions response as OpenAI sends it."""
    return {
        "id": "chatcmpl-CYx1f0Q8nB2a",
        "object": "chat.completion",
        "created": 1767603600,
        "model": "test-model-2026-01-01",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_5d2a1c9e7b",
    }


def openai_error(status: int, message: str) -> Any:
    kind = {401: "invalid_request_error", 429: "requests", 500: "server_error"}.get(status, "x")
    code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_message(text: str, *, input_tokens: int = 398, output_tokens: int = 61) -> Any:
    """A Messages API response as Anthropic sends it."""
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def anthropic_error(status: int, message: str) -> Any:
    kind = {
        401: "authentication_error",
        429: "rate_limit_error",
        500: "api_error",
    }.get(status, "invalid_request_error")
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }


@dataclass(frozen=True)
class Wire:
    """One provider's endpoint, answers, and summarizer class."""

    provider: str
    path: str
    ok: Callable[[str], Any]
    error: Callable[[int, str], Any]
    cls: type[OpenAISummarizer] | type[AnthropicSummarizer]

    def base_url(self, server: HTTPServer) -> str:
        return server.url_for("/v1") if self.provider == "openai" else server.url_for("/")

    def make(self, server: HTTPServer, **options: Any) -> Summarizer:
        options.setdefault("timeout", 5.0)
        options.setdefault("max_retries", 0)
        return self.cls(
            "test-model",
            api_key=KEY,
            base_url=self.base_url(server),
            key_source="FAKE_KEY",
            **options,
        )

    def profile(self, server: HTTPServer) -> ProviderProfile:
        return ProviderProfile(
            provider=self.provider,
            model="test-model",
            base_url=self.base_url(server),
            api_key_env="FAKE_KEY",
        )


OPENAI = Wire("openai", "/v1/chat/completions", chat_completion, openai_error, OpenAISummarizer)
ANTHROPIC = Wire(
    "anthropic", "/v1/messages", anthropic_message, anthropic_error, AnthropicSummarizer
)
WIRES = pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=lambda w: w.provider)


def request(**changes: Any) -> SummaryRequest:
    """A leaf-summary request with recognisable prompts."""
    source = SourceItem(
        ref="msg#1",
        role="user",
        text="Deploy the API to staging on Friday.",
        earliest_at="2026-01-05T09:00:00Z",
        latest_at="2026-01-05T09:00:00Z",
        tokens=9,
    )
    values: dict[str, Any] = {
        "kind": "leaf",
        "depth": 0,
        "level": "normal",
        "sources": (source,),
        "target_tokens": 100,
        "temperature": 0.2,
        "system": "SYSTEM: you write summaries.",
        "prompt": "USER: summarize <sources>...</sources>",
        "max_output_tokens": 300,
    }
    values.update(changes)
    return SummaryRequest(**values)


def bodies(server: HTTPServer) -> list[Any]:
    """The JSON bodies the fake provider received, in order."""
    return [json.loads(req.get_data()) for req, _ in server.log]


def config_for(server: HTTPServer, wire: Wire = OPENAI, **changes: Any) -> Config:
    """Settings that select the fake provider through a profile named ``fake``."""
    values: dict[str, Any] = {
        "summarizer": "fake",
        "profiles": {"fake": wire.profile(server)},
        "guards": {"timeout_seconds": 5.0, "max_retries": 0},
    }
    values.update(changes)
    return Config().replace(**values)


# --- registration and packaging -----------------------------------------------------------------


def test_both_providers_are_registered_through_entry_points() -> None:
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="lossless.summarizers")}
    assert names["openai"] == "lossless.summarize.openai:OpenAISummarizer"
    assert names["anthropic"] == "lossless.summarize.anthropic:AnthropicSummarizer"
    assert {"openai", "anthropic", "extractive", "scripted"} <= set(available())


def test_importing_lossless_and_its_providers_imports_no_sdk() -> None:
    code = (
        "import sys, lossless, lossless.summarize, lossless.summarize.providers,"
        " lossless.summarize.openai, lossless.summarize.anthropic;"
        " lossless.summarize.available();"
        " print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("cls", "extra"), [(OpenAISummarizer, "openai"), (AnthropicSummarizer, "anthropic")]
)
def test_a_missing_sdk_is_a_config_error_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch, cls: Callable[..., Summarizer], extra: str
) -> None:
    monkeypatch.setitem(sys.modules, extra, None)  # makes `import openai` fail
    with pytest.raises(ConfigError, match=rf"pip install 'lossless\[{extra}\]'"):
        cls("some-model", api_key=KEY)


# --- requests and answers -----------------------------------------------------------------------


def test_openai_sends_system_user_temperature_and_max_tokens(server: HTTPServer) -> None:
    server.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        chat_completion("Deploy to staging on Friday.")
    )
    summarizer = OPENAI.make(server)

    result = summarizer.summarize(request(temperature=0.1, max_output_tokens=240))

    assert result.text == "Deploy to staging on Friday."
    assert (result.model, result.input_tokens, result.output_tokens) == ("test-model", 412, 57)
    assert result.extra["finish_reason"] == "stop"
    assert summarizer.model == "test-model"
    (body,) = bodies(server)
    assert body["model"] == "test-model"
    assert body["temperature"] == 0.1
    assert body["max_tokens"] == 240
    assert body["messages"] == [
        {"role": "system", "content": "SYSTEM: you write summaries."},
        {"role": "user", "content": "USER: summarize <sources>...</sources>"},
    ]
    (sent, _) = server.log[0]
    assert sent.headers["Authorization"] == f"Bearer {KEY}"


def test_openai_can_leave_out_the_temperature_and_use_max_completion_tokens(
    server: HTTPServer,
) -> None:
    server.expect_request("/v1/chat/completions").respond_with_json(chat_completion("ok"))
    summarizer = OPENAI.make(
        server, send_temperature=False, max_tokens_field="max_completion_tokens"
    )
    summarizer.summarize(request())
    (body,) = bodies(server)
    assert "temperature" not in body and "max_tokens" not in body
    assert body["max_completion_tokens"] == 300


def test_anthropic_sends_system_user_and_max_tokens(server: HTTPServer) -> None:
    server.expect_request("/v1/messages", method="POST").respond_with_json(
        anthropic_message("Deploy to staging on Friday.")
    )
    summarizer = ANTHROPIC.make(server)

    result = summarizer.summarize(request(max_output_tokens=240))

    assert result.text == "Deploy to staging on Friday."
    assert (result.model, result.input_tokens, result.output_tokens) == ("test-model", 398, 61)
    (body,) = bodies(server)
    assert body["model"] == "test-model"
    assert body["system"] == "SYSTEM: you write summaries."
    assert body["messages"] == [
        {"role": "user", "content": "USER: summarize <sources>...</sources>"}
    ]
    assert body["max_tokens"] == 240
    assert "temperature" not in body  # deprecated by Anthropic's newer models


def test_anthropic_sends_the_temperature_when_asked_and_defaults_max_tokens(
    server: HTTPServer,
) -> None:
    server.expect_request("/v1/messages").respond_with_json(
        {
            **anthropic_message(""),
            "content": [
                {"type": "thinking", "thinking": "...", "signature": "sig"},
                {"type": "text", "text": "Part one. "},
                {"type": "text", "text": "Part two."},
            ],
        }
    )
    summarizer = ANTHROPIC.make(server, send_temperature=True)
    result = summarizer.summarize(request(temperature=0.1, max_output_tokens=None))
    assert result.text == "Part one. Part two."
    (body,) = bodies(server)
    assert body["temperature"] == 0.1
    assert body["max_tokens"] == 300  # three times the target


# --- failures -----------------------------------------------------------------------------------


@WIRES
def test_a_429_is_retried_after_the_delay_the_server_asks_for(
    server: HTTPServer, wire: Wire
) -> None:
    answers = iter(
        [
            Response(
                json.dumps(wire.error(429, "Rate limit reached, slow down.")),
                status=429,
                headers={"retry-after-ms": "150", "retry-after": "1"},
                content_type="application/json",
            ),
            Response(
                json.dumps(wire.ok("Summary after waiting.")), content_type="application/json"
            ),
        ]
    )
    server.expect_request(wire.path).respond_with_handler(lambda _req: next(answers))
    summarizer = wire.make(server, max_retries=2)

    started = time.perf_counter()
    result = summarizer.summarize(request())
    elapsed = time.perf_counter() - started

    assert result.text == "Summary after waiting."
    assert len(server.log) == 2
    assert 0.14 <= elapsed < 0.9  # waited retry-after-ms, not retry-after or a backoff


@WIRES
def test_a_429_that_persists_is_a_rate_limited_error_with_the_delay(
    server: HTTPServer, wire: Wire
) -> None:
    server.expect_request(wire.path).respond_with_json(
        wire.error(429, "Rate limit reached."), status=429, headers={"retry-after-ms": "20"}
    )
    summarizer = wire.make(server, max_retries=1)
    with pytest.raises(RateLimitedError) as info:
        summarizer.summarize(request())
    assert info.value.retry_after == pytest.approx(0.02)
    assert len(server.log) == 2  # the first try and one retry


@WIRES
def test_a_401_is_an_auth_error_that_never_shows_the_key(
    server: HTTPServer, wire: Wire, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.expect_request(wire.path).respond_with_json(
        wire.error(401, f"Incorrect API key provided: {KEY}."), status=401
    )
    summarizer = wire.make(server)
    with pytest.raises(AuthError) as info:
        summarizer.summarize(request())
    error = info.value
    assert "FAKE_KEY" in str(error) and "401" in str(error)
    assert error.__cause__ is None and error.__suppress_context__
    for text in (str(error), repr(error), repr(summarizer), repr(guard(summarizer))):
        assert KEY not in text
    logging.getLogger("lossless.test").warning("failed: %s", error, exc_info=error)
    assert KEY not in caplog.text


@WIRES
def test_the_breaker_opens_after_three_auth_failures_and_stops_calling(
    server: HTTPServer, wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KEY", KEY)
    server.expect_request(wire.path).respond_with_json(
        wire.error(401, "invalid x-api-key"), status=401
    )
    clock = FakeClock()
    summarizer = build_summarizer(config_for(server, wire), clock=clock, wall_clock=clock.wall)
    assert isinstance(summarizer, GuardedSummarizer)

    for _ in range(3):
        with pytest.raises(AuthError):
            summarizer.summarize(request())
    assert len(server.log) == 3
    with pytest.raises(CircuitOpenError, match="circuit breaker open") as info:
        summarizer.summarize(request())
    assert isinstance(info.value, AuthError)
    assert len(server.log) == 3  # refused without a request

    state = summarizer.state()
    breaker = state["breaker"]
    assert isinstance(breaker, dict)
    assert breaker["state"] == "open"
    assert breaker["consecutive_auth_failures"] == 3
    assert breaker["retry_in_seconds"] == 300.0
    assert breaker["open_until"] == datetime.fromtimestamp(clock.wall() + 300, UTC).isoformat(
        timespec="seconds"
    )
    assert state["last_error_kind"] == "AuthError"
    assert state["counts"] == {
        "calls": 3,
        "succeeded": 0,
        "failed": 3,
        "timed_out": 0,
        "refused_by_spend_guard": 0,
        "refused_by_breaker": 1,
    }

    clock.advance(301)  # half-open: one trial call goes through, fails, and reopens it
    with pytest.raises(AuthError):
        summarizer.summarize(request())
    assert len(server.log) == 4
    with pytest.raises(CircuitOpenError):
        summarizer.summarize(request())
    assert len(server.log) == 4

    server.clear()  # the key is fixed: the next trial succeeds and closes the breaker
    server.expect_request(wire.path).respond_with_json(wire.ok("Back in business."))
    clock.advance(301)
    assert summarizer.summarize(request()).text == "Back in business."
    breaker = summarizer.state()["breaker"]
    assert isinstance(breaker, dict)
    assert (breaker["state"], breaker["consecutive_auth_failures"]) == ("closed", 0)


@WIRES
def test_a_500_is_a_summarizer_error_after_the_sdk_retries(server: HTTPServer, wire: Wire) -> None:
    server.expect_request(wire.path).respond_with_json(
        wire.error(500, "The server had an error while processing your request."),
        status=500,
        headers={"retry-after-ms": "10"},
    )
    summarizer = wire.make(server, max_retries=1)
    with pytest.raises(SummarizerError, match="HTTP 500") as info:
        summarizer.summarize(request())
    assert type(info.value) is SummarizerError
    assert "server had an error" in str(info.value)
    assert len(server.log) == 2


@WIRES
def test_an_endpoint_slower_than_the_timeout_is_a_summarizer_timeout(
    slow_server: HTTPServer, wire: Wire
) -> None:
    server = slow_server

    def slow(_req: Request) -> Response:
        time.sleep(1.5)
        return Response(json.dumps(wire.ok("too late")), content_type="application/json")

    server.expect_request(wire.path).respond_with_handler(slow)
    summarizer = wire.make(server, timeout=0.25)
    started = time.perf_counter()
    with pytest.raises(SummarizerTimeout, match="did not answer in time"):
        summarizer.summarize(request())
    assert time.perf_counter() - started < 1.2


def test_the_wall_clock_guard_bounds_any_summarizer() -> None:
    slow = ScriptedSummarizer([Delay(1.0, "late")], default="on time")
    guarded = guard(slow, GuardsConfig(timeout_seconds=0.2))
    started = time.perf_counter()
    with pytest.raises(SummarizerTimeout, match=r"within 0\.2 s"):
        guarded.summarize(request())
    assert time.perf_counter() - started < 0.8
    assert guarded.state()["last_error_kind"] == "SummarizerTimeout"
    assert guarded.summarize(request()).text == "on time"


def test_the_guards_time_limit_applies_to_providers_built_from_config(
    slow_server: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = slow_server
    monkeypatch.setenv("FAKE_KEY", KEY)

    def slow(_req: Request) -> Response:
        time.sleep(1.5)
        return Response(json.dumps(chat_completion("late")), content_type="application/json")

    server.expect_request(OPENAI.path).respond_with_handler(slow)
    summarizer = build_summarizer(
        config_for(server, guards={"timeout_seconds": 0.3, "max_retries": 3})
    )
    started = time.perf_counter()
    with pytest.raises(SummarizerTimeout):
        summarizer.summarize(request())
    assert time.perf_counter() - started < 1.0  # retries did not stretch the call


@WIRES
@pytest.mark.parametrize(
    "answer",
    [
        Response("this is not JSON", content_type="application/json"),
        Response("<html><body>502 Bad Gateway</body></html>", content_type="text/html"),
        Response(json.dumps({"object": "list", "data": []}), content_type="application/json"),
    ],
    ids=["not-json", "html", "wrong-shape"],
)
def test_a_malformed_answer_is_a_summarizer_error(
    server: HTTPServer, wire: Wire, answer: Response
) -> None:
    server.expect_request(wire.path).respond_with_response(answer)
    summarizer = wire.make(server)
    with pytest.raises(SummarizerError, match="cannot read") as info:
        summarizer.summarize(request())
    assert type(info.value) is SummarizerError


def test_an_openai_refusal_is_a_summarizer_error(server: HTTPServer) -> None:
    body = chat_completion("")
    body["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
    server.expect_request(OPENAI.path).respond_with_json(body)
    with pytest.raises(SummarizerError, match="refused"):
        OPENAI.make(server).summarize(request())


def test_an_unreachable_endpoint_is_a_summarizer_error() -> None:
    summarizer = OpenAISummarizer(
        "m", api_key=KEY, base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2
    )
    with pytest.raises(SummarizerError, match=r"could not reach openai at 127\.0\.0\.1:9"):
        summarizer.summarize(request())


# --- the spend guard ----------------------------------------------------------------------------


def test_the_spend_guard_refuses_calls_over_the_limit_until_the_window_moves() -> None:
    clock = FakeClock()
    inner = ScriptedSummarizer(default="fine")
    guarded = guard(
        inner, GuardsConfig(max_calls=2, window_seconds=60), clock=clock, wall_clock=clock.wall
    )
    guarded.summarize(request())
    clock.advance(30)
    guarded.summarize(request())
    with pytest.raises(SpendLimitError, match=r"guards\.max_calls = 2") as info:
        guarded.summarize(request())
    assert not isinstance(info.value, AuthError | SummarizerTimeout)
    assert info.value.retry_after == pytest.approx(30)
    assert inner.calls == 2
    spend = guarded.state()["spend"]
    assert spend == {"calls_in_window": 2, "max_calls": 2, "window_seconds": 60.0}

    clock.advance(30)  # the first call leaves the window
    guarded.summarize(request())
    assert inner.calls == 3
    counts = guarded.state()["counts"]
    assert isinstance(counts, dict) and counts["refused_by_spend_guard"] == 1


def test_a_refused_call_makes_escalation_fall_back_without_calling() -> None:
    from lossless.summarize import escalate

    clock = FakeClock()
    inner = ScriptedSummarizer(default="short")
    guarded = guard(inner, GuardsConfig(max_calls=1), clock=clock, wall_clock=clock.wall)
    guarded.summarize(request())
    outcome = escalate(
        guarded,
        lambda level, target, temp: request(level=level, target_tokens=target, temperature=temp),
        input_tokens=400,
        target_tokens=100,
        source_text="word " * 400,
        fallback_max_tokens=64,
    )
    assert outcome.level == "fallback"
    assert inner.calls == 1


def test_the_guard_keeps_the_name_model_and_flags_of_what_it_wraps() -> None:
    inner = ScriptedSummarizer(model="scripted-v2")
    guarded = guard(inner)
    assert (guarded.name, guarded.model, guarded.offline, guarded.deterministic) == (
        "scripted",
        "scripted-v2",
        True,
        True,
    )
    assert isinstance(guarded, GuardedSummarizer)
    assert guard_state(guarded) is not None and guard_state(inner) is None
    with pytest.raises(KeyboardInterrupt):
        guard(ScriptedSummarizer([KeyboardInterrupt()])).summarize(request())


# --- credentials --------------------------------------------------------------------------------


def test_a_profile_named_by_summarizer_prefers_its_key_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORK_KEY", "from-the-variable")
    monkeypatch.setenv("OPENAI_API_KEY", "from-openai-api-key")
    profile = ProviderProfile(
        provider="openai",
        model="work-model",
        base_url="https://llm.example.test/v1",
        api_key_env="WORK_KEY",
        api_key="from-the-file",
    )
    settings = resolve_provider(Config().replace(summarizer="work", profiles={"work": profile}))
    assert settings is not None
    assert (settings.provider, settings.model, settings.api_key) == (
        "openai",
        "work-model",
        "from-the-variable",
    )
    assert settings.base_url == "https://llm.example.test/v1"
    assert settings.key_source == "WORK_KEY (profiles.work.api_key_env)"
    assert "from-the-variable" not in repr(settings)

    monkeypatch.delenv("WORK_KEY")
    settings = resolve_provider(Config().replace(summarizer="work", profiles={"work": profile}))
    assert settings is not None
    assert (settings.api_key, settings.key_source) == ("from-the-file", "profiles.work.api_key")


def test_summarizer_openai_uses_the_first_openai_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "standard")
    config = Config().replace(
        summarizer="openai",
        profiles={
            "claude": {"provider": "anthropic", "model": "c", "api_key": "a"},
            "first": {"provider": "openai", "model": "o1", "api_key": "k1"},
            "second": {"provider": "openai", "model": "o2", "api_key": "k2"},
        },
    )
    settings = resolve_provider(config)
    assert settings is not None
    assert (settings.profile, settings.model, settings.api_key) == ("first", "o1", "k1")


@pytest.mark.parametrize(
    ("provider", "key_var", "url_var"),
    [
        ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    ],
)
def test_without_a_profile_the_standard_variables_are_used(
    monkeypatch: pytest.MonkeyPatch, provider: str, key_var: str, url_var: str
) -> None:
    monkeypatch.setenv(key_var, "standard-key")
    monkeypatch.setenv(url_var, "https://gateway.example.test")
    config = Config().replace(
        summarizer=provider,
        summarizer_model="m1",
        custom_provider={"provider": provider, "api_key": "custom", "model": "m2"},
    )
    settings = resolve_provider(config)
    assert settings is not None
    assert (settings.api_key, settings.key_source, settings.model) == (
        "standard-key",
        key_var,
        "m1",
    )
    assert settings.base_url == "https://gateway.example.test"


def test_the_custom_provider_comes_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_GATEWAY_KEY", "custom-key")
    config = Config().replace(
        summarizer="openai",
        custom_provider={
            "provider": "openai",
            "base_url": "https://gw.example.test/v1",
            "api_key_env": "MY_GATEWAY_KEY",
            "model": "gw-model",
        },
    )
    settings = resolve_provider(config)
    assert settings is not None
    assert (settings.api_key, settings.base_url, settings.model) == (
        "custom-key",
        "https://gw.example.test/v1",
        "gw-model",
    )
    assert settings.key_source == "MY_GATEWAY_KEY (custom_provider.api_key_env)"


def test_a_missing_key_names_what_to_set() -> None:
    with pytest.raises(ConfigError) as info:
        build_summarizer(Config().replace(summarizer="openai", summarizer_model="m"))
    message = str(info.value)
    for needle in ("OPENAI_API_KEY", "[profiles.NAME]", "api_key_env", "[custom_provider]"):
        assert needle in message

    config = Config().replace(
        summarizer="work",
        profiles={"work": {"provider": "anthropic", "model": "m", "api_key_env": "WORK_KEY"}},
    )
    with pytest.raises(ConfigError, match=r"WORK_KEY \(named by profiles\.work\.api_key_env\)"):
        build_summarizer(config)


def test_a_missing_model_names_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(ConfigError, match="summarizer_model") as info:
        build_summarizer(Config().replace(summarizer="openai"))
    assert KEY not in str(info.value)
    with pytest.raises(ConfigError, match=r"profiles\.p\.model"):
        build_summarizer(
            Config().replace(summarizer="p", profiles={"p": {"provider": "openai", "api_key": "k"}})
        )


def test_an_endpoint_on_this_machine_needs_no_key(server: HTTPServer) -> None:
    server.expect_request(OPENAI.path).respond_with_json(chat_completion("local summary"))
    config = Config().replace(
        summarizer="ollama",
        profiles={
            "ollama": {"provider": "openai", "model": "llama3", "base_url": OPENAI.base_url(server)}
        },
    )
    summarizer = build_summarizer(config)
    assert summarizer.summarize(request()).text == "local summary"


def test_build_summarizer_guards_providers_but_not_offline_summarizers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert isinstance(build_summarizer(Config()), ExtractiveSummarizer)
    guarded_offline = build_summarizer(Config().replace(guards={"offline": True}))
    assert isinstance(guarded_offline, GuardedSummarizer)
    assert guarded_offline.name == "extractive"

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    config = Config().replace(
        summarizer="anthropic", summarizer_model="claude-test", guards={"max_retries": 5}
    )
    summarizer = build_summarizer(config)
    assert isinstance(summarizer, GuardedSummarizer)
    assert isinstance(summarizer.inner, AnthropicSummarizer)
    assert (summarizer.name, summarizer.model) == ("anthropic", "claude-test")
    assert KEY not in repr(summarizer)
    assert "ANTHROPIC_API_KEY" in repr(summarizer)


# --- configuration ------------------------------------------------------------------------------


def test_profiles_custom_provider_and_guards_load_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'summarizer = "work"\n'
        "[profiles.work]\n"
        'provider = "openai"\nmodel = "gpt-test"\nbase_url = "http://127.0.0.1:8080/v1"\n'
        'api_key_env = "WORK_KEY"\n'
        "[profiles.claude]\n"
        f'provider = "anthropic"\nmodel = "claude-test"\napi_key = "{KEY}"\n'
        "[custom_provider]\n"
        'provider = "openai"\nbase_url = "https://gw.example.test/v1"\napi_key_env = "GW"\n'
        "[guards]\ntimeout_seconds = 20\nmax_calls = 10\n"
    )
    config = load_config(path, env={"LOSSLESS_GUARDS_BREAKER_THRESHOLD": "5"})
    assert list(config.profiles) == ["work", "claude"]
    assert config.profiles["work"] == ProviderProfile(
        provider="openai",
        model="gpt-test",
        base_url="http://127.0.0.1:8080/v1",
        api_key_env="WORK_KEY",
    )
    assert config.custom_provider == CustomProviderConfig(
        provider="openai", base_url="https://gw.example.test/v1", api_key_env="GW"
    )
    assert (config.guards.timeout_seconds, config.guards.max_calls) == (20.0, 10)
    assert config.guards.breaker_threshold == 5
    assert (config.guards.window_seconds, config.guards.breaker_cooldown_seconds) == (60, 300)
    # The literal key is never shown.
    assert KEY not in repr(config)
    assert config.to_dict()["profiles"]["claude"]["api_key"] == "***"
    assert KEY not in json.dumps(config.to_dict())
    assert config.profiles["claude"].api_key == KEY


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("profiles = 3", r"'profiles' must be a table of tables"),
        ("[profiles]\nwork = 3", r"'profiles\.work' must be a table"),
        ('[profiles.work]\nmodel = "m"', r"'profiles\.work\.provider' is required"),
        ('[profiles.work]\nprovider = "gemini"', r"'profiles\.work\.provider'.*openai, anthropic"),
        ('[profiles.work]\nprovider = "openai"\nkey = "x"', r"'profiles\.work\.key'.*api_key_env"),
        (
            '[profiles.work]\nprovider = "openai"\napi_key = 31415926535',
            r"'profiles\.work\.api_key' has the value '\*\*\*'",
        ),
        ('[custom_provider]\nprovider = "x"', r"'custom_provider\.provider'"),
        ("[guards]\nmax_calls = 0", r"'guards\.max_calls'.*>= 1"),
        ('[guards]\ntimeout_seconds = "soon"', r"'guards\.timeout_seconds'.*a number"),
        ("[guards]\nbreaker = 3", r"'guards\.breaker'.*breaker_threshold"),
    ],
)
def test_bad_provider_settings_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=needle) as info:
        load_config(path, env={})
    # A key given with the wrong type is still never echoed back (the number is
    # long enough not to turn up by chance in the temporary path of the file).
    assert "31415926535" not in str(info.value)


def test_the_new_defaults_leave_the_old_ones_alone() -> None:
    config = Config()
    assert config.summarizer == "extractive" and config.summarizer_model is None
    assert config.profiles == {}
    assert config.guards == GuardsConfig(
        timeout_seconds=60.0,
        max_retries=2,
        max_calls=60,
        window_seconds=60.0,
        breaker_threshold=3,
        breaker_cooldown_seconds=300.0,
        offline=False,
    )
    assert load_config(env={"LOSSLESS_GUARDS_OFFLINE": "yes"}).guards.offline is True


def _keys(cls: type, prefix: str = "") -> list[str]:
    """Every key path of a config dataclass (profiles as ``profiles.NAME.*``)."""
    hints = typing.get_type_hints(cls)
    out: list[str] = []
    for f in fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and is_dataclass(tp):
            out += _keys(tp, f"{prefix}{f.name}.")
        elif typing.get_origin(tp) is dict:
            out += _keys(typing.get_args(tp)[1], f"{prefix}{f.name}.NAME.")
        else:
            out.append(prefix + f.name)
    return out


def test_the_configuration_docs_list_every_key() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    missing = [key for key in _keys(Config) if f"| `{key}` |" not in doc]
    assert missing == []


# --- end to end: an engine compacting through the fake OpenAI-compatible server ---------------


def ingest_turns(engine: Engine, turns: int) -> None:
    at = T0
    for i in range(turns):
        for role, tag in (("user", "question"), ("assistant", "answer")):
            at += timedelta(minutes=1)
            body = f"{tag} {i}: " + "the deploy script needs a staging flag " * 12
            engine.ingest("s", {"role": role, "content": body}, created_at=at)


SMALL: dict[str, Any] = {
    "fresh_tail_count": 4,
    "leaf_chunk_tokens": 300,
    "leaf_target_tokens": 60,
    "condensed_target_tokens": 60,
    "leaf_min_fanout": 3,
    "condensed_min_fanout": 2,
}


def test_an_engine_keeps_the_good_answer_of_the_aggressive_retry(
    server: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KEY", KEY)
    good = "Decided: the deploy script takes a --staging flag."

    def answer(req: Request) -> Response:
        body = json.loads(req.get_data())
        too_long = "rambling on and on about the deploy " * 400
        text = too_long if body["temperature"] == 0.2 else good
        return Response(json.dumps(chat_completion(text)), content_type="application/json")

    server.expect_request(OPENAI.path).respond_with_handler(answer)
    config = config_for(server, **SMALL)
    with Engine.open(
        tmp_path / "x.db", config=config, summarizer=build_summarizer(config)
    ) as engine:
        ingest_turns(engine, 12)
        # Each pass waits for the model (provisional summaries off: the ladder under test).
        report = engine.compact("s", provisional=False)

        assert report.passes and report.tokens_after < report.tokens_before
        assert {p.level for p in report.passes} == {"aggressive"}
        for p in report.passes:
            summary = engine.summary(p.summary_id)
            assert (summary.content, summary.model) == (good, "test-model")
        sent = bodies(server)
        assert len(sent) == 2 * len(report.passes)
        assert [b["temperature"] for b in sent] == [0.2, 0.1] * len(report.passes)
        assert {b["model"] for b in sent} == {"test-model"}
        assert {b["messages"][0]["content"] for b in sent} == {system_prompt()}
        assert all(b["messages"][1]["role"] == "user" for b in sent)
        assert all(isinstance(b["max_tokens"], int) for b in sent)
    assert KEY.encode() not in (tmp_path / "x.db").read_bytes()


def test_an_engine_falls_back_to_the_offline_summarizer_when_every_model_call_fails(
    server: HTTPServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("FAKE_KEY", KEY)
    server.expect_request(OPENAI.path).respond_with_json(
        openai_error(500, "The server had an error while processing your request."), status=500
    )
    config = config_for(server, **SMALL)
    summarizer = build_summarizer(config)
    with Engine.open(tmp_path / "x.db", config=config, summarizer=summarizer) as engine:
        ingest_turns(engine, 12)
        # Each pass waits for the model (provisional summaries off: the ladder under test).
        report = engine.compact("s", provisional=False)

        assert report.passes and report.tokens_after < report.tokens_before
        assert {p.level for p in report.passes} == {"fallback"}
        for p in report.passes:
            summary = engine.summary(p.summary_id)
            # The offline summarizer's summary, not a cut of the text.
            assert summary.model == "extractive"
            assert not summary.content.endswith(TRUNCATION_MARKER)
        assert len(server.log) == 2 * len(report.passes)
    state = guard_state(summarizer)
    assert state is not None and state["last_error_kind"] == "SummarizerError"
    assert "HTTP 500" in caplog.text and KEY not in caplog.text


def test_an_engine_with_a_bad_key_stops_calling_once_the_breaker_opens(
    server: HTTPServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("FAKE_KEY", KEY)
    server.expect_request(OPENAI.path).respond_with_json(
        openai_error(401, f"Incorrect API key provided: {KEY}."), status=401
    )
    config = config_for(server, **SMALL)
    with Engine.open(
        tmp_path / "x.db", config=config, summarizer=build_summarizer(config)
    ) as engine:
        ingest_turns(engine, 12)
        report = engine.compact("s", provisional=False)
        assert report.passes and {p.level for p in report.passes} == {"fallback"}
        assert report.summarizer_calls > 3
    assert len(server.log) == 3  # the breaker answered every later call
    assert "circuit breaker" in caplog.text
    assert KEY not in caplog.text
    assert KEY.encode() not in (tmp_path / "x.db").read_bytes()


# --- tool calling: the expand_query sub-agent over each wire format -----------------------------

FACT = "We chose port 9043 for staging because 8043 clashed with the proxy."


def openai_tool_call(call_id: str, name: str, arguments: str) -> Any:
    """A Chat Completions response whose message is a function call."""
    response = chat_completion("")
    choice = response["choices"][0]
    choice["message"]["content"] = None
    choice["message"]["tool_calls"] = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    ]
    choice["finish_reason"] = "tool_calls"
    return response


def anthropic_tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> Any:
    """A Messages response with a thinking block, a text block and a tool_use block."""
    response = anthropic_message("Let me read below that summary.")
    response["content"] = [
        {"type": "thinking", "thinking": "The port is below the summary.", "signature": "sig-7"},
        *response["content"],
        {"type": "tool_use", "id": call_id, "name": name, "input": arguments},
    ]
    response["stop_reason"] = "tool_use"
    return response


def compacted_engine(path: Path) -> tuple[Engine, str]:
    """A compacted conversation whose staging-port fact lies only below its summaries."""
    engine = Engine.open(path, config=Config().replace(**SMALL), summarizer=ScriptedSummarizer())
    ingest_turns(engine, 6)
    engine.ingest("s", {"role": "assistant", "content": FACT}, created_at=T0 + timedelta(hours=1))
    ingest_turns(engine, 6)
    engine.compact("s")
    top = next(i.summary_id for i in engine.context("s") if i.summary_id)
    assert top is not None and FACT not in engine.summary(top).content
    return engine, top


def cite_from(tool_text: str) -> str:
    block = next(b for b in tool_text.split("\n\n") if FACT in b)
    return block[1 : block.index("]")]


@WIRES
def test_the_sub_agent_calls_lcm_expand_over_the_wire_and_cites_what_it_read(
    server: HTTPServer, wire: Wire, tmp_path: Path
) -> None:
    engine, top = compacted_engine(tmp_path / "agent.db")
    expand_args = {"summary_ids": [top], "include_messages": True}

    def model(req: Request) -> Response:
        body = json.loads(req.get_data())
        if wire is OPENAI:
            tool = [m for m in body["messages"] if m["role"] == "tool"]
            if not tool:
                answer = openai_tool_call("call_9", "lcm_expand", json.dumps(expand_args))
            else:
                answer = chat_completion(f"Port 9043 [{cite_from(tool[0]['content'])}].")
        else:
            results = [
                block
                for m in body["messages"]
                if isinstance(m["content"], list)
                for block in m["content"]
                if block.get("type") == "tool_result"
            ]
            if not results:
                answer = anthropic_tool_use("toolu_9", "lcm_expand", expand_args)
            else:
                answer = anthropic_message(f"Port 9043 [{cite_from(results[0]['content'])}].")
        return Response(json.dumps(answer), content_type="application/json")

    server.expect_request(wire.path, method="POST").respond_with_handler(model)
    engine.summarizer = wire.make(server)
    result = engine.expand_query("which port did we choose for staging?", conversation="s")

    fact_id = engine.grep("9043", conversation="s", scope="messages").hits[0].id
    assert result.mode == "model" and result.steps == 2
    assert result.answer == f"Port 9043 [{fact_id}]."
    assert result.citations == [fact_id]
    first, second = bodies(server)
    if wire is OPENAI:
        assert [t["function"]["name"] for t in first["tools"]] == ["lcm_expand"]
        assert first["tools"][0]["function"]["parameters"]["required"] == ["summary_ids"]
        assert first["tool_choice"] == "auto"
        assert second["messages"][2]["tool_calls"][0]["id"] == "call_9"
        assert second["messages"][3]["role"] == "tool"
        assert second["messages"][3]["tool_call_id"] == "call_9"
        assert FACT in second["messages"][3]["content"]
    else:
        assert [t["name"] for t in first["tools"]] == ["lcm_expand"]
        assert first["tool_choice"] == {"type": "auto"}
        sent_back = second["messages"][1]
        assert sent_back["role"] == "assistant"
        # the thinking block goes back exactly as it came (with its signature)
        assert sent_back["content"][0] == {
            "type": "thinking",
            "thinking": "The port is below the summary.",
            "signature": "sig-7",
        }
        (result_block,) = second["messages"][2]["content"]
        assert result_block["tool_use_id"] == "toolu_9" and result_block["is_error"] is False
        assert FACT in result_block["content"]
    live = engine.store.fetchall("SELECT count(*) FROM grants WHERE revoked_at IS NULL")[0][0]
    assert live == 0


def test_unreadable_tool_arguments_go_back_to_the_model_as_an_error(
    server: HTTPServer, tmp_path: Path
) -> None:
    engine, _ = compacted_engine(tmp_path / "agent.db")
    answers = iter(
        [
            openai_tool_call("call_1", "lcm_expand", '{"summary_ids": ["sum_'),
            chat_completion("I could not expand anything."),
        ]
    )
    server.expect_request(OPENAI.path).respond_with_handler(
        lambda _req: Response(json.dumps(next(answers)), content_type="application/json")
    )
    engine.summarizer = OPENAI.make(server)
    result = engine.expand_query("which port?", conversation="s")
    assert result.answer == "I could not expand anything."
    tool_message = bodies(server)[1]["messages"][3]
    assert tool_message["content"].startswith("error: the arguments are not a JSON object")
    assert len(result.refused) == 1


def test_a_provider_error_during_the_sub_agent_falls_back_to_the_retrieval_answer(
    server: HTTPServer, tmp_path: Path
) -> None:
    engine, _ = compacted_engine(tmp_path / "agent.db")
    server.expect_request(ANTHROPIC.path).respond_with_json(
        anthropic_error(500, "Internal server error"), status=500
    )
    engine.summarizer = guard(ANTHROPIC.make(server), GuardsConfig(timeout_seconds=5))
    result = engine.expand_query("which port did we choose for staging?", conversation="s")
    assert result.mode == "deterministic"
    assert result.note is not None and "HTTP 500" in result.note
    assert any("9043" in line for line in result.answer.splitlines())
