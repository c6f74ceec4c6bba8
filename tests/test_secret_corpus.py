"""A corpus of secrets agents paste, and of look-alikes that are not secrets: every positive
is masked by default wherever the message is shown or sent, every negative is kept as it came.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lossless import Config, Engine
from lossless.redact import Redactor

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
HEX64 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
TOKEN = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
NPM = "npm_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"

#: (text, the secret in it)
POSITIVES = [
    (f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET),
    (
        "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
        f"aws_secret_access_key = {AWS_SECRET}",
        AWS_SECRET,
    ),
    ('{"awsSecretKey": "' + AWS_SECRET + '"}', AWS_SECRET),
    ("DATABASE_URL=postgres://app:hunter2pw@db.internal:5432/app", "hunter2pw"),
    ("mysql://root:s3cr3t-Pass@localhost/shop", "s3cr3t-Pass"),
    ("REDIS_URL=redis://:redispass99@cache:6379/0", "redispass99"),
    ("git clone https://deploy:pa55word-x@git.example.com/repo.git", "pa55word-x"),
    ("SESSION_SECRET=4e1f0c9b2a7d6e5f8a9b0c1d2e3f4a5b", "4e1f0c9b2a7d6e5f8a9b0c1d2e3f4a5b"),
    ("SECRET_KEY='Zm9vYmFyYmF6cXV4cXV1eHh5enp5MTIz'", "Zm9vYmFyYmF6cXV4cXV1eHh5enp5MTIz"),
    ("STRIPE_API_KEY=0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
    (f"token: {TOKEN}", TOKEN),
    (f'{{"token": "{TOKEN}"}}', TOKEN),
    (f"//registry.npmjs.org/:_authToken={NPM}", NPM),
    (f"publish with {NPM} from CI", NPM),
]

NEGATIVES = [
    "commit 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b fixes the parser",
    "request id 123e4567-e89b-12d3-a456-426614174000 failed",
    f"sha256: {HEX64}  lossless-0.1.0.tar.gz",
    f"{HEX64}  dist/lossless-0.1.0-py3-none-any.whl",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "Fill in the password field and press submit.",
    "The token budget is 4000 tokens; max_tokens: 4096.",
    "see https://example.com:8443/path@v2 for the docs",
    "clone git@github.com:org/repo.git or ssh://git@github.com/org/repo.git",
    "the secret sauce is good tests",
    "AWS_REGION=eu-west-1 and AWS_PROFILE=dev",
]


@pytest.mark.parametrize(("text", "secret"), POSITIVES)
def test_each_secret_is_masked(text: str, secret: str) -> None:
    masked, count = Redactor(tag=lambda value: "0a1b2c").text(text)
    assert count >= 1 and secret not in masked, masked
    assert "[secret:" in masked


@pytest.mark.parametrize("text", NEGATIVES)
def test_each_look_alike_is_kept(text: str) -> None:
    assert Redactor(tag=lambda value: "0a1b2c").text(text) == (text, 0)


def test_nothing_of_a_secret_reaches_show_search_context_or_export(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "s.db"
    with Engine.open(db, config=Config()) as engine:
        for text, _ in POSITIVES:
            engine.ingest("s", {"role": "user", "content": text})
        for text in NEGATIVES:
            engine.ingest("s", {"role": "user", "content": text})
        context = json.dumps(engine.assemble("s", token_budget=50_000).messages)
    shown = run_cli("--db", str(db), "show", "s").out
    exported = run_cli("--db", str(db), "export", "s", "--format", "jsonl").out
    found = run_cli("--db", str(db), "grep", "hunter2pw wJalrXUtnFEMI npm_aBcDeF", "--json").out
    for _, secret in POSITIVES:
        for where, text in (("show", shown), ("export", exported), ("context", context)):
            assert secret not in text, (where, secret)
    assert json.loads(found)["hits"] == []
    for text in NEGATIVES:
        assert text.split()[0] in shown
    assert "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b fixes the parser" in exported
