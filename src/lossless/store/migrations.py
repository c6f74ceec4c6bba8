"""Numbered, append-only schema migrations: one registry for both back ends.

Each migration is a function ``mNNN_name(conn)`` registered with :func:`migration` (SQLite's
dialect), and its PostgreSQL script of the same name in :mod:`.pg_migrations`; :data:`STEPS`
joins them (and refuses to load if the two dialects' histories differ). They run in order,
each in its own transaction, and are recorded in the ``migrations`` table, so opening any
database brings it up to date and a second run does nothing. Never edit a migration that has
shipped: append a new one, in both dialects.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from .pg_migrations import ARCHIVES, NAMESPACES_TOKENS_AUDIT, PG_MIGRATIONS
from .search import NEIGHBOUR_CHARS, about_sql
from .toollog import record_tool_executions

__all__ = ["MIGRATIONS", "STEPS", "Step", "migration", "run_script"]

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register *fn* as the next migration (its name is its identity in the database)."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run a multi-statement script inside the caller's transaction.

    ``Connection.executescript`` would commit first, breaking one-transaction migrations.
    """
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            conn.execute(buffer)
            buffer = ""
    if buffer.strip():
        raise ValueError(f"incomplete SQL statement in migration: {buffer.strip()[:80]}")


@migration
def m001_core_schema(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- One row per agent session. session_id is the host's id for the session (unique);
        -- session_key groups a family of conversations (e.g. a session and its sub-agents,
        -- or the successors of a reset session) for family-scoped search.
        CREATE TABLE conversations (
          conversation_id INTEGER PRIMARY KEY,
          session_id      TEXT NOT NULL UNIQUE,
          session_key     TEXT,
          title           TEXT,
          status          TEXT NOT NULL DEFAULT 'active'
                          CHECK (status IN ('active', 'archived')),
          metadata        TEXT,              -- JSON object, host facts (never message text)
          created_at      TEXT NOT NULL,
          updated_at      TEXT NOT NULL
        );
        CREATE INDEX conversations_session_key ON conversations(session_key)
          WHERE session_key IS NOT NULL;

        -- Every message ever ingested. Rows are never updated or deleted: compaction only
        -- changes context_items. content is the plain text (for search and token counts);
        -- the exact original lives in envelope + message_parts.raw.
        CREATE TABLE messages (
          message_id      INTEGER PRIMARY KEY,
          conversation_id INTEGER NOT NULL REFERENCES conversations(conversation_id),
          seq             INTEGER NOT NULL,  -- 1, 2, ... within the conversation
          role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
          content         TEXT NOT NULL,
          token_count     INTEGER NOT NULL,
          created_at      TEXT NOT NULL,     -- the source's own time when it has one
          external_id     TEXT,              -- transcript entry id, tool call id, response id
          source_format   TEXT NOT NULL,     -- openai_chat | openai_responses | anthropic | ...
          envelope        TEXT,              -- JSON: the message's keys, block slots emptied
          metadata        TEXT,              -- JSON: host facts about the message
          UNIQUE (conversation_id, seq)
        );
        -- Idempotent ingestion: an external id is stored once per conversation. Messages
        -- without one (identical text at another position included) are always new.
        CREATE UNIQUE INDEX messages_external_id ON messages(conversation_id, external_id)
          WHERE external_id IS NOT NULL;

        -- The structured blocks of a message, in order. raw is the block exactly as received
        -- (JSON); NULL means the block is the plain string in text (saves storing it twice).
        CREATE TABLE message_parts (
          part_id         INTEGER PRIMARY KEY,
          message_id      INTEGER NOT NULL REFERENCES messages(message_id),
          session_id      TEXT NOT NULL,     -- the owning conversation's session_id
          ordinal         INTEGER NOT NULL,
          slot            TEXT NOT NULL,     -- which key of the envelope the block belongs to
          part_type       TEXT NOT NULL,     -- text | tool_call | tool_result | reasoning | ...
          text            TEXT,
          tool_call_id    TEXT,
          tool_name       TEXT,
          tool_input      TEXT,              -- JSON
          tool_output     TEXT,
          is_error        INTEGER NOT NULL DEFAULT 0,
          raw             TEXT,
          UNIQUE (message_id, ordinal)
        );
        CREATE INDEX message_parts_tool_call_id ON message_parts(tool_call_id)
          WHERE tool_call_id IS NOT NULL;

        -- Summary DAG nodes. Leaves (depth 0) summarize messages; condensed summaries
        -- (depth >= 1) summarize same-depth summaries.
        CREATE TABLE summaries (
          summary_id       TEXT PRIMARY KEY,  -- sum_ + 16 hex
          conversation_id  INTEGER NOT NULL REFERENCES conversations(conversation_id),
          kind             TEXT NOT NULL CHECK (kind IN ('leaf', 'condensed')),
          depth            INTEGER NOT NULL CHECK (depth >= 0),
          content          TEXT NOT NULL,
          token_count      INTEGER NOT NULL,
          created_at       TEXT NOT NULL,
          earliest_at      TEXT,
          latest_at        TEXT,
          descendant_count INTEGER NOT NULL DEFAULT 0,
          file_ids         TEXT NOT NULL DEFAULT '[]',  -- JSON array of file_ ids
          model            TEXT,                        -- what wrote it
          CHECK ((kind = 'leaf') = (depth = 0))
        );
        CREATE INDEX summaries_conversation ON summaries(conversation_id, depth, created_at);

        -- DAG edges, in the spec's direction: summary_id is the condensed summary (the
        -- child), parent_summary_id one of the summaries it was made from, in source order.
        CREATE TABLE summary_parents (
          summary_id        TEXT NOT NULL REFERENCES summaries(summary_id),
          parent_summary_id TEXT NOT NULL REFERENCES summaries(summary_id),
          ordinal           INTEGER NOT NULL,
          PRIMARY KEY (summary_id, parent_summary_id)
        );
        CREATE INDEX summary_parents_parent ON summary_parents(parent_summary_id);

        -- Leaf summary → the messages it summarizes, in order.
        CREATE TABLE summary_messages (
          summary_id TEXT NOT NULL REFERENCES summaries(summary_id),
          message_id INTEGER NOT NULL REFERENCES messages(message_id),
          ordinal    INTEGER NOT NULL,
          PRIMARY KEY (summary_id, message_id)
        );
        CREATE INDEX summary_messages_message ON summary_messages(message_id);

        -- The active context: what the model sees, in order. Ordinals are 0..n-1 with no
        -- gaps; each item points at exactly one message or summary.
        CREATE TABLE context_items (
          conversation_id INTEGER NOT NULL REFERENCES conversations(conversation_id),
          ordinal         INTEGER NOT NULL,
          item_type       TEXT NOT NULL CHECK (item_type IN ('message', 'summary')),
          message_id      INTEGER REFERENCES messages(message_id),
          summary_id      TEXT REFERENCES summaries(summary_id),
          created_at      TEXT NOT NULL,
          PRIMARY KEY (conversation_id, ordinal),
          CHECK ((item_type = 'message' AND message_id IS NOT NULL AND summary_id IS NULL)
              OR (item_type = 'summary' AND summary_id IS NOT NULL AND message_id IS NULL))
        ) WITHOUT ROWID;
        -- No index on message_id/summary_id: every query reaches items through the
        -- conversation and ordinal, and each extra index costs on every ingest.

        -- Files too large for the context, kept on disk under the files directory.
        CREATE TABLE large_files (
          file_id             TEXT PRIMARY KEY,   -- file_ + 16 hex
          conversation_id     INTEGER NOT NULL REFERENCES conversations(conversation_id),
          message_id          INTEGER REFERENCES messages(message_id),
          file_name           TEXT,
          mime_type           TEXT,
          byte_size           INTEGER NOT NULL,
          token_count         INTEGER NOT NULL,
          sha256              TEXT NOT NULL,
          storage_path        TEXT NOT NULL,      -- relative to the files directory
          exploration_summary TEXT,
          created_at          TEXT NOT NULL
        );
        CREATE INDEX large_files_conversation ON large_files(conversation_id);

        -- Where reconciliation of a conversation's transcript got to, so that re-reading an
        -- appended file starts at the new tail. head_hash and header_id detect a rewritten
        -- or rotated file; last_line_* verify that the bytes before the offset are unchanged.
        CREATE TABLE transcript_checkpoints (
          conversation_id INTEGER PRIMARY KEY REFERENCES conversations(conversation_id),
          path            TEXT NOT NULL,
          format          TEXT NOT NULL,
          header_id       TEXT,
          head_hash       TEXT NOT NULL,
          size            INTEGER NOT NULL,
          offset          INTEGER NOT NULL,
          line_no         INTEGER NOT NULL,
          last_line_start INTEGER NOT NULL,
          last_line_hash  TEXT NOT NULL,
          last_entry_id   TEXT,
          updated_at      TEXT NOT NULL
        );

        -- Progress of indexes that large batches fill after the fact (the trigram index):
        -- every message with message_id <= upto is indexed; newer ones may be.
        CREATE TABLE index_state (
          name TEXT PRIMARY KEY,
          upto INTEGER NOT NULL
        );
        INSERT INTO index_state (name, upto) VALUES ('messages_trigram', 0);

        -- Full-text indexes. External content: the text is stored once, in the source table.
        -- Filled explicitly by the store in bulk after each batch (no per-row triggers).
        CREATE VIRTUAL TABLE messages_fts USING fts5(
          content, content='messages', content_rowid='message_id',
          tokenize='porter unicode61');
        -- Trigram index for substrings and CJK. detail='none' keeps ingest fast; candidate
        -- rows are confirmed against the text itself.
        CREATE VIRTUAL TABLE messages_trigram USING fts5(
          content, content='messages', content_rowid='message_id',
          tokenize='trigram', detail='none');
        CREATE VIRTUAL TABLE summaries_fts USING fts5(
          content, content='summaries', content_rowid='rowid',
          tokenize='porter unicode61');
        CREATE VIRTUAL TABLE summaries_trigram USING fts5(
          content, content='summaries', content_rowid='rowid', tokenize='trigram');
        """,
    )


@migration
def m002_grants(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- Delegation grants: what a sub-agent may expand. Stored (unlike the reference's
        -- in-memory grants) so they survive a restart and every process sees revocations.
        -- grant_id is an unguessable secret; conversation_ids a JSON array.
        CREATE TABLE grants (
          grant_id         TEXT PRIMARY KEY,
          conversation_ids TEXT NOT NULL,
          max_depth        INTEGER NOT NULL,
          token_cap        INTEGER NOT NULL,
          tokens_used      INTEGER NOT NULL DEFAULT 0,
          purpose          TEXT,
          created_at       TEXT NOT NULL,
          expires_at       TEXT NOT NULL,
          revoked_at       TEXT
        );
        CREATE INDEX grants_expires ON grants(expires_at) WHERE revoked_at IS NULL;
        """,
    )


@migration
def m003_summary_retirement(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- Maintenance never deletes a summary: one that was re-summarized (rewritten) or whose
        -- sources were put back into the context (dissolved) is retired. It keeps its content
        -- and edges (describe still shows it), leaves the context and the search results,
        -- and a rewritten one names its successor.
        ALTER TABLE summaries ADD COLUMN retired_at TEXT;
        ALTER TABLE summaries ADD COLUMN retired_reason TEXT
          CHECK (retired_reason IN ('rewritten', 'dissolved'));
        ALTER TABLE summaries ADD COLUMN superseded_by TEXT REFERENCES summaries(summary_id);
        """,
    )


@migration
def m004_session_summaries(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- Versioned session summaries (the incremental-session-summaries spec; a session is a
        -- conversation). Versions 1, 2, ... are never overwritten: each covers the messages up
        -- to last_message_id, an incremental one made from the previous version and the
        -- messages after it. The lists are JSON arrays of strings.
        CREATE TABLE session_summaries (
          session_summary_id TEXT PRIMARY KEY,          -- ss_ + 16 hex
          conversation_id    INTEGER NOT NULL REFERENCES conversations(conversation_id),
          version            INTEGER NOT NULL,
          summary            TEXT NOT NULL,
          topics             TEXT NOT NULL DEFAULT '[]',
          decisions          TEXT NOT NULL DEFAULT '[]',
          code_references    TEXT NOT NULL DEFAULT '[]',
          key_points         TEXT NOT NULL DEFAULT '[]',
          first_message_id   INTEGER REFERENCES messages(message_id),
          last_message_id    INTEGER REFERENCES messages(message_id),
          message_count      INTEGER NOT NULL,            -- messages covered, in all
          messages_processed INTEGER NOT NULL,            -- of which new in this version
          is_incremental     INTEGER NOT NULL,
          model              TEXT,
          created_at         TEXT NOT NULL,
          UNIQUE (conversation_id, version)
        );
        CREATE INDEX session_summaries_latest ON session_summaries(conversation_id, version DESC);
        -- The latest version, kept on the conversation for quick access.
        ALTER TABLE conversations ADD COLUMN summary TEXT;
        ALTER TABLE conversations ADD COLUMN summary_version INTEGER;
        """,
    )


@migration
def m005_tool_executions(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- The tool-execution log: one row per tool call, apart from the chat frames (the
        -- messages). Written with the messages that carry the call and its result, in the same
        -- transaction; existing messages are logged below.
        CREATE TABLE tool_executions (
          execution_id      TEXT NOT NULL,      -- the host's tool call id
          conversation_id   INTEGER NOT NULL REFERENCES conversations(conversation_id),
          call_message_id   INTEGER REFERENCES messages(message_id),
          result_message_id INTEGER REFERENCES messages(message_id),
          tool_name         TEXT,
          input             TEXT,               -- JSON, as the model sent it
          output            TEXT,
          output_file_id    TEXT,               -- a large-file record holding the output
          status            TEXT NOT NULL CHECK (status IN ('pending', 'ok', 'error')),
          error             TEXT,
          started_at        TEXT,
          finished_at       TEXT,
          duration_ms       INTEGER,
          PRIMARY KEY (conversation_id, execution_id)
        ) WITHOUT ROWID;
        CREATE INDEX tool_executions_tool ON tool_executions(tool_name, started_at);
        CREATE INDEX tool_executions_started ON tool_executions(conversation_id, started_at);

        """,
    )
    last = conn.execute("SELECT coalesce(max(message_id), 0) FROM messages").fetchone()[0]
    record_tool_executions(conn, None, 1, last)


@migration
def m006_context_removals(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- Messages a host took back out of the active context (an agent framework's "pop"):
        -- still stored and searchable, deliberately outside the context and the DAG.
        CREATE TABLE context_removals (
          message_id      INTEGER PRIMARY KEY REFERENCES messages(message_id),
          conversation_id INTEGER NOT NULL REFERENCES conversations(conversation_id),
          removed_at      TEXT NOT NULL
        );
        """,
    )


@migration
def m007_redacted_originals(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- Originals of redacted messages, kept only when redact.keep_originals is on:
        -- encrypted (Fernet) with a key that lives in the environment, never in the store.
        CREATE TABLE redacted_originals (
          message_id INTEGER PRIMARY KEY REFERENCES messages(message_id),
          sealed     BLOB NOT NULL,
          secrets    INTEGER NOT NULL          -- how many secrets were replaced
        );
        """,
    )


@migration
def m008_tool_executions_by_call(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- The resume summary walks a conversation's recent messages to their tool calls.
        CREATE INDEX tool_executions_call ON tool_executions(call_message_id)
          WHERE call_message_id IS NOT NULL;
        """,
    )


@migration
def m009_rows_with_nul(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- FTS5 reads a text only up to its first NUL character, so the trigram index cannot
        -- see what follows one. Substring and regex searches also look at these rows (few:
        -- NUL is rare in text), found through these partial indexes instead of a scan.
        CREATE INDEX messages_with_nul ON messages(message_id)
          WHERE instr(content, char(0)) > 0;
        CREATE INDEX summaries_with_nul ON summaries(summary_id)
          WHERE instr(content, char(0)) > 0;
        """,
    )


@migration
def m010_host_meta(conn: sqlite3.Connection) -> None:
    # What a host wrote into its transcript that is not the conversation itself (a slash
    # command, a caveat, a command's output, hook output, a synthetic reply, the host's own
    # compaction summary): stored like any message, but never read as the user's words.
    # NULL for every real message.
    conn.execute("ALTER TABLE messages ADD COLUMN host_meta TEXT")
    # Where a host compacted, and what a hook put back after it: found without a scan.
    conn.execute(
        "CREATE INDEX messages_host_meta ON messages(conversation_id, host_meta, seq)"
        " WHERE host_meta IS NOT NULL"
    )


@migration
def m011_neighbours_in_the_word_index(conn: sqlite3.Connection) -> None:
    # A message is found by what surrounds it: its word-index entry also carries the start of
    # the message before it (prev) and of the one after (next), weighted below its own words,
    # so an answer is reachable through the question before it. The view is the index's
    # external content; the store keeps the index in step as messages are appended (the
    # message before a batch gets its next).
    run_script(
        conn,
        f"""
        DROP TABLE messages_fts;
        -- (Like FTS5 itself, SQLite's text functions stop at a NUL: a neighbour is read up
        -- to its first one.)
        CREATE VIEW message_words AS
          SELECT m.message_id, m.content,
                 coalesce(substr(p.content, 1, {NEIGHBOUR_CHARS}), '') AS prev,
                 coalesce(substr(n.content, 1, {NEIGHBOUR_CHARS}), '') AS next
          FROM messages m
          LEFT JOIN messages p ON p.conversation_id = m.conversation_id AND p.seq = m.seq - 1
          LEFT JOIN messages n ON n.conversation_id = m.conversation_id AND n.seq = m.seq + 1;
        CREATE VIRTUAL TABLE messages_fts USING fts5(
          content, prev, next, content='message_words', content_rowid='message_id',
          tokenize='porter unicode61');
        INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
        """,
    )


#: The five fields of a message's surroundings entry (m012 to m027's ``message_words``):
#: its words, the start of the one before, after and two before it, its *about* words.
MESSAGE_WORDS = f"""SELECT m.message_id, m.content,
                 coalesce(substr(p.content, 1, {NEIGHBOUR_CHARS}), '') AS prev,
                 coalesce(substr(x.content, 1, {NEIGHBOUR_CHARS}), '') AS next,
                 coalesce(substr(p2.content, 1, {NEIGHBOUR_CHARS}), '') AS far,
                 {about_sql("m", "c")} AS about
          FROM messages m
          JOIN conversations c ON c.conversation_id = m.conversation_id
          LEFT JOIN messages p ON p.conversation_id = m.conversation_id AND p.seq = m.seq - 1
          LEFT JOIN messages p2 ON p2.conversation_id = m.conversation_id AND p2.seq = m.seq - 2
          LEFT JOIN messages x ON x.conversation_id = m.conversation_id AND x.seq = m.seq + 1"""


@migration
def m012_own_and_context_word_indexes(conn: sqlite3.Connection) -> None:
    # Two word indexes. messages_fts holds a message's own words alone again: what a filter,
    # a newest-first search and a large store's ranking read (a word's postings there are
    # only where it was said, so counting them for BM25 costs what it did before m011).
    # messages_ctx_fts carries what surrounds it as weaker columns — the one before (prev),
    # after (next), the one before that (far), and its conversation's title with the month
    # and year it was said (about) — and ranks small stores and rare words. Appending still
    # changes only the context entry of the message a batch follows (its next); a new title
    # re-indexes its conversation's context entries.
    run_script(
        conn,
        f"""
        DROP TABLE messages_fts;
        DROP VIEW message_words;
        CREATE VIEW message_words AS
          {MESSAGE_WORDS};
        CREATE VIRTUAL TABLE messages_fts USING fts5(
          content, content='messages', content_rowid='message_id',
          tokenize='porter unicode61');
        INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
        CREATE VIRTUAL TABLE messages_ctx_fts USING fts5(
          content, prev, next, far, about, content='message_words',
          content_rowid='message_id', tokenize='porter unicode61');
        INSERT INTO messages_ctx_fts (messages_ctx_fts) VALUES ('rebuild');
        """,
    )


@migration
def m013_newest_first_by_time(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- Newest first means by time, not by row id: an import appends a transcript's old
        -- messages after newer ones. A newest-first search walks these (each carries the row
        -- id after its time, which breaks ties) and keeps the rows the word or substring index
        -- holds; one conversation's walk stays inside it. A summary's time is its latest
        -- message's (when it was made, without one), and retired summaries are never searched.
        CREATE INDEX messages_time ON messages(created_at);
        CREATE INDEX messages_conversation_time ON messages(conversation_id, created_at);
        CREATE INDEX summaries_time ON summaries(coalesce(latest_at, created_at))
          WHERE retired_at IS NULL;
        """,
    )


@migration
def m014_masked_secrets(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- The original of a message whose secrets were masked is kept as it was (plain = 1),
        -- for `lossless reveal`; a removed secret's original stays encrypted (plain = 0).
        ALTER TABLE redacted_originals ADD COLUMN plain INTEGER NOT NULL DEFAULT 0;
        -- The store's own settings: the key that tags masked secrets (mask_salt).
        CREATE TABLE store_settings (
          name  TEXT PRIMARY KEY,
          value TEXT NOT NULL
        );
        """,
    )


@migration
def m015_forget(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- A forgotten message keeps its row (conversation, seq, role, time, entry id) as a
        -- tombstone: its text, parts and envelope are gone; this says when.
        ALTER TABLE messages ADD COLUMN forgotten_at TEXT;
        -- What was forgotten and when (what was asked, never the text asked for).
        CREATE TABLE forgotten (
          forget_id        INTEGER PRIMARY KEY,
          conversation_id  INTEGER NOT NULL REFERENCES conversations(conversation_id),
          what             TEXT NOT NULL,
          messages         INTEGER NOT NULL,
          first_message_id INTEGER,
          last_message_id  INTEGER,
          details          TEXT,
          forgotten_at     TEXT NOT NULL
        );
        """,
    )


@migration
def m016_checkpoint_problems(conn: sqlite3.Connection) -> None:
    # The lines of a transcript an import could not store (not JSON, of no known shape, ...),
    # as a JSON list of [line, kind, reason], kept with the checkpoint that passed them: a
    # later import that reads only the appended tail, or nothing (the file is unchanged),
    # still reports them. '[]' for the checkpoints written before.
    conn.execute(
        "ALTER TABLE transcript_checkpoints ADD COLUMN problems TEXT NOT NULL DEFAULT '[]'"
    )


@migration
def m018_context_version(conn: sqlite3.Connection) -> None:
    # A random number each write that changes the conversation's active context sets anew:
    # a store that read the context keeps it, and checks this one value before reading it
    # all again (see store/context.py).
    conn.execute("ALTER TABLE conversations ADD COLUMN context_version INTEGER NOT NULL DEFAULT 0")


@migration
def m019_index_merging_off_the_turn(conn: sqlite3.Connection) -> None:
    # FTS5 merges an index's segments inside whichever insert crosses its threshold: one turn
    # in fifty waited tens of milliseconds for it. The store merges in small steps of its own,
    # after commits, on a thread of its own (SQLiteStore.merge_indexes).
    for table in (
        "messages_fts",
        "messages_ctx_fts",
        "messages_trigram",
        "summaries_fts",
        "summaries_trigram",
    ):
        conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('automerge', 0)")


@migration
def m020_message_words_made_once(conn: sqlite3.Connection) -> None:
    # PostgreSQL's batch insert writes a message's own words with its neighbours' (made once
    # for both); SQLite's word indexes are filled from the stored text as before.
    pass


@migration
def m021_provisional_summaries(conn: sqlite3.Connection) -> None:
    # A summary written at once by the offline summarizer while the model's is on its way
    # (model 'provisional'): found without reading every summary.
    conn.execute(
        "CREATE INDEX summaries_provisional ON summaries(conversation_id, depth)"
        " WHERE model = 'provisional' AND retired_at IS NULL"
    )


@migration
def m022_scrubs_due(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        -- A forget's scrub of the space its text leaves (merged indexes, the file rewritten,
        -- large files deleted), written in the forget's own transaction and deleted once
        -- done: a forget stopped after its commit is finished by the next command.
        CREATE TABLE scrubs_due (
          scrub_id   INTEGER PRIMARY KEY,
          what       TEXT NOT NULL,               -- what was forgotten (never the text)
          files      TEXT NOT NULL DEFAULT '[]',  -- large files to delete (JSON list)
          due_at     TEXT NOT NULL,
          claimed_by TEXT,                        -- host:pid of the process scrubbing
          claimed_at TEXT
        );
        """,
    )


@migration
def m023_superseded(conn: sqlite3.Connection) -> None:
    # The summaries one took the place of (a fold under pressure, a rewrite), found without
    # reading every summary: assembly unfolds a folded leaf into them.
    conn.execute(
        "CREATE INDEX summaries_superseded ON summaries(superseded_by)"
        " WHERE superseded_by IS NOT NULL"
    )


@migration
def m024_namespaces_tokens_audit(conn: sqlite3.Connection) -> None:
    run_script(conn, NAMESPACES_TOKENS_AUDIT.format(audit_id="INTEGER PRIMARY KEY"))


@migration
def m025_archives(conn: sqlite3.Connection) -> None:
    run_script(conn, ARCHIVES.format(archive_id="INTEGER PRIMARY KEY"))


@migration
def m026_indexes_without_positions(conn: sqlite3.Connection) -> None:
    # The surroundings index keeps which column of a row holds a word, not where in it
    # (detail=column): it only ranks (BM25 over the columns), and a quoted term of several
    # words asks for each of them there (a phrase is the own-words index's: sqlite_search).
    # Positions were three fifths of it. The summaries' trigram index keeps none either, as
    # the messages' never did: a LIKE confirms each candidate against the text. Made anew
    # here, in the migration's transaction: 57 s at a million messages (the entries left to
    # the catch-up instead would leave the substring search reading every row, as the two
    # indexes share the catch-up's mark, until an import made them).
    run_script(
        conn,
        """
        DROP TABLE messages_ctx_fts;
        CREATE VIRTUAL TABLE messages_ctx_fts USING fts5(
          content, prev, next, far, about, content='message_words',
          content_rowid='message_id', tokenize='porter unicode61', detail='column');
        INSERT INTO messages_ctx_fts (messages_ctx_fts) VALUES ('rebuild');
        INSERT INTO messages_ctx_fts (messages_ctx_fts, rank) VALUES ('automerge', 0);
        DROP TABLE summaries_trigram;
        CREATE VIRTUAL TABLE summaries_trigram USING fts5(
          content, content='summaries', content_rowid='rowid', tokenize='trigram',
          detail='none');
        INSERT INTO summaries_trigram (summaries_trigram) VALUES ('rebuild');
        INSERT INTO summaries_trigram (summaries_trigram, rank) VALUES ('automerge', 0);
        """,
    )


@migration
def m027_summary_messages_clustered(conn: sqlite3.Connection) -> None:
    # Which messages each leaf summary covers, kept in its key's order (WITHOUT ROWID): the
    # rows were stored twice, once in a table by rowid and once in the key's index (35 MB of
    # 88 at a million messages).
    run_script(
        conn,
        """
        CREATE TABLE summary_messages_clustered (
          summary_id TEXT NOT NULL REFERENCES summaries(summary_id),
          message_id INTEGER NOT NULL REFERENCES messages(message_id),
          ordinal    INTEGER NOT NULL,
          PRIMARY KEY (summary_id, message_id)
        ) WITHOUT ROWID;
        INSERT INTO summary_messages_clustered (summary_id, message_id, ordinal)
          SELECT summary_id, message_id, ordinal FROM summary_messages;
        DROP TABLE summary_messages;
        ALTER TABLE summary_messages_clustered RENAME TO summary_messages;
        CREATE INDEX summary_messages_message ON summary_messages(message_id);
        """,
    )


@migration
def m028_surroundings_counted(conn: sqlite3.Connection) -> None:
    # A message's surroundings (its neighbours' words, its conversation's title and month)
    # are counted when a search ranks, from the own-words index and the order of its
    # conversation (store/surroundings.py): the index that held them again, the largest
    # object of a store, goes, with the view it was made from. A store in incremental
    # auto-vacuum mode (made since m026's time) gives its pages back to the disk now; in one
    # made before, they are free pages its next writes reuse (`lossless prune` or a forget's
    # VACUUM gives them back).
    run_script(
        conn,
        """
        DROP TABLE messages_ctx_fts;
        DROP VIEW message_words;
        """,
    )
    give_back_free_pages(conn)  # (12 s for 431 MB at a million messages)


def give_back_free_pages(conn: sqlite3.Connection) -> None:
    """Give the file's free pages back to the disk, in a store made in incremental
    auto-vacuum mode (one made before keeps them for its next writes). Python's sqlite3
    steps ``PRAGMA incremental_vacuum`` once: a page a call."""
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
        return
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    for _ in range(free):
        conn.execute("PRAGMA incremental_vacuum")


@dataclass(frozen=True)
class Step:
    """One migration in both dialects."""

    name: str
    sqlite: Migration
    postgresql: str


def _steps() -> list[Step]:
    sqlite_names = [name for name, _ in MIGRATIONS]
    pg_names = [name for name, _ in PG_MIGRATIONS]
    if sqlite_names != pg_names:
        raise RuntimeError(
            f"the migration histories differ: SQLite has {sqlite_names}, PostgreSQL {pg_names}"
        )
    return [
        Step(name, fn, script)
        for (name, fn), (_, script) in zip(MIGRATIONS, PG_MIGRATIONS, strict=True)
    ]


#: Every migration, in order, in both dialects.
STEPS: list[Step] = _steps()
