"""Versioned, incremental whole-session summaries (spec: incremental-session-summaries).

A *session* is a conversation. Its summary has an overview and four lists — topics,
decisions, code references, key points — and is stored as versions 1, 2, ... in
``session_summaries``; a version is never overwritten, and the conversation row keeps the
latest overview for quick access.

:func:`summarize_session` is incremental by default: it takes the latest version and only the
messages after the last one it covers. With none, the latest version is returned as it is and
no summarizer is called; otherwise the previous summary and the new messages make the next
version. ``full=True`` starts from nothing and summarizes every message again (as a new
version; the old ones stay).

Nothing is cut to fit: new messages beyond ``sessions.chunk_tokens`` (default
``leaf_chunk_tokens``) are taken in chunks that chain through the same update — each chunk's
result is the next chunk's previous summary — and only the result of the last chunk is stored,
as one version covering them all. A single message larger than a chunk is sent in pieces, one
request each, chained the same way.

How a chunk is summarized depends on the summarizer:

* **the extractive summarizer** (the offline default): the fields are extracted
  deterministically (:func:`extract`) and the overview is written by the extractive summarizer
  itself over the previous overview and the new messages;
* **any other summarizer** (a model): the spec's update prompt asks for one JSON object with
  the five fields, and the reply is read leniently (:func:`parse_reply`: code fences, prose
  around the object, other spellings of the keys, headed sections instead of JSON). An
  unreadable reply, or a failed call, is retried with the aggressive prompt; if that fails
  too, the chunk falls back to the deterministic extraction and the version's model is
  recorded as ``fallback``.
"""

from ..model import SessionSummary
from .draft import MAX_CODE_REFERENCES, MAX_DECISIONS, MAX_KEY_POINTS, MAX_TOPICS, SessionDraft
from .extraction import extract
from .reply import parse_reply
from .runner import summarize_session

__all__ = [
    "MAX_CODE_REFERENCES",
    "MAX_DECISIONS",
    "MAX_KEY_POINTS",
    "MAX_TOPICS",
    "SessionDraft",
    "SessionSummary",
    "extract",
    "parse_reply",
    "summarize_session",
]
