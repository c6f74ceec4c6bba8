"""The OpenAI Agents SDK session: real ``Runner.run`` loops over the SDK's own scripted model.

Every test drives the SDK as a host would (an ``Agent`` with tools, a ``LosslessSession``,
``Runner.run`` turn after turn); the model is ``agents.testing.ScriptedModel``, the SDK's
deterministic test double, so nothing leaves the machine (tracing is off in every run).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("agents")

from agents import Agent, FunctionTool, RunConfig, Runner, function_tool
from agents.memory import Session, SessionSettings
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from openai import AsyncOpenAI
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from lossless import Config, Engine
from lossless.aio import AsyncEngine
from lossless.doctor import check
from lossless.integrations.openai_agents import INSTALL_HINT, LosslessSession, recall_tools

T = TypeVar("T")

NO_TRACING = RunConfig(tracing_disabled=True)
SMALL = Config().replace(
    fresh_tail_count=6,
    leaf_chunk_tokens=400,
    leaf_target_tokens=60,
    condensed_target_tokens=60,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)
BUDGET = 1_500
FILLER = "The service reads its settings at start-up and logs them once. "


def run(make: Callable[[AsyncEngine], Awaitable[T]], db: Path, config: Config = SMALL) -> T:
    """Run *make* with an async engine on *db* in a fresh event loop."""

    async def main() -> T:
        async with await AsyncEngine.open(db, config=config) as engine:
            return await make(engine)

    return asyncio.run(main())


@function_tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    number = int(path.rsplit("-", 1)[1].split(".")[0])
    codename = "BLUEHERON" if number == 0 else f"plain{number}"
    return f"# {path}\nport = {9000 + number}\ncodename = {codename}\n" + FILLER * 3


def turn_steps(i: int) -> list[Any]:
    """One turn of the scripted model: read a file, then say what it found."""
    return [
        [function_call("read_file", {"path": f"config/service-{i}.toml"}, call_id=f"call_{i}")],
        [
            assistant_message(
                f"service-{i} listens on port {9000 + i}. " + FILLER, item_id=f"msg_{i}"
            )
        ],
    ]


async def run_turns(agent: Agent[Any], session: LosslessSession, turns: range) -> None:
    for i in turns:
        await Runner.run(
            agent, f"Which port does service-{i} use?", session=session, run_config=NO_TRACING
        )


def pairs(items: list[Any]) -> tuple[list[str], list[str]]:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    return calls, outputs


def text_of(items: list[Any]) -> str:
    return json.dumps(items, ensure_ascii=False)


def test_the_session_implements_the_sdks_session_protocol(tmp_path: Path) -> None:
    engine = Engine.open(tmp_path / "a.db", config=SMALL)
    session = LosslessSession("user-42", engine)
    assert isinstance(session, Session)
    assert session.session_id == "user-42"
    assert session.session_settings == SessionSettings()
    assert isinstance(session.engine, AsyncEngine) and session.engine.engine is engine
    engine.close()
    with pytest.raises(ValueError, match="token_budget"):
        LosslessSession("x", engine, token_budget=0)


def test_many_turns_compact_and_get_items_is_the_assembled_context(tmp_path: Path) -> None:
    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("deploys", engine, token_budget=BUDGET)
        model = ScriptedModel([step for i in range(24) for step in turn_steps(i)])
        agent = Agent(name="ops", model=model, tools=[read_file])
        await run_turns(agent, session, range(24))
        model.assert_complete()

        conv = await session.conversation()
        stored = await engine.messages(conv.conversation_id)
        assert len(stored) == 24 * 4  # user, call, output, answer: every item, once
        stats = next(
            s
            for s in await engine.conversations()
            if s.conversation.conversation_id == conv.conversation_id
        )
        assert stats.summary_count >= 3 and max(stats.summaries_by_depth) >= 1

        items = await session.get_items()
        assembled = await session.assemble()
        assert items == assembled.messages and assembled.summaries >= 1
        assert assembled.tokens <= BUDGET
        assert len(items) < len(stored) / 3
        assert items[0]["role"] == "user" and "<summary id=" in items[0]["content"]
        assert "port = 9000" not in text_of(items)  # turn 0's raw output is below the summaries
        # the newest turn is there exactly as the SDK added it
        assert items[-1]["id"] == "msg_23" and items[-1]["content"][0]["text"].startswith(
            "service-23"
        )
        # and it is what the model was given on its last call (before the answer was added)
        last_input = model.calls[-1].input
        assert isinstance(last_input, list) and last_input == items[:-1]

    run(main, tmp_path / "a.db")


def test_tool_calls_stay_paired_in_every_assembled_context(tmp_path: Path) -> None:
    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("pairs", engine, token_budget=BUDGET)
        model = ScriptedModel([step for i in range(16) for step in turn_steps(i)])
        agent = Agent(name="ops", model=model, tools=[read_file])
        for i in range(16):
            await run_turns(agent, session, range(i, i + 1))
            items = await session.get_items()
            calls, outputs = pairs(items)
            assert calls == outputs and calls, f"turn {i}: {calls} vs {outputs}"
            # the model saw the same pairing on each of its calls
            for call in model.calls:
                seen_calls, seen_outputs = pairs(list(call.input))
                assert set(seen_outputs) <= set(seen_calls)

    run(main, tmp_path / "p.db")


def test_the_recall_tools_are_function_tools_the_agent_calls(tmp_path: Path) -> None:
    def answer_from_hits(call: ModelCall) -> list[Any]:
        output = next(
            i
            for i in call.input
            if isinstance(i, dict)
            and i.get("call_id") == "call_recall"
            and i.get("type") == "function_call_output"
        )
        hits = json.loads(output["output"])["hits"]
        return [assistant_message(f"The codename came from {hits[0]['id']}.", item_id="msg_recall")]

    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("recall", engine, token_budget=BUDGET)
        tools = recall_tools(session)
        assert all(isinstance(t, FunctionTool) for t in tools)
        assert [t.name for t in tools] == [
            "lcm_grep",
            "lcm_describe",
            "lcm_expand_query",
            "chat_context_query",
        ]
        grep_schema = tools[0].params_json_schema
        assert grep_schema["required"] == ["pattern"] and "scope" in grep_schema["properties"]

        steps = [step for i in range(20) for step in turn_steps(i)]
        steps += [
            [
                function_call(
                    "lcm_grep", {"pattern": "BLUEHERON", "scope": "messages"}, call_id="call_recall"
                )
            ],
            ModelStep.respond(answer_from_hits),
        ]
        agent = Agent(name="ops", model=ScriptedModel(steps), tools=[read_file, *tools])
        await run_turns(agent, session, range(20))
        assert "BLUEHERON" not in text_of(await session.get_items())

        conv = await session.conversation()
        found = await engine.grep(
            "BLUEHERON", conversation=conv.conversation_id, scope="messages", sort="recency"
        )
        (hit,) = found.hits  # turn 0's tool output, below the summaries now
        result = await Runner.run(
            agent, "What was the codename?", session=session, run_config=NO_TRACING
        )
        assert result.final_output == f"The codename came from {hit.id}."
        # the tool call and its output are in the session like any other
        calls, outputs = pairs(await session.get_items())
        assert "call_recall" in calls and "call_recall" in outputs

        by_name = {t.name: t for t in tools}
        described = json.loads(await invoke(by_name["lcm_describe"], {"id": found.hits[0].id}))
        assert "BLUEHERON" in json.dumps(described)
        answer = json.loads(
            await invoke(
                by_name["lcm_expand_query"],
                {"prompt": "What was the codename?", "query": "codename BLUEHERON"},
            )
        )
        assert answer["citations"] and answer["mode"] == "deterministic"
        executions = json.loads(
            await invoke(
                by_name["chat_context_query"], {"kind": "executions", "tool_name": "lcm_grep"}
            )
        )
        assert [e["execution_id"] for e in executions["executions"]] == ["call_recall"]
        refused = json.loads(await invoke(by_name["lcm_describe"], {"id": "sum_0000000000000000"}))
        assert "error" in refused and "sum_0000000000000000" in refused["error"]

    run(main, tmp_path / "r.db")


async def invoke(tool: FunctionTool, arguments: dict[str, Any]) -> str:
    """Call a function tool the way the SDK's runner does."""
    from agents.tool_context import ToolContext

    context = ToolContext(
        context=None,
        tool_name=tool.name,
        tool_call_id="call_t",
        tool_arguments=json.dumps(arguments),
    )
    out = await tool.on_invoke_tool(context, json.dumps(arguments))
    assert isinstance(out, str)
    return out


def test_add_items_is_an_exact_append_repeats_and_reused_ids_included(tmp_path: Path) -> None:
    user = {"role": "user", "content": "yes"}
    answer = {
        "id": "msg_a1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
    }
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "read_file",
        "arguments": "{}",
    }
    output = {"type": "function_call_output", "call_id": "call_1", "output": "port = 9001"}
    fake = {**answer, "id": FAKE_RESPONSES_ID}

    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("exact", engine)
        conv = (await session.conversation()).conversation_id
        await session.add_items([user])
        await session.add_items([user])  # the user typed "yes" twice
        await session.add_items([call, output, answer])
        await session.add_items([call, output, answer])  # a server that reuses call ids
        await session.add_items([fake, fake])  # Chat Completions replies: one placeholder id
        added = [user, user, call, output, answer, call, output, answer, fake, fake]
        assert [m.to_source() for m in await engine.messages(conv)] == added
        assert await session.get_items() == added

    run(main, tmp_path / "i.db")


def test_items_lossless_does_not_know_and_pending_calls_come_back_exactly(
    tmp_path: Path,
) -> None:
    items: list[Any] = [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Search the web."},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "q"}},
        {"type": "program", "id": "pg_1", "call_id": "call_p", "code": "print(1)"},
        {"type": "program_output", "call_id": "call_p", "output": "1"},
        {"type": "a_kind_from_a_later_sdk", "id": "x_1", "note": "kept"},
        {"type": "function_call", "call_id": "call_wait", "name": "approve", "arguments": "{}"},
    ]

    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("kinds", engine)
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(1) == items[-1:]  # the pending call, awaiting its output

    run(main, tmp_path / "k.db")


def test_adding_pydantic_items_stores_their_json(tmp_path: Path) -> None:
    item = assistant_message("From an SDK object.", item_id="msg_obj")

    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("objects", engine)
        await session.add_items([item])  # type: ignore[list-item]
        await session.add_items([item])  # type: ignore[list-item]
        stored = await engine.messages((await session.conversation()).conversation_id)
        assert [m.to_source() for m in stored] == [
            item.model_dump(mode="json", exclude_unset=True)
        ] * 2

    run(main, tmp_path / "o.db")


def test_session_settings_limit_applies_unless_get_items_names_one(tmp_path: Path) -> None:
    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("settings", engine, session_settings={"limit": 2})
        assert session.session_settings == SessionSettings(limit=2)
        items = [{"role": "user", "content": f"note {i}"} for i in range(5)]
        await session.add_items(items)
        assert await session.get_items() == items[-2:]
        assert await session.get_items(3) == items[-3:]
        assert await session.get_items(-1) == items
        with pytest.raises(TypeError, match="limitt"):
            LosslessSession("bad", engine, session_settings={"limitt": 1})

    run(main, tmp_path / "s.db")


def test_a_cancelled_add_items_finishes_its_write_before_the_cancellation(tmp_path: Path) -> None:
    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("cancel", engine)
        item = {"role": "user", "content": "keep me"}
        task = asyncio.ensure_future(session.add_items([item]))
        await asyncio.sleep(0)  # the write has started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await session.get_items() == [item]

    run(main, tmp_path / "c.db")


def test_get_items_with_a_limit_returns_the_newest(tmp_path: Path) -> None:
    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("limits", engine)
        items = [{"role": "user", "content": f"note {i}"} for i in range(5)]
        await session.add_items(items)
        assert await session.get_items(2) == items[-2:]
        assert await session.get_items(0) == []
        assert await session.get_items() == items

    run(main, tmp_path / "l.db")


def test_pop_item_takes_the_newest_message_out_of_the_context_and_keeps_it(tmp_path: Path) -> None:
    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("undo", engine)
        model = ScriptedModel(
            [
                [assistant_message("Paris.", item_id="msg_p1")],
                [assistant_message("Lyon.", item_id="msg_p2")],
            ]
        )
        agent = Agent(name="geo", model=model)
        await Runner.run(agent, "Capital of France?", session=session, run_config=NO_TRACING)
        before = await session.get_items()

        answer = await session.pop_item()
        question = await session.pop_item()
        assert [question, answer] == before  # as the SDK added them
        assert await session.get_items() == []
        assert await session.pop_item() is None

        conv = (await session.conversation()).conversation_id
        assert len(await engine.messages(conv)) == 2  # still stored
        hits = await engine.grep("Paris", conversation=conv, scope="messages", sort="recency")
        assert [h.id for h in hits.hits] == [f"msg#{(await engine.messages(conv))[1].message_id}"]

        # asked again: the same input comes back into the context as a new copy
        await Runner.run(agent, "Capital of France?", session=session, run_config=NO_TRACING)
        items = await session.get_items()
        assert (
            items[0] == {"role": "user", "content": "Capital of France?"}
            and items[1]["id"] == "msg_p2"
        )
        assert len(await engine.messages(conv)) == 4

        # taken back and added again by hand: an exact append, each add a new message
        popped = await session.pop_item()
        assert popped is not None
        await session.add_items([popped])
        await session.add_items([popped])
        assert await session.get_items() == [*items, popped]
        assert len(await engine.messages(conv)) == 6

    run(main, tmp_path / "u.db")


def test_clear_session_archives_and_goes_on_in_the_same_family(tmp_path: Path) -> None:
    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("team", engine)
        await session.clear_session()  # nothing stored yet: nothing to archive
        first = await session.conversation()
        assert first.session_id == "team" and first.status == "active"

        await session.add_items([{"role": "user", "content": "The vault code is 4417."}])
        await session.clear_session()
        second = await session.conversation()
        assert second.session_id == "team#2" and second.session_key == first.session_key == "team"
        assert await session.get_items() == []
        assert (await engine.conversation(first.conversation_id)).status == "archived"
        assert len(await engine.messages(first.conversation_id)) == 1  # nothing deleted

        await session.add_items([{"role": "user", "content": "New topic."}])
        grep = next(t for t in recall_tools(session) if t.name == "lcm_grep")
        hits = json.loads(await invoke(grep, {"pattern": "vault code"}))["hits"]
        assert [h["conversation_id"] for h in hits] == [first.conversation_id]

        # a session opened later on the same store goes on where this one is
        again = LosslessSession("team", engine)
        assert (await again.conversation()).conversation_id == second.conversation_id
        assert await again.get_items() == [{"role": "user", "content": "New topic."}]

    run(main, tmp_path / "c.db")


def test_the_store_stays_consistent_after_clear_and_pop(tmp_path: Path) -> None:
    async def main(engine: AsyncEngine) -> None:
        session = LosslessSession("doctor", engine, token_budget=BUDGET)
        model = ScriptedModel([step for i in range(12) for step in turn_steps(i)])
        await run_turns(Agent(name="ops", model=model, tools=[read_file]), session, range(12))
        await session.clear_session()
        assert check(engine.engine.store) == []
        await session.add_items([{"role": "user", "content": "oops"}])
        await session.pop_item()
        assert check(engine.engine.store) == []  # the popped message is stored, on record
        popped = engine.engine.store.fetchall("SELECT count(*) FROM context_removals")
        assert popped[0][0] == 1

    run(main, tmp_path / "d.db")


def test_sessions_survive_event_loops_and_tasks_share_one_session(tmp_path: Path) -> None:
    engine = Engine.open(tmp_path / "loops.db", config=SMALL)
    session = LosslessSession("loops", engine)
    asyncio.run(session.add_items([{"role": "user", "content": "first loop"}]))

    async def many(loop: int) -> None:
        await asyncio.gather(
            *(
                session.add_items([{"role": "user", "content": f"loop {loop} task {i}"}])
                for i in range(8)
            )
        )

    asyncio.run(many(2))
    asyncio.run(many(3))  # tasks of another loop wait on the session too
    items = asyncio.run(session.get_items())
    assert items[0]["content"] == "first loop" and len(items) == 17
    assert sorted(i["content"] for i in items[1:]) == sorted(
        f"loop {loop} task {i}" for loop in (2, 3) for i in range(8)
    )
    engine.close()


def test_a_missing_sdk_names_the_extra_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['agents'] = None\n"
        "import lossless, lossless.aio\n"
        "try:\n"
        "    import lossless.integrations.openai_agents\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == INSTALL_HINT
    quiet = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, lossless, lossless.aio; print('agents' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert quiet.stdout.strip() == "False"


def test_the_docs_example_prints_what_the_docs_show(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text()
    found = re.search(r"```python\n(import asyncio\n.*?)```\n\n```text\n(.*?)```", text, re.S)
    assert found is not None, "docs/integrations.md lost its example and its output"
    code, shown = found.groups()
    (tmp_path / "example.py").write_text(code)
    out = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == shown


def test_identical_chat_completions_replies_are_all_kept(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    # A Chat Completions model gives every reply the placeholder id "__fake_id__"; the agent
    # is told to go on twice with no new input, and answers the same words each time.
    def reply(request: Request) -> Response:
        body = json.loads(request.data)
        return Response(
            json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "Working on it."},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            ),
            content_type="application/json",
        )

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(reply)
    client = AsyncOpenAI(base_url=httpserver.url_for("/v1"), api_key="local", max_retries=0)
    agent = Agent(name="worker", model=OpenAIChatCompletionsModel("local-model", client))

    async def main(engine: AsyncEngine) -> list[Any]:
        session = LosslessSession("job", engine)
        await Runner.run(agent, "Start the job.", session=session, run_config=NO_TRACING)
        for _ in range(2):
            await Runner.run(agent, [], session=session, run_config=NO_TRACING)
        return await session.get_items()

    items = run(main, tmp_path / "cc.db", Config())
    said = [
        (i["role"], i["content"] if isinstance(i["content"], str) else i["content"][0]["text"])
        for i in items
    ]
    assert said == [("user", "Start the job.")] + [("assistant", "Working on it.")] * 3
    assert {i.get("id") for i in items[1:]} == {FAKE_RESPONSES_ID}
    # The third request carried both earlier replies.
    last = json.loads(httpserver.log[-1][0].data)["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "assistant"]


def test_at_a_4k_budget_every_call_fits_and_keeps_summaries_and_the_request(
    tmp_path: Path,
) -> None:
    """Lossless's defaults and a 4,000-token budget, turns of 600 words with a tool call
    each: what get_items gives every model call fits the budget (the runner adds the turn's
    own items after it), every call from the first compaction on carries a summary and the
    turn's request whole, one compaction at most a turn, a shallow DAG, and every item
    stored once."""
    import math

    budget = 4_000

    def ask(i: int) -> str:
        return f"Request {i}: which port does service-{i} use? " + " ".join(
            f"context{i}-{k}" for k in range(600)
        )

    async def main(engine: AsyncEngine) -> int:
        session = LosslessSession("tight", engine, token_budget=budget)
        model = ScriptedModel([step for i in range(14) for step in turn_steps(i)])
        agent = Agent(name="ops", model=model, tools=[read_file])
        runs: list[int] = []
        for i in range(14):
            before = len(logged)
            await Runner.run(agent, ask(i), session=session, run_config=NO_TRACING)
            runs.append(len(logged) - before)
        model.assert_complete()
        first = None
        for n, call in enumerate(model.calls):
            text = text_of(list(call.input))
            counted = [(await engine.normalize(item)).token_count for item in call.input]
            # What get_items gave (as lossless counts it) fits the budget; the runner adds
            # the turn's request after it, and its tool call and output for its second call.
            added = sum(counted[-3:]) if n % 2 else counted[-1]
            assert sum(counted) - added <= budget, n
            if first is None and "<summary id=" in text:
                first = n
            if first is not None:
                assert "<summary id=" in text, n
                assert ask(n // 2) in text, n  # two model calls a turn
        assert first is not None
        # At most one compaction run a turn (lossless logs each run that wrote summaries).
        assert max(runs) <= 1 and sum(runs) >= 2, runs
        conv = await session.conversation()
        stored = await engine.messages(conv.conversation_id)
        assert [m.content for m in stored if m.role == "user"] == [ask(i) for i in range(14)]
        assert len(stored) == 14 * 4  # user, call, output, answer: each once
        return conv.conversation_id

    logged: list[str] = []

    class Runs(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    log = logging.getLogger("lossless.compaction")
    handler, level = Runs(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        conversation_id = run(main, tmp_path / "tight.db", Config())
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    with Engine.open(tmp_path / "tight.db", config=Config()) as engine:
        live = engine.store.live_summaries(conversation_id)
    leaves = sum(1 for s in live if s.kind == "leaf")
    assert max(s.depth for s in live) <= 1 + math.log(max(leaves, 1), 4) + 1e-9


def test_prompt_aware_input_brings_back_what_the_request_asks_for(tmp_path: Path) -> None:
    """With ``call_model_input_filter=session.prompt_aware_input`` the model's input is the
    history assembled for the turn's request: a turn compacted long ago that the request
    names is back verbatim (the plain context holds only its summary), the rest is still
    summarized, and the turn's own items follow unchanged and are stored once."""
    turns = 30
    ask = "What codename is in config/service-0.toml?"

    async def main(engine: AsyncEngine) -> tuple[str, list[Any], list[Any], int]:
        session = LosslessSession("ops", engine, token_budget=BUDGET)
        asked = [
            [function_call("read_file", {"path": "config/service-11.toml"}, call_id="c_x")],
            [assistant_message("The codename is BLUEHERON.", item_id="msg_x")],
        ]
        model = ScriptedModel([step for i in range(turns) for step in turn_steps(i)] + asked)
        agent = Agent(name="ops", model=model, tools=[read_file])
        await run_turns(agent, session, range(turns))
        plain = text_of(await session.get_items())
        config = RunConfig(
            tracing_disabled=True, call_model_input_filter=session.prompt_aware_input
        )
        await Runner.run(agent, ask, session=session, run_config=config)
        model.assert_complete()
        first, second = model.calls[-2].input, model.calls[-1].input
        conv = await session.conversation()
        stored = await engine.messages(conv.conversation_id)
        return plain, list(first), list(second), len(stored)

    plain, first, second, stored = run(main, tmp_path / "aware.db")
    raw = "codename = BLUEHERON"
    assert raw not in plain  # compacted: the plain context has the summary only
    for call in (first, second):
        assert raw in text_of(call)
        assert "<summary id=" in text_of(call)  # the rest of the history is still summarized
    # The turn's own items come last, as the runner made them.
    assert first[-1]["content"] == ask
    assert [i.get("type") for i in second[-2:]] == ["function_call", "function_call_output"]
    assert second[-3]["content"] == ask
    assert stored == turns * 4 + 4  # every item once: the re-assembly stored nothing again
