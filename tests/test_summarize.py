"""Summarizers: three-level escalation, the scripted test provider, the offline extractive
summarizer, and the registry that makes providers selectable by name."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, ConfigError, Engine, doctor
from lossless.summarize import (
    TRUNCATION_MARKER,
    AuthError,
    Delay,
    ExtractiveSummarizer,
    RateLimitedError,
    ScriptedSummarizer,
    SourceItem,
    Summarizer,
    SummarizerTimeout,
    SummaryRequest,
    SummaryResult,
    available,
    create,
    escalate,
    register,
)
from lossless.summarize import registry as summarizer_registry
from lossless.summarize.base import Level
from lossless.summarize.prompts import render_sources, system_prompt, user_prompt
from lossless.tokens import estimate_tokens

T0 = datetime(2026, 2, 17, 7, 30, tzinfo=UTC)
EXPAND = "Expand for details about:"


def _stamp(minute: int) -> str:
    return (T0 + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _source(n: int, role: str, text: str) -> SourceItem:
    return SourceItem(
        ref=f"msg#{n}",
        role=role,
        text=text,
        earliest_at=_stamp(n),
        latest_at=_stamp(n),
        tokens=estimate_tokens(text),
    )


#: About 1,000 tokens of material to summarize.
SOURCES = tuple(
    _source(i, "user" if i % 2 == 0 else "assistant", f"Step {i}: " + "details of the work " * 48)
    for i in range(5)
)
INPUT_TOKENS = sum(s.tokens for s in SOURCES)


class Escalation:
    """Runs :func:`escalate` the way compaction does, with the real prompts."""

    def __init__(self, target: int = 100, fallback_max_tokens: int = 64) -> None:
        self.target = target
        self.fallback_max_tokens = fallback_max_tokens

    def make(self, level: Level, target_tokens: int, temperature: float) -> SummaryRequest:
        return SummaryRequest(
            kind="leaf",
            depth=0,
            level=level,
            sources=SOURCES,
            target_tokens=target_tokens,
            temperature=temperature,
            system=system_prompt(),
            prompt=user_prompt(
                SOURCES,
                depth=0,
                level=level,
                target_tokens=target_tokens,
                previous_context=None,
                condensed=False,
            ),
            max_output_tokens=3 * target_tokens,
        )

    def run(self, summarizer: Summarizer, *, input_tokens: int = INPUT_TOKENS) -> Any:
        return escalate(
            summarizer,
            self.make,
            input_tokens=input_tokens,
            target_tokens=self.target,
            source_text=render_sources(SOURCES, condensed=False),
            fallback_max_tokens=self.fallback_max_tokens,
        )


def _words(tokens: int) -> str:
    """Text of about *tokens* tokens."""
    return ("word " * (tokens * 4 // 5 + 1)).strip()


# --- escalation ------------------------------------------------------------------------------


def test_a_summary_smaller_than_its_input_is_used_at_the_normal_level() -> None:
    summarizer = ScriptedSummarizer(["  The user set up the build; tests pass.  "], model="m-1")
    outcome = Escalation().run(summarizer)
    assert outcome.level == "normal"
    assert outcome.text == "The user set up the build; tests pass."
    assert outcome.tokens == estimate_tokens(outcome.text)
    assert outcome.model == "m-1"
    assert outcome.errors == ()
    assert summarizer.calls == 1
    request = summarizer.requests[0]
    assert request.level == "normal"
    assert request.temperature == pytest.approx(0.2)
    assert request.target_tokens == 100


def test_a_summary_not_smaller_than_its_input_is_retried_with_the_aggressive_prompt() -> None:
    summarizer = ScriptedSummarizer([_words(INPUT_TOKENS + 10), "Build set up; tests pass."])
    outcome = Escalation(target=100).run(summarizer)
    assert outcome.level == "aggressive"
    assert outcome.text == "Build set up; tests pass."
    normal, aggressive = summarizer.requests
    assert aggressive.level == "aggressive"
    assert aggressive.temperature == pytest.approx(0.1)
    assert aggressive.target_tokens < normal.target_tokens
    assert "Be much shorter" in aggressive.prompt
    assert "Be much shorter" not in normal.prompt
    assert "not smaller than its input" in outcome.errors[0]


def test_when_both_levels_fail_the_source_is_truncated_with_a_marker() -> None:
    summarizer = ScriptedSummarizer([_words(INPUT_TOKENS), _words(INPUT_TOKENS * 2)])
    outcome = Escalation(target=100, fallback_max_tokens=64).run(summarizer)
    assert outcome.level == "fallback"
    assert outcome.model is None
    assert outcome.text.endswith(TRUNCATION_MARKER)
    assert 48 <= outcome.tokens <= 64 + 4  # about fallback_max_tokens
    # It is the start of the source as the prompt showed it (timestamps and roles).
    assert outcome.text.startswith("[2026-02-17 07:30 UTC] user: Step 0:")
    assert summarizer.calls == 2
    assert len(outcome.errors) == 2


@pytest.mark.parametrize(
    ("failure", "error_type"),
    [
        (TimeoutError(), "SummarizerTimeout"),
        (SummarizerTimeout("no answer in 60 s"), "SummarizerTimeout"),
        (AuthError("invalid x-api-key"), "AuthError"),
        (RateLimitedError("slow down", retry_after=3.0), "RateLimitedError"),
        (RuntimeError("provider returned HTTP 500"), "RuntimeError"),
        (ValueError("bad JSON from the provider"), "ValueError"),
    ],
)
def test_a_summarizer_failure_escalates_instead_of_propagating(
    failure: BaseException, error_type: str
) -> None:
    summarizer = ScriptedSummarizer([failure, "Short summary of the work."])
    outcome = Escalation().run(summarizer)
    assert outcome.level == "aggressive"
    assert outcome.text == "Short summary of the work."
    assert outcome.errors[0].startswith(f"normal: {error_type}")


def test_a_summarizer_failing_at_every_level_still_gives_a_fallback_summary() -> None:
    summarizer = ScriptedSummarizer(default=AuthError("key revoked"))
    outcome = Escalation().run(summarizer)
    assert outcome.level == "fallback"
    assert TRUNCATION_MARKER in outcome.text
    assert outcome.tokens < INPUT_TOKENS
    assert [e.split(":")[0] for e in outcome.errors] == ["normal", "aggressive"]


@pytest.mark.parametrize("empty", ["", "   \n\t  "])
def test_an_empty_summary_escalates(empty: str) -> None:
    summarizer = ScriptedSummarizer([empty, "Kept: the build works."])
    outcome = Escalation().run(summarizer)
    assert outcome.level == "aggressive"
    assert outcome.text == "Kept: the build works."
    assert outcome.errors == ("normal: empty summary",)


def test_a_summary_far_above_its_target_is_capped_at_three_times_the_target() -> None:
    # 500 tokens: smaller than the ~1,000-token input, but 5x the 100-token target.
    summarizer = ScriptedSummarizer([_words(500)])
    outcome = Escalation(target=100).run(summarizer)
    assert outcome.level == "normal"
    assert outcome.capped
    assert 250 <= outcome.tokens <= 300 + 2
    assert outcome.text.endswith(TRUNCATION_MARKER)
    assert summarizer.calls == 1


def test_a_summary_within_three_times_its_target_is_not_capped() -> None:
    text = _words(250)
    outcome = Escalation(target=100).run(ScriptedSummarizer([text]))
    assert not outcome.capped
    assert outcome.text == text


def test_the_fallback_is_smaller_than_an_input_below_fallback_max_tokens() -> None:
    # A small chunk (about 100 tokens) with the default 512-token fallback size: truncating
    # "to 512 tokens" would save nothing, so the pass would never make progress.
    small = SOURCES[:1]
    input_tokens = sum(s.tokens for s in small) // 2  # ~100 tokens
    summarizer = ScriptedSummarizer(default=RuntimeError("down"))
    outcome = escalate(
        summarizer,
        Escalation().make,
        input_tokens=input_tokens,
        target_tokens=60,
        source_text=render_sources(small, condensed=False),
        fallback_max_tokens=512,
    )
    assert outcome.level == "fallback"
    assert outcome.tokens < input_tokens
    assert outcome.text.endswith(TRUNCATION_MARKER)


def test_a_keyboard_interrupt_in_the_summarizer_is_not_swallowed() -> None:
    summarizer = ScriptedSummarizer([KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        Escalation().run(summarizer)
    assert summarizer.calls == 1


# --- the scripted test provider ----------------------------------------------------------------


def test_scripted_summarizer_answers_from_its_queue_then_its_default_and_keeps_requests() -> None:
    summarizer = ScriptedSummarizer(["first"], default=lambda req: f"{len(req.sources)} sources")
    summarizer.enqueue(Delay(0.001, "second, a bit late"))
    request = Escalation().make("normal", 100, 0.2)
    answers = [summarizer.summarize(request).text for _ in range(4)]
    assert answers == ["first", "second, a bit late", "5 sources", "5 sources"]
    assert summarizer.calls == 4
    assert summarizer.requests == [request] * 4


def test_scripted_summarizer_turns_a_queued_timeout_error_into_a_summarizer_timeout() -> None:
    summarizer = ScriptedSummarizer([Delay(0.001, TimeoutError())])
    with pytest.raises(SummarizerTimeout):
        summarizer.summarize(Escalation().make("normal", 100, 0.2))


# --- the extractive summarizer -----------------------------------------------------------------

CHATTER = ["ok", "Thanks, that looks good.", "Great, carry on.", "Sounds right to me.", "cool"]
FACTS = [
    ("user", "Please make the loader in src/lossless/config.py accept TOML includes."),
    (
        "assistant",
        "Decision: we will use tomllib instead of a third-party parser because it ships "
        "with Python 3.11.",
    ),
    (
        "tool",
        'Traceback (most recent call last):\n  File "loader.py", line 12\n'
        "FileNotFoundError: [Errno 2] No such file or directory: 'settings.toml'",
    ),
    ("user", "Remember that the deadline for the release is 2026-03-01."),
]


def _conversation_sources() -> tuple[SourceItem, ...]:
    items: list[SourceItem] = []
    n = 0
    for i in range(6):
        for text in CHATTER:
            items.append(_source(n, "user" if n % 2 == 0 else "assistant", text))
            n += 1
        if i < len(FACTS):
            role, text = FACTS[i]
            items.append(_source(n, role, text))
            n += 1
    return tuple(items)


def _request(
    sources: tuple[SourceItem, ...],
    target: int,
    *,
    kind: str = "leaf",
    level: Level = "normal",
) -> SummaryRequest:
    return SummaryRequest(
        kind=kind,  # type: ignore[arg-type]
        depth=0 if kind == "leaf" else 1,
        level=level,
        sources=sources,
        target_tokens=target,
        temperature=0.2,
        system=system_prompt(),
        prompt="",
    )


def _session_sources(turns: int = 40) -> tuple[SourceItem, ...]:
    """Realistic material: the sample session's messages as leaf sources."""
    from lossless.sample import generate_session

    items: list[SourceItem] = []
    for obj in generate_session(turns):
        if obj.get("type") != "message":
            continue
        msg = obj["message"]
        blocks = msg["content"]
        text = "\n".join(
            b.get("text") or b.get("thinking") or str(b.get("arguments")) for b in blocks
        )
        role = "tool" if msg["role"] == "toolResult" else msg["role"]
        items.append(
            SourceItem(
                ref=f"msg#{len(items) + 1}",
                role=role,
                text=text,
                earliest_at=obj["timestamp"],
                latest_at=obj["timestamp"],
                tokens=estimate_tokens(text),
            )
        )
    return tuple(items)


def test_extractive_summaries_are_deterministic() -> None:
    request = _request(_session_sources(), 200)
    first = ExtractiveSummarizer().summarize(request).text
    assert ExtractiveSummarizer().summarize(request).text == first
    assert ExtractiveSummarizer().summarize(request).text == first
    assert ExtractiveSummarizer().summarize(request).model == "extractive"


def _repeated_failures() -> tuple[SourceItem, ...]:
    """Forty turns of the same failing test but for its number: lines that tie."""
    items: list[SourceItem] = []
    for i in range(40):
        at = f"2026-03-02T09:{i:02d}:00Z"
        for role, text in (
            ("user", f"Run the suite again after fix {i}, please."),
            (
                "tool",
                f"FAILED tests/test_api.py::test_turn_{i} - AssertionError: expected 20 items,"
                f" got 19\n1 failed, {200 + i} passed in 3.{i}s",
            ),
        ):
            ref = f"msg#{len(items) + 1}"
            tokens = estimate_tokens(text)
            items.append(SourceItem(ref, role, text, at, at, tokens))
    return tuple(items)


def test_extractive_summaries_are_the_same_in_every_process() -> None:
    """Lines that tie are chosen the same way whatever the process's string hashing: the
    words' weights were summed in a set's order, which the hash seed changes, and the float
    sums came out a hair apart (4 different summaries of these sources in 12 processes)."""
    import subprocess
    import sys

    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from test_summarize import ExtractiveSummarizer, _repeated_failures, _request\n"
        "for target in (30, 60, 90, 150):\n"
        "    print(ExtractiveSummarizer().summarize(_request(_repeated_failures(), target)).text)\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", probe, str(Path(__file__).parent)],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(12)
    }
    assert len(seen) == 1


@pytest.mark.parametrize("target", [40, 60, 120, 300, 1000])
@pytest.mark.parametrize("level", ["normal", "aggressive"])
def test_extractive_summaries_stay_within_their_target(target: int, level: Level) -> None:
    sources = _session_sources()
    assert sum(s.tokens for s in sources) > 4 * target
    text = ExtractiveSummarizer().summarize(_request(sources, target, level=level)).text
    assert estimate_tokens(text) <= target + 2
    assert text.splitlines()[-1].startswith(EXPAND)


def test_extractive_summaries_have_content_even_for_a_small_target() -> None:
    text = ExtractiveSummarizer().summarize(_request(_session_sources(), 60)).text
    lines = text.splitlines()
    assert len(lines) >= 3  # a day header and at least one line before the footer
    assert lines[0] == "## 2026-03-02"
    assert re.match(r"\d\d:\d\d msg#\d+ (user|assistant|tool output): ", lines[1])


def test_extractive_keeps_decisions_errors_paths_and_requests_over_chatter() -> None:
    sources = _conversation_sources()
    facts_tokens = sum(estimate_tokens(t) for _, t in FACTS)
    text = ExtractiveSummarizer().summarize(_request(sources, facts_tokens + 120)).text
    assert "src/lossless/config.py" in text  # the user's request and its file path
    assert "tomllib" in text and "because" in text  # the decision and its reason
    assert "FileNotFoundError" in text  # the error message
    assert "2026-03-01" in text  # the date
    body = text.splitlines()[:-1]
    for chatter in CHATTER:
        assert not any(line.endswith(f": {chatter}") for line in body), chatter
    assert "small talk" in text.splitlines()[-1]  # and it says so in the footer


def test_extractive_lines_carry_time_speaker_and_message_id() -> None:
    sources = _conversation_sources()
    text = ExtractiveSummarizer().summarize(_request(sources, 400)).text
    request_line = next(line for line in text.splitlines() if "TOML includes" in line)
    source = next(s for s in sources if "TOML includes" in s.text)
    minute = int(source.ref.removeprefix("msg#"))
    moment = T0 + timedelta(minutes=minute)
    assert request_line.startswith(f"{moment:%H:%M} {source.ref} user: ")
    lines = text.splitlines()
    day_headers = [line for line in lines[: lines.index(request_line)] if line.startswith("## ")]
    assert day_headers[-1] == f"## {moment:%Y-%m-%d}"


def test_extractive_summary_ends_with_what_to_expand_for_details() -> None:
    text = ExtractiveSummarizer().summarize(_request(_session_sources(), 150)).text
    last = text.splitlines()[-1]
    assert last.startswith(EXPAND)
    assert "(sources msg#1 … msg#" in last
    assert sum(line.startswith(EXPAND) for line in text.splitlines()) == 1


def test_extractive_condenses_its_own_leaf_summaries() -> None:
    sources = _session_sources(60)
    extractive = ExtractiveSummarizer()
    leaves = []
    step = len(sources) // 3
    for n in range(3):
        part = sources[n * step : (n + 1) * step]
        text = extractive.summarize(_request(part, 150)).text
        leaves.append(
            SourceItem(
                ref=f"sum_{n:016x}",
                role="summary",
                text=text,
                earliest_at=part[0].earliest_at,
                latest_at=part[-1].latest_at,
                tokens=estimate_tokens(text),
            )
        )
    condensed = extractive.summarize(_request(tuple(leaves), 150, kind="condensed")).text
    lines = condensed.splitlines()
    assert estimate_tokens(condensed) <= 150 + 2
    assert estimate_tokens(condensed) < sum(leaf.tokens for leaf in leaves)
    # Grouped under the day headers of the leaves' lines.
    headers = [line for line in lines if line.startswith("## ")]
    assert headers == ["## 2026-03-02"]
    # The lines under them are the leaves' own lines, word for word, with their message ids.
    body = [line for line in lines[:-1] if line not in headers]
    assert body
    for line in body:
        assert any(line in leaf.text for leaf in leaves), line
    assert all(re.match(r"\d\d:\d\d msg#\d+ ", line) for line in body)
    # The leaves' own footers are merged into one, at the end.
    assert lines[-1].startswith(EXPAND)
    assert sum(line.startswith(EXPAND) for line in lines) == 1
    assert "(sources sum_0000000000000000 … sum_0000000000000002)" in lines[-1]


def test_extractive_is_the_default_and_condenses_a_whole_session_in_the_engine(
    tmp_path: Path,
) -> None:
    from lossless.sample import write_session

    transcript = write_session(tmp_path / "session.jsonl", 40)
    config = Config().replace(
        fresh_tail_count=8,
        leaf_chunk_tokens=1_000,
        leaf_target_tokens=120,
        condensed_target_tokens=120,
        leaf_min_fanout=3,
        condensed_min_fanout=2,
    )
    with Engine.open(tmp_path / "lossless.db", config=config) as engine:
        engine.bootstrap(transcript)
        conv = engine.conversations()[0].conversation.conversation_id
        report = engine.compact(conv)
        assert report.by_depth().get(1, 0) >= 1
        assert report.tokens_after < report.tokens_before // 5
        # Whenever there is something to shrink, the extractive summarizer wrote it (a chunk
        # below the target, like a lone short message, may need the truncation fallback).
        sizable = [p for p in report.passes if p.tokens_before > 120]
        assert len(sizable) >= len(report.passes) - 1
        assert {engine.summary(p.summary_id).model for p in sizable} == {"extractive"}
        condensed = [engine.summary(p.summary_id) for p in report.passes if p.depth >= 1]
        for summary in condensed:
            assert summary.model == "extractive"
            assert summary.content.splitlines()[-1].startswith(EXPAND)
            assert summary.token_count <= 3 * 120
        assert doctor.check(engine.store) == []


# --- the registry ------------------------------------------------------------------------------


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test do not outlive it."""
    monkeypatch.setattr(summarizer_registry, "_FACTORIES", dict(summarizer_registry._FACTORIES))


def test_the_built_in_summarizers_are_available_by_name() -> None:
    names = available()
    assert "extractive" in names
    assert "scripted" in names
    assert names == sorted(names)
    assert isinstance(create("extractive"), ExtractiveSummarizer)
    scripted = create("scripted", outputs=["hello"])
    assert isinstance(scripted, ScriptedSummarizer)
    assert scripted.summarize(_request(SOURCES, 50)).text == "hello"


def test_an_unknown_summarizer_name_is_a_config_error_listing_the_available_ones() -> None:
    with pytest.raises(ConfigError) as info:
        create("gpt-17-turbo")
    message = str(info.value)
    assert "gpt-17-turbo" in message
    assert "extractive" in message and "scripted" in message


def test_an_engine_configured_with_an_unknown_summarizer_fails_with_a_config_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"available: .*extractive"):
        Engine.open(tmp_path / "lossless.db", config=Config(summarizer="nope"))


@pytest.mark.usefixtures("isolated_registry")
def test_a_registered_third_party_summarizer_is_selectable_in_the_config(tmp_path: Path) -> None:
    seen: list[SummaryRequest] = []

    @register("mine")
    class MySummarizer(Summarizer):
        name = "mine"
        model = "mine-v1"

        def summarize(self, request: SummaryRequest) -> SummaryResult:
            seen.append(request)
            return SummaryResult(text=f"mine: {len(request.sources)} items")

    assert "mine" in available()
    config = Config(summarizer="mine").replace(
        fresh_tail_count=2, leaf_chunk_tokens=200, leaf_target_tokens=40
    )
    with Engine.open(tmp_path / "lossless.db", config=config) as engine:
        for i in range(8):
            engine.ingest("s", {"role": "user", "content": f"note {i}: " + "text " * 40})
        report = engine.compact("s")
        assert report.passes
        # Not an offline summarizer: the passes are provisional, its summaries replace them.
        assert all(p.provisional for p in report.passes)
        engine.wait_for_summaries(30)
        first = engine.summary(report.passes[0].summary_id)
        assert first.content.startswith("mine: ")
        assert first.model == "mine-v1"
    assert seen
