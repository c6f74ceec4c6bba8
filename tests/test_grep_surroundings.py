"""A ranked search finds a message through what surrounds it (its neighbours' words, counted
when the search ranks: ``store/surroundings.py``): joined words, words the index splits
otherwise, a store made when an index held the neighbours' words, a host's last turns."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lossless import Config, Engine
from lossless.store import surroundings
from lossless.store.migrations import MESSAGE_WORDS


@pytest.fixture
def engine(new_db: Callable[[], str]) -> Iterator[Engine]:
    with Engine.open(new_db(), config=Config()) as eng:
        yield eng


def test_a_word_of_several_pieces_is_ranked_with_what_surrounds_it(engine: Engine) -> None:
    """A joined word ("Caroline's", "hand-off") is ranked as its pieces in one row, each in
    any of the row's fields: the message saying it is found, the one after it through it,
    and one with the pieces apart in its own text too (ranked by its words, as any ranked
    hit)."""
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
    # U+0305 (a combining overline) joins a word for the search, which the index's
    # tokenizer splits: the message is ranked by the pieces the index holds, not missed.
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


def _as_before_m028(db: Path) -> None:
    """*db* as a store made before m028 left it: the surroundings index (each message's
    neighbours' words again, over the view ``message_words``) in place, m028 not applied."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript(
        f"""
        BEGIN;
        CREATE VIEW message_words AS {MESSAGE_WORDS};
        CREATE VIRTUAL TABLE messages_ctx_fts USING fts5(
          content, prev, next, far, about, content='message_words',
          content_rowid='message_id', tokenize='porter unicode61', detail='column');
        INSERT INTO messages_ctx_fts (messages_ctx_fts) VALUES ('rebuild');
        DELETE FROM migrations WHERE name = 'm028_surroundings_counted';
        COMMIT;
        """
    )
    conn.close()


def test_a_store_made_before_drops_its_surroundings_index_and_finds_the_same(
    tmp_path: Path,
) -> None:
    """m028 drops the index that held each message's neighbours' words again: a store made
    before finds what it found, a message through its neighbours too, the file is smaller
    and doctor is clean."""
    db = tmp_path / "old.db"
    rows = [{"role": "user", "content": f"status update {i}: routine work"} for i in range(400)]
    rows[30] = {"role": "assistant", "content": "The vault opens at 7741."}

    def ranked(engine: Engine) -> list[str]:
        return [h.id for h in engine.grep("vault", conversation="s", sort="relevance").hits]

    with Engine.open(db, config=Config()) as engine:
        engine.ingest_batch("s", rows)
        before = ranked(engine)
    assert before[0] == "msg#31" and {"msg#30", "msg#32"} <= set(before)  # its neighbours
    _as_before_m028(db)
    conn = sqlite3.connect(db)
    (index_bytes,) = conn.execute(
        "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'messages_ctx_fts%'"
    ).fetchone()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = db.stat().st_size
    with Engine.open(db, config=Config()) as engine:
        left = engine.store.fetchall(
            "SELECT name FROM sqlite_master WHERE name LIKE 'messages_ctx%'"
            " OR name = 'message_words'"
        )
        assert left == []
        assert ranked(engine) == before
        assert engine.check() == []
    # Its pages given back to the disk (a store made in incremental auto-vacuum mode).
    assert index_bytes > 8 * 4096 and db.stat().st_size <= size - index_bytes


def test_a_message_is_found_through_the_one_before_it_first(engine: Engine) -> None:
    """A word said just before a message counts for it (its prev) more than one said just
    after it (its next): a reply is found through what it answers."""
    engine.ingest_batch(
        "s",
        [
            *({"role": "user", "content": f"filler line {i} about the weather"} for i in range(20)),
            {"role": "assistant", "content": "Anything else on your mind?"},
            {"role": "user", "content": "I think the ferry left from the old harbour."},
            {"role": "assistant", "content": "It did, from the north pier at dawn."},
            *({"role": "user", "content": f"more filler {i} about lunch"} for i in range(20)),
        ],
    )
    hits = [h.id for h in engine.grep("harbour ferry", conversation="s", sort="relevance").hits]
    assert hits[:2] == ["msg#22", "msg#23"] and "msg#21" in hits


def test_the_last_turns_are_found_through_their_surroundings_at_once(tmp_path: Path) -> None:
    """A host's last few turns are ranked with what surrounds them as soon as they are
    stored: nothing waits for an index entry to be made (the fact between two status updates
    is found for "status update" through its neighbours)."""
    engine = Engine.open(tmp_path / "d.db", config=Config())
    try:
        for i in range(14):
            engine.ingest("beta", {"role": "user", "content": f"status update {i}: routine work"})
            if i == 3:
                engine.ingest("beta", {"role": "assistant", "content": "The vault opens at 7741."})
        fact = next(m for m in engine.messages("beta") if "vault" in m.content)
        updates = {f"msg#{m.message_id}" for m in engine.messages("beta") if "status" in m.content}
        found = {h.id for h in engine.grep("status update", limit=200).hits}
    finally:
        engine.close()
    assert found == updates | {f"msg#{fact.message_id}"}


def test_a_common_word_is_counted_around_the_best_candidates_only(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word in more messages than are counted one by one (``DOCS_MAX``) is counted only in
    the rows around the query's best candidates (its best by its own words, ``POOL``, and the
    rows of its rare words): where those hold all of its rows, the ranking is the one counting
    every row gives; where they do not, what is found still holds the word or is beside it,
    and a rare word's neighbour is still found through it."""
    if engine.store.backend != "sqlite":
        pytest.skip("the counting is SQLite's; PostgreSQL ranks with its context_tsv")
    rng = random.Random(3)
    filler = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa"]
    rows = []
    for i in range(900):
        words = rng.choices(filler, k=rng.randint(3, 30))
        if i % 8 == 0:
            words.insert(rng.randrange(len(words)), "deploy")
        if i == 451:
            words = ["the", "vault", "code", "changed"]
        rows.append({"role": "user", "content": " ".join(words)})
    engine.ingest_batch("s", rows)
    holding = {i + 1 for i in range(900) if "deploy" in rows[i]["content"]}
    beside = {n + d for n in holding for d in (-1, 1, 2)} | holding

    def best(question: str) -> list[tuple[str, float | None]]:
        hits = engine.grep(question, conversation="s", sort="relevance", limit=10).hits
        return [(h.id, h.score) for h in hits]

    # (A quoted pair of words is asked for as each word in the row, said apart or not.)
    every = {q: best(q) for q in ("deploy", "deploy vault", "deploy omega", '"vault deploy"')}
    assert every['"vault deploy"']
    assert "msg#453" in [h for h, _ in every["deploy vault"]]  # after the vault message
    monkeypatch.setattr(surroundings, "DOCS_MAX", 10)  # "deploy" (113 rows) is common now
    for question, expected in every.items():
        assert best(question) == expected, question  # the pool (200) holds all its rows
    monkeypatch.setattr(surroundings, "POOL", 20)
    found = best("deploy")
    assert len(found) == 10 and {int(h[4:]) for h, _ in found} <= beside
    assert "msg#453" in [h for h, _ in best("deploy vault")]
