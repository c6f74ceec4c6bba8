"""Database work off the UI thread, with errors shown in the UI instead of a traceback."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from textual.app import App
from textual.dom import DOMNode
from textual.worker import Worker, get_current_worker

from ..errors import LosslessError

__all__ = ["background", "error_text", "show_error"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def error_text(exc: BaseException) -> str:
    """What the UI says about an error: lossless's own messages say what to do; anything else
    is named with its type (and logged with its traceback)."""
    if isinstance(exc, LosslessError):
        return str(exc)
    return f"unexpected {type(exc).__name__}: {exc}"


def show_error(app: App[object], exc: BaseException, title: str = "error") -> None:
    """A notification with the error (never markup: messages quote ids and brackets)."""
    app.notify(error_text(exc), title=title, severity="error", timeout=10, markup=False)


def background(
    node: DOMNode,
    fetch: Callable[[], T],
    show: Callable[[T], object],
    *,
    group: str,
    failed: Callable[[BaseException], object] | None = None,
) -> Worker[None]:
    """Run *fetch* in a worker thread (the store opens a connection per thread), then *show*
    its result on the UI thread. A newer call in the same *group* of *node* supersedes an
    older one, whose result is dropped. Errors go to *failed*, or else to a notification."""
    app = node.app

    def on_ui(call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:  # the UI's top level for this result: show it, go on
            logger.exception("showing the result of %s failed", group)
            show_error(app, exc)

    def report(exc: BaseException) -> None:
        if failed is not None:
            failed(exc)
        else:
            show_error(app, exc)

    def job() -> None:
        worker = get_current_worker()
        try:
            result = fetch()
        except Exception as exc:  # a worker's top level: the error goes to the UI
            if not isinstance(exc, LosslessError):
                logger.exception("%s failed", group)
            if not worker.is_cancelled:
                app.call_from_thread(on_ui, lambda error=exc: report(error))
            return
        if not worker.is_cancelled:
            app.call_from_thread(on_ui, lambda: show(result))

    return node.run_worker(job, group=group, exclusive=True, thread=True, exit_on_error=False)
