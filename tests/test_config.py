"""Configuration: defaults, TOML file, LOSSLESS_* overrides, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lossless import Config, ConfigError, load_config
from lossless.config import default_config_path


def test_defaults_are_the_specs() -> None:
    c = Config()
    assert c.context_threshold == 0.75
    assert c.fresh_tail_count == 64
    assert c.fresh_tail_max_tokens is None
    assert (c.leaf_chunk_tokens, c.leaf_target_tokens, c.condensed_target_tokens) == (
        20_000,
        2_400,
        2_000,
    )
    assert (c.leaf_min_fanout, c.condensed_min_fanout, c.condensed_min_fanout_hard) == (8, 4, 2)
    assert c.incremental_max_depth == 1
    assert c.max_rounds == 10
    assert c.fallback_max_tokens == 512
    assert c.large_file_token_threshold == 25_000
    assert (c.max_expand_tokens, c.expand_query_max_tokens) == (4_000, 2_000)
    assert (c.grant_ttl_seconds, c.grant_max_depth) == (300, 3)
    assert (c.sessions.auto_summarize, c.sessions.summarize_interval) == (False, 20)


def test_file_then_environment_then_arguments(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "fresh_tail_count = 32\nleaf_chunk_tokens = 9000\n[sessions]\nsummarize_interval = 5\n"
    )
    c = load_config(path, env={"LOSSLESS_LEAF_CHUNK_TOKENS": "8000"}, max_rounds=3)
    assert c.fresh_tail_count == 32
    assert c.leaf_chunk_tokens == 8000
    assert c.sessions.summarize_interval == 5
    assert c.max_rounds == 3


def test_the_default_file_lives_in_the_user_config_dir(tmp_path: Path) -> None:
    path = default_config_path()
    assert path.name == "config.toml"
    assert str(path).startswith(str(tmp_path))  # XDG_CONFIG_HOME points into tmp_path
    path.parent.mkdir(parents=True)
    path.write_text("fresh_tail_count = 7\n")
    assert load_config(env={}).fresh_tail_count == 7


def test_lossless_config_variable_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "other.toml"
    path.write_text("fallback_max_tokens = 256\n")
    assert load_config(env={"LOSSLESS_CONFIG": str(path)}).fallback_max_tokens == 256


def test_nested_keys_come_from_prefixed_variables() -> None:
    c = load_config(
        env={"LOSSLESS_SESSIONS_AUTO_SUMMARIZE": "true", "LOSSLESS_FRESH_TAIL_MAX_TOKENS": "900"}
    )
    assert c.sessions.auto_summarize is True
    assert c.fresh_tail_max_tokens == 900
    assert load_config(env={"LOSSLESS_FRESH_TAIL_MAX_TOKENS": ""}).fresh_tail_max_tokens is None


def test_unknown_key_names_the_key_and_the_accepted_ones(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("fresh_tail = 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert "fresh_tail" in str(info.value)
    assert "fresh_tail_count" in str(info.value)


def test_unknown_nested_key_is_named_with_its_section(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[sessions]\ninterval = 3\n")
    with pytest.raises(ConfigError, match=r"sessions\.interval.*summarize_interval"):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("context_threshold = 2.0", "from 0.05 to 1.0"),
        ("fresh_tail_count = -1", ">= 0"),
        ('leaf_chunk_tokens = "big"', "an integer"),
        ("sessions = 3", "must be a table"),
        ("[sessions]\nauto_summarize = 1", "true or false"),
    ],
)
def test_bad_values_say_what_is_accepted(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=needle):
        load_config(path, env={})


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="LOSSLESS_FRESH_TAIL_COUNT"):
        load_config(env={"LOSSLESS_FRESH_TAIL_COUNT": "many"})


def test_a_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env={})


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("fresh_tail_count = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path, env={})


def test_other_lossless_variables_are_ignored() -> None:
    c = load_config(
        env={"LOSSLESS_TEST_POSTGRES_URL": "postgresql://x", "LOSSLESS_DB": "/tmp/x.db"}
    )
    assert c.db == "/tmp/x.db"


def test_replace_validates() -> None:
    with pytest.raises(ConfigError, match="fresh_tail_count"):
        Config().replace(fresh_tail_count=-5)
    assert Config().replace(sessions={"summarize_interval": 3}).sessions.summarize_interval == 3


@pytest.mark.parametrize(
    "nesting", ["a = " + "[" * 5000 + "]" * 5000, "a = " + "{b = " * 3000 + "1" + "}" * 3000]
)
def test_a_config_nested_too_deeply_is_a_config_error_not_a_crash(
    tmp_path: Path, nesting: str
) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(nesting + "\n")
    with pytest.raises(ConfigError, match="nests tables or arrays too deeply"):
        load_config(path)


def test_engine_open_uses_the_configuration_it_is_given_never_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lossless import Engine

    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("LOSSLESS_FRESH_TAIL_COUNT", "3")
    default_config_path().parent.mkdir(parents=True, exist_ok=True)
    default_config_path().write_text("leaf_chunk_tokens = 500\n")
    assert load_config().fresh_tail_count == 3 and load_config().leaf_chunk_tokens == 500
    with Engine.open(tmp_path / "e.db") as engine:
        assert engine.config == Config()  # the user's file and variables are not read
    with Engine.open(tmp_path / "e.db", config=load_config()) as engine:
        assert engine.config.fresh_tail_count == 3  # a host asks for them
