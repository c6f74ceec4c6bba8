"""Redaction on ingest: secrets replaced before a message is stored.

With ``redact.enabled``, every string of a normalized message — its plain text, each part's
text, tool input, tool output and original block, and the envelope — is searched for the
built-in secret patterns (``redact.builtin``) and the configured ones (``redact.patterns``),
and each match becomes ``[REDACTED:<kind>]``. Because this happens before the message is
written, the secret reaches neither the database, nor the search indexes, nor the tool log,
nor the model-facing context — nor a summarizer, which is the only way to be sure it is never
sent to one.

The original is dropped, unless ``redact.keep_originals`` is on: then the message as it came
(before redaction) is kept encrypted (Fernet: AES-128-CBC with HMAC-SHA256, from the
``cryptography`` package) with the key in ``LOSSLESS_REDACT_KEY``, and ``lossless reveal``
decrypts it for someone who holds the key. Without the key nothing can read it.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .codec import dumps, loads
from .errors import ConfigError, LosslessError
from .model import NormalizedMessage

__all__ = ["BUILTIN_PATTERNS", "KEY_VARIABLE", "Redactor", "Sealer", "new_key"]

KEY_VARIABLE = "LOSSLESS_REDACT_KEY"

#: Secret shapes common in agent transcripts: provider keys, tokens, private keys.
BUILTIN_PATTERNS: dict[str, str] = {
    "private_key": (
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]+?-----END [A-Z0-9 ]*PRIVATE KEY-----"
    ),
    "anthropic_key": r"\bsk-ant-[A-Za-z0-9_-]{20,}",
    "openai_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    "aws_access_key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    "gitlab_token": r"\bglpat-[A-Za-z0-9_-]{20,}",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}",
    "stripe_key": r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{20,}",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "bearer_token": r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{20,}=*)",
    "assigned_secret": (
        r"(?i)\b(?:password|passwd|secret|api_key|apikey|access_token|auth_token)[\"']?\s*[:=]"
        r"\s*[\"']?(?P<secret>[^\s\"',;]{8,})"
    ),
}
#: A pattern with a group named ``secret`` replaces that group only (the label stays).


@dataclass(frozen=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]


class Redactor:
    """Finds and replaces secrets in messages (see the module docstring)."""

    def __init__(self, patterns: Sequence[str] = (), *, builtin: bool = True) -> None:
        rules = [_Rule(n, re.compile(p)) for n, p in BUILTIN_PATTERNS.items()] if builtin else []
        for n, text in enumerate(patterns, start=1):
            try:
                rules.append(_Rule(f"custom_{n}", re.compile(text)))
            except re.error as exc:
                raise ConfigError(
                    f"redact.patterns[{n - 1}] is not a valid regular expression ({exc}): {text!r}"
                ) from None
        if not rules:
            raise ConfigError(
                "redaction is on but has no patterns: keep redact.builtin on or add some"
            )
        self.rules = tuple(rules)

    def text(self, value: str) -> tuple[str, int]:
        """*value* with every secret replaced, and how many were."""
        found = 0
        for rule in self.rules:
            marker = f"[REDACTED:{rule.name}]"
            if "secret" in rule.pattern.groupindex:

                def keep_label(m: re.Match[str], marker: str = marker) -> str:
                    start, end = m.span("secret")
                    whole = m.group(0)
                    return whole[: start - m.start()] + marker + whole[end - m.start() :]

                value, n = rule.pattern.subn(keep_label, value)
            else:
                value, n = rule.pattern.subn(marker, value)
            found += n
        return value, found

    def value(self, value: Any) -> tuple[Any, int]:
        """A JSON-like value with every string redacted (keys included), and the count."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            total = 0
            for key, item in value.items():
                new_key, a = self.text(key) if isinstance(key, str) else (key, 0)
                new_item, b = self.value(item)
                out[new_key] = new_item
                total += a + b
            return out, total
        if isinstance(value, list | tuple):
            items = [self.value(v) for v in value]
            return type(value)(v for v, _ in items), sum(n for _, n in items)
        return value, 0

    def message(self, norm: NormalizedMessage) -> int:
        """Redact *norm* in place (text, parts, envelope); returns the secrets replaced."""
        norm.content, total = self.text(norm.content)
        for part in norm.parts:
            for attr in ("text", "tool_output", "tool_name", "tool_call_id"):
                current = getattr(part, attr)
                if isinstance(current, str):
                    redacted, n = self.text(current)
                    setattr(part, attr, redacted)
                    total += n
            part.tool_input, n = self.value(part.tool_input)
            total += n
            part.raw, n = self.value(part.raw)
            total += n
        if norm.envelope is not None:
            norm.envelope, n = self.value(norm.envelope)
            total += n
        return total


def snapshot(norm: NormalizedMessage) -> dict[str, Any]:
    """What is kept of a message before redaction: enough to give back its source."""
    return {
        "content": norm.content,
        "envelope": copy.deepcopy(norm.envelope),
        "parts": [
            {
                "slot": p.slot,
                "type": p.type,
                "text": p.text,
                "tool_call_id": p.tool_call_id,
                "tool_name": p.tool_name,
                "tool_input": copy.deepcopy(p.tool_input),
                "tool_output": p.tool_output,
                "is_error": p.is_error,
                "raw": copy.deepcopy(p.raw),
                "raw_is_text": p.raw_is_text,
            }
            for p in norm.parts
        ],
    }


def new_key() -> str:
    """A fresh key for ``LOSSLESS_REDACT_KEY``."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


class Sealer:
    """Encrypts and decrypts kept originals with the key from the environment."""

    def __init__(self, key: str | None = None) -> None:
        key = key if key is not None else os.environ.get(KEY_VARIABLE)
        if not key:
            raise ConfigError(
                f"redact.keep_originals needs a key in {KEY_VARIABLE}; make one with"
                " `lossless reveal --new-key` and keep it safe (without it the originals"
                " cannot be read)"
            )
        try:
            from cryptography.fernet import Fernet
        except ImportError:
            raise ConfigError(
                "keeping redacted originals needs the cryptography package:"
                " pip install 'lossless[redact]'"
            ) from None
        try:
            self._fernet = Fernet(key.encode())
        except ValueError:
            raise ConfigError(
                f"{KEY_VARIABLE} is not a valid key (32 url-safe base64 bytes); make one with"
                " `lossless reveal --new-key`"
            ) from None

    def seal(self, original: Mapping[str, Any]) -> bytes:
        """The encrypted original."""
        return self._fernet.encrypt(dumps(original).encode("utf-8"))

    def open(self, sealed: bytes) -> dict[str, Any]:
        """The original back; a wrong key is a clear error."""
        from cryptography.fernet import InvalidToken

        try:
            data = loads(self._fernet.decrypt(sealed).decode("utf-8"))
        except InvalidToken:
            raise LosslessError(
                f"this original was sealed with another key than the one in {KEY_VARIABLE}"
            ) from None
        if not isinstance(data, dict):
            raise LosslessError("the kept original is damaged")
        return data
