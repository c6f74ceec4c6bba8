"""The LoCoMo dev conversations as the benchmarks read them (``recall.py``).

``../shared/data/locomo/locomo-dev.json`` (or ``--locomo`` / ``LOSSLESS_LOCOMO``) is read where
it lies and never copied into the repository; a benchmark skips with a clear line when it is
absent. Each turn becomes one message, ``"Speaker: text"`` (with the photo's caption when the
turn shares one), speaker A as ``user`` and speaker B as ``assistant``, timed at its session's
date plus 30 seconds a turn, with its ``dia_id`` (``D3:7``) as the external id.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lossless.timestamps import format_ts, parse_ts
from lossless.tokens import estimate_tokens

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = Path(
    os.environ.get(
        "LOSSLESS_LOCOMO", ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json"
    )
)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_WORD = re.compile(r"[a-z0-9']+")
_SENT = re.compile(r"(?<=[.!?])\s+")

#: One turn: (dia_id, message, created_at as ISO text).
Turn = tuple[str, dict[str, str], str]


def load(path: Path, samples: str = "") -> list[dict[str, Any]] | None:
    """The conversations at *path* (only those named in *samples*, comma-separated, when
    given), or ``None`` with a line saying why the benchmark skips."""
    if not path.exists():
        print(f"LoCoMo skipped: {path} not found (set --locomo or LOSSLESS_LOCOMO)")
        return None
    wanted = {s for s in samples.split(",") if s}
    data = json.loads(path.read_text())
    return [s for s in data if not wanted or s["sample_id"] in wanted]


def _when(stamp: str) -> dt.datetime:
    """'1:56 pm on 8 May, 2023' as a UTC time."""
    moment = dt.datetime.strptime(stamp.strip(), "%I:%M %p on %d %B, %Y")
    return moment.replace(tzinfo=dt.UTC)


def messages(sample: dict[str, Any]) -> list[Turn]:
    """Every turn of the conversation, in order."""
    conv = sample["conversation"]
    out: list[Turn] = []
    n = 1
    while f"session_{n}" in conv:
        base = _when(conv[f"session_{n}_date_time"])
        for k, turn in enumerate(conv[f"session_{n}"]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            role = "user" if turn["speaker"] == conv["speaker_a"] else "assistant"
            stamp = format_ts(base + dt.timedelta(seconds=30 * k))
            out.append(
                (turn["dia_id"], {"role": role, "content": f"{turn['speaker']}: {text}"}, stamp)
            )
        n += 1
    return out


def evidence_ids(qa: dict[str, Any], known: set[str]) -> set[str]:
    """The question's evidence dia_ids that name a turn (a few entries are malformed, e.g.
    ``"D8:6; D9:17"``)."""
    found = {e.strip() for ev in qa.get("evidence", []) for e in re.split(r"[;,\s]+", ev)}
    return found & known


def questions(
    sample: dict[str, Any], turns: list[Turn]
) -> Iterator[tuple[dict[str, Any], set[str]]]:
    """Each question with evidence, and its evidence dia_ids."""
    known = {dia for dia, _, _ in turns}
    for qa in sample["qa"]:
        evidence = evidence_ids(qa, known)
        if evidence:
            yield qa, evidence


def turns_by_pair(engine: Any, conversation: Any, turns: list[Turn], budget: int) -> None:
    """Replay *turns* as a host does, turn by turn (speaker A, then B: one ``after_turn``),
    with *budget* as the model's window (compaction runs when the context is due)."""
    pending: list[Any] = []
    for dia, msg, stamp in turns:
        if msg["role"] == "user" and pending:
            engine.after_turn(conversation, pending, token_budget=budget)
            pending = []
        pending.append(engine.normalize(msg, external_id=dia, created_at=parse_ts(stamp)))
    if pending:
        engine.after_turn(conversation, pending, token_budget=budget)


def norm(text: str) -> str:
    """Lowercase words, one space apart: what verbatim presence compares."""
    return " ".join(_WORD.findall(text.lower()))


def verbatim_present(turn: str, context_norm: str) -> bool:
    """Whether a sentence of four or more words of *turn* (or the whole turn) is in the
    normalized context."""
    for sentence in _SENT.split(turn):
        words = norm(sentence)
        if len(words.split()) >= 4 and words in context_norm:
            return True
    whole = norm(turn)
    return bool(whole) and whole in context_norm


def window_text(turns: list[Turn], budget: int) -> tuple[str, int]:
    """The newest turns that fit *budget* tokens, in order, and the tokens they take: the
    sliding window a host without lossless keeps."""
    window: list[str] = []
    used = 0
    for _, msg, _ in reversed(turns):
        cost = estimate_tokens(msg["content"])
        if used + cost > budget:
            break
        window.append(msg["content"])
        used += cost
    return "\n".join(reversed(window)), used
