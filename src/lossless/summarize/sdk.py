"""The shared set-up of summarizers that call a model through its provider's official SDK."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ConfigError
from .base import Summarizer
from .providers import describe_endpoint, standard_credentials

__all__ = ["SdkSummarizer"]


class SdkSummarizer(Summarizer):
    """Base of the ``openai`` and ``anthropic`` summarizers: the SDK imported lazily (with an
    error naming the extra to install), credentials resolved, and a repr without the key."""

    offline = False
    deterministic = False
    tool_calling = False

    endpoint: str
    base_url: str | None
    key_source: str

    def _connect(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str | None,
        key_source: str | None,
    ) -> tuple[ModuleType, str | None, str | None]:
        """Check the model, import the SDK, resolve the credentials; returns the SDK module,
        the key and the base URL to build the client with."""
        if not model:
            raise ConfigError(f"the {self.name} summarizer needs a model name (model = ...)")
        try:
            sdk = importlib.import_module(self.name)
        except ImportError:
            raise ConfigError(
                f"the {self.name} summarizer needs the {self.name} package:"
                f" pip install 'lossless[{self.name}]'"
            ) from None
        key, url, source = standard_credentials(
            self.name, api_key=api_key, base_url=base_url, key_source=key_source
        )
        self.model = model
        self._model: str = model
        self.base_url = url
        self.key_source = source
        self.endpoint = describe_endpoint(self.name, url)
        self._sdk = sdk
        self._key = key
        return sdk, key, url

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, endpoint={self.endpoint!r},"
            f" key from {self.key_source})"
        )
