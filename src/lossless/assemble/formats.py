"""The assembled context's shapes: a stored message as format-neutral blocks, tool pairing
sanitized, and one writer per format a host reads (Anthropic, OpenAI Chat and Responses,
OpenClaw, LangChain, Pydantic AI, LlamaIndex); a message in its own shape comes back as
stored."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..ingest.files import REFERENCE
from ..model import StoredMessage
from ..timestamps import parse_ts
from .summaries import UNTRUSTED_NOTE

FORMATS = (
    "anthropic",
    "openai",
    "responses",
    "openclaw",
    "langchain",
    "pydantic_ai",
    "llama_index",
)


@dataclass
class _Block:
    """A format-neutral piece of a turn: what every renderer (and the Markdown export) is
    made from."""

    kind: str  # text | call | result | native | envelope (a native message without content)
    text: str = ""
    call_id: str = ""
    name: str = ""
    input: Any = None
    is_error: bool = False
    native: Any = None  # the source's own block or item, passed through when formats match
    #: When it was said (stored time text), for a format whose converted messages carry one.
    at: str = ""


def _referenced(message: StoredMessage, text: str | None = None) -> list[_Block]:
    """A message whose large files were kept outside its text, as the model sees it: the
    text with each file's reference (what its token count counts), its tool calls kept. With
    *text*, that text instead (a message clipped to fit the budget keeps its shape too)."""
    text = message.content if text is None else text
    results = [p for p in message.parts if p.type == "tool_result"]
    calls = [
        _Block("call", call_id=p.tool_call_id or "", name=p.tool_name or "tool", input=p.tool_input)
        for p in message.parts
        if p.type == "tool_call"
    ]
    if len(results) == 1 and not calls:  # one tool output kept whole as a file
        only = results[0]
        return [
            _Block(
                "result",
                call_id=only.tool_call_id or "",
                text=text,
                is_error=only.is_error,
            )
        ]
    return [_Block("text", text=text), *calls]


def _blocks(message: StoredMessage, fmt: str, *, whole: bool = False) -> list[_Block]:
    """A stored message (any source shape) as neutral blocks for the *fmt* output. A text
    block's ``name`` is the type of the part it came from (``text``, ``reasoning``, ...).
    *whole*: large files as the message holds them, not as references to the files."""
    if REFERENCE.search(message.content) and not whole:
        return _referenced(message)
    if fmt == "responses":
        native = _responses_native(message)
        if native is not None:
            return [native]
    if fmt == "openclaw" and message.source_format == "openclaw":
        return _openclaw_native(message)
    if fmt == "langchain" and message.source_format == "langchain":
        return _langchain_native(message)
    if fmt == "pydantic_ai" and message.source_format == "pydantic_ai":
        return _pydantic_ai_native(message)
    if fmt == "llama_index" and message.source_format == "llama_index":
        return _llama_index_native(message)
    if not message.parts:
        return [_Block("text", text=message.content)] if message.content else []
    same = fmt == "anthropic" and message.source_format == "anthropic"
    blocks: list[_Block] = []
    for part in message.parts:
        if same and part.slot in ("content", ".") and isinstance(part.raw, dict):
            # Exactly as the provider produced it: thinking signatures, encrypted reasoning.
            blocks.append(
                _Block(
                    "native",
                    native=part.raw,
                    call_id=part.tool_call_id or "",
                    name=part.type,
                )
            )
        elif part.type == "tool_call":
            blocks.append(
                _Block(
                    "call",
                    call_id=part.tool_call_id or "",
                    name=part.tool_name or "tool",
                    input=part.tool_input,
                )
            )
        elif part.type == "tool_result":
            blocks.append(
                _Block(
                    "result",
                    call_id=part.tool_call_id or "",
                    text=part.tool_output or "",
                    is_error=part.is_error,
                )
            )
        elif part.text and part.type != "redacted_reasoning":
            blocks.append(_Block("text", text=part.text, name=part.type))
    if not blocks and message.content:
        blocks.append(_Block("text", text=message.content))
    return blocks


#: Keys of a Chat Completions message that a Responses input message cannot carry.
_CHAT_ONLY = frozenset({"tool_calls", "tool_call_id", "function_call", "name"})


def _responses_native(message: StoredMessage) -> _Block | None:
    """A message that is already a Responses input item, passed back exactly as stored.

    That is every Responses item (reasoning keeps its encrypted content, messages their ids),
    every item of a kind lossless does not know, and a plain chat message (``role`` and a
    string ``content``: the SDK's easy input message, ``developer`` role included). An item
    with a ``call_id`` pairs by it: ``*_output`` items are results, the others calls; hosted
    tool calls (web search, file search, ...) carry no ``call_id`` and stand alone.
    """
    source = message.source_format
    if source not in ("openai_responses", "unknown", "openai_chat"):
        return None
    item = message.to_source()
    if not isinstance(item, dict):
        return None
    if source == "openai_chat" and (
        not isinstance(item.get("content"), str)
        or item.get("role") not in ("user", "assistant", "system", "developer")
        or not _CHAT_ONLY.isdisjoint(item)
    ):
        return None
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        return _Block("native", native=item)
    kind = item.get("type")
    is_output = isinstance(kind, str) and kind.endswith("_output")
    return _Block(
        "native", native=item, call_id=call_id, name="tool_result" if is_output else "tool_call"
    )


def _openclaw_native(message: StoredMessage) -> list[_Block]:
    """An OpenClaw message as it was stored: a message with a list of content blocks as its
    envelope and each block (tool calls pair by their ids), any other message whole (a tool
    result pairs by its ``toolCallId``)."""
    source = message.to_source()
    content = source.get("content") if isinstance(source, dict) else None
    if not isinstance(source, dict):
        return [_Block("native", native=source)]
    if source.get("role") in ("user", "assistant") and isinstance(content, list):
        blocks = [_Block("envelope", native={k: v for k, v in source.items() if k != "content"})]
        for block in content:
            is_call = isinstance(block, dict) and block.get("type") == "toolCall"
            blocks.append(
                _Block(
                    "native",
                    native=block,
                    call_id=str(block.get("id") or "") if is_call else "",
                    name="tool_call" if is_call else "",
                )
            )
        return blocks
    if source.get("role") == "toolResult":
        call_id = str(source.get("toolCallId") or "")
        return [_Block("native", native=source, call_id=call_id, name="tool_result")]
    return [_Block("native", native=source)]


def _langchain_native(message: StoredMessage) -> list[_Block]:
    """A LangChain message as it was stored: an AI message as its envelope and each tool call
    (paired by id), a tool message whole (paired by its ``tool_call_id``), any other whole."""
    source = message.to_source()
    body = source.get("data") if isinstance(source, dict) else None
    if not isinstance(body, dict):
        return [_Block("native", native=source)]
    calls = body.get("tool_calls")
    if isinstance(calls, list) and calls:
        return [_Block("envelope", native=source)] + [
            _Block("native", native=c, call_id=str(c.get("id") or ""), name="tool_call")
            for c in calls
            if isinstance(c, dict)
        ]
    if message.role == "tool":
        call_id = str(body.get("tool_call_id") or "")
        return [_Block("native", native=source, call_id=call_id, name="tool_result")]
    return [_Block("native", native=source)]


def _pydantic_ai_native(message: StoredMessage) -> list[_Block]:
    """A Pydantic AI message as it was stored: its envelope and each part (tool calls and tool
    returns pair by ``tool_call_id``)."""
    source = message.to_source()
    parts = source.get("parts") if isinstance(source, dict) else None
    if not isinstance(parts, list):
        return [_Block("native", native=source)]
    blocks = [_Block("envelope", native={k: v for k, v in source.items() if k != "parts"})]
    for part in parts:
        kind = part.get("part_kind") if isinstance(part, dict) else None
        call_id = str(part.get("tool_call_id") or "") if isinstance(part, dict) else ""
        if kind == "tool-call":
            blocks.append(_Block("native", native=part, call_id=call_id, name="tool_call"))
        elif kind in ("tool-return", "retry-prompt") and call_id:
            blocks.append(_Block("native", native=part, call_id=call_id, name="tool_result"))
        else:
            blocks.append(_Block("native", native=part))
    return blocks


def _llama_index_native(message: StoredMessage) -> list[_Block]:
    """A LlamaIndex message as it was stored: with tool calls (``tool_call`` blocks, or
    OpenAI-style ``tool_calls`` in ``additional_kwargs``), its envelope and each block and call
    (calls paired by id); a tool message whole (paired by its ``tool_call_id``); any other
    whole."""
    source = message.to_source()
    if not isinstance(source, dict):
        return [_Block("native", native=source)]
    found = source.get("additional_kwargs")
    extra = found if isinstance(found, dict) else {}
    kw_calls = [c for c in extra.get("tool_calls") or [] if isinstance(c, dict)]
    blocks = [b for b in source.get("blocks") or [] if isinstance(b, dict)]
    if kw_calls or any(b.get("block_type") == "tool_call" for b in blocks):
        out = [_Block("envelope", native=source)]
        for b in blocks:
            call = b.get("block_type") == "tool_call"
            call_id = str(b.get("tool_call_id") or "") if call else ""
            out.append(_Block("native", native=b, call_id=call_id, name="tool_call" * call))
        out += [
            _Block("native", native=c, call_id=str(c.get("id") or ""), name="tool_call")
            for c in kw_calls
        ]
        return out
    if message.role == "tool":
        call_id = str(extra.get("tool_call_id") or "")
        return [_Block("native", native=source, call_id=call_id, name="tool_result")]
    return [_Block("native", native=source)]


def _is_call(b: _Block) -> bool:
    return b.kind == "call" or (b.kind == "native" and b.name == "tool_call")


def _is_result(b: _Block) -> bool:
    return b.kind == "result" or (b.kind == "native" and b.name == "tool_result")


def _sanitize(turns: list[tuple[str, list[_Block]]], *, pending_calls: bool = False) -> list[str]:
    """Drop tool results without their call and calls without their result (unless
    *pending_calls*: a call whose result has not come yet stays); return what went."""
    calls = {b.call_id for _, blocks in turns for b in blocks if _is_call(b)}
    results = {b.call_id for _, blocks in turns for b in blocks if _is_result(b)}
    dropped: list[str] = []
    for _, blocks in turns:
        keep = []
        for b in blocks:
            if _is_call(b) and b.call_id not in results and not pending_calls:
                dropped.append(f"tool call {b.call_id}")
            elif _is_result(b) and b.call_id not in calls:
                dropped.append(f"tool result {b.call_id}")
            else:
                keep.append(b)
        blocks[:] = keep
    return dropped


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def _anthropic(turns: list[tuple[str, list[_Block]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        content: list[dict[str, Any]] = []
        for b in blocks:
            if b.kind == "native":
                content.append(b.native)
            elif b.kind == "call":
                tool_input = b.input if isinstance(b.input, dict) else {}
                content.append(
                    {"type": "tool_use", "id": b.call_id, "name": b.name, "input": tool_input}
                )
            elif b.kind == "result":
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": b.call_id,
                    "content": b.text,
                }
                if b.is_error:
                    block["is_error"] = True
                content.append(block)
            else:
                content.append({"type": "text", "text": b.text})
        if not content:
            continue
        # Anthropic takes system text outside the messages, and wants roles to alternate.
        side = "assistant" if role == "assistant" else "user"
        if out and out[-1]["role"] == side:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": side, "content": content})
    return out


def _openai(turns: list[tuple[str, list[_Block]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        texts = [b.text for b in blocks if b.kind == "text"]
        calls = [b for b in blocks if b.kind == "call"]
        results = [b for b in blocks if b.kind == "result"]
        if role == "assistant" and (texts or calls):
            message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c.call_id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _arguments(c.input)},
                    }
                    for c in calls
                ]
            out.append(message)
        elif texts:
            out.append(
                {"role": "system" if role == "system" else "user", "content": "\n".join(texts)}
            )
        out.extend({"role": "tool", "tool_call_id": r.call_id, "content": r.text} for r in results)
    return out


def _responses(turns: list[tuple[str, list[_Block]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        texts = [b.text for b in blocks if b.kind == "text"]
        if texts:
            speaker = role if role in ("assistant", "system") else "user"
            out.append({"role": speaker, "content": "\n".join(texts)})
        for b in blocks:
            if b.kind == "native":
                out.append(b.native)  # reasoning items keep their encrypted content
            elif b.kind == "call":
                out.append(
                    {
                        "type": "function_call",
                        "call_id": b.call_id,
                        "name": b.name,
                        "arguments": _arguments(b.input),
                    }
                )
            elif b.kind == "result":
                out.append({"type": "function_call_output", "call_id": b.call_id, "output": b.text})
    return out


def _millis(blocks: Sequence[_Block]) -> int:
    """The newest time of *blocks* in epoch milliseconds (OpenClaw's ``timestamp``); 0 when
    none carries one."""
    moments = [moment for b in blocks if b.at and (moment := parse_ts(b.at)) is not None]
    return int(max(moments).timestamp() * 1000) if moments else 0


def _openclaw(turns: list[tuple[str, list[_Block]]]) -> list[dict[str, Any]]:
    """OpenClaw's ``AgentMessage``s: its own messages exactly as stored (less a tool call whose
    result is gone), others converted (summaries are user messages), with the time they were
    said (a summary's: when its sources end)."""
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        when = _millis(blocks)
        envelope = next((b.native for b in blocks if b.kind == "envelope"), None)
        natives = [b.native for b in blocks if b.kind == "native"]
        if envelope is not None:
            if natives:
                out.append({**envelope, "content": natives})
            continue
        out.extend(natives)
        texts = [b.text for b in blocks if b.kind == "text"]
        calls = [b for b in blocks if b.kind == "call"]
        if role == "assistant" and (texts or calls):
            out.append(
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": t} for t in texts]
                    + [
                        {
                            "type": "toolCall",
                            "id": c.call_id,
                            "name": c.name,
                            "arguments": c.input if isinstance(c.input, dict) else {},
                        }
                        for c in calls
                    ],
                    "api": "lossless",
                    "provider": "lossless",
                    "model": "lossless",
                    "usage": _NO_USAGE,
                    "stopReason": "toolUse" if calls else "stop",
                    "timestamp": when,
                }
            )
        elif texts:
            out.append({"role": "user", "content": "\n".join(texts), "timestamp": when})
        out.extend(
            {
                "role": "toolResult",
                "toolCallId": r.call_id,
                "toolName": r.name or "tool",
                "content": [{"type": "text", "text": r.text}],
                "isError": r.is_error,
                "timestamp": when,
            }
            for r in blocks
            if r.kind == "result"
        )
    return out


def _langchain(turns: list[tuple[str, list[_Block]]]) -> list[dict[str, Any]]:
    """LangChain's serialized messages (``messages_from_dict`` reads them): its own messages
    exactly as stored (less a tool call whose result is gone), summaries as system messages
    marked ``lossless_summary``, other shapes converted."""
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        envelope = next((b.native for b in blocks if b.kind == "envelope"), None)
        natives = [b.native for b in blocks if b.kind == "native"]
        if envelope is not None:
            body = {**envelope["data"], "tool_calls": natives}
            if natives or body.get("content"):
                out.append({**envelope, "data": body})
            continue
        out.extend(natives)
        texts = [b.text for b in blocks if b.kind == "text"]
        calls = [b for b in blocks if b.kind == "call"]
        text = "\n".join(texts)
        if role == "assistant" and (texts or calls):
            tool_calls = [
                {
                    "name": c.name,
                    "args": c.input if isinstance(c.input, dict) else {},
                    "id": c.call_id,
                    "type": "tool_call",
                }
                for c in calls
            ]
            out.append({"type": "ai", "data": {"content": text, "tool_calls": tool_calls}})
        elif texts:
            summary = text.startswith(UNTRUSTED_NOTE)
            kind = "system" if role == "system" or summary else "human"
            data: dict[str, Any] = {"content": text}
            if summary:
                data["additional_kwargs"] = {"lossless_summary": True}
            out.append({"type": kind, "data": data})
        out.extend(
            {
                "type": "tool",
                "data": {
                    "content": r.text,
                    "tool_call_id": r.call_id,
                    "status": "error" if r.is_error else "success",
                },
            }
            for r in blocks
            if r.kind == "result"
        )
    return out


def _pydantic_ai(turns: list[tuple[str, list[_Block]]]) -> list[dict[str, Any]]:
    """Pydantic AI's messages (``ModelMessagesTypeAdapter`` reads them): its own exactly as
    stored (less a tool call whose return is gone), summaries as system prompt parts of a
    request, other shapes converted."""
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        envelope = next((b.native for b in blocks if b.kind == "envelope"), None)
        natives = [b.native for b in blocks if b.kind == "native"]
        if envelope is not None:
            if natives:
                out.append({**envelope, "parts": natives})
            continue
        out.extend(natives)
        texts = [b.text for b in blocks if b.kind == "text"]
        calls = [b for b in blocks if b.kind == "call"]
        results = [b for b in blocks if b.kind == "result"]
        if role == "assistant" and (texts or calls):
            parts: list[dict[str, Any]] = [{"part_kind": "text", "content": t} for t in texts] + [
                {
                    "part_kind": "tool-call",
                    "tool_name": c.name,
                    "args": c.input if isinstance(c.input, dict) else {},
                    "tool_call_id": c.call_id,
                }
                for c in calls
            ]
            out.append({"kind": "response", "parts": parts})
        elif texts:
            text = "\n".join(texts)
            kind = (
                "system-prompt"
                if role == "system" or text.startswith(UNTRUSTED_NOTE)
                else "user-prompt"
            )
            out.append({"kind": "request", "parts": [{"part_kind": kind, "content": text}]})
        if results:
            out.append(
                {
                    "kind": "request",
                    "parts": [
                        {
                            "part_kind": "tool-return",
                            "tool_name": r.name or "tool",
                            "content": r.text,
                            "tool_call_id": r.call_id,
                        }
                        for r in results
                    ],
                }
            )
    return out


def _llama_index(turns: list[tuple[str, list[_Block]]]) -> list[dict[str, Any]]:
    """LlamaIndex's chat messages (``ChatMessage.model_validate`` reads them): its own exactly
    as stored (less a tool call whose result is gone), summaries as system messages marked
    ``lossless_summary``, other shapes converted."""
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        envelope = next((b.native for b in blocks if b.kind == "envelope"), None)
        natives = [b.native for b in blocks if b.kind == "native"]
        if envelope is not None:
            kept_blocks = [n for n in natives if "block_type" in n]
            kw_calls = [n for n in natives if "block_type" not in n]
            extra = dict(envelope.get("additional_kwargs") or {})
            if "tool_calls" in extra:
                extra["tool_calls"] = kw_calls
                if not kw_calls:
                    extra.pop("tool_calls")
            if kept_blocks or kw_calls:
                out.append({**envelope, "blocks": kept_blocks, "additional_kwargs": extra})
            continue
        out.extend(natives)
        texts = [b.text for b in blocks if b.kind == "text"]
        calls = [b for b in blocks if b.kind == "call"]
        text = "\n".join(texts)
        if role == "assistant" and (texts or calls):
            extra = {
                "tool_calls": [
                    {
                        "id": c.call_id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _arguments(c.input)},
                    }
                    for c in calls
                ]
            }
            out.append(
                {
                    "role": "assistant",
                    "blocks": [{"block_type": "text", "text": text}],
                    "additional_kwargs": extra if calls else {},
                }
            )
        elif texts:
            summary = text.startswith(UNTRUSTED_NOTE)
            out.append(
                {
                    "role": "system" if role == "system" or summary else "user",
                    "blocks": [{"block_type": "text", "text": text}],
                    "additional_kwargs": {"lossless_summary": True} if summary else {},
                }
            )
        out.extend(
            {
                "role": "tool",
                "blocks": [{"block_type": "text", "text": r.text}],
                "additional_kwargs": {"tool_call_id": r.call_id},
            }
            for r in blocks
            if r.kind == "result"
        )
    return out


#: The usage of a message lossless wrote (OpenClaw's assistant messages carry one).
_NO_USAGE = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


_RENDER = {
    "anthropic": _anthropic,
    "openai": _openai,
    "responses": _responses,
    "openclaw": _openclaw,
    "langchain": _langchain,
    "pydantic_ai": _pydantic_ai,
    "llama_index": _llama_index,
}


def blocks(message: StoredMessage) -> list[_Block]:
    """A stored message as format-neutral blocks, whole (large files as ingested): its text
    (each block's ``name`` the type of its part: ``text``, ``reasoning``, ...), its tool
    calls and its tool results, in order."""
    return _blocks(message, "", whole=True)


def render(messages: Sequence[StoredMessage], format: str) -> list[dict[str, Any]]:
    """*messages* (every one, whole: large files as they were ingested, no tool call or
    result left out) in the *format* a host or provider reads, by the renderers the
    assembled context uses (an export of what was said, not a context to send)."""
    if format not in FORMATS:
        raise ValueError(f"unknown context format {format!r}; use one of: {', '.join(FORMATS)}")
    return _RENDER[format]([(m.role, _blocks(m, format, whole=True)) for m in messages])
