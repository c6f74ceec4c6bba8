"""Redaction on ingest: a secret never reaches the database, the indexes, the tool log, the
assembled context or a summarizer; the original is kept only encrypted, when asked."""

from __future__ import annotations

import json
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


def test_without_redaction_the_message_is_kept_exactly(tmp_path: Path) -> None:
    with Engine.open(tmp_path / "plain.db", config=Config()) as engine:
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
