"""LangChain: a chat message history that keeps every message and hands the model a bounded
context, and the recall tools as LangChain tools (``pip install 'lossless[langchain]'``).

:class:`LosslessChatMessageHistory` is a ``BaseChatMessageHistory``: ``add_messages`` stores
each message exactly (LangChain's own serialized form, so tool calls, tool messages,
``additional_kwargs``, content blocks and ids come back equal; the same message twice is two
messages) and compacts when the context outgrows ``token_budget``; ``messages`` is the assembled
context — the summaries (one system message each, ``additional_kwargs["lossless_summary"]``),
then the newest turns — so ``RunnableWithMessageHistory`` feeds the model a bounded history
while the whole of it stays searchable. ``clear()`` archives the conversation (kept, searchable)
and goes on in the next generation of the session (:mod:`.generations`).

``RunnableWithMessageHistory`` reads ``messages`` before the new input is there, so that
context cannot know the request; :class:`RunnableWithLosslessHistory` (the same runnable, the
same arguments) hands a lossless history the request first: ``messages_for(request)`` is the
context assembled for it (:meth:`~lossless.engine.Engine.assemble`'s ``prompt``).

:func:`recall_tools` gives ``lcm_grep``, ``lcm_describe``, ``lcm_expand_query`` and the other
tools of a session's scope as LangChain ``StructuredTool``s, made from the recall tools' one
declaration and run by :mod:`lossless.toolbox`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any

from ..engine import Engine
from ..retrieval.tools import TOOLS
from ..toolbox import SESSION_TOOLS, ToolScope, call_json
from .generations import Generations, engine_for

INSTALL_HINT = "the LangChain integration needs langchain-core: pip install 'lossless[langchain]'"

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
    from langchain_core.runnables import RunnableConfig
    from langchain_core.runnables.history import RunnableWithMessageHistory
    from langchain_core.tools import StructuredTool
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] != "langchain_core":
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

__all__ = [
    "DEFAULT_TOKEN_BUDGET",
    "INSTALL_HINT",
    "LosslessChatMessageHistory",
    "RunnableWithLosslessHistory",
    "recall_tools",
    "session_tools",
]

#: The assembly budget when none is given.
DEFAULT_TOKEN_BUDGET = 100_000
#: A session's generations (``clear`` archives one and goes on in the next).
GENERATIONS = Generations("langchain")


class LosslessChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history over lossless (see the module docstring).

    *store_or_engine* is an open :class:`~lossless.engine.Engine` (the caller closes it), or a
    store's path or URL (opened here; :meth:`close` closes it); ``None`` opens the default
    store.
    """

    def __init__(
        self,
        session_id: str,
        store_or_engine: Engine | str | os.PathLike[str] | None = None,
        *,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
    ) -> None:
        self.session_id = session_id
        self.token_budget = token_budget
        self.engine, self._owned = engine_for(store_or_engine)

    def conversation_id(self) -> int:
        """The lossless conversation the session adds to now (created on first use)."""
        return GENERATIONS.current(self.engine, self.session_id).conversation_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The assembled context: summaries first, then the newest turns, within the budget."""
        return self.messages_for(None)

    def messages_for(self, request: str | None) -> list[BaseMessage]:
        """The assembled context for the next *request* (prompt-aware: the earlier turns it
        needs unfolded first, within the same budget); ``None``: :attr:`messages`."""
        made = self.engine.assemble(  # its messages exactly as stored: no date marks
            self.conversation_id(),
            self.token_budget,
            format="langchain",
            dates=False,
            prompt=request,
        )
        return list(messages_from_dict(made.messages))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store *messages* exactly, in one transaction, then compact if the context needs it."""
        self.engine.after_turn(
            self.conversation_id(),
            [message_to_dict(m) for m in messages],
            token_budget=self.token_budget,
            format="langchain",
        )

    def stored_messages(self) -> list[BaseMessage]:
        """Every message of the current generation, exactly as it was added."""
        return list(
            messages_from_dict(
                [m.to_source() for m in self.engine.messages(self.conversation_id())]
            )
        )

    def clear(self) -> None:
        """Archive the conversation (nothing is deleted) and go on in a new generation."""
        GENERATIONS.clear(self.engine, self.conversation_id(), self.session_id)

    def close(self) -> None:
        """Close the store if this history opened it."""
        if self._owned:
            self.engine.close()


class _Given(BaseChatMessageHistory):
    """One invocation's lossless history: what it gave the chain (the context assembled for
    the request) is what its ``messages`` says afterwards, so that the parent, which counts
    them to tell the history from the new input it stores, counts the same list."""

    def __init__(self, history: LosslessChatMessageHistory) -> None:
        self.history = history
        self.given: list[BaseMessage] | None = None

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return list(self.given) if self.given is not None else self.history.messages

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self.history.add_messages(messages)

    def clear(self) -> None:
        self.history.clear()


class RunnableWithLosslessHistory(RunnableWithMessageHistory):
    """``RunnableWithMessageHistory`` (the same arguments) whose lossless history is assembled
    for the request: the text of the newest human message of the input is handed to
    :meth:`LosslessChatMessageHistory.messages_for`. Any other history is read as the parent
    reads it.

        chain = RunnableWithLosslessHistory(
            prompt | model, lambda session_id: history,
            input_messages_key="question", history_messages_key="history",
        )
    """

    def _merge_configs(self, *configs: RunnableConfig | None) -> RunnableConfig:
        config = super()._merge_configs(*configs)
        configurable = config.get("configurable", {})
        history = configurable.get("message_history")
        if isinstance(history, LosslessChatMessageHistory):
            configurable["message_history"] = _Given(history)
        return config

    def _prompted(self, value: Any, config: RunnableConfig) -> tuple[_Given, str | None] | None:
        hist = config["configurable"]["message_history"]
        if not isinstance(hist, _Given):
            return None
        given = value if not self.input_messages_key else value[self.input_messages_key]
        asked = [
            m.text for m in self._get_input_messages(given) if m.type == "human" and m.text.strip()
        ]
        return hist, (asked[-1] if asked else None)

    def _enter_history(self, value: Any, config: RunnableConfig) -> list[BaseMessage]:
        found = self._prompted(value, config)
        if found is not None:
            hist, request = found
            hist.given = hist.history.messages_for(request)
        return super()._enter_history(value, config)

    async def _aenter_history(
        self, value: dict[str, Any], config: RunnableConfig
    ) -> list[BaseMessage]:
        found = self._prompted(value, config)
        if found is not None:
            hist, request = found
            hist.given = await asyncio.to_thread(hist.history.messages_for, request)
        return await super()._aenter_history(value, config)


def recall_tools(history: LosslessChatMessageHistory) -> list[StructuredTool]:
    """The recall tools of the history's session (its conversations, every generation) as
    LangChain tools; each returns JSON, lossless's errors as ``{"error": ...}``."""
    return session_tools(
        lambda _config: ToolScope.of(history.engine, conversation=history.conversation_id())
    )


def session_tools(scope: Callable[[RunnableConfig], ToolScope]) -> list[StructuredTool]:
    """The session tools (:data:`lossless.toolbox.SESSION_TOOLS`) as LangChain tools, each
    searching the scope *scope* gives for the run's config (the config LangChain passes a
    tool: a LangGraph thread, say)."""

    def make(name: str) -> StructuredTool:
        declared = TOOLS[name]

        def run(config: RunnableConfig, **arguments: Any) -> str:
            return call_json(lambda: scope(config), name, arguments)

        return StructuredTool.from_function(
            func=run,
            name=name,
            description=declared.description,
            args_schema=declared.json_schema(omit=("conversation",)),
        )

    return [make(name) for name in SESSION_TOOLS]
