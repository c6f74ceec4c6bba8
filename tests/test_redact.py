"""Redaction on ingest: a secret never reaches the database, the indexes, the tool log, the
assembled context or a summarizer; the original is kept only encrypted, when asked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lossless import Config, ConfigError, Engine, load_config
from lossless.redact import KEY_VARIABLE, new_key
from lossless.summarize import ScriptedSummarizer

OPENAI = "sk-proj-4fJ9sQ2mZx8LwP0aTbY7cR1dEuV3"
AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzZ9k\n-----END RSA PRIVATE KEY-----"
SECRETS = (OPENAI, AWS, GITHUB, "MIIEowIBAAKCAQEAzZ9k")
ON = {"enabled": True}
SMALL: dict[str, Any] = {
    "fresh_tail_count": 2,
    "leaf_chunk_tokens": 150,
    "leaf_target_tokens": 20,
    "condensed_target_tokens": 20,
    "leaf_min_fanout": 2,
}


def messages() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"my key is {OPENAI}, use it for the deploy"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_env",
                    "type": "function",
                    "function": {
                        "name": "write_env",
                        "arguments": json.dumps({"AWS_ACCESS_KEY_ID": AWS, "path": ".env"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_env", "content": f"wrote .env; token {GITHUB}"},
        {"role": "user", "content": [{"type": "text", "text": f"and this key:\n{PEM}"}]},
    ]


def store_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())


def test_secrets_are_replaced_everywhere_before_storage(tmp_path: Path) -> None:
    summarizer = ScriptedSummarizer()
    engine = Engine.open(
        tmp_path / "r.db", config=Config().replace(redact=ON, **SMALL), summarizer=summarizer
    )
    for m in messages():
        engine.ingest("s", m)
    for i in range(10):
        engine.ingest("s", {"role": "user", "content": f"more work {i} " * 20})
    engine.compact("s")
    stored = engine.messages("s")
    assert "[REDACTED:openai_key]" in stored[0].content
    assert "[REDACTED:github_token]" in stored[2].content
    assert "[REDACTED:private_key]" in stored[3].content
    args = json.loads(stored[1].to_source()["tool_calls"][0]["function"]["arguments"])
    assert args == {"AWS_ACCESS_KEY_ID": "[REDACTED:aws_access_key]", "path": ".env"}
    log = engine.chat_context_query(execution_id="call_env").executions[0]
    assert AWS not in (log.input or "") and GITHUB not in log.output
    assembled = json.dumps(engine.assemble("s", token_budget=100_000, format="anthropic").messages)
    seen_by_model = " ".join(r.prompt for r in summarizer.requests)
    for secret in SECRETS:
        assert secret not in assembled and secret not in seen_by_model
        assert not engine.grep(secret[:12], mode="regex").hits
    engine.close()
    data = store_bytes(tmp_path / "r.db")
    for secret in SECRETS:
        assert secret.encode() not in data, secret


def test_with_masking_off_the_message_is_kept_exactly(tmp_path: Path) -> None:
    with Engine.open(
        tmp_path / "plain.db", config=Config().replace(redact={"mask": False})
    ) as engine:
        engine.ingest("s", messages()[0])
        assert OPENAI in engine.messages("s")[0].content


def test_custom_patterns_from_the_file_or_a_variable(tmp_path: Path) -> None:
    config = load_config(
        env={"LOSSLESS_REDACT_ENABLED": "1", "LOSSLESS_REDACT_PATTERNS": '["INV-\\\\d{6}"]'}
    )
    assert config.redact.patterns == ("INV-\\d{6}",)
    with Engine.open(tmp_path / "c.db", config=config) as engine:
        engine.ingest("s", {"role": "user", "content": "invoice INV-123456 and " + OPENAI})
        text = engine.messages("s")[0].content
    assert text == "invoice [REDACTED:custom_1] and [REDACTED:openai_key]"
    with pytest.raises(ConfigError, match=r"redact\.patterns"):
        load_config(env={"LOSSLESS_REDACT_PATTERNS": "not json"})
    with pytest.raises(ConfigError, match=r"redact.patterns\[0\] is not a valid regular"):
        Engine.open(
            tmp_path / "bad.db",
            config=Config().replace(redact={"enabled": True, "patterns": ["(unclosed"]}),
        )


def test_originals_are_kept_encrypted_and_revealed_with_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli
) -> None:  # type: ignore[no-untyped-def]
    keep = Config().replace(redact={"enabled": True, "keep_originals": True})
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    with pytest.raises(ConfigError, match=KEY_VARIABLE):
        Engine.open(tmp_path / "k.db", config=keep)
    key = new_key()
    monkeypatch.setenv(KEY_VARIABLE, key)
    db = tmp_path / "k.db"
    with Engine.open(db, config=keep) as engine:
        for m in messages():
            engine.ingest("s", m)
        ids = [m.message_id for m in engine.messages("s")]
        assert engine.reveal(ids[1]) == messages()[1]
        assert engine.reveal(ids[3]) == messages()[3]
        with pytest.raises(Exception, match="another key"):
            engine.reveal(ids[0], key=new_key())
    for secret in SECRETS:
        assert secret.encode() not in store_bytes(db)
    out = run_cli("--db", str(db), "reveal", f"msg#{ids[0]}")
    assert out.code == 0 and json.loads(out.out) == messages()[0]
    none = run_cli("--db", str(db), "reveal", "msg#999")
    assert none.code == 4
    assert len(run_cli("reveal", "--new-key").out.strip()) == 44


# --- masking, the default -------------------------------------------------------------------

ANTHROPIC = "sk-ant-api03-" + "Zq7" * 14


def test_secrets_are_masked_by_default_in_everything_shown_or_sent(
    new_db: Any, run_cli: Any
) -> None:
    summarizer = ScriptedSummarizer()
    target = new_db()
    with Engine.open(target, config=Config().replace(**SMALL), summarizer=summarizer) as engine:
        for m in messages():
            engine.ingest("s", m)
        engine.ingest("t", {"role": "user", "content": f"the same key again: {OPENAI}"})
        engine.ingest("t", {"role": "user", "content": f"and ANTHROPIC_API_KEY={ANTHROPIC}"})
        for i in range(10):
            engine.ingest("s", {"role": "user", "content": f"more work {i} " * 20})
        engine.compact("s")
        stored = engine.messages("s")
        label = stored[0].content.split("is ")[1].split(",")[0]
        assert re.fullmatch(r"\[secret:openai-key#[0-9a-f]{6}\]", label)
        # The same value has the same label wherever it appears in the store.
        assert label in engine.messages("t")[0].content
        assert "[secret:anthropic-key#" in engine.messages("t")[1].content
        args = json.loads(stored[1].to_source()["tool_calls"][0]["function"]["arguments"])
        assert args["AWS_ACCESS_KEY_ID"].startswith("[secret:aws-access-key#")
        outputs = [
            json.dumps(engine.assemble("s", token_budget=100_000).messages),
            " ".join(r.prompt for r in summarizer.requests),
            " ".join(s.content for s in engine.store.live_summaries(None)),
            json.dumps([h.to_dict() for h in engine.grep("key", limit=50).hits]),
            json.dumps(engine.chat_context_query(execution_id="call_env").to_dict()),
        ]
        for secret in (*SECRETS, ANTHROPIC):
            for text in outputs:
                assert secret not in text
            # A secret's value is not found by a search ...
            assert not engine.grep(secret[:16], mode="regex").hits
            assert not engine.grep(secret).hits
        # ... unless the owner asks to see the originals.
        found = engine.grep(OPENAI, reveal=True).hits
        assert {h.id for h in found} == {
            f"msg#{stored[0].message_id}",
            f"msg#{engine.messages('t')[0].message_id}",
        }
        assert all(OPENAI in h.snippet for h in found)
        assert engine.grep(OPENAI, reveal=True, conversation="t").hits[0].id == found[0].id
        # The original comes back exactly, with no key and no set-up.
        assert engine.reveal(stored[0].message_id) == messages()[0]
        assert engine.reveal(stored[1].message_id) == messages()[1]
        plain = engine.messages("s")[5]
        assert engine.reveal(plain.message_id) == plain.to_source()  # nothing was masked
        first = stored[0].message_id
    shown = run_cli("--db", target, "show", "s", "--limit", "4")
    assert shown.code == 0 and OPENAI not in shown.out and label in shown.out
    revealed = run_cli("--db", target, "reveal", f"msg#{first}")
    assert revealed.code == 0 and json.loads(revealed.out) == messages()[0]
    searched = run_cli("--db", target, "grep", OPENAI, "--reveal", "--json")
    assert OPENAI in searched.out
    assert OPENAI not in run_cli("--db", target, "grep", OPENAI, "--json").out


def test_a_label_is_never_read_as_a_secret_and_overlaps_take_the_first(tmp_path: Path) -> None:
    with Engine.open(tmp_path / "l.db") as engine:
        engine.ingest("s", {"role": "user", "content": f"secret: {ANTHROPIC} and token=abcdefghij"})
        text = engine.messages("s")[0].content
    # "secret: <key>" is found twice (the key, and a value assigned to "secret"): the same
    # span, the longer or earlier pattern wins; the label is never read as a value again.
    assert re.fullmatch(r"secret: \[secret:[a-z-]+#[0-9a-f]{6}\] and token=abcdefghij", text), text
    assert text.count("[secret:") == 1


def test_two_stores_tag_the_same_secret_differently(tmp_path: Path) -> None:
    labels = []
    for name in ("a.db", "b.db"):
        with Engine.open(tmp_path / name) as engine:
            engine.ingest("s", {"role": "user", "content": f"key {OPENAI}"})
            labels.append(engine.messages("s")[0].content)
    assert labels[0] != labels[1]  # the tag is keyed by each store's own key
