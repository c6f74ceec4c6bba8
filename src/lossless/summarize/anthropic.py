"""The ``anthropic`` summarizer: Claude models through the official SDK's Messages API.

``request.system`` goes in the ``system`` field and ``request.prompt`` as the user message.
Install the SDK with ``pip install 'lossless[anthropic]'``; it is imported only when this
summarizer is made. Registered through the ``lossless.summarizers`` entry-point group.

The temperature is not sent unless asked for (``send_temperature = true`` in the profile):
Anthropic's newer models reject the parameter, and recent SDKs no longer have it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import SummarizerError, SummaryRequest, SummaryResult
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
        try:
            response = self._client.messages.create(
                model=self._model,
                max_tokens=max_tokens,
                system=request.system,
                messages=[{"role": "user", "content": request.prompt}],
                extra_body=extra_body or None,
            )
        except self._sdk.AnthropicError as exc:
            raise self._error(exc) from None
        except ValueError:  # a 200 whose body is not JSON
            raise self._malformed("its body is not JSON") from None
        return self._result(response)

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
