"""``lcm_expand_query``: answer a question from the history below the summaries.

1. If a ``query`` is given, ``lcm_grep`` (relevance) finds the summaries — and messages — it
   points to; or the caller names ``summary_ids``.
2. A delegation grant is made over the conversation's family (token cap, depth, TTL); expired
   grants are swept first.
3. With a summarizer that can call tools, a sub-agent (:mod:`.subagent`) walks the DAG with
   ``lcm_expand`` only, under that grant, and writes a focused answer that cites ids
   (``mode = "model"``).
4. With no such model — or when the model fails — the answer is deterministic: the history
   below the summaries is read under the grant, and the excerpts that best match the question
   are quoted, each cited by its id, within ``expand_query_max_tokens``, under a label that
   says no model wrote it (``mode = "deterministic"``; ``note`` says why when a model failed).
5. The grant is revoked whatever happens: answer, error or cancellation.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import NotFoundError
from ..model import Conversation
from ..summarize.base import SummarizerError
from ..tokens import estimate_tokens
from .expand import expand
from .grants import GrantError, grant_for, revoke
from .grep import GrepError, grep
from .subagent import run_subagent

if TYPE_CHECKING:
    from ..services import Services

__all__ = ["ExpandQueryResult", "expand_query"]

LABEL = (
    "Retrieved excerpts (deterministic retrieval — no model wrote this answer; each line is "
    "quoted from stored history and cited by id):"
)
_WORD = re.compile(r"[a-z0-9][a-z0-9_'-]+|[0-9]")
_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_STOP = frozenset(
    [
        "the",
        "a",
        "an",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "this",
        "that",
        "what",
        "which",
        "who",
        "when",
        "where",
        "why",
        "how",
        "did",
        "does",
        "do",
        "we",
        "you",
        "i",
        "they",
        "he",
        "she",
        "about",
        "from",
    ]
)


@dataclass
class ExpandQueryResult:
    """An answer and where it came from."""

    answer: str
    citations: list[str] = field(default_factory=list)
    mode: str = "deterministic"
    searched: list[str] = field(default_factory=list)
    grant_id: str | None = None
    model: str | None = None
    steps: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out: dict[str, Any] = {
            "answer": self.answer,
            "citations": self.citations,
            "mode": self.mode,
            "searched": self.searched,
        }
        if self.mode == "model":
            out |= {"model": self.model, "steps": self.steps, "refused": self.refused}
        if self.note:
            out["note"] = self.note
        return out


def _terms(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP]


def _stem(word: str) -> str:
    """A light suffix folding, so "uses" meets "use" and "deployed" meets "deploy"."""
    word = word.removesuffix("'s")
    for suffix, keep, replace in (
        ("ies", 4, "y"),
        ("sses", 5, "ss"),
        ("ing", 5, ""),
        ("ed", 4, ""),
        ("es", 5, ""),
        ("s", 3, ""),
    ):
        if word.endswith(suffix) and len(word) > keep and not word.endswith("ss"):
            return word[: -len(suffix)] + replace
    return word


def expand_query(
    services: Services,
    prompt: str,
    *,
    conversation: Conversation,
    query: str | None = None,
    summary_ids: Sequence[str] | None = None,
    max_tokens: int | None = None,
) -> ExpandQueryResult:
    """Answer *prompt* from the history of *conversation* (see the module docstring)."""
    if not prompt.strip():
        raise GrepError("the question is empty; ask something")
    budget = max_tokens or services.config.expand_query_max_tokens
    ids = list(dict.fromkeys(summary_ids or []))
    if ids:  # named summaries must be in the conversation's family: nothing leaks across
        family = set(services.store.family_ids(conversation))
        for sid in ids:  # another family's reads as one nobody has
            try:
                owner: int | None = services.store.get_summaries([sid])[0].conversation_id
            except NotFoundError:
                owner = None
            if owner not in family:
                raise NotFoundError(
                    f"no summary {sid} in this conversation's family; find summaries with"
                    " lcm_grep (summary ids look like sum_0123456789abcdef)"
                )
    message_hits: list[tuple[str, str]] = []  # (id, text)
    if query or not ids:
        hits = grep(
            services.store,
            query or prompt,
            conversation_ids=services.store.family_ids(conversation),
            sort="relevance",
            limit=20,
        )
        ids += [h.id for h in hits.hits if h.kind == "summary" and h.id not in ids]
        for h in hits.hits:
            if h.kind == "message":
                message_hits.append((h.id, services.store.get_message(int(h.id[4:])).content))
    grant = grant_for(services, conversation, purpose="expand_query")
    note = None
    try:
        model = services.summarizer
        if model.tool_calling:
            try:
                found = run_subagent(
                    services,
                    model,
                    grant,
                    prompt,
                    query=query,
                    summary_ids=ids[:10],
                    message_hits=message_hits[:10],
                    max_tokens=budget,
                )
            except SummarizerError as exc:
                note = (
                    f"the sub-agent's model failed ({exc}); this is the deterministic"
                    " retrieval answer instead"
                )
            else:
                return ExpandQueryResult(
                    found.answer,
                    found.citations,
                    "model",
                    ids,
                    grant.grant_id,
                    model=found.model,
                    steps=found.steps,
                    refused=found.refused,
                )
        candidates = list(message_hits)
        if ids:
            try:
                expanded = expand(services, grant.grant_id, ids[:10], include_messages=True)
            except GrantError:  # a failed sub-agent spent the grant: answer from the hits
                expanded = None
            if expanded is not None:
                candidates += [(n.id, n.content) for n in expanded.nodes]
    finally:
        revoke(services.store, grant.grant_id)
    result = _answer(prompt + " " + (query or ""), candidates, budget, ids, grant.grant_id)
    result.note = note
    return result


def _answer(
    question: str,
    candidates: list[tuple[str, str]],
    budget: int,
    searched: list[str],
    grant_id: str,
) -> ExpandQueryResult:
    wanted = set(_terms(question))
    pieces: list[tuple[str, str]] = []
    seen: set[str] = set()
    for ident, text in candidates:
        for piece in _SPLIT.split(text):
            flat = " ".join(piece.split())
            if len(flat) < 12 or flat.lower() in seen or flat.startswith("Expand for details"):
                continue
            seen.add(flat.lower())
            pieces.append((ident, flat))
    df: Counter[str] = Counter(t for _, p in pieces for t in set(_terms(p)))
    n = max(len(pieces), 1)

    def score(piece: str) -> float:
        terms = set(_terms(piece))
        hit = terms & wanted
        return sum(math.log(1 + n / df[t]) for t in hit) / math.sqrt(len(terms) + 4)

    ranked = sorted(((score(p), i, p) for i, p in pieces), key=lambda x: -x[0])
    lines = [LABEL]
    citations: list[str] = []
    used = estimate_tokens(LABEL)
    for value, ident, piece in ranked:
        if value <= 0:
            break
        line = f"- {piece[:400]} [{ident}]"
        cost = estimate_tokens(line)
        if used + cost > budget:
            continue
        lines.append(line)
        used += cost
        if ident not in citations:
            citations.append(ident)
    if len(lines) == 1:
        lines.append("- Nothing in the stored history matches this question.")
    return ExpandQueryResult("\n".join(lines), citations, "deterministic", searched, grant_id)
