"""The screens: conversations list, one conversation (four panes), transplant, confirm."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Header,
    Label,
    Select,
    Static,
    TabbedContent,
    TabPane,
)

from ..engine import Engine
from ..model import ConversationStats
from ..transplant import TransplantPlan, render
from . import data
from .render import first_line, plural, short_time
from .widgets import ContextPane, DagPane, FilesPane, ItemOpened, SearchPane
from .work import background, show_error

__all__ = ["ConfirmScreen", "ConversationScreen", "ConversationsScreen", "TransplantScreen"]


def depth_counts(stats: ConversationStats) -> str:
    """Summaries per depth, shallowest first: ``10/1`` is ten leaves and one d1 summary."""
    if not stats.summary_count:
        return "-"
    deepest = max(stats.summaries_by_depth)
    return "/".join(str(stats.summaries_by_depth.get(d, 0)) for d in range(deepest + 1))


def describe_stats(stats: ConversationStats) -> Text:
    """The counts of one conversation, for a line under the list."""
    conv = stats.conversation
    out = Text()
    out.append(f"conversation {conv.conversation_id}", style="bold")
    out.append(f" · session {conv.session_id}")
    if conv.title:
        out.append(f" · {conv.title}")
    if conv.status != "active":
        out.append(f" · {conv.status}", style="yellow")
    by_depth = ", ".join(f"d{d}: {n}" for d, n in stats.summaries_by_depth.items())
    out.append(
        f"\n{stats.message_count:,} messages ({stats.message_tokens:,} tokens) stored"
        f" · {stats.summary_count} summaries{f' ({by_depth})' if by_depth else ''}"
        f"\ncontext: {stats.context_items:,} items, {stats.context_tokens:,} tokens"
        f" · last message {short_time(stats.last_message_at)}",
        style="dim",
    )
    return out


class ConversationTable(DataTable[str | Text]):
    """The conversations; enter opens one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open"),
    ]


class ConversationsScreen(Screen[None]):
    """The conversations of the store with their counts: the archived ones too once asked
    (``a``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "transplant", "Transplant"),
        Binding("a", "archived", "Archived"),
        Binding("r", "reload", "Reload"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, engine: Engine, budget: int) -> None:
        super().__init__(id="conversations-screen")
        self.engine = engine
        self.budget = budget
        self.stats: dict[int, ConversationStats] = {}
        #: Whether the archived conversations are listed too.
        self.archived = False

    def compose(self) -> ComposeResult:
        yield Header()
        table = ConversationTable(id="conversations", cursor_type="row")
        table.add_column("id", key="id")
        table.add_column("session", key="session")
        table.add_column("msgs", key="messages")
        table.add_column("d0/d1/…", key="summaries")
        table.add_column("tokens", key="tokens")
        table.add_column("last activity", key="last")
        table.add_column("state", key="state")
        yield table
        yield Static(Text("reading the store…", style="dim"), id="conversation-info")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "conversations"

    def on_screen_resume(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        """Read the conversations again."""
        engine, every = self.engine, self.archived

        def fetch() -> tuple[list[ConversationStats], int]:
            if every:
                return engine.conversations(), 0
            return engine.conversations(archived=False), len(engine.conversations(archived=True))

        background(self, fetch, lambda found: self.show(*found), group="load")

    def action_archived(self) -> None:
        """List the archived conversations too, or leave them out again."""
        self.archived = not self.archived
        self.sub_title = "conversations, archived too" if self.archived else "conversations"
        self.action_reload()

    def show(self, rows: list[ConversationStats], hidden: int = 0) -> None:
        """List *rows*, keeping the cursor on the conversation it was on (*hidden*: the
        archived ones not listed)."""
        table = self.query_one("#conversations", ConversationTable)
        current = self._current()
        table.clear()
        self.stats = {r.conversation.conversation_id: r for r in rows}
        for r in rows:
            conv = r.conversation
            table.add_row(
                Text(str(conv.conversation_id), justify="right"),
                Text(first_line(conv.session_id, 14)),  # never markup: it is the host's
                Text(f"{r.message_count:,}", justify="right"),
                Text(depth_counts(r), justify="right"),
                Text(f"{r.message_tokens:,}", justify="right"),
                short_time(r.last_message_at),
                Text("archived", style="yellow") if conv.status == "archived" else conv.status,
                key=str(conv.conversation_id),
            )
        info = self.query_one("#conversation-info", Static)
        if not rows:
            info.update(
                Text(
                    f"no conversations but {hidden} archived: a lists them"
                    if hidden
                    else "no conversations yet; add some with `lossless import PATH`"
                )
            )
            return
        if current is not None and current in self.stats:
            table.move_cursor(row=table.get_row_index(str(current)))
        self._describe()

    def _current(self) -> int | None:
        table = self.query_one("#conversations", ConversationTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return int(key) if key is not None else None

    def _describe(self) -> None:
        current = self._current()
        if current is not None and current in self.stats:
            self.query_one("#conversation-info", Static).update(describe_stats(self.stats[current]))

    @on(DataTable.RowHighlighted, "#conversations")
    def _highlighted(self) -> None:
        self._describe()

    @on(DataTable.RowSelected, "#conversations")
    def _selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            conv = int(event.row_key.value)
            self.app.push_screen(ConversationScreen(self.engine, conv, self.budget))

    def action_transplant(self) -> None:
        """Open the transplant screen with the highlighted conversation as the source."""
        self.app.push_screen(TransplantScreen(self.engine, source=self._current()))


class ConversationScreen(Screen[None]):
    """One conversation: its context window, summary DAG, search and large files."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("1", "tab('context')", "Context", show=False),
        Binding("2", "tab('dag')", "DAG", show=False),
        Binding("3", "tab('search')", "Search", show=False),
        Binding("4", "tab('files')", "Files", show=False),
        Binding("slash", "tab('search')", "Search", show=False),
        Binding("r", "reload", "Reload"),
        Binding("t", "transplant", "Transplant"),
        Binding("z", "zoom", "Zoom"),
    ]

    def __init__(self, engine: Engine, conversation_id: int, budget: int) -> None:
        super().__init__(id="conversation-screen")
        self.engine = engine
        self.conversation_id = conversation_id
        self.budget = budget
        self._resumed = False

    def compose(self) -> ComposeResult:
        engine, conv = self.engine, self.conversation_id
        yield Header()
        with TabbedContent(initial="context", id="panes"):
            with TabPane("1 Context", id="context"):
                yield ContextPane(engine, conv, self.budget)
            with TabPane("2 DAG", id="dag"):
                yield DagPane(engine, conv)
            with TabPane("3 Search", id="search"):
                yield SearchPane(engine, conv)
            with TabPane("4 Files", id="files"):
                yield FilesPane(engine, conv)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"#{self.conversation_id}"
        self._load_title()
        self.query_one("#context-table").focus()

    def _load_title(self) -> None:
        engine, conv = self.engine, self.conversation_id

        def title(stats: ConversationStats) -> None:
            self.sub_title = (
                f"#{conv} {first_line(stats.conversation.session_id, 24)}"
                f" · {plural(stats.message_count, 'message')}"
                f" · {plural(stats.summary_count, 'summary', 'summaries')}"
            )

        background(self, lambda: data.conversation_stats(engine, conv), title, group="title")

    def action_back(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        self.dismiss()

    _FOCUS: ClassVar[dict[str, str]] = {
        "context": "#context-table",
        "dag": "#dag-tree",
        "search": "#search-input",
        "files": "#files-table",
    }

    def action_tab(self, pane: str) -> None:
        """Show one of the panes and focus its main widget."""
        self.minimize()
        self.query_one(TabbedContent).active = pane
        self.query_one(self._FOCUS[pane]).focus()

    def action_reload(self) -> None:
        """Read everything again (after another process changed the store, say)."""
        self._load_title()
        self.query_one(ContextPane).reload()
        self.query_one(DagPane).reload()
        self.query_one(FilesPane).reload()
        self.query_one(SearchPane).search()

    def action_transplant(self) -> None:
        """Transplant from (or into) this conversation."""
        self.app.push_screen(TransplantScreen(self.engine, source=self.conversation_id))

    def action_zoom(self) -> None:
        """Let the focused pane fill the screen (again: back)."""
        if self.maximized is not None:
            self.minimize()
        elif self.focused is not None:
            self.maximize(self.focused, container=False)

    def on_screen_resume(self) -> None:
        if self._resumed:  # back from another screen (a transplant may have changed it)
            self.action_reload()
        self._resumed = True

    @on(ItemOpened)
    def _open(self, event: ItemOpened) -> None:
        """Show a summary or message in the DAG tree, a fresh message in the context table,
        a file in the files table."""
        ref, conv = event.ref, event.conversation_id
        if conv is not None and conv != self.conversation_id:
            self.notify(
                f"{ref} belongs to conversation {conv}; open that one to see it in place",
                markup=False,
            )
            return
        if ref.startswith("file_"):
            self.action_tab("files")
            if not self.query_one(FilesPane).select(ref):
                self.notify(f"{ref} is not among this conversation's files", markup=False)
            return
        engine, conversation = self.engine, self.conversation_id

        def locate() -> tuple[list[str] | None, dict[str, list[data.Node]]]:
            path = data.path_to(engine, conversation, ref)
            return path, data.path_sources(engine, path) if path else {}

        def show(found: tuple[list[str] | None, dict[str, list[data.Node]]]) -> None:
            path, sources = found
            if path is not None:
                self.action_tab("dag")
                if self.query_one(DagPane).reveal(path, sources):
                    return
            if self.query_one(ContextPane).holds(ref):
                self.action_tab("context")
                self.query_one(ContextPane).select(ref)
                return
            self.notify(f"{ref} is not in this conversation's context or DAG", markup=False)

        background(self, locate, show, group="open")


class TransplantScreen(Screen[None]):
    """Pick a source and a target, read the dry-run report, confirm to apply."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("a", "apply", "Apply"),
        Binding("s", "swap", "Swap"),
    ]

    def __init__(self, engine: Engine, source: int | None = None, target: int | None = None):
        super().__init__(id="transplant-screen")
        self.engine = engine
        self.source = source
        self.target = target
        self.plan: TransplantPlan | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="transplant-pick"):
            yield Label("from ")
            yield Select[int]([], prompt="source", compact=True, id="source")
            yield Label(" into ")
            yield Select[int]([], prompt="target", compact=True, id="target")
        yield Static("", id="transplant-status")
        with VerticalScroll(id="transplant-report"):
            yield Static(Text("choose a source and a target", style="dim"), id="report-body")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "transplant"
        engine = self.engine
        background(self, engine.conversations, self._choices, group="load")

    def _choices(self, rows: list[ConversationStats]) -> None:
        options = [(Text(_label(r)), r.conversation.conversation_id) for r in rows]
        ids = [r.conversation.conversation_id for r in rows]
        source = self.source if self.source in ids else None
        if source is None:
            source = next((r.conversation.conversation_id for r in rows if r.summary_count), None)
        target = self.target if self.target in ids else None
        if target is None:
            target = next((i for i in ids if i != source), None)
        for select_id, value in (("#source", source), ("#target", target)):
            select = self.query_one(select_id, Select)
            select.set_options(options)
            if value is not None:
                select.value = value
        self.query_one("#source", Select).focus()

    def _chosen(self) -> tuple[int, int] | None:
        source = self.query_one("#source", Select).value
        target = self.query_one("#target", Select).value
        if isinstance(source, int) and isinstance(target, int):
            return source, target
        return None

    @on(Select.Changed)
    def _changed(self) -> None:
        self.preview()

    def preview(self) -> None:
        """Plan the transplant of the chosen pair (a dry run) and show the report."""
        chosen = self._chosen()
        self.plan = None
        if chosen is None:
            return
        source, target = chosen
        engine = self.engine
        self._status(Text("planning…", style="dim"))
        background(
            self,
            lambda: engine.transplant(source, target),
            self._show_plan,
            group="plan",
            failed=self._failed,
        )

    def _status(self, text: Text) -> None:
        self.query_one("#transplant-status", Static).update(text)

    def _failed(self, exc: BaseException) -> None:
        show_error(self.app, exc)
        self._status(Text(str(exc), style="bold red"))

    def _show_plan(self, plan: TransplantPlan) -> None:
        if self._chosen() != (plan.source.conversation_id, plan.target.conversation_id):
            return  # the choice changed while it was planned
        self.plan = plan
        self.query_one("#report-body", Static).update(Text("\n".join(render(plan))))
        if plan.applied:
            self._status(Text(f"Done: {_outcome(plan)}.", style="bold green"))
        elif plan.problem:
            self._status(Text(f"refused: {plan.problem}", style="bold red"))
        else:
            self._status(Text("dry run: nothing is changed until you apply (a)", style="yellow"))

    def action_swap(self) -> None:
        """Swap the source and the target."""
        chosen = self._chosen()
        if chosen is not None:
            source, target = chosen
            self.query_one("#source", Select).value = target
            self.query_one("#target", Select).value = source

    def action_apply(self) -> None:
        """Ask, then copy the chosen source's knowledge into the target."""
        plan = self.plan
        if plan is None:
            self.notify("choose a source and a target first", severity="warning")
            return
        if plan.applied:
            self.notify("this transplant is done; choose another pair", severity="warning")
            return
        if plan.problem:
            self.notify(plan.problem, title="refused", severity="error", markup=False)
            return
        summaries = plural(len(plan.dag), "summary", "summaries")
        first = plural(len(plan.context_summaries), "summary", "summaries")
        question = (
            f"Copy {summaries} and {plural(len(plan.message_ids), 'message')} of"
            f" conversation {plan.source.conversation_id} into conversation"
            f" {plan.target.conversation_id}, and put {first} at the start of its context?"
        )
        self.app.push_screen(ConfirmScreen(question), self._confirmed)

    def _confirmed(self, yes: bool | None) -> None:
        plan = self.plan
        if not yes or plan is None:
            return
        source, target = plan.source.conversation_id, plan.target.conversation_id
        engine = self.engine
        self._status(Text("transplanting…", style="dim"))

        def done(applied: TransplantPlan) -> None:
            self._show_plan(applied)
            self.notify(_outcome(applied), title="transplanted", markup=False)

        background(
            self,
            lambda: engine.transplant(source, target, apply=True),
            done,
            group="plan",
            failed=self._failed,
        )

    def action_back(self) -> None:
        self.dismiss()


def _label(stats: ConversationStats) -> str:
    conv = stats.conversation
    return f"{conv.conversation_id} · {first_line(conv.session_id, 18)}"


def _outcome(plan: TransplantPlan) -> str:
    count = len(plan.context_summaries)
    return (
        f"conversation {plan.target.conversation_id} now starts with"
        f" {plural(count, 'transplanted summary', 'transplanted summaries')}"
    )


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__(id="confirm-screen")
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self.question), id="question")
            with Horizontal(id="confirm-buttons"):
                yield Button("Apply (y)", variant="warning", id="yes")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # enter alone never changes the store

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
