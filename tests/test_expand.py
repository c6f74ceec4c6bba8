"""Delegation grants and lcm_expand: scope, depth, token cap, expiry, revocation, restarts."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from lossless import Config, Engine
from lossless.retrieval.grants import GrantError
from lossless.summarize import ScriptedSummarizer

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=120,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)


EngineFactory = Callable[[str], Engine]


@pytest.fixture
def open_engine() -> Iterator[EngineFactory]:
    """``open_engine(target)``: an engine on *target*, closed after the test."""
    engines: list[Engine] = []

    def make(target: str) -> Engine:
        engine = Engine.open(target, config=SMALL, summarizer=ScriptedSummarizer())
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


def compacted(engine: Engine, session: str = "s") -> str:
    for i in range(16):
        engine.ingest(
            session, {"role": "user", "content": f"{session} note {i}: " + "detail " * 12}
        )
    engine.compact(session)
    top = next(i.summary_id for i in engine.context(session) if i.summary_id)
    assert top is not None
    return top


def test_expand_walks_down_the_dag_to_the_messages(
    open_engine: EngineFactory, new_db: Callable[[], str]
) -> None:
    engine = open_engine(new_db())
    top = compacted(engine)
    grant = engine.create_grant("s", token_cap=100_000)
    result = engine.expand(grant.grant_id, [top], include_messages=True)
    kinds = [n.kind for n in result.nodes]
    assert kinds[0] == "condensed" and "leaf" in kinds and "message" in kinds
    assert result.nodes[0].level == 0
    assert any(n.content.startswith("s note 0:") for n in result.nodes)
    assert not result.truncated


def test_the_token_cap_stops_the_walk_and_is_charged_to_the_grant(
    open_engine: EngineFactory, new_db: Callable[[], str]
) -> None:
    engine = open_engine(new_db())
    top = compacted(engine)
    grant = engine.create_grant("s", token_cap=1_000)
    first = engine.expand(grant.grant_id, [top], include_messages=True, token_cap=60)
    assert first.truncated and first.tokens <= 60
    with pytest.raises(GrantError, match="more tokens"):
        from lossless.retrieval import grants

        grants.charge(engine.store, grant.grant_id, 10_000)


def test_an_expansion_that_returns_nothing_says_why_and_what_to_do(
    open_engine: EngineFactory, new_db: Callable[[], str]
) -> None:
    engine = open_engine(new_db())
    top = compacted(engine)
    grant = engine.create_grant("s", token_cap=1_000)
    tiny = engine.expand(grant.grant_id, [top], token_cap=1)
    assert tiny.nodes == [] and tiny.truncated
    assert tiny.stopped is not None and tiny.stopped.startswith(f"nothing returned: {top} (")
    assert "the cap is 1 tokens (token_cap)" in tiny.stopped
    assert "token_cap of at least" in tiny.stopped
    assert tiny.grant_tokens_left == 1_000  # nothing was charged
    # Spend the grant down to a few tokens: the grant is named as what stopped it.
    from lossless.retrieval import grants

    grants.charge(engine.store, grant.grant_id, 995)
    spent = engine.expand(grant.grant_id, [top]).to_dict()
    assert spent["nodes"] == [] and spent["grant_tokens_left"] == 5
    assert "the grant has 5 tokens left" in spent["stopped"] and "new grant" in spent["stopped"]
    whole = engine.expand(engine.create_grant("s").grant_id, [top]).to_dict()
    assert "stopped" not in whole and whole["nodes"]


def test_depth_beyond_the_grant_is_refused(
    open_engine: EngineFactory, new_db: Callable[[], str]
) -> None:
    engine = open_engine(new_db())
    top = compacted(engine)
    grant = engine.create_grant("s", max_depth=1)
    with pytest.raises(GrantError, match="1 level"):
        engine.expand(grant.grant_id, [top], max_depth=3)
    shallow = engine.expand(grant.grant_id, [top])
    assert max(n.level for n in shallow.nodes) <= 1


def test_summaries_of_another_conversation_are_refused(
    open_engine: EngineFactory, new_db: Callable[[], str]
) -> None:
    engine = open_engine(new_db())
    compacted(engine, "s")
    theirs = compacted(engine, "other")
    grant = engine.create_grant("s")
    with pytest.raises(GrantError, match="outside this grant"):
        engine.expand(grant.grant_id, [theirs])


def test_forged_revoked_and_expired_grants_are_refused(
    open_engine: EngineFactory, new_db: Callable[[], str]
) -> None:
    engine = open_engine(new_db())
    top = compacted(engine)
    with pytest.raises(GrantError):
        engine.expand("grant_" + "0" * 32, [top])
    grant = engine.create_grant("s")
    engine.revoke_grant(grant.grant_id)
    with pytest.raises(GrantError):
        engine.expand(grant.grant_id, [top])
    expired = engine.create_grant("s", ttl_seconds=1)
    engine.store.fetchall("SELECT 1")  # the store is usable
    with engine.store.transaction() as conn:  # move its expiry into the past
        conn.execute(
            "UPDATE grants SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE grant_id = ?",
            (expired.grant_id,),
        )
    with pytest.raises(GrantError):
        engine.expand(expired.grant_id, [top])


def test_grants_survive_a_restart(open_engine: EngineFactory, new_db: Callable[[], str]) -> None:
    db = new_db()
    engine = open_engine(db)
    top = compacted(engine)
    grant = engine.create_grant("s")
    engine.close()
    reopened = open_engine(db)
    assert reopened.expand(grant.grant_id, [top]).nodes


def test_the_cli_expands_under_a_grant_it_revokes(  # type: ignore[no-untyped-def]
    run_cli, open_engine: EngineFactory, new_db: Callable[[], str]
) -> None:
    db = new_db()
    engine = open_engine(db)
    top = compacted(engine)
    engine.close()
    res = run_cli("--db", str(db), "expand", top, "--messages", "--json")
    assert res.code == 0, res
    import json

    data = json.loads(res.out)
    assert data["nodes"][0]["id"] == top
    check = open_engine(db)
    live = check.store.fetchall("SELECT count(*) FROM grants WHERE revoked_at IS NULL")[0][0]
    assert live == 0


def test_the_cli_says_what_stopped_an_expansion_in_its_own_flags(  # type: ignore[no-untyped-def]
    run_cli, open_engine: EngineFactory, new_db: Callable[[], str]
) -> None:
    """The advice names the CLI's options (--cap, --depth, --no-messages), not the tool's
    parameter names a person cannot type."""
    db = new_db()
    engine = open_engine(db)
    top = compacted(engine)
    engine.close()
    res = run_cli("--db", str(db), "expand", top, "--messages", "--cap", "100")
    assert res.code == 0, res
    said = " ".join(res.out.split())
    assert "stopped:" in said and "--cap of at least" in said, said
    assert "a lower --depth" in said and "--no-messages" in said, said
    for tool_word in ("token_cap", "max_depth", "include_messages", "summary_ids"):
        assert tool_word not in said, said
