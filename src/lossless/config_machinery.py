"""How :mod:`lossless.config` reads its settings: each key checked against its dataclass
field, environment variables merged by key path, values coerced to the field's type within its
bounds, and settings turned back into plain data."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from .errors import ConfigError

ENV_PREFIX = "LOSSLESS_"
REDACTED = "***"
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


_T = TypeVar("_T")


def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _section_type(tp: Any) -> type | None:
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def _named_sections_type(tp: Any) -> type | None:
    """The table type of a ``dict[str, <dataclass>]`` field (``profiles``), else ``None``."""
    if typing.get_origin(tp) is not dict:
        return None
    _, value_type = typing.get_args(tp)
    return _section_type(value_type)


def _check_named_sections(section: type, values: Any, key: str, *, source: str) -> None:
    if not isinstance(values, Mapping):
        raise ConfigError(f"config key '{key}' must be a table of tables ([{key}.NAME])")
    for name, table in values.items():
        if not isinstance(name, str) or not _PROFILE_NAME.match(name):
            raise ConfigError(
                f"config key '{key}.{name}' has a bad name; use letters, digits, '_', '-', '.'"
            )
        if isinstance(table, section):
            continue
        if not isinstance(table, Mapping):
            raise ConfigError(f"config key '{key}.{name}' must be a table ([{key}.{name}])")
        _check_keys(section, table, f"{key}.{name}.", source=source)


def _check_keys(cls: type, values: Mapping[str, Any], prefix: str, *, source: str) -> None:
    known = _fields(cls)
    hints = _hints(cls)
    for key, value in values.items():
        if key not in known:
            accepted = ", ".join(sorted(known))
            raise ConfigError(
                f"unknown config key '{prefix}{key}' in {source}; accepted keys: {accepted}"
            )
        named = _named_sections_type(hints[key])
        if named is not None:
            _check_named_sections(named, value, f"{prefix}{key}", source=source)
            continue
        section = _section_type(hints[key])
        if section is not None:
            if isinstance(value, section):
                continue
            if not isinstance(value, Mapping):
                raise ConfigError(f"config key '{prefix}{key}' must be a table ([{prefix}{key}])")
            _check_keys(section, value, f"{prefix}{key}.", source=source)


def _merge_env(cls: type, values: dict[str, Any], environ: Mapping[str, str], prefix: str) -> None:
    hints = _hints(cls)
    for name in _fields(cls):
        if _named_sections_type(hints[name]) is not None:
            continue  # user-named tables: file and overrides only
        section = _section_type(hints[name])
        if section is not None:
            nested = values.setdefault(name, {})
            if isinstance(nested, dict):
                _merge_env(section, nested, environ, f"{prefix}{name}_")
            continue
        env_name = (ENV_PREFIX + prefix + name).upper()
        if env_name in environ:
            values[name] = _EnvText(environ[env_name], env_name)


class _EnvText(str):
    """A value that came from an environment variable: parsed by the field's type."""

    env_name: str

    def __new__(cls, text: str, env_name: str) -> _EnvText:
        obj = super().__new__(cls, text)
        obj.env_name = env_name
        return obj


def _describe(tp: Any, meta: Mapping[str, Any]) -> str:
    base, optional = _unwrap_optional(tp)
    if typing.get_origin(base) is tuple:
        return "a list of strings (in a variable: a JSON array)"
    if meta.get("choices"):
        desc = "one of " + ", ".join(meta["choices"])
    elif base is bool:
        desc = "true or false"
    elif base is int:
        desc = "an integer"
    elif base is float:
        desc = "a number"
    else:
        desc = "a string"
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if lo is not None and hi is not None:
        desc += f" from {lo} to {hi}"
    elif lo is not None:
        desc += f" >= {lo}"
    if optional:
        desc += ", or empty for none"
    return desc


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _coerce(value: Any, tp: Any, meta: Mapping[str, Any], key: str) -> Any:
    base, optional = _unwrap_optional(tp)
    where = f" (from {value.env_name})" if isinstance(value, _EnvText) else ""
    given = REDACTED if meta.get("secret") else str(value)

    def bad() -> ConfigError:
        return ConfigError(
            f"config key '{key}' has the value {given!r}{where}; accepted: {_describe(tp, meta)}"
        )

    if typing.get_origin(base) is tuple:  # a list of strings
        if isinstance(value, _EnvText):
            try:
                value = json.loads(value)
            except ValueError:
                raise bad() from None
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise bad()
        return tuple(value)

    if isinstance(value, _EnvText):
        text = value.strip()
        if optional and text.lower() in ("", "none", "null"):
            return None
        if base is bool:
            lowered = text.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise bad()
        if base is int:
            try:
                value = int(text)
            except ValueError:
                raise bad() from None
        elif base is float:
            try:
                value = float(text)
            except ValueError:
                raise bad() from None
        else:
            value = str(text)
    if value is None:
        if optional:
            return None
        raise bad()
    if base is bool:
        if not isinstance(value, bool):
            raise bad()
    elif base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        if not -(2**63) <= value < 2**63:  # what the store (SQLite) can hold
            raise bad()
    elif base is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad()
        try:
            value = float(value)
        except OverflowError:
            raise bad() from None
        if not math.isfinite(value):  # NaN passes every bound check
            raise bad()
    elif base is str:
        if not isinstance(value, str):
            raise bad()
        value = str(value)
    choices = meta.get("choices")
    if choices and value not in choices:
        raise bad()
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise bad()
    return value


def _build(cls: type[_T], values: Mapping[str, Any], prefix: str) -> _T:
    _check_keys(cls, values, prefix, source="settings")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for name, fld in _fields(cls).items():
        if name not in values:
            if fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
                raise ConfigError(
                    f"config key '{prefix}{name}' is required;"
                    f" accepted: {_describe(hints[name], fld.metadata)}"
                )
            continue
        raw = values[name]
        named = _named_sections_type(hints[name])
        if named is not None:
            kwargs[name] = {
                key: table
                if isinstance(table, named)
                else _build(named, table, f"{prefix}{name}.{key}.")
                for key, table in raw.items()
            }
            continue
        section = _section_type(hints[name])
        if section is not None:
            kwargs[name] = (
                raw if isinstance(raw, section) else _build(section, raw, f"{prefix}{name}.")
            )
        else:
            kwargs[name] = _coerce(raw, hints[name], fld.metadata, prefix + name)
    return cls(**kwargs)


def _to_mapping(obj: Any, *, redact: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = _to_mapping(value, redact=redact)
        elif isinstance(value, dict) and any(dataclasses.is_dataclass(v) for v in value.values()):
            out[f.name] = {k: _to_mapping(v, redact=redact) for k, v in value.items()}
        elif redact and f.metadata.get("secret") and value is not None:
            out[f.name] = REDACTED
        else:
            out[f.name] = value
    return out
