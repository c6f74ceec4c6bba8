"""Retrieval quality on LoCoMo: does ``lcm_grep`` find an evidence turn in its top 10?

    python benchmarks/recall.py                    # the six dev conversations, k = 10
    python benchmarks/recall.py --k 5 --samples conv-26

Each LoCoMo conversation (``../shared/data/locomo/locomo-dev.json``; skipped with a message
when absent, never copied into the repository) is ingested turn by turn as messages — the same
messages as ``quality.py`` builds ("Speaker: text", with the photo caption), each with its
``dia_id`` as the external id — into a store of its own. Then, for every question with
evidence, ``Engine.grep(question, mode="full_text", sort="relevance", scope="messages",
limit=k)`` (``lcm_grep`` with the question's words as the query) is asked: is one of the
question's evidence turns among the hits?

The baseline is plain BM25 (``rank_bm25.BM25Okapi``, default parameters) over the same turn
texts of the same conversation, tokenized as lowercase words, with the question tokenized the
same way: recall@k of its top k. A second baseline, BM25 over the terms of SQLite's ``porter
unicode61`` tokenizer (the one lossless's full-text index uses), separates what stemming brings
from what the ranking does. Reported overall and per LoCoMo category (1 multi-hop,
2 temporal, 3 open-domain, 4 single-hop, 5 adversarial).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from lossless import Engine
from lossless.retrieval.grep import GrepError
from lossless.timestamps import parse_ts
from quality import LOCOMO, locomo_messages

from common import revision, save

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """The baseline's tokenization: lowercase words (no stemming, no stop words)."""
    return _TOKEN.findall(text.lower())


def porter_tokenize(texts: list[str]) -> list[list[str]]:
    """Each text as the terms SQLite's ``porter unicode61`` tokenizer (lossless's full-text
    index) makes of it, in order — for a BM25 baseline that stems as the index does."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", enumerate(texts, 1))
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    docs: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for term, doc, offset in conn.execute("SELECT term, doc, offset FROM v"):
        docs[doc].append((offset, term))
    conn.close()
    return [[term for _, term in sorted(docs[i])] for i in range(1, len(texts) + 1)]


def top_k(model: Any, query: list[str], k: int) -> list[int]:
    """Indexes of the *k* best-scoring turns (ties: the earlier turn first)."""
    scores = model.get_scores(query)
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def evidence_ids(qa: dict[str, Any], known: set[str]) -> set[str]:
    """The question's evidence dia_ids that name a turn (some entries are malformed)."""
    found = {e.strip() for ev in qa.get("evidence", []) for e in re.split(r"[;,\s]+", ev)}
    return found & known


def run_sample(work: Path, sample: dict[str, Any], k: int) -> dict[str, Any]:
    """The rankers on one conversation: per question (category, grep, bm25, bm25 porter)."""
    from rank_bm25 import BM25Okapi

    turns = locomo_messages(sample)
    dias = [dia for dia, _, _ in turns]
    texts = [msg["content"] for _, msg, _ in turns]
    with Engine.open(work / f"recall-{sample['sample_id']}.db") as engine:
        norms = [
            engine.normalize(msg, external_id=dia, created_at=parse_ts(stamp))
            for dia, msg, stamp in turns
        ]
        ingested = engine.ingest_batch(sample["sample_id"], norms)
        engine.store.catch_up_indexes()
        dia_of = {f"msg#{mid}": dia for mid, dia in zip(ingested.message_ids, dias, strict=True)}
        bm25 = BM25Okapi([tokenize(t) for t in texts])
        stemmed = BM25Okapi(porter_tokenize(texts))
        questions = [qa for qa in sample["qa"] if evidence_ids(qa, set(dias))]
        stemmed_questions = porter_tokenize([qa["question"] for qa in questions])
        results: list[tuple[int, bool, bool, bool]] = []
        errors: list[str] = []
        grep_ms = 0.0
        for qa, stemmed_question in zip(questions, stemmed_questions, strict=True):
            evidence = evidence_ids(qa, set(dias))
            started = time.perf_counter()
            try:
                hits = engine.grep(
                    qa["question"],
                    conversation=sample["sample_id"],
                    mode="full_text",
                    sort="relevance",
                    scope="messages",
                    limit=k,
                ).hits
            except GrepError as exc:
                errors.append(f"{qa['question']!r}: {exc}")
                hits = []
            grep_ms += (time.perf_counter() - started) * 1000
            grep_found = any(dia_of.get(h.id) in evidence for h in hits)
            bm25_found = any(dias[i] in evidence for i in top_k(bm25, tokenize(qa["question"]), k))
            stemmed_found = any(dias[i] in evidence for i in top_k(stemmed, stemmed_question, k))
            results.append((int(qa["category"]), grep_found, bm25_found, stemmed_found))
    return {
        "sample": sample["sample_id"],
        "turns": len(turns),
        "questions": len(results),
        "results": results,
        "grep_errors": errors,
        "grep_ms_mean": round(grep_ms / max(1, len(results)), 3),
    }


def share(results: list[tuple[int, bool, bool, bool]], column: int) -> float:
    return round(sum(r[column] for r in results) / len(results), 3) if results else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_data = Path(os.environ.get("LOSSLESS_LOCOMO", LOCOMO))
    parser.add_argument("--locomo", type=Path, default=default_data)
    parser.add_argument("--k", type=int, default=10, help="hits examined per question")
    parser.add_argument("--samples", default="", help="comma-separated sample ids (default all)")
    args = parser.parse_args()
    if not args.locomo.exists():
        print(f"LoCoMo skipped: {args.locomo} not found (set --locomo or LOSSLESS_LOCOMO)")
        return
    wanted = {s for s in args.samples.split(",") if s}
    data = [
        s for s in json.loads(args.locomo.read_text()) if not wanted or s["sample_id"] in wanted
    ]
    work = Path(tempfile.mkdtemp(prefix="lossless-recall-"))
    try:
        runs = [run_sample(work, sample, args.k) for sample in data]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    everything = [r for run in runs for r in run["results"]]
    by_category: dict[int, list[tuple[int, bool, bool, bool]]] = defaultdict(list)
    for r in everything:
        by_category[r[0]].append(r)
    errors = [e for run in runs for e in run["grep_errors"]]
    results: dict[str, Any] = {
        "revision": revision(),
        "k": args.k,
        "overall": {
            "questions": len(everything),
            "lcm_grep": share(everything, 1),
            "bm25": share(everything, 2),
            "bm25_porter": share(everything, 3),
            "grep_errors": len(errors),
        },
        "by_category": {
            str(c): {
                "name": CATEGORIES.get(c, "?"),
                "questions": len(rows),
                "lcm_grep": share(rows, 1),
                "bm25": share(rows, 2),
                "bm25_porter": share(rows, 3),
            }
            for c, rows in sorted(by_category.items())
        },
        "conversations": [
            {
                "sample": run["sample"],
                "turns": run["turns"],
                "questions": run["questions"],
                "lcm_grep": share(run["results"], 1),
                "bm25": share(run["results"], 2),
                "bm25_porter": share(run["results"], 3),
                "grep_ms_mean": run["grep_ms_mean"],
            }
            for run in runs
        ],
        "grep_errors": errors,
    }
    o = results["overall"]
    print(
        f"LoCoMo recall@{args.k} ({o['questions']} questions with evidence, "
        f"{len(runs)} conversations)"
    )
    print(f"{'':24} {'lcm_grep':>9} {'BM25':>9} {'BM25+porter':>12}")
    print(f"{'overall':24} {o['lcm_grep']:>9.1%} {o['bm25']:>9.1%} {o['bm25_porter']:>12.1%}")
    for c, row in results["by_category"].items():
        label = f"{c} {row['name']} ({row['questions']})"
        print(f"{label:24} {row['lcm_grep']:>9.1%} {row['bm25']:>9.1%} {row['bm25_porter']:>12.1%}")
    if errors:
        print(f"{len(errors)} question(s) refused by grep (counted as misses), e.g. {errors[0]}")
    print(f"results: {save('recall', results)}")


if __name__ == "__main__":
    main()
