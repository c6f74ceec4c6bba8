"""What the compaction tests share: small settings, an engine factory, a feed of messages, and
readers of what a pass left (see ``test_compaction*.py``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from lossless import Config, Engine
from lossless.compaction import Compactor, PassResult
from lossless.store import Store
from lossless.summarize import ScriptedSummarizer

SMALL = Config().replace(
    fresh_tail_count=4,
    leaf_chunk_tokens=300,
    leaf_target_tokens=60,
    condensed_target_tokens=60,
    leaf_min_fanout=3,
    condensed_min_fanout=2,
)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

SUMMARY_ID = re.compile(r"sum_[0-9a-f]{16}")

COMPACTION_TABLES = (
    "summaries",
    "summary_parents",
    "summary_messages",
    "context_items",
    "summaries_fts",
)

EngineFactory = Callable[..., Engine]


def text(tokens: int, tag: str = "note") -> str:
    """ASCII text of exactly *tokens* estimated tokens, starting with *tag*."""
    body = f"{tag}: " + "lorem ipsum dolor sit amet " * tokens
    return body[: tokens * 4]


class Feed:
    """Ingests messages into one conversation, one minute apart, and remembers their ids."""

    def __init__(self, engine: Engine, session: str = "s", start: datetime = T0) -> None:
        self.engine = engine
        self.session = session
        self.clock = start

    def _at(self) -> datetime:
        self.clock += timedelta(minutes=1)
        return self.clock

    def add(self, message: Any) -> int:
        return self.engine.ingest(self.session, message, created_at=self._at()).message_ids[0]

    def say(self, role: str, tokens: int, tag: str = "note") -> int:
        return self.add({"role": role, "content": text(tokens, tag)})

    def turns(self, count: int, tokens: int = 50) -> list[int]:
        """*count* user/assistant turns."""
        ids = []
        for i in range(count):
            ids.append(self.say("user", tokens, f"question {i}"))
            ids.append(self.say("assistant", tokens, f"answer {i}"))
        return ids

    def call(self, *call_ids: str, tokens: int = 0) -> int:
        """An OpenAI assistant message making the tool calls *call_ids*."""
        return self.add(
            {
                "role": "assistant",
                "content": text(tokens, "calling") if tokens else None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'},
                    }
                    for cid in call_ids
                ],
            }
        )

    def result(self, call_id: str, tokens: int) -> int:
        return self.add({"role": "tool", "tool_call_id": call_id, "content": text(tokens, call_id)})

    @property
    def conversation_id(self) -> int:
        return self.engine.conversation(self.session).conversation_id


def compactor(engine: Engine) -> Compactor:
    return Compactor(engine.services)


def leaf_pass(engine: Engine, session: str = "s") -> PassResult | None:
    conv = engine.conversation(session).conversation_id
    with engine.lock(conv):
        return compactor(engine).leaf_pass(conv)


def condensed_pass(engine: Engine, session: str = "s") -> PassResult | None:
    conv = engine.conversation(session).conversation_id
    with engine.lock(conv):
        return compactor(engine).condensed_pass(conv)


def scripted(engine: Engine) -> ScriptedSummarizer:
    assert isinstance(engine.summarizer, ScriptedSummarizer)
    return engine.summarizer


def raw_ids(engine: Engine, session: str = "s") -> list[int]:
    return [it.message_id for it in engine.context(session) if it.message_id is not None]


def context_tokens(engine: Engine, session: str = "s") -> int:
    return sum(it.tokens for it in engine.context(session))


def snapshot(store: Store, table: str) -> list[tuple[Any, ...]]:
    """Every row of *table* (with the rowid of a full-text table), in key order. PostgreSQL
    has no full-text tables (its word index is a column of ``summaries``): their rows are
    the summaries' ``content_tsv``."""
    if table.endswith("_fts") and store.backend == "postgresql":
        rows = store.fetchall(f"SELECT rowid, content_tsv::text FROM {table[:-4]}")
    else:
        columns = "rowid, *" if table.endswith("_fts") else "*"
        rows = store.fetchall(f"SELECT {columns} FROM {table}")
    return sorted(rows, key=lambda row: tuple((v is None, 0 if v is None else v) for v in row))


def prompt_time(stored: str) -> str:
    """How prompts show a stored time."""
    return f"{stored[:10]} {stored[11:16]} UTC"


def where_is(store: Store) -> dict[int, str]:
    """Each message's place: ``context`` when raw in the context, else its leaf summary."""
    places = {
        mid: "context"
        for (mid,) in store.fetchall("SELECT message_id FROM context_items WHERE message_id > 0")
    }
    for sid, mid in store.fetchall("SELECT summary_id, message_id FROM summary_messages"):
        assert mid not in places, f"msg#{mid} is both in the context and under {sid}"
        places[mid] = sid
    return places


def assert_tool_pairs_whole(store: Store) -> int:
    """No tool call is summarized apart from its result; returns the pairs checked."""
    rows = store.fetchall(
        "SELECT m.conversation_id, p.message_id, p.part_type, p.tool_call_id"
        " FROM message_parts p JOIN messages m USING (message_id)"
        " WHERE p.part_type IN ('tool_call', 'tool_result') AND p.tool_call_id IS NOT NULL"
        " ORDER BY m.conversation_id, m.seq, p.part_type DESC, p.ordinal"
    )
    places = where_is(store)
    open_calls: dict[tuple[int, str], int] = {}
    pairs = 0
    for conv, mid, kind, call_id in rows:
        if kind == "tool_call":
            open_calls[(conv, call_id)] = mid
            continue
        call_mid = open_calls.pop((conv, call_id), None)
        if call_mid is None:
            continue
        pairs += 1
        assert places[call_mid] == places[mid], (
            f"tool call {call_id} (msg#{call_mid}) is in {places[call_mid]} but its result"
            f" (msg#{mid}) is in {places[mid]}"
        )
    return pairs


def write_leaves(engine: Engine, count: int, feed: Feed) -> list[str]:
    """Add material for *count* more leaves of 6 messages and write them."""
    written = []
    feed.turns(3 * count)
    for _ in range(count):
        result = leaf_pass(engine)
        assert result is not None
        written.append(result.summary_id)
    return written


def engines(new_db: Callable[[], str]) -> Iterator[EngineFactory]:
    """``make(summarizer, **config_changes)``: an engine on a new store (of each back end in
    turn); the ``open_engine`` fixture of the compaction tests."""
    opened: list[Engine] = []

    def make(summarizer: ScriptedSummarizer | None = None, **changes: Any) -> Engine:
        engine = Engine.open(
            new_db(),
            config=SMALL.replace(**changes),
            summarizer=summarizer if summarizer is not None else ScriptedSummarizer(),
        )
        opened.append(engine)
        return engine

    yield make
    for engine in opened:
        engine.close()
