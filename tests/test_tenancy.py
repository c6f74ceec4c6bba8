"""Namespaces of ``lossless serve``: a token's holder reaches its own namespace and nothing
else, whatever it asks. Random namespaces, tokens and calls (every method, every recall
tool), on both back ends, through the server's own dispatcher with callers made from real
tokens; then the same over HTTP with the tokens as a client sends them."""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import itertools
import json
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lossless import Config, Engine
from lossless.access import OWNER, Caller
from lossless.serve.client import ServeClient, ServeError
from lossless.serve.server import Dispatcher
from test_serve_http import _serve

CONFIG = Config(
    leaf_chunk_tokens=120,
    fresh_tail_count=2,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
    background_compaction=False,
)
_names = itertools.count()


@dataclass
class Namespace:
    """A namespace seeded for one example: its sessions, ids and words no other has."""

    name: str
    marker: str
    sessions: list[str]
    conversation_ids: list[int] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    summary_ids: list[str] = field(default_factory=list)
    grant_id: str | None = None


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    with Engine.open(db, config=CONFIG) as eng:
        yield eng


def rpc(dispatcher: Dispatcher, caller: Caller, method: str, **params: Any) -> dict[str, Any]:
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answered = asyncio.run(dispatcher.answer(json.dumps(request), caller))
    assert answered is not None
    return json.loads(answered)


def turns(marker: str, session: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{marker} {session} note {i}: the {marker} deploy key for {session}"
            f" is {marker}{i} and the rollout waits for the {marker} canary.",
        }
        for i in range(n)
    ]


def holder(engine: Engine, namespace: str, role: str, sessions: str | None = None) -> Caller:
    """The caller a new token of *namespace* and *role* stands for, checked as a server does."""
    token, _ = engine.create_token(
        namespace=namespace, role=role, sessions=sessions, actor="local:test"
    )
    caller = engine.token_check().caller(token)
    assert caller is not None and caller.namespace == namespace
    return caller


def seed(engine: Engine, dispatcher: Dispatcher, shared_sessions: list[str]) -> Namespace:
    """A namespace written through a write token of its own: its sessions (the shared names
    other namespaces use too), compacted, with the ids it has and a grant of its own."""
    n = next(_names)
    name = f"ns{n}{secrets.token_hex(2)}"
    space = Namespace(name, f"mk{name}", list(shared_sessions))
    writer = holder(engine, name, "write")
    for session in space.sessions:
        done = rpc(
            dispatcher,
            writer,
            "after_turn",
            session_id=session,
            messages=turns(space.marker, session, 10),
            token_budget=150,
        )
        assert "result" in done, done
        space.conversation_ids.append(done["result"]["conversation_id"])
        space.message_ids += done["result"]["message_ids"]
    for cid in space.conversation_ids:
        space.summary_ids += [i.summary_id for i in engine.context(cid) if i.summary_id]
    assert space.summary_ids, "the seeded sessions compacted"
    space.grant_id = engine.create_grant(space.conversation_ids[0]).grant_id
    return space


def snapshot(engine: Engine, space: Namespace) -> list[Any]:
    """What the owner sees of a namespace: every message and the active context."""
    return [
        (
            [m.content for m in engine.messages(cid)],
            [(i.item_type, i.message_id, i.summary_id) for i in engine.context(cid)],
        )
        for cid in space.conversation_ids
    ]


# --- the calls a token's holder may make ---------------------------------------------------


def calls(own: Namespace, other: Namespace, session: str) -> list[tuple[str, dict[str, Any]]]:
    """Every method and recall tool, aimed at the other namespace's sessions, ids and words
    (and, through the shared session names, at the caller's own)."""
    conv = other.conversation_ids[0]
    msg = other.message_ids[0]
    summary = other.summary_ids[0]
    word = other.marker
    tools: list[tuple[str, dict[str, Any]]] = [
        ("lcm_grep", {"pattern": word}),
        ("lcm_grep", {"pattern": word, "conversation": conv}),
        ("lcm_grep", {"pattern": word, "mode": "regex"}),
        ("lcm_describe", {"id": summary}),
        ("lcm_describe", {"id": msg}),
        ("lcm_expand_query", {"prompt": f"what is the {word} key?", "summary_ids": [summary]}),
        ("lcm_expand_query", {"prompt": f"what is the {word} key?", "conversation": conv}),
        ("lcm_list_conversations", {"include_archived": True}),
        ("summarize_session", {"conversation": conv}),
        ("get_history", {"conversation": conv}),
        ("get_history", {"conversation": str(conv)}),
        ("chat_context_query", {"text": word}),
        ("chat_context_query", {"conversation": conv}),
    ]
    return [
        ("bootstrap", {"session_id": session}),
        ("ingest", {"session_id": session, "message": {"role": "user", "content": "x " + word}}),
        ("ingest_batch", {"session_id": session, "messages": turns(own.marker, session, 2)}),
        ("after_turn", {"session_id": session, "messages": turns(own.marker, session, 2)}),
        ("assemble", {"session_id": session, "token_budget": 4000, "prompt": word}),
        ("compact", {"session_id": session}),
        ("compact_for_host", {"session_id": session, "window": 2000}),
        ("cancel_compaction", {"session_id": session}),
        ("grep", {"pattern": word}),
        ("grep", {"pattern": word, "conversation": conv}),
        ("grep", {"pattern": word, "conversation": str(conv)}),
        ("describe", {"id": summary}),
        ("describe", {"id": msg}),
        ("describe", {"id": summary, "conversation": conv}),
        ("expand", {"grant_id": other.grant_id, "summary_ids": [summary]}),
        ("expand", {"grant_id": own.grant_id, "summary_ids": [summary]}),
        ("expand_query", {"prompt": f"what is the {word} key?", "summary_ids": [summary]}),
        ("expand_query", {"prompt": "what is the key?", "conversation": conv}),
        ("session_summary", {"conversation": conv}),
        ("resume", {"session_id": session}),
        ("status", {"session_id": session}),
        ("status", {}),
        ("doctor", {}),
        ("tools", {"session_id": session}),
        ("wait_for_compaction", {"timeout": 0}),
        ("audit", {}),
        ("audit", {"namespace": other.name}),
        *(
            ("call_tool", {"name": name, "arguments": arguments})
            for name, arguments in tools
            if name != "lcm_expand"
        ),
        *(
            ("call_tool", {"name": name, "arguments": arguments, "session_id": session})
            for name, arguments in tools
            if "conversation" not in arguments
        ),
    ]


#: What an id of the other namespace is compared with: an id of the same shape no
#: conversation has, whose refusal must read the same.
def unknown_like(value: Any) -> Any:
    if isinstance(value, int):
        return 987_654_321
    if isinstance(value, str) and value.startswith("sum_"):
        return "sum_" + "f" * 16
    if isinstance(value, str) and value.startswith("msg#"):
        return "msg#987654321"
    if isinstance(value, str) and value.isdigit():
        return "987654321"
    return value


def swapped(params: dict[str, Any], other: Namespace) -> tuple[dict[str, Any], list[str]]:
    """*params* with each of the other namespace's ids replaced by an unknown one, and the
    replaced ids (as text)."""
    theirs = {
        *map(str, other.conversation_ids),
        *other.message_ids,
        *other.summary_ids,
    }
    replaced: list[str] = []

    def swap(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        if str(value) in theirs and not isinstance(value, bool):
            replaced.append(str(value))
            return unknown_like(value)
        return value

    return swap(params), replaced


def normal(text: str, ids: list[str]) -> str:
    """*text* with the ids swapped and their unknown stand-ins alike, and numbers as N."""
    for i in sorted({*ids, "msg#987654321", "sum_" + "f" * 16, "987654321"}, key=len)[::-1]:
        text = text.replace(i, "ID")
    return re.sub(r"\d+(\.\d+)?", "N", text)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    role=st.sampled_from(["read", "write", "admin"]),
    glob=st.sampled_from([None, "s*", "main", "nothing-*"]),
    shared=st.lists(
        st.sampled_from(["main", "s1", "12", "7"]), min_size=1, max_size=2, unique=True
    ),
    picks=st.lists(st.integers(0, 10_000), min_size=12, max_size=24),
)
def test_no_token_reads_or_writes_beyond_its_namespace(
    engine: Engine, role: str, glob: str | None, shared: list[str], picks: list[int]
) -> None:
    dispatcher = Dispatcher(engine, audit_writes=True)
    try:
        own = seed(engine, dispatcher, shared)
        other = seed(engine, dispatcher, shared)
        caller = holder(engine, own.name, role, sessions=glob)
        before = snapshot(engine, other)
        menu = [(m, p) for s in shared for m, p in calls(own, other, s)]
        for pick in picks:
            method, params = menu[pick % len(menu)]
            answer = rpc(dispatcher, caller, method, **params)
            sent = json.dumps(params)
            said = json.dumps(answer)
            # 1. nothing of the other namespace: its words, its name, its stored session ids
            for secret in (other.marker, other.name):
                assert secret not in said or secret in sent, (method, params, answer)
            assert "\\u001f" not in said, (method, params, answer)
            assert '"score"' not in said, (method, answer)  # scores weigh the whole store
            # 2. an id of the other namespace reads as an id nobody has
            if "error" in answer:
                assert answer["error"]["code"] != -32603, answer  # never an internal error
                probe, replaced = swapped(params, other)
                if replaced:
                    unknown = rpc(dispatcher, caller, method, **probe)
                    assert "error" in unknown, (method, probe, unknown)
                    assert normal(answer["error"]["message"], replaced) == normal(
                        unknown["error"]["message"], replaced
                    ), (method, params, answer, unknown)
        # 3. the other namespace is as it was
        assert snapshot(engine, other) == before
    finally:
        dispatcher.close()


def test_the_same_session_name_in_two_namespaces_is_two_conversations(engine: Engine) -> None:
    dispatcher = Dispatcher(engine, audit_writes=True)
    try:
        a = seed(engine, dispatcher, ["main"])
        b = seed(engine, dispatcher, ["main"])
        assert a.conversation_ids != b.conversation_ids
        reader = holder(engine, a.name, "read")
        made = rpc(dispatcher, reader, "assemble", session_id="main", token_budget=4000)
        text = json.dumps(made["result"]["messages"])
        assert a.marker in text and b.marker not in text
        listed = rpc(dispatcher, reader, "call_tool", name="lcm_list_conversations", arguments={})[
            "result"
        ]["conversations"]
        assert [c["session_id"] for c in listed] == ["main"]
        assert [c["conversation_id"] for c in listed] == a.conversation_ids
        # the owner sees both, each under its namespace
        every = {c.conversation.session_id for c in engine.conversations()}
        assert {f"{a.name}\x1fmain", f"{b.name}\x1fmain"} <= every
    finally:
        dispatcher.close()


def test_roles_and_session_globs_are_enforced_and_refusals_are_audited(engine: Engine) -> None:
    dispatcher = Dispatcher(engine, audit_writes=True)
    try:
        space = seed(engine, dispatcher, ["bot-1", "human"])
        reader = holder(engine, space.name, "read", sessions="bot-*")
        refused = rpc(
            dispatcher,
            reader,
            "ingest",
            session_id="bot-1",
            message={"role": "user", "content": "hi"},
        )
        assert refused["error"]["data"]["type"] == "AccessError"
        assert "needs write" in refused["error"]["message"]
        # a session beyond the glob is unknown to it, like any other
        hidden = rpc(dispatcher, reader, "assemble", session_id="human", token_budget=4000)
        assert hidden["error"]["code"] == -32001
        listed = rpc(dispatcher, reader, "call_tool", name="lcm_list_conversations", arguments={})
        assert [c["session_id"] for c in listed["result"]["conversations"]] == ["bot-1"]
        assert rpc(dispatcher, reader, "audit")["error"]["data"]["type"] == "AccessError"
        assert rpc(dispatcher, reader, "doctor")["error"]["data"]["type"] == "AccessError"
        lines = engine.audit_log(namespace=space.name)
        refusal = next(x for x in lines if x.actor == reader.actor)
        assert (refusal.action, refusal.outcome, refusal.session_id) == (
            "ingest",
            "AccessError",
            "bot-1",
        )
        writes = [x for x in lines if x.action == "after_turn"]
        assert len(writes) == 2 and all(x.outcome == "ok" for x in writes)
        assert all(space.marker not in (x.detail or "") for x in lines)  # no message text
        # an admin token of the namespace reads its namespace's lines, not another's
        admin = holder(engine, space.name, "admin")
        other = seed(engine, dispatcher, ["main"])
        seen = rpc(dispatcher, admin, "audit", namespace=other.name)["result"]["entries"]
        assert seen and {e["namespace"] for e in seen} == {space.name}
        assert OWNER.is_owner
        owners = rpc(dispatcher, OWNER, "audit", namespace=other.name)["result"]["entries"]
        assert {e["namespace"] for e in owners} == {other.name}
    finally:
        dispatcher.close()


def test_revoked_expired_and_forged_tokens_are_refused_alike(engine: Engine) -> None:
    check = engine.token_check()
    token, row = engine.create_token(namespace="team", role="read", actor="local:test")
    assert check.caller(token) is not None
    stored = engine.tokens("team")
    assert [t.token_id for t in stored] == [row.token_id]
    assert token.partition(".")[2] not in json.dumps([t.to_dict() for t in stored])
    assert stored[0].secret_hash.startswith("$argon2id$")
    forged = row.token_id + "." + secrets.token_urlsafe(32)
    assert check.caller(forged) is None
    assert check.caller("tok_000000000000.x") is None
    engine.revoke_token(row.token_id, actor="local:test")
    assert check.caller(token) is None  # at once, though it was verified before
    short, _ = engine.create_token(
        namespace="team", role="read", expires_at="2000-01-01T00:00:00.000000Z", actor="t"
    )
    assert check.caller(short) is None
    actions = [(x.action, x.detail) for x in engine.audit_log(namespace="team")]
    assert ("token_revoke", row.token_id) in actions


# --- over HTTP, as clients send their tokens ------------------------------------------------


def lossless(db: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "lossless", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_tokens_made_with_the_cli_keep_two_teams_apart_over_http(db: str, tmp_path: Path) -> None:
    made = {
        team: json.loads(lossless(db, "tokens", "create", "--namespace", team, "--json"))
        for team in ("team-a", "team-b")
    }
    served = _serve(db, tmp_path, "--http", "127.0.0.1:0")
    other = _serve(db, tmp_path / "second", "--http", "127.0.0.1:0")  # a second server
    try:
        a = ServeClient.http(served.url, made["team-a"]["token"])
        b = ServeClient.http(served.url, made["team-b"]["token"])
        b_elsewhere = ServeClient.http(other.url, made["team-b"]["token"])
        a.after_turn("main", turns("alphaword", "main", 4), token_budget=4000)
        b.after_turn("main", turns("bravoword", "main", 4), token_budget=4000)
        assert "alphaword" in json.dumps(a.assemble("main", token_budget=4000)["messages"])
        assert "alphaword" not in json.dumps(b.assemble("main", token_budget=4000)["messages"])
        seen = json.dumps(b_elsewhere.assemble("main", token_budget=4000)["messages"])
        assert "bravoword" in seen and "alphaword" not in seen  # the same tokens, both servers
        assert b.grep("alphaword")["hits"] == []
        assert [h["conversation_id"] for h in a.grep("alphaword")["hits"]]
        # the owner's token still reaches everything
        owner = ServeClient.http(served.url, served.token)
        assert len(owner.grep("alphaword OR bravoword")["hits"]) >= 2
        # a revoked token is refused from its next request, like a forged one
        lossless(db, "tokens", "revoke", made["team-b"]["token_id"])
        with pytest.raises(ServeError) as revoked:
            b.status()
        with pytest.raises(ServeError) as revoked_elsewhere:
            b_elsewhere.status()
        assert revoked_elsewhere.value.code == 401
        forged = ServeClient.http(served.url, made["team-a"]["token_id"] + ".forged")
        with pytest.raises(ServeError) as refused:
            forged.status()
        assert revoked.value.code == refused.value.code == 401
    finally:
        served.stop()
        other.stop()
    audit = json.loads(lossless(db, "audit", "--json", "--limit", "100"))
    by_action: dict[str, list[dict[str, Any]]] = {}
    for line in audit:
        by_action.setdefault(line["action"], []).append(line)
    assert {x["namespace"] for x in by_action["after_turn"]} == {"team-a", "team-b"}
    assert {x["actor"] for x in by_action["token_create"]} == {f"local:{getpass.getuser()}"}
    failed = by_action["authenticate"]
    assert {x["actor"] for x in failed} == {made["team-b"]["token_id"], made["team-a"]["token_id"]}
    text = json.dumps(audit)
    assert "alphaword" not in text and "bravoword" not in text
    assert made["team-a"]["token"].partition(".")[2] not in text
    listed = lossless(db, "tokens", "list")
    assert "revoked" in listed and made["team-b"]["token"].partition(".")[2] not in listed


def test_a_default_namespace_token_cannot_name_a_stored_id(engine: Engine) -> None:
    """The owner's own conversations are the namespace ``default``: its token's session ids
    are stored as they are, so a stored id of another namespace must not pass through."""
    dispatcher = Dispatcher(engine, audit_writes=True)
    try:
        team = seed(engine, dispatcher, ["main"])
        owners_own = holder(engine, "default", "write")
        stored = f"{team.name}\x1fmain"
        before = snapshot(engine, team)
        for method, params in (
            ("assemble", {"session_id": stored, "token_budget": 4000}),
            ("ingest", {"session_id": stored, "message": {"role": "user", "content": "in"}}),
            ("grep", {"pattern": team.marker, "conversation": stored}),
        ):
            answer = rpc(dispatcher, owners_own, method, **params)
            assert answer["error"]["code"] == -32602, answer
            assert "control characters" in answer["error"]["message"]
        assert snapshot(engine, team) == before
    finally:
        dispatcher.close()


def test_a_token_reads_only_what_is_there_and_hears_only_of_its_own_runs(
    engine: Engine, tmp_path: Path
) -> None:
    dispatcher = Dispatcher(engine, audit_writes=True)
    try:
        space = seed(engine, dispatcher, ["main"])
        reader = holder(engine, space.name, "read")
        # a read of a session the namespace lacks makes nothing (the owner's would)
        answer = rpc(
            dispatcher, reader, "assemble", session_id="new", token_budget=900, window=4000
        )
        assert answer["error"]["code"] == -32001
        assert engine.find_conversation(f"{space.name}\x1fnew") is None
        # a new session summary is a write (it calls the model)
        refused = rpc(dispatcher, reader, "session_summary", conversation="main")
        assert refused["error"]["data"]["type"] == "AccessError"
        via_tool = rpc(
            dispatcher,
            reader,
            "call_tool",
            name="summarize_session",
            arguments={},
            session_id="main",
        )
        assert via_tool["error"]["data"]["type"] == "AccessError"
        # a transcript on the server's machine is the owner's to name
        transcript = tmp_path / "t.jsonl"
        transcript.write_text('{"role": "user", "content": "hello"}\n')
        writer = holder(engine, space.name, "write")
        boot = rpc(dispatcher, writer, "bootstrap", session_id="b", transcript=str(transcript))
        assert boot["error"]["data"]["type"] == "AccessError"
    finally:
        dispatcher.close()


def test_a_tokens_wait_leaves_the_owners_background_runs_alone(db: str) -> None:
    config = dataclasses.replace(CONFIG, background_compaction=True)
    with Engine.open(db, config=config) as engine:
        dispatcher = Dispatcher(engine, audit_writes=True)
        try:
            reader = holder(engine, "team", "read")
            turned = rpc(
                dispatcher,
                OWNER,
                "after_turn",
                session_id="o",
                messages=turns("ownword", "o", 12),
                token_budget=150,
            )
            assert turned["result"]["deferred"], turned  # compaction queued in the background
            seen = rpc(dispatcher, reader, "wait_for_compaction", timeout=5)
            assert seen["result"]["finished"] == []
            owners = rpc(dispatcher, OWNER, "wait_for_compaction", timeout=60)
            assert [r["conversation_id"] for r in owners["result"]["finished"]] == [
                turned["result"]["conversation_id"]
            ]
        finally:
            dispatcher.close()


def test_a_forget_and_an_export_by_the_owner_are_audited_under_each_namespace(db: str) -> None:
    with Engine.open(db, config=CONFIG) as engine:
        engine.ingest("team-a\x1fmain", {"role": "user", "content": "alpha plan zqalpha"})
        engine.ingest("main", {"role": "user", "content": "owner plan zqalpha"})
    lossless(db, "forget", "--matching", "zqalpha", "--yes")
    lossless(db, "export", "1")
    lines = json.loads(lossless(db, "audit", "--json"))
    forgets = {x["namespace"]: x for x in lines if x["action"] == "forget"}
    assert set(forgets) == {"team-a", "default"}
    assert forgets["team-a"]["conversation_id"] == 1
    assert all(x["actor"] == f"local:{getpass.getuser()}" for x in lines)
    (export,) = [x for x in lines if x["action"] == "export"]
    assert (export["namespace"], export["session_id"]) == ("team-a", "main")
    assert "zqalpha" not in json.dumps(lines)  # what was searched for is not kept either
