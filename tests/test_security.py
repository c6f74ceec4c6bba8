"""Security: nothing leaves the data directory, no grant widens, no conversation leaks.

* File ids and large-file paths never escape the files directory: crafted ids, absolute and
  ``..`` storage paths, symbolic links in place of a file, of a conversation's directory or
  to another conversation's file are refused, not followed.
* Delegation grants: expired, revoked, forged and reused grant ids are refused; a grant never
  reads deeper, more tokens or other conversations than it was given, whoever asks (the
  engine, a sub-agent, a grant-bound MCP server).
* Cross-conversation leakage, for every tool: two conversations in different families,
  ``alpha`` holding a secret (in messages, a summary, a large file, a tool execution and a
  session summary) and ``beta``; nothing scoped to ``beta`` ever shows the secret — grep in
  every mode and scope, describe, expand, expand_query, chat_context_query, the per-conversation
  reads, and the MCP server in pinned and grant modes (through the SDK's in-memory client).
  Each check has a positive control: the same call scoped to ``alpha`` does find the secret.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import Client

from lossless import Config, Engine, LosslessError, NotFoundError
from lossless.ingest.files import file_id_for, read_file
from lossless.mcp_server import build_server
from lossless.retrieval import grants
from lossless.retrieval.grants import GrantError
from lossless.summarize import ScriptedSummarizer
from lossless.summarize.base import AgentRequest, AgentStep, ToolCall

SECRET = "zebracorn-4417"
SECRET_FACT = f"The launch code is {SECRET}; keep the vermilion vault shut."
CJK_SECRET = "秘密の合言葉はサクラです。"
#: Any of these in an output scoped to beta is a leak (none occurs in beta's own data).
LEAK_MARKERS = ("zebracorn", "vermilion", "合言葉", "サクラ", "call_alpha_vault")
BETA_FACT = "The launch code review is on Friday; the vault docs are public."

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=40,
    condensed_target_tokens=40,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
    large_file_token_threshold=200,
)


def leaks(value: Any) -> list[str]:
    """The secret markers found in *value* (any JSON-able data, or text)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return [m for m in LEAK_MARKERS if m in text]


def _fill(engine: Engine, conv: str, fact: str, code: str) -> None:
    """Routine turns around one fact, a tool execution, a large file; then compaction and a
    session summary, so the fact lives in every kind of row."""
    for i in range(12):
        engine.ingest(
            conv,
            {"role": "user", "content": f"status update {i}: routine launch work on the vault"},
        )
        if i == 3:
            engine.ingest(conv, {"role": "assistant", "content": fact})
        if i == 5:
            call = {
                "id": f"call_{conv}_vault",
                "type": "function",
                "function": {"name": "open_vault", "arguments": json.dumps({"code": code})},
            }
            engine.ingest(conv, {"role": "assistant", "content": None, "tool_calls": [call]})
            engine.ingest(
                conv,
                {"role": "tool", "tool_call_id": f"call_{conv}_vault", "content": f"opened {code}"},
            )
        if i == 7:
            body = "\n".join(f"line {j}: vault note {j}" for j in range(150))
            engine.ingest(
                conv,
                {"role": "user", "content": f'<file name="vault.md">{body}\ncode {code}\n</file>'},
            )
        if i == 9 and conv == "alpha":
            engine.ingest(conv, {"role": "user", "content": CJK_SECRET})
    engine.compact(conv)
    engine.summarize_session(conv)


@dataclass
class Ids:
    """Everything one conversation has an id for."""

    conv: int
    messages: list[str]
    summaries: list[str]
    files: list[str]
    fact: str


def _ids(engine: Engine, session: str) -> Ids:
    conv = engine.conversation(session).conversation_id
    messages = engine.messages(session)
    fact = next(m for m in messages if m.role == "assistant" and m.content)
    return Ids(
        conv=conv,
        messages=[f"msg#{m.message_id}" for m in messages],
        summaries=[
            r[0]
            for r in engine.store.fetchall(
                "SELECT summary_id FROM summaries WHERE conversation_id = ?", (conv,)
            )
        ],
        files=[f.file_id for f in engine.store.large_files(conv)],
        fact=f"msg#{fact.message_id}",
    )


@dataclass
class World:
    engine: Engine
    alpha: Ids
    beta: Ids


@pytest.fixture
def world(db: str) -> Iterator[World]:
    engine = Engine.open(db, config=SMALL)
    for session in ("alpha", "beta"):  # two families, each with a session key of its own
        engine.conversation(session, create=True)
        engine.update_conversation(session, session_key=f"family-{session}")
    _fill(engine, "alpha", SECRET_FACT, SECRET)
    _fill(engine, "beta", BETA_FACT, "public-0000")
    alpha, beta = _ids(engine, "alpha"), _ids(engine, "beta")
    assert engine.store.family_ids(engine.conversation("beta")) == [beta.conv]
    yield World(engine, alpha, beta)
    engine.close()


def top_summary(engine: Engine, session: str) -> str:
    return next(i.summary_id for i in engine.context(session) if i.summary_id)


# --- the secret is where the checks look for it (positive controls) -------------------------


def test_the_secret_is_found_where_it_lives_so_the_leak_checks_can_see_it(world: World) -> None:
    engine, alpha = world.engine, world.alpha
    found = engine.grep("zebracorn", conversation="alpha", scope="messages").hits
    assert leaks([h.to_dict() for h in found])
    assert leaks(engine.grep("合言葉", conversation="alpha").hits[0].to_dict())
    summaries = engine.store.get_summaries(alpha.summaries)
    assert any(leaks(s.content) for s in summaries), "a summary of alpha quotes the secret"
    assert leaks(engine.read_large_file(alpha.files[0]))
    assert leaks(engine.chat_context_query(conversation="alpha", tool_name="open_vault").to_dict())
    assert leaks([v.to_dict() for v in engine.session_summaries("alpha")])
    answer = engine.expand_query(
        "what is the launch code?", conversation="alpha", query="launch code"
    )
    assert leaks(answer.answer)


# --- paths: nothing leaves the files directory ------------------------------------------------

CRAFTED_FILE_IDS = [
    "file_../../etc/passwd",
    "../../etc/passwd",
    "/etc/passwd",
    "file_0123456789abcdef/../../x",
    "file_0123456789abcdef/",
    "file_0123456789abcdef\x00.txt",
    "file_0123456789abcde",
    "file_0123456789abcdef0",
    "file_0123456789abcdef.txt",
    "file_%2e%2e%2f%2e%2e%2fetc",
    "file_..\\..\\windows\\win.ini",
    "FILE_0123456789ABCDEF",
    "file_0123456789abcdeg",
    "file_~/.ssh/id_rsa",
]


@pytest.mark.parametrize("ident", CRAFTED_FILE_IDS)
def test_crafted_file_ids_are_not_found_and_never_become_paths(world: World, ident: str) -> None:
    engine = world.engine
    for read in (engine.large_file, engine.read_large_file, engine.describe):
        with pytest.raises(NotFoundError):
            read(ident)


def _set_storage_path(engine: Engine, file_id: str, storage: str) -> None:
    with engine.store.transaction() as conn:
        conn.execute(
            "UPDATE large_files SET storage_path = ? WHERE file_id = ?", (storage, file_id)
        )


def _outside(tmp_path: Path, name: str) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    target = outside / name
    target.write_text("OUTSIDE zebracorn secret of another program\n")
    return target


@pytest.mark.parametrize("where", ["absolute", "dot-dot", "conversation-dot-dot", "no-dir"])
def test_a_tampered_storage_path_outside_the_files_dir_is_refused(
    world: World, tmp_path: Path, where: str
) -> None:
    engine, fid = world.engine, world.beta.files[0]
    target = _outside(tmp_path, f"{fid}.md")
    root = engine.files_dir.resolve()
    storage = {
        "absolute": str(target),
        "dot-dot": os.path.relpath(target, root),
        "conversation-dot-dot": f"{world.beta.conv}/../{os.path.relpath(target, root)}",
        "no-dir": f"../outside/{fid}.md",
    }[where]
    _set_storage_path(engine, fid, storage)
    with pytest.raises(LosslessError) as refused:
        engine.read_large_file(fid)
    assert not leaks(str(refused.value))
    with pytest.raises(LosslessError):
        engine.describe(fid, conversation="beta")


def test_a_record_pointing_at_another_conversations_file_is_refused(world: World) -> None:
    engine = world.engine
    alpha_record = engine.large_file(world.alpha.files[0])
    _set_storage_path(engine, world.beta.files[0], alpha_record.storage_path)
    with pytest.raises(LosslessError) as refused:
        engine.read_large_file(world.beta.files[0])
    assert not leaks(str(refused.value))


def test_a_symlink_in_place_of_a_stored_file_is_not_followed(world: World, tmp_path: Path) -> None:
    engine, fid = world.engine, world.beta.files[0]
    path = engine.files_dir / engine.large_file(fid).storage_path
    path.unlink()
    path.symlink_to(_outside(tmp_path, "secret.txt"))
    for read in (engine.read_large_file, lambda i: engine.describe(i, conversation="beta")):
        with pytest.raises(LosslessError) as refused:
            read(fid)
        assert not leaks(str(refused.value))


def test_a_symlink_to_another_conversations_file_is_not_followed(world: World) -> None:
    engine = world.engine
    ours = engine.files_dir / engine.large_file(world.beta.files[0]).storage_path
    theirs = engine.files_dir / engine.large_file(world.alpha.files[0]).storage_path
    ours.unlink()
    ours.symlink_to(theirs)
    with pytest.raises(LosslessError) as refused:
        engine.read_large_file(world.beta.files[0])
    assert not leaks(str(refused.value))


def test_a_conversation_directory_swapped_for_a_symlink_is_not_followed(
    world: World, tmp_path: Path
) -> None:
    engine, fid = world.engine, world.beta.files[0]
    record = engine.large_file(fid)
    conv_dir = (engine.files_dir / record.storage_path).parent
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / Path(record.storage_path).name).write_text("OUTSIDE zebracorn decoy\n")
    conv_dir.rename(tmp_path / "moved-away")
    conv_dir.symlink_to(decoy, target_is_directory=True)
    with pytest.raises(LosslessError) as refused:
        engine.read_large_file(fid)
    assert not leaks(str(refused.value))


BIG_BODY = "\n".join(f"row {i}: a line of a new large file" for i in range(200))


def test_ingest_never_writes_through_a_planted_symlink(world: World, tmp_path: Path) -> None:
    engine, conv = world.engine, world.beta.conv
    fid = file_id_for(conv, BIG_BODY)
    victim = _outside(tmp_path, "victim.txt")
    before = victim.read_bytes()
    planted = engine.files_dir / str(conv) / f"{fid}.txt"
    planted.symlink_to(victim)
    message = {"role": "user", "content": f'<file name="n.txt">{BIG_BODY}</file>'}
    refused = None
    try:
        engine.ingest("beta", message)
    except LosslessError as exc:
        refused = str(exc)
    if refused is not None:
        assert "refusing" in refused
    else:  # the link itself was replaced by the file: still nothing written outside
        assert not planted.is_symlink() and engine.read_large_file(fid) == BIG_BODY
    assert victim.read_bytes() == before


def test_ingest_never_writes_into_a_conversation_directory_planted_as_a_symlink(
    world: World, tmp_path: Path
) -> None:
    engine = world.engine
    engine.ingest("gamma", {"role": "user", "content": "a first, small message"})
    conv = engine.conversation("gamma").conversation_id
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (engine.files_dir / str(conv)).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(LosslessError, match="refusing"):
        engine.ingest("gamma", {"role": "user", "content": f"<file>{BIG_BODY}</file>"})
    assert list(elsewhere.iterdir()) == []
    assert len(engine.messages("gamma")) == 1  # the refused message was not stored half


def test_a_backup_copies_no_file_from_outside_the_files_dir(world: World, tmp_path: Path) -> None:
    engine = world.engine
    secret = _outside(tmp_path, "id_rsa")
    (engine.files_dir / str(world.beta.conv) / "file_00000000000000aa.txt").symlink_to(secret)
    (engine.files_dir / "linked-dir").symlink_to(secret.parent, target_is_directory=True)
    try:
        report = engine.backup(tmp_path / "backup.db")
    except LosslessError:
        return  # refusing to back up is safe too
    assert report.files is not None
    for folder, _, names in os.walk(report.files):
        for name in names:
            path = Path(folder) / name
            if not path.is_symlink():
                assert b"OUTSIDE" not in path.read_bytes(), path


# --- grants ------------------------------------------------------------------------------------


def _expire(engine: Engine, grant_id: str) -> None:
    with engine.store.transaction() as conn:
        conn.execute(
            "UPDATE grants SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE grant_id = ?",
            (grant_id,),
        )


def test_an_expired_grant_is_refused_and_swept(world: World) -> None:
    engine = world.engine
    top = top_summary(engine, "beta")
    grant = engine.create_grant("beta")
    assert engine.expand(grant.grant_id, [top]).nodes
    _expire(engine, grant.grant_id)
    with pytest.raises(GrantError, match="unknown, expired or revoked"):
        engine.expand(grant.grant_id, [top])
    with pytest.raises(GrantError):
        build_server(engine, grant_id=grant.grant_id)
    assert grants.sweep(engine.store) >= 1
    revoked = engine.store.fetchall(
        "SELECT revoked_at FROM grants WHERE grant_id = ?", (grant.grant_id,)
    )[0][0]
    assert revoked is not None


def test_a_revoked_grant_cannot_be_reused_and_a_new_one_is_a_new_secret(world: World) -> None:
    engine = world.engine
    top = top_summary(engine, "beta")
    grant = engine.create_grant("beta")
    engine.revoke_grant(grant.grant_id)
    engine.revoke_grant(grant.grant_id)  # twice is no error
    for attempt in (
        lambda: engine.expand(grant.grant_id, [top]),
        lambda: grants.charge(engine.store, grant.grant_id, 1),
        lambda: grants.check(engine.store, grant.grant_id),
        lambda: build_server(engine, grant_id=grant.grant_id),
    ):
        with pytest.raises(GrantError, match="unknown, expired or revoked"):
            attempt()
    again = engine.create_grant("beta")
    assert again.grant_id != grant.grant_id
    assert len(again.grant_id) == len("grant_") + 32
    with pytest.raises(GrantError):  # the new grant does not bring the old one back
        engine.expand(grant.grant_id, [top])


HEX32 = st.text("0123456789abcdef", min_size=32, max_size=32)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    forged=st.one_of(
        HEX32.map(lambda h: "grant_" + h),
        st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
        st.sampled_from(["", "grant_", "grant_%", "' OR 1=1 --", "grant_*", "*"]),
    ),
    mangle=st.sampled_from(["as-is", "upper", "space", "truncate", "extend", "bare", "like"]),
)
@example(forged="' OR '1'='1", mangle="as-is")
def test_forged_grant_ids_are_refused_even_near_a_live_one(
    world: World, forged: str, mangle: str
) -> None:
    engine = world.engine
    live = engine.create_grant("beta").grant_id
    near = {
        "as-is": forged,
        "upper": live.upper(),
        "space": f" {live} ",
        "truncate": live[:-1],
        "extend": live + "0",
        "bare": live.removeprefix("grant_"),
        "like": live[:-4] + "%",
    }[mangle]
    top = top_summary(engine, "beta")
    for candidate in (forged, near):
        if candidate == live:
            continue
        with pytest.raises(GrantError, match="unknown, expired or revoked"):
            engine.expand(candidate, [top])
        with pytest.raises(GrantError):
            build_server(engine, grant_id=candidate)
    engine.revoke_grant(live)


def test_a_grant_never_reads_deeper_more_tokens_or_another_conversation(world: World) -> None:
    engine = world.engine
    top, theirs = top_summary(engine, "beta"), top_summary(engine, "alpha")
    grant = engine.create_grant("beta", max_depth=1, token_cap=120).grant_id

    shallow = engine.expand(grant, [top], max_depth=-5, include_messages=True)
    assert {n.level for n in shallow.nodes} <= {0}  # a negative depth widens nothing
    with pytest.raises(GrantError, match="1 level"):
        engine.expand(grant, [top], max_depth=2)
    for ids in ([theirs], [top, theirs], world.alpha.summaries):
        with pytest.raises(GrantError, match="outside this grant") as refused:
            engine.expand(grant, ids, include_messages=True)
        assert not leaks(str(refused.value))

    spent = shallow.tokens
    for _ in range(20):  # ask for far more than the grant holds, again and again
        result = engine.expand(grant, [top], include_messages=True, token_cap=10**9)
        assert all(n.level <= 1 for n in result.nodes)
        assert not leaks(result.to_dict())
        spent += result.tokens
        if not result.nodes:
            break
    assert spent <= 120
    assert grants.check(engine.store, grant).tokens_used == spent
    last = engine.expand(grant, [top], include_messages=True, token_cap=10**9)
    assert last.nodes == [] and last.tokens == 0


def test_a_grant_over_one_conversation_ignores_other_families_summaries_given_as_messages(
    world: World,
) -> None:
    engine = world.engine
    grant = engine.create_grant("beta").grant_id
    for ident in world.alpha.messages[:5] + world.alpha.files:
        with pytest.raises(LosslessError) as refused:
            engine.expand(grant, [ident], include_messages=True)
        assert not leaks(str(refused.value))


def _sub_agent_answer(request: AgentRequest) -> str:
    """The final answer repeats every tool result it saw: a leak would show in it."""
    return "I saw: " + " | ".join(t.text for t in request.turns if t.role == "tool")


def test_a_sub_agent_cannot_widen_its_grant_or_reach_another_conversation(world: World) -> None:
    engine, alpha, beta = world.engine, world.alpha, world.beta
    alpha_grant = engine.create_grant("alpha").grant_id  # live, but the sub-agent never holds it
    top = top_summary(engine, "beta")

    def calls(*specs: tuple[str, dict[str, Any]]) -> AgentStep:
        return AgentStep(
            text="",
            tool_calls=tuple(ToolCall(f"c{n}", name, args) for n, (name, args) in enumerate(specs)),
        )

    model = ScriptedSummarizer(
        agent=[
            calls(
                ("lcm_expand", {"summary_ids": alpha.summaries, "include_messages": True}),
                ("lcm_expand", {"summary_ids": [top], "max_depth": 99}),
            ),
            calls(
                (
                    "lcm_expand",
                    {
                        "summary_ids": [top],
                        "token_cap": 10**9,
                        "grant_id": alpha_grant,  # not an argument it has: ignored
                        "conversation": "alpha",
                    },
                ),
                ("lcm_grep", {"pattern": "zebracorn"}),
                ("lcm_describe", {"id": alpha.fact}),
            ),
            calls(
                ("lcm_expand", {"summary_ids": alpha.messages[:4] + alpha.files}),
                ("lcm_expand", {"summary_ids": [top, *alpha.summaries]}),
            ),
            _sub_agent_answer,
        ]
    )
    engine.summarizer = model
    result = engine.expand_query("what is the launch code?", conversation="beta")

    seen = [t.text for r in model.agent_requests for t in r.turns if t.role != "assistant"]
    assert not leaks(seen)  # nothing of alpha reached the model
    assert not leaks([result.answer, result.citations, result.searched])
    assert not leaks([r["error"] for r in result.refused])  # (its arguments are its own words)
    refused = {r["arguments"].get("pattern") or str(r["arguments"]) for r in result.refused}
    assert len(result.refused) >= 5, refused
    assert result.mode == "model"
    assert set(result.citations) <= set(beta.messages + beta.summaries)
    used = engine.store.fetchall(
        "SELECT tokens_used, token_cap, revoked_at FROM grants WHERE purpose = 'expand_query'"
    )
    assert all(u <= cap and revoked is not None for u, cap, revoked in used)
    assert grants.check(engine.store, alpha_grant).tokens_used == 0


def test_a_sub_agent_sending_odd_numbers_is_refused_not_crashing(world: World) -> None:
    engine = world.engine
    top = top_summary(engine, "beta")
    odd = AgentStep(
        text="",
        tool_calls=(ToolCall("c1", "lcm_expand", {"summary_ids": [top], "max_depth": "²"}),),
    )
    engine.summarizer = ScriptedSummarizer(agent=[odd, "done"])
    result = engine.expand_query("what is the launch code?", conversation="beta")
    assert result.mode == "model"


# --- cross-conversation leakage, tool by tool ----------------------------------------------------

GREP_PATTERNS = [
    ("zebracorn", "full_text"),
    ("zebracorn-4417", "full_text"),
    ('"launch code is"', "full_text"),
    ("what is the launch code of the vermilion vault?", "full_text"),
    ("ebracorn-44", "full_text"),  # a substring: the trigram index
    ("合言葉", "full_text"),  # CJK: the trigram index
    ("call_alpha_vault", "full_text"),
    ("open_vault", "full_text"),
    (r"zebracorn-\d+", "regex"),
    ("(?s).+", "regex"),
    ("[合サ]", "regex"),
]
SCOPES = ["both", "messages", "summaries", "files"]
SORTS = ["recency", "relevance"]


def test_grep_scoped_to_beta_never_returns_alpha_in_any_mode_scope_or_sort(world: World) -> None:
    engine, beta = world.engine, world.beta
    checked = 0
    refusals: list[str] = []
    for pattern, mode in GREP_PATTERNS:
        for scope in SCOPES:
            for sort in SORTS if mode == "full_text" else ["recency"]:
                for ref, family in (("beta", True), (beta.conv, False)):
                    try:
                        result = engine.grep(
                            pattern, conversation=ref, family=family, mode=mode,  # type: ignore[arg-type]
                            scope=scope, sort=sort,  # type: ignore[arg-type]
                        )  # fmt: skip
                    except LosslessError as exc:
                        refusals.append(str(exc))
                        continue
                    hits = [h.to_dict() for h in result.hits]
                    assert {h["conversation_id"] for h in hits} <= {beta.conv}
                    assert not leaks(hits), (pattern, mode, scope, sort)
                    checked += 1
    assert checked > 100
    assert not leaks(refusals)
    assert engine.grep("vault", conversation="beta").hits  # beta's own data is found


def test_grep_within_a_time_window_never_returns_alpha(world: World) -> None:
    engine = world.engine
    for since, before in (("2000-01-01", None), (None, "2999-01-01"), ("2000-01-01", "2999-01-01")):
        result = engine.grep(
            "zebracorn vault", conversation="beta", since=since, before=before, sort="relevance"
        )
        assert not leaks([h.to_dict() for h in result.hits])


def test_describe_scoped_to_beta_refuses_every_alpha_id_without_a_word_of_it(
    world: World,
) -> None:
    engine, alpha = world.engine, world.alpha
    for ident in alpha.messages + alpha.summaries + alpha.files:
        for kwargs in ({}, {"token_cap": 10**6}, {"lines": (1, 10_000)}):
            with pytest.raises(NotFoundError) as refused:
                engine.describe(ident, conversation="beta", **kwargs)  # type: ignore[arg-type]
            assert not leaks(str(refused.value)), ident
    own = engine.describe(world.beta.fact, conversation="beta")
    assert own.content == BETA_FACT


def test_describe_of_a_beta_summary_lists_nothing_of_alpha(world: World) -> None:
    engine = world.engine
    for ident in world.beta.summaries:
        found = engine.describe(ident, conversation="beta")
        assert not leaks(found.to_dict())
        below = {m.id for m in found.manifest} | set(found.parents) | set(found.children)
        assert not below & set(world.alpha.messages + world.alpha.summaries)


def test_expand_query_for_beta_never_answers_from_alpha(world: World) -> None:
    engine, alpha, beta = world.engine, world.alpha, world.beta
    for prompt, query in (
        ("what is the launch code?", None),
        ("what is the launch code?", "zebracorn"),
        ("which code opens the vermilion vault?", "vermilion vault"),
        ("合言葉は?", "合言葉"),
    ):
        answer = engine.expand_query(prompt, conversation="beta", query=query)
        assert not leaks(answer.to_dict()), prompt
        assert set(answer.citations) <= set(beta.messages + beta.summaries)
    for ids in ([alpha.summaries[0]], [top_summary(engine, "beta"), *alpha.summaries]):
        with pytest.raises(NotFoundError) as refused:
            engine.expand_query("what is the launch code?", conversation="beta", summary_ids=ids)
        assert not leaks(str(refused.value))
    live = engine.store.fetchall("SELECT count(*) FROM grants WHERE revoked_at IS NULL")[0][0]
    assert live == 0


def test_chat_context_query_for_beta_never_returns_alpha_frames_or_executions(
    world: World,
) -> None:
    engine, beta = world.engine, world.beta
    for filters in (
        {},
        {"text": "zebracorn"},
        {"text": "launch code vault"},
        {"tool_name": "open_vault"},
        {"execution_id": "call_alpha_vault"},
        {"status": "ok"},
        {"kind": "executions"},
        {"kind": "frames", "role": "assistant"},
        {"since": "2000-01-01T00:00:00.000000Z", "limit": 200},
        {"order": "oldest", "limit": 200},
    ):
        for family in (True, False):
            result = engine.chat_context_query(
                conversation="beta",
                family=family,
                **filters,  # type: ignore[arg-type]
            )
            data = result.to_dict()
            assert not leaks(data), filters
            convs = {f["conversation_id"] for f in data["frames"]}
            convs |= {e["conversation_id"] for e in data["executions"]}
            assert convs <= {beta.conv}


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses"])
def test_beta_reads_of_its_own_history_hold_nothing_of_alpha(world: World, fmt: str) -> None:
    engine = world.engine
    assert not leaks([m.to_source() for m in engine.messages("beta")])
    assert not leaks([m.content for m in engine.messages("beta")])
    assert not leaks([str(i) for i in engine.context("beta")])
    assert not leaks(engine.assemble("beta", 100_000, format=fmt).messages)
    assert not leaks(engine.resume("beta", latest=True).text)
    assert not leaks([v.to_dict() for v in engine.session_summaries("beta")])
    assert not leaks(engine.summarize_session("beta", full=True).to_dict())


# --- the MCP server, pinned and grant-bound ---------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def connected(engine: Engine, **scope: Any) -> AsyncIterator[Client]:
    with anyio.fail_after(60):
        async with Client(build_server(engine, **scope)) as client:
            yield client


async def _outputs(client: Client, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Every call's whole answer as text (content and structured content, refusals too)."""
    out = []
    for tool, args in calls:
        result = await client.call_tool(tool, {k: v for k, v in args.items() if v is not None})
        texts = [getattr(c, "text", "") for c in result.content]
        structured = json.dumps(result.structured_content or {}, ensure_ascii=False)
        out.append((tool, args, result.is_error, "\n".join(texts) + structured))
    return out


def _battery(w: World, mode: str) -> list[tuple[str, dict[str, Any]]]:
    """Calls that try every way to reach alpha from a server scoped to beta."""
    alpha = w.alpha
    refs: list[Any] = ["alpha", alpha.conv, str(alpha.conv)]
    calls: list[tuple[str, dict[str, Any]]] = []
    for pattern, grep_mode in GREP_PATTERNS:
        for scope in SCOPES:
            calls.append(("lcm_grep", {"pattern": pattern, "mode": grep_mode, "scope": scope}))
        calls += [
            ("lcm_grep", {"pattern": pattern, "mode": grep_mode, "conversation": r}) for r in refs
        ]
    for ident in alpha.messages + alpha.summaries + alpha.files:
        calls.append(("lcm_describe", {"id": ident}))
    calls.append(("lcm_describe", {"id": alpha.files[0], "lines": "1:500"}))
    calls += [("lcm_describe", {"id": alpha.fact, "conversation": r}) for r in refs]
    calls += [("get_history", {"conversation": r, "include_summaries": True}) for r in refs]
    calls.append(("get_history", {"include_summaries": True, "limit": 200}))
    for filters in (
        {"text": "zebracorn"},
        {"tool_name": "open_vault"},
        {"execution_id": "call_alpha_vault"},
        {"kind": "executions", "limit": 200},
        {"kind": "frames", "limit": 200},
    ):
        calls.append(("chat_context_query", filters))
        calls += [("chat_context_query", {**filters, "conversation": r}) for r in refs]
    calls.append(("lcm_list_conversations", {"limit": 500}))
    if mode == "pinned":
        calls += [
            ("lcm_expand_query", {"prompt": "what is the launch code?"}),
            ("lcm_expand_query", {"prompt": "what is the launch code?", "query": "zebracorn"}),
            ("lcm_expand_query", {"prompt": "launch code?", "summary_ids": alpha.summaries}),
            ("lcm_expand_query", {"prompt": "launch code?", "conversation": "alpha"}),
            ("summarize_session", {"conversation": "alpha"}),
            ("summarize_session", {"conversation": alpha.conv}),
            ("summarize_session", {}),
        ]
    if mode == "grant":
        top = top_summary(w.engine, "alpha")
        calls += [
            ("lcm_expand", {"summary_ids": [top], "include_messages": True}),
            ("lcm_expand", {"summary_ids": alpha.summaries, "max_depth": 99}),
            ("lcm_expand", {"summary_ids": [top_summary(w.engine, "beta"), top]}),
            ("lcm_expand", {"summary_ids": alpha.messages[:4]}),
            ("lcm_expand", {"summary_ids": [top], "token_cap": 10**9}),
        ]
    return calls


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["pinned", "grant"])
async def test_an_mcp_server_scoped_to_beta_never_shows_alpha_through_any_tool(
    world: World, mode: str
) -> None:
    engine = world.engine
    scope: dict[str, Any] = (
        {"conversation": "beta"}
        if mode == "pinned"
        else {"grant_id": engine.create_grant("beta", token_cap=100_000).grant_id}
    )
    calls = _battery(world, mode)
    async with connected(engine, **scope) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {tool for tool, _ in calls} <= tools
        results = await _outputs(client, calls)
    for tool, args, is_error, text in results:
        assert not leaks(text), (tool, args, text[:500])
        if is_error:  # a refusal that says why, not the SDK's generic crash report
            assert text.startswith(f"Error executing tool {tool}: "), (tool, args, text[:300])
    answered = [r for r in results if not r[2]]
    assert len(answered) > 20  # the server did answer: these are scoped results, not just errors
    if mode == "grant":
        expands = [r for r in results if r[0] == "lcm_expand"]
        assert all(is_error for _, _, is_error, _ in expands[:4])


@pytest.mark.anyio
async def test_the_same_battery_on_the_whole_store_does_find_the_secret(world: World) -> None:
    """The positive control of the test above: unscoped, these calls reach alpha."""
    async with connected(world.engine) as client:
        results = await _outputs(client, _battery(world, "pinned"))
    leaked = {tool for tool, _, _, text in results if leaks(text)}
    assert {"lcm_grep", "lcm_describe", "get_history", "chat_context_query"} <= leaked


@pytest.mark.anyio
async def test_a_grant_server_refuses_every_tool_once_its_grant_expires_or_is_revoked(
    world: World,
) -> None:
    engine = world.engine
    top = top_summary(engine, "beta")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("lcm_grep", {"pattern": "vault"}),
        ("lcm_describe", {"id": world.beta.fact}),
        ("lcm_expand", {"summary_ids": [top]}),
        ("get_history", {}),
        ("chat_context_query", {"text": "vault"}),
        ("lcm_list_conversations", {}),
    ]
    for end in ("expire", "revoke"):
        grant = engine.create_grant("beta").grant_id
        async with connected(engine, grant_id=grant) as client:
            live = await _outputs(client, calls)
            assert not any(is_error for _, _, is_error, _ in live)
            if end == "expire":
                _expire(engine, grant)
            else:
                engine.revoke_grant(grant)
            dead = await _outputs(client, calls)
        for tool, _, is_error, text in dead:
            assert is_error and "unknown, expired or revoked" in text, tool
            assert BETA_FACT not in text


# --- the server process: a crash is contained ---------------------------------------------------


def test_the_mcp_module_is_only_imported_by_the_mcp_shell() -> None:
    """A hostile MCP request can only reach the core through mcp_server.py's tool functions."""
    code = "import sys, lossless, lossless.engine; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_grant_ttl_is_not_a_way_to_live_forever(world: World) -> None:
    engine = world.engine
    grant = engine.create_grant("beta", ttl_seconds=60)
    expires = grant.expires_at
    created = engine.store.fetchall(
        "SELECT created_at FROM grants WHERE grant_id = ?", (grant.grant_id,)
    )[0][0]
    from lossless.timestamps import parse_ts

    lifetime = parse_ts(expires) - parse_ts(created)  # type: ignore[operator]
    assert timedelta(seconds=59) <= lifetime <= timedelta(seconds=61)
    assert read_file is not None  # imported for the path tests' signatures
