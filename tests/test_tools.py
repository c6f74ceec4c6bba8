"""The recall tools are declared once (``lossless.retrieval.tools``): every shell's tools are
made from the declaration, and whatever restates a parameter (the engine's methods, the CLI)
agrees with it. A shell that restates a default, a limit or a choice of its own fails here."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import click
import pytest

from lossless import Config, Engine
from lossless.cli.main import cli
from lossless.retrieval.subagent import EXPAND_TOOL
from lossless.retrieval.tools import REQUIRED, TOOLS

#: Engine method → the tool it serves (parameters of the same name must agree).
ENGINE_METHODS = {
    "grep": "lcm_grep",
    "describe": "lcm_describe",
    "expand": "lcm_expand",
    "expand_query": "lcm_expand_query",
    "chat_context_query": "chat_context_query",
}
#: CLI command → the tool it runs, and its options named otherwise than the parameter.
CLI_COMMANDS = {
    "grep": ("lcm_grep", {}),
    "describe": ("lcm_describe", {"token_cap": "cap"}),
    "expand": (
        "lcm_expand",
        {"max_depth": "depth", "token_cap": "cap", "include_messages": "messages"},
    ),
    "query": (
        "chat_context_query",
        {"tool_name": "tool", "execution_id": "execution"},
    ),
}


def test_the_engine_methods_take_the_declared_defaults() -> None:
    for method, name in ENGINE_METHODS.items():
        declared = TOOLS[name]
        signature = inspect.signature(getattr(Engine, method))
        shared = [p for p in declared.params if p.name in signature.parameters]
        assert shared, method
        for param in shared:
            default = signature.parameters[param.name].default
            expected = param.default if not param.required else inspect.Parameter.empty
            if param.name == "conversation":
                continue  # the engine's is a reference the caller resolves
            assert default == expected, f"Engine.{method}({param.name}={default!r})"


def test_the_cli_options_are_the_declared_parameters() -> None:
    for command, (name, renamed) in CLI_COMMANDS.items():
        loaded = cli.get_command(click.Context(cli), command)
        assert loaded is not None, command
        options = {p.name: p for p in loaded.params if isinstance(p, click.Option)}
        declared = TOOLS[name]
        for param in declared.params:
            option = options.get(param.name)
            if option is None:
                continue  # bound by the command itself (conversation, ids, the question)
            assert f"--{renamed.get(param.name, param.name).replace('_', '-')}" in " ".join(
                option.opts
            )
            if not param.required and param.default is not None:
                assert option.default == param.default, f"{command} --{param.name}"
            if param.choices:
                assert isinstance(option.type, click.Choice)
                assert tuple(option.type.choices) == param.choices
            if param.minimum is not None or param.maximum is not None:
                assert isinstance(option.type, click.IntRange)
                assert (option.type.min, option.type.max) == (param.minimum, param.maximum)


def test_the_sub_agents_expand_tool_is_the_declaration() -> None:
    assert EXPAND_TOOL.name == "lcm_expand"
    assert EXPAND_TOOL.parameters == TOOLS["lcm_expand"].json_schema()
    assert EXPAND_TOOL.description == TOOLS["lcm_expand"].description


def _same(schema: dict[str, Any], declared: dict[str, Any]) -> None:
    """A generated JSON schema says what the declaration says: defaults, choices, limits."""
    for key in ("default", "enum", "minimum", "maximum", "minItems"):
        if key in declared:
            found = schema.get(key)
            if found is None:  # an Optional: pydantic nests it in anyOf
                for option in schema.get("anyOf", []):
                    found = option.get(key, found)
            assert found == declared[key], (key, schema, declared)
    assert schema.get("description") == declared["description"]


def test_the_mcp_servers_tools_are_the_declaration(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from mcp.client.client import Client

    from lossless.mcp_server import TOOLSETS, build_server

    engine = Engine.open(tmp_path / "s.db", config=Config())
    engine.ingest("s", {"role": "user", "content": "hello"})
    grant = engine.create_grant("s")

    async def listed(server: Any) -> dict[str, Any]:
        async with Client(server) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    try:
        for mode, server in (
            ("store", build_server(engine)),
            ("grant", build_server(engine, grant_id=grant.grant_id)),
        ):
            tools = asyncio.run(listed(server))
            assert set(tools) == set(TOOLSETS[mode])
            for name, found in tools.items():
                declared = TOOLS[name]
                assert found.description == declared.description
                schema = found.input_schema
                assert set(schema["properties"]) == {p.name for p in declared.params}
                assert set(schema.get("required", [])) == {
                    p.name for p in declared.params if p.required
                }
                for param in declared.params:
                    _same(schema["properties"][param.name], param.json_schema())
    finally:
        engine.close()


def test_the_agents_sdk_tools_are_the_declaration_without_the_conversation(
    tmp_path: Path,
) -> None:
    pytest.importorskip("agents")
    from lossless.integrations.openai_agents import LosslessSession, recall_tools

    engine = Engine.open(tmp_path / "a.db", config=Config())
    try:
        for made in recall_tools(LosslessSession("s", engine)):
            declared = TOOLS[made.name]
            assert made.description == declared.description
            schema = made.params_json_schema
            kept = [p for p in declared.params if p.name != "conversation"]
            assert set(schema["properties"]) == {p.name for p in kept}
            for param in kept:
                _same(schema["properties"][param.name], param.json_schema())
                assert (param.name in schema.get("required", [])) == (param.default is REQUIRED)
    finally:
        engine.close()


def test_a_calls_arguments_are_checked_against_the_declaration() -> None:
    from lossless.errors import ArgumentError

    grep = TOOLS["lcm_grep"]
    completed = grep.check({"pattern": "deploy"})
    assert completed["pattern"] == "deploy"
    assert completed["limit"] == grep.param("limit").default
    assert completed["sort"] == grep.param("sort").default
    refusals = {
        "missing": ({}, "needs pattern"),
        "unknown": ({"pattern": "x", "limt": 5}, "no parameter 'limt'"),
        "type": ({"pattern": 3}, "pattern must be a string"),
        "bool is not an integer": ({"pattern": "x", "limit": True}, "limit must be an integer"),
        "limit": ({"pattern": "x", "limit": 500}, "from 1 to 200"),
        "choice": ({"pattern": "x", "sort": "newest"}, "one of relevance, recency"),
        "not an object": (["x"], "must be an object"),
    }
    for arguments, said in refusals.values():
        with pytest.raises(ArgumentError, match=said):
            grep.check(arguments)
    expand = TOOLS["lcm_expand"]
    with pytest.raises(ArgumentError, match="at least 1 item"):
        expand.check({"summary_ids": []})
    with pytest.raises(ArgumentError, match="a list of strings"):
        expand.check({"summary_ids": "sum_0123456789abcdef"})
    assert TOOLS["lcm_describe"].check({"id": "msg#1", "token_cap": None})["token_cap"] is None
    assert "conversation" not in grep.check({"pattern": "x"}, omit=("conversation",))


def test_the_openclaw_plugins_tools_are_the_declaration() -> None:
    import json

    from lossless.toolbox import SESSION_TOOLS, tool_schemas

    plugin = Path(__file__).resolve().parents[1] / "hosts" / "openclaw"
    shipped = json.loads((plugin / "tools.json").read_text())
    assert shipped == tool_schemas(SESSION_TOOLS, pinned=True), "run make openclaw-tools"
    manifest = json.loads((plugin / "openclaw.plugin.json").read_text())
    assert manifest["contracts"]["tools"] == [t["name"] for t in shipped]
