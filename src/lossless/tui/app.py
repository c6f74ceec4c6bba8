"""The Textual application: ``LosslessApp(engine)``, run by ``lossless tui``."""

from __future__ import annotations

from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from ..engine import ConversationRef, Engine
from .screens import ConversationScreen, ConversationsScreen
from .work import background

__all__ = ["DEFAULT_BUDGET", "LosslessApp"]

#: The token budget the context window is drawn against unless one is given: a common
#: context window size today. Compaction starts at ``context_threshold`` of it.
DEFAULT_BUDGET = 128_000


class LosslessApp(App[None]):
    """Browse a store's conversations, their context windows and summary DAGs, search them,
    and transplant one's knowledge into another.

    ``LosslessApp(engine).run()``; *conversation* opens one at start, *budget* is the
    token budget the context window is measured against.
    """

    CSS_PATH = "lossless.tcss"
    TITLE = "lossless"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "toggle_keys", "Keys"),
    ]

    def __init__(
        self,
        engine: Engine,
        *,
        conversation: ConversationRef | None = None,
        budget: int = DEFAULT_BUDGET,
    ) -> None:
        super().__init__()
        if budget < 1:
            raise ValueError(f"the token budget must be positive, not {budget}")
        self.engine = engine
        self.start_conversation = conversation
        self.budget = budget

    def get_default_screen(self) -> Screen[None]:
        return ConversationsScreen(self.engine, self.budget)

    def on_mount(self) -> None:
        if self.start_conversation is not None:
            self.open_conversation(self.start_conversation)

    def open_conversation(self, ref: ConversationRef) -> None:
        """Open a conversation (by id, session id or row) on top of the list."""
        engine = self.engine

        def opened(conversation_id: int) -> None:
            self.push_screen(ConversationScreen(engine, conversation_id, self.budget))

        background(self, lambda: engine.conversation(ref).conversation_id, opened, group="open")

    def action_toggle_keys(self) -> None:
        """Show or hide the panel listing every key of the focused pane and screen."""
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()
