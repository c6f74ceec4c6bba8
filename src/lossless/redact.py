"""Secrets found on ingest: masked by default, or removed.

**Masking** (``redact.mask``, on by default): every secret the patterns find is replaced, in
what is stored as the message's text, parts and envelope, by a stable label —
``[secret:openai-key#3f9a2c]``, the kind and a tag that is the same wherever the same value
appears in the store (a keyed hash: the key is made once per store, so the tag says nothing
of the value without the store). So the secret reaches no output: not ``show``, not a search
hit or snippet, not a summary or the summarizer, not the assembled context or what a hook
puts back, not an MCP or ``serve`` result, not an export. The original message is kept beside
it, in the store, and ``lossless reveal MSG_ID`` gives it back with no set-up. The trade-off:
the value is still in the database file (as it would be without masking); masking keeps it
from being shown or sent, and ``lossless forget`` removes it.

**Removal** (``redact.enabled``), the stricter mode: every string of a normalized message —
its plain text, each part's text, tool input, tool output and original block, and the
envelope — is searched for the built-in secret patterns (``redact.builtin``) and the
configured ones (``redact.patterns``), and each match becomes ``[REDACTED:<kind>]``.
Because this happens before the message is written, the secret reaches neither the database,
nor the search indexes, nor the tool log, nor the model-facing context — nor a summarizer.

The original is dropped, unless ``redact.keep_originals`` is on: then the message as it came
(before redaction) is kept encrypted (Fernet: AES-128-CBC with HMAC-SHA256, from the
``cryptography`` package) with the key in ``LOSSLESS_REDACT_KEY``, and ``lossless reveal``
decrypts it for someone who holds the key. Without the key nothing can read it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .codec import dumps, loads
from .errors import ConfigError, LosslessError
from .model import NormalizedMessage, StoredMessage, StoredPart

__all__ = [
    "BUILTIN_PATTERNS",
    "KEY_VARIABLE",
    "MASK_LABEL",
    "Redactor",
    "Sealer",
    "new_key",
    "restore",
]

KEY_VARIABLE = "LOSSLESS_REDACT_KEY"

#: Secret shapes common in agent transcripts: provider keys, tokens, private keys.
BUILTIN_PATTERNS: dict[str, str] = {
    "private_key": (
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]+?-----END [A-Z0-9 ]*PRIVATE KEY-----"
    ),
    "anthropic_key": r"\bsk-ant-[A-Za-z0-9_-]{20,}",
    "openai_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    "aws_access_key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    # The secret half of an AWS key pair: 40 characters of base64, named as the SDKs, the
    # environment and the credentials file name it.
    "aws_secret_key": (
        r"(?i)\baws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
    ),
    # A password written into a URL: scheme://user:PASSWORD@host (the user may be empty).
    "url_password": r"\b[a-z][a-z0-9+.-]*://[^\s:/@]*:(?P<secret>[^\s:/@]+)@[^\s@]",
    "npm_token": r"\bnpm_[A-Za-z0-9]{36}\b",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    "gitlab_token": r"\bglpat-[A-Za-z0-9_-]{20,}",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}",
    "stripe_key": r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{20,}",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "bearer_token": r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{20,}=*)",
    # A value given to a name that says it is secret: PASSWORD=..., api_key: ..., and the
    # same at the end of a longer name (SESSION_SECRET=, SECRET_KEY=, STRIPE_API_KEY=).
    "assigned_secret": (
        r"(?i)(?:\b|(?<=_))(?:password|passwd|secret(?:_key)?|api_?key|access_token|auth_token"
        r"|private_token)[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;]{8,})"
    ),
    # A long token given to a name that is just "token": token: <hex or base64, 32+>.
    "assigned_token": (
        r"(?i)(?:\b|(?<=_))token[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[A-Za-z0-9+/_-]{32,}={0,2})(?![A-Za-z0-9+/_=-])"
    ),
}
#: A pattern with a group named ``secret`` replaces that group only (the label stays).

#: For each built-in pattern, text (lower case) that every match holds: a string holding none
#: of them is not searched with that pattern, which keeps masking off the ingest's time.
BUILTIN_HINTS: dict[str, tuple[str, ...]] = {
    "private_key": ("private key",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "aws_access_key": ("akia", "asia"),
    "aws_secret_key": ("secret",),
    "url_password": ("://",),
    "npm_token": ("npm_",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": ("glpat-",),
    "slack_token": ("xox",),
    "google_api_key": ("aiza",),
    "stripe_key": ("_live_", "_test_"),
    "jwt": ("eyj",),
    "bearer_token": ("bearer",),
    "assigned_secret": ("passw", "secret", "api_key", "apikey", "_token"),
    "assigned_token": ("token",),
}

#: For the built-in patterns that name their secret (``api_key: ...``), a shape (lower case)
#: every match holds: the name, then ``:`` or ``=``. A word such as "token" or "secret" is
#: common in prose; only a text where it is assigned is searched with the whole pattern.
BUILTIN_GATES: dict[str, str] = {
    "aws_secret_key": r"aws_?secret_?(?:access_?)?key[\"']?\s*[:=]",
    "bearer_token": r"bearer\s",
    "assigned_secret": (
        r"(?:password|passwd|secret(?:_key)?|api_?key|access_token|auth_token|private_token)"
        r"[\"']?\s*[:=]"
    ),
    "assigned_token": r"token[\"']?\s*[:=]",
}

#: What a masked secret reads as: its kind and its tag.
MASK_LABEL = re.compile(r"\[secret:(?P<kind>[a-z0-9-]+)#(?P<tag>[0-9a-f]{6})\]")


@dataclass(frozen=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    #: Lower-case text every match holds (empty: no hint, always searched).
    hints: tuple[str, ...] = ()
    #: A pattern every match's lower-cased text holds, looked for once a hint is there.
    gate: re.Pattern[str] | None = None


#: The characters other than ASCII letters that a case-insensitive pattern reads as one (İ
#: and ı as i, ſ as s, the Kelvin sign as k), as ``str.lower`` does not (or not alone).
_AS_ASCII = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}


def _folded(text: str) -> str:
    """*text* in lower case as the hints and gates read it: every match of a pattern
    (matched case-insensitively) holds its hint and its gate here."""
    return text.lower() if text.isascii() else text.translate(_AS_ASCII).lower()


def _gate(pattern: str | None) -> re.Pattern[str] | None:
    return None if pattern is None else re.compile(pattern)


class Redactor:
    """Finds and replaces secrets in messages (see the module docstring)."""

    def __init__(
        self,
        patterns: Sequence[str] = (),
        *,
        builtin: bool = True,
        tag: Callable[[str], str] | None = None,
    ) -> None:
        """*tag*: masking — a secret becomes ``[secret:<kind>#<tag(value)>]``; without it,
        removal — ``[REDACTED:<name>]``."""
        self._tag = tag
        rules = (
            [
                _Rule(n, re.compile(p), BUILTIN_HINTS.get(n, ()), _gate(BUILTIN_GATES.get(n)))
                for n, p in BUILTIN_PATTERNS.items()
            ]
            if builtin
            else []
        )
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
        #: Whether a rule without hints is there (then every string is searched).
        self._always = any(not r.hints for r in self.rules)
        # One pass over the lower-cased text for every hint at once.
        hints = sorted({h for r in self.rules for h in r.hints}, key=len, reverse=True)
        self._hinted = re.compile("|".join(map(re.escape, hints))) if hints else None
        self._hints = tuple(hints)

    def maybe(self, text: str) -> bool:
        """Whether *text* may hold a secret (``False``: it holds none, for certain)."""
        if self._always or self._hinted is None:
            return True
        return self._hinted.search(_folded(text)) is not None

    def _marker(self, rule: _Rule, secret: str) -> str:
        if self._tag is None:
            return f"[REDACTED:{rule.name}]"
        return f"[secret:{rule.name.replace('_', '-')}#{self._tag(secret)}]"

    def text(self, value: str) -> tuple[str, int]:
        """*value* with every secret replaced, and how many were. Every pattern is matched
        against the text as it came (a label is never read as a secret); where matches
        overlap, the one starting first wins (the longer, then the earlier pattern, on a tie)."""
        low = _folded(value)
        # The hints the text holds, each looked for once (a substring test each: faster here
        # than one expression of them all), then only the rules they name, or have none.
        present = {h for h in self._hints if h in low}
        if not present and not self._always:
            return value, 0
        found: list[tuple[int, int, int, _Rule]] = []
        for n, rule in enumerate(self.rules):
            if rule.hints and present.isdisjoint(rule.hints):
                continue
            if rule.gate is not None and rule.gate.search(low) is None:
                continue
            group = "secret" if "secret" in rule.pattern.groupindex else 0
            for m in rule.pattern.finditer(value):
                begin, stop = m.span(group)
                if stop > begin:
                    found.append((begin, -stop, n, rule))
        if not found:
            return value, 0
        found.sort(key=lambda f: f[:3])
        out: list[str] = []
        at = count = 0
        for begin, neg_stop, _, rule in found:
            if begin < at:
                continue
            out += [value[at:begin], self._marker(rule, value[begin:-neg_stop])]
            at, count = -neg_stop, count + 1
        out.append(value[at:])
        return "".join(out), count

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

    def may_hold(self, norm: NormalizedMessage) -> bool:
        """Whether anything of *norm* may hold a secret (``False``: nothing does, for
        certain): its text, parts and envelope checked at once, as one JSON text."""
        if self._always:
            return True
        if not norm.parts and norm.envelope is None:
            return self.maybe(norm.content)  # a plain text: nothing to write out first
        # (A message nested too deeply to store is refused here, as the store would.)
        blob = dumps(
            [
                norm.content,
                norm.envelope,
                [(p.text, p.tool_input, p.tool_output, p.raw) for p in norm.parts],
            ]
        )
        return self.maybe(blob)


def tagger(salt: Callable[[], bytes]) -> Callable[[str], str]:
    """A secret's tag: the first 6 hex digits of its HMAC-SHA256 under the store's key
    (*salt*, asked for once, when the first secret is found): the same value, the same tag,
    in every message of the store."""
    key: list[bytes] = []

    def tag(value: str) -> str:
        if not key:
            key.append(salt())
        digest = hmac.new(key[0], value.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return digest.hexdigest()[:6]

    return tag


def snapshot(norm: NormalizedMessage) -> dict[str, Any]:
    """What is kept of a message before redaction: enough to give back its source. Its values
    are the message's own, not copies: redaction replaces a message's values, it never
    changes one in place."""
    return {
        "content": norm.content,
        "envelope": norm.envelope,
        "parts": [
            {
                "slot": p.slot,
                "type": p.type,
                "text": p.text,
                "tool_call_id": p.tool_call_id,
                "tool_name": p.tool_name,
                "tool_input": p.tool_input,
                "tool_output": p.tool_output,
                "is_error": p.is_error,
                "raw": p.raw,
                "raw_is_text": p.raw_is_text,
            }
            for p in norm.parts
        ],
    }


def restore(stored: StoredMessage, original: Mapping[str, Any]) -> StoredMessage:
    """*stored* as it was before its secrets were masked or removed, from its kept
    *original* (a :func:`snapshot`)."""
    parts = tuple(
        StoredPart(
            part_id=0,
            message_id=stored.message_id,
            ordinal=n,
            slot=p["slot"],
            type=p["type"],
            text=p["text"],
            tool_call_id=p["tool_call_id"],
            tool_name=p["tool_name"],
            tool_input=p["tool_input"],
            tool_output=p["tool_output"],
            is_error=bool(p["is_error"]),
            raw=p["text"] if p["raw_is_text"] else p["raw"],
        )
        for n, p in enumerate(original["parts"])
    )
    return dataclasses.replace(
        stored, content=original["content"], envelope=original["envelope"], parts=parts
    )


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
