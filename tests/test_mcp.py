"""The MCP server, end to end through the SDK's own clients: in memory, over stdio and HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client

from lossless import Config, Engine, NotFoundError
from lossless.mcp_server import INSTALL_HINT, MANIFEST_SHOWN, build_server
from lossless.retrieval.expand_query import LABEL
from lossless.retrieval.grants import GrantError
from lossless.summarize import ScriptedSummarizer
from lossless.toolbox import GREP_RESULT_CHARS

pytestmark = pytest.mark.anyio

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
    large_file_token_threshold=200,
)
PORT_FACT = "We chose port 9043 for staging because 8043 clashed with the proxy."
VAULT_FACT = "The vault passphrase is marmalade-7741; it opens the backup bucket."
TABLE = "\n".join(f"row {i}: value={i * 7}" for i in range(300))
STORE_TOOLS = {
    "lcm_grep",
    "lcm_describe",
    "lcm_expand_query",
    "lcm_list_conversations",
    "summarize_session",
    "get_history",
    "chat_context_query",
}
GRANT_TOOLS = {
    "lcm_grep",
    "lcm_describe",
    "lcm_expand",
    "lcm_list_conversations",
    "get_history",
    "chat_context_query",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _fill(engine: Engine, session: str, fact: str, *, with_file: bool = False) -> None:
    for i in range(14):
        engine.ingest(
            session, {"role": "user", "content": f"status update {i}: " + "routine work " * 8}
        )
        if i == 3:
            engine.ingest(session, {"role": "assistant", "content": fact})
        if i == 5 and with_file:
            engine.ingest(session, {"role": "tool", "tool_call_id": "call_1", "content": TABLE})
    engine.compact(session)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """Two compacted conversations: alpha (a port decision, a large file) and beta (a secret)."""
    eng = Engine.open(tmp_path / "mcp.db", config=SMALL, summarizer=ScriptedSummarizer())
    _fill(eng, "alpha", PORT_FACT, with_file=True)
    _fill(eng, "beta", VAULT_FACT)
    yield eng
    eng.close()


def _ids(engine: Engine, session: str) -> dict[str, Any]:
    """The ids of a conversation's fact message, a summary in its context, and its files."""
    conv = engine.conversation(session)
    fact = next(m for m in engine.messages(session) if m.role == "assistant")
    top = next(i.summary_id for i in engine.context(session) if i.summary_id)
    files = [
        f.file_id for f in engine.store.large_files() if f.conversation_id == conv.conversation_id
    ]
    return {
        "conv": conv.conversation_id,
        "msg": f"msg#{fact.message_id}",
        "sum": top,
        "files": files,
    }


@asynccontextmanager
async def connected(engine: Engine, **scope: Any) -> AsyncIterator[Client]:
    with anyio.fail_after(10):
        async with Client(build_server(engine, **scope)) as client:
            yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A successful tool call's result; its text content is the same data as JSON."""
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    assert result.structured_content is not None
    assert json.loads(text) == result.structured_content
    return result.structured_content


async def refusal(client: Client, tool: str, **arguments: Any) -> str:
    """A refused tool call's message (the server stays up for the next call)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


# --- what each mode offers ------------------------------------------------------------------


async def test_the_store_server_lists_the_recall_tools_with_descriptions_and_schemas(
    engine: Engine,
) -> None:
    async with connected(engine) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == STORE_TOOLS
        assert "lcm_grep" in (client.instructions or "")
    for tool in tools.values():
        assert tool.description and tool.input_schema["type"] == "object"
        assert not tool.description.startswith(" ")
    grep = tools["lcm_grep"]
    # The descriptions teach the order of recall and what ids look like.
    text = grep.description or ""
    assert text.index("lcm_describe") < text.index("lcm_expand_query")
    for shape in ("msg#42", "sum_0123456789abcdef", "file_0123456789abcdef"):
        assert shape in text
    props = grep.input_schema["properties"]
    assert grep.input_schema["required"] == ["pattern"]
    assert set(props) == {
        "pattern",
        "mode",
        "scope",
        "sort",
        "since",
        "before",
        "limit",
        "offset",
        "include_archived",
        "conversation",
    }
    assert props["sort"]["default"] == "relevance"
    assert props["include_archived"]["default"] is False
    assert props["mode"]["enum"] == ["full_text", "regex"]
    assert props["limit"]["maximum"] == 200
    assert tools["lcm_describe"].input_schema["required"] == ["id"]
    assert tools["lcm_expand_query"].input_schema["required"] == ["prompt"]
    assert "citations" in (tools["lcm_expand_query"].description or "")
    assert tools["lcm_grep"].annotations and tools["lcm_grep"].annotations.read_only_hint


async def test_a_grant_server_offers_expand_and_cannot_start_sub_agents(engine: Engine) -> None:
    grant = engine.create_grant("alpha")
    async with connected(engine, grant_id=grant.grant_id) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == GRANT_TOOLS
        assert tools["lcm_expand"].input_schema["required"] == ["summary_ids"]
        missing = await refusal(client, "lcm_expand_query", prompt="which port?")
        assert "Unknown tool" in missing


async def test_a_pinned_server_lists_the_same_tools_and_says_what_it_serves(
    engine: Engine,
) -> None:
    async with connected(engine, conversation="alpha") as client:
        assert {t.name for t in (await client.list_tools()).tools} == STORE_TOOLS
        assert "session 'alpha'" in (client.instructions or "")


# --- lcm_grep ---------------------------------------------------------------------------------


async def test_grep_answers_a_question_with_ids_conversation_time_role_and_snippet(
    engine: Engine,
) -> None:
    alpha = _ids(engine, "alpha")
    async with connected(engine) as client:
        found = await call(client, "lcm_grep", pattern="which port did we choose for staging?")
    first = found["hits"][0]
    assert first["id"] == alpha["msg"]
    assert first["kind"] == "message" and first["role"] == "assistant"
    assert first["conversation_id"] == alpha["conv"]
    assert first["created_at"].startswith("20")
    assert "port 9043" in first["snippet"]
    assert found["truncated"] is False and found["more"] is False
    # A hit carries no empty fields and no long score floats.
    assert None not in first.values() and "depth" not in first
    assert len(str(first["score"])) <= 8


async def test_grep_covers_the_store_or_one_conversation_and_each_scope(engine: Engine) -> None:
    # The deferred index entries made first: a search made before them misses a hit
    # (test_grep.py::test_a_search_before_the_deferred_entries_finds_what_it_finds_after).
    engine.finish_indexes()
    alpha, beta = _ids(engine, "alpha"), _ids(engine, "beta")
    async with connected(engine) as client:
        everywhere = await call(client, "lcm_grep", pattern="status update", limit=200)
        only_beta = await call(
            client, "lcm_grep", pattern="status update", conversation="beta", limit=200
        )
        by_id = await call(
            client, "lcm_grep", pattern="status update", conversation=beta["conv"], limit=200
        )
        summaries = await call(client, "lcm_grep", pattern="Summary", scope="summaries")
        files = await call(client, "lcm_grep", pattern="row value", scope="files")
        regex = await call(client, "lcm_grep", pattern=r"port \d{4} for", mode="regex")
        nothing = await call(client, "lcm_grep", pattern="zebra xylophone")
    assert {h["conversation_id"] for h in everywhere["hits"]} == {alpha["conv"], beta["conv"]}
    assert {h["conversation_id"] for h in only_beta["hits"]} == {beta["conv"]}
    # The same hits either way. (Not the same scores: the store indexes a host's last few
    # turns' surroundings when the writes pause, which may fall between the two calls.)
    assert sorted(h["id"] for h in by_id["hits"]) == sorted(h["id"] for h in only_beta["hits"])
    assert summaries["hits"] and all(h["id"].startswith("sum_") for h in summaries["hits"])
    assert all(h["depth"] is not None for h in summaries["hits"])
    assert [h["id"] for h in files["hits"]] == alpha["files"]
    assert [h["id"] for h in regex["hits"]] == [alpha["msg"]]
    assert regex["scanned"] > 0
    assert nothing["hits"] == [] and "mode=regex" in nothing["hint"]


async def test_grep_pages_and_a_large_page_is_cut_to_fit_a_window(tmp_path: Path) -> None:
    with Engine.open(tmp_path / "many.db", config=SMALL, summarizer=ScriptedSummarizer()) as eng:
        eng.ingest_batch(
            "big",
            [
                {"role": "user", "content": f"deploy log line {i}: " + "rollout ok " * 40}
                for i in range(180)
            ],
        )
        async with connected(eng) as client:
            first = await call(client, "lcm_grep", pattern="deploy log", limit=5)
            second = await call(client, "lcm_grep", pattern="deploy log", limit=5, offset=5)
            ten = await call(client, "lcm_grep", pattern="deploy log", limit=10)
            huge = await call(client, "lcm_grep", pattern="deploy log", limit=200)
            rest = await call(
                client, "lcm_grep", pattern="deploy log", limit=200, offset=huge["next_offset"]
            )
    assert first["more"] is True and first["next_offset"] == 5 and "offset=5" in first["next"]
    assert [h["id"] for h in first["hits"] + second["hits"]] == [h["id"] for h in ten["hits"]]
    # 180 hits of ~500 characters: the page stops at the size cap and says where to go on.
    assert len(json.dumps(huge)) < GREP_RESULT_CHARS + 1_000
    assert 10 < len(huge["hits"]) < 180 and huge["more"] is True
    assert huge["next_offset"] == len(huge["hits"]) and "to fit" in huge["next"]
    seen = [h["id"] for h in huge["hits"] + rest["hits"]]
    assert len(set(seen)) == len(seen) and rest["hits"]


async def test_bad_grep_input_is_a_tool_error_that_says_what_to_do(engine: Engine) -> None:
    async with connected(engine) as client:
        regexish = await refusal(client, "lcm_grep", pattern="dep.*timeout")
        empty = await refusal(client, "lcm_grep", pattern="   ")
        too_many = await refusal(client, "lcm_grep", pattern="port", limit=500)
        bad_mode = await refusal(client, "lcm_grep", pattern="port", mode="glob")
        bad_time = await refusal(client, "lcm_grep", pattern="port", since="last tuesday")
        unknown = await refusal(client, "lcm_grep", pattern="port", conversation="gamma")
        # The server is still answering after all of that.
        assert (await call(client, "lcm_grep", pattern="port"))["hits"]
    assert "mode=regex" in regexish
    assert "empty" in empty
    assert "limit" in too_many
    assert "mode" in bad_mode
    assert "ISO-8601" in bad_time
    assert "'gamma'" in unknown and "lcm_list_conversations" in unknown


async def test_wrong_or_missing_arguments_are_refused_in_lossless_words(engine: Engine) -> None:
    async with connected(engine) as client:
        as_true = await refusal(client, "get_history", conversation=True)
        limit_true = await refusal(client, "lcm_grep", pattern="port", limit=True)
        number = await refusal(client, "lcm_grep", pattern=5)
        missing = await refusal(client, "lcm_grep")
        unknown = await refusal(client, "lcm_grep", pattern="port", patern="port")
        assert (await call(client, "lcm_grep", pattern="port"))["hits"]
    for text in (as_true, limit_true, number, missing, unknown):
        assert "pydantic" not in text and "validation error" not in text, text
    assert "conversation must be a conversation id or a session id" in as_true
    assert "got True" in as_true  # not read as conversation 1
    assert "limit must be an integer" in limit_true
    assert "pattern must be a string" in number
    assert "lcm_grep needs pattern" in missing
    assert "'patern'" in unknown and "pattern" in unknown


async def test_grep_time_bounds_take_iso_dates(engine: Engine) -> None:
    async with connected(engine) as client:
        future = await call(client, "lcm_grep", pattern="port staging", since="2999-01-01")
        past = await call(client, "lcm_grep", pattern="port staging", before="2000-01-01T00:00Z")
        now = await call(client, "lcm_grep", pattern="port staging", since="2000-01-01")
    assert future["hits"] == [] and past["hits"] == []
    assert now["hits"]


# --- lcm_describe -----------------------------------------------------------------------------


async def test_describe_a_summary_shows_its_sources_the_manifest_and_its_content(
    engine: Engine,
) -> None:
    alpha = _ids(engine, "alpha")
    summary = engine.summary(alpha["sum"])
    async with connected(engine) as client:
        found = await call(client, "lcm_describe", id=alpha["sum"], token_cap=100)
    assert found["kind"] == "summary" and found["conversation_id"] == alpha["conv"]
    assert found["content"] == summary.content
    assert found["metadata"]["depth"] == summary.depth
    assert found["parents"] == engine.describe(alpha["sum"]).parents
    manifest = found["manifest"]
    assert manifest and len(manifest) <= MANIFEST_SHOWN
    assert manifest[0]["fits"] is True and manifest[-1]["fits"] is False
    assert found["manifest_tokens"] >= manifest[-1]["cumulative_tokens"]
    assert found["manifest_items"] == len(engine.describe(alpha["sum"]).manifest)


async def test_describe_a_message_returns_it_exactly_with_the_summaries_covering_it(
    engine: Engine,
) -> None:
    alpha = _ids(engine, "alpha")
    async with connected(engine) as client:
        found = await call(client, "lcm_describe", id=alpha["msg"])
        unknown = await refusal(client, "lcm_describe", id="tuesday")
        missing = await refusal(client, "lcm_describe", id="msg#999999")
    assert found["kind"] == "message"
    assert found["content"] == PORT_FACT
    assert found["children"] and found["children"][0].startswith("sum_")
    assert "ids look like" in unknown
    assert "999999" in missing


async def test_describe_a_large_file_by_lines_and_within_a_cap(engine: Engine) -> None:
    [file_id] = _ids(engine, "alpha")["files"]
    async with connected(engine) as client:
        whole = await call(client, "lcm_describe", id=file_id, token_cap=100_000)
        capped = await call(client, "lcm_describe", id=file_id, token_cap=120)
        ranged = await call(client, "lcm_describe", id=file_id, lines="3:4")
        bad_range = await refusal(client, "lcm_describe", id=file_id, lines="3-4")
    assert whole["kind"] == "file" and whole["content"] == TABLE
    assert "content_truncated" not in whole
    assert capped["content_truncated"] is True and capped["lines_total"] == 300
    assert TABLE.startswith(capped["content"]) and len(capped["content"]) < len(TABLE)
    assert "lines=FIRST:LAST" in capped["hint"]
    assert ranged["content"] == "row 2: value=14\nrow 3: value=21"
    assert "FIRST:LAST" in bad_range


# --- lcm_expand_query and lcm_list_conversations -----------------------------------------------


async def test_expand_query_answers_from_below_the_summaries_with_citations(
    engine: Engine,
) -> None:
    alpha = _ids(engine, "alpha")
    async with connected(engine) as client:
        named = await call(
            client, "lcm_expand_query", prompt="which port for staging?", conversation="alpha"
        )
        inferred = await call(
            client, "lcm_expand_query", prompt="port staging", summary_ids=[alpha["sum"]]
        )
        unnamed = await refusal(client, "lcm_expand_query", prompt="which port for staging?")
        empty = await refusal(client, "lcm_expand_query", prompt="  ", conversation="alpha")
    assert named["conversation_id"] == alpha["conv"]
    assert named["mode"] == "deterministic" and named["answer"].startswith(LABEL)
    assert "9043" in named["answer"] and alpha["msg"] in named["citations"]
    assert inferred["conversation_id"] == alpha["conv"]
    assert alpha["sum"] in inferred["searched"] and "9043" in inferred["answer"]
    assert "name the conversation" in unnamed
    assert "empty" in empty
    live = engine.store.fetchall("SELECT count(*) FROM grants WHERE revoked_at IS NULL")[0][0]
    assert live == 0  # every grant expand_query made was revoked


async def test_expand_query_refuses_summaries_of_another_conversation(engine: Engine) -> None:
    beta = _ids(engine, "beta")
    async with connected(engine) as client:
        text = await refusal(
            client,
            "lcm_expand_query",
            prompt="vault passphrase",
            conversation="alpha",
            summary_ids=[beta["sum"]],
        )
    assert beta["sum"] in text and "lcm_grep" in text


async def test_list_conversations_newest_first_with_counts(engine: Engine) -> None:
    alpha, beta = _ids(engine, "alpha"), _ids(engine, "beta")
    async with connected(engine) as client:
        listed = await call(client, "lcm_list_conversations")
        one = await call(client, "lcm_list_conversations", limit=1)
    rows = listed["conversations"]
    assert [r["conversation_id"] for r in rows] == [beta["conv"], alpha["conv"]]
    assert [r["session_id"] for r in rows] == ["beta", "alpha"]
    assert rows[0]["messages"] == 15 and rows[0]["summaries"] > 0
    assert rows[0]["last_message_at"] and rows[0]["status"] == "active"
    assert listed["total"] == 2 and one["total"] == 2 and len(one["conversations"]) == 1


# --- scopes: nothing leaks across conversations ------------------------------------------------


async def test_a_pinned_server_never_returns_another_conversations_content(
    engine: Engine,
) -> None:
    alpha, beta = _ids(engine, "alpha"), _ids(engine, "beta")
    async with connected(engine, conversation="beta") as client:
        grep = await call(client, "lcm_grep", pattern="which port did we choose for staging?")
        regex = await call(client, "lcm_grep", pattern="9043", mode="regex")
        files = await call(client, "lcm_grep", pattern="row value", scope="files")
        own = await call(client, "lcm_grep", pattern="vault passphrase")
        refused = {
            "grep": await refusal(client, "lcm_grep", pattern="port", conversation="alpha"),
            "grep_by_id": await refusal(
                client, "lcm_grep", pattern="port", conversation=alpha["conv"]
            ),
            "message": await refusal(client, "lcm_describe", id=alpha["msg"]),
            "summary": await refusal(client, "lcm_describe", id=alpha["sum"]),
            "file": await refusal(client, "lcm_describe", id=alpha["files"][0]),
            "ask_alpha": await refusal(
                client, "lcm_expand_query", prompt="which port?", conversation="alpha"
            ),
            "ask_summary": await refusal(
                client, "lcm_expand_query", prompt="which port?", summary_ids=[alpha["sum"]]
            ),
        }
        answer = await call(client, "lcm_expand_query", prompt="which port did we choose?")
        listed = await call(client, "lcm_list_conversations")
        frames = await call(client, "chat_context_query", text="port 9043")
        refused["query"] = await refusal(
            client, "chat_context_query", text="port", conversation="alpha"
        )
        unknown = await refusal(client, "lcm_grep", pattern="port", conversation="gamma")
    assert {h["conversation_id"] for h in grep["hits"]} <= {beta["conv"]}
    assert regex["hits"] == [] and files["hits"] == []
    assert own["hits"][0]["id"] == beta["msg"]
    for what, text in refused.items():
        assert "9043" not in text and PORT_FACT not in text, what
    # Naming alpha reads exactly like naming a conversation that does not exist.
    assert refused["grep"].replace("'alpha'", "'gamma'") == unknown
    assert answer["conversation_id"] == beta["conv"] and "9043" not in answer["answer"]
    assert alpha["msg"] not in answer["citations"]
    assert [r["session_id"] for r in listed["conversations"]] == ["beta"]
    assert frames["frames"] == [] and frames["executions"] == []


async def test_chat_context_query_returns_tool_results_by_execution_id(engine: Engine) -> None:
    engine.ingest(
        "alpha",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_deploy",
                    "type": "function",
                    "function": {"name": "deploy", "arguments": '{"env": "staging"}'},
                }
            ],
        },
    )
    engine.ingest(
        "alpha",
        {"role": "tool", "tool_call_id": "call_deploy", "content": "deploy failed: quota"},
    )
    async with connected(engine) as client:
        found = await call(client, "chat_context_query", execution_id="call_deploy")
        failed = await call(client, "chat_context_query", text="quota", kind="executions")
        bad = await refusal(client, "chat_context_query", status="broken")
    (execution,) = found["executions"]
    assert execution["tool_name"] == "deploy" and execution["input"] == '{"env":"staging"}'
    assert execution["output"] == "deploy failed: quota"
    assert {f["role"] for f in found["frames"]} == {"assistant", "tool"}
    assert [e["execution_id"] for e in failed["executions"]] == ["call_deploy"]
    assert "status" in bad


async def test_a_grant_server_expands_inside_its_grant_and_refuses_the_rest(
    engine: Engine,
) -> None:
    alpha, beta = _ids(engine, "alpha"), _ids(engine, "beta")
    grant = engine.create_grant("alpha", max_depth=2, token_cap=5_000)
    async with connected(engine, grant_id=grant.grant_id) as client:
        expanded = await call(
            client, "lcm_expand", summary_ids=[alpha["sum"]], include_messages=True
        )
        outside = await refusal(client, "lcm_expand", summary_ids=[beta["sum"]])
        too_deep = await refusal(client, "lcm_expand", summary_ids=[alpha["sum"]], max_depth=3)
        no_ids = await refusal(client, "lcm_expand", summary_ids=[])
        grep = await call(client, "lcm_grep", pattern="vault passphrase")
        describe = await refusal(client, "lcm_describe", id=beta["msg"])
        listed = await call(client, "lcm_list_conversations")
        engine.revoke_grant(grant.grant_id)
        revoked = {
            tool: await refusal(client, tool, **args)
            for tool, args in (
                ("lcm_grep", {"pattern": "port"}),
                ("lcm_describe", {"id": alpha["msg"]}),
                ("lcm_expand", {"summary_ids": [alpha["sum"]]}),
                ("lcm_list_conversations", {}),
            )
        }
    ids = [n["id"] for n in expanded["nodes"]]
    assert ids[0] == alpha["sum"] and alpha["msg"] in ids
    assert any(n["content"] == PORT_FACT for n in expanded["nodes"])
    assert expanded["tokens"] > 0
    assert "outside this grant" in outside
    assert "2 level(s)" in too_deep
    assert "summary_ids" in no_ids
    assert all(h["conversation_id"] == alpha["conv"] for h in grep["hits"])
    assert VAULT_FACT not in json.dumps(grep) and VAULT_FACT not in describe
    assert [r["session_id"] for r in listed["conversations"]] == ["alpha"]
    for tool, text in revoked.items():
        assert "unknown, expired or revoked" in text, tool


async def test_build_server_refuses_a_dead_grant_an_unknown_conversation_or_both(
    engine: Engine,
) -> None:
    grant = engine.create_grant("alpha")
    engine.revoke_grant(grant.grant_id)
    with pytest.raises(GrantError, match="unknown, expired or revoked"):
        build_server(engine, grant_id=grant.grant_id)
    with pytest.raises(NotFoundError):
        build_server(engine, conversation="gamma")
    with pytest.raises(ValueError, match="not both"):
        build_server(engine, conversation="alpha", grant_id="grant_x")
    pinned = build_server(engine, conversation="1")  # a numeric string is an id first
    async with Client(pinned) as client:
        assert "conversation 1 " in (client.instructions or "")


# --- the command line ------------------------------------------------------------------------


def test_grant_makes_and_revokes_a_grant_for_lossless_mcp(run_cli, engine: Engine) -> None:  # type: ignore[no-untyped-def]
    db = str(engine.store.path)
    made = run_cli("--db", db, "grant", "alpha", "--ttl", "60", "--cap", "900", "--depth", "1")
    assert made.code == 0, made
    grant_id = made.out.strip()
    assert grant_id.startswith("grant_") and "depth 1" in made.err
    shown = json.loads(run_cli("--db", db, "grant", "beta", "--only", "--json").out)
    assert shown["token_cap"] == SMALL.max_expand_tokens
    assert shown["conversation_ids"] == [engine.conversation("beta").conversation_id]
    assert run_cli("--db", db, "grant", "--revoke", grant_id).code == 0
    dead = run_cli("--db", db, "mcp", "--grant", grant_id)
    assert dead.code == 7 and "unknown, expired or revoked" in dead.err
    assert run_cli("--db", db, "grant").code == 2
    both = run_cli("--db", db, "mcp", "--grant", grant_id, "--conversation", "alpha")
    assert both.code == 2 and "not both" in both.err


def test_mcp_without_the_sdk_says_how_to_install_it(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    for name in list(sys.modules):
        if name.partition(".")[0] in ("mcp", "mcp_types"):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "lossless.mcp_server")
    res = run_cli("--db", str(tmp_path / "x.db"), "mcp")
    assert res.code == 2, res
    assert "pip install 'lossless[mcp]'" in res.err
    assert INSTALL_HINT.split(":")[0] in res.err
    assert res.out == ""


def _lossless_command() -> tuple[str, list[str]]:
    """The installed console script, or the same entry point through this interpreter."""
    exe = Path(sys.executable).with_name("lossless")
    if exe.exists():
        return str(exe), []
    return sys.executable, ["-c", "from lossless.cli.main import main; main()"]


def _stored(tmp_path: Path) -> Path:
    db = tmp_path / "served.db"
    with Engine.open(db, config=Config()) as eng:
        eng.ingest("sess-1", {"role": "user", "content": "Deploy staging on port 9043 tonight."})
        eng.ingest("sess-1", {"role": "assistant", "content": "Noted: staging deploy tonight."})
    return db


def _environment(tmp_path: Path) -> dict[str, str]:
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
    }


async def test_lossless_mcp_serves_grep_over_stdio(tmp_path: Path) -> None:
    db = _stored(tmp_path)
    command, prefix = _lossless_command()
    params = StdioServerParameters(
        command=command, args=[*prefix, "mcp", "--db", str(db)], env=_environment(tmp_path)
    )
    with (tmp_path / "server.err").open("w") as errlog, anyio.fail_after(30):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            found = await call(client, "lcm_grep", pattern="which port for staging?")
    assert names == STORE_TOOLS, (tmp_path / "server.err").read_text()
    assert found["hits"][0]["snippet"] == "Deploy staging on port 9043 tonight."
    assert found["hits"][0]["id"] == "msg#1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_lossless_mcp_http_serves_streamable_http_on_localhost(tmp_path: Path) -> None:
    db = _stored(tmp_path)
    command, prefix = _lossless_command()
    port = _free_port()
    errlog = tmp_path / "http.err"
    with errlog.open("w") as err:
        proc = subprocess.Popen(
            [command, *prefix, "--db", str(db), "mcp", "--http", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **_environment(tmp_path)},
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, errlog.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, errlog.read_text()
                await anyio.sleep(0.1)
        with anyio.fail_after(20):
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = {t.name for t in (await client.list_tools()).tools}
                found = await call(client, "lcm_grep", pattern="staging port")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert names == STORE_TOOLS
    assert found["hits"][0]["id"] == "msg#1"
    assert f"http://127.0.0.1:{port}/mcp" in errlog.read_text()


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def test_http_with_a_token_refuses_requests_without_it(tmp_path: Path) -> None:
    db = _stored(tmp_path)
    command, prefix = _lossless_command()
    port = _free_port()
    token = "s3cret-token-for-the-test-0123"
    errlog = tmp_path / "http.err"
    with errlog.open("w") as err:
        proc = subprocess.Popen(
            [command, *prefix, "--db", str(db), "mcp", "--http", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **_environment(tmp_path), "LOSSLESS_MCP_TOKEN": token},
        )
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    headers = {"accept": "application/json, text/event-stream"}
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, errlog.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, errlog.read_text()
                await anyio.sleep(0.1)
        anonymous = await anyio.to_thread.run_sync(_post, url, initialize, headers)
        wrong = await anyio.to_thread.run_sync(
            _post, url, initialize, {**headers, "authorization": "Bearer nope"}
        )
        right = await anyio.to_thread.run_sync(
            _post, url, initialize, {**headers, "authorization": f"Bearer {token}"}
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert anonymous[0] == 401 and wrong[0] == 401
    assert "bearer token" in anonymous[1] and "staging" not in anonymous[1]
    assert right[0] == 200, right[1]
    assert "lossless" in right[1]  # the server's initialize answer


def test_serving_off_loopback_needs_a_long_enough_token(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = str(_stored(tmp_path))
    exposed = run_cli("--db", db, "mcp", "--http", "--host", "0.0.0.0")
    assert exposed.code == 2 and "give --token" in exposed.err
    short = run_cli("--db", db, "mcp", "--http", "--token", "abc")
    assert short.code == 2 and "too short" in short.err


#: Lines an MCP client might send that the SDK alone drops without an answer, with the id the
#: answer must carry and the JSON-RPC code.
MALFORMED = [
    (b"{not json", None, -32700),
    (b"[]", None, -32600),
    (b"null", None, -32600),
    (b"\xff\xfe binary", None, -32700),
    (b'{"jsonrpc": "1.0", "id": 5, "method": "tools/list"}', 5, -32600),
    (b'{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": [1]}', 6, -32602),
    (b'{"jsonrpc": "2.0", "id": "seven"}', "seven", -32600),
    (b'{"jsonrpc": "2.0", "id": 8, "method": 3}', 8, -32600),
]


def test_malformed_json_rpc_on_stdio_gets_an_error_answer_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    db = _stored(tmp_path)
    command, prefix = _lossless_command()
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    lines = [json.dumps(initialize).encode()]
    lines.append(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    lines += [line for line, _, _ in MALFORMED]
    lines.append(b"x" * (17 * 1024 * 1024))  # over the size limit
    lines.append(b'{"jsonrpc": "2.0", "id": 99, "method": "tools/list"}')
    with subprocess.Popen(
        [command, *prefix, "mcp", "--db", str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **_environment(tmp_path)},
    ) as server:
        out, err = server.communicate(b"\n".join(lines) + b"\n", timeout=60)
    answers = [json.loads(line) for line in out.splitlines()]
    errors = [a for a in answers if "error" in a]
    expected = [(rid, code) for _, rid, code in MALFORMED] + [(None, -32600)]
    assert sorted(((e["id"], e["error"]["code"]) for e in errors), key=repr) == sorted(
        expected, key=repr
    ), err.decode()
    for e in errors:
        assert len(e["error"]["message"]) > 20  # says what was wrong
    assert any("over 16 MB" in e["error"]["message"] for e in errors)
    [listed] = [a for a in answers if a.get("id") == 99]
    assert {t["name"] for t in listed["result"]["tools"]} == STORE_TOOLS
    assert b"Traceback" not in err
