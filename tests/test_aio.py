"""AsyncEngine: the same operations, off the event loop, serialized per conversation."""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path

from lossless import Config, Engine
from lossless.aio import AsyncEngine
from lossless.summarize import Delay, ScriptedSummarizer

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
)
# export streams its pieces (a generator): an async host iterates it in a thread.
SYNC_ONLY = {"open", "close", "lock", "files_dir", "externalize", "resume_text", "get", "export"}


def test_every_engine_operation_has_an_async_form_with_its_signature() -> None:
    public = {
        name
        for name, member in inspect.getmembers(Engine, inspect.isfunction)
        if not name.startswith("_")
    }
    missing = public - SYNC_ONLY - set(dir(AsyncEngine))
    assert not missing, f"no async form of: {sorted(missing)}"
    for name in public - SYNC_ONLY:
        method = getattr(AsyncEngine, name)
        assert inspect.iscoroutinefunction(method), name
        assert inspect.signature(method) == inspect.signature(getattr(Engine, name)), name


def test_concurrent_tasks_on_one_conversation_never_interleave(tmp_path: Path) -> None:
    async def main() -> list[int]:
        async with await AsyncEngine.open(tmp_path / "a.db", config=Config(), workers=8) as eng:

            async def writer(w: int) -> None:
                for i in range(25):
                    await eng.ingest_batch(
                        "shared", [{"role": "user", "content": f"w{w} m{i} {k}"} for k in range(4)]
                    )

            await asyncio.gather(*(writer(w) for w in range(8)))
            rows = eng.engine.store.fetchall("SELECT seq, content FROM messages ORDER BY seq")
            # each batch of four stays together, in order
            for start in range(0, len(rows), 4):
                batch = [r[1] for r in rows[start : start + 4]]
                assert len({b.rsplit(" ", 1)[0] for b in batch}) == 1
            return [r[0] for r in rows]

    seqs = asyncio.run(main())
    assert seqs == list(range(1, 8 * 25 * 4 + 1))


def test_a_slow_summarizer_never_blocks_the_loop(tmp_path: Path) -> None:
    slow = ScriptedSummarizer(default=Delay(0.05, "slow summary"))

    async def main() -> tuple[float, int]:
        engine = Engine.open(tmp_path / "slow.db", config=SMALL, summarizer=slow)
        async with AsyncEngine(engine) as eng:
            for i in range(16):
                await eng.ingest("s", {"role": "user", "content": f"turn {i} " + "words " * 30})
            gaps: list[float] = []
            done = asyncio.Event()

            async def ticker() -> None:
                last = time.perf_counter()
                while not done.is_set():
                    await asyncio.sleep(0.005)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            tick = asyncio.create_task(ticker())
            report = await eng.compact("s")
            done.set()
            await tick
            return max(gaps), len(report.passes)

    worst_gap, passes = asyncio.run(main())
    assert passes >= 3 and slow.calls >= 3  # the compaction took at least 0.15 s of calls
    assert worst_gap < 0.04  # the loop kept ticking every few ms meanwhile


def test_the_async_engine_answers_like_the_sync_one(tmp_path: Path) -> None:
    engine = Engine.open(tmp_path / "same.db", config=SMALL, summarizer=ScriptedSummarizer())

    async def main() -> None:
        async with AsyncEngine(engine) as eng:
            for i in range(16):
                await eng.after_turn("s", [{"role": "user", "content": f"deploy {i} " * 20}])
            await eng.compact("s")
            assembled = await eng.assemble("s", token_budget=10_000, format="responses")
            assert (
                assembled.messages
                == engine.assemble("s", token_budget=10_000, format="responses").messages
            )
            hits = await eng.grep("deploy", conversation="s")
            assert [h.id for h in hits.hits] == [
                h.id for h in engine.grep("deploy", conversation="s").hits
            ]
            answer = await eng.expand_query("what about deploy 3?", conversation="s")
            assert answer.mode == "deterministic" and answer.citations

    asyncio.run(main())
