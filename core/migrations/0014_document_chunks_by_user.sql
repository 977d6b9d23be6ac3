-- 0014_document_chunks_by_user: document chunks partitioned by user (16 hash partitions), each
-- partition with its own HNSW, GIN and user indexes.
--
-- One HNSW graph over everyone's chunks made a user's search walk mostly other users' chunks:
-- pgvector's iterative scan visits about (candidates / the user's share of the table) entries,
-- ~200 for 20 candidates when the user holds 10%. With a graph per partition, a user shares it
-- with about users / 16 others. On bench/documents.py's 100k chunks of 10 users, the search
-- statement, warm: p50 / p95 8.8 / 11.7 ms on one table against 3.5 / 4.4 ms partitioned
-- (bench/RESULTS.md, 2026-12-04). One user alone (the self-hosted default) fills one partition:
-- the same as one table.
--
-- A partitioned table's keys must hold its partition key, hence (chunk_id, user_id) and
-- (document_id, ordinal, user_id); a document's chunks are all its owner's, so both are as
-- unique as before. Reads that know the user name it, so Postgres reads one partition.

CREATE TABLE document_chunks_by_user (
    chunk_id uuid NOT NULL DEFAULT gen_random_uuid(),
    document_id uuid NOT NULL REFERENCES documents ON DELETE CASCADE,
    user_id uuid NOT NULL,
    ordinal integer NOT NULL,
    page integer,
    heading text NOT NULL,
    content text NOT NULL,
    embedding vector(384) NOT NULL,
    embed_model text NOT NULL,
    content_words tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
) PARTITION BY HASH (user_id);

DO $$
BEGIN
    FOR remainder IN 0..15 LOOP
        EXECUTE format(
            'CREATE TABLE document_chunks_p%s PARTITION OF document_chunks_by_user'
            ' FOR VALUES WITH (MODULUS 16, REMAINDER %s)', remainder, remainder);
    END LOOP;
END
$$;

INSERT INTO document_chunks_by_user
    (chunk_id, document_id, user_id, ordinal, page, heading, content, embedding, embed_model)
SELECT chunk_id, document_id, user_id, ordinal, page, heading, content, embedding, embed_model
FROM document_chunks;

DROP TABLE document_chunks;
ALTER TABLE document_chunks_by_user RENAME TO document_chunks;

-- Built after the copy: one pass per index instead of row by row.
ALTER TABLE document_chunks ADD CONSTRAINT document_chunks_pkey PRIMARY KEY (chunk_id, user_id);
ALTER TABLE document_chunks ADD CONSTRAINT document_chunks_document_id_ordinal_key
    UNIQUE (document_id, ordinal, user_id);
CREATE INDEX document_chunks_embedding_idx ON document_chunks
    USING hnsw (embedding vector_cosine_ops);
CREATE INDEX document_chunks_words_idx ON document_chunks USING gin (content_words);
CREATE INDEX document_chunks_user_id_idx ON document_chunks (user_id);
