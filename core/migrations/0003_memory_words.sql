-- 0003_memory_words: full-text search over memories, for hybrid retrieval (meaning + words).
--
-- `content_words` is the memory's words as Postgres full-text lexemes ('english': lower case,
-- stemmed, stop words dropped), kept up to date by Postgres itself; the GIN index finds the
-- memories sharing a word with a query without reading the table. Measured with
-- `python -m evals memory-retrieval` (LoCoMo): fusing this keyword ranking with the vector ranking
-- finds clearly more of the memories that answer a question than the vectors alone (names, places
-- and other rare words are where embeddings of short texts are weakest).

ALTER TABLE memories
    ADD COLUMN content_words tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED;

CREATE INDEX memories_content_words_idx ON memories USING gin (content_words);
