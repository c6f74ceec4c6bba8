"""The resume summary: where the work stands, rebuilt from stored data after a compaction.

Deterministic (no model; the same stored data gives the same text) and concise, with exactly
the parts of the chat-context-persistence spec, then its honesty gate and the tools to call:

* **Goal** — the first user request, and later requests that restate it ("new goal: ...",
  "change of plan ...", "actually, let's ...");
* **Current task** — the latest user request;
* **Files modified** — the paths of successful edit/write tool calls, latest first;
* **Files pending** — paths named in open task items (unchecked ``- [ ]`` lists, to-do tool
  calls with items not completed, the latest session summary's pending key points) and files
  whose last edit failed;
* **Key tool execution ids** — the most recent executions and the failed ones, to fetch with
  ``chat_context_query``.

Everything comes from the messages and the tool-execution log *up to the compaction
boundary* (the messages the context's summaries replaced) — the first request, and the
latest ``WINDOW`` messages before the boundary — so between two compactions the text does
not change and the assembled prefix stays byte-identical for prompt caches, and its cost does
not grow with the history. Every path and id in it is quoted from the store; nothing is
invented. It is bounded by ``resume.max_tokens``: lists are cut (saying how many were left
out) before the gate is.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .model import ContextItem
from .tokens import estimate_tokens

if TYPE_CHECKING:
    from .services import Services
    from .store.activity import ToolCall
    from .store.base import Store

logger = logging.getLogger(__name__)

__all__ = [
    "HONESTY_GATE",
    "ResumeSummary",
    "boundary",
    "build_resume",
    "resume",
    "resume_text",
    "warm",
]

HONESTY_GATE = (
    "BE HONEST: DO YOU HAVE ENOUGH INFORMATION TO CONTINUE?\n"
    "If NO: query past context and tool results before continuing.\n"
    "If YES: proceed."
)
TOOLS_LINE = (
    "Retrieval tools: chat_context_query (past messages and tool results, by text, tool or"
    " execution id), lcm_grep (search messages and summaries), lcm_expand_query (ask a"
    " question of the exact history below the summaries)."
)
HEADER = "Resume summary (made by lossless from the stored history; no model wrote it)"

_EDIT_TOOL = re.compile(
    r"edit|write|create|patch|replace|insert|append|save|apply|move|rename|delete|remove",
    re.I,
)
_READ_TOOL = re.compile(r"read|view|cat|open|search|grep|glob|list|find|fetch", re.I)
_PATH_KEYS = ("file_path", "path", "filename", "file", "target_file", "notebook_path")
_PATH = re.compile(
    r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)*[\w-]+\.(?:py|pyi|ts|tsx|js|jsx|mjs|md|rst|txt|toml"
    r"|json|yaml|yml|ini|cfg|rs|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|sh|sql|html|css|scss|vue"
    r"|swift|lock|env)\b"
)
_RESTATE = re.compile(
    r"^\s*(?:new goal|the goal is|goal:|change of plan|actually,? let'?s|instead,? let'?s"
    r"|let'?s switch|from now on|new task|scratch that)",
    re.I,
)
#: The same openings, as LIKE patterns, so the store picks the candidates (restated_requests).
_RESTATE_LIKE = (
    "new goal%",
    "the goal is%",
    "goal:%",
    "change of plan%",
    "actually%let%",
    "instead%let%",
    "let's switch%",
    "lets switch%",
    "from now on%",
    "new task%",
    "scratch that%",
)
_UNCHECKED = re.compile(r"^\s*[-*] \[ \]\s+(.+)$", re.M)
_PENDING_POINT = re.compile(r"\b(?:todo|pending|next|remaining|not yet|still need)", re.I)
_TEXT_CHARS = 300
#: The messages before the boundary the summary reads (besides the first request): its lists
#: are short and latest-first, so older history would only cost time.
WINDOW = 2_000
_TASK_WORDS = 4
_REQUESTS = 20  # requests read from the start (the goal) and from the boundary back (the task)
_LIST_MAX = 12


@dataclass
class ResumeSummary:
    """The parts of a resume summary and its text."""

    conversation_id: int
    upto_seq: int | None  # the last message covered (None: nothing covered yet)
    goal: list[str] = field(default_factory=list)
    current_task: str | None = None
    files_modified: list[str] = field(default_factory=list)
    files_pending: list[str] = field(default_factory=list)
    executions: list[str] = field(default_factory=list)
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "conversation_id": self.conversation_id,
            "upto_seq": self.upto_seq,
            "goal": self.goal,
            "current_task": self.current_task,
            "files_modified": self.files_modified,
            "files_pending": self.files_pending,
            "key_executions": self.executions,
            "text": self.text,
        }


def boundary(store: Store, conversation_id: int, items: Sequence[ContextItem]) -> int | None:
    """The seq of the last message the context's summaries replaced: the message before the
    first raw message after the last summary in the context (``None`` with no summaries)."""
    last = max((n for n, i in enumerate(items) if i.summary_id is not None), default=None)
    if last is None:
        return None
    after = next((i.message_id for i in items[last + 1 :] if i.message_id is not None), None)
    if after is None:
        return store.last_seq(conversation_id)
    seq = store.seq_of(after)
    return None if seq is None else seq - 1


def build_resume(
    store: Store, conversation_id: int, upto_seq: int | None, max_tokens: int
) -> ResumeSummary:
    """The resume summary of the messages up to *upto_seq* (all of them with ``None``)."""
    limit = upto_seq if upto_seq is not None else store.last_seq(conversation_id)
    low = max(0, limit - WINDOW)  # the recent history it reads (the goal is read from the start)
    out = ResumeSummary(conversation_id, limit)
    first = _requests(store, conversation_id, limit)
    if first:
        out.goal.append(_clip(first[0][1]))
        restated = store.restated_requests(
            conversation_id, max(first[0][0], low), limit, _RESTATE_LIKE
        )
        out.goal += [
            _clip(t) for t in map(_clean, (r.content for r in restated)) if _RESTATE.match(t)
        ][-3:]
        out.current_task = _clip(_current_task(store, conversation_id, limit))
    calls = store.tool_calls_between(conversation_id, low, limit)
    modified: dict[str, int] = {}
    failed_edits: dict[str, int] = {}
    for call in calls:
        name = call.tool_name or ""
        if not _EDIT_TOOL.search(name) or _READ_TOOL.fullmatch(name):
            continue
        for path in _paths_of(call.input):
            if call.status == "error":
                failed_edits[path] = call.seq
            else:
                modified[path] = call.seq
                failed_edits.pop(path, None)
    out.files_modified = sorted(modified, key=lambda p: -modified[p])
    pending_items = _pending_items(store, conversation_id, low, limit, calls)
    pending: list[str] = []
    for item in pending_items:  # quoted from stored text: every path is in the store
        for path in _PATH.findall(item):
            if path not in pending:
                pending.append(path)
    for path in sorted(failed_edits, key=lambda p: -failed_edits[p]):
        if path not in pending and path not in modified:
            pending.append(path)
    out.files_pending = pending
    recent = list(calls[-5:])
    failed = [c for c in calls if c.status == "error"][-5:]
    chosen = sorted(
        {c.execution_id: c for c in failed + recent}.values(),
        key=lambda c: (c.seq, c.execution_id),
    )
    out.executions = [
        f"{c.execution_id} {c.tool_name or '?'} {c.status} (call msg#{c.call_message_id})"
        for c in chosen
    ]
    out.text = _render(out, max_tokens)
    return out


def _requests(
    store: Store, conversation_id: int, upto: int, *, newest_first: bool = False
) -> list[tuple[int, str]]:
    """The first (or latest) user requests with text, up to *upto*, their blanks folded
    (the user's own words: a host's records, such as slash commands, are not requests)."""
    found = store.user_requests(conversation_id, upto, newest_first=newest_first, limit=_REQUESTS)
    return [(r.seq, _clean(r.content)) for r in found]


#: How a reply that asks for nothing new starts ("Thanks, that looks good.", "ok go on").
_ACK = re.compile(
    r"(thanks?|thank you|ok(ay)?|great|nice|cool|perfect|looks good|lgtm|yes|yep|yeah|no|"
    r"sure|go on|go ahead|continue|done|good)\b",
    re.I,
)


def _is_reply(text: str) -> bool:
    """Whether a user message only answers the agent (a few words, or an acknowledgement)."""
    words = len(text.split())
    return words < _TASK_WORDS or (words <= 6 and _ACK.match(text) is not None)


def _current_task(store: Store, conversation_id: int, limit: int) -> str:
    """The latest user request; when it only answers the agent ("yes", "Thanks, that looks
    good."), the latest request of substance before it, followed by that reply."""
    latest = _requests(store, conversation_id, limit, newest_first=True)
    newest = latest[0][1]
    if not _is_reply(newest):
        return newest
    earlier = next((t for _, t in latest[1:] if not _is_reply(t)), None)
    return f'{_clip(earlier)} (then: "{newest}")' if earlier else newest


def _clean(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, chars: int = _TEXT_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


def _paths_of(raw_input: str | None) -> list[str]:
    if not raw_input:
        return []
    try:
        data = json.loads(raw_input)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    found = [str(data[k]) for k in _PATH_KEYS if isinstance(data.get(k), str) and data[k]]
    edits = data.get("edits")
    if isinstance(edits, list):  # multi-file edit tools
        for edit in edits:
            if isinstance(edit, dict):
                found += [str(edit[k]) for k in _PATH_KEYS if isinstance(edit.get(k), str)]
    return list(dict.fromkeys(found))


def _pending_items(
    store: Store,
    conversation_id: int,
    low: int,
    limit: int,
    calls: Sequence[ToolCall],
) -> list[str]:
    """Open task items: the latest to-do tool call's unfinished items, the unchecked items
    of the latest message with a checkbox list, the latest session summary's pending
    points."""
    items: list[str] = []
    for call in reversed(calls):
        tool, raw_input = call.tool_name, call.input
        if tool and "todo" in tool.lower() and raw_input:
            try:
                data = json.loads(raw_input)
            except ValueError:
                continue
            todos = data.get("todos") if isinstance(data, dict) else None
            if isinstance(todos, list):
                items += [
                    str(t.get("content", ""))
                    for t in todos
                    if isinstance(t, dict) and t.get("status") != "completed"
                ]
                break
    checklist = store.latest_checklist(conversation_id, low, limit)
    if checklist is not None:
        items += _UNCHECKED.findall(checklist)
    points = store.key_points_upto(conversation_id, limit)
    items += [p for p in points if _PENDING_POINT.search(p)]
    return items


def _render(out: ResumeSummary, max_tokens: int) -> str:
    """The text, lists cut from the end (saying so) until it fits *max_tokens*."""
    lists = {
        "modified": list(out.files_modified),
        "pending": list(out.files_pending),
        "executions": list(out.executions),
    }
    cut = dict.fromkeys(lists, 0)
    for key in lists:  # a hard cap first, then fit to the token budget
        while len(lists[key]) > _LIST_MAX:
            lists[key].pop()
            cut[key] += 1

    def text() -> str:
        lines = [HEADER, ""]
        lines.append("Goal: " + (out.goal[0] if out.goal else "(no user request stored)"))
        lines += [f"  later: {g}" for g in out.goal[1:]]
        lines.append("Current task: " + (out.current_task or "(no user request stored)"))
        for title, key in (
            ("Files modified", "modified"),
            ("Files pending", "pending"),
            ("Key tool execution ids to retrieve details", "executions"),
        ):
            values = lists[key]
            lines.append(f"{title}:" + ("" if values else " none"))
            lines += [f"- {v}" for v in values]
            if cut[key]:
                lines.append(f"- … and {cut[key]} more (chat_context_query lists them)")
        lines += ["", HONESTY_GATE, TOOLS_LINE]
        return "\n".join(lines)

    rendered = text()
    while estimate_tokens(rendered) > max_tokens and any(lists.values()):
        longest = max(lists, key=lambda k: len(lists[k]))
        lists[longest].pop()
        cut[longest] += 1
        rendered = text()
    return rendered


def resume_text(services: Services, conversation_id: int, upto_seq: int) -> str:
    """The resume summary's text up to *upto_seq*, cached: it only changes when a compaction
    moves the boundary, and assembly asks for it every turn."""
    key = (conversation_id, upto_seq)
    text = services.resume_cache.get(key)
    if text is None:
        text = build_resume(
            services.store, conversation_id, upto_seq, services.config.resume.max_tokens
        ).text
        services.resume_cache.put(key, text)
    return text


def resume(services: Services, conversation_id: int, *, latest: bool = False) -> ResumeSummary:
    """The resume summary as assembly injects it (the messages up to the compaction boundary:
    lossless's, or else its host's newest; ``upto_seq`` is ``None`` when neither compacted
    yet), or, with *latest*, of every stored message."""
    store = services.store
    upto = None if latest else boundary(store, conversation_id, store.context(conversation_id))
    if upto is None and not latest:
        # lossless has not compacted it, but its host may have: what the host's newest
        # compaction replaced (up to its boundary) is what a resume summary is for.
        upto = store.host_record_seq(conversation_id, ("compact_boundary",))
        if upto is None:
            return ResumeSummary(conversation_id, None)
    return build_resume(store, conversation_id, upto, services.config.resume.max_tokens)


def warm(services: Services, conversation_id: int) -> None:
    """Build the resume summary of the conversation's new boundary now (after a compaction,
    in the background queue), so that assembling the next turn finds it made. Never raises:
    a resume summary is a convenience, and the compaction already succeeded."""
    try:
        store = services.store
        upto = boundary(store, conversation_id, store.context(conversation_id))
        if upto is not None:
            resume_text(services, conversation_id, upto)
    except Exception:  # the compaction is done; its resume summary is built on demand
        logger.exception("resume summary of conversation %s failed", conversation_id)
