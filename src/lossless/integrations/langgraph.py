"""LangGraph: the model sees a bounded context, the graph's messages are all kept, and the
recall tools are graph tools (``pip install 'lossless[langgraph]'``).

:class:`LosslessContext` works beside LangGraph's checkpointer (which keeps the graph's state as
LangGraph wants it); lossless keeps every message exactly, compacts, and hands the model the
assembled context. A graph's thread (``config["configurable"]["thread_id"]``) is a lossless
conversation of the same id.

* With the prebuilt agent: ``create_react_agent(model, tools=ctx.tools(), pre_model_hook=
  ctx.pre_model_hook, post_model_hook=ctx.post_model_hook, checkpointer=...)`` — before each
  model call the state's new messages are stored and the model gets ``llm_input_messages``: the
  summaries, then the newest turns within ``token_budget``; after it, its reply is stored.
* In a hand-written ``StateGraph``: ``model.invoke(ctx.context(state, config))`` in the model
  node, and ``ctx.remember(state, config)`` where the graph ends a turn.

Messages are stored under their LangGraph ids, so storing a state again stores nothing twice,
while the same words said twice (two messages, two ids) are two messages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine import Engine
from ..errors import LosslessError
from ..toolbox import ToolScope
from .generations import engine_for
from .langchain import DEFAULT_TOKEN_BUDGET, session_tools

INSTALL_HINT = "the LangGraph integration needs langgraph: pip install 'lossless[langgraph]'"

try:
    import langgraph  # noqa: F401  (the framework this module is for)
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import StructuredTool
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] not in ("langgraph", "langchain_core"):
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

__all__ = ["INSTALL_HINT", "LosslessContext"]


class LosslessContext:
    """lossless for a LangGraph graph (see the module docstring).

    *store_or_engine* is an open :class:`~lossless.engine.Engine` (the caller closes it), or a
    store's path or URL (opened here; :meth:`close` closes it); ``None`` opens the default
    store.
    """

    def __init__(
        self,
        store_or_engine: Engine | str | os.PathLike[str] | None = None,
        *,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        thread_key: str = "thread_id",
    ) -> None:
        self.token_budget = token_budget
        self.thread_key = thread_key
        self.engine, self._owned = engine_for(store_or_engine)

    def session(self, config: RunnableConfig | Mapping[str, Any] | None) -> str:
        """The thread a run belongs to (its lossless session id)."""
        configurable = (config or {}).get("configurable") or {}
        thread = configurable.get(self.thread_key)
        if thread is None:
            raise LosslessError(
                f"lossless needs the graph's thread: invoke it with config={{'configurable':"
                f" {{'{self.thread_key}': ...}}}}"
            )
        return str(thread)

    def remember(self, state: Mapping[str, Any], config: RunnableConfig) -> int:
        """Store the state's messages lossless does not have yet (by id), then compact if
        the context needs it; returns how many were new.

        The state only grows between calls (the checkpointer keeps it): when its first
        messages are the ones remembered last time, only the rest is looked at."""
        messages: Sequence[BaseMessage] = state.get("messages") or []
        session = self.session(config)
        conv = self.engine.conversation(session, create=True)
        anchor = (conv.metadata or {}).get("langgraph") or {}
        seen = anchor.get("seen")
        start = (
            seen
            if isinstance(seen, int)
            and 0 < seen <= len(messages)
            and messages[seen - 1].id == anchor.get("last")
            else 0
        )
        kept = [m for m in messages[start:] if m.id]
        result = self.engine.ingest_batch(
            conv.conversation_id,
            [message_to_dict(m) for m in kept],
            format="langchain",
            external_ids=[str(m.id) for m in kept],
        )
        if messages:
            self.engine.update_conversation(
                conv.conversation_id,
                metadata={"langgraph": {"seen": len(messages), "last": messages[-1].id}},
            )
        self.engine.after_turn(conv.conversation_id, token_budget=self.token_budget)
        return result.inserted

    def context(self, state: Mapping[str, Any], config: RunnableConfig) -> list[BaseMessage]:
        """What the model should see now: the state remembered, then the assembled context."""
        self.remember(state, config)
        session = self.session(config)
        made = self.engine.assemble(  # its messages exactly as stored: no date marks
            session,
            self.token_budget,
            format="langchain",
            dates=False,
            focus=self.engine.last_request(session),
        )
        return list(messages_from_dict(made.messages))

    def pre_model_hook(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """The prebuilt agent's hook before the model: the model's input, the state kept."""
        return {"llm_input_messages": self.context(state, config)}

    def post_model_hook(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """The prebuilt agent's hook after the model: its reply stored."""
        self.remember(state, config)
        return {}

    def tools(self) -> list[StructuredTool]:
        """The recall tools, searching the conversations of the run's thread."""
        return session_tools(
            lambda config: ToolScope.of(self.engine, conversation=self.session(config))
        )

    def close(self) -> None:
        """Close the store if this context opened it."""
        if self._owned:
            self.engine.close()
