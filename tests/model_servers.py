"""Local model servers for the real-host end-to-end tests: each speaks one provider's wire
format (streamed, as the hosts ask) on 127.0.0.1 with scripted replies, and records every
request it was sent.

* :class:`AnthropicServer` — the Messages API (``POST /v1/messages``, server-sent events), as
  Claude Code calls it. A compaction request (its last user text asks for "a detailed summary
  of the conversation") is answered with ``<summary>SUMMARY-n ...</summary>``.
* :class:`ChatServer` — OpenAI's Chat Completions (``POST /v1/chat/completions``, streamed
  when asked), as Hermes Agent and OpenClaw call it. A user message ``RECALL: words`` is
  answered with an ``lcm_grep`` tool call for the words; the tool's result with ``Found: ``
  and the start of what came back.
* :class:`ResponsesServer` — OpenAI's Responses API (``POST /v1/responses``, server-sent
  events), as Codex calls it. A compaction request (``request_kind: compaction`` in Codex's
  turn metadata) is answered with ``SUMMARY-n ...``.

Anything else is answered by ``reply(text)``: "yes" gets "Confirmed.", other text "Reply to:
<text>", so the same words always get the same answer.

Each answer's usage counts the request as a provider would (:func:`prompt_tokens`: a token per
four characters of what the model reads: system prompt, messages, tool schemas), so a host
that learns from usage learns true figures; :meth:`_Server.prompt_sizes` gives every request's
count, to check what a host sent against its window.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def reply(text: str) -> str:
    """The scripted answer to the user's *text*."""
    said = text.strip()
    return "Confirmed." if said.lower() == "yes" else f"Reply to: {said[:200]}"


def prompt_tokens(body: dict[str, Any]) -> int:
    """What a request's model reads, in tokens as a provider would count them (about four
    characters a token): the system prompt, the messages or input items, the tool schemas."""
    read = {k: body.get(k) for k in ("system", "messages", "input", "instructions", "tools")}
    return -(-len(json.dumps(read, ensure_ascii=False, separators=(",", ":"))) // 4)


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [
        str(b["text"])
        for b in content or []
        if isinstance(b, dict) and isinstance(b.get("text"), str)
    ]


class _Server:
    """A threaded HTTP server that records requests; subclasses answer them."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.summaries = itertools.count(1)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                body = json.dumps({"data": [], "models": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                request = {"path": self.path, "headers": dict(self.headers), "body": body}
                owner.requests.append(request)
                owner.answer(self, request)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def prompt_sizes(self, path: str = "") -> list[int]:
        """Every model request's size (:func:`prompt_tokens`), in order; with *path*, of the
        requests to paths ending so."""
        return [
            prompt_tokens(r["body"])
            for r in self.requests
            if r["body"] and r["path"].split("?")[0].rstrip("/").endswith(path)
        ]

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        raise NotImplementedError

    @staticmethod
    def json(handler: BaseHTTPRequestHandler, data: Any, status: int = 200) -> None:
        body = json.dumps(data).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    @staticmethod
    def stream(
        handler: BaseHTTPRequestHandler, events: Iterator[tuple[str, dict[str, Any]]]
    ) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        for name, data in events:
            handler.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        handler.wfile.flush()
        handler.close_connection = True


class AnthropicServer(_Server):
    """The Anthropic Messages API, streamed (see the module doc). With *window*, a request
    over it is refused as the API refuses one (``prompt is too long``)."""

    COMPACTION = "detailed summary of the conversation"

    def __init__(self, window: int | None = None) -> None:
        super().__init__()
        self.window = window
        self.refused = 0

    def answer(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        path = request["path"]
        if "/count_tokens" in path:
            self.json(handler, {"input_tokens": prompt_tokens(request["body"])})
            return
        if not path.startswith("/v1/messages"):
            self.json(handler, {"error": {"type": "not_found", "message": path}}, 404)
            return
        read = prompt_tokens(request["body"])
        if self.window is not None and read > self.window:
            self.refused += 1
            message = f"prompt is too long: {read} tokens > {self.window} maximum"
            self.json(
                handler,
                {"type": "error", "error": {"type": "invalid_request_error", "message": message}},
                400,
            )
            return
        body = request["body"]
        step = self.scripted_call(body)
        if step is not None:
            name, arguments = step
            self.stream(handler, self.tool_use_events(name, arguments, len(self.requests)))
            return
        text = self.text_for(body)
        self.stream(
            handler,
            self.events(text, body.get("model", "m"), prompt_tokens(body)),
        )

    @staticmethod
    def _turn(body: dict[str, Any]) -> tuple[str, list[str]] | None:
        """The user's words of the turn under way and the tool results it got so far (in
        order), or ``None`` for a request that is not part of a user's turn."""
        results: list[str] = []
        for message in reversed(body.get("messages") or []):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            blocks = content if isinstance(content, list) else []
            answered = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            if answered:
                out = answered[-1].get("content")
                results.append(out if isinstance(out, str) else "\n".join(_texts(out)))
                continue
            texts = _texts(content)
            if texts:
                return texts[-1].split("</system-reminder>")[-1].strip(), results[::-1]
        return None

    def scripted_call(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """A turn ``CALLS [[tool, {arguments}], ...]`` calls each tool in turn (the offered
        tool whose name is *tool* or ends with ``__tool``), then answers ``Tool said: <the last
        result>``; ``None`` when the request is not such a step."""
        turn = self._turn(body)
        if turn is None or not turn[0].startswith("CALLS "):
            return None
        said, results = turn
        steps = json.loads(said.removeprefix("CALLS "))
        if len(results) >= len(steps):
            return None
        name, arguments = steps[len(results)]
        offered = [t.get("name") or "" for t in body.get("tools") or []]
        chosen = next((t for t in offered if t == name or t.endswith("__" + name)), name)
        return chosen, arguments

    def last_user_text(self, body: dict[str, Any]) -> str:
        for message in reversed(body.get("messages") or []):
            if message.get("role") == "user":
                texts = _texts(message.get("content"))
                if texts:
                    return texts[-1]
        return ""

    def text_for(self, body: dict[str, Any]) -> str:
        turn = self._turn(body)
        if turn is not None and turn[0].startswith("CALLS ") and turn[1]:
            return f"Tool said: {turn[1][-1][:2000]}"
        said = self.last_user_text(body)
        if self.COMPACTION in said:
            n = next(self.summaries)
            return (
                f"<analysis>scripted</analysis>\n<summary>SUMMARY-{n}: the work so far.</summary>"
            )
        # The user's words are the last text of the last user message (Claude Code puts its
        # reminders before them).
        return reply(said.split("</system-reminder>")[-1])

    @staticmethod
    def events(text: str, model: str, read: int = 100) -> Iterator[tuple[str, dict[str, Any]]]:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": text}
        return AnthropicServer.one_block(block, delta, "end_turn", "msg_scripted", model, read)

    @staticmethod
    def tool_use_events(
        name: str, arguments: dict[str, Any], n: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        block = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
        return AnthropicServer.one_block(block, delta, "tool_use", f"msg_call_{n}", "m", 100)

    @staticmethod
    def one_block(
        block: dict[str, Any],
        delta: dict[str, Any],
        stop_reason: str,
        message_id: str,
        model: str,
        read: int,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """A streamed reply of one content *block*, filled by one *delta*."""
        message = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": read, "output_tokens": 10},
        }
        yield "message_start", {"type": "message_start", "message": message}
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        )
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        )
        yield "message_stop", {"type": "message_stop"}


class ResponsesServer(_Server):
    """OpenAI's Responses API, streamed (see the module doc).

    A user turn ``CALL <tool> <json arguments>`` is answered with a call of the offered tool
    whose name is *tool* or ends with it (an MCP tool's name carries its server's), and the
    turn's next request, carrying the call's output, with ``Tool said: <output>``."""

    def answer(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        if not request["path"].rstrip("/").endswith("/responses"):
            self.json(handler, {"error": {"message": request["path"]}}, 404)
            return
        n = len(self.requests)
        body = request["body"]
        read = prompt_tokens(body)
        if self.is_compaction(request):
            text = f"SUMMARY-{next(self.summaries)}: the work so far."
        else:
            said = self.last_user_text(body)
            output = self.call_output(body)
            if said.startswith("CALL ") and output is None:
                _, name, arguments = said.split(" ", 2)
                offered = [
                    (t.get("name") or "", None) for t in body.get("tools") or []
                ] + [  # a namespace's tools (an MCP server's, in Codex)
                    (inner.get("name") or "", t.get("name"))
                    for t in body.get("tools") or []
                    if t.get("type") == "namespace"
                    for inner in t.get("tools") or []
                ]
                chosen, space = next(
                    ((t, ns) for t, ns in offered if t == name or t.endswith(name)), (name, None)
                )
                self.stream(handler, self.call_events(chosen, arguments, n, read, space))
                return
            text = f"Tool said: {output[:2000]}" if output is not None else reply(said)
        self.stream(handler, self.events(text, n, read))

    @staticmethod
    def call_output(body: dict[str, Any]) -> str | None:
        """The output of a tool call when it is the input's last item (the turn goes on)."""
        items = body.get("input") or []
        last = items[-1] if items else {}
        if last.get("type") not in ("function_call_output", "custom_tool_call_output"):
            return None
        output = last.get("output")
        return output if isinstance(output, str) else json.dumps(output)

    @staticmethod
    def call_events(
        name: str, arguments: str, n: int, read: int, namespace: str | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        item = {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }
        if namespace is not None:
            item["namespace"] = namespace
        yield "response.created", {"type": "response.created", "response": {"id": f"resp_{n}"}}
        yield (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": item},
        )
        yield (
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        )
        yield ResponsesServer.completed(n, read)

    @staticmethod
    def completed(n: int, read: int) -> tuple[str, dict[str, Any]]:
        """The ``response.completed`` event of response *n*, which read *read* tokens."""
        usage = {
            "input_tokens": read,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": read + 10,
        }
        return (
            "response.completed",
            {"type": "response.completed", "response": {"id": f"resp_{n}", "usage": usage}},
        )

    @staticmethod
    def is_compaction(request: dict[str, Any]) -> bool:
        meta = request["headers"].get("x-codex-turn-metadata") or ""
        try:
            kind = json.loads(meta).get("request_kind")
        except (ValueError, AttributeError):
            kind = None
        return kind == "compaction"

    @staticmethod
    def last_user_text(body: dict[str, Any]) -> str:
        for item in reversed(body.get("input") or []):
            if item.get("type", "message") == "message" and item.get("role") == "user":
                text = "\n".join(_texts(item.get("content")))
                if not text.startswith("<"):  # the environment context Codex adds
                    return text
        return ""

    @staticmethod
    def events(text: str, n: int, read: int = 100) -> Iterator[tuple[str, dict[str, Any]]]:
        item = {
            "type": "message",
            "id": f"msg_{n}",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        yield "response.created", {"type": "response.created", "response": {"id": f"resp_{n}"}}
        yield (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "content": []},
            },
        )
        yield (
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "output_index": 0,
                "content_index": 0,
                "item_id": item["id"],
                "delta": text,
            },
        )
        yield (
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": item,
            },
        )
        yield ResponsesServer.completed(n, read)


class ChatServer(_Server):
    """OpenAI Chat Completions (see the module doc). With *delay*, each answer waits that
    many seconds first (a model's latency)."""

    RECALL = "RECALL: "
    HOST_CONTEXT = "OPENCLAW_INTERNAL_CONTEXT"

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay

    def answer(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        if not request["path"].rstrip("/").endswith("/chat/completions"):
            self.json(handler, {"error": {"message": f"no {request['path']} here"}}, 404)
            return
        if self.delay:
            time.sleep(self.delay)
        body = request["body"]
        text, calls = self.plan(body.get("messages") or [])
        read = prompt_tokens(body)
        usage = {"prompt_tokens": read, "completion_tokens": 10, "total_tokens": read + 10}
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            self.json(
                handler,
                {
                    "id": "chatcmpl-scripted",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "m"),
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                },
            )
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()

        def chunk(delta: dict[str, Any] | None, reason: str | None = None, **extra: Any) -> None:
            data: dict[str, Any] = {
                "id": "chatcmpl-scripted",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body.get("model", "m"),
                "choices": []
                if delta is None
                else [{"index": 0, "delta": delta, "finish_reason": reason}],
                **extra,
            }
            handler.wfile.write(f"data: {json.dumps(data)}\n\n".encode())

        chunk({"role": "assistant", "content": ""})
        if text:
            chunk({"content": text})
        for i, call in enumerate(calls):
            chunk({"tool_calls": [{"index": i, **call}]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk(None, usage=usage)
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True

    def plan(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        """The scripted reply to *messages*: its text and tool calls. A host's own trailing
        context (OpenClaw appends its runtime context as a last user message) is passed over."""
        said_by_host = [
            m for m in messages if self.HOST_CONTEXT not in " ".join(_texts(m.get("content")))
        ]
        last = said_by_host[-1] if said_by_host else {}
        if last.get("role") == "tool":
            found = " ".join(_texts(last.get("content")))
            return f"Found: {found[:2000]}", []
        said = " ".join(_texts(last.get("content"))) if last.get("role") == "user" else ""
        if self.RECALL in said:
            words = said.split(self.RECALL, 1)[1].strip()
            call = {
                "id": f"call_{next(self.summaries)}",
                "type": "function",
                "function": {"name": "lcm_grep", "arguments": json.dumps({"pattern": words})},
            }
            return "", [call]
        return reply(said.split("\n\n")[-1]), []

    def user_texts(self) -> list[list[str]]:
        """Each chat request's message texts, in order."""
        return [
            [" ".join(_texts(m.get("content"))) for m in r["body"].get("messages") or []]
            for r in self.requests
            if r["path"].rstrip("/").endswith("/chat/completions")
        ]


class SummaryServer(_Server):
    """A summarizing model at a real model's pace, for lossless's own summarizer: OpenAI Chat
    Completions (``/v1/chat/completions``) and the Anthropic Messages API (``/v1/messages``) on
    one port, not streamed (as the ``openai`` and ``anthropic`` summarizers call them).

    Each answer takes ``ttft`` seconds plus its tokens at ``tokens_per_second``; it is about a
    third of the request's output cap (the summarizer asks for three times its target), made
    of the words of the request's last user message, so it is smaller than its sources and
    says what they said. ``fail`` (a status: 500, 401) answers every request with that error;
    ``rate_limited`` answers that many requests with a 429 and ``retry-after: 1`` first.
    ``in_flight_max`` is the most requests it was answering at once. With ``hold``, no answer
    is sent before ``release()`` (a model that has not answered yet, for as long as a test
    needs)."""

    def __init__(
        self,
        ttft: float = 0.0,
        tokens_per_second: float | None = None,
        *,
        fail: int | None = None,
        rate_limited: int = 0,
        hold: bool = False,
    ) -> None:
        super().__init__()
        self.released = threading.Event()
        if not hold:
            self.released.set()
        self.ttft = ttft
        self.tokens_per_second = tokens_per_second
        self.fail = fail
        self.rate_limited = rate_limited
        self._guard = threading.Lock()
        self.in_flight = 0
        self.in_flight_max = 0
        self.answered = 0

    def answer(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        path = request["path"].split("?")[0].rstrip("/")
        anthropic = path.endswith("/messages")
        if not (anthropic or path.endswith("/chat/completions")):
            self.json(handler, {"error": {"message": f"no {path} here"}}, 404)
            return
        with self._guard:
            if self.rate_limited > 0:
                self.rate_limited -= 1
                limited = True
            else:
                limited = False
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
        try:
            self.released.wait(120)
            if limited:
                self._error(handler, 429, "slow down", retry_after="1")
                return
            if self.fail is not None:
                time.sleep(self.ttft)
                self._error(handler, self.fail, "the model is unavailable")
                return
            body = request["body"]
            cap = int(body.get("max_tokens") or body.get("max_completion_tokens") or 300)
            said = [m for m in body.get("messages") or [] if m.get("role") == "user"]
            words = " ".join(_texts(said[-1].get("content")) if said else []).split()
            words = [w for w in words if not w.startswith("<")]
            want = max(8, cap // 3)
            text = "Summary: " + " ".join(words[: max(4, int(want * 0.75))])
            out = -(-len(text) // 4)
            took = self.ttft + (out / self.tokens_per_second if self.tokens_per_second else 0.0)
            time.sleep(took)
            with self._guard:
                self.answered += 1
            if anthropic:
                self.json(
                    handler,
                    {
                        "id": "msg_summary",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model", "m"),
                        "content": [{"type": "text", "text": text}],
                        "stop_reason": "end_turn",
                        "stop_sequence": None,
                        "usage": {"input_tokens": prompt_tokens(body), "output_tokens": out},
                    },
                )
                return
            self.json(
                handler,
                {
                    "id": "chatcmpl-summary",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "m"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens(body),
                        "completion_tokens": out,
                        "total_tokens": prompt_tokens(body) + out,
                    },
                },
            )
        finally:
            with self._guard:
                self.in_flight -= 1

    def release(self) -> None:
        """Let the held answers go (see ``hold``)."""
        self.released.set()

    @staticmethod
    def _error(
        handler: BaseHTTPRequestHandler, status: int, message: str, retry_after: str | None = None
    ) -> None:
        body = json.dumps(
            {"type": "error", "error": {"type": "api_error", "message": message}}
        ).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        if retry_after is not None:
            handler.send_header("retry-after", retry_after)
        handler.end_headers()
        handler.wfile.write(body)
