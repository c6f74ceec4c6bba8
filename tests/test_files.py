"""Large files: kept outside the context, summarized, readable by id, never a way out."""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, Engine, LosslessError, Message, NotFoundError, StoreError, doctor
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
    # Every folder lossless made on the way is its owner's alone, as the files are.
    for folder in (
        tmp_path / "data",
        tmp_path / "data" / "files",
        tmp_path / "data" / "files" / "1",
    ):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


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


def test_the_same_content_under_two_names_is_one_file_and_doctor_stays_clean(
    small: Engine,
) -> None:
    small.ingest_batch(
        "s",
        [
            {"role": "user", "content": f'<file name="app.py">{BODY}</file>'},
            {"role": "user", "content": f'<file name="app.md">{BODY}</file>'},
        ],
    )
    small.ingest("s", {"role": "user", "content": f'<file name="copy.txt">{BODY}</file>'})
    [record] = small.store.large_files()
    written = [p for p in small.files_dir.rglob("*") if p.is_file()]
    assert [p.relative_to(small.files_dir).as_posix() for p in written] == [record.storage_path]
    assert small.check() == []
    for message in small.messages("s"):
        assert record.file_id in message.content
        assert BODY in message.to_source()["content"]


def _fill_the_disk_after(monkeypatch: pytest.MonkeyPatch, files_dir: Path, writes: int) -> None:
    """Make large-file writes under *files_dir* fail as a full disk does, after *writes* whole
    files: half of the next file reaches the disk, then ENOSPC."""
    real_write = os.write
    done: list[str] = []

    def write(fd: int, data: bytes | memoryview) -> int:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if not target.startswith(str(files_dir.resolve())) or not target.endswith(".tmp"):
            return real_write(fd, data)
        if len(done) < writes:
            done.append(target)
            return real_write(fd, data)
        if os.fstat(fd).st_size == 0:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see what is written")
def test_a_full_disk_while_writing_large_files_stores_nothing_and_leaves_nothing(
    small: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    small.ingest("s", {"role": "user", "content": "stored before the disk filled"})
    other = BODY.replace("handler", "worker")
    batch = [
        {"role": "user", "content": f'<file name="a.py">{BODY}</file>'},
        {"role": "user", "content": f'<file name="b.py">{other}</file>'},
    ]
    with monkeypatch.context() as full, pytest.raises(StoreError) as caught:
        _fill_the_disk_after(full, small.files_dir, writes=1)
        small.ingest_batch("s", batch)

    message = str(caught.value)
    assert os.strerror(errno.ENOSPC) in message and "free disk space" in message
    assert str(small.files_dir) in message
    assert [m.content for m in small.messages("s")] == ["stored before the disk filled"]
    assert [p for p in small.files_dir.rglob("*") if p.is_file()] == []  # no half, no .tmp
    assert small.check() == []

    small.ingest_batch("s", batch)  # with room again, the same batch goes in whole
    assert len(small.store.large_files()) == 2
    assert small.check() == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see what is written")
def test_import_on_a_full_disk_is_one_clear_error_and_the_rerun_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., Any]
) -> None:
    db = tmp_path / "store.db"
    (tmp_path / "config.toml").write_text("large_file_token_threshold = 500\n")
    monkeypatch.setenv("LOSSLESS_CONFIG", str(tmp_path / "config.toml"))
    source = tmp_path / "chat.jsonl"
    lines = [{"role": "user", "content": "hello"}]
    lines += [
        {"role": "user", "content": f'<file name="f{i}.py">{BODY}{i}</file>'} for i in range(3)
    ]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with monkeypatch.context() as full:
        _fill_the_disk_after(full, Path(f"{db}-files"), writes=1)
        result = run_cli("--db", str(db), "import", str(source), "--format", "messages")

    assert result.code == StoreError.exit_code
    assert "Traceback" not in result.err + result.out
    assert os.strerror(errno.ENOSPC) in result.err and "run the same command again" in result.err
    assert run_cli("--db", str(db), "doctor").code == 0
    rerun = run_cli("--db", str(db), "import", str(source), "--format", "messages")
    assert rerun.code == 0, rerun
    with Engine.open(db, config=Config().replace(large_file_token_threshold=500)) as engine:
        [conversation] = engine.conversations()
        assert [
            m.to_source() for m in engine.messages(conversation.conversation.conversation_id)
        ] == lines
        assert engine.check() == []
