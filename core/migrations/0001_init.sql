-- 0001_init: chats, their messages, and long-term memories with pgvector embeddings.
--
-- Applied by core/db.py inside one transaction (with the row in schema_migrations), so this file
-- must not contain statements that cannot run in a transaction (e.g. CREATE INDEX CONCURRENTLY).

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE chats (
    chat_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    title text NOT NULL DEFAULT 'New chat',
    -- Rolling summary of the older part of the chat, covering messages up to and including
    -- summary_upto_message_id; only the messages after it are sent to the model verbatim.
    summary text,
    summary_upto_message_id uuid,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Last activity (a message added); the sidebar lists chats newest first by this.
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX chats_updated_at_idx ON chats (updated_at DESC);

CREATE TABLE messages (
    message_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    chat_id uuid NOT NULL REFERENCES chats ON DELETE CASCADE,
    role text NOT NULL CHECK (role IN ('user', 'assistant')),
    content text NOT NULL DEFAULT '',
    -- complete: finished normally; interrupted: the user stopped it or the connection dropped;
    -- error: generation failed (see `error`); streaming: a reply still being written, saved early
    -- so a reload mid-answer shows it. A 'streaming' row left behind by a crashed process stays
    -- 'streaming': several processes may share this database, so none can tell at start-up
    -- which of them are still being written.
    status text NOT NULL DEFAULT 'complete'
        CHECK (status IN ('complete', 'interrupted', 'error', 'streaming')),
    sources jsonb NOT NULL DEFAULT '[]',
    steps jsonb NOT NULL DEFAULT '[]',
    tool_calls jsonb NOT NULL DEFAULT '[]',
    error text,
    -- clock_timestamp(), not now(): now() is fixed for a whole transaction, so a question and
    -- its answer saved in one transaction would tie and could come back in either order.
    sent_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX messages_chat_id_sent_at_idx ON messages (chat_id, sent_at);

CREATE TABLE memories (
    memory_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    content text NOT NULL CHECK (char_length(content) BETWEEN 1 AND 500),
    -- all-MiniLM-L6-v2 (and any replacement) gives 384 numbers, normalized.
    embedding vector(384) NOT NULL,
    -- Which model made `embedding`; rows from another model are re-embedded at start-up.
    embed_model text NOT NULL,
    source_chat_id uuid REFERENCES chats ON DELETE SET NULL,
    source_message_id uuid REFERENCES messages ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX memories_embedding_idx ON memories USING hnsw (embedding vector_cosine_ops);
CREATE INDEX memories_embed_model_idx ON memories (embed_model);
