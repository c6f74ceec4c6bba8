"""Summarizers by name: built-ins and third-party ones register the same way.

Every provider is an entry point in the ``lossless.summarizers`` group that points at a
:class:`~.base.Summarizer` subclass (or any callable returning one) — lossless's own
(``extractive``, ``scripted``, ``openai``, ``anthropic``) are declared in its
``pyproject.toml`` like anyone's — or is added at run time with :func:`register`. Nothing in
lossless has to be edited to add a provider, and the registry imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from ..errors import ConfigError
from .base import Summarizer

__all__ = ["available", "create", "register"]

Factory = Callable[..., Summarizer]
_FACTORIES: dict[str, Factory] = {}
_LOADED_ENTRY_POINTS = False
ENTRY_POINT_GROUP = "lossless.summarizers"

_S = TypeVar("_S", bound=type[Summarizer])


def register(name: str, factory: Factory | None = None) -> Any:
    """Register a summarizer factory under *name*; usable as a class decorator."""

    def add(target: Any) -> Any:
        _FACTORIES[name] = target
        return target

    return add(factory) if factory is not None else add


def _load_entry_points() -> None:
    global _LOADED_ENTRY_POINTS
    if _LOADED_ENTRY_POINTS:
        return
    _LOADED_ENTRY_POINTS = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _FACTORIES.setdefault(ep.name, _lazy(ep.load))


def _lazy(load: Callable[[], Any]) -> Factory:
    def factory(**options: Any) -> Summarizer:
        target = load()
        made = target(**options)
        if not isinstance(made, Summarizer):
            raise ConfigError(f"entry point {target!r} did not make a Summarizer")
        return made

    return factory


def available() -> list[str]:
    """Names of every registered summarizer."""
    _load_entry_points()
    return sorted(_FACTORIES)


def create(name: str, **options: Any) -> Summarizer:
    """Make the summarizer registered as *name* with *options*."""
    _load_entry_points()
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown summarizer {name!r}; available: {', '.join(sorted(_FACTORIES))}"
        ) from None
    return factory(**options)
