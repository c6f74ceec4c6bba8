"""Helpers shared by the benchmarks: machine facts, timing summaries, result files."""

from __future__ import annotations

import json
import os
import platform
import random
import sqlite3
import statistics
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"

_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "deploy",
    "config",
    "error",
    "file",
    "path",
    "build",
    "test",
    "server",
    "client",
    "token",
    "budget",
    "summary",
    "python",
    "sqlite",
    "index",
    "query",
    "result",
    "tool",
    "call",
    "retry",
    "cache",
    "latency",
    "decision",
    "branch",
    "commit",
    "review",
    "schema",
    "migration",
    "request",
    "response",
    "timeout",
    "worker",
    "queue",
]


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next(
                (line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")),
                platform.processor(),
            )
    except OSError:
        model = platform.processor()
    return {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "cpu": model,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
    }


def text_messages(n: int, *, seed: int = 1, chars: int = 200) -> list[dict[str, str]]:
    """*n* chat messages of about *chars* characters, alternating user and assistant."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(_WORDS))
        out.append(
            {"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(words)[:chars]}
        )
    return out


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50/p95/p99 and mean of a list of milliseconds."""
    ordered = sorted(samples_ms)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50_ms": round(q[49], 4),
        "p95_ms": round(q[94], 4),
        "p99_ms": round(q[98], 4),
        "mean_ms": round(statistics.fmean(ordered), 4),
    }


def save(name: str, data: dict[str, Any]) -> Path:
    """Write *data* (with the machine facts) to ``benchmarks/out/<name>.json``."""
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **data}, indent=2))
    return path
