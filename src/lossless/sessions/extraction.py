"""The deterministic update: code references, decisions, key points and topics taken from
the messages themselves (no model)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from ..model import StoredMessage
from .draft import (
    MAX_CODE_REFERENCES,
    MAX_DECISIONS,
    MAX_KEY_POINTS,
    MAX_TOPICS,
    SessionDraft,
    clip,
    merge,
)

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
        merge(prev.topics, topics, MAX_TOPICS),
        merge(prev.decisions, decisions, MAX_DECISIONS),
        merge(prev.code_references, refs, MAX_CODE_REFERENCES),
        merge(prev.key_points, key_points, MAX_KEY_POINTS),
    )


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        out.extend(clip(s) for s in _SENTENCE.split(line) if len(s.split()) >= 3)
    return out


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
            return clip(exceptions[-1])
    if hits:
        return clip(hits[0])
    return clip(lines[0]) if failed and lines else None


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
