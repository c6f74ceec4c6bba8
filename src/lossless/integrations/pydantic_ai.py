"""Pydantic AI: a history processor that keeps every message of a run and hands the model the
assembled context, and the recall tools as a toolset (``pip install 'lossless[pydantic-ai]'``).

    history = LosslessHistory("session-1", "agent.db", token_budget=8_000)
    agent = Agent(model, capabilities=[history.capability()], toolsets=[history.toolset()])

Before every model request Pydantic AI hands the processor the run's whole message list; what
lossless does not have yet is stored exactly (requests, responses, tool calls and returns,
retries: Pydantic AI's own serialized form, read back equal), the conversation is compacted
when it outgrows the budget, and the model gets the assembled context: the summaries (system
prompt parts), then the newest messages. Pydantic AI keeps that as the run's history; the whole
of it stays in lossless, searchable with the tools.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from ..assemble import UNTRUSTED_NOTE
from ..engine import Engine
from ..resume import HEADER as RESUME_HEADER
from ..retrieval.tools import TOOLS
from ..toolbox import SESSION_TOOLS, ToolScope, call_json
from .absorb import Absorber
from .generations import engine_for

INSTALL_HINT = "the Pydantic AI integration needs pydantic-ai: pip install 'lossless[pydantic-ai]'"

try:
    from pydantic_ai import AgentRunResult, RunContext, Tool
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
    from pydantic_ai.toolsets import FunctionToolset
except ModuleNotFoundError as exc:  # the optional dependency is missing: say how to add it
    if (exc.name or "").partition(".")[0] != "pydantic_ai":
        raise
    raise ModuleNotFoundError(INSTALL_HINT, name=exc.name) from exc

__all__ = ["DEFAULT_TOKEN_BUDGET", "INSTALL_HINT", "LosslessHistory"]

#: The assembly budget when none is given.
DEFAULT_TOKEN_BUDGET = 100_000


def _made_by_lossless(part: Any) -> bool:
    """A part lossless wrote: a summary, or its resume summary."""
    return (
        isinstance(part, dict)
        and isinstance(part.get("content"), str)
        and part["content"].startswith((UNTRUSTED_NOTE, RESUME_HEADER))
    )


def _clean(message: Any) -> Any:
    """A request without the parts lossless wrote (Pydantic AI merges consecutive requests,
    so lossless's summaries can arrive inside the user's own request)."""
    if isinstance(message, dict) and message.get("kind") == "request":
        return {
            **message,
            "parts": [p for p in message.get("parts") or [] if not _made_by_lossless(p)],
        }
    return message


def _ours(message: Any) -> bool:
    """A request of nothing but lossless's own parts."""
    parts = message.get("parts") if isinstance(message, dict) else None
    return (
        isinstance(message, dict)
        and message.get("kind") == "request"
        and bool(parts)
        and all(_made_by_lossless(p) for p in parts or [])
    )


def _fingerprint(message: Any) -> str:
    """A message by its kind and its own parts (each carries its time), whatever request it was
    merged into."""
    cleaned = _clean(message)
    key = [cleaned.get("kind"), cleaned.get("parts")] if isinstance(cleaned, dict) else cleaned
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


#: How a run's message lists are stored (see :mod:`.absorb`).
ABSORBER = Absorber("pydantic_ai", "pydantic_ai", _fingerprint, _ours, _clean)


@dataclass
class _Remembering(ProcessHistory[Any]):
    """lossless's history processor, which also keeps what a run ends with."""

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> Any:
        processor = self.processor
        assert isinstance(processor, LosslessHistory)
        await asyncio.to_thread(processor.remember, result.all_messages())
        return result


class LosslessHistory:
    """A Pydantic AI history processor over lossless (see the module docstring).

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

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history processor: store what is new, compact, return the assembled context."""
        handed = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
        ABSORBER.absorb(self.engine, self.session_id, handed)
        self.engine.after_turn(self.session_id, token_budget=self.token_budget)
        made = self.engine.assemble(  # its messages exactly as stored: no date marks
            self.session_id,
            self.token_budget,
            format="pydantic_ai",
            dates=False,
            focus=self.engine.last_request(self.session_id),
        )
        out = ModelMessagesTypeAdapter.validate_python(made.messages)
        # Pydantic AI goes on from this list (or, a caller of its own, from the one it handed).
        back = ModelMessagesTypeAdapter.dump_python(out, mode="json")
        ABSORBER.mark(self.engine, self.session_id, handed, back)
        return list(out)

    def remember(self, messages: list[ModelMessage]) -> int:
        """Store what *messages* hold that the session lacks (a run's last response, which
        no later model request hands over); returns how many were new."""
        handed = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
        return ABSORBER.absorb(self.engine, self.session_id, handed)

    def capability(self) -> ProcessHistory[Any]:
        """The processor as an agent capability (``Agent(capabilities=[...])``); it also
        stores each run's last response when the run ends."""
        return _Remembering(self)

    def stored_messages(self) -> list[ModelMessage]:
        """Every message the runs handed over, exactly (messages the session got another
        way, in another shape, are left out)."""
        return list(
            ModelMessagesTypeAdapter.validate_python(
                [
                    m.to_source()
                    for m in self.engine.messages(self.session_id)
                    if m.source_format == "pydantic_ai"
                ]
            )
        )

    def toolset(self) -> FunctionToolset[Any]:
        """The recall tools of the session's conversations; each returns JSON, lossless's
        errors as ``{"error": ...}``."""

        def make(name: str) -> Tool[Any]:
            def run(**arguments: Any) -> str:
                return call_json(
                    lambda: ToolScope.of(self.engine, conversation=self.session_id),
                    name,
                    arguments,
                )

            declared = TOOLS[name]
            return Tool.from_schema(
                run, name, declared.description, declared.json_schema(omit=("conversation",))
            )

        return FunctionToolset([make(name) for name in SESSION_TOOLS])

    def close(self) -> None:
        """Close the store if this history opened it."""
        if self._owned:
            self.engine.close()
