"""Configuration: the spec's defaults, a TOML file, and ``LOSSLESS_*`` overrides.

Precedence, lowest first: built-in defaults → config file (``--config PATH``,
``LOSSLESS_CONFIG``, or ``config.toml`` in the platform's user config dir) → environment
variables → explicit keyword overrides. Every key is validated; an unknown key or a bad value
raises :class:`~lossless.errors.ConfigError` naming the key and what it accepts.

Environment names are the key path upper-cased and joined with ``_``:
``fresh_tail_count`` → ``LOSSLESS_FRESH_TAIL_COUNT``, ``sessions.summarize_interval`` →
``LOSSLESS_SESSIONS_SUMMARIZE_INTERVAL``. Unknown ``LOSSLESS_*`` variables are ignored, since
other tools (and the test suite) use that prefix too.

``[profiles.NAME]`` tables (named model providers) come from the file or keyword overrides
only: their names are the user's, so they have no environment variables. Secret values
(``api_key``) are left out of reprs and shown as ``***`` by :meth:`Config.to_dict`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from .config_machinery import (
    ENV_PREFIX,
    _build,
    _check_keys,
    _merge_env,
    _to_mapping,
)
from .errors import ConfigError

__all__ = [
    "PROVIDERS",
    "RETENTION_KINDS",
    "Config",
    "CustomProviderConfig",
    "GuardsConfig",
    "ProviderProfile",
    "RedactConfig",
    "ResumeConfig",
    "RetentionConfig",
    "RoomConfig",
    "SessionsConfig",
    "default_config_path",
    "default_data_dir",
    "load_config",
]

APP_NAME = "lossless"
#: Providers a profile or the custom provider entry can name (the SDK that speaks to it).
PROVIDERS = ("openai", "anthropic")
#: The longest a delegation grant may live (a year): its expiry must stay a valid date.
MAX_GRANT_TTL = 365 * 86_400
#: The deepest a grant may expand: a DAG that condenses two summaries at least per level holds
#: four billion leaves at this depth; a deeper grant is a typo.
MAX_GRANT_DEPTH = 32


def _opt(
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] | None = None,
    help: str = "",
    secret: bool = False,
) -> dict[str, Any]:
    return {
        "minimum": minimum,
        "maximum": maximum,
        "choices": choices,
        "help": help,
        "secret": secret,
    }


@dataclass(frozen=True)
class SessionsConfig:
    """Whole-session summaries (spec: incremental-session-summaries)."""

    auto_summarize: bool = field(
        default=False, metadata=_opt(help="summarize a conversation every N messages")
    )
    summarize_interval: int = field(
        default=20, metadata=_opt(minimum=1, help="messages between automatic summaries")
    )
    chunk_tokens: int | None = field(
        default=None,
        metadata=_opt(
            minimum=100,
            help="new-message tokens per summarizer call (larger batches are chained in"
            " chunks); default: leaf_chunk_tokens",
        ),
    )
    target_tokens: int = field(
        default=1_200, metadata=_opt(minimum=50, help="target size of a session summary's overview")
    )


@dataclass(frozen=True)
class RedactConfig:
    """Secrets found on ingest: masked (the default: a stable label everywhere the message is
    shown or sent, the original kept for ``lossless reveal``) or removed (``enabled``)."""

    mask: bool = field(
        default=True,
        metadata=_opt(
            help="mask secrets in everything that leaves the store ([secret:openai-key#3f9a2c]);"
            " the original stays in the store for `lossless reveal`"
        ),
    )
    enabled: bool = field(
        default=False,
        metadata=_opt(
            help="remove secrets from messages before they are stored ([REDACTED:openai_key];"
            " stricter than mask: nothing keeps the value unless keep_originals)"
        ),
    )
    builtin: bool = field(
        default=True, metadata=_opt(help="use the built-in patterns (API keys, tokens, ...)")
    )
    patterns: tuple[str, ...] = field(
        default=(), metadata=_opt(help="more regular expressions whose matches are secrets")
    )
    keep_originals: bool = field(
        default=False,
        metadata=_opt(
            help="keep each redacted original, encrypted with the key in LOSSLESS_REDACT_KEY"
        ),
    )


#: The kinds of message a retention rule may name (lossless.retention).
RETENTION_KINDS = ("tool_outputs", "host_records", "sidechains", "all")


@dataclass(frozen=True)
class RetentionConfig:
    """What ``lossless prune`` moves out of the store, and when: nothing unless asked."""

    archive_after_days: float = field(
        default=0.0,
        metadata=_opt(
            minimum=0.0,
            help="archive messages of `kinds` older than this many days (their text moves to a"
            " compressed archive file, their summaries stay; 0: never)",
        ),
    )
    forget_after_days: float = field(
        default=0.0,
        metadata=_opt(
            minimum=0.0,
            help="forget messages of `kinds` older than this many days (the summaries over them"
            " then say so; 0: never)",
        ),
    )
    kinds: tuple[str, ...] = field(
        default=("tool_outputs",),
        metadata=_opt(
            help="which messages the rules reach: tool_outputs, host_records, sidechains"
            " (sub-agents' conversations), all"
        ),
    )
    idle_days: float = field(
        default=0.0,
        metadata=_opt(
            minimum=0.0,
            help="only in conversations with no new message for this many days (0: any)",
        ),
    )
    context_idle_days: float = field(
        default=30.0,
        metadata=_opt(
            minimum=0.0,
            help="a conversation with no new message for this many days may have the messages"
            " of its active context archived too (read back when it is assembled again; 0:"
            " never, only messages under a summary)",
        ),
    )
    at_cap: bool = field(
        default=False,
        metadata=_opt(
            help="when the store passes 80% of max_store_bytes, archive messages of `kinds`"
            " oldest first, whatever their age, until it is under that line"
        ),
    )
    at_cap_kinds: tuple[str, ...] = field(
        default=("all",),
        metadata=_opt(
            help="what at_cap archives next, oldest first, when `kinds` did not bring the store"
            " under the line (only messages out of the context and under a summary)"
        ),
    )
    archive_dir: str | None = field(
        default=None,
        metadata=_opt(help="where archive files go; default: beside the store's large files"),
    )
    batch: int = field(
        default=500,
        metadata=_opt(minimum=1, maximum=100_000, help="messages moved per transaction"),
    )

    def __post_init__(self) -> None:
        for key, kinds in (("kinds", self.kinds), ("at_cap_kinds", self.at_cap_kinds)):
            unknown = [k for k in kinds if k not in RETENTION_KINDS]
            if unknown or not kinds:
                raise ConfigError(
                    f"retention.{key}: {f'unknown kind {unknown[0]!r}' if unknown else 'empty'};"
                    f" accepted: {', '.join(RETENTION_KINDS)}"
                )


@dataclass(frozen=True)
class ResumeConfig:
    """The resume summary injected after a compaction (spec: chat-context-persistence)."""

    inject: bool = field(
        default=True,
        metadata=_opt(help="put the resume summary after the summaries in assembled context"),
    )
    max_tokens: int = field(
        default=800, metadata=_opt(minimum=100, help="token bound of the resume summary")
    )


@dataclass(frozen=True)
class RoomConfig:
    """The host's room: what a host's model window leaves the conversation's messages once
    the host's own part of the prompt (system prompt, tool schemas, injected context) and
    the model's reply are set aside. Hosts that report their figures are measured; these
    are the defaults until they are."""

    host_share: float = field(
        default=0.25,
        metadata=_opt(
            minimum=0.0,
            maximum=0.9,
            help="share of the window taken to be the host's own (system prompt, tools) until"
            " the host's figures measure it",
        ),
    )
    reply_tokens: int = field(
        default=4_096,
        metadata=_opt(
            minimum=0,
            help="tokens kept for the model's reply when the host names no reserve (at most a"
            " quarter of the window)",
        ),
    )
    min_tokens: int = field(
        default=1_024,
        metadata=_opt(
            minimum=64,
            help="the least room the messages get, even when the host's own prompt leaves less"
            " (a warning says so once)",
        ),
    )


@dataclass(frozen=True)
class ProviderProfile:
    """A named model provider: a ``[profiles.NAME]`` table, selected by ``summarizer = NAME``
    (or, for ``summarizer = "openai"``/``"anthropic"``, the first profile of that provider)."""

    provider: str = field(
        metadata=_opt(
            choices=PROVIDERS,
            help="the API the endpoint speaks: openai (any OpenAI-compatible server) or anthropic",
        )
    )
    model: str | None = field(
        default=None, metadata=_opt(help="model name; default: summarizer_model")
    )
    base_url: str | None = field(
        default=None,
        metadata=_opt(
            help="endpoint URL; default: OPENAI_BASE_URL / ANTHROPIC_BASE_URL, else the vendor's"
        ),
    )
    api_key_env: str | None = field(
        default=None,
        metadata=_opt(help="environment variable that holds the API key (preferred)"),
    )
    api_key: str | None = field(
        default=None,
        repr=False,
        metadata=_opt(help="the API key itself (prefer api_key_env); never printed", secret=True),
    )
    send_temperature: bool | None = field(
        default=None,
        metadata=_opt(
            help="send the temperature; default: yes for openai, no for anthropic (its newer"
            " models reject it)"
        ),
    )


@dataclass(frozen=True)
class CustomProviderConfig:
    """The last place a key is looked for: ``[custom_provider]``, used for
    ``summarizer = <its provider>`` when no profile and no standard variable gives one."""

    provider: str | None = field(
        default=None,
        metadata=_opt(choices=PROVIDERS, help="the API the custom endpoint speaks"),
    )
    model: str | None = field(
        default=None, metadata=_opt(help="model name; default: summarizer_model")
    )
    base_url: str | None = field(default=None, metadata=_opt(help="endpoint URL"))
    api_key_env: str | None = field(
        default=None,
        metadata=_opt(help="environment variable that holds the API key (preferred)"),
    )
    api_key: str | None = field(
        default=None,
        repr=False,
        metadata=_opt(help="the API key itself (prefer api_key_env); never printed", secret=True),
    )
    send_temperature: bool | None = field(
        default=None,
        metadata=_opt(
            help="send the temperature; default: yes for openai, no for anthropic (its newer"
            " models reject it)"
        ),
    )


@dataclass(frozen=True)
class GuardsConfig:
    """Limits put around every model provider (and offline summarizers with ``offline``)."""

    timeout_seconds: float = field(
        default=60.0,
        metadata=_opt(minimum=0.1, help="wall-clock limit of one summarizer call"),
    )
    max_retries: int = field(
        default=2,
        metadata=_opt(
            minimum=0,
            maximum=10,
            help="retries the provider SDK makes on 429, 5xx and timeouts within one call",
        ),
    )
    max_calls: int = field(
        default=60, metadata=_opt(minimum=1, help="spend guard: calls allowed per window")
    )
    window_seconds: float = field(
        default=60.0, metadata=_opt(minimum=1.0, help="spend guard: length of the window")
    )
    breaker_threshold: int = field(
        default=3,
        metadata=_opt(minimum=1, help="consecutive auth failures that open the circuit breaker"),
    )
    breaker_cooldown_seconds: float = field(
        default=300.0,
        metadata=_opt(minimum=1.0, help="how long an open breaker refuses calls"),
    )
    offline: bool = field(
        default=False,
        metadata=_opt(help="guard the offline summarizers (extractive, scripted) too"),
    )
    run_seconds: float | None = field(
        default=120.0,
        metadata=_opt(
            minimum=0.1,
            help="wall-clock limit of one compaction run, or of finishing provisional"
            " summaries: what is left stays due for the next run",
        ),
    )
    concurrency: int = field(
        default=4,
        metadata=_opt(
            minimum=1,
            maximum=64,
            help="model calls at once when provisional summaries are finished",
        ),
    )
    failures_before_fallback: int = field(
        default=3,
        metadata=_opt(
            minimum=1,
            help="model failures in a row after which the provisional summaries of the run are"
            " kept as the offline summarizer wrote them (one warning)",
        ),
    )


@dataclass(frozen=True)
class Config:
    """Every setting lossless reads, with the defaults of the spec's reference implementation."""

    db: str | None = field(
        default=None,
        metadata=_opt(help="database path or URL; default: lossless.db in the user data dir"),
    )
    data_dir: str | None = field(
        default=None,
        metadata=_opt(help="where large files are kept; default: the user data dir"),
    )
    summarizer: str = field(
        default="extractive",
        metadata=_opt(
            help="summarizer by registered name (extractive works offline) or a profile name"
        ),
    )
    summarizer_model: str | None = field(
        default=None,
        metadata=_opt(help="model for openai/anthropic when no profile names one"),
    )
    background_compaction: bool | None = field(
        default=None,
        metadata=_opt(
            help="run after-turn compaction in a background worker; unset: when the"
            " summarizer calls a model (a turn then never waits for a summary)"
        ),
    )
    provisional_summaries: bool = field(
        default=True,
        metadata=_opt(
            help="with a model summarizer, compaction writes offline summaries at once and the"
            " model's replace them in place off the turn (off: every pass waits for the model)"
        ),
    )
    context_threshold: float = field(
        default=0.75,
        metadata=_opt(
            minimum=0.05, maximum=1.0, help="share of the budget that triggers compaction"
        ),
    )
    compaction_target: float = field(
        default=0.5,
        metadata=_opt(
            minimum=0.05,
            maximum=1.0,
            help="share of the budget compaction aims for once the threshold is crossed",
        ),
    )
    fresh_tail_budget_share: float = field(
        default=0.25,
        metadata=_opt(
            minimum=0.05,
            maximum=1.0,
            help="with a token budget, the fresh tail's cap as a share of it (whole turns)",
        ),
    )
    fresh_tail_count: int = field(
        default=64, metadata=_opt(minimum=0, help="recent raw messages never compacted")
    )
    fresh_tail_max_tokens: int | None = field(
        default=None, metadata=_opt(minimum=1, help="optional token cap on the fresh tail")
    )
    fill_budget: bool = field(
        default=True,
        metadata=_opt(
            help="with room left under an assembly's budget, show more detail: summaries as the"
            " summaries they were made from, then the messages just before the fresh tail as"
            " they were, newest first"
        ),
    )
    date_marks: bool = field(
        default=True,
        metadata=_opt(
            help="in an assembled context, mark a user message said on another day than what"
            " comes before it with its date ([Tuesday 9 May 2023])"
        ),
    )
    prompt_share: float = field(
        default=0.5,
        metadata=_opt(
            minimum=0.0,
            maximum=1.0,
            help="when an assembly is given the next request (a prompt), the share of the room"
            " left after the essentials that goes to the stored messages a search for it"
            " finds, shown where they were said (0: none)",
        ),
    )
    leaf_chunk_tokens: int = field(
        default=20_000, metadata=_opt(minimum=100, help="max source tokens per leaf summary")
    )
    leaf_target_tokens: int = field(
        default=2_400, metadata=_opt(minimum=16, help="target size of a leaf summary")
    )
    condensed_target_tokens: int = field(
        default=2_000, metadata=_opt(minimum=16, help="target size of a condensed summary")
    )
    leaf_min_fanout: int = field(
        default=8, metadata=_opt(minimum=2, help="leaf summaries needed to condense")
    )
    condensed_min_fanout: int = field(
        default=4, metadata=_opt(minimum=2, help="same-depth summaries needed to condense (d1+)")
    )
    condensed_min_fanout_hard: int = field(
        default=2, metadata=_opt(minimum=2, help="fanout floor when compacting under pressure")
    )
    incremental_max_depth: int = field(
        default=1,
        metadata=_opt(minimum=-1, help="condense up to this depth after a turn (-1: no limit)"),
    )
    max_rounds: int = field(
        default=10, metadata=_opt(minimum=1, help="rounds of compact_until_under")
    )
    fallback_max_tokens: int = field(
        default=512, metadata=_opt(minimum=16, help="size of the deterministic fallback summary")
    )
    large_file_token_threshold: int = field(
        default=25_000,
        metadata=_opt(minimum=100, help="files above this are stored outside the context"),
    )
    max_expand_tokens: int = field(
        default=4_000, metadata=_opt(minimum=100, help="token cap of one expand call")
    )
    expand_query_max_tokens: int = field(
        default=2_000, metadata=_opt(minimum=50, help="token cap of an expand_query answer")
    )
    expand_query_max_steps: int = field(
        default=6,
        metadata=_opt(minimum=1, help="model calls an expand_query sub-agent may make"),
    )
    grant_ttl_seconds: int = field(
        default=300,
        metadata=_opt(minimum=1, maximum=MAX_GRANT_TTL, help="lifetime of a delegation grant"),
    )
    grant_max_depth: int = field(
        default=3,
        metadata=_opt(
            minimum=0, maximum=MAX_GRANT_DEPTH, help="default depth a delegation grant may expand"
        ),
    )
    max_line_bytes: int = field(
        default=64 << 20,
        metadata=_opt(
            minimum=1 << 16,
            help="longest line a reader holds (a transcript's, a hook's input, a served"
            " request): a longer one is reported and skipped, never read whole",
        ),
    )
    max_file_bytes: int = field(
        default=16 << 30,
        metadata=_opt(
            minimum=1 << 16,
            help="largest transcript file an import or sync reads: a larger one is refused",
        ),
    )
    max_store_bytes: int = field(
        default=0,
        metadata=_opt(
            minimum=0,
            help="the size the store should stay under (its database, write-ahead log and large"
            " files; 0: no cap): from 80% of it doctor, stats and the hooks' log warn",
        ),
    )
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    room: RoomConfig = field(default_factory=RoomConfig)
    redact: RedactConfig = field(default_factory=RedactConfig)
    profiles: dict[str, ProviderProfile] = field(default_factory=dict)
    custom_provider: CustomProviderConfig = field(default_factory=CustomProviderConfig)
    guards: GuardsConfig = field(default_factory=GuardsConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)

    def replace(self, **changes: Any) -> Config:
        """A copy with *changes* applied and validated (nested keys as ``sessions={...}``)."""
        merged = _to_mapping(self)
        for key, value in changes.items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return _build(Config, merged, "")

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain data (what ``lossless config`` prints); secrets as ``***``."""
        return _to_mapping(self, redact=True)


def default_config_path() -> Path:
    """``config.toml`` in the platform's user config directory."""
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def default_data_dir() -> Path:
    """The platform's user data directory for lossless."""
    return Path(platformdirs.user_data_dir(APP_NAME))


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Config:
    """Load the configuration.

    *path* names a TOML file that must exist; without it, ``LOSSLESS_CONFIG`` or the default
    path is read when present. *env* defaults to ``os.environ``.
    """
    environ = os.environ if env is None else env
    values: dict[str, Any] = {}
    explicit = path if path is not None else environ.get(ENV_PREFIX + "CONFIG") or None
    file_path = Path(explicit) if explicit is not None else default_config_path()
    if explicit is not None and not file_path.is_file():
        raise ConfigError(f"config file {file_path} does not exist; create it or drop --config")
    if file_path.is_file():
        try:
            with file_path.open("rb") as handle:
                values = tomllib.load(handle)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {file_path} is not valid TOML: {exc}") from exc
        except RecursionError:
            raise ConfigError(
                f"config file {file_path} nests tables or arrays too deeply to read; lossless's"
                " settings are at most two levels deep (see docs/configuration.md)"
            ) from None
        _check_keys(Config, values, "", source=str(file_path))
    _merge_env(Config, values, environ, "")
    for key, value in overrides.items():
        if value is not None:
            values[key] = value
    return _build(Config, values, "")
