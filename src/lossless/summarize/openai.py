"""The ``openai`` summarizer: any OpenAI-compatible endpoint, through the official SDK.

Chat Completions with the request's system prompt and user prompt, so it works with OpenAI
and with every server that speaks the same API (Ollama, vLLM, llama.cpp server, LM Studio,
OpenRouter, ...): point ``base_url`` at it. Install the SDK with
``pip install 'lossless[openai]'``; it is imported only when this summarizer is made.

Registered through the ``lossless.summarizers`` entry-point group, like a third-party
provider. Most users get it from configuration via
:func:`lossless.summarize.providers.build_summarizer`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from .base import (
    AgentRequest,
    AgentStep,
    AgentTurn,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
    ToolCall,
)
from .providers import sdk_error, sdk_field, sdk_int
from .sdk import SdkSummarizer

if TYPE_CHECKING:
    import openai as openai_sdk

__all__ = ["OpenAISummarizer"]

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]


class OpenAISummarizer(SdkSummarizer):
    """Summaries from an OpenAI-compatible Chat Completions endpoint.

    *api_key* and *base_url* default to ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``; an
    endpoint on this machine needs no key. *timeout* bounds each HTTP attempt and
    *max_retries* is how many times the SDK retries 429, 5xx and timeouts (honouring
    ``retry-after``). *send_temperature* (default yes) can be turned off for models that
    reject it. *max_tokens_field* is the request field for the output cap: by default
    ``max_completion_tokens`` for api.openai.com and ``max_tokens`` for other servers.
    """

    name = "openai"
    tool_calling = True

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        key_source: str | None = None,
        send_temperature: bool | None = None,
        max_tokens_field: MaxTokensField | None = None,
    ) -> None:
        sdk, key, url = self._connect(
            model, api_key=api_key, base_url=base_url, key_source=key_source
        )
        self.send_temperature = True if send_temperature is None else send_temperature
        if max_tokens_field is None:
            official = self.endpoint == "api.openai.com"
            max_tokens_field = "max_completion_tokens" if official else "max_tokens"
        self.max_tokens_field: MaxTokensField = max_tokens_field
        self._client: openai_sdk.OpenAI = sdk.OpenAI(
            api_key=key, base_url=url, timeout=timeout, max_retries=max_retries
        )

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """One Chat Completions call: ``request.system`` as the system message,
        ``request.prompt`` as the user message."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system},
                {"role": "user", "content": request.prompt},
            ],
        }
        if self.send_temperature:
            params["temperature"] = request.temperature
        if request.max_output_tokens is not None:
            params[self.max_tokens_field] = request.max_output_tokens
        return self._result(self._create(params))

    def agent_step(self, request: AgentRequest) -> AgentStep:
        """One Chat Completions call with function tools; the turns become ``assistant``
        messages with ``tool_calls`` and ``tool`` messages."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": request.system}]
        messages += [_chat_message(turn) for turn in request.turns]
        params: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            self.max_tokens_field: request.max_output_tokens,
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
            params["tool_choice"] = request.tool_choice
        if self.send_temperature:
            params["temperature"] = request.temperature
        response = self._create(params)
        choices = sdk_field(response, "choices")
        if not isinstance(choices, list) or not choices:
            raise self._malformed("no choices")
        message = sdk_field(choices[0], "message")
        content = sdk_field(message, "content")
        wire_calls = sdk_field(message, "tool_calls")
        calls = tuple(_tool_call(c) for c in wire_calls) if isinstance(wire_calls, list) else ()
        if not isinstance(content, str) and not calls:
            raise self._malformed("the first choice has neither text nor tool calls")
        usage = sdk_field(response, "usage")
        text = content if isinstance(content, str) else ""
        raw: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            raw["tool_calls"] = [_wire_call(c) for c in calls]
        return AgentStep(
            text=text,
            tool_calls=calls,
            raw=raw,
            model=self.model,
            input_tokens=sdk_int(sdk_field(usage, "prompt_tokens")),
            output_tokens=sdk_int(sdk_field(usage, "completion_tokens")),
        )

    def _create(self, params: dict[str, Any]) -> object:
        try:
            return self._client.chat.completions.create(**params)
        except self._sdk.OpenAIError as exc:
            raise self._error(exc) from None
        except ValueError:  # a 200 whose body is not JSON
            raise self._malformed("its body is not JSON") from None

    def _error(self, exc: Exception) -> SummarizerError:
        return sdk_error(
            exc,
            self._sdk,
            provider="openai",
            endpoint=self.endpoint,
            key=self._key,
            key_source=self.key_source,
        )

    def _malformed(self, why: str) -> SummarizerError:
        return SummarizerError(
            f"openai at {self.endpoint} sent an answer lossless cannot read: {why}; check that"
            " the endpoint speaks the OpenAI Chat Completions API"
        )

    def _result(self, response: object) -> SummaryResult:
        choices = sdk_field(response, "choices")
        if not isinstance(choices, list) or not choices:
            raise self._malformed("no choices")
        message = sdk_field(choices[0], "message")
        content = sdk_field(message, "content")
        if not isinstance(content, str):
            refusal = sdk_field(message, "refusal")
            if isinstance(refusal, str) and refusal:
                raise SummarizerError(f"openai model {self.model} refused: {refusal[:200]}")
            raise self._malformed("the first choice has no text content")
        usage = sdk_field(response, "usage")
        extra: dict[str, object] = {}
        for key, value in (
            ("finish_reason", sdk_field(choices[0], "finish_reason")),
            ("served_model", sdk_field(response, "model")),
        ):
            if isinstance(value, str) and value:
                extra[key] = value
        return SummaryResult(
            text=content,
            model=self.model,
            input_tokens=sdk_int(sdk_field(usage, "prompt_tokens")),
            output_tokens=sdk_int(sdk_field(usage, "completion_tokens")),
            extra=extra,
        )


def _tool_call(call: object) -> ToolCall:
    """A Chat Completions tool call; arguments that are not a JSON object become an error
    the sub-agent is told about, not an exception."""
    function = sdk_field(call, "function")
    name = sdk_field(function, "name")
    text = sdk_field(function, "arguments")
    ident = sdk_field(call, "id")
    arguments: dict[str, Any] = {}
    error = None
    try:
        parsed = json.loads(text) if isinstance(text, str) and text.strip() else {}
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        arguments = parsed
    else:
        error = f"the arguments are not a JSON object: {str(text)[:200]!r}"
    return ToolCall(id=str(ident or ""), name=str(name or ""), arguments=arguments, error=error)


def _wire_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }


def _chat_message(turn: AgentTurn) -> dict[str, Any]:
    if turn.role == "tool":
        return {"role": "tool", "tool_call_id": turn.call_id or "", "content": turn.text}
    if turn.role == "assistant":
        if isinstance(turn.raw, dict):
            return turn.raw
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.tool_calls:
            message["tool_calls"] = [_wire_call(c) for c in turn.tool_calls]
        return message
    return {"role": "user", "content": turn.text}
