"""Recall on LoCoMo: does a search find what was said, and does the assembled context hold it?

    python benchmarks/recall.py                     # the six dev conversations
    python benchmarks/recall.py --samples conv-26 --budgets 8000
    python benchmarks/recall.py --skip-context      # the search part only (seconds)

The LoCoMo conversations (``locomo.py``; skipped with a clear line when the data is absent)
are each stored turn by turn as messages, with their session dates as the messages' times.

**Search.** For every question with evidence, the question is typed as it is into
``Engine.grep`` — with the CLI's defaults (``lossless grep QUESTION --limit 10``: whatever
``lcm_grep`` declares), and then with each ``sort`` — and recall@5 and recall@10 count the
questions with an evidence turn among the first 5 and 10 hits. The baselines, computed in the
same run over the same turns: plain BM25 (``rank_bm25.BM25Okapi``, default parameters, lowercase
words) and BM25 over the terms of SQLite's ``porter unicode61`` tokenizer, which separates what
stemming brings from what the ranking does.

**Context.** Each conversation is replayed as a host does (one ``after_turn`` per exchange,
with the budget as the model's window, compaction as configured by default and the offline
extractive summarizer), and then ``Engine.assemble`` is asked for the context at that budget.
An evidence turn is present when a sentence of four or more of its words (or the whole turn)
appears in the assembled text verbatim. The baseline is a sliding window: the newest turns
that fit the same budget. Reported for 4k, 8k and 16k tokens; ``prompted`` is the same
context assembled for each question as the next request (``Engine.assemble(...,
prompt=QUESTION)``: prompt-aware assembly), with the mean time of those assemblies.

Per LoCoMo category: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.retrieval.grep import GrepError
from lossless.retrieval.tools import TOOLS
from lossless.timestamps import parse_ts
from lossless.tokens import estimate_tokens

import locomo
from common import create_pg_schema, drop_pg_schema, revision, save

K = (5, 10)
BASELINES = ("bm25", "bm25_porter")


def tokenize(text: str) -> list[str]:
    """The plain baseline's tokenization: lowercase words (no stemming, no stop words)."""
    return locomo.norm(text).replace("'", " ").split()


def porter_tokenize(texts: list[str]) -> list[list[str]]:
    """Each text as the terms SQLite's ``porter unicode61`` tokenizer makes of it, in order —
    for a BM25 baseline that stems as lossless's word index does."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", enumerate(texts, 1))
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    docs: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for term, doc, offset in conn.execute("SELECT term, doc, offset FROM v"):
        docs[doc].append((offset, term))
    conn.close()
    return [[term for _, term in sorted(docs[i])] for i in range(1, len(texts) + 1)]


def bm25_ranking(model: Any, query: list[str], k: int) -> list[int]:
    """Indexes of the *k* best-scoring turns (ties: the earlier turn first)."""
    scores = model.get_scores(query)
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def first_rank(ranked: list[str], evidence: set[str]) -> int | None:
    """The 1-based position of the first evidence turn in *ranked*, or ``None``."""
    return next((n for n, dia in enumerate(ranked, 1) if dia in evidence), None)


def rankers() -> dict[str, dict[str, Any]]:
    """The ``Engine.grep`` settings compared: the CLI's defaults, then each sort."""
    declared = {p.name: p.default for p in TOOLS["lcm_grep"].params}
    sorts = next(p.choices for p in TOOLS["lcm_grep"].params if p.name == "sort") or ()
    out: dict[str, dict[str, Any]] = {f"defaults ({declared['sort']})": {}}
    for sort in sorts:
        out[f"sort={sort}"] = {"sort": sort}
    return out


def store_for(work: Path, name: str, backend: str) -> str:
    """Where a conversation's store goes: a SQLite file in *work*, or a PostgreSQL schema of
    its own (``LOSSLESS_BENCH_PG``'s database), made new."""
    if backend == "sqlite":
        return str(work / f"{name}.db")
    schema = "lossless_recall_" + name.replace("-", "_")
    drop_pg_schema(schema)
    return create_pg_schema(schema)


def search_sample(
    work: Path, sample: dict[str, Any], k: int, backend: str = "sqlite"
) -> dict[str, Any]:
    """Every ranker's first evidence position per question of one conversation."""
    from rank_bm25 import BM25Okapi

    turns = locomo.messages(sample)
    dias = [dia for dia, _, _ in turns]
    texts = [msg["content"] for _, msg, _ in turns]
    sid = sample["sample_id"]
    settings = rankers()
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    grep_ms: dict[str, float] = defaultdict(float)
    with Engine.open(store_for(work, f"search-{sid}", backend), config=Config()) as engine:
        norms = [
            engine.normalize(msg, external_id=dia, created_at=parse_ts(stamp))
            for dia, msg, stamp in turns
        ]
        ingested = engine.ingest_batch(sid, norms)
        dia_of = {f"msg#{m}": dia for m, dia in zip(ingested.message_ids, dias, strict=True)}
        engine.grep("warm up", conversation=sid, limit=1)
        plain = BM25Okapi([tokenize(t) for t in texts])
        stemmed = BM25Okapi(porter_tokenize(texts))
        asked = list(locomo.questions(sample, turns))
        stemmed_questions = porter_tokenize([qa["question"] for qa, _ in asked])
        for (qa, evidence), stemmed_question in zip(asked, stemmed_questions, strict=True):
            row: dict[str, Any] = {"category": int(qa["category"])}
            for name, options in settings.items():
                started = time.perf_counter()
                try:
                    hits = engine.grep(qa["question"], conversation=sid, limit=k, **options).hits
                except GrepError as exc:
                    errors.append(f"{name}: {qa['question']!r}: {exc}")
                    hits = []
                grep_ms[name] += (time.perf_counter() - started) * 1000
                row[name] = first_rank([dia_of.get(h.id, "") for h in hits], evidence)
            for name, model, query in (
                ("bm25", plain, tokenize(qa["question"])),
                ("bm25_porter", stemmed, stemmed_question),
            ):
                row[name] = first_rank([dias[i] for i in bm25_ranking(model, query, k)], evidence)
            rows.append(row)
    return {
        "sample": sid,
        "turns": len(turns),
        "rows": rows,
        "errors": errors,
        "grep_ms_mean": {n: round(ms / max(1, len(rows)), 3) for n, ms in grep_ms.items()},
    }


def recall_at(rows: list[dict[str, Any]], name: str, k: int) -> float:
    """The share of *rows* whose first evidence position under *name* is within *k*."""
    found = sum(1 for r in rows if r[name] is not None and r[name] <= k)
    return round(found / len(rows), 3) if rows else 0.0


def assembled_text(
    engine: Engine, conversation: str, budget: int, prompt: str | None = None
) -> tuple[str, int]:
    """The text of the context ``Engine.assemble`` gives at *budget* (for the next request
    *prompt*, when given), and its tokens."""
    assembled = engine.assemble(conversation, budget, format="openai", prompt=prompt)
    parts: list[str] = []
    for message in assembled.messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [c.get("text", "") for c in content if isinstance(c, dict)]
    return "\n".join(parts), assembled.tokens


def context_sample(
    work: Path,
    sample: dict[str, Any],
    budget: int,
    config: Config | None = None,
    backend: str = "sqlite",
) -> dict[str, Any]:
    """Evidence present in the assembled context vs a sliding window, one conversation."""
    turns = locomo.messages(sample)
    by_id = {dia: msg["content"] for dia, msg, _ in turns}
    sid = sample["sample_id"]
    config = config or Config()
    store = store_for(work, f"context-{sid}-{budget}", backend)
    with Engine.open(store, config=config) as engine:
        engine.conversation(sid, create=True)
        locomo.turns_by_pair(engine, sid, turns, budget)
        text, tokens = assembled_text(engine, sid, budget)
        summaries = engine.assemble(sid, budget).summaries
        asked = list(locomo.questions(sample, turns))
        prompted: list[str] = []
        prompted_tokens: list[int] = []
        prompt_ms: list[float] = []
        for qa, _ in asked:
            started = time.perf_counter()
            said_text, said_tokens = assembled_text(engine, sid, budget, qa["question"])
            prompt_ms.append((time.perf_counter() - started) * 1000)
            prompted.append(locomo.norm(said_text))
            prompted_tokens.append(said_tokens)
    context = locomo.norm(text)
    window, window_tokens = locomo.window_text(turns, budget)
    window_norm = locomo.norm(window)
    rows = []
    for (qa, evidence), with_prompt in zip(asked, prompted, strict=True):
        said = [by_id[e] for e in evidence]

        def present(text: str, said: list[str] = said) -> int | None:
            return 1 if any(locomo.verbatim_present(t, text) for t in said) else None

        rows.append(
            {
                "category": int(qa["category"]),
                "lossless": present(context),
                "prompted": present(with_prompt),
                "window": present(window_norm),
            }
        )
    return {
        "sample": sid,
        "budget": budget,
        "context_tokens": tokens,
        "prompted_tokens_max": max(prompted_tokens, default=0),
        "prompted_ms_mean": round(sum(prompt_ms) / max(1, len(prompt_ms)), 2),
        "context_summaries": summaries,
        "window_tokens": window_tokens,
        "raw_tokens": sum(estimate_tokens(m["content"]) for _, m, _ in turns),
        "rows": rows,
    }


def table(title: str, rows: list[dict[str, Any]], names: list[str], k: int) -> dict[str, Any]:
    """Print and return recall@*k* of each of *names*, overall and per category."""
    by_category: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_category[r["category"]].append(r)
    groups: list[tuple[str, list[dict[str, Any]]]] = [("overall", rows)]
    groups += [(locomo.CATEGORIES.get(c, str(c)), rs) for c, rs in sorted(by_category.items())]
    print(title)
    print(f"{'':22}" + "".join(f"{label:>13}" for label, _ in groups))
    print(f"{'questions':22}" + "".join(f"{len(group):>13}" for _, group in groups))
    out: dict[str, Any] = {}
    for name in names:
        figures = {label: recall_at(group, name, k) for label, group in groups}
        out[name] = figures
        print(f"{name:22}" + "".join(f"{figures[label]:>13.1%}" for label, _ in groups))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, default=locomo.LOCOMO)
    parser.add_argument("--samples", default="", help="comma-separated sample ids (default all)")
    parser.add_argument("--budgets", default="4000,8000,16000", help="context budgets, tokens")
    parser.add_argument("--skip-context", action="store_true", help="the search part only")
    parser.add_argument(
        "--prompt-share",
        type=float,
        default=Config().prompt_share,
        help="the prompt_share setting of the context part's prompted assemblies",
    )
    parser.add_argument("--skip-search", action="store_true", help="the context part only")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="where the stores live (postgres: LOSSLESS_BENCH_PG's database)",
    )
    args = parser.parse_args()
    data = locomo.load(args.locomo, args.samples)
    if data is None:
        return
    work = Path(tempfile.mkdtemp(prefix="lossless-recall-"))
    results: dict[str, Any] = {
        "revision": revision(),
        "conversations": len(data),
        "backend": args.backend,
    }
    try:
        if not args.skip_search:
            started = time.perf_counter()
            runs = [search_sample(work, sample, max(K), args.backend) for sample in data]
            rows = [r for run_ in runs for r in run_["rows"]]
            names = [*rankers(), *BASELINES]
            recall = {}
            for k in K:
                recall[f"@{k}"] = table(
                    f"\nSearch: LoCoMo recall@{k} ({len(rows)} questions with evidence,"
                    f" {len(data)} conversations)",
                    rows,
                    names,
                    k,
                )
            results["search"] = {
                "questions": len(rows),
                "recall": recall,
                "grep_ms_mean": {r["sample"]: r["grep_ms_mean"] for r in runs},
                "errors": [e for r in runs for e in r["errors"]],
                "seconds": round(time.perf_counter() - started, 1),
            }
            if results["search"]["errors"]:
                errors = results["search"]["errors"]
                print(f"{len(errors)} search(es) refused (counted as misses), e.g. {errors[0]}")
        if not args.skip_context:
            results["context"] = {}
            for budget in (int(b) for b in args.budgets.split(",") if b):
                started = time.perf_counter()
                config = Config(prompt_share=args.prompt_share)
                runs = [
                    context_sample(work, sample, budget, config, args.backend) for sample in data
                ]
                rows = [r for run_ in runs for r in run_["rows"]]
                mean = sum(r["context_tokens"] for r in runs) / len(runs)
                summaries = sum(r["context_summaries"] for r in runs) / len(runs)
                figures = table(
                    f"\nContext at {budget:,} tokens: evidence present (lossless uses"
                    f" {mean:,.0f} tokens, {summaries:.1f} summaries on average)",
                    rows,
                    ["lossless", "prompted", "window"],
                    1,
                )
                results["context"][str(budget)] = {
                    "evidence": figures,
                    "conversations": [{k: v for k, v in r.items() if k != "rows"} for r in runs],
                    "seconds": round(time.perf_counter() - started, 1),
                }
        print(f"results: {save('recall', results)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
