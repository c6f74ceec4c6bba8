"""``lossless serve``: the engine for hosts that are not Python, over JSON-RPC 2.0.

:mod:`.methods` declares the methods, :mod:`.server` answers them (and serves stdio),
:mod:`.http` serves them over HTTP (uvicorn and Starlette: the ``http`` extra), and
:mod:`.client` is a small typed client (used by the tests, and a model for clients in other
languages; the protocol is described in docs/serve.md).
"""

from __future__ import annotations

from .http import serve_http
from .methods import METHODS, Method, discover
from .server import Dispatcher, serve_stdio

__all__ = ["METHODS", "Dispatcher", "Method", "discover", "serve_http", "serve_stdio"]
