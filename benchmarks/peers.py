"""lossless and hermes-lcm (Hermes Agent's lossless-context plugin) side by side, one run.

    python benchmarks/peers.py --hermes-lcm PATH      # PATH: a checkout of hermes-lcm
    python benchmarks/peers.py --hermes-lcm PATH --sizes 10000 --bulk 10000 --backlogs 10000

Without ``--hermes-lcm`` (or when PATH holds no importable hermes-lcm) it says why it skips
and exits 0. Both engines get the same generated messages and the same instant summarizer
(an answer of the requested size, at once: the time is each engine's own), on SQLite, with
their default settings (lossless ``Config()``, hermes-lcm ``LCMConfig()``), in alternating
rounds (``--rounds``, 3 by default: each figure is the median of the rounds):

1. *bulk ingest* of N messages, 5,000 per call: lossless ``Engine.ingest_batch`` (and the
   catch-up of its deferred indexes, shown apart); hermes-lcm ``_ingest_messages``, the call
   every one of its hooks makes with the host's growing list.
2. *a host's turn* at N stored messages (compacted as a host's would be by then), two new
   messages and a window of ``--budget`` tokens (32k): lossless ``Engine.after_turn`` with
   that ``token_budget``, as in ``turn.py``; hermes-lcm as Hermes drives a context engine
   with that window (``context_length``, compressing at 75% of it): the host's
   list grows by the turn, ``should_compress_preflight`` (hermes-lcm's per-turn ingest),
   ``update_from_response`` and ``should_compress``, and ``compress`` when it fires, its
   result becoming the host's list.
3. *assembly* of the active context after those turns: lossless ``Engine.assemble`` (32k,
   OpenAI shape; default settings, which fill the room with detail, and ``fill=False``, what
   lossless's Hermes integration hands Hermes); hermes-lcm ``_assemble_context`` (what
   ``compress`` returns to Hermes: the summaries, then the host's tail; it has no public
   assembly).
4. *search* of a Zipf corpus (``common.corpus_messages``) of N messages, compacted the same
   way, as the agent's tool call: lossless ``lcm_grep`` through the toolbox (``call_json``,
   the session's scope, what the Hermes integration runs); hermes-lcm
   ``handle_tool_call("lcm_grep", ...)`` with the host's list (its defaults: newest first,
   10 hits, every word of the query in the row, as FTS5 reads ``a b``). A common word (each
   with its defaults); a rare two-word query matching every word on both sides (lossless
   ``lcm_grep(pattern, sort="recency")``: the rows holding every word come first, without a
   ``tier``; those holding only some follow with ``tier: 1`` and are not counted), with the
   hit counts, which should be equal; and, as a row of its own that compares nothing,
   lossless's default call for the same words (relevance: a ranked page of up to 20, rows
   matching only some of the words, or found through their surroundings, ranked too). The
   first search after the store was filled is shown apart.
5. *one full compaction* of an uncompacted backlog of M messages: lossless ``compact()``;
   hermes-lcm ``compress`` over the host's list (again until it no longer shortens it).

With ``--summarizer-latency TTFT,TPS`` (``2,50``: 2 s to the first token, then 50 tokens a
second) the backlog rows summarize through a model instead: one local server speaking the
OpenAI Chat Completions wire format at that pace (``tests/model_servers.py``:
``SummaryServer``, as ``turn.py --summarizer-latency``). lossless uses its ``openai``
provider (``turn.provider_config``: ``--concurrency`` calls at once, default 4); hermes-lcm's
summary call (``escalation._call_llm_for_summary``, which Hermes answers with its auxiliary
model) becomes one request to the same server through the ``openai`` SDK, with hermes-lcm's
prompt, ``max_tokens`` and timeout (``summary_timeout_ms``, 60 s by default; no retries).
Both pay the same time per token. Reported for each engine: the seconds until the context
fits (lossless: ``compact()``, its summaries provisional; hermes-lcm: its ``compress`` loop)
and until every summary is the model's (lossless: then ``finish_summaries()``; hermes-lcm:
the same as fits, its calls are made inside ``compress``), and the model calls made; a
summary hermes-lcm wrote with its deterministic truncation (escalation level 3, when its
model calls failed: none is the model's) is said in the row. The other rows keep the instant
summarizer.

Hermes Agent itself is not needed: when ``agent.context_engine`` cannot be imported, a
stand-in base class takes its place (hermes-lcm's own CI does the same). tiktoken is not a
Hermes dependency, so hermes-lcm counts tokens by characters here, as in a plain Hermes
install.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from hermes_lcm import SESSION, HermesHost, HermesLcm, load_hermes_lcm
from lossless import Config, Engine
from lossless.summarize import ScriptedSummarizer
from lossless.toolbox import ToolScope, call_json

from common import (
    corpus_messages,
    load_average,
    machine,
    percentiles,
    revision,
    save,
    text_messages,
)
from turn import BUDGET, fill, model_server, provider_config, sized

CHUNK = 5_000


def open_lossless(db: Path) -> Engine:
    return Engine.open(db, config=Config(), summarizer=ScriptedSummarizer(default=sized))


def lossless_search(engine: Engine, query: str, **options: Any) -> str:
    return call_json(
        lambda: ToolScope.of(engine, conversation=SESSION),
        "lcm_grep",
        {"pattern": query, **options},
    )


@dataclass(frozen=True)
class Search:
    """One search row: the *query*, lossless's ``lcm_grep`` *options* (hermes-lcm's call is
    always its default), whether lossless counts only its hits holding every word (those
    with no ``tier``: under ``sort="recency"``, the rows holding every word in their own
    text), and whether the two do the same work (else the row shows lossless alone)."""

    kind: str
    query: str
    options: dict[str, Any] = field(default_factory=dict)
    every_word: bool = False
    compared: bool = True

    def lossless_hits(self, answer: str) -> int:
        hits = json.loads(answer)["hits"]
        return sum(1 for h in hits if not (self.every_word and h.get("tier", 0)))


def searches(pair: str) -> list[Search]:
    """The search rows: a common word; a rare pair, every word on both sides; lossless's
    default ranked page for the same pair, on its own."""
    return [
        Search("common word", "error"),
        Search(
            "rare two words, every word",
            pair,
            {"sort": "recency"},
            every_word=True,
        ),
        Search("rare two words, lossless's ranked page", pair, compared=False),
    ]


# --- measuring ---------------------------------------------------------------------------------


def timed(action: Callable[[], Any]) -> float:
    """Milliseconds *action* took."""
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


T = TypeVar("T")


def each(action: Callable[[T], object], items: Iterable[T]) -> list[float]:
    """Milliseconds *action* took on each of *items*."""
    return [timed(partial(action, item)) for item in items]


def again(action: Callable[[], object], times: int) -> list[float]:
    """Milliseconds each of *times* calls of *action* took."""
    return [timed(action) for _ in range(times)]


def median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def bulk(peer: HermesLcm, work: Path, size: int, rounds: int) -> dict[str, Any]:
    messages = text_messages(size, seed=21)
    lossless_rates: list[float] = []
    with_catch_up: list[float] = []
    hermes_rates: list[float] = []
    for r in range(rounds):
        with open_lossless(work / f"bulk-l-{size}-{r}.db") as engine:
            started = time.perf_counter()
            for i in range(0, size, CHUNK):
                engine.ingest_batch(SESSION, messages[i : i + CHUNK])
            seconds = time.perf_counter() - started
            engine.store.catch_up_indexes()
            total = time.perf_counter() - started
        lossless_rates.append(size / seconds)
        with_catch_up.append(size / total)
        host = HermesHost(peer, work / f"bulk-h-{size}-{r}.db")
        started = time.perf_counter()
        for i in range(0, size, CHUNK):
            host.ingest(messages[i : i + CHUNK])
        hermes_rates.append(size / (time.perf_counter() - started))
        host.close()
    return {
        "messages": size,
        "lossless_msg_s": round(statistics.median(lossless_rates)),
        "lossless_with_catch_up_msg_s": round(statistics.median(with_catch_up)),
        "hermes_lcm_msg_s": round(statistics.median(hermes_rates)),
        "runs": {"lossless": lossless_rates, "hermes_lcm": hermes_rates},
    }


def fill_hermes(host: HermesHost, messages: list[dict[str, str]]) -> None:
    """The history at a host's pace: the list grows by the compression threshold's worth of
    tokens, then Hermes calls ``compress`` once, and so on; the rest is stored at the end.
    (Once hermes-lcm's summary message alone is over the threshold, a real host would call
    ``compress`` on every turn; the fill spares it that, so its history is built cheaper than
    a host would build it, never dearer.)"""
    grown = 0
    for message in messages:
        host.messages.append(dict(message))
        tokens = int(host.peer.tokens.count_message_tokens(message))
        host.tokens += tokens
        grown += tokens
        if grown >= host.engine.threshold_tokens:
            host.messages = host.engine.compress(host.messages, current_tokens=host.tokens)
            host.tokens = host.count(host.messages)
            grown = 0
    host.engine._ingest_messages(host.messages)


def turns_and_assembly(
    peer: HermesLcm, work: Path, size: int, turns: int, rounds: int, repeat: int, budget: int
) -> dict[str, Any]:
    engine = open_lossless(work / f"turn-l-{size}.db")
    host = HermesHost(peer, work / f"turn-h-{size}.db", window=budget)
    try:
        started = time.perf_counter()
        fill(engine, SESSION, size, budget)
        fill_l = time.perf_counter() - started
        filler = text_messages(min(size, 20_000), seed=11)  # turn.fill's history
        history = [filler[i % len(filler)] for i in range(size)]
        started = time.perf_counter()
        fill_hermes(host, history)
        fill_h = time.perf_counter() - started
        new = text_messages(turns * rounds * 2, seed=12)
        per: dict[str, list[dict[str, float]]] = {"lossless": [], "hermes_lcm": []}

        def lossless_turn(pair: list[dict[str, str]]) -> object:
            return engine.after_turn(SESSION, pair, token_budget=budget)

        host.compressions = 0
        for r in range(rounds):
            pairs = [new[2 * (r * turns + t) : 2 * (r * turns + t) + 2] for t in range(turns)]
            per["lossless"].append(percentiles(each(lossless_turn, pairs)))
            per["hermes_lcm"].append(percentiles(each(host.turn, pairs)))
        filled = partial(engine.assemble, SESSION, budget, format="openai")
        unfilled = partial(engine.assemble, SESSION, budget, format="openai", fill=False)
        assembly: dict[str, list[float]] = {
            "lossless": [],
            "lossless_unfilled": [],
            "hermes_lcm": [],
        }
        for _ in range(rounds):
            assembly["lossless"].append(percentiles(again(filled, repeat))["p50_ms"])
            assembly["lossless_unfilled"].append(percentiles(again(unfilled, repeat))["p50_ms"])
            assembly["hermes_lcm"].append(percentiles(again(host.assemble, repeat))["p50_ms"])
        lost, leaves = host.lost_lineage()
        return {
            "stored": size,
            "turns_per_round": turns,
            "fill_s": {"lossless": round(fill_l, 1), "hermes_lcm": round(fill_h, 1)},
            **{
                f"{who}_{q}": median([p[f"{q}_ms"] for p in per[who]])
                for who in per
                for q in ("p50", "p99")
            },
            "assembly_p50_ms": {who: median(v) for who, v in assembly.items()},
            "hermes_lcm_messages_in_list": len(host.messages),
            "hermes_lcm_tokens_in_list": host.tokens,
            "hermes_lcm_compress_calls_in_turns": host.compressions,
            "window": budget,
            "hermes_lcm_leaf_summaries_without_sources": [lost, leaves],
            "rounds": per,
        }
    finally:
        engine.close()
        host.close()


def rare_pair(messages: list[dict[str, str]]) -> str:
    """Two words each in 2-10 of *messages*, found together in one of them."""
    words = [set(re.findall(r"[a-z]+", m["content"].lower())) for m in messages]
    df = Counter(w for ws in words for w in ws)
    for ws in words:
        rare = sorted(w for w in ws if 2 <= df[w] <= 10 and len(w) > 4)
        if len(rare) >= 2:
            return f"{rare[0]} {rare[1]}"
    raise RuntimeError("no rare pair of words in the corpus")


def search(
    peer: HermesLcm, work: Path, size: int, rounds: int, repeat: int, rows: list[Search]
) -> dict[str, Any]:
    corpus = corpus_messages(size)
    engine = open_lossless(work / f"search-l-{size}.db")
    host = HermesHost(peer, work / f"search-h-{size}.db")
    try:
        for i in range(0, size, CHUNK):
            engine.ingest_batch(SESSION, corpus[i : i + CHUNK])
            engine.compact(SESSION, until=BUDGET)
        fill_hermes(host, corpus)
        out: dict[str, Any] = {
            "stored": size,
            "queries": {r.kind: {"query": r.query, "lossless_options": r.options} for r in rows},
        }
        first = rows[0]
        out["first_search_ms"] = {
            "lossless": round(
                timed(partial(lossless_search, engine, first.query, **first.options)), 2
            ),
            "hermes_lcm": round(timed(partial(host.search, first.query)), 2),
        }
        for r in rows:
            ours = partial(lossless_search, engine, r.query, **r.options)
            theirs = partial(host.search, r.query)
            samples: dict[str, list[float]] = {"lossless": []}
            if r.compared:
                samples["hermes_lcm"] = []
            for _ in range(rounds):
                samples["lossless"].append(percentiles(again(ours, repeat))["p50_ms"])
                if r.compared:
                    samples["hermes_lcm"].append(percentiles(again(theirs, repeat))["p50_ms"])
            out[r.kind] = {who: median(v) for who, v in samples.items()}
            out[r.kind]["hits"] = {"lossless": r.lossless_hits(ours())}
            if r.compared:
                out[r.kind]["hits"]["hermes_lcm"] = len(json.loads(theirs())["results"])
        return out
    finally:
        engine.close()
        host.close()


def backlog(peer: HermesLcm, work: Path, size: int, rounds: int) -> dict[str, Any]:
    messages = text_messages(size, seed=13)
    seconds: dict[str, list[float]] = {"lossless": [], "hermes_lcm": []}
    calls: dict[str, int] = {}
    for r in range(rounds):
        summarizer = ScriptedSummarizer(default=sized)
        with Engine.open(
            work / f"backlog-l-{size}-{r}.db", config=Config(), summarizer=summarizer
        ) as engine:
            for i in range(0, size, CHUNK):
                engine.ingest_batch(SESSION, messages[i : i + CHUNK])
            seconds["lossless"].append(timed(partial(engine.compact, SESSION)) / 1000)
        calls["lossless"] = summarizer.calls
        host = HermesHost(peer, work / f"backlog-h-{size}-{r}.db")
        host.ingest(messages)
        host.tokens = host.count(host.messages)
        peer.calls = 0
        seconds["hermes_lcm"].append(timed(host.compress_fully) / 1000)
        calls["hermes_lcm"] = peer.calls
        host.close()
    return {
        "backlog": size,
        "lossless_s": median(seconds["lossless"]),
        "hermes_lcm_s": median(seconds["hermes_lcm"]),
        "summarizer_calls": calls,
        "runs": seconds,
    }


def _asked(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """The model requests *requests* made: how many, and the output caps they asked for."""
    caps = [
        int(r["body"].get("max_tokens") or r["body"].get("max_completion_tokens") or 0)
        for r in requests
        if r["body"]
    ]
    # what the model reads, a token per four characters (as the server counts it)
    read = [-(-len(json.dumps(r["body"].get("messages"))) // 4) for r in requests if r["body"]]
    return {
        "requests": len(caps),
        "max_tokens_mean": round(statistics.mean(caps)) if caps else 0,
        "prompt_tokens_max": max(read, default=0),
    }


def quiet_abandoned(server: Any) -> None:
    """*server* says nothing of an answer whose client had gone (hermes-lcm gives a summary
    call up after its timeout; the server still answers it later, to a closed socket)."""
    report = server.httpd.handle_error

    def handle_error(request: Any, address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            report(request, address)

    server.httpd.handle_error = handle_error


def backlog_at_pace(
    peer: HermesLcm, work: Path, size: int, rounds: int, server: Any, concurrency: int
) -> dict[str, Any]:
    """One compaction of a *size*-message backlog by each engine, both summarizing through
    *server* (a ``SummaryServer``): the seconds until the context fits and until every
    summary is the model's, and the model calls."""
    messages = text_messages(size, seed=13)
    runs: dict[str, list[dict[str, Any]]] = {"lossless": [], "hermes_lcm": []}
    for r in range(rounds):
        config = provider_config("openai", concurrency)
        with Engine.open(work / f"pace-l-{size}-{r}.db", config=config) as engine:
            engine.finish_elsewhere(lambda conversation_id: None)  # finished below, timed
            for i in range(0, size, CHUNK):
                engine.ingest_batch(SESSION, messages[i : i + CHUNK])
            seen = len(server.requests)
            server.in_flight_max = 0
            started = time.perf_counter()
            report = engine.compact(SESSION)
            fits = time.perf_counter() - started
            during_compact = len(server.requests) - seen
            finished = engine.finish_summaries(SESSION)
            final = time.perf_counter() - started
            pending = engine.pending_summaries()
            runs["lossless"].append(
                {
                    "fits_s": round(fits, 2),
                    "all_final_s": round(final, 1),
                    "passes": len(report.passes),
                    "model_calls": finished.calls,
                    "requests_during_compact": during_compact,
                    **_asked(server.requests[seen:]),
                    "finished": finished.finished,
                    "kept_offline": finished.kept_offline,
                    "left": finished.left,
                    "errors": finished.errors[:3],
                    "provisional_at_end": pending["provisional"],
                    "concurrency": concurrency,
                    "in_flight_max": server.in_flight_max,
                }
            )
        host = HermesHost(peer, work / f"pace-h-{size}-{r}.db")
        host.ingest(messages)
        host.tokens = host.count(host.messages)
        tokens_before = host.tokens
        peer.use_model(server.url + "/v1")
        peer.calls = 0
        peer.levels.clear()
        seen = len(server.requests)
        server.in_flight_max = 0
        try:
            started = time.perf_counter()
            compress_calls = host.compress_fully()
            seconds = time.perf_counter() - started
        finally:
            peer.use_model(None)
        runs["hermes_lcm"].append(
            {
                "fits_s": round(seconds, 2),
                "all_final_s": round(seconds, 1),
                "compress_calls": compress_calls,
                "model_calls": peer.calls,
                **_asked(server.requests[seen:]),
                "failed_calls": len(peer.failures),
                "failures": peer.failures[:3],
                "summaries_by_level": dict(sorted(peer.levels.items())),
                "in_flight_max": server.in_flight_max,
                "list_tokens": [tokens_before, host.tokens],
            }
        )
        host.close()
    return {
        "backlog": size,
        **{
            f"{who}_{what}": median([run[what] for run in runs[who]])
            for who in runs
            for what in ("fits_s", "all_final_s")
        },
        "runs": runs,
    }


# --- the table ---------------------------------------------------------------------------------


def row(label: str, ours: float, theirs: float, unit: str, higher_is_better: bool) -> str:
    ratio = ours / theirs if higher_is_better else theirs / ours
    flag = "" if ratio >= 1 else "  <- lossless behind"
    return f"| {label} | {ours:,.4g} {unit} | {theirs:,.4g} {unit} | {ratio:.2f}x{flag} |"


def alone(label: str, ours: float, unit: str) -> str:
    """A row of lossless's own, with nothing of hermes-lcm's to compare it with."""
    return f"| {label} | {ours:,.4g} {unit} | — | not the same work |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hermes-lcm", help="a checkout of hermes-lcm (its repository root)")
    parser.add_argument("--bulk", default="10000,100000", help="messages per bulk ingest")
    parser.add_argument("--sizes", default="10000,100000", help="stored before the turns")
    parser.add_argument("--turns", type=int, default=100, help="turns timed per round")
    parser.add_argument("--search-sizes", default="10000,100000", help="corpus sizes searched")
    parser.add_argument("--backlogs", default="10000,40000,100000", help="uncompacted backlogs")
    parser.add_argument(
        "--budget", type=int, default=BUDGET, help="the window of the turns (both engines)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    parser.add_argument("--repeat", type=int, default=50, help="calls per search/assembly round")
    parser.add_argument(
        "--summarizer-latency",
        metavar="TTFT,TPS",
        help="the backlog rows through a model at this pace (seconds to the first token, tokens"
        " a second), a local server speaking OpenAI Chat Completions, for both engines",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="lossless's model calls at once with --summarizer-latency (guards.concurrency)",
    )
    args = parser.parse_args()
    peer = load_hermes_lcm(args.hermes_lcm)
    if isinstance(peer, str):
        print(f"peers.py: skipped, {peer}")
        return

    def ints(text: str) -> list[int]:
        return [int(s) for s in text.split(",") if s]

    work = Path(tempfile.mkdtemp(prefix="lossless-peers-"))
    results: dict[str, Any] = {
        "lossless": revision(),
        "hermes_lcm": peer.version,
        "hermes_base_class": peer.base,
        "load_before": load_average(),
        "bulk": [],
        "turn": [],
        "search": [],
        "backlog": [],
    }
    print(f"lossless {results['lossless']} against hermes-lcm {peer.version} ({peer.base});")
    print(
        f"load {results['load_before']}, {machine()['cpu']}, {machine()['cores']} cores", flush=True
    )
    table: list[str] = []
    try:
        for size in ints(args.bulk):
            b = bulk(peer, work, size, args.rounds)
            results["bulk"].append(b)
            table.append(
                row(
                    f"bulk ingest, {size:,} messages",
                    b["lossless_msg_s"],
                    b["hermes_lcm_msg_s"],
                    "msg/s",
                    True,
                )
            )
            table.append(
                row(
                    f"bulk ingest, {size:,}, lossless with its index catch-up",
                    b["lossless_with_catch_up_msg_s"],
                    b["hermes_lcm_msg_s"],
                    "msg/s",
                    True,
                )
            )
            print(table[-2], table[-1], sep="\n", flush=True)
        for size in ints(args.sizes):
            t = turns_and_assembly(
                peer, work, size, args.turns, args.rounds, args.repeat, args.budget
            )
            results["turn"].append(t)
            for q in ("p50", "p99"):
                table.append(
                    row(
                        f"a turn at {size:,} stored ({args.budget // 1000}k window), {q}",
                        t[f"lossless_{q}"],
                        t[f"hermes_lcm_{q}"],
                        "ms",
                        False,
                    )
                )
            a = t["assembly_p50_ms"]
            table.append(
                row(f"assembly at {size:,}, p50", a["lossless"], a["hermes_lcm"], "ms", False)
            )
            table.append(
                row(
                    f"assembly at {size:,}, lossless fill=False (as for Hermes), p50",
                    a["lossless_unfilled"],
                    a["hermes_lcm"],
                    "ms",
                    False,
                )
            )
            print(*table[-4:], sep="\n", flush=True)
            lost, leaves = t["hermes_lcm_leaf_summaries_without_sources"]
            print(
                f"  hermes-lcm: compress called in {t['hermes_lcm_compress_calls_in_turns']} of"
                f" {args.turns * args.rounds} turns; the host's list holds"
                f" {t['hermes_lcm_tokens_in_list']:,} tokens for a {args.budget:,}-token window;"
                f" {lost} of {leaves} leaf summaries record no source message",
                flush=True,
            )
        rows: list[Search] = []
        for size in ints(args.search_sizes):
            if not rows:
                rows = searches(rare_pair(corpus_messages(10_000)))
            s = search(peer, work, size, args.rounds, args.repeat, rows)
            results["search"].append(s)
            f = s["first_search_ms"]
            table.append(
                row(
                    f"first search after filling {size:,}",
                    f["lossless"],
                    f["hermes_lcm"],
                    "ms",
                    False,
                )
            )
            for r in rows:
                got, hits = s[r.kind], s[r.kind]["hits"]
                if not r.compared:
                    table.append(
                        alone(
                            f"search {r.kind} ({r.query}) at {size:,}, p50; hits"
                            f" {hits['lossless']} (default relevance, a page of up to 20,"
                            " rows matching only some of the words ranked too)",
                            got["lossless"],
                            "ms",
                        )
                    )
                    continue
                table.append(
                    row(
                        f"search {r.kind} ({r.query}) at {size:,}, p50; hits"
                        f" {hits['lossless']} / {hits['hermes_lcm']}"
                        + (
                            " (lossless "
                            + ", ".join(f"{k}={v}" for k, v in r.options.items())
                            + ", its hits holding every word)"
                            if r.options
                            else ""
                        ),
                        got["lossless"],
                        got["hermes_lcm"],
                        "ms",
                        False,
                    )
                )
                if r.every_word and hits["lossless"] != hits["hermes_lcm"]:
                    print(
                        f"  hit counts differ for {r.query!r} at {size:,}: lossless"
                        f" {hits['lossless']}, hermes-lcm {hits['hermes_lcm']}",
                        flush=True,
                    )
            print(*table[-1 - len(rows) :], sep="\n", flush=True)
        with model_server(args.summarizer_latency) as server:
            if server is not None:
                quiet_abandoned(server)
            for size in ints(args.backlogs):
                if server is None:
                    c = backlog(peer, work, size, args.rounds)
                    results["backlog"].append(c)
                    table.append(
                        row(
                            f"full compaction of a {size:,} backlog",
                            c["lossless_s"],
                            c["hermes_lcm_s"],
                            "s",
                            False,
                        )
                    )
                    print(table[-1], f"  (summarizer calls {c['summarizer_calls']})", flush=True)
                    continue
                c = backlog_at_pace(peer, work, size, args.rounds, server, args.concurrency)
                c["latency"] = args.summarizer_latency
                results["backlog"].append(c)
                ttft, tps = args.summarizer_latency.split(",")
                pace = f"a model at {ttft} s + {tps} tokens/s"
                ours, theirs = c["runs"]["lossless"][-1], c["runs"]["hermes_lcm"][-1]
                levels = theirs["summaries_by_level"]
                truncated = (
                    f" (hermes-lcm: {levels[3]} of {sum(levels.values())} summaries its"
                    f" truncation, no model's; {theirs['failed_calls']} of"
                    f" {theirs['model_calls']} model calls failed)"
                    if levels.get(3)
                    else ""
                )
                for what, said in (
                    ("fits_s", "the context fits"),
                    ("all_final_s", "all final" + truncated),
                ):
                    table.append(
                        row(
                            f"compaction of a {size:,} backlog, {pace}: until {said}",
                            c[f"lossless_{what}"],
                            c[f"hermes_lcm_{what}"],
                            "s",
                            False,
                        )
                    )
                print(
                    *table[-2:],
                    f"  lossless: {ours['model_calls']} model calls ({ours['requests']} requests,"
                    f" mean max_tokens {ours['max_tokens_mean']}, largest prompt"
                    f" {ours['prompt_tokens_max']:,} tokens), concurrency"
                    f" {ours['concurrency']} (at most {ours['in_flight_max']} in flight),"
                    f" {ours['passes']} passes, {ours['requests_during_compact']} requests"
                    f" during compact(), {ours['finished']} summaries finished,"
                    f" {ours['kept_offline']} kept offline, {ours['left']} left; provisional at"
                    f" the end: {ours['provisional_at_end']}",
                    f"  hermes-lcm: {theirs['model_calls']} model calls ({theirs['requests']}"
                    f" requests, mean max_tokens {theirs['max_tokens_mean']}, largest prompt"
                    f" {theirs['prompt_tokens_max']:,} tokens,"
                    f" {theirs['failed_calls']} failed), {theirs['compress_calls']} compress"
                    f" calls, summaries by escalation level {theirs['summaries_by_level']}"
                    " (3: truncation, no model), the host's list"
                    f" {theirs['list_tokens'][0]:,} →"
                    f" {theirs['list_tokens'][1]:,} tokens"
                    + (f"; first failure: {theirs['failures'][0]}" if theirs["failures"] else ""),
                    sep="\n",
                    flush=True,
                )
                if ours["provisional_at_end"]:
                    print(f"  lossless left {ours['provisional_at_end']} provisional summaries")
        results["load_after"] = load_average()
        print()
        print(
            f"lossless {results['lossless']} / hermes-lcm {peer.version};"
            f" load {results['load_before']} → {results['load_after']};"
            f" medians of {args.rounds} rounds; ratio > 1: lossless faster"
        )
        print("| workload | lossless | hermes-lcm | ratio |")
        print("|---|---|---|---|")
        print("\n".join(table))
        results["table"] = table
        print(f"results: {save('peers', results)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
