"""The lcm_expand_query sub-agent, driven by the scripted provider's tool-calling script.

The model only ever gets ``lcm_expand``; every call runs under the delegation grant of the
query, refusals go back to it as tool errors, and the grant is revoked however it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from lossless import Config, Engine
from lossless.errors import NotFoundError
from lossless.retrieval.expand_query import LABEL
from lossless.summarize import ScriptedSummarizer, SummarizerError
from lossless.summarize.base import AgentRequest, AgentStep, ToolCall

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
    expand_query_max_steps=4,
)
SECRET = "the vault code is 7731-ALPHA"


Build = Callable[[list[object]], tuple[Engine, ScriptedSummarizer]]


@pytest.fixture
def build(new_db: Callable[[], str]) -> Iterator[Build]:
    """``build(script)``: an engine on a new store (closed after the test), and its model."""
    engines: list[Engine] = []

    def make(script: list[object]) -> tuple[Engine, ScriptedSummarizer]:
        engine, model = populate(new_db(), script)
        engines.append(engine)
        return engine, model

    yield make
    for engine in engines:
        engine.close()


def populate(target: str, script: list[object]) -> tuple[Engine, ScriptedSummarizer]:
    """Two conversations, both compacted: ``s`` holds the staging-port fact below its
    summaries, ``other`` holds a secret the sub-agent of ``s`` must never read."""
    model = ScriptedSummarizer(agent=script)  # type: ignore[arg-type]
    engine = Engine.open(target, config=SMALL, summarizer=model)
    for i in range(14):
        engine.ingest("s", {"role": "user", "content": f"status update {i}: " + "routine " * 10})
        if i == 3:
            engine.ingest(
                "s",
                {
                    "role": "assistant",
                    "content": "We chose port 9043 for staging because 8043 clashed"
                    " with the proxy.",
                },
            )
        engine.ingest("other", {"role": "user", "content": f"{SECRET}; note {i} " + "x " * 30})
    engine.compact("s")
    engine.compact("other")
    return engine, model


def top_summary(engine: Engine, conv: str) -> str:
    ids = [i.summary_id for i in engine.context(conv) if i.summary_id]
    assert ids, "the conversation should have been compacted"
    return ids[0]


def expand_call(*ids: str, call_id: str = "call_1", **extra: object) -> AgentStep:
    return AgentStep(
        text="",
        tool_calls=(ToolCall(call_id, "lcm_expand", {"summary_ids": list(ids), **extra}),),
    )


def live_grants(engine: Engine) -> int:
    return int(engine.store.fetchall("SELECT count(*) FROM grants WHERE revoked_at IS NULL")[0][0])


def tool_texts(request: AgentRequest) -> list[str]:
    return [t.text for t in request.turns if t.role == "tool"]


def fact_message(engine: Engine) -> str:
    found = engine.grep("9043", conversation="s", scope="messages").hits
    return found[0].id


def test_the_sub_agent_expands_reads_the_source_and_answers_with_citations(
    build: Build,
) -> None:
    def answer(request: AgentRequest) -> str:
        # Answer from what the tool returned: the message id comes from the expansion.
        text = tool_texts(request)[0]
        line = next(row for row in text.split("\n\n") if "9043" in row)
        return f"Port 9043, because 8043 clashed with the proxy {line.split(']')[0]}]."

    engine, model = build([])
    top = top_summary(engine, "s")
    model.enqueue_agent(*[expand_call(top, include_messages=True), answer])
    result = engine.expand_query("which port did we choose for staging?", conversation="s")

    assert result.mode == "model" and result.model == "scripted" and result.steps == 2
    assert result.answer.startswith("Port 9043") and not result.answer.startswith(LABEL)
    assert result.citations == [fact_message(engine)]
    first = model.agent_requests[0]
    assert [t.name for t in first.tools] == ["lcm_expand"]
    assert "which port did we choose for staging?" in first.turns[0].text
    assert "9043" in tool_texts(model.agent_requests[1])[0]
    assert live_grants(engine) == 0
    assert result.to_dict()["refused"] == []


def test_a_sub_agent_reaching_outside_its_grant_is_refused_and_reads_nothing(
    build: Build,
) -> None:
    engine, model = build([])
    foreign = top_summary(engine, "other")
    model.enqueue_agent(
        *[
            expand_call(foreign, include_messages=True),
            expand_call(top_summary(engine, "s"), max_depth=99, call_id="call_2"),
            "I could not read that.",
        ]
    )
    result = engine.expand_query("what is the vault code?", conversation="s")

    refusals = tool_texts(model.agent_requests[-1])
    assert len(refusals) == 2
    assert "outside this grant's conversations" in refusals[0]
    assert "level(s) down, not 99" in refusals[1]
    everything_seen = "\n".join(t.text for r in model.agent_requests for t in r.turns)
    assert "7731" not in everything_seen
    assert [r["error"][:6] for r in result.refused] == ["error:", "error:"]
    assert result.citations == []
    assert live_grants(engine) == 0


def test_a_tool_it_was_not_given_cannot_be_called(build: Build) -> None:
    engine, model = build([])
    model.enqueue_agent(
        *[
            AgentStep(
                text="",
                tool_calls=(
                    ToolCall("c1", "lcm_expand_query", {"prompt": "recurse"}),
                    ToolCall("c2", "lcm_expand", {}, error="the arguments are not a JSON object"),
                    ToolCall("c3", "lcm_expand", {"summary_ids": "not-a-list-of-ids"}),
                ),
            ),
            "done",
        ]
    )
    result = engine.expand_query("anything about staging", conversation="s")
    texts = tool_texts(model.agent_requests[1])
    assert "'lcm_expand_query' is not available here" in texts[0]
    assert "not a JSON object" in texts[1]
    assert "not-a-list-of-ids" in texts[2] or "unknown" in texts[2].lower()
    assert all(t.startswith("error:") for t in texts)
    assert [t.is_error for t in model.agent_requests[1].turns if t.role == "tool"] == [True] * 3
    assert len(result.refused) == 3 and live_grants(engine) == 0


def test_a_sub_agent_that_never_stops_is_made_to_answer_at_the_step_limit(
    build: Build,
) -> None:
    top_holder: list[str] = []

    def keep_expanding(request: AgentRequest) -> AgentStep:
        if request.tool_choice == "none":
            return AgentStep(text="Out of steps: port 9043, I believe.")
        return expand_call(top_holder[0], max_depth=0, call_id=f"c{len(request.turns)}")

    engine, model = build([])
    top_holder.append(top_summary(engine, "s"))
    model.enqueue_agent(*[keep_expanding] * 10)
    result = engine.expand_query("which port for staging?", conversation="s")
    assert result.steps == SMALL.expand_query_max_steps == len(model.agent_requests)
    assert [r.tool_choice for r in model.agent_requests] == ["auto"] * 3 + ["none"]
    assert result.answer == "Out of steps: port 9043, I believe."
    assert live_grants(engine) == 0


@pytest.mark.parametrize(
    "failure",
    [SummarizerError("provider answered HTTP 500"), TimeoutError("slow"), ""],
    ids=["error", "timeout", "empty answer"],
)
def test_when_the_model_fails_the_deterministic_answer_is_given_with_a_note(
    build: Build, failure: object
) -> None:
    engine, _model = build([failure])
    result = engine.expand_query("which port did we choose for staging?", conversation="s")
    assert result.mode == "deterministic"
    assert result.answer.startswith(LABEL)
    assert any("9043" in line for line in result.answer.splitlines())
    assert result.note is not None and "deterministic retrieval answer" in result.note
    assert result.to_dict()["note"] == result.note
    assert live_grants(engine) == 0


def test_the_grant_is_revoked_when_the_sub_agent_is_cancelled(build: Build) -> None:
    engine, model = build([])
    model.enqueue_agent(*[expand_call(top_summary(engine, "s")), KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        engine.expand_query("which port?", conversation="s")
    assert live_grants(engine) == 0
    used = engine.store.fetchall("SELECT tokens_used FROM grants")
    assert used and used[0][0] > 0  # the grant was really used before the cancel


def test_expired_grants_are_swept_when_the_next_one_is_made(build: Build) -> None:
    engine, _ = build([])
    grant = engine.create_grant("s", ttl_seconds=1)
    with engine.store.transaction() as conn:
        conn.execute(
            "UPDATE grants SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE grant_id = ?",
            (grant.grant_id,),
        )
    assert live_grants(engine) == 1
    engine.expand_query("staging", conversation="s")  # no agent script left: answers "done"
    assert live_grants(engine) == 0
    swept = engine.store.fetchall(
        "SELECT revoked_at FROM grants WHERE grant_id = ?", (grant.grant_id,)
    )
    assert swept[0][0] is not None


def test_citations_the_sub_agent_never_saw_are_not_reported(build: Build) -> None:
    engine, _model = build(["The answer is in [msg#99999] and [sum_0123456789abcdef]."])
    result = engine.expand_query("which port did we choose for staging?", conversation="s")
    assert result.mode == "model"
    assert result.citations == []


def test_summaries_of_another_family_cannot_be_named(build: Build) -> None:
    engine, model = build([])
    foreign = top_summary(engine, "other")
    with pytest.raises(NotFoundError, match="family"):
        engine.expand_query("what is the vault code?", conversation="s", summary_ids=[foreign])
    assert model.agent_requests == []
    assert live_grants(engine) == 0
