"""Compaction quality, offline and deterministic.

    python benchmarks/quality.py                   # canaries + LoCoMo (when the data is there)
    python benchmarks/quality.py --skip-locomo

**Canaries.** Facts planted at known turns of long generated sessions ("the staging port for
<project> is 9xxx"), replayed turn by turn with a token budget and the extractive summarizer.
Reported per run: active canary recall (the fact is still in the active context, in a summary
or a message), retrieval canary recall (the fact's message is found by full-text search and is
reachable from the context through the DAG), post-compaction headroom (budget left after each
compaction, tokens and share), fresh-tail pressure (tail tokens / threshold tokens), repeated-
compaction risk (compactions fewer than 5 turns after the previous one), summarizer calls.

**LoCoMo.** The six dev conversations of LoCoMo (``../shared/data/locomo/locomo-dev.json``;
skipped with a message when absent) replayed at an 8,000-token budget. For each question, is
one of its evidence turns present in the active context: does a sentence of four or more words
of the turn (or the whole turn) appear in it verbatim? The baseline is a sliding window of the
newest turns that fit the same budget.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from lossless import Config, Engine
from lossless.compaction import fresh_tail_start
from lossless.replay import replay_messages
from lossless.sample import generate_session
from lossless.timestamps import format_ts, parse_ts
from lossless.tokens import estimate_tokens

from common import save

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json"
LOCOMO_CONFIG = Config()
_WORD = re.compile(r"[a-z0-9']+")
_SENT = re.compile(r"(?<=[.!?])\s+")


# --- shared helpers ------------------------------------------------------------------------


def context_text(engine: Engine, conversation_id: int) -> str:
    """The text the model would see: summaries and messages of the active context."""
    items = engine.context(conversation_id)
    ids = [i.message_id for i in items if i.message_id is not None]
    sums = [i.summary_id for i in items if i.summary_id is not None]
    texts = [m.content for m in engine.store.get_messages_by_id(ids)]
    texts += [s.content for s in engine.store.get_summaries(sums)]
    return "\n".join(texts)


def norm(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def verbatim_present(turn: str, context_norm: str) -> bool:
    for sentence in _SENT.split(turn):
        words = norm(sentence)
        if len(words.split()) >= 4 and words in context_norm:
            return True
    whole = norm(turn)
    return bool(whole) and whole in context_norm


# --- canaries ------------------------------------------------------------------------------


def canary_run(work: Path, turns: int, budget: int, seed: int) -> dict[str, Any]:
    canary_turns = [int(turns * f) for f in (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)]
    canaries = {
        t: f"The staging port for project {name} is {9000 + t}."
        for t, name in zip(
            canary_turns, ("amber", "basalt", "cobalt", "dahlia", "ember", "fjord"), strict=True
        )
    }
    source = Engine.open(work / f"canary-source-{turns}.db")
    turn = 0
    lines = []
    for obj in generate_session(turns, seed=seed, session_id="canary"):
        if obj.get("type") == "message" and obj["message"]["role"] == "user":
            if turn in canaries:
                obj["message"]["content"][0]["text"] += " Remember: " + canaries[turn]
            turn += 1
        lines.append(obj)
    path = work / f"canary-{turns}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    source.bootstrap(path)
    messages = source.messages("canary")
    source.close()
    engine = Engine.open(work / f"canary-{turns}.db")
    started = time.perf_counter()
    report = replay_messages(engine, "canary-replay", messages, budget)
    seconds = time.perf_counter() - started
    conv = report.conversation_id
    text = context_text(engine, conv)
    active = sum(1 for fact in canaries.values() if fact in text)
    retrievable = 0
    for fact in canaries.values():
        rows = engine.store.fetchall(
            "SELECT m.message_id FROM messages_fts f JOIN messages m ON m.message_id = f.rowid"
            " WHERE messages_fts MATCH ? AND m.conversation_id = ?",
            ('"' + fact.rstrip(".") + '"', conv),
        )
        if rows and _reachable(engine, conv, rows[0][0]):
            retrievable += 1
    threshold = int(budget * engine.config.context_threshold)
    events = report.compaction_turns
    headroom = [budget - t.context_tokens for t in events]
    repeated = sum(1 for a, b in itertools.pairwise(events) if b.turn - a.turn < 5)
    items = engine.context(conv)
    cfg = engine.config
    tail = fresh_tail_start(items, cfg.fresh_tail_count, cfg.fresh_tail_max_tokens)
    tail_tokens = sum(i.tokens for i in items[tail:])
    calls = _calls(engine, conv)
    engine.close()
    return {
        "turns": turns,
        "budget": budget,
        "seconds": round(seconds, 1),
        "canaries": len(canaries),
        "active_recall": round(active / len(canaries), 2),
        "retrieval_recall": round(retrievable / len(canaries), 2),
        "compactions": len(events),
        "headroom_tokens_mean": round(statistics.fmean(headroom)) if headroom else None,
        "headroom_share_mean": round(statistics.fmean(headroom) / budget, 2) if headroom else None,
        "fresh_tail_pressure": round(tail_tokens / threshold, 2),
        "repeated_compactions": repeated,
        "summaries_written": calls,
        "final_context_tokens": report.turns[-1].context_tokens,
        "raw_tokens": report.turns[-1].raw_tokens,
    }


def _calls(engine: Engine, conversation_id: int) -> int:
    return int(
        engine.store.fetchall(
            "SELECT count(*) FROM summaries WHERE conversation_id = ?", (conversation_id,)
        )[0][0]
    )


def _reachable(engine: Engine, conversation_id: int, message_id: int) -> bool:
    in_context = {i.summary_id for i in engine.context(conversation_id) if i.summary_id}
    in_context_msgs = {i.message_id for i in engine.context(conversation_id) if i.message_id}
    if message_id in in_context_msgs:
        return True
    frontier: list[str | int] = [message_id]
    seen: set[str | int] = set()
    while frontier:
        ref = frontier.pop()
        for above in engine.store.covering(ref):
            if above in in_context:
                return True
            if above not in seen:
                seen.add(above)
                frontier.append(above)
    return False


# --- LoCoMo --------------------------------------------------------------------------------


def _when(stamp: str) -> str:
    """'1:56 pm on 8 May, 2023' → ISO text."""
    import datetime as dt

    moment = dt.datetime.strptime(stamp.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)
    return format_ts(moment)


def locomo_messages(sample: dict[str, Any]) -> list[tuple[str, dict[str, str], str]]:
    """(dia_id, message, created_at) for every turn, in order."""
    conv = sample["conversation"]
    speaker_a = conv["speaker_a"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        base = parse_ts(_when(conv[f"session_{n}_date_time"]))
        assert base is not None
        for k, turn in enumerate(conv[f"session_{n}"]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            role = "user" if turn["speaker"] == speaker_a else "assistant"
            import datetime as dt

            stamp = format_ts(base + dt.timedelta(seconds=30 * k))
            message = {"role": role, "content": f"{turn['speaker']}: {text}"}
            out.append((turn["dia_id"], message, stamp))
        n += 1
    return out


def window_text(turns: list[tuple[str, dict[str, str], str]], budget: int) -> tuple[str, int]:
    """The newest turns that fit *budget* tokens, in order, and the tokens they take."""
    window: list[str] = []
    used = 0
    for _, msg, _ in reversed(turns):
        cost = estimate_tokens(msg["content"])
        if used + cost > budget:
            break
        window.append(msg["content"])
        used += cost
    return "\n".join(reversed(window)), used


def locomo(work: Path, budget: int, path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    per_category: dict[int, list[tuple[bool, bool, bool]]] = defaultdict(list)
    rows = []
    for sample in data:
        turns = locomo_messages(sample)
        by_id = {dia: msg["content"] for dia, msg, _ in turns}
        engine = Engine.open(work / f"locomo-{sample['sample_id']}.db", config=LOCOMO_CONFIG)
        conv = engine.conversation(sample["sample_id"], create=True)
        # Turn by turn, as a host would: each pair (speaker A, then B) is one turn.
        pending: list[Any] = []
        for dia, msg, stamp in turns:
            if msg["role"] == "user" and pending:
                engine.after_turn(conv.conversation_id, pending, token_budget=budget)
                pending = []
            pending.append(engine.normalize(msg, external_id=dia, created_at=parse_ts(stamp)))
        if pending:
            engine.after_turn(conv.conversation_id, pending, token_budget=budget)
        text = context_text(engine, conv.conversation_id)
        ctx_norm = norm(text)
        # Sliding windows: the newest turns that fit the whole budget, and those that fit the
        # tokens lossless's context actually holds (equal spend).
        spent = estimate_tokens(text)
        win_text, used = window_text(turns, budget)
        win_norm = norm(win_text)
        eq_text, _ = window_text(turns, spent)
        eq_norm = norm(eq_text)
        hits = [0, 0, 0]
        questions = 0
        for qa in sample["qa"]:
            evidence = [e.strip() for ev in qa.get("evidence", []) for e in re.split(r"[;,]", ev)]
            evidence = [by_id[e] for e in evidence if e in by_id]
            if not evidence:
                continue
            questions += 1
            result = (
                any(verbatim_present(e, ctx_norm) for e in evidence),
                any(verbatim_present(e, win_norm) for e in evidence),
                any(verbatim_present(e, eq_norm) for e in evidence),
            )
            per_category[qa["category"]].append(result)
            hits = [h + int(r) for h, r in zip(hits, result, strict=True)]
        rows.append(
            {
                "sample": sample["sample_id"],
                "turns": len(turns),
                "raw_tokens": sum(estimate_tokens(m["content"]) for _, m, _ in turns),
                "context_tokens": estimate_tokens(text),
                "window_tokens": used,
                "questions": questions,
                "lossless_verbatim": round(hits[0] / questions, 3),
                "window_verbatim": round(hits[1] / questions, 3),
                "equal_spend_window_verbatim": round(hits[2] / questions, 3),
            }
        )
        engine.close()
    everything = [r for results in per_category.values() for r in results]

    def share(results: list[tuple[bool, ...]], k: int) -> float:
        return round(sum(r[k] for r in results) / len(results), 3) if results else 0.0

    return {
        "budget": budget,
        "conversations": rows,
        "overall": {
            "questions": len(everything),
            "lossless_verbatim": share(everything, 0),
            "window_verbatim": share(everything, 1),
            "equal_spend_window_verbatim": share(everything, 2),
            "lossless_context_tokens_mean": round(
                statistics.fmean(r["context_tokens"] for r in rows)
            ),
        },
        "by_category": {
            str(c): {
                "questions": len(r),
                "lossless_verbatim": share(r, 0),
                "window_verbatim": share(r, 1),
                "equal_spend_window_verbatim": share(r, 2),
            }
            for c, r in sorted(per_category.items())
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", default="1000,3000", help="canary session lengths")
    parser.add_argument("--budget", type=int, default=32_000, help="canary run budget")
    parser.add_argument("--locomo-budget", type=int, default=8_000)
    default_data = Path(os.environ.get("LOSSLESS_LOCOMO", LOCOMO))
    parser.add_argument("--locomo", type=Path, default=default_data)
    parser.add_argument("--skip-locomo", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lossless-quality-"))
    results: dict[str, Any] = {}
    try:
        results["canaries"] = []
        for turns in (int(t) for t in args.turns.split(",")):
            run = canary_run(work, turns, args.budget, seed=11)
            results["canaries"].append(run)
            print(
                f"canaries, {turns:,} turns at {args.budget:,} tokens: active recall "
                f"{run['active_recall']:.0%}, retrieval recall {run['retrieval_recall']:.0%}, "
                f"{run['compactions']} compactions (mean headroom {run['headroom_share_mean']:.0%}"
                f" of budget), tail pressure {run['fresh_tail_pressure']}, repeated "
                f"{run['repeated_compactions']}, {run['summaries_written']} summaries; "
                f"{run['seconds']} s",
                flush=True,
            )
        if args.skip_locomo:
            pass
        elif not args.locomo.exists():
            print(f"LoCoMo skipped: {args.locomo} not found (set --locomo or LOSSLESS_LOCOMO)")
        else:
            loc = locomo(work, args.locomo_budget, args.locomo)
            results["locomo"] = loc
            o = loc["overall"]
            print(
                f"LoCoMo ({o['questions']} questions, {args.locomo_budget:,}-token budget): "
                f"evidence present in the context — lossless {o['lossless_verbatim']:.1%} "
                f"(context {o['lossless_context_tokens_mean']:,} tokens on average) vs sliding "
                f"window {o['window_verbatim']:.1%} (the whole budget) and "
                f"{o['equal_spend_window_verbatim']:.1%} (the same tokens as lossless)"
            )
            for cat, row in loc["by_category"].items():
                print(
                    f"  category {cat} ({row['questions']} questions): lossless "
                    f"{row['lossless_verbatim']:.1%}, window {row['window_verbatim']:.1%}, "
                    f"equal-spend window {row['equal_spend_window_verbatim']:.1%}"
                )
        print(f"results: {save('quality', results)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
