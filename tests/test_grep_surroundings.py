"""A ranked search finds a message through what surrounds it (its neighbours' words, in the
surroundings index, which keeps no word positions): joined words, words the index splits
otherwise, a store made before that index lost its positions, a host's last turns."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lossless import Config, Engine


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=Config()) as eng:
        yield eng


def test_a_word_of_several_pieces_is_ranked_with_what_surrounds_it(engine: Engine) -> None:
    """The surroundings index keeps which of a row's columns hold a word, not where: a
    joined word ("Caroline's", "hand-off") is asked there as its pieces in one row. The
    message saying it is found, the one after it through it, and one with the pieces apart
    in its own text too (ranked by its words, as any ranked hit)."""
    engine.ingest_batch(
        "s",
        [
            {"role": "user", "content": "Caroline's hand-off of the adoption papers is on Friday"},
            {"role": "assistant", "content": "Noted, I will remind you then"},
            *({"role": "user", "content": f"filler line {i} about the weather"} for i in range(30)),
            {"role": "user", "content": "Caroline says the s in the name is silent; hand it off"},
        ],
    )
    engine.finish_indexes()
    for words in ("Caroline's", "hand-off"):
        hits = [h.id for h in engine.grep(words, conversation="s", sort="relevance").hits]
        assert {"msg#1", "msg#2", "msg#33"} <= set(hits), words  # msg#2: through msg#1
    # a phrase in the message's own words is still exact where asked for by time
    recent = [h.id for h in engine.grep('"hand-off"', conversation="s", sort="recency").hits]
    assert recent == ["msg#1"]


def test_a_word_the_index_splits_where_the_search_does_not_is_still_found(
    engine: Engine,
) -> None:
    # U+0305 (a combining overline) joins a word for the search, which the surroundings
    # index's tokenizer splits: that index refuses the query, and the message is ranked by
    # its own words instead of the search failing or finding nothing.
    word = "ab\u0305cd"
    engine.ingest_batch(
        "s",
        [
            {"role": "user", "content": f"the code {word} opens the gate"},
            *({"role": "assistant", "content": f"unrelated reply {i}"} for i in range(20)),
        ],
    )
    engine.finish_indexes()
    hits = [h.id for h in engine.grep(word, conversation="s", sort="relevance").hits]
    assert hits[:1] == ["msg#1"]


def _as_before_m026(db: Path) -> None:
    """*db* as a store made before m026 left it: its surroundings and summaries' trigram
    indexes with word positions, m026 not applied."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript(
        """
        BEGIN;
        DROP TABLE messages_ctx_fts;
        CREATE VIRTUAL TABLE messages_ctx_fts USING fts5(
          content, prev, next, far, about, content='message_words',
          content_rowid='message_id', tokenize='porter unicode61');
        INSERT INTO messages_ctx_fts (messages_ctx_fts) VALUES ('rebuild');
        DROP TABLE summaries_trigram;
        CREATE VIRTUAL TABLE summaries_trigram USING fts5(
          content, content='summaries', content_rowid='rowid', tokenize='trigram');
        INSERT INTO summaries_trigram (summaries_trigram) VALUES ('rebuild');
        DELETE FROM migrations WHERE name = 'm026_indexes_without_positions';
        COMMIT;
        """
    )
    conn.close()


def test_a_store_made_before_keeps_finding_through_surroundings_once_migrated(
    tmp_path: Path,
) -> None:
    """m026 makes the surroundings index anew without word positions: a store made before
    finds what it found, a message through its neighbours too, and doctor is clean."""
    db = tmp_path / "old.db"
    rows = [{"role": "user", "content": f"status update {i}: routine work"} for i in range(100)]
    rows[30] = {"role": "assistant", "content": "The vault opens at 7741."}

    def ranked(engine: Engine) -> list[str]:
        return [h.id for h in engine.grep("vault", conversation="s", sort="relevance").hits]

    with Engine.open(db, config=Config()) as engine:
        engine.ingest_batch("s", rows)
        before = ranked(engine)
    assert before[0] == "msg#31" and {"msg#30", "msg#32"} <= set(before)  # its neighbours
    _as_before_m026(db)
    with Engine.open(db, config=Config()) as engine:
        detail = engine.store.fetchall(
            "SELECT sql FROM sqlite_master WHERE name = 'messages_ctx_fts'"
        )[0][0]
        assert "detail='column'" in detail
        assert engine.store.pending_index_rows() == 0
        assert ranked(engine) == before
        assert engine.check() == []


def test_the_last_turns_are_found_by_their_own_words_before_their_surroundings_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host's last few turns get their surroundings entries (their neighbours' words) in the
    next pause of the writes, not inside each turn. Until then every one of them is found by
    its own words; one that matches only through its neighbours (the fact between two status
    updates, for "status update") is found once the entries are made."""
    engine = Engine.open(tmp_path / "d.db", config=Config())
    # The pause is held off (it comes 20 ms after the last write, which a loaded machine
    # may leave between two turns here): what a search sees right after a turn.
    monkeypatch.setattr(engine.store, "_catch_up_turns", lambda: None)
    try:
        for i in range(14):
            engine.ingest("beta", {"role": "user", "content": f"status update {i}: routine work"})
            if i == 3:
                engine.ingest("beta", {"role": "assistant", "content": "The vault opens at 7741."})
        fact = next(m for m in engine.messages("beta") if "vault" in m.content)
        updates = {f"msg#{m.message_id}" for m in engine.messages("beta") if "status" in m.content}
        assert engine.store.pending_index_rows() > 0
        before = {h.id for h in engine.grep("status update", limit=200).hits}
        monkeypatch.undo()
        engine.finish_indexes()
        after = {h.id for h in engine.grep("status update", limit=200).hits}
    finally:
        engine.close()
    assert before == updates  # every message holding the words, none missing
    assert after == updates | {f"msg#{fact.message_id}"}  # and its neighbours' words found the fact
