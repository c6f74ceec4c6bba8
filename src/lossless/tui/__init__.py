"""The terminal UI (``lossless tui``): Textual screens over the engine.

Needs the ``tui`` extra (``pip install 'lossless[tui]'``); nothing in the core imports it.
"""

from __future__ import annotations

from .app import DEFAULT_BUDGET, LosslessApp

__all__ = ["DEFAULT_BUDGET", "LosslessApp"]
