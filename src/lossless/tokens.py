"""Token estimation.

The fast path is a character-class heuristic (no vocabulary files, no network): about
0.25 tokens per ASCII/Latin character, 1.5 per CJK character, 2 per astral-plane code point,
and 0.5 for other scripts (Cyrillic, Greek, Arabic, ... tokenize about twice as densely as
Latin). An exact tokenizer can replace it through :class:`TokenCounter`.
"""

from __future__ import annotations

import math
import re
from typing import Protocol, runtime_checkable

__all__ = ["HeuristicTokenCounter", "TokenCounter", "estimate_tokens"]

# Han, Hiragana, Katakana, Hangul, CJK punctuation and full-width forms.
_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3200-\u9fff"
    "\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef]"
)
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_LATIN = re.compile("[\u0000-\u024f]")


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens in text. Implement it to plug in an exact tokenizer."""

    def count(self, text: str) -> int:
        """Return the number of tokens *text* costs."""
        ...


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of *text* with the heuristic described in the module docstring."""
    if not text:
        return 0
    if text.isascii():
        return math.ceil(len(text) * 0.25)
    cjk = len(_CJK.findall(text))
    astral = len(_ASTRAL.findall(text))
    latin = len(_LATIN.findall(text))
    other = len(text) - cjk - astral - latin
    return math.ceil(latin * 0.25 + cjk * 1.5 + astral * 2.0 + other * 0.5)


class HeuristicTokenCounter:
    """The default :class:`TokenCounter`: :func:`estimate_tokens`."""

    def count(self, text: str) -> int:
        return estimate_tokens(text)
