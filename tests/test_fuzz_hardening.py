"""The second hostile campaign's classes, fuzzed so they stay fixed (issue 45; see
tests/test_fuzz.py for the campaign): generated secrets of every kind it found shown in full
are masked and their look-alikes kept; an export with tombstones imports with every message's
number; a JSON object that repeats a key keeps its last value and says so; a line over the
line limit is one error line naming the setting, and the lines around it are imported. A
forget killed at any moment is tests/test_forget_kill.py's (processes, not examples)."""

from __future__ import annotations

import dataclasses
import json
import logging
import string
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_support import (
    TEXT,
    engine,  # noqa: F401 - fixtures, used by name
    fresh,
    fuzz,
)
from lossless import Config, Engine
from lossless.redact import Redactor

# --- secrets --------------------------------------------------------------------------------

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
HEXDIGITS = "0123456789abcdef"
WORDS = st.text(st.sampled_from(string.ascii_letters + " .,:;-"), max_size=30)

#: (a text holding a secret, the secret), by kind.
SECRETS = st.one_of(
    st.text(B64, min_size=40, max_size=40).map(lambda v: (f"AWS_SECRET_ACCESS_KEY={v}", v)),
    st.text(B64, min_size=40, max_size=40).map(
        lambda v: (f"[default]\naws_secret_access_key = {v}", v)
    ),
    st.tuples(
        st.sampled_from(["postgres", "postgresql", "mysql", "redis", "https", "amqp"]),
        st.text(string.ascii_lowercase, min_size=1, max_size=8),
        st.text(ALNUM + "-_!~", min_size=6, max_size=20),
        st.text(string.ascii_lowercase + ".", min_size=1, max_size=12).filter(
            lambda h: h.strip(".")
        ),
    )
    .filter(lambda t: t[2] not in f"{t[0]}://{t[1]}:@{t[3]}:5432/db")  # in the URL once
    .map(lambda t: (f"{t[0]}://{t[1]}:{t[2]}@{t[3].strip('.')}:5432/db", t[2])),
    st.tuples(
        st.sampled_from(["SESSION_SECRET", "SECRET_KEY", "STRIPE_API_KEY", "APP_SECRET"]),
        st.text(HEXDIGITS, min_size=32, max_size=64),
    ).map(lambda t: (f"{t[0]}={t[1]}", t[1])),
    st.text(HEXDIGITS, min_size=64, max_size=64).map(lambda v: (f"token: {v}", v)),
    st.text(ALNUM, min_size=36, max_size=36).map(lambda v: (f"use npm_{v} here", f"npm_{v}")),
)

#: What looks like a secret and is not: commit ids, UUIDs, checksums, words.
LOOK_ALIKES = st.one_of(
    st.text(HEXDIGITS, min_size=40, max_size=40).map(lambda v: f"commit {v} fixes it"),
    st.uuids().map(lambda u: f"request id {u} failed"),
    st.text(HEXDIGITS, min_size=64, max_size=64).map(lambda v: f"sha256: {v}  dist/x.whl"),
    st.sampled_from(
        ["Fill in the password field.", "the secret sauce", "max_tokens: 4096", "AWS_REGION=eu"]
    ),
)


@fuzz(300)
@given(pair=SECRETS, before=WORDS, after=WORDS)
@example(pair=("AWS_SECRET_ACCESS_KEY=" + "A" * 40, "A" * 40), before="", after="")
def test_any_secret_of_these_kinds_is_masked_wherever_it_sits(
    pair: tuple[str, str], before: str, after: str
) -> None:
    text, secret = pair
    masked, count = Redactor(tag=lambda value: "0a1b2c").text(f"{before} {text} {after}")
    # What is left of it is only what the words around it happened to hold.
    assert count >= 1 and masked.count(secret) == f"{before} {after}".count(secret), masked


@fuzz(300)
@given(text=LOOK_ALIKES, before=WORDS)
def test_a_look_alike_is_never_masked(text: str, before: str) -> None:
    whole = f"{before} {text}"
    assert Redactor(tag=lambda value: "0a1b2c").text(whole) == (whole, 0)


#: Pieces of the texts the patterns look at: the names in any case, spelled too with the
#: characters a case-insensitive pattern reads as ASCII letters (İ and ı for i, ſ for s, the
#: Kelvin sign for k), quotes, separators, spaces of several kinds.
NAMED = st.lists(
    st.sampled_from(
        [
            "token",
            "TOKEN",
            "To\u212aen",
            "secret",
            "ſecret",
            "SECRET_KEY",
            "password",
            "paſſword",
            "Passwd",
            "api_key",
            "ApIKey",
            "access_token",
            "acceſſ_token",
            "auth_token",
            "prİvate_token",
            "prıvate_token",
            "private_token",
            "aws_secret_access_key",
            "AWS_SECRET_KEY",
            "bearer",
            "Bearer",
            "sk-",
            "ghp_",
            " ",
            "  ",
            "\t",
            "\n",
            "\u00a0",
            "\u2028",
            ":",
            "=",
            '"',
            "'",
            "_",
            "-",
            "İ",
            "ı",
            "ſ",
            "é",
            "0123456789abcdefABCDEFghij+/==",
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345678901234",
        ]
    ),
    min_size=1,
    max_size=14,
).map("".join)


@fuzz(500)
@given(text=NAMED)
@example(text="TO\u212aEN = " + "a1" * 20)  # masked: the sign reads as k
@example(text="acceſſ_token: abcdefgh12")
@example(text="prİvate_token: abcdefgh12")
def test_the_hints_and_gates_leave_out_no_match(text: str) -> None:
    # Hints and gates only spare a pattern's search where it cannot match: every text masks
    # as it does with every pattern searched in full.
    quick = Redactor(tag=lambda value: "0a1b2c")
    whole = Redactor(tag=lambda value: "0a1b2c")
    whole.rules = tuple(dataclasses.replace(rule, hints=(), gate=None) for rule in whole.rules)
    whole._always = True
    assert any(rule.gate is not None for rule in quick.rules)
    assert quick.text(text) == whole.text(text)


# --- tombstones through an export -----------------------------------------------------------


@fuzz(60, deadline_ms=20_000)
@given(
    texts=st.lists(TEXT.filter(str.strip), min_size=2, max_size=12),
    span=st.tuples(st.integers(0, 11), st.integers(0, 11)),
)
def test_an_export_with_tombstones_imports_with_every_number(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, texts: list[str], span: Any
) -> None:
    conv = fresh("tomb")
    ids = list(
        engine.ingest_batch(conv, [{"role": "user", "content": t} for t in texts]).message_ids
    )
    low, high = sorted(min(x, len(ids) - 1) for x in span)
    engine.forget(conv, messages=(ids[low], ids[high]))
    before = [(m.seq, m.forgotten_at is not None, m.content) for m in engine.messages(conv)]
    path = tmp_path_factory.mktemp("tomb") / f"{conv}.jsonl"
    path.write_text("".join(engine.export(conv)))
    with Engine.open(tmp_path_factory.mktemp("other") / "o.db", config=Config()) as other:
        [report] = other.import_path(path)
        assert not report.problems, report.problems
        after = [(m.seq, m.forgotten_at is not None, m.content) for m in other.messages(conv)]
        assert after == before
        assert other.check() == []


# --- repeated keys --------------------------------------------------------------------------


@fuzz(150)
@given(
    values=st.lists(TEXT, min_size=2, max_size=4),
    other=st.sampled_from(["name", "id", "role"]),
)
def test_a_repeated_key_keeps_its_last_value_and_is_said(
    engine: Engine,
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
    values: list[str],
    other: str,
) -> None:
    conv = fresh("dup")
    fields = ", ".join(f'"content": {json.dumps(v)}' for v in values)
    line = f'{{"role": "user", {fields}}}\n'
    path = tmp_path_factory.mktemp("dup") / f"{conv}.jsonl"
    path.write_text(line)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lossless"):
        [report] = engine.import_path(path, format="messages")
    [stored] = engine.messages(report.session_id)
    assert stored.to_source()["content"] == values[-1]  # exactly, as JSON read it
    assert "repeats the key 'content'" in caplog.text


# --- the line limit -------------------------------------------------------------------------

LIMIT = 1 << 16


@fuzz(60, deadline_ms=20_000)
@given(sizes=st.lists(st.integers(10, 3 * LIMIT), min_size=1, max_size=6))
def test_lines_over_the_limit_are_error_lines_and_the_others_are_imported(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int]
) -> None:
    folder = tmp_path_factory.mktemp("long")
    path = folder / "t.jsonl"
    lines = [
        json.dumps({"role": "user", "content": f"{i}:" + "x" * size}) + "\n"
        for i, size in enumerate(sizes)
    ]
    path.write_text("".join(lines))
    config = Config().replace(max_line_bytes=LIMIT)
    with Engine.open(folder / "s.db", config=config) as engine:
        [report] = engine.import_path(path, format="messages")
        held = engine.store.find_conversation(report.session_id)  # none when no line fit
        stored = engine.messages(report.session_id) if held is not None else []
        kept = [m.content.split(":")[0] for m in stored]
    # A line's size is its bytes before the line break.
    over = [i + 1 for i, line in enumerate(lines) if len(line.encode()) - 1 > LIMIT]
    assert [p.line for p in report.problems] == over
    assert all("max_line_bytes" in p.reason for p in report.problems)
    assert kept == [str(i) for i, line in enumerate(lines) if len(line.encode()) - 1 <= LIMIT]
