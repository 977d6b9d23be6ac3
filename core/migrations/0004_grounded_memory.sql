-- 0004_grounded_memory: every memory carries its evidence, facts have a history, extraction jobs.
--
-- A memory now exists only with a quote: the exact span of the user's own message that states the
-- fact (core/memory_store.py checks it against the message before any insert). Memories saved
-- before this migration have no quote, and the local model invented most of them (issue #11 found
-- 29 of 32 made up), so they are removed rather than kept unverifiable.
--
-- History: a fact the user changed is not overwritten. The old row gets valid_to (and the row that
-- replaced it in superseded_by); searches read current rows (valid_to IS NULL) unless asked for
-- the past.

DELETE FROM memories;

ALTER TABLE memories
    ADD COLUMN quote text NOT NULL CHECK (char_length(quote) BETWEEN 1 AND 2000),
    ADD COLUMN valid_from timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN valid_to timestamptz,
    ADD COLUMN superseded_by uuid REFERENCES memories ON DELETE SET NULL;

CREATE INDEX memories_source_chat_idx ON memories (source_chat_id);

-- The memories recalled or retrieved for an assistant reply ("Used 2 memories").
ALTER TABLE messages ADD COLUMN memory_ids uuid[] NOT NULL DEFAULT '{}';

-- A temporary chat reads nothing from memory and writes nothing to it.
ALTER TABLE chats ADD COLUMN temporary boolean NOT NULL DEFAULT false;

-- Install-wide preferences the user sets in the UI (e.g. memory_paused), shared by every process.
CREATE TABLE preferences (
    name text PRIMARY KEY,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Pending memory extraction: one row per user message still to be read for facts. Claimed with
-- FOR UPDATE SKIP LOCKED and a lease (claimed_until), so several server processes share the work
-- and a crash only delays it; the row is deleted when the extraction is done or given up.
CREATE TABLE memory_jobs (
    message_id uuid PRIMARY KEY REFERENCES messages ON DELETE CASCADE,
    chat_id uuid NOT NULL REFERENCES chats ON DELETE CASCADE,
    attempts integer NOT NULL DEFAULT 0,
    claimed_until timestamptz,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX memory_jobs_created_at_idx ON memory_jobs (created_at);
