"""The ``anthropic`` summarizer: Claude models through the official SDK's Messages API.

``request.system`` goes in the ``system`` field and ``request.prompt`` as the user message.
Install the SDK with ``pip install 'lossless[anthropic]'``; it is imported only when this
summarizer is made. Registered through the ``lossless.summarizers`` entry-point group.

The temperature is not sent unless asked for (``send_temperature = true`` in the profile):
Anthropic's newer models reject the parameter, and recent SDKs no longer have it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    import anthropic as anthropic_sdk

__all__ = ["AnthropicSummarizer"]

#: Output cap when a request does not give one (the Messages API requires it).
OUTPUT_FACTOR = 3


class AnthropicSummarizer(SdkSummarizer):
    """Summaries from Anthropic's Messages API (or a server that speaks it).

    *api_key* and *base_url* default to ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL``; an
    endpoint on this machine needs no key. *timeout* bounds each HTTP attempt and
    *max_retries* is how many times the SDK retries 429, 5xx and timeouts (honouring
    ``retry-after``). *send_temperature* (default no) sends the request's temperature.
    """

    name = "anthropic"
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
    ) -> None:
        sdk, key, url = self._connect(
            model, api_key=api_key, base_url=base_url, key_source=key_source
        )
        self.send_temperature = bool(send_temperature)
        self._client: anthropic_sdk.Anthropic = sdk.Anthropic(
            api_key=key, base_url=url, timeout=timeout, max_retries=max_retries
        )

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """One Messages call: ``system`` from the request, its prompt as the user turn."""
        max_tokens = request.max_output_tokens or OUTPUT_FACTOR * request.target_tokens
        extra_body: dict[str, Any] = {}
        if self.send_temperature:
            # Passed as body data: SDK versions differ on whether the argument exists.
            extra_body["temperature"] = request.temperature
        return self._result(
            self._create(
                model=self._model,
                max_tokens=max_tokens,
                system=request.system,
                messages=[{"role": "user", "content": request.prompt}],
                extra_body=extra_body or None,
            )
        )

    def agent_step(self, request: AgentRequest) -> AgentStep:
        """One Messages call with tools. Assistant turns are sent back with the blocks they
        came with (thinking blocks included); consecutive tool results go in one user turn."""
        params: dict[str, Any] = {
            "model": self._model,
            "max_tokens": request.max_output_tokens,
            "system": request.system,
            "messages": _messages(request.turns),
        }
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
            params["tool_choice"] = {"type": request.tool_choice}
        if self.send_temperature:
            params["extra_body"] = {"temperature": request.temperature}
        response = self._create(**params)
        blocks = sdk_field(response, "content")
        if not isinstance(blocks, list):
            raise self._malformed("no content blocks")
        raw = [_plain(block) for block in blocks]
        text = "".join(
            b["text"] for b in raw if b.get("type") == "text" and isinstance(b.get("text"), str)
        )
        calls = tuple(
            ToolCall(
                id=str(b.get("id", "")),
                name=str(b.get("name", "")),
                arguments=b["input"] if isinstance(b.get("input"), dict) else {},
                error=None if isinstance(b.get("input"), dict) else "the input is not an object",
            )
            for b in raw
            if b.get("type") == "tool_use"
        )
        if not text and not calls:
            if sdk_field(response, "stop_reason") == "refusal":
                raise SummarizerError(f"anthropic model {self.model} refused to answer")
            raise self._malformed("neither a text nor a tool_use block")
        usage = sdk_field(response, "usage")
        return AgentStep(
            text=text,
            tool_calls=calls,
            raw=raw,
            model=self.model,
            input_tokens=sdk_int(sdk_field(usage, "input_tokens")),
            output_tokens=sdk_int(sdk_field(usage, "output_tokens")),
        )

    def _create(self, **params: Any) -> object:
        try:
            return self._client.messages.create(**params)
        except self._sdk.AnthropicError as exc:
            raise self._error(exc) from None
        except ValueError:  # a 200 whose body is not JSON
            raise self._malformed("its body is not JSON") from None

    def _error(self, exc: Exception) -> SummarizerError:
        return sdk_error(
            exc,
            self._sdk,
            provider="anthropic",
            endpoint=self.endpoint,
            key=self._key,
            key_source=self.key_source,
        )

    def _malformed(self, why: str) -> SummarizerError:
        return SummarizerError(
            f"anthropic at {self.endpoint} sent an answer lossless cannot read: {why}; check"
            " that the endpoint speaks the Anthropic Messages API"
        )

    def _result(self, response: object) -> SummaryResult:
        blocks = sdk_field(response, "content")
        if not isinstance(blocks, list):
            raise self._malformed("no content blocks")
        texts = [
            text
            for block in blocks
            if sdk_field(block, "type") == "text"
            and isinstance(text := sdk_field(block, "text"), str)
        ]
        stop = sdk_field(response, "stop_reason")
        if not texts:
            if stop == "refusal":
                raise SummarizerError(f"anthropic model {self.model} refused to summarize")
            raise self._malformed("no text block")
        usage = sdk_field(response, "usage")
        extra: dict[str, object] = {}
        for key, value in (("stop_reason", stop), ("served_model", sdk_field(response, "model"))):
            if isinstance(value, str) and value:
                extra[key] = value
        return SummaryResult(
            text="".join(texts),
            model=self.model,
            input_tokens=sdk_int(sdk_field(usage, "input_tokens")),
            output_tokens=sdk_int(sdk_field(usage, "output_tokens")),
            extra=extra,
        )


def _plain(block: object) -> dict[str, Any]:
    """A content block as the plain dict the API accepts back."""
    if isinstance(block, dict):
        return block
    dump = getattr(block, "model_dump", None)
    if callable(dump):
        value = dump(exclude_none=True)
        if isinstance(value, dict):
            return value
    return {"type": str(sdk_field(block, "type") or "unknown")}


def _messages(turns: tuple[AgentTurn, ...]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": turn.call_id or "",
                "content": turn.text,
                "is_error": turn.is_error,
            }
            last = messages[-1] if messages else None
            if last and last["role"] == "user" and isinstance(last["content"], list):
                last["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result]})
        elif turn.role == "assistant":
            blocks: list[dict[str, Any]]
            if isinstance(turn.raw, list):
                blocks = turn.raw
            else:
                blocks = [{"type": "text", "text": turn.text}] if turn.text else []
                blocks += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                    for c in turn.tool_calls
                ]
            messages.append({"role": "assistant", "content": blocks})
        else:
            messages.append({"role": "user", "content": turn.text})
    return messages
