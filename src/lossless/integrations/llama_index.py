"""LlamaIndex: a memory that keeps every message and gives agents and chat engines a bounded
context, and the recall tools as LlamaIndex tools (``pip install 'lossless[llama-index]'``).

:class:`LosslessMemory` is a ``BaseMemory``: ``put`` stores a ``ChatMessage`` exactly (its own
serialized form: blocks, ``additional_kwargs`` with tool calls, read back equal; the same words
twice are two messages) and compacts when the context outgrows ``token_budget``; ``get`` is the
assembled context — the summaries (system messages, ``additional_kwargs["lossless_summary"]``),
then the newest turns; ``get_all`` every message of the current generation. ``set`` and
``reset`` never delete: they archive the conversation and go on in the session's next
generation (:mod:`.generations`).
"""

from __future__ import annotations

from typing import Any

from ..engine import Engine
from ..retrieval.tools import TOOLS
from ..toolbox import SESSION_TOOLS, ToolScope, call_json
from .generations import Generations, engine_for

INSTALL_HINT = (
    "the LlamaIndex integration needs llama-index-core: pip install 'lossless[llama-index]'"
)

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import BaseMemory
    from llama_index.core.tools import FunctionTool
    from pydantic import ConfigDict, Field, PrivateAttr
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] not in ("llama_index", "pydantic"):
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

__all__ = ["DEFAULT_TOKEN_BUDGET", "INSTALL_HINT", "LosslessMemory", "recall_tools"]

#: The assembly budget when none is given.
DEFAULT_TOKEN_BUDGET = 100_000
#: A session's generations (``set``/``reset`` archive one and go on in the next).
GENERATIONS = Generations("llama_index")


class LosslessMemory(BaseMemory):
    """A LlamaIndex memory over lossless (see the module docstring).

    ``LosslessMemory.from_defaults(session_id=..., store_or_engine=..., token_budget=...)``:
    *store_or_engine* is an open :class:`~lossless.engine.Engine` (the caller closes it), or a
    store's path or URL (opened here; :meth:`close` closes it); ``None`` opens the default
    store.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    session_id: str
    token_budget: int = Field(default=DEFAULT_TOKEN_BUDGET)
    _engine: Engine = PrivateAttr()
    _owned: bool = PrivateAttr(default=False)

    @classmethod
    def class_name(cls) -> str:
        return "LosslessMemory"

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> LosslessMemory:
        """``session_id`` (required), ``store_or_engine`` and ``token_budget``."""
        store = kwargs.pop("store_or_engine", None)
        memory = cls(**kwargs)
        memory._engine, memory._owned = engine_for(store)
        return memory

    @property
    def engine(self) -> Engine:
        """The engine the memory stores into."""
        return self._engine

    def conversation_id(self) -> int:
        """The lossless conversation the session adds to now (created on first use)."""
        return GENERATIONS.current(self._engine, self.session_id).conversation_id

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The assembled context: summaries first, then the newest turns, within the budget;
        the stored messages the request is about first (a prompt-aware assembly): *input*
        (what an agent is asked next) or else the newest stored user message."""
        conversation = self.conversation_id()
        asked = input if isinstance(input, str) and input.strip() else None
        made = self._engine.assemble(  # its messages exactly as stored: no date marks
            conversation,
            self.token_budget,
            format="llama_index",
            dates=False,
            focus=asked or self._engine.last_request(conversation),
        )
        return [ChatMessage.model_validate(m) for m in made.messages]

    def get_all(self) -> list[ChatMessage]:
        """Every message of the current generation, exactly as it was put."""
        return [
            ChatMessage.model_validate(m.to_source())
            for m in self._engine.messages(self.conversation_id())
        ]

    def put(self, message: ChatMessage) -> None:
        """Store *message* exactly, then compact if the context needs it."""
        self.put_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Store *messages* exactly, in one transaction, then compact if needed."""
        self._engine.after_turn(
            self.conversation_id(),
            [m.model_dump(mode="json") for m in messages],
            token_budget=self.token_budget,
            format="llama_index",
        )

    def set(self, messages: list[ChatMessage]) -> None:
        """Start the session over with *messages* (the earlier generation is archived, kept)."""
        self.reset()
        if messages:
            self.put_messages(messages)

    def reset(self) -> None:
        """Archive the conversation (nothing is deleted) and go on in a new generation."""
        GENERATIONS.clear(self._engine, self.conversation_id(), self.session_id)

    def close(self) -> None:
        """Close the store if this memory opened it."""
        if self._owned:
            self._engine.close()


def recall_tools(memory: LosslessMemory) -> list[FunctionTool]:
    """The recall tools of the memory's session (its conversations, every generation) as
    LlamaIndex ``FunctionTool``s made from the recall tools' declaration; each returns JSON,
    lossless's errors as ``{"error": ...}``."""

    def make(name: str) -> FunctionTool:
        declared = TOOLS[name]

        def run(**arguments: Any) -> str:
            return call_json(
                lambda: ToolScope.of(memory.engine, conversation=memory.conversation_id()),
                name,
                arguments,
            )

        fn = declared.bind(run, Field, omit=("conversation",))
        return FunctionTool.from_defaults(fn=fn, name=name, description=declared.description)

    return [make(name) for name in SESSION_TOOLS]
