-- 0009_documents: the user's uploaded files, their chunks (text, page, section, embedding, words)
-- and the jobs that turn one into the other.
--
-- The original file is kept in Postgres (bytea, at most DOCUMENT_MAX_BYTES, 20 MB by default)
-- rather than in the data folder: several server processes, on several machines, share one
-- database and no disk, and one backup holds everything. Postgres stores it compressed out of line
-- (TOAST), and only the download reads it.
--
-- A chunk keeps its page (PDF page, slide, sheet; NULL for a file without pages) and section so a
-- citation can open the file there. Deleting a document deletes its chunks; a reply that cited one
-- keeps the passage's text in its own `sources`.

CREATE TABLE documents (
    document_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001'
        REFERENCES users ON DELETE CASCADE,
    -- The chat it was attached in (searched first there); the library serves every chat.
    chat_id uuid REFERENCES chats ON DELETE SET NULL,
    filename text NOT NULL CHECK (char_length(filename) BETWEEN 1 AND 255),
    media_type text NOT NULL,
    size_bytes bigint NOT NULL,
    sha256 bytea NOT NULL,
    content bytea NOT NULL,
    status text NOT NULL DEFAULT 'processing'
        CHECK (status IN ('processing', 'ready', 'failed', 'cancelled')),
    -- What processing is doing now (converting, chunking, embedding) and how far (done of total).
    stage text,
    done integer NOT NULL DEFAULT 0,
    total integer NOT NULL DEFAULT 0,
    error text,
    kind text,
    pages integer,
    chunks integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- One copy of a file per user: the same bytes uploaded again are the same document.
CREATE UNIQUE INDEX documents_user_id_sha256_idx ON documents (user_id, sha256);
CREATE INDEX documents_user_id_created_at_idx ON documents (user_id, created_at DESC);

CREATE TABLE document_chunks (
    chunk_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    document_id uuid NOT NULL REFERENCES documents ON DELETE CASCADE,
    user_id uuid NOT NULL,
    ordinal integer NOT NULL,
    page integer,
    heading text NOT NULL,
    content text NOT NULL,
    embedding vector(384) NOT NULL,
    embed_model text NOT NULL,
    content_words tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    UNIQUE (document_id, ordinal)
);
CREATE INDEX document_chunks_embedding_idx ON document_chunks
    USING hnsw (embedding vector_cosine_ops);
CREATE INDEX document_chunks_words_idx ON document_chunks USING gin (content_words);
CREATE INDEX document_chunks_user_id_idx ON document_chunks (user_id);

-- Documents waiting to be processed: claimed with FOR UPDATE SKIP LOCKED and a lease, so several
-- server processes share the work and one that dies only delays it.
CREATE TABLE document_jobs (
    document_id uuid PRIMARY KEY REFERENCES documents ON DELETE CASCADE,
    attempts integer NOT NULL DEFAULT 0,
    claimed_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
