"""The schema in PostgreSQL's dialect: the same numbered migrations as :mod:`.migrations`.

Each entry carries the name of its SQLite twin, so both engines record the same history and
``lossless migrate-store`` can check that a source and a target agree. The tables and
columns are the same; what differs is how the engine provides them:

* ids: ``conversations`` and ``summaries.rowid`` are identity columns; message and part ids
  come from the ``message_ids`` and ``part_ids`` sequences in consecutive blocks
  (``lossless_take_ids``), so a batch keeps one range of ids as on SQLite;
* search: a stored ``content_tsv`` column (``to_tsvector('english', ...)``, the porter
  stemmer's counterpart) with a GIN index for words, ranked with ``ts_rank_cd``, and a
  ``pg_trgm`` GIN index on ``content`` for substrings, CJK text and ``ILIKE``. Both are kept
  by the engine on every write, so there is nothing to catch up and nothing to drift;
* ``BLOB`` is ``BYTEA``; ``offset`` is quoted (a reserved word here).

Never edit a migration that has shipped: append a new one, to both dialects
(:data:`lossless.store.migrations.STEPS` refuses to load when their histories differ).
"""

from __future__ import annotations

from .search import NEIGHBOUR_CHARS, about_sql

__all__ = [
    "ARCHIVES",
    "CONTEXT_TSV",
    "NAMESPACES_TOKENS_AUDIT",
    "PG_MIGRATIONS",
    "TSV_CHARS",
    "neighbour_text",
    "own_words",
]

#: How much of a text the word index reads (a tsvector holds at most 1 MB of positions);
#: beyond it, words are still found by substring search.
TSV_CHARS = 250_000


def own_words(content: str) -> str:
    """A text's own words in the word index, of the column or expression *content*."""
    return f"to_tsvector('english'::regconfig, left({content}, {TSV_CHARS}))"


_TSV = own_words("content")

#: Namespaces, access tokens and the audit log (m024), in the SQL both dialects read but the
#: audit log's id column (``{audit_id}``).
NAMESPACES_TOKENS_AUDIT = """
    -- The namespace a conversation belongs to (NULL: the owner's, 'default'); its session id
    -- is then the namespace and the host's id joined by U+001F (lossless.model.qualify).
    ALTER TABLE conversations ADD COLUMN namespace TEXT;
    CREATE INDEX conversations_namespace ON conversations(namespace, conversation_id)
      WHERE namespace IS NOT NULL;

    -- Access tokens of `lossless serve`: the secret kept only as a password hash (argon2id).
    CREATE TABLE access_tokens (
      token_id    TEXT PRIMARY KEY,        -- tok_ and 12 hex digits: the token's public part
      secret_hash TEXT NOT NULL,
      namespace   TEXT NOT NULL,
      role        TEXT NOT NULL CHECK (role IN ('read', 'write', 'admin')),
      sessions    TEXT,                    -- a glob of the session ids it reaches (NULL: all)
      label       TEXT,
      created_at  TEXT NOT NULL,
      expires_at  TEXT,
      revoked_at  TEXT
    );

    -- Who did what to which conversation, and when: never a token, never message text.
    CREATE TABLE audit_log (
      audit_id        {audit_id},
      at              TEXT NOT NULL,
      actor           TEXT NOT NULL,       -- a token id, 'owner' (the server's own token),
                                           -- 'local:USER' (the CLI), 'unknown' (a failed login)
      namespace       TEXT,
      action          TEXT NOT NULL,
      conversation_id BIGINT,              -- no foreign key: a forgotten one keeps its trail
      session_id      TEXT,                -- the host's id (unqualified)
      outcome         TEXT NOT NULL,       -- ok, or the error's kind
      detail          TEXT                 -- counts and reasons, never message text
    );
    CREATE INDEX audit_log_at ON audit_log(at);
"""


#: Archives (m025): messages whose text retention moved out of the store into a compressed
#: file (lossless.store.archive), in the SQL both dialects read but the id column
#: (``{archive_id}``).
ARCHIVES = """
    -- When retention moved the message's text out to an archive file (its row stays, with
    -- the start of its text, what the word indexes hold of it).
    ALTER TABLE messages ADD COLUMN archived_at TEXT;

    -- One archive file: gzip members of JSON lines, in the archive folder beside the store.
    CREATE TABLE archives (
      archive_id  {archive_id},
      name        TEXT NOT NULL UNIQUE,     -- the file's name in the archive folder
      messages    INTEGER NOT NULL,
      bytes       BIGINT NOT NULL,          -- the file's size
      text_bytes  BIGINT NOT NULL,          -- what its messages held in the store
      sha256      TEXT NOT NULL,            -- of the whole file, as written
      rule        TEXT,                     -- the retention rule that moved them
      created_at  TEXT NOT NULL
    );

    -- Where an archived message is: its archive, the gzip member holding its line, the line.
    CREATE TABLE archived_messages (
      message_id    BIGINT PRIMARY KEY,
      archive_id    BIGINT NOT NULL REFERENCES archives(archive_id),
      member_offset BIGINT NOT NULL,
      member_bytes  BIGINT NOT NULL,
      line          INTEGER NOT NULL
    );
    CREATE INDEX archived_messages_archive ON archived_messages(archive_id);
"""


def neighbour_text(content: str) -> str:
    """What a message's neighbours read of its *content*: its start, up to a NUL (stored as
    U+E000 "0"), as SQLite's surroundings index did (SQLite now counts a neighbour's words
    wherever its text holds them, past a NUL too: ``store/surroundings.py``)."""
    return f"split_part(left({content}, {NEIGHBOUR_CHARS}), U&'\\E000' || '0', 1)"


def _neighbour(offset: str, weight: str) -> str:
    return (
        "setweight(to_tsvector('english'::regconfig, coalesce((SELECT "
        f"{neighbour_text('o.content')} FROM messages o"
        f" WHERE o.conversation_id = m.conversation_id AND o.seq = m.seq {offset}), '')),"
        f" '{weight}')"
    )


_ABOUT = (
    "setweight(to_tsvector('english'::regconfig, (SELECT "
    + about_sql("m", "c")
    + " FROM conversations c WHERE c.conversation_id = m.conversation_id)), 'D')"
)


#: A message's surroundings in the word index (for the row ``m`` of messages): the start of
#: the one before it, weight B, of the one after and of the one before that, weight C, and
#: its conversation's title with the month and year it was said, weight D.
CONTEXT_TSV = (
    f"{_neighbour('- 1', 'B')} || {_neighbour('+ 1', 'C')} || {_neighbour('- 2', 'C')} || {_ABOUT}"
)

PG_MIGRATIONS: list[tuple[str, str]] = [
    (
        "m001_core_schema",
        f"""
        CREATE EXTENSION IF NOT EXISTS pg_trgm;

        CREATE TABLE conversations (
          conversation_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
          session_id      TEXT NOT NULL UNIQUE,
          session_key     TEXT,
          title           TEXT,
          status          TEXT NOT NULL DEFAULT 'active'
                          CHECK (status IN ('active', 'archived')),
          metadata        TEXT,
          created_at      TEXT NOT NULL,
          updated_at      TEXT NOT NULL
        );
        CREATE INDEX conversations_session_key ON conversations(session_key)
          WHERE session_key IS NOT NULL;

        CREATE SEQUENCE message_ids;
        CREATE SEQUENCE part_ids;
        -- A block of n consecutive values of a sequence: the first one. Allocators take a
        -- session lock for the two calls only, never for their transaction.
        CREATE FUNCTION lossless_take_ids(seq regclass, n bigint) RETURNS bigint
        LANGUAGE plpgsql AS $$
        DECLARE
          first bigint;
        BEGIN
          PERFORM pg_advisory_lock(hashtext('lossless:ids'), seq::oid::int);
          first := nextval(seq);
          IF n > 1 THEN
            PERFORM setval(seq, first + n - 1);
          END IF;
          PERFORM pg_advisory_unlock(hashtext('lossless:ids'), seq::oid::int);
          RETURN first;
        END
        $$;

        CREATE TABLE messages (
          message_id      BIGINT PRIMARY KEY,
          conversation_id BIGINT NOT NULL REFERENCES conversations(conversation_id),
          seq             BIGINT NOT NULL,
          role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
          content         TEXT NOT NULL,
          token_count     BIGINT NOT NULL,
          created_at      TEXT NOT NULL,
          external_id     TEXT,
          source_format   TEXT NOT NULL,
          envelope        TEXT,
          metadata        TEXT,
          content_tsv     tsvector GENERATED ALWAYS AS ({_TSV}) STORED,
          UNIQUE (conversation_id, seq)
        );
        CREATE UNIQUE INDEX messages_external_id ON messages(conversation_id, external_id)
          WHERE external_id IS NOT NULL;
        CREATE INDEX messages_fts ON messages USING gin (content_tsv);
        CREATE INDEX messages_trigram ON messages USING gin (content gin_trgm_ops);

        CREATE TABLE message_parts (
          part_id         BIGINT PRIMARY KEY,
          message_id      BIGINT NOT NULL REFERENCES messages(message_id),
          session_id      TEXT NOT NULL,
          ordinal         BIGINT NOT NULL,
          slot            TEXT NOT NULL,
          part_type       TEXT NOT NULL,
          text            TEXT,
          tool_call_id    TEXT,
          tool_name       TEXT,
          tool_input      TEXT,
          tool_output     TEXT,
          is_error        INTEGER NOT NULL DEFAULT 0,
          raw             TEXT,
          UNIQUE (message_id, ordinal)
        );
        CREATE INDEX message_parts_tool_call_id ON message_parts(tool_call_id)
          WHERE tool_call_id IS NOT NULL;

        CREATE TABLE summaries (
          summary_id       TEXT PRIMARY KEY,
          rowid            BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE,
          conversation_id  BIGINT NOT NULL REFERENCES conversations(conversation_id),
          kind             TEXT NOT NULL CHECK (kind IN ('leaf', 'condensed')),
          depth            BIGINT NOT NULL CHECK (depth >= 0),
          content          TEXT NOT NULL,
          token_count      BIGINT NOT NULL,
          created_at       TEXT NOT NULL,
          earliest_at      TEXT,
          latest_at        TEXT,
          descendant_count BIGINT NOT NULL DEFAULT 0,
          file_ids         TEXT NOT NULL DEFAULT '[]',
          model            TEXT,
          content_tsv      tsvector GENERATED ALWAYS AS ({_TSV}) STORED,
          CHECK ((kind = 'leaf') = (depth = 0))
        );
        CREATE INDEX summaries_conversation ON summaries(conversation_id, depth, created_at);
        CREATE INDEX summaries_fts ON summaries USING gin (content_tsv);
        CREATE INDEX summaries_trigram ON summaries USING gin (content gin_trgm_ops);

        CREATE TABLE summary_parents (
          summary_id        TEXT NOT NULL REFERENCES summaries(summary_id),
          parent_summary_id TEXT NOT NULL REFERENCES summaries(summary_id),
          ordinal           BIGINT NOT NULL,
          PRIMARY KEY (summary_id, parent_summary_id)
        );
        CREATE INDEX summary_parents_parent ON summary_parents(parent_summary_id);

        CREATE TABLE summary_messages (
          summary_id TEXT NOT NULL REFERENCES summaries(summary_id),
          message_id BIGINT NOT NULL REFERENCES messages(message_id),
          ordinal    BIGINT NOT NULL,
          PRIMARY KEY (summary_id, message_id)
        );
        CREATE INDEX summary_messages_message ON summary_messages(message_id);

        CREATE TABLE context_items (
          conversation_id BIGINT NOT NULL REFERENCES conversations(conversation_id),
          ordinal         BIGINT NOT NULL,
          item_type       TEXT NOT NULL CHECK (item_type IN ('message', 'summary')),
          message_id      BIGINT REFERENCES messages(message_id),
          summary_id      TEXT REFERENCES summaries(summary_id),
          created_at      TEXT NOT NULL,
          PRIMARY KEY (conversation_id, ordinal),
          CHECK ((item_type = 'message' AND message_id IS NOT NULL AND summary_id IS NULL)
              OR (item_type = 'summary' AND summary_id IS NOT NULL AND message_id IS NULL))
        );

        CREATE TABLE large_files (
          file_id             TEXT PRIMARY KEY,
          conversation_id     BIGINT NOT NULL REFERENCES conversations(conversation_id),
          message_id          BIGINT REFERENCES messages(message_id),
          file_name           TEXT,
          mime_type           TEXT,
          byte_size           BIGINT NOT NULL,
          token_count         BIGINT NOT NULL,
          sha256              TEXT NOT NULL,
          storage_path        TEXT NOT NULL,
          exploration_summary TEXT,
          created_at          TEXT NOT NULL
        );
        CREATE INDEX large_files_conversation ON large_files(conversation_id);

        CREATE TABLE transcript_checkpoints (
          conversation_id BIGINT PRIMARY KEY REFERENCES conversations(conversation_id),
          path            TEXT NOT NULL,
          format          TEXT NOT NULL,
          header_id       TEXT,
          head_hash       TEXT NOT NULL,
          size            BIGINT NOT NULL,
          "offset"        BIGINT NOT NULL,
          line_no         BIGINT NOT NULL,
          last_line_start BIGINT NOT NULL,
          last_line_hash  TEXT NOT NULL,
          last_entry_id   TEXT,
          updated_at      TEXT NOT NULL
        );

        -- Kept for the same shape as SQLite (migrate-store copies it); the indexes here are
        -- never behind, so nothing reads it.
        CREATE TABLE index_state (
          name TEXT PRIMARY KEY,
          upto BIGINT NOT NULL
        );
        INSERT INTO index_state (name, upto) VALUES ('messages_trigram', 0);
        """,
    ),
    (
        "m002_grants",
        """
        CREATE TABLE grants (
          grant_id         TEXT PRIMARY KEY,
          conversation_ids TEXT NOT NULL,
          max_depth        BIGINT NOT NULL,
          token_cap        BIGINT NOT NULL,
          tokens_used      BIGINT NOT NULL DEFAULT 0,
          purpose          TEXT,
          created_at       TEXT NOT NULL,
          expires_at       TEXT NOT NULL,
          revoked_at       TEXT
        );
        CREATE INDEX grants_expires ON grants(expires_at) WHERE revoked_at IS NULL;
        """,
    ),
    (
        "m003_summary_retirement",
        """
        ALTER TABLE summaries ADD COLUMN retired_at TEXT;
        ALTER TABLE summaries ADD COLUMN retired_reason TEXT
          CHECK (retired_reason IN ('rewritten', 'dissolved'));
        ALTER TABLE summaries ADD COLUMN superseded_by TEXT REFERENCES summaries(summary_id);
        """,
    ),
    (
        "m004_session_summaries",
        """
        CREATE TABLE session_summaries (
          session_summary_id TEXT PRIMARY KEY,
          conversation_id    BIGINT NOT NULL REFERENCES conversations(conversation_id),
          version            BIGINT NOT NULL,
          summary            TEXT NOT NULL,
          topics             TEXT NOT NULL DEFAULT '[]',
          decisions          TEXT NOT NULL DEFAULT '[]',
          code_references    TEXT NOT NULL DEFAULT '[]',
          key_points         TEXT NOT NULL DEFAULT '[]',
          first_message_id   BIGINT REFERENCES messages(message_id),
          last_message_id    BIGINT REFERENCES messages(message_id),
          message_count      BIGINT NOT NULL,
          messages_processed BIGINT NOT NULL,
          is_incremental     INTEGER NOT NULL,
          model              TEXT,
          created_at         TEXT NOT NULL,
          UNIQUE (conversation_id, version)
        );
        CREATE INDEX session_summaries_latest ON session_summaries(conversation_id, version DESC);
        ALTER TABLE conversations ADD COLUMN summary TEXT;
        ALTER TABLE conversations ADD COLUMN summary_version BIGINT;
        """,
    ),
    (
        "m005_tool_executions",
        """
        CREATE TABLE tool_executions (
          execution_id      TEXT NOT NULL,
          conversation_id   BIGINT NOT NULL REFERENCES conversations(conversation_id),
          call_message_id   BIGINT REFERENCES messages(message_id),
          result_message_id BIGINT REFERENCES messages(message_id),
          tool_name         TEXT,
          input             TEXT,
          output            TEXT,
          output_file_id    TEXT,
          status            TEXT NOT NULL CHECK (status IN ('pending', 'ok', 'error')),
          error             TEXT,
          started_at        TEXT,
          finished_at       TEXT,
          duration_ms       BIGINT,
          PRIMARY KEY (conversation_id, execution_id)
        );
        CREATE INDEX tool_executions_tool ON tool_executions(tool_name, started_at);
        CREATE INDEX tool_executions_started ON tool_executions(conversation_id, started_at);
        """,
    ),
    (
        "m006_context_removals",
        """
        CREATE TABLE context_removals (
          message_id      BIGINT PRIMARY KEY REFERENCES messages(message_id),
          conversation_id BIGINT NOT NULL REFERENCES conversations(conversation_id),
          removed_at      TEXT NOT NULL
        );
        """,
    ),
    (
        "m007_redacted_originals",
        """
        CREATE TABLE redacted_originals (
          message_id BIGINT PRIMARY KEY REFERENCES messages(message_id),
          sealed     BYTEA NOT NULL,
          secrets    BIGINT NOT NULL
        );
        """,
    ),
    (
        "m008_tool_executions_by_call",
        """
        CREATE INDEX tool_executions_call ON tool_executions(call_message_id)
          WHERE call_message_id IS NOT NULL;
        """,
    ),
    (
        "m009_rows_with_nul",
        """
        -- SQLite's twin indexes the rows holding NUL, which its trigram index cannot see past.
        -- PostgreSQL text holds no NUL (the store escapes it), so pg_trgm sees every
        -- character and there is nothing to add; the step keeps the two histories alike.
        SELECT 1;
        """,
    ),
    (
        "m010_host_meta",
        """
        -- A host's own records in its transcript (commands, caveats, hook output, synthetic
        -- replies, its compaction summaries): stored, never read as the user's words.
        ALTER TABLE messages ADD COLUMN host_meta TEXT;
        CREATE INDEX messages_host_meta ON messages(conversation_id, host_meta, seq)
          WHERE host_meta IS NOT NULL;
        """,
    ),
    (
        "m011_neighbours_in_the_word_index",
        f"""
        -- A message is found by what surrounds it: the start of the message before it (weight
        -- B) and of the one after (weight C), in a tsvector of its own beside content_tsv,
        -- kept by the store as messages are appended (the message before a batch gets its
        -- next).
        ALTER TABLE messages ADD COLUMN context_tsv tsvector;
        UPDATE messages m SET context_tsv = {CONTEXT_TSV};
        CREATE INDEX messages_context_fts ON messages USING gin (context_tsv);
        """,
    ),
    (
        "m012_own_and_context_word_indexes",
        f"""
        -- The entry reaches one message further back (weight C, as the one after it) and
        -- carries its conversation's title and the month and year it was said (weight D).
        UPDATE messages m SET context_tsv = {CONTEXT_TSV};
        """,
    ),
    (
        "m013_newest_first_by_time",
        """
        -- Newest first means by time, not by row id (an import appends a transcript's old
        -- messages after newer ones): a search for common words walks these backwards,
        -- checking each row's tsvector; one conversation's walk stays inside it. The id
        -- breaks ties, so each index is in the order a search asks for.
        CREATE INDEX messages_time ON messages(created_at, message_id);
        CREATE INDEX messages_conversation_time
          ON messages(conversation_id, created_at, message_id);
        CREATE INDEX summaries_time ON summaries((coalesce(latest_at, created_at)), rowid)
          WHERE retired_at IS NULL;
        """,
    ),
    (
        "m014_masked_secrets",
        """
        ALTER TABLE redacted_originals ADD COLUMN plain BIGINT NOT NULL DEFAULT 0;
        CREATE TABLE store_settings (
          name  TEXT PRIMARY KEY,
          value TEXT NOT NULL
        );
        """,
    ),
    (
        "m015_forget",
        """
        ALTER TABLE messages ADD COLUMN forgotten_at TEXT;
        CREATE TABLE forgotten (
          forget_id        BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
          conversation_id  BIGINT NOT NULL REFERENCES conversations(conversation_id),
          what             TEXT NOT NULL,
          messages         BIGINT NOT NULL,
          first_message_id BIGINT,
          last_message_id  BIGINT,
          details          TEXT,
          forgotten_at     TEXT NOT NULL
        );
        """,
    ),
    (
        "m016_checkpoint_problems",
        """
        -- The lines of a transcript an import could not store, as a JSON list of
        -- [line, kind, reason], kept with the checkpoint that passed them: a later import
        -- that reads only the appended tail, or nothing, still reports them.
        ALTER TABLE transcript_checkpoints ADD COLUMN problems TEXT NOT NULL DEFAULT '[]';
        """,
    ),
    (
        "m018_context_version",
        """
        -- A random number each write that changes the conversation's active context sets
        -- anew: a store that read the context keeps it and checks this value first.
        ALTER TABLE conversations ADD COLUMN context_version BIGINT NOT NULL DEFAULT 0;
        """,
    ),
    (
        "m019_index_merging_off_the_turn",
        """
        -- SQLite's full-text indexes stop merging inside inserts; PostgreSQL keeps its own
        -- indexes, so nothing changes here.
        SELECT 1;
        """,
    ),
    (
        "m020_message_words_made_once",
        f"""
        -- A batch of messages writes each message's own words itself: a short message's
        -- words are the words its neighbours read of it, made once for both. Every other
        -- write gets them from a trigger, as the generated column gave them (the column
        -- keeps its values: dropping the expression rewrites nothing).
        ALTER TABLE messages ALTER COLUMN content_tsv DROP EXPRESSION;
        CREATE FUNCTION lossless_message_words() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP = 'INSERT' THEN
            IF NEW.content_tsv IS NULL THEN
              NEW.content_tsv := {own_words("NEW.content")};
            END IF;
          ELSIF NEW.content IS DISTINCT FROM OLD.content THEN
            NEW.content_tsv := {own_words("NEW.content")};
          END IF;
          RETURN NEW;
        END
        $$;
        CREATE TRIGGER messages_words BEFORE INSERT OR UPDATE OF content ON messages
          FOR EACH ROW EXECUTE FUNCTION lossless_message_words();
        """,
    ),
    (
        "m021_provisional_summaries",
        """
        -- A summary written at once by the offline summarizer while the model's is on its
        -- way (model 'provisional'): found without reading every summary.
        CREATE INDEX summaries_provisional ON summaries(conversation_id, depth)
          WHERE model = 'provisional' AND retired_at IS NULL;
        """,
    ),
    (
        "m022_scrubs_due",
        """
        -- A forget's scrub of the space its text leaves (the tables rewritten, large files
        -- deleted), written in the forget's own transaction and deleted once done.
        CREATE TABLE scrubs_due (
          scrub_id   BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
          what       TEXT NOT NULL,
          files      TEXT NOT NULL DEFAULT '[]',
          due_at     TEXT NOT NULL,
          claimed_by TEXT,
          claimed_at TEXT
        );
        """,
    ),
    (
        "m023_superseded",
        """
        -- The summaries one took the place of (a fold under pressure, a rewrite), found
        -- without reading every summary: assembly unfolds a folded leaf into them.
        CREATE INDEX summaries_superseded ON summaries(superseded_by)
          WHERE superseded_by IS NOT NULL;
        """,
    ),
    (
        "m024_namespaces_tokens_audit",
        NAMESPACES_TOKENS_AUDIT.format(
            audit_id="BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"
        ),
    ),
    (
        "m025_archives",
        ARCHIVES.format(archive_id="BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    ),
    (
        "m026_indexes_without_positions",
        """
        -- SQLite's surroundings and summaries' trigram indexes stop keeping positions;
        -- PostgreSQL's word vectors and trigram indexes are its own: nothing changes here.
        SELECT 1;
        """,
    ),
    (
        "m027_summary_messages_clustered",
        """
        -- SQLite keeps summary_messages in its key's order (no rowid table beside the key);
        -- a PostgreSQL table is a heap with its key's index either way: nothing changes here.
        SELECT 1;
        """,
    ),
    (
        "m028_surroundings_counted",
        """
        -- SQLite counts a message's surroundings at query time and drops the index that held
        -- its neighbours' words again; PostgreSQL keeps its context_tsv: nothing changes here.
        SELECT 1;
        """,
    ),
]
