"""The panes of the conversation screen: context window, summary DAG, search, large files."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Input, Select, Static, Tree
from textual.widgets.data_table import RowDoesNotExist
from textual.widgets.tree import TreeNode

from ..engine import Engine
from ..model import LargeFile
from ..retrieval.grep import GrepHit, GrepResult, Mode, Scope, Sort
from . import data
from .render import first_line, plural, short_time
from .work import background, error_text

__all__ = [
    "BudgetBar",
    "ContextPane",
    "DagPane",
    "DetailPane",
    "FilesPane",
    "ItemOpened",
    "SearchPane",
]

_EIGHTHS = " ▏▎▍▌▋▊▉"
_SHARE_CELLS = 8


class ContextTable(DataTable[str | Text]):
    """The context items; enter opens a summary in the DAG tree, a message below."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open"),
    ]


class ResultsTable(DataTable[str | Text]):
    """Search hits; enter opens a hit where it lives."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open in place"),
    ]


class FilesTable(DataTable[str | Text]):
    """Large files; enter reads one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Read file"),
    ]


class DagTree(Tree[str | None]):
    """The summary DAG; enter opens or closes a summary."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open/close"),
    ]


class ItemOpened(Message):
    """A summary, message or file was chosen to be opened where it lives (the DAG tree, the
    context table or the files table)."""

    def __init__(self, ref: str, conversation_id: int | None = None) -> None:
        super().__init__()
        self.ref = ref
        self.conversation_id = conversation_id


def share_bar(share: float, cells: int = _SHARE_CELLS) -> str:
    """A horizontal bar of *cells* character cells, filled to *share* (0..1) in eighths."""
    eighths = round(max(0.0, min(share, 1.0)) * cells * 8)
    full, rest = divmod(eighths, 8)
    bar = "█" * full + (_EIGHTHS[rest] if rest else "")
    return bar.ljust(cells)


class BudgetBar(Widget):
    """The context against the token budget: summaries and messages, and the compaction
    threshold; then what assembly within the budget sends the model."""

    DEFAULT_CSS = """
    BudgetBar { height: 4; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: data.ContextView | None = None

    def show(self, view: data.ContextView) -> None:
        """Draw *view*."""
        self.view = view
        self.refresh()

    def render(self) -> Text:
        view = self.view
        if view is None:
            return Text("loading the context…", style="dim")
        width = max(10, self.size.width - 8)
        budget = max(view.budget, 1)

        def cells(tokens: int) -> int:
            return min(width, round(tokens / budget * width))

        used = cells(view.tokens)
        summaries = min(cells(view.summary_tokens), used)
        mark = min(width - 1, int(view.threshold * width))
        out = Text()
        for i in range(width):
            if i < summaries:
                out.append("█", style="magenta")
            elif i < used:
                out.append("█", style="blue")
            elif i == mark:
                out.append("┃", style="yellow")
            else:
                out.append("░", style="dim")
        pct = view.tokens / budget * 100
        out.append(f" {pct:5.1f}%", style="bold red" if view.tokens > budget else "bold")
        messages = len(view.rows) - view.summaries
        out.append(f"\n{view.tokens:,}/{view.budget:,} tokens · ")
        out.append("■", style="magenta")
        out.append(f" {plural(view.summaries, 'summary', 'summaries')} {view.summary_tokens:,} · ")
        out.append("■", style="blue")
        out.append(f" {plural(messages, 'message')} {view.tokens - view.summary_tokens:,}")
        out.append("\n┃", style="yellow")
        out.append(f" compacts at {view.threshold:.0%}", style="dim")
        sent = view.assembled
        out.append(
            f" · the model gets {sent.tokens:,} tokens: "
            f"{plural(sent.summaries, 'summary', 'summaries')} +"
            f" {plural(sent.raw_messages, 'message')}",
            style="dim",
        )
        if sent.unfolded:
            out.append(
                f"\n  ({sent.unfolded} of them unfolded from below the summaries, to fill it)",
                style="dim",
            )
        if sent.dropped_items:
            out.append(f"; {sent.dropped_items} older left out", style="yellow")
        if sent.over_budget:
            out.append("; the fresh tail alone is over budget", style="bold red")
        return out


class DetailPane(VerticalScroll):
    """The full content of the selected item (focus it to scroll)."""

    DEFAULT_CSS = """
    DetailPane { height: 1fr; border-top: solid $primary-darken-2; }
    DetailPane:focus { border-top: solid $accent; }
    """

    def __init__(self, placeholder: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id, can_focus=True)
        self.placeholder = placeholder
        self.ref: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text(self.placeholder, style="dim"), classes="detail-body")

    def show(self, text: Text, ref: str | None = None) -> None:
        """Show *text* (the content of *ref*) from the top."""
        self.ref = ref
        self.query_one(".detail-body", Static).update(text)
        self.scroll_home(animate=False)

    def show_error(self, exc: BaseException) -> None:
        """Say why the content could not be read."""
        self.show(Text(error_text(exc), style="bold red"))

    def load(self, engine: Engine, ref: str) -> None:
        """Read *ref*'s content in a worker and show it."""
        if ref == self.ref:
            return
        self.ref = ref
        background(
            self,
            lambda: data.detail(engine, ref),
            lambda text: self.show(text, ref),
            group="detail",
            failed=self.show_error,
        )


class ContextPane(Vertical):
    """The active context as the model sees it: each item with its kind, depth and token
    share, under the budget bar."""

    def __init__(self, engine: Engine, conversation_id: int, budget: int) -> None:
        super().__init__(id="context-pane")
        self.engine = engine
        self.conversation_id = conversation_id
        self.budget = budget
        self.view: data.ContextView | None = None

    def compose(self) -> ComposeResult:
        yield BudgetBar(id="budget")
        table = ContextTable(id="context-table", cursor_type="row")
        table.add_column("#", key="ordinal")
        table.add_column("kind", key="kind")
        table.add_column("d", key="depth")
        table.add_column("tokens", key="tokens")
        table.add_column("share", key="share")
        table.add_column("", key="bar", width=_SHARE_CELLS)
        table.add_column("content", key="preview")
        yield table
        yield DetailPane("highlight an item to see it whole", id="context-detail")

    def on_mount(self) -> None:
        self.reload()

    def reload(self) -> None:
        """Read the context again."""
        engine, conv, budget = self.engine, self.conversation_id, self.budget
        background(self, lambda: data.context_view(engine, conv, budget), self.show, group="load")

    def show(self, view: data.ContextView) -> None:
        """Fill the bar and the table from *view*."""
        self.view = view
        self.query_one(BudgetBar).show(view)
        table = self.query_one("#context-table", DataTable)
        cursor = table.cursor_row
        table.clear()
        total = max(view.tokens, 1)
        room = self._content_room(table)
        for position, row in enumerate(view.rows):
            item = row.item
            share = item.tokens / total
            style = "magenta" if item.summary_id else ""
            table.add_row(
                str(position),  # its place in the context (ordinals are sparse)
                Text(row.kind, style=style),
                "" if item.depth is None else f"d{item.depth}",
                Text(f"{item.tokens:,}", justify="right"),
                Text(f"{share:.1%}", justify="right"),
                Text(share_bar(share), style="magenta" if item.summary_id else "blue"),
                Text(first_line(row.preview, room)),  # stored text is never markup
                key=item.ref,
            )
        if view.rows and 0 < cursor < len(view.rows):
            table.move_cursor(row=cursor)
        if not view.rows:
            self.query_one(DetailPane).show(Text("the context is empty", style="dim"))

    @staticmethod
    def _content_room(table: DataTable[str | Text]) -> int:
        """How many characters of an item's text the content column can show: what the other
        columns leave of the table's width (at least :data:`data.PREVIEW`)."""
        used = sum(
            column.get_render_width(table)
            for key, column in table.columns.items()
            if key.value != "preview"
        )
        # The content column's own padding, and the vertical scrollbar.
        free = table.size.width - used - 2 * table.cell_padding - 2
        return max(data.PREVIEW, free)

    def on_resize(self) -> None:
        """A wider or narrower terminal: the content column shows what now fits."""
        if self.view is not None:
            self.show(self.view)

    def holds(self, ref: str) -> bool:
        """Whether *ref* is an item of the context."""
        return self.view is not None and any(r.item.ref == ref for r in self.view.rows)

    def select(self, ref: str) -> bool:
        """Put the cursor on *ref*'s row; False when it is not in the context."""
        table = self.query_one("#context-table", DataTable)
        try:
            index = table.get_row_index(ref)
        except RowDoesNotExist:  # not an item of this context
            return False
        table.move_cursor(row=index)
        table.focus()
        return True

    @on(DataTable.RowHighlighted, "#context-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self.query_one(DetailPane).load(self.engine, event.row_key.value)

    @on(DataTable.RowSelected, "#context-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        ref = event.row_key.value
        if ref is not None and ref.startswith("sum_"):
            self.post_message(ItemOpened(ref, self.conversation_id))
        else:
            self.query_one(DetailPane).focus()


class DagPane(Vertical):
    """The summary DAG as a tree: the summaries in the context at the top; expanding one
    reads what it was made from, down to the original messages."""

    def __init__(self, engine: Engine, conversation_id: int) -> None:
        super().__init__(id="dag-pane")
        self.engine = engine
        self.conversation_id = conversation_id
        self._loaded: set[int] = set()
        self._loading: set[int] = set()
        self._filled = False
        self._pending: tuple[list[str], dict[str, list[data.Node]]] | None = None

    def compose(self) -> ComposeResult:
        tree = DagTree("context", id="dag-tree")
        tree.show_root = False
        tree.guide_depth = 2
        yield tree
        yield DetailPane(
            "enter or space opens a summary; highlight a node to read it", id="dag-detail"
        )

    @property
    def dag_tree(self) -> Tree[str | None]:
        """The DAG tree."""
        return self.query_one("#dag-tree", Tree)

    def on_mount(self) -> None:
        self.reload()

    def reload(self) -> None:
        """Read the context's summaries again (the tree starts closed)."""
        engine, conv = self.engine, self.conversation_id
        self._filled = False
        background(self, lambda: data.top_nodes(engine, conv), self._fill, group="load")

    def _fill(self, found: tuple[list[data.Node], int]) -> None:
        nodes, messages = found
        tree = self.dag_tree
        tree.clear()
        self._loaded.clear()
        self._loading.clear()
        self._add(tree.root, nodes)
        tree.cursor_line = 0  # enter works at once; the first node is shown below
        if messages:
            tree.root.add_leaf(
                Text(
                    f"then {plural(messages, 'message')} of the fresh context (tab 1)", style="dim"
                ),
                None,
            )
        if not nodes:
            tree.root.add_leaf(
                Text("no summaries in the context yet: nothing was compacted", style="dim"),
                None,
            )
        self._filled = True
        if self._pending is not None:
            path, sources = self._pending
            self._pending = None
            if not self._reveal(path, sources):
                self.notify(f"{path[-1]} is not below this context any more", markup=False)

    @staticmethod
    def _add(parent: TreeNode[str | None], nodes: list[data.Node]) -> None:
        for node in nodes:
            if node.expandable:
                parent.add(node.label, node.ref)
            else:
                parent.add_leaf(node.label, node.ref)

    def _children(self, node: TreeNode[str | None], nodes: list[data.Node]) -> None:
        self._loading.discard(node.id)
        if node.id in self._loaded:
            return
        self._loaded.add(node.id)
        self._add(node, nodes)
        if not nodes:
            node.add_leaf(Text("(no sources recorded)", style="dim"), None)

    @on(Tree.NodeExpanded, "#dag-tree")
    def _expanded(self, event: Tree.NodeExpanded[str | None]) -> None:
        node = event.node
        ref = node.data
        if ref is None or not ref.startswith("sum_"):
            return
        if node.id in self._loaded or node.id in self._loading:
            return
        self._loading.add(node.id)
        engine = self.engine

        def failed(exc: BaseException) -> None:
            self._loading.discard(node.id)
            self.query_one(DetailPane).show_error(exc)

        background(
            self,
            lambda: data.sources(engine, ref),
            lambda nodes: self._children(node, nodes),
            group=f"sources-{node.id}",
            failed=failed,
        )

    @on(Tree.NodeHighlighted, "#dag-tree")
    def _highlighted(self, event: Tree.NodeHighlighted[str | None]) -> None:
        if event.node.data is not None:
            self.query_one(DetailPane).load(self.engine, event.node.data)

    def reveal(self, path: list[str], sources: dict[str, list[data.Node]]) -> bool:
        """Open the tree along *path* (from a context summary down) and put the cursor on its
        last node; *sources* holds the children of every summary on the way. While the tree
        is being read, this happens once it is there."""
        if not self._filled:
            self._pending = (path, sources)
            return True
        return self._reveal(path, sources)

    def _reveal(self, path: list[str], sources: dict[str, list[data.Node]]) -> bool:
        tree = self.dag_tree
        node = next((n for n in tree.root.children if n.data == path[0]), None)
        if node is None:
            return False
        for ref in path[1:]:
            if node.id not in self._loaded:
                self._children(node, sources.get(str(node.data), []))
            node.expand()
            child = next((n for n in node.children if n.data == ref), None)
            if child is None:
                return False
            node = child
        target = node
        tree.focus()
        self.call_after_refresh(tree.move_cursor, target)
        return True


class SearchPane(Vertical):
    """``lcm_grep`` with its mode, scope, sort and reach; a hit's content below, and enter
    opens it where it lives."""

    def __init__(self, engine: Engine, conversation_id: int) -> None:
        super().__init__(id="search-pane")
        self.engine = engine
        self.conversation_id = conversation_id
        self.hits: dict[str, GrepHit] = {}

    def compose(self) -> ComposeResult:
        yield Input(
            placeholder='words, "a phrase", or a regex — enter searches',
            id="search-input",
            compact=True,
        )
        with Horizontal(id="search-options"):
            yield Select(
                [("full text", "full_text"), ("regex", "regex")],
                value="full_text",
                allow_blank=False,
                compact=True,
                id="search-mode",
            )
            yield Select(
                [(s, s) for s in ("both", "messages", "summaries", "files")],
                value="both",
                allow_blank=False,
                compact=True,
                id="search-scope",
            )
            yield Select(
                [(s, s) for s in ("relevance", "recency")],
                value="relevance",
                allow_blank=False,
                compact=True,
                id="search-sort",
            )
            yield Select(
                [("this conv.", "conversation"), ("family", "family"), ("all", "store")],
                value="conversation",
                allow_blank=False,
                compact=True,
                id="search-where",
            )
        yield Static(Text("type and press enter", style="dim"), id="search-status")
        table = ResultsTable(id="search-results", cursor_type="row")
        table.add_column("id", key="id")
        table.add_column("what", key="what")
        table.add_column("time", key="time")
        table.add_column("snippet", key="snippet")
        yield table
        yield DetailPane("highlight a hit to read it; enter opens it in place", id="search-detail")

    def _value(self, select_id: str) -> str:
        return str(self.query_one(select_id, Select).value)

    @on(Input.Submitted, "#search-input")
    def _submitted(self) -> None:
        self.search()

    @on(Select.Changed)
    def _option_changed(self) -> None:
        if self.query_one("#search-input", Input).value.strip():
            self.search()

    def search(self) -> None:
        """Run the search with the pattern and options shown."""
        pattern = self.query_one("#search-input", Input).value.strip()
        if not pattern:
            return
        mode: Mode = "regex" if self._value("#search-mode") == "regex" else "full_text"
        scope: Scope = _SCOPES.get(self._value("#search-scope"), "both")
        sort: Sort = _SORTS.get(self._value("#search-sort"), "recency")
        where = self._value("#search-where")
        engine, conv = self.engine, self.conversation_id
        self.query_one("#search-status", Static).update(Text("searching…", style="dim"))

        def run() -> GrepResult:
            return engine.grep(
                pattern,
                conversation=None if where == "store" else conv,
                family=where == "family",
                mode=mode,
                scope=scope,
                sort=sort,
                limit=200,
            )

        def failed(exc: BaseException) -> None:
            self.query_one("#search-status", Static).update(Text(error_text(exc), style="red"))

        background(self, run, self.show, group="search", failed=failed)

    def show(self, result: GrepResult) -> None:
        """List *result*'s hits; the first one is shown below."""
        table = self.query_one("#search-results", DataTable)
        table.clear()
        self.hits = {h.id: h for h in result.hits}
        for hit in result.hits:
            what = hit.role or (f"d{hit.depth}" if hit.depth is not None else hit.kind)
            if hit.conversation_id != self.conversation_id:
                what += f" c{hit.conversation_id}"
            table.add_row(
                Text(hit.id, style="bold"),
                what,
                short_time(hit.created_at),
                Text(first_line(hit.snippet, 36)),  # stored text is never markup
                key=hit.id,
            )
        status = plural(len(result.hits), "hit") if result.hits else "no matches"
        if result.truncated:
            status += f" (stopped after scanning {result.scanned:,} rows: the regex bound)"
        if result.hits:
            status += " · enter opens a hit in place"
        self.query_one("#search-status", Static).update(status)
        if result.hits:
            table.focus()

    @on(DataTable.RowHighlighted, "#search-results")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self.query_one(DetailPane).load(self.engine, event.row_key.value)

    @on(DataTable.RowSelected, "#search-results")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(event.row_key.value)

    def _open(self, ref: str | None) -> None:
        hit = self.hits.get(ref or "")
        if hit is not None:
            self.post_message(ItemOpened(hit.id, hit.conversation_id))


_SCOPES: dict[str, Scope] = {
    "both": "both",
    "messages": "messages",
    "summaries": "summaries",
    "files": "files",
}
_SORTS: dict[str, Sort] = {"recency": "recency", "relevance": "relevance"}


class FilesPane(Vertical):
    """The conversation's large files with their exploration summaries; enter reads one."""

    def __init__(self, engine: Engine, conversation_id: int) -> None:
        super().__init__(id="files-pane")
        self.engine = engine
        self.conversation_id = conversation_id
        self.file_ids: list[str] | None = None  # None while they are being read
        self._pending: str | None = None

    def compose(self) -> ComposeResult:
        table = FilesTable(id="files-table", cursor_type="row")
        table.add_column("file", key="file")
        table.add_column("name", key="name")
        table.add_column("tokens", key="tokens")
        table.add_column("bytes", key="bytes")
        table.add_column("from", key="message")
        yield table
        yield DetailPane("no large files in this conversation", id="files-detail")

    def on_mount(self) -> None:
        self.reload()

    def reload(self) -> None:
        """Read the list of files again."""
        engine, conv = self.engine, self.conversation_id
        self.file_ids = None
        background(self, lambda: data.large_files(engine, conv), self.show, group="load")

    def show(self, files: list[LargeFile]) -> None:
        """List *files*."""
        table = self.query_one("#files-table", DataTable)
        table.clear()
        for f in files:
            table.add_row(
                Text(f.file_id, style="bold"),
                Text(first_line(f.file_name or "(unnamed)", 28)),
                Text(f"{f.token_count:,}", justify="right"),
                Text(f"{f.byte_size:,}", justify="right"),
                "" if f.message_id is None else f"msg#{f.message_id}",
                key=f.file_id,
            )
        if files:
            self.query_one(DetailPane).show(
                Text("highlight a file for its exploration summary", style="dim")
            )
        self.file_ids = [f.file_id for f in files]
        if self._pending is not None:
            file_id, self._pending = self._pending, None
            if not self.select(file_id):
                self.notify(f"{file_id} is not among this conversation's files", markup=False)

    def select(self, file_id: str) -> bool:
        """Put the cursor on *file_id*; False when it is not listed (while the list is being
        read, this happens once it is there)."""
        if self.file_ids is None:
            self._pending = file_id
            return True
        table = self.query_one("#files-table", DataTable)
        try:
            index = table.get_row_index(file_id)
        except RowDoesNotExist:
            return False
        table.move_cursor(row=index)
        table.focus()
        return True

    @on(DataTable.RowHighlighted, "#files-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self.query_one(DetailPane).load(self.engine, event.row_key.value)

    @on(DataTable.RowSelected, "#files-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        file_id = event.row_key.value
        if file_id is None:
            return
        detail, engine = self.query_one(DetailPane), self.engine
        detail.ref = None

        def show(text: Text) -> None:
            detail.show(text, f"{file_id}:content")
            detail.focus()

        background(
            detail,
            lambda: data.file_content(engine, file_id),
            show,
            group="detail",
            failed=detail.show_error,
        )
