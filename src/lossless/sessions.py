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

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import NotFoundError
from .model import Conversation, SessionSummary, StoredMessage
from .summarize.base import Level, SourceItem, Summarizer, SummaryRequest, SummaryResult
from .summarize.escalation import CAP_FACTOR, climb, truncate_to_tokens
from .summarize.extractive import EXPAND_PREFIX, ExtractiveSummarizer
from .summarize.guards import GuardedSummarizer
from .summarize.prompts import SESSION_FIELDS, session_prompt, session_system_prompt
from .timestamps import format_ts, now

if TYPE_CHECKING:
    from .services import Services

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

logger = logging.getLogger(__name__)

#: The most items each list keeps. When new items push a list over its cap, the items that
#: were neither new nor mentioned again for the longest time leave first.
MAX_TOPICS = 12
MAX_DECISIONS = 30
MAX_CODE_REFERENCES = 50
MAX_KEY_POINTS = 30
#: Longest list item, in characters (longer ones are cut at a word with " …").
MAX_ITEM_CHARS = 300
#: Output allowance for the lists, on top of the overview's share of a model's reply.
LIST_OUTPUT_TOKENS = 2_000
#: Messages read from the store at a time while chunks are formed.
PAGE_MESSAGES = 500


@dataclass
class SessionDraft:
    """A session summary being built: the overview and the four lists."""

    overview: str
    topics: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    code_references: list[str] = field(default_factory=list)
    key_points: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, summary: SessionSummary) -> SessionDraft:
        """The draft a stored version continues from."""
        return cls(
            summary.summary,
            list(summary.topics),
            list(summary.decisions),
            list(summary.code_references),
            list(summary.key_points),
        )

    def to_json(self) -> str:
        """The draft as the JSON object a model is asked to reply with."""
        return json.dumps(
            {
                "overview": self.overview,
                "topics": self.topics,
                "decisions": self.decisions,
                "code_references": self.code_references,
                "key_points": self.key_points,
            },
            ensure_ascii=False,
            indent=1,
        )


# --- the update ------------------------------------------------------------------------------


def summarize_session(
    services: Services, conv: Conversation, *, full: bool = False
) -> SessionSummary:
    """Bring a conversation's session summary up to date; see the module docstring.

    Returns the new version, or the latest one unchanged when no message came after it (and
    not *full*). The caller serializes runs on one conversation (:meth:`Engine.summarize_session`
    does); a version written meanwhile by another process makes the store refuse this one
    with :class:`~lossless.errors.ConflictError`.
    """
    cid = conv.conversation_id
    store = services.store
    latest = store.latest_session_summary(cid)
    newest = store.last_messages(cid, 1)
    if not newest:
        raise NotFoundError(
            f"conversation {cid} has no messages yet; there is nothing to summarize"
        )
    end_seq = newest[0].seq  # messages stored after this point wait for the next version
    base = None if full else latest
    if (
        base is not None
        and base.last_message_id is not None
        and store.message_seq(base.last_message_id) >= end_seq
    ):
        return base  # nothing new: no summarizer call, no new version
    draft = SessionDraft.of(base) if base is not None else None
    until = (
        store.get_message(base.last_message_id).created_at
        if base is not None and base.last_message_id is not None
        else None
    )
    runner = _Runner(services)
    first_id: int | None = base.first_message_id if base is not None else None
    last_id: int | None = None
    processed = 0
    for chunk in _chunks(services, cid, base.last_message_id if base else None, end_seq):
        if first_id is None:
            first_id = chunk[0].message_id
        runner.covered_from = first_id
        draft = runner.step(draft, chunk, until)
        last_id = chunk[-1].message_id
        until = chunk[-1].created_at
        processed += len(chunk)
    if draft is None or last_id is None:  # unreachable: a message after base exists
        raise NotFoundError(f"conversation {cid} has no messages to summarize")
    version = (latest.version if latest is not None else 0) + 1
    created = format_ts(now())
    digest = hashlib.sha256(
        f"{cid}\0{version}\0{created}\0{draft.overview}".encode("utf-8", "surrogatepass")
    ).hexdigest()
    summary = SessionSummary(
        session_summary_id="ss_" + digest[:16],
        conversation_id=cid,
        version=version,
        summary=draft.overview,
        topics=tuple(draft.topics),
        decisions=tuple(draft.decisions),
        code_references=tuple(draft.code_references),
        key_points=tuple(draft.key_points),
        first_message_id=first_id,
        last_message_id=last_id,
        message_count=(base.message_count if base is not None else 0) + processed,
        messages_processed=processed,
        is_incremental=base is not None,
        model=runner.model_name(),
        created_at=created,
    )
    store.insert_session_summary(summary)
    return summary


def _chunks(
    services: Services, conversation_id: int, after: int | None, end_seq: int
) -> Iterator[list[StoredMessage]]:
    """The messages after message id *after* up to seq *end_seq*, in chunks of at most the
    chunk budget (a message larger than that is a chunk of its own)."""
    budget = chunk_tokens(services)
    chunk: list[StoredMessage] = []
    used = 0
    cursor = after
    while True:
        page = services.store.messages_after(conversation_id, cursor, limit=PAGE_MESSAGES)
        page = [m for m in page if m.seq <= end_seq]
        if not page:
            break
        for message in page:
            if chunk and used + message.token_count > budget:
                yield chunk
                chunk, used = [], 0
            chunk.append(message)
            used += message.token_count
        cursor = page[-1].message_id
        if page[-1].seq >= end_seq:
            break
    if chunk:
        yield chunk


def chunk_tokens(services: Services) -> int:
    """New-message tokens per summarizer call: ``sessions.chunk_tokens``, else
    ``leaf_chunk_tokens``."""
    return services.config.sessions.chunk_tokens or services.config.leaf_chunk_tokens


def is_extractive(summarizer: Summarizer) -> bool:
    """Whether *summarizer* is the extractive one (guarded or not): it gets the deterministic
    path instead of a structured prompt."""
    inner = summarizer.inner if isinstance(summarizer, GuardedSummarizer) else summarizer
    return isinstance(inner, ExtractiveSummarizer)


class _Runner:
    """Summarizes the chunks of one run and remembers which model wrote them."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.summarizer = services.summarizer
        self.config = services.config.sessions
        self.extractive = is_extractive(self.summarizer)
        self.models: list[str | None] = []
        #: The first message the draft being continued covers (it names the draft).
        self.covered_from: int | None = None

    def model_name(self) -> str | None:
        if "fallback" in self.models:
            return "fallback"
        named = [m for m in self.models if m]
        return named[-1] if named else self.summarizer.model

    def step(
        self, previous: SessionDraft | None, chunk: Sequence[StoredMessage], until: str | None
    ) -> SessionDraft:
        sources = _sources(self.services, chunk)
        if self.extractive:  # no input limit: a message in pieces is read in one go
            self.models.append(self.summarizer.model)
            return extract(previous, chunk, self._overview(previous, sources, self.summarizer))
        # A message larger than a chunk came in pieces: one request per piece, chained.
        draft = previous
        for group in _groups(sources, chunk_tokens(self.services)):
            draft = self._model_step(draft, chunk, group, until)
        if draft is None:  # unreachable: a chunk has a message
            raise ValueError("an empty chunk")
        return draft

    def _overview(
        self, previous: SessionDraft | None, sources: tuple[SourceItem, ...], writer: Summarizer
    ) -> str:
        """The extractive overview of the previous overview and the new messages."""
        items = sources
        # The previous footer goes: the new one says what this overview leaves out.
        text = "\n".join(
            line
            for line in (previous.overview if previous is not None else "").splitlines()
            if not line.startswith(EXPAND_PREFIX)
        ).strip()
        if text:
            stamp = sources[0].earliest_at
            ref = f"msg#{self.covered_from}" if self.covered_from else "previous summary"
            count = self.services.tokens.count(text)
            items = (SourceItem(ref, "summary", text, stamp, stamp, count), *sources)
        request = SummaryRequest(
            kind="session",
            depth=0,
            level="normal",
            sources=items,
            target_tokens=self.config.target_tokens,
            temperature=0.0,
            system=session_system_prompt(),
            prompt="",
            previous_context=previous.overview if previous is not None else None,
            max_output_tokens=CAP_FACTOR * self.config.target_tokens,
        )
        try:
            return writer.summarize(request).text.strip()
        except Exception as exc:  # a guarded extractive summarizer can refuse (spend guard)
            logger.warning("session overview by %s failed: %s", writer.name, exc, exc_info=exc)
            return ExtractiveSummarizer().summarize(request).text.strip()

    def _model_step(
        self,
        previous: SessionDraft | None,
        chunk: Sequence[StoredMessage],
        sources: tuple[SourceItem, ...],
        until: str | None,
    ) -> SessionDraft:
        previous_json = previous.to_json() if previous is not None else None

        def request(level: Level, target_tokens: int, temperature: float) -> SummaryRequest:
            return SummaryRequest(
                kind="session",
                depth=0,
                level=level,
                sources=sources,
                target_tokens=target_tokens,
                temperature=temperature,
                system=session_system_prompt(),
                prompt=session_prompt(
                    sources,
                    previous=previous_json,
                    until=until,
                    level=level,
                    target_tokens=target_tokens,
                    max_topics=MAX_TOPICS,
                ),
                previous_context=previous_json,
                max_output_tokens=CAP_FACTOR * target_tokens + LIST_OUTPUT_TOKENS,
            )

        def accept(
            result: SummaryResult, level: Level, _target: int
        ) -> tuple[SessionDraft | None, str]:
            draft = parse_reply(result.text or "")
            if draft is None:
                logger.warning(
                    "session summary by %s (%s) is not the JSON object asked for: %.200r",
                    self.summarizer.name,
                    level,
                    result.text,
                )
                return None, "not the JSON object asked for"
            return draft, ""

        draft, _, model, _ = climb(
            self.summarizer,
            request,
            accept,
            target_tokens=self.config.target_tokens,
            floor=50,
        )
        if draft is not None:
            self.models.append(model)
            return self._bounded(draft)
        self.models.append("fallback")
        return extract(previous, chunk, self._overview(previous, sources, ExtractiveSummarizer()))

    def _bounded(self, draft: SessionDraft) -> SessionDraft:
        """A model's draft within the caps (a runaway reply never grows the store unbounded)."""
        counter = self.services.tokens
        return SessionDraft(
            truncate_to_tokens(draft.overview, CAP_FACTOR * self.config.target_tokens, counter),
            _dedup(draft.topics)[:MAX_TOPICS],
            _dedup(draft.decisions)[-MAX_DECISIONS:],
            _dedup(draft.code_references)[-MAX_CODE_REFERENCES:],
            _dedup(draft.key_points)[-MAX_KEY_POINTS:],
        )


def _groups(sources: Sequence[SourceItem], budget: int) -> Iterator[tuple[SourceItem, ...]]:
    """Consecutive runs of *sources* of at most *budget* tokens (at least one item each)."""
    group: list[SourceItem] = []
    used = 0
    for item in sources:
        if group and used + item.tokens > budget:
            yield tuple(group)
            group, used = [], 0
        group.append(item)
        used += item.tokens
    if group:
        yield tuple(group)


def _sources(services: Services, chunk: Sequence[StoredMessage]) -> tuple[SourceItem, ...]:
    """Messages as source items; one larger than the chunk budget goes in pieces (nothing of
    it is dropped)."""
    budget = chunk_tokens(services)
    out: list[SourceItem] = []
    for m in chunk:
        ref = f"msg#{m.message_id}"
        if m.token_count <= budget:
            out.append(
                SourceItem(ref, m.speaker, m.content, m.created_at, m.created_at, m.token_count)
            )
            continue
        # Pieces of about nine tenths of a chunk: token counts are not exactly proportional.
        size = len(m.content) * budget * 9 // (10 * max(m.token_count, 1))
        pieces = _split(m.content, max(1, size))
        for n, piece in enumerate(pieces, 1):
            out.append(
                SourceItem(
                    f"{ref} (part {n} of {len(pieces)})",
                    m.speaker,
                    piece,
                    m.created_at,
                    m.created_at,
                    services.tokens.count(piece),
                )
            )
    return tuple(out)


def _split(text: str, size: int) -> list[str]:
    """*text* in pieces of at most *size* characters, cut at a line or a space when one is
    near the end of a piece."""
    pieces: list[str] = []
    while len(text) > size:
        cut = max(text.rfind("\n", 0, size), text.rfind(" ", 0, size))
        if cut < size // 2:
            cut = size
        pieces.append(text[:cut])
        text = text[cut:].lstrip("\n ")
    if text or not pieces:
        pieces.append(text)
    return pieces


# --- reading a model's reply -----------------------------------------------------------------

_KEY_ALIASES = {
    "overview": "overview",
    "summary": "overview",
    "session_summary": "overview",
    "updated_summary": "overview",
    "topics": "topics",
    "topic": "topics",
    "decisions": "decisions",
    "decision": "decisions",
    "decisions_made": "decisions",
    "code_references": "code_references",
    "code_reference": "code_references",
    "code_refs": "code_references",
    "code": "code_references",
    "references": "code_references",
    "files": "code_references",
    "key_points": "key_points",
    "key_point": "key_points",
    "keypoints": "key_points",
    "key_facts": "key_points",
    "facts": "key_points",
    "notes": "key_points",
}
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.S)
_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\*\*|__)?\s*([A-Za-z][A-Za-z _-]{2,30}?)\s*(?:\*\*|__)?\s*"
    r"(?::\s*(?:\*\*|__)?\s*(.*)|)$"
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def parse_reply(text: str) -> SessionDraft | None:
    """A model's reply as a draft, or ``None`` when it cannot be read as one.

    Accepted: the JSON object asked for (inside code fences or prose too, keys in other
    spellings — ``summary`` for ``overview``, ``Code references``, ...; list items as strings,
    numbers or small objects; a list given as one string of lines), or the same fields as
    headed sections (``Overview:`` / ``## Topics`` followed by text or bullets). A reply
    without an overview is unreadable.
    """
    for candidate in _json_candidates(text):
        draft = _from_mapping(candidate)
        if draft is not None:
            return draft
    return _from_sections(text)


def _json_candidates(text: str) -> Iterator[dict[str, Any]]:
    blocks = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for block in blocks:
        start = block.find("{")
        while start != -1:
            try:
                value, end = decoder.raw_decode(block, start)
            except ValueError:
                start = block.find("{", start + 1)
                continue
            if isinstance(value, dict):
                yield value
                # An object that wraps the summary: {"summary": {"overview": ...}}.
                for inner in value.values():
                    if isinstance(inner, dict):
                        yield inner
            start = block.find("{", end)


def _key(name: str) -> str | None:
    return _KEY_ALIASES.get(re.sub(r"[\s-]+", "_", name.strip().lower()))


def _from_mapping(data: dict[str, Any]) -> SessionDraft | None:
    fields: dict[str, Any] = {}
    for name, value in data.items():
        key = _key(str(name))
        if key is not None and key not in fields:
            fields[key] = value
    overview = fields.get("overview")
    if isinstance(overview, list):
        overview = " ".join(_items(overview))
    if not isinstance(overview, str) or not overview.strip():
        return None
    return SessionDraft(
        overview.strip(),
        *(_items(fields.get(key)) for key in SESSION_FIELDS[1:]),
    )


def _items(value: Any) -> list[str]:
    """A list field as strings: one string of lines is split, objects become ``k: v``."""
    if value is None:
        return []
    if isinstance(value, str):
        lines = [_BULLET.sub("", line).strip() for line in value.splitlines()]
        return _dedup(line for line in lines if line)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return _dedup([str(value)])
    out: list[str] = []
    for item in value:
        if isinstance(item, dict):
            text = "; ".join(f"{k}: {v}" for k, v in item.items() if v not in (None, ""))
        elif isinstance(item, list):
            text = ", ".join(str(x) for x in item)
        else:
            text = str(item)
        if text.strip():
            out.append(text)
    return _dedup(out)


def _from_sections(text: str) -> SessionDraft | None:
    """The fields written as headed sections instead of JSON."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        heading = _HEADING.match(line) if not _BULLET.match(line) else None
        key = _key(heading.group(1)) if heading else None
        if key is not None and heading is not None:
            current = key
            rest = (heading.group(2) or "").strip().strip("*_").strip()
            sections.setdefault(key, [])
            if rest:
                sections[key].append(rest)
            continue
        if current is not None and line.strip():
            sections[current].append(line)
    overview = " ".join(line.strip() for line in sections.get("overview", []))
    if not overview:
        return None
    return SessionDraft(
        overview,
        *(_items("\n".join(sections.get(key, []))) for key in SESSION_FIELDS[1:]),
    )


# --- deterministic extraction ----------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`])")
_TOOL_CALL_LINE = re.compile(r"^\[tool call [^\]]*\]")
_DECISION = re.compile(
    r"\b(decid(?:e|ed|ing)\b|decision\b|we chose|chose\b|chosen\b|we'll use|we will use|"
    r"we'll go with|going with|agreed\b|settled on|opted for|let's use|let's go with|"
    r"switch(?:ed)? to)",
    re.I,
)
_KEY_POINT = re.compile(
    r"\b(must|mustn't|must not|never|always|require[sd]?|requirement|constraint|deadline|"
    r"important|remember|note that|todo|to do|next step|pending|remaining|blocked|"
    r"open question|follow[- ]up|still|fixed|resolved|root cause|works now|done:|"
    r"error|exception|traceback|fail(?:s|ed|ing|ure)?)\b",
    re.I,
)
_REQUEST = re.compile(
    r"\b(please|can you|could you|would you|i need|we need|i want|make sure|let's)\b", re.I
)
#: A line that reports a failure (in any tool output); a failed result takes any error word.
_ERROR_START = re.compile(
    r"^(?:FAILED\b|ERROR\b|Traceback\b|fatal:|error[:\[]|panic:|[\w.]*(?:Error|Exception):)"
)
#: The exception a traceback (or pytest's ``E   ...``) ends with: the line worth keeping.
_EXCEPTION = re.compile(r"^(?:E\s+)?[\w.]*(?:Error|Exception)\b")
_ERROR_WORD = re.compile(r"\w*(?:Error|Exception)\b|\b(?:FAILED|failed|fatal|panic)\b")
_PATH = re.compile(
    r"(?<![\w/.:-])(?:\.{1,2}/|~/|/)?(?:[\w.-]+/)+[\w.-]+|(?<![\w/.-])[\w-]+\.(?:py|pyi|ts|"
    r"tsx|js|jsx|mjs|json|toml|ya?ml|md|rst|sql|rs|go|java|kt|c|h|cc|cpp|hpp|rb|php|sh|txt|"
    r"csv|html|css|ini|cfg|lock|proto|ipynb|xml|env)\b"
)
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_CALL = re.compile(r"\b([A-Za-z_][\w.]*\w)\(\)")
_CAMEL = re.compile(r"\b(?:[A-Z][a-z0-9]+){2,}[A-Za-z0-9]*\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
_SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
_WORD_OR_BREAK = re.compile(r"[A-Za-z][A-Za-z0-9'-]*|[^\sA-Za-z]+")
_URL = re.compile(r"\b\w+://\S+")
_PATH_KEYS = ("path", "file_path", "filepath", "file", "filename", "notebook_path", "target")
_COMMAND_KEYS = ("command", "cmd")
MAX_COMMAND_CHARS = 80

#: Words that say nothing about what a session is about (topics leave them out).
_STOP_WORDS = """
    about above after again against all also always among and another any anything are
    around aside asked away back because been before being below between both but came
    cannot could did does doing done down during each either else even ever every
    everything fine first for from further gets give given going gone good got great had
    happy has have having hello help here hers herself him himself his how however i'd
    i'll i'm i've into it's its itself just keep kept know last later least less let's like
    looks made make makes making many maybe might mine more most much must need needs
    never next nice none nothing now off okay once one only onto other others ought our
    ours ourselves out over own please quite rather really right said same says see seems
    seen shall she should since some something soon still such sure take than thank thanks
    that that's the their theirs them themselves then there there's these they they're
    thing things think this those though through thus today together too took toward
    turn under until upon very want wants was wasn't way we'd we'll we're we've well went
    were what what's when where whether which while who whom whose why will with within
    without won't would yeah yes yet you you'd you'll you're you've your yours yourself
    continue continuing carry first before after reading read reads change changes changing
    changed add added adding fix fixed fixing use used using run runs running ran call
    called calling look looking try tried trying work works working worked line lines item
    items part parts stable public next step steps want wanted
    test tests testing fail fails failed failing failure pass passes passed passing decision
    decisions error errors issue issues problem problems file files code function method
    output result results value values ask asks asked tell told show shows shown lot lots
    can may not its are was has had the and for but you our let new old get set
"""
_STOP = frozenset(_STOP_WORDS.split())


def extract(
    previous: SessionDraft | None, messages: Sequence[StoredMessage], overview: str
) -> SessionDraft:
    """The deterministic update: *overview* with the lists of *previous* extended by what
    *messages* say.

    * code references: file paths (in text, in tool-call arguments and tool output),
      ``backticked`` code, ``calls()``, CamelCase and snake_case identifiers written by the
      user or the assistant, and the commands of tool calls;
    * decisions: sentences of the user or the assistant that decide ("decided", "decision:",
      "we chose", "we'll use", "going with", "settled on", "switch to", ...);
    * key points: the user's requests ("please", "can you", "I need", ...), constraints
      ("must", "never", "always", "required"), open tasks ("todo", "next step", "still",
      "blocked", ...), fixes ("fixed", "resolved", "root cause", "done:"), errors said in
      prose, and the first error line of each failed tool result;
    * topics: the words most of the new messages of the user and the assistant share, after
      common words are taken out (each counted once per message; the user's count double).

    Each list is in the order things were last said (an item said again moves to the end);
    past its cap, the items said longest ago go.
    """
    decisions: list[str] = []
    key_points: list[str] = []
    refs: list[str] = []
    terms: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    for m in messages:
        refs.extend(_tool_call_refs(m))
        if m.role == "tool":
            refs.extend(_paths(m.content))
            error = _error_line(m)
            if error:
                key_points.append(error)
            continue
        prose = [line for line in m.content.splitlines() if not _TOOL_CALL_LINE.match(line)]
        text = "\n".join(prose)
        refs.extend(_code_refs(text))
        sentences = _sentences(text)
        for n, sentence in enumerate(sentences):
            if _DECISION.search(sentence):
                decisions.append(sentence)
            elif _KEY_POINT.search(sentence) or (
                m.role == "user" and n == 0 and _REQUEST.search(sentence)
            ):
                key_points.append(sentence)
        weight = 2 if m.role == "user" else 1
        # Topics are what the work is about; errors quoted in prose are key points.
        calm = "\n".join(x for x in sentences if not _ERROR_WORD.search(x))
        for term in _terms(calm):
            terms[term] += weight
            first_seen.setdefault(term, len(first_seen))
    topics = _topics(terms, first_seen)
    prev = previous or SessionDraft("")
    return SessionDraft(
        overview,
        _merge(prev.topics, topics, MAX_TOPICS),
        _merge(prev.decisions, decisions, MAX_DECISIONS),
        _merge(prev.code_references, refs, MAX_CODE_REFERENCES),
        _merge(prev.key_points, key_points, MAX_KEY_POINTS),
    )


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        out.extend(_clip(s) for s in _SENTENCE.split(line) if len(s.split()) >= 3)
    return out


def _clip(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= MAX_ITEM_CHARS:
        return text
    cut = text[:MAX_ITEM_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > MAX_ITEM_CHARS // 2 else cut) + " …"


def _located_paths(text: str) -> list[tuple[int, str]]:
    """File paths with where they start: a name with an extension, or a/b/c with an
    extension or two slashes (not ``and/or``, ``1/2`` or part of a URL)."""
    out = []
    for match in _PATH.finditer(text):
        path = match.group(0).rstrip(".")
        if "://" in text[max(0, match.start() - 8) : match.end()]:
            continue
        if not (_EXTENSION.search(path) or path.count("/") >= 2):
            continue
        if path.replace("/", "").replace(".", "").isdigit():
            continue
        out.append((match.start(), path))
    return out


def _paths(text: str) -> list[str]:
    return [path for _, path in _located_paths(text)]


def _code_refs(text: str) -> list[str]:
    found = _located_paths(text)
    for pattern, group in ((_BACKTICK, 1), (_CALL, 0), (_CAMEL, 0), (_SNAKE, 0)):
        found.extend((m.start(), m.group(group)) for m in pattern.finditer(text))
    found.sort()
    out: list[str] = []
    for _, ref in found:
        ref = ref.strip()
        # A word inside something already taken (a snake_case name in a path) is not new.
        if ref and not any(ref != o and ref in o for o in out):
            out.append(ref)
    return out


def _tool_call_refs(message: StoredMessage) -> list[str]:
    """The paths and commands of a message's tool calls."""
    out: list[str] = []
    for part in message.parts:
        if part.type != "tool_call" or not isinstance(part.tool_input, dict):
            continue
        for key in _PATH_KEYS:
            value = part.tool_input.get(key)
            if isinstance(value, str) and value.strip() and len(value) <= 200:
                out.append(value.strip())
        for key in _COMMAND_KEYS:
            value = part.tool_input.get(key)
            if isinstance(value, str) and value.strip():
                command = " ".join(value.split())
                if len(command) > MAX_COMMAND_CHARS:
                    command = command[: MAX_COMMAND_CHARS - 2] + " …"
                out.append(f"$ {command}")
    return out


def _error_line(message: StoredMessage) -> str | None:
    """The first error line of a tool result that failed, or of one that reports a failure
    at the start of a line (a file that merely mentions ``KeyError`` does not)."""
    failed = any(p.is_error for p in message.parts)
    lines = [line.strip() for line in message.content.splitlines() if line.strip()]
    if failed:
        hits = [line for line in lines if _ERROR_WORD.search(line)]
    else:
        hits = [line for line in lines if _ERROR_START.match(line)]
    if hits or failed:
        exceptions = [line for line in lines if _EXCEPTION.match(line)]
        if exceptions:
            return _clip(exceptions[-1])
    if hits:
        return _clip(hits[0])
    return _clip(lines[0]) if failed and lines else None


def _terms(text: str) -> set[str]:
    """The candidate topics of one message: its words and pairs of adjacent words, once each,
    without common words, numbers and code (paths and identifiers are code references)."""
    for pattern in (_URL, _PATH, _BACKTICK, _CALL, _CAMEL, _SNAKE):
        text = pattern.sub(" | ", text)
    out: set[str] = set()
    previous: str | None = None
    for match in _WORD_OR_BREAK.finditer(text):
        low = match.group(0).lower().strip("'-")
        if len(low) < 3 or low in _STOP or any(c.isdigit() for c in low) or low == "|":
            previous = None
            continue
        if len(low) >= 4:
            out.add(low)
        if previous is not None:
            out.add(f"{previous} {low}")
        previous = low
    return out


def _topics(terms: Counter[str], first_seen: dict[str, int]) -> list[str]:
    """The most shared terms (said in two or more messages); a pair of words counts for more
    than a single word and stands in for the words it is made of."""
    ranked = sorted(
        (t for t, n in terms.items() if n >= 2),
        key=lambda t: (-terms[t] * (1.5 if " " in t else 1.0), first_seen[t]),
    )
    chosen: list[str] = []
    for term in ranked:
        words = term.split()
        if any(term in c.split() or set(words) <= set(c.split()) for c in chosen):
            continue  # a word of a pair already chosen
        chosen = [c for c in chosen if c not in words]  # a pair replaces its words
        chosen.append(term)
        if len(chosen) == MAX_TOPICS:
            break
    return chosen


def _norm(item: str) -> str:
    return re.sub(r"\W+", " ", item.lower()).strip()


def _dedup(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        item = item.strip()
        key = _norm(item) or item
        if item and key not in seen:
            seen.add(key)
            out.append(_clip(item))
    return out


def _merge(old: Sequence[str], new: Sequence[str], cap: int) -> list[str]:
    """*old* then *new*, each item once at the place it was last said; past *cap* the
    items said longest ago go."""
    return _dedup([*old, *new][::-1])[::-1][-cap:]
