"""Model providers from configuration: where the key comes from, and the summarizer to use.

:func:`build_summarizer` is what the engine calls. For ``summarizer = "openai"`` or
``"anthropic"``, or the name of a ``[profiles.NAME]`` table, it resolves the provider's
settings in this order:

1. a profile: the one named by ``summarizer``, else the first with that ``provider``;
2. the provider's standard variables (``OPENAI_API_KEY``/``OPENAI_BASE_URL``,
   ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL``);
3. the ``[custom_provider]`` table, when its ``provider`` matches.

A profile or custom entry takes its key from the variable named by ``api_key_env``, else from
``api_key`` in the file, else from the provider's standard variable. Endpoints on this machine
(``localhost``, ``127.x``, ``::1``: Ollama, llama.cpp, LM Studio, vLLM) need no key.

Keys are kept in memory only (the resolved settings, the SDK client): they are never logged,
stored, printed, or put in error messages and reprs (provider error texts are scrubbed of them
too, and SDK exceptions are not chained to ours).

Other names are looked up in the registry (``extractive``, ``scripted``, third-party entry
points). Every summarizer that is not offline is wrapped in the guards of ``[guards]``
(:mod:`.guards`); offline ones too with ``guards.offline = true``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from ..config import PROVIDERS, Config, CustomProviderConfig, ProviderProfile
from ..errors import ConfigError
from .base import AuthError, RateLimitedError, Summarizer, SummarizerError, SummarizerTimeout
from .guards import Clock, guard
from .registry import available, create

__all__ = [
    "STANDARD_VARIABLES",
    "ProviderSettings",
    "build_summarizer",
    "describe_endpoint",
    "is_local_url",
    "redact",
    "resolve_provider",
    "sdk_error",
    "sdk_field",
    "sdk_int",
    "standard_credentials",
]

#: The variables each provider's own SDK reads: (API key, base URL).
STANDARD_VARIABLES: dict[str, tuple[str, str]] = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}
DEFAULT_HOSTS = {"openai": "api.openai.com", "anthropic": "api.anthropic.com"}
#: Sent to endpoints on this machine when no key is configured (their SDK wants one).
LOCAL_PLACEHOLDER_KEY = "no-key-needed"
_LOCAL_HOSTS = ("localhost", "::1")


@dataclass(frozen=True)
class ProviderSettings:
    """What a provider summarizer is made with; ``api_key`` is left out of the repr."""

    provider: str
    model: str
    api_key: str = field(repr=False)
    base_url: str | None = None
    #: Where the key came from, for messages (a variable or config key name, never the key).
    key_source: str = ""
    send_temperature: bool | None = None
    #: The profile used, if any.
    profile: str | None = None

    def options(self) -> dict[str, Any]:
        """Keyword arguments for the provider's registered factory."""
        return {
            "model": self.model,
            "api_key": self.api_key,
            "base_url": self.base_url,
            "key_source": self.key_source,
            "send_temperature": self.send_temperature,
        }


def is_local_url(url: str | None) -> bool:
    """Whether *url* points at this machine (loopback), where servers usually need no key."""
    if not url:
        return False
    host = (urlsplit(url).hostname or "").lower()
    return host in _LOCAL_HOSTS or host.startswith("127.")


def describe_endpoint(provider: str, base_url: str | None) -> str:
    """The endpoint's host (and port) for messages: no path, no user info."""
    if not base_url:
        return DEFAULT_HOSTS.get(provider, provider)
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    return f"{host}:{parts.port}" if parts.port else host


def standard_credentials(
    provider: str,
    environ: Mapping[str, str] | None = None,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    key_source: str | None = None,
) -> tuple[str, str | None, str]:
    """The key, base URL and key source for *provider*: the given ones, else its standard
    variables; a loopback endpoint gets a placeholder key. Raises ConfigError without a key."""
    env = os.environ if environ is None else environ
    key_var, url_var = STANDARD_VARIABLES[provider]
    url = base_url or env.get(url_var) or None
    if api_key:
        return api_key, url, key_source or "the api_key argument"
    if env.get(key_var):
        return env[key_var], url, key_var
    if is_local_url(url):
        return LOCAL_PLACEHOLDER_KEY, url, "none (local endpoint)"
    raise ConfigError(_missing_key_message(provider))


def _missing_key_message(
    provider: str, where: str | None = None, named_var: str | None = None
) -> str:
    key_var, _ = STANDARD_VARIABLES[provider]
    if where is not None:
        unset = f"{named_var} (named by {where}.api_key_env) is not set; " if named_var else ""
        return (
            f"no API key for {where}: {unset}export it, or set {where}.api_key_env to the"
            f" variable that holds the key (or {where}.api_key in the config file), or export"
            f" {key_var}"
        )
    return (
        f"no API key for the {provider} summarizer: export {key_var}, or add a"
        f' [profiles.NAME] table with provider = "{provider}", model and api_key_env (the'
        f' variable holding the key), or set [custom_provider] provider = "{provider}" with'
        " api_key_env"
    )


def _from_entry(
    where: str,
    entry: ProviderProfile | CustomProviderConfig,
    provider: str,
    config: Config,
    env: Mapping[str, str],
    profile: str | None,
) -> ProviderSettings:
    model = entry.model or config.summarizer_model
    if not model:
        raise ConfigError(
            f"{where} names no model: set {where}.model, or summarizer_model"
            " (LOSSLESS_SUMMARIZER_MODEL)"
        )
    key_var, url_var = STANDARD_VARIABLES[provider]
    base_url = entry.base_url or env.get(url_var) or None
    if entry.api_key_env and env.get(entry.api_key_env):
        key, source = env[entry.api_key_env], f"{entry.api_key_env} ({where}.api_key_env)"
    elif entry.api_key:
        key, source = entry.api_key, f"{where}.api_key"
    elif not entry.api_key_env and env.get(key_var):
        key, source = env[key_var], key_var
    elif is_local_url(base_url):
        key, source = LOCAL_PLACEHOLDER_KEY, "none (local endpoint)"
    else:
        raise ConfigError(_missing_key_message(provider, where, entry.api_key_env))
    return ProviderSettings(
        provider=provider,
        model=model,
        api_key=key,
        base_url=base_url,
        key_source=source,
        send_temperature=entry.send_temperature,
        profile=profile,
    )


def resolve_provider(
    config: Config, environ: Mapping[str, str] | None = None
) -> ProviderSettings | None:
    """The provider settings ``config.summarizer`` selects, or ``None`` when it names no
    provider and no profile (an offline or third-party summarizer).

    Raises :class:`~lossless.errors.ConfigError` naming what to set when no model or no key
    can be found.
    """
    env = os.environ if environ is None else environ
    name = config.summarizer
    profile = config.profiles.get(name)
    if profile is not None:
        return _from_entry(f"profiles.{name}", profile, profile.provider, config, env, name)
    if name not in PROVIDERS:
        return None
    for pname, candidate in config.profiles.items():
        if candidate.provider == name:
            return _from_entry(f"profiles.{pname}", candidate, name, config, env, pname)
    key_var, url_var = STANDARD_VARIABLES[name]
    if env.get(key_var) or env.get(url_var):
        if not config.summarizer_model:
            raise ConfigError(
                f"the {name} summarizer needs a model: set summarizer_model"
                " (LOSSLESS_SUMMARIZER_MODEL), or add a [profiles.NAME] table with model"
            )
        key, base_url, source = standard_credentials(name, env)
        return ProviderSettings(
            provider=name,
            model=config.summarizer_model,
            api_key=key,
            base_url=base_url,
            key_source=source,
        )
    custom = config.custom_provider
    if custom.provider == name:
        return _from_entry("custom_provider", custom, name, config, env, None)
    raise ConfigError(_missing_key_message(name))


def build_summarizer(
    config: Config,
    *,
    environ: Mapping[str, str] | None = None,
    clock: Clock | None = None,
    wall_clock: Clock | None = None,
) -> Summarizer:
    """The summarizer *config* selects, with its credentials resolved and its guards on.

    Providers get ``guards.timeout_seconds`` and ``guards.max_retries`` for their SDK; every
    summarizer that is not offline (and offline ones with ``guards.offline``) is wrapped by
    :func:`~.guards.guard`. *clock*/*wall_clock* are for tests.
    """
    settings = resolve_provider(config, environ)
    if settings is None:
        inner = create(config.summarizer)
    else:
        if settings.provider not in available():
            raise ConfigError(
                f"the {settings.provider} summarizer is not registered (its entry point in the"
                " lossless.summarizers group is missing); reinstall lossless, e.g."
                f" pip install 'lossless[{settings.provider}]'"
            )
        inner = create(
            settings.provider,
            **settings.options(),
            timeout=config.guards.timeout_seconds,
            max_retries=config.guards.max_retries,
        )
    if inner.offline and not config.guards.offline:
        return inner
    extra: dict[str, Clock] = {}
    if clock is not None:
        extra["clock"] = clock
    if wall_clock is not None:
        extra["wall_clock"] = wall_clock
    return guard(inner, config.guards, **extra)


# --- shared by the SDK-based providers -------------------------------------------------------


def sdk_field(obj: object, name: str) -> object:
    """A field of an SDK response object, or of a plain dict (what a lenient SDK leaves
    unparsed); ``None`` when missing."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def sdk_int(value: object) -> int | None:
    """*value* when it is an int (token counts), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def redact(text: str, secret: str | None) -> str:
    """*text* with every occurrence of *secret* replaced by ``***``."""
    if secret and len(secret) >= 4:
        return text.replace(secret, "***")
    return text


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except ValueError:
            continue
    return None


def _provider_message(exc: Any) -> str:
    """The provider's own error text from an SDK status error (JSON ``error.message``)."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return ""


def sdk_error(
    exc: Exception,
    sdk: ModuleType,
    *,
    provider: str,
    endpoint: str,
    key: str | None,
    key_source: str,
) -> SummarizerError:
    """Translate an exception of the ``openai``/``anthropic`` SDK (*sdk*) into the
    :class:`~.base.SummarizerError` kind that escalation and the guards understand.

    The message names the endpoint and the key's source, never the key; the provider's own
    text is scrubbed of the key and shortened.
    """
    detail = redact(_provider_message(exc), key)[:300]
    suffix = f": {detail}" if detail else ""
    if isinstance(exc, sdk.APITimeoutError):
        return SummarizerTimeout(
            f"{provider} at {endpoint} did not answer in time; raise guards.timeout_seconds or"
            " check the endpoint"
        )
    if isinstance(exc, sdk.APIConnectionError):
        return SummarizerError(
            f"could not reach {provider} at {endpoint}; check the base URL and the network"
        )
    if isinstance(exc, sdk.AuthenticationError | sdk.PermissionDeniedError):
        status = getattr(exc, "status_code", "?")
        return AuthError(
            f"{provider} at {endpoint} refused the API key from {key_source} (HTTP {status});"
            " check or replace the key"
        )
    if isinstance(exc, sdk.RateLimitError):
        response = getattr(exc, "response", None)
        retry_after = _retry_after(getattr(response, "headers", None))
        wait = f"; retry after {retry_after:g} s" if retry_after is not None else ""
        return RateLimitedError(
            f"{provider} at {endpoint} is rate limiting (HTTP 429){wait}{suffix}",
            retry_after=retry_after,
        )
    if isinstance(exc, sdk.APIStatusError):
        status = getattr(exc, "status_code", "?")
        return SummarizerError(f"{provider} at {endpoint} answered HTTP {status}{suffix}")
    return SummarizerError(
        f"{provider} at {endpoint} sent an answer lossless cannot read"
        f" ({type(exc).__name__}); check that the endpoint speaks the {provider} API"
    )
