"""Large files: kept outside the context, summarized, readable by id, never a way out."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lossless import Config, Engine, LosslessError, Message, NotFoundError, doctor
from lossless.ingest.files import explore, file_path, read_file

BODY = "\n".join(f"def handler_{i}(event):\n    return event.get({i!r})" for i in range(600))


@pytest.fixture
def small(db: str) -> Iterator[Engine]:
    config = Config().replace(large_file_token_threshold=500)
    with Engine.open(db, config=config) as engine:
        yield engine


def test_a_large_file_block_leaves_the_text_but_not_the_message(small: Engine) -> None:
    msg = {
        "role": "user",
        "content": f'Review this:\n<file name="src/app.py">{BODY}</file>\nThanks',
    }
    stored = small.get_message(small.ingest("s", msg).message_ids[0])
    assert BODY not in stored.content
    assert "Review this:" in stored.content and "Thanks" in stored.content
    assert stored.token_count < 300
    assert stored.to_source() == msg  # the original is still exactly recoverable
    [record] = small.store.large_files()
    assert record.file_id in stored.content
    assert record.file_name == "src/app.py"
    assert small.read_large_file(record.file_id) == BODY
    assert "handler_0" in record.exploration_summary
    assert record.storage_path == f"1/{record.file_id}.py"
    assert doctor.check(small.store) == []


def test_a_large_single_tool_output_is_kept_as_a_file(small: Engine) -> None:
    output = "\n".join(f"row {i}: value={i * 7}" for i in range(900))
    msg = {"role": "tool", "tool_call_id": "call_1", "content": output}
    stored = small.get_message(small.ingest("s", msg).message_ids[0])
    assert stored.content.startswith("[large file file_")
    assert stored.to_source() == msg
    assert small.read_large_file(small.store.large_files()[0].file_id) == output


def test_small_files_stay_inline(small: Engine) -> None:
    msg = {"role": "user", "content": '<file name="a.txt">short</file>'}
    stored = small.get_message(small.ingest("s", msg).message_ids[0])
    assert stored.content == msg["content"]
    assert small.store.large_files() == []


def test_every_shape_round_trips_with_its_files_outside(small: Engine) -> None:
    block = f'<file path="notes.md"># Title\n## Part\n{BODY}</file>'
    for msg in (
        {"role": "user", "content": [{"type": "text", "text": block}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": block}, {"type": "text", "text": "x"}],
        },
        Message(role="user", content=block),
    ):
        stored = small.get_message(small.ingest("s", msg).message_ids[0])
        assert stored.to_source() == msg
        assert stored.token_count < 400


def test_files_are_private_and_stored_once(small: Engine) -> None:
    msg = {"role": "user", "content": f'<file name="a.py">{BODY}</file>'}
    small.ingest("s", msg)
    small.ingest("s", msg)  # identical content at another position: a new message, same file
    records = small.store.large_files()
    assert len(records) == 1
    path = small.files_dir / records[0].storage_path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_data_dir_moves_the_files(tmp_path: Path, new_db: Callable[[], str]) -> None:
    config = Config().replace(large_file_token_threshold=500, data_dir=str(tmp_path / "data"))
    with Engine.open(new_db(), config=config) as engine:
        engine.ingest("s", {"role": "user", "content": f"<file>{BODY}</file>"})
        assert engine.files_dir == tmp_path / "data" / "files"
        assert any((tmp_path / "data" / "files" / "1").iterdir())


@pytest.mark.parametrize(
    "bad",
    ["../../etc/passwd", "file_../../x", "file_0123456789abcdeZ", "FILE_0123456789abcdef", ""],
)
def test_malformed_file_ids_never_become_paths(small: Engine, bad: str) -> None:
    with pytest.raises(NotFoundError, match="not a file id"):
        small.large_file(bad)
    with pytest.raises(NotFoundError):
        file_path(small.files_dir, 1, bad, "txt")


def test_unsafe_extensions_and_conversations_are_refused(tmp_path: Path) -> None:
    with pytest.raises(LosslessError, match="unsafe"):
        file_path(tmp_path, 1, "file_0123456789abcdef", "../x")
    with pytest.raises(LosslessError, match="unsafe"):
        file_path(tmp_path, -1, "file_0123456789abcdef", "txt")


def test_a_symlink_in_place_of_a_file_is_not_followed(small: Engine, tmp_path: Path) -> None:
    small.ingest("s", {"role": "user", "content": f'<file name="a.py">{BODY}</file>'})
    record = small.store.large_files()[0]
    path = small.files_dir / record.storage_path
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read me")
    path.unlink()
    os.symlink(secret, path)
    with pytest.raises(LosslessError):
        read_file(small.files_dir, record)


def test_a_missing_file_says_where_the_original_still_is(small: Engine) -> None:
    small.ingest("s", {"role": "user", "content": f'<file name="a.py">{BODY}</file>'})
    record = small.store.large_files()[0]
    (small.files_dir / record.storage_path).unlink()
    with pytest.raises(NotFoundError, match="still holds the original"):
        small.read_large_file(record.file_id)


def test_exploration_summaries_describe_structure_within_budget() -> None:
    markdown = "# Guide\n\nintro\n\n## Install\nsteps\n\n## Usage\nmore\n" * 50
    text = explore("guide.md", markdown)
    assert "Sections: Guide; Install; Usage" in text
    code = explore("app.py", BODY)
    assert code.startswith("app.py: 1,200 lines")
    assert "Defines: handler_0, handler_1" in code
    assert len(code) < 1200
