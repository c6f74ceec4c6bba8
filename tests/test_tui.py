"""The terminal UI, driven headless through Textual's Pilot at 80×24, over real SQLite stores.

What is asserted is what a person sees: table cells, the tree's cursor, the detail pane, the
status lines, the text on the screen; and, for a transplant, the store itself. Screen
snapshots (``tests/__snapshots__/test_tui/``) keep the main screens as they were approved:
``pytest tests/test_tui.py --snapshot-update`` rewrites them after a deliberate change.
"""

from __future__ import annotations

import html
import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Select, Static, TabbedContent

from lossless import Config, Engine
from lossless.summarize import ScriptedSummarizer
from lossless.tui import LosslessApp
from lossless.tui.render import message_text
from lossless.tui.screens import ConversationScreen, ConversationsScreen, TransplantScreen
from lossless.tui.widgets import DagPane, DetailPane

pytestmark = pytest.mark.anyio

SMALL = Config().replace(
    fresh_tail_count=2,
    leaf_chunk_tokens=150,
    leaf_target_tokens=20,
    condensed_target_tokens=20,
    leaf_min_fanout=2,
    condensed_min_fanout=2,
    large_file_token_threshold=100,
)
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
BODY = "\n".join(f"def handler_{i}(event):\n    return event.get({i!r})" for i in range(60))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_animations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tabs switch at once (the pilot would wait for each animation to end)."""
    monkeypatch.setattr("textual.constants.TEXTUAL_ANIMATIONS", "none")


def counter() -> Any:
    n = 0

    def text(request: Any) -> str:
        nonlocal n
        n += 1
        return f"Summary number {n} of {len(request.sources)} item(s)."

    return text


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """``old`` (1) is compacted two levels deep, with thinking, a tool call and its result
    below its summaries and a large file in its fresh tail; ``new`` (2) has three messages.
    Every time is fixed (the summaries' too: their ids hash it), so screens are repeatable."""
    monkeypatch.setattr("lossless.compaction.compactor.now", lambda: START + timedelta(hours=1))
    eng = Engine.open(
        tmp_path / "t.db", config=SMALL, summarizer=ScriptedSummarizer(default=counter())
    )
    minute = iter(range(1000))

    def add(session: str, message: dict[str, Any]) -> None:
        eng.ingest(session, message, created_at=START + timedelta(minutes=next(minute)))

    for i in range(16):
        add("old", {"role": "user", "content": f"old turn {i}: " + "planning work " * 8})
        if i == 2:
            add(
                "old",
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "The port is in the quokka config."},
                        {"type": "text", "text": "Checking the quokka config."},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "read_file",
                            "input": {"path": "quokka.toml"},
                        },
                    ],
                },
            )
            add(
                "old",
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "port=9043"}
                    ],
                },
            )
    eng.compact("old")
    add("old", {"role": "user", "content": f'Review this:\n<file name="src/app.py">{BODY}</file>'})
    for i in range(3):
        add("new", {"role": "user", "content": f"new session turn {i}"})
    yield eng
    eng.close()


# --- helpers ---------------------------------------------------------------------------------


async def settle(pilot: Pilot[Any]) -> None:
    """Wait until the workers are done, what they started (a detail read after a table
    filled, say) is done too, and every table has laid out the rows it was given (a table
    sizes its columns when idle, after the rows arrive); bounded (generously: on two busy
    cores a snapshot once caught a table whose columns were not sized yet)."""
    for _ in range(200):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if any(w.is_running or w.state.name == "PENDING" for w in pilot.app.workers):
            continue
        if not any(_laying_out(table) for table in pilot.app.screen.query(DataTable)):
            # The repaint that follows the last update of the column widths (a snapshot
            # once caught a header drawn with the old widths over rows with the new).
            await pilot.pause()
            return


def _laying_out(table: DataTable[Any]) -> bool:
    """Whether *table* still has cells or column widths to update (Textual's DataTable does
    that on its next idle)."""
    return bool(table._updated_cells) or table._require_update_dimensions


async def press(pilot: Pilot[Any], *keys: str) -> None:
    """Press keys one by one, letting each one's database work finish."""
    for key in keys:
        await pilot.press(key)
        await settle(pilot)


async def search(pilot: Pilot[Any], words: str) -> None:
    """Open the search pane, type *words* and press enter."""
    await press(pilot, "3")
    await pilot.press(*("space" if c == " " else c for c in words))
    await press(pilot, "enter")


def screen_text(app: LosslessApp) -> str:
    """The characters on the screen, line by line (from the SVG screenshot)."""
    svg = app.export_screenshot()
    lines: dict[int, list[str]] = {}
    found = re.finditer(
        r'<text class="[^"]*" x="([\d.]+)" y="[\d.]+" textLength="[\d.]+"'
        r' clip-path="url\(#[^)]*-line-(\d+)\)">(.*?)</text>',
        svg,
    )
    for match in found:
        x, line, content = match.groups()
        row = lines.setdefault(int(line), [" "] * 120)
        col = round(float(x) / 12.2)
        for i, ch in enumerate(html.unescape(content).replace("\xa0", " ")):
            if col + i < len(row):
                row[col + i] = ch
    return "\n".join("".join(lines[n]).rstrip() for n in sorted(lines))


def flat(text: str) -> str:
    """Text with runs of whitespace (line wraps too) as one space."""
    return " ".join(text.split())


def plain(widget: Static) -> str:
    content = widget.content
    return content.plain if isinstance(content, Text) else str(content)


def rows(table: DataTable[Any]) -> list[list[str]]:
    return [
        [c.plain if isinstance(c, Text) else str(c) for c in table.get_row_at(i)]
        for i in range(table.row_count)
    ]


def detail_of(app: LosslessApp, selector: str) -> str:
    return plain(app.screen.query_one(selector, DetailPane).query_one(".detail-body", Static))


def cursor_key(table: DataTable[Any]) -> str | None:
    return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value


def store_rows(engine: Engine) -> dict[str, Any]:
    tables = ("messages", "message_parts", "summaries", "summary_parents", "summary_messages")
    out: dict[str, Any] = {
        t: engine.store.fetchall(f"SELECT count(*) FROM {t}")[0][0] for t in tables
    }
    out["context"] = engine.store.fetchall("SELECT * FROM context_items ORDER BY 1, 2")
    return out


# --- the screens, each checked and kept as a snapshot ----------------------------------------
#
# ``snap_compare`` runs the app itself; ``run_before`` drives it and checks what it shows
# (an assertion there fails the test), then the screen is compared with the approved one.


def test_the_list_shows_every_conversation_with_its_counts_and_archived_flag(
    engine: Engine, snap_compare: Any
) -> None:
    with engine.store.transaction() as conn:
        conn.execute("UPDATE conversations SET status = 'archived' WHERE session_id = 'new'")

    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        table = app.screen.query_one("#conversations", DataTable)
        # The archived conversation is left out until asked for (a), then flagged.
        assert rows(table) == [["1", "old", "19", "4/1", "683", "2026-03-02 09:18", "active"]]
        await press(pilot, "a")
        assert rows(table) == [
            ["1", "old", "19", "4/1", "683", "2026-03-02 09:18", "active"],
            ["2", "new", "3", "-", "15", "2026-03-02 09:21", "archived"],
        ]
        info = flat(plain(app.screen.query_one("#conversation-info", Static)))
        assert "conversation 1 · session old" in info
        assert "5 summaries (d0: 4, d1: 1)" in info
        await press(pilot, "down")
        info = flat(plain(app.screen.query_one("#conversation-info", Static)))
        assert "conversation 2 · session new · archived" in info
        assert "⏎ Open" in screen_text(app) and "t Transplant" in screen_text(app)
        assert "a Archived" in screen_text(app)

    assert snap_compare(LosslessApp(engine), run_before=run_before)


def test_enter_opens_a_conversation_on_its_context_window(
    engine: Engine, snap_compare: Any
) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        await press(pilot, "enter")
        assert isinstance(app.screen, ConversationScreen)
        assert app.screen.conversation_id == 1
        shown = rows(app.screen.query_one("#context-table", DataTable))
        assert [r[:5] for r in shown] == [
            ["0", "condensed", "d1", "8", "3.6%"],
            ["1", "user", "", "32", "14.3%"],
            ["2", "user", "", "32", "14.3%"],
            ["3", "user", "", "151", "67.7%"],
        ]
        assert shown[0][6] == "Summary number 5 of 4 item(s)."
        assert shown[3][5].strip() == "█████▍"  # 67.7% of eight cells
        text = flat(screen_text(app))
        assert "223/1,000 tokens" in text and "22.3%" in text
        assert "1 summary 8 ·" in text and "3 messages 215" in text
        assert "compacts at 75%" in text
        sent = engine.assemble("old", 1_000)
        assert sent.unfolded  # the room under the budget is filled from below the summary
        summaries = "1 summary" if sent.summaries == 1 else f"{sent.summaries} summaries"
        assert (
            f"the model gets {sent.tokens} tokens: {summaries} + {sent.raw_messages} messages"
            f" ({sent.unfolded} of them unfolded from below the summaries, to fill it)"
        ) in text
        # The highlighted item is shown whole below.
        assert "made from 4 summaries" in flat(detail_of(app, "#context-detail"))
        await settle(pilot)  # the snapshot after the table has sized its columns

    assert snap_compare(LosslessApp(engine, budget=1_000), run_before=run_before)


def test_a_summary_opens_in_the_tree_and_drills_down_to_the_original_messages(
    engine: Engine, snap_compare: Any
) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        await press(pilot, "2")
        tree = app.screen.query_one(DagPane).dag_tree
        top = tree.root.children[0]
        assert str(top.data).startswith("sum_") and not top.is_expanded
        await press(pilot, "enter")  # the condensed summary: its four leaves
        assert top.is_expanded
        assert [str(n.label).split()[1:3] for n in top.children] == [["leaf", "d0"]] * 4
        await press(pilot, "down", "enter")  # the first leaf: its messages
        leaf = top.children[0]
        assert leaf.is_expanded
        assert [n.data for n in leaf.children] == [f"msg#{i}" for i in range(1, 6)]
        await press(pilot, "down", "down", "down", "down", "down")
        assert "← tool result  toolu_1\nport=9043" in detail_of(app, "#dag-detail")
        await press(pilot, "up")
        assert tree.cursor_node is leaf.children[3]
        shown = detail_of(app, "#dag-detail")
        assert "msg#4  assistant" in shown
        assert "summarized by " + str(leaf.data) in shown
        assert "thinking\nThe port is in the quokka config." in shown
        assert "Checking the quokka config." in shown
        assert '→ tool call read_file  toolu_1\n{\n  "path": "quokka.toml"\n}' in shown

    app = LosslessApp(engine, conversation="old")
    assert snap_compare(app, run_before=run_before)


def test_search_lists_hits_with_the_first_one_shown(engine: Engine, snap_compare: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        await search(pilot, "quokka")  # relevance, the default
        results = app.screen.query_one("#search-results", DataTable)
        # The message that says it first, then those beside it (found through it).
        found = [r[:2] for r in rows(results)]
        assert found[0] == ["msg#4", "assistant"] and len(found) > 1
        assert plain(app.screen.query_one("#search-status", Static)).startswith(
            f"{len(found)} hits ·"
        )
        assert "→ tool call read_file" in detail_of(app, "#search-detail")

    app = LosslessApp(engine, conversation="old")
    assert snap_compare(app, run_before=run_before)


def test_a_file_found_by_search_opens_in_the_files_pane_and_reads_whole(
    engine: Engine, snap_compare: Any
) -> None:
    [record] = engine.store.large_files()

    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        app.screen.query_one("#search-scope", Select).value = "files"
        await search(pilot, "handler_0")
        results = app.screen.query_one("#search-results", DataTable)
        assert [r[:2] for r in rows(results)] == [[record.file_id, "file"]]
        await press(pilot, "enter")
        assert app.screen.query_one(TabbedContent).active == "files"
        files = app.screen.query_one("#files-table", DataTable)
        assert rows(files) == [
            [record.file_id, "src/app.py", "715", "2,859", f"msg#{record.message_id}"]
        ]
        assert cursor_key(files) == record.file_id and files.has_focus
        shown = detail_of(app, "#files-detail")
        assert "exploration summary" in shown and "handler_0" in shown
        assert "def handler_59" not in shown
        await press(pilot, "enter")
        shown = detail_of(app, "#files-detail")
        assert shown.endswith(BODY + "\n") and "exploration summary" not in shown

    app = LosslessApp(engine, conversation="old")
    assert snap_compare(app, run_before=run_before)


def test_the_transplant_screen_shows_the_dry_run_report(engine: Engine, snap_compare: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        await press(pilot, "t")
        assert isinstance(app.screen, TransplantScreen)
        assert app.screen.query_one("#source", Select).value == 1
        assert app.screen.query_one("#target", Select).value == 2
        report = flat(plain(app.screen.query_one("#report-body", Static)))
        assert "Transplant: conversation 1 → conversation 2" in report
        assert "Full DAG to copy: 5 summaries (1 context + 4 beneath)" in report
        assert "Linked source messages to copy: 16" in report
        status = plain(app.screen.query_one("#transplant-status", Static))
        assert status == "dry run: nothing is changed until you apply (a)"

    assert snap_compare(LosslessApp(engine), run_before=run_before)
    assert engine.context("new")[0].item_type == "message"  # a dry run changes nothing


# --- moving between places ----------------------------------------------------------------------


async def test_an_empty_store_says_how_to_fill_it(tmp_path: Path) -> None:
    with Engine.open(tmp_path / "empty.db", config=SMALL) as eng:
        app = LosslessApp(eng)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            assert "lossless import PATH" in screen_text(app)


async def test_context_summaries_and_search_hits_open_in_the_tree(engine: Engine) -> None:
    context_summary = engine.context("old")[0].summary_id
    app = LosslessApp(engine, conversation=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await press(pilot, "enter")  # on the context's summary
        assert app.screen.query_one(TabbedContent).active == "dag"
        tree = app.screen.query_one(DagPane).dag_tree
        assert tree.cursor_node is not None and tree.cursor_node.data == context_summary
        assert tree.has_focus
        await search(pilot, "quokka")
        await press(pilot, "enter")  # on the hit, which is below a leaf below the summary
        assert app.screen.query_one(TabbedContent).active == "dag"
        node = tree.cursor_node
        assert node is not None and node.data == "msg#4"
        assert node.parent is not None and node.parent.is_expanded
        assert node.parent.parent is not None and node.parent.parent.data == context_summary
        assert "Checking the quokka config." in detail_of(app, "#dag-detail")
        await press(pilot, "z")  # the tree fills the screen; escape gives the panes back
        assert app.screen.maximized is tree
        await press(pilot, "escape")
        assert app.screen.maximized is None and isinstance(app.screen, ConversationScreen)
        await press(pilot, "question_mark")
        assert app.screen.query("HelpPanel")
        assert "Cursor Down" in screen_text(app)  # keys the footer does not show


async def test_search_options_choose_what_is_searched_and_errors_are_explained(
    engine: Engine,
) -> None:
    app = LosslessApp(engine, conversation="old")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.screen.query_one("#search-sort", Select).value == "relevance"  # the default
        app.screen.query_one("#search-sort", Select).value = "recency"
        await search(pilot, "turn")
        results = app.screen.query_one("#search-results", DataTable)
        assert {r[0][:4] for r in rows(results)} == {"msg#"}
        assert [r[0] for r in rows(results)][:2] == ["msg#19", "msg#18"]  # newest first
        app.screen.query_one("#search-scope", Select).value = "summaries"
        await settle(pilot)
        assert rows(results) == []
        assert plain(app.screen.query_one("#search-status", Static)) == "no matches"
        app.screen.query_one("#search-scope", Select).value = "both"
        app.screen.query_one("#search-where", Select).value = "store"
        await settle(pilot)
        assert ["msg#21", "user c2"] in [r[:2] for r in rows(results)]
        app.screen.query_one("#search-where", Select).value = "conversation"
        await settle(pilot)
        results.focus()
        await press(pilot, "enter")  # msg#19 is in the fresh tail, not below a summary
        assert app.screen.query_one(TabbedContent).active == "context"
        assert cursor_key(app.screen.query_one("#context-table", DataTable)) == "msg#19"

        field = app.screen.query_one("#search-input", Input)
        field.value = "a.*b"
        field.focus()
        await press(pilot, "enter")
        status = plain(app.screen.query_one("#search-status", Static))
        assert "looks like a regular expression, but the mode is full_text" in status
        app.screen.query_one("#search-mode", Select).value = "regex"
        await settle(pilot)
        assert re.match(r"\d+ hits ·", plain(app.screen.query_one("#search-status", Static)))
        field.value = "quokka ("
        field.focus()
        await press(pilot, "enter")
        status = plain(app.screen.query_one("#search-status", Static))
        assert "not a valid regular expression" in status
        assert app.is_running


async def test_stored_text_is_shown_as_it_is_never_as_markup(engine: Engine) -> None:
    engine.ingest("[red]s[/]", {"role": "user", "content": "[/oops] [tool call x] [b]"})
    app = LosslessApp(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#conversations", DataTable)
        assert rows(table)[2][1] == "[red]s[/]"
        await press(pilot, "down", "down", "enter")
        context = app.screen.query_one("#context-table", DataTable)
        assert rows(context)[0][6] == "[/oops] [tool call x] [b]"
        assert "[/oops] [tool call x] [b]" in detail_of(app, "#context-detail")


# --- transplant -------------------------------------------------------------------------------


async def test_a_transplant_is_confirmed_then_puts_the_copies_first_in_the_target(
    engine: Engine,
) -> None:
    source_summary = engine.summary(engine.context("old")[0].summary_id or "")
    before = store_rows(engine)
    app = LosslessApp(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await press(pilot, "t", "a")
        assert "Copy 5 summaries and 16 messages" in flat(screen_text(app))
        await press(pilot, "enter")  # the focused button is Cancel
        assert isinstance(app.screen, TransplantScreen)
        await press(pilot, "a", "n")
        assert store_rows(engine) == before
        await press(pilot, "a", "y")
        status = plain(app.screen.query_one("#transplant-status", Static))
        assert status == "Done: conversation 2 now starts with 1 transplanted summary."
        first = engine.context("new")[0]
        assert first.item_type == "summary" and first.summary_id != source_summary.summary_id
        assert engine.summary(first.summary_id or "").content == source_summary.content
        assert [i.item_type for i in engine.context("new")[1:]] == ["message"] * 3
        await press(pilot, "escape")
        table = app.screen.query_one("#conversations", DataTable)
        assert rows(table)[1][:4] == ["2", "new", "19", "4/1"]


async def test_a_refused_transplant_changes_nothing_and_says_why(engine: Engine) -> None:
    engine.transplant("old", "new", apply=True)
    before = store_rows(engine)
    app = LosslessApp(engine)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot)
        await press(pilot, "t")
        status = plain(app.screen.query_one("#transplant-status", Static))
        assert status.startswith("refused: conversation 2 already holds the content of 5")
        await press(pilot, "a")
        assert isinstance(app.screen, TransplantScreen)  # no confirmation was asked
        assert "it was transplanted before" in flat(screen_text(app))
        await press(pilot, "s")  # the other way round: new has summaries now, old holds them
        status = plain(app.screen.query_one("#transplant-status", Static))
        assert status.startswith("refused: conversation 1 already holds")
    assert store_rows(engine) == before


async def test_a_transplant_into_the_open_conversation_shows_up_when_back(engine: Engine) -> None:
    app = LosslessApp(engine, conversation="new")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#context-table", DataTable)
        assert [r[1] for r in rows(table)] == ["user"] * 3
        await press(pilot, "t")
        assert app.screen.query_one("#source", Select).value == 2
        await press(pilot, "s", "a", "y", "escape")
        assert isinstance(app.screen, ConversationScreen)
        assert [r[1] for r in rows(table)] == ["condensed", "user", "user", "user"]
        await press(pilot, "escape")
        assert isinstance(app.screen, ConversationsScreen)


# --- errors -----------------------------------------------------------------------------------


async def test_an_unknown_conversation_is_reported_in_the_ui(engine: Engine) -> None:
    app = LosslessApp(engine, conversation=999)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, ConversationsScreen)
        assert "no conversation with id 999" in flat(screen_text(app))


async def test_a_failing_store_is_reported_and_the_app_goes_on(engine: Engine) -> None:
    app = LosslessApp(engine, conversation="old")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot)
        engine.store.close()
        await press(pilot, "r")
        assert "closed; open it again" in flat(screen_text(app))
        await press(pilot, "2")
        assert app.is_running and isinstance(app.screen, ConversationScreen)


# --- rendering --------------------------------------------------------------------------------


def test_openai_tool_calls_and_results_read_as_calls_and_results(engine: Engine) -> None:
    engine.ingest(
        "chat",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "grep", "arguments": '{"q": "port"}'},
                }
            ],
        },
    )
    engine.ingest("chat", {"role": "tool", "tool_call_id": "call_1", "content": "x", "name": "g"})
    call, result = engine.messages("chat")
    assert '→ tool call grep  call_1\n{\n  "q": "port"\n}' in message_text(call).plain
    assert "← tool result g  call_1\nx" in message_text(result).plain


# --- the command ------------------------------------------------------------------------------


def test_the_command_opens_the_app_on_the_chosen_store_and_conversation(
    run_cli: Callable[..., Any], engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def run(self: LosslessApp) -> None:
        seen.update(db=self.engine.store.path, start=self.start_conversation, budget=self.budget)

    monkeypatch.setattr(LosslessApp, "run", run)
    db = engine.store.path
    res = run_cli("--db", str(db), "tui", "--conversation", "new", "--budget", "32000")
    assert res.code == 0, res
    assert seen == {"db": db, "start": 2, "budget": 32_000}
    missing = run_cli("--db", str(db), "tui", "--conversation", "nope")
    assert missing.code == 4 and "no conversation with session id 'nope'" in missing.err


def test_without_textual_the_command_names_the_extra(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "lossless.tui" or m.startswith("lossless.tui.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "textual", None)
    res = run_cli("--db", str(tmp_path / "x.db"), "tui")
    assert res.code == 2
    assert "pip install 'lossless[tui]'" in res.err
    assert "Traceback" not in res.err


def test_a_leafs_detail_says_what_it_was_made_from_not_none_below(engine: Engine) -> None:
    from lossless.tui.render import summary_text

    conv = engine.conversation("old").conversation_id
    leaves = [s for s in engine.store.live_summaries(conv) if s.kind == "leaf"]
    assert leaves
    leaf = leaves[0]
    _, messages = engine.store.summary_sources(leaf.summary_id)
    shown = summary_text(leaf, messages=len(messages)).plain
    assert f"made from {len(messages)} message(s)" in shown
    assert "below" not in shown


@pytest.mark.parametrize(("width", "at_least"), [(80, 20), (160, 90)])
async def test_the_content_column_shows_what_the_terminals_width_leaves(
    engine: Engine, width: int, at_least: int
) -> None:
    """On a wide terminal an item's text is shown far past the 60 characters it was cut to
    before; on 80 columns the line still fits."""
    app = LosslessApp(engine, conversation="old")
    async with app.run_test(size=(width, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#context-table", DataTable)
        previews = [str(r[-1]) for r in rows(table)]
        longest = max(len(p) for p in previews)
        assert longest >= at_least, previews
        assert all(line.rstrip() == line.rstrip()[:width] for line in screen_text(app).splitlines())


@pytest.mark.parametrize("width", [80, 160])
async def test_the_first_screen_shows_every_value_whole(tmp_path: Path, width: int) -> None:
    """The conversations as the TUI opens on them, no key pressed: the counts of a long
    session whole (they were once cut to their headers' width, `2,72` for 2,720 messages,
    until `r` was pressed) and every line within the terminal."""
    from lossless.sample import write_session

    transcript = write_session(tmp_path / "long.jsonl", 150, session_id="long-session")
    with Engine.open(tmp_path / "t.db", config=Config()) as engine:
        engine.import_path(transcript)
        (stats,) = engine.conversations()
        app = LosslessApp(engine)
        async with app.run_test(size=(width, 30)) as pilot:
            await settle(pilot)
            shown = screen_text(app)
    assert stats.message_count >= 1_000 and stats.message_tokens >= 10_000
    line = next(line for line in shown.splitlines() if "long-ses" in line)
    assert f" {stats.message_count:,} " in line, line
    assert f" {stats.message_tokens:,} " in line, line
    assert " active" in line, line
    assert all(len(line.rstrip()) <= width for line in shown.splitlines())
