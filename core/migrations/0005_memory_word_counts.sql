-- 0005_memory_word_counts: how many memories hold each word, so the word half of the memory
-- search can weigh words by rarity (IDF; core/memory_search.py).
--
-- Why: 0003's ranking, ts_rank_cd, counts how often and how close the query's words occur in a
-- memory but not how rare they are, so a word in half the memories (on LoCoMo, a speaker's name)
-- weighs as much as one in two of them. Measured with `python -m evals memory-retrieval`'s data
-- (recall@10, no relevance floor): ranking by ts_rank_cd alone found 0.605, plain BM25 (bm25s)
-- 0.619, the IDF of the shared words from these counts 0.683.
--
-- IDF needs each word's document frequency and the number of memories. Counting them per search
-- would read every memory sharing a word with the query, so triggers keep them here, per statement
-- (a bulk delete updates each word once). Every writer updates the one row of memory_word_totals
-- before any word row, so concurrent writers queue on that row (memory writes are rare and short)
-- and can never deadlock over the word rows. Superseded memories are counted too: the counts
-- describe the store's words, not one search's.

CREATE TABLE memory_word_totals (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    memories bigint NOT NULL
);

CREATE TABLE memory_word_counts (
    lexeme text PRIMARY KEY,
    memories integer NOT NULL -- how many memories' content_words hold it (0 once all are gone)
);

INSERT INTO memory_word_totals (memories) SELECT count(*) FROM memories;

INSERT INTO memory_word_counts (lexeme, memories)
SELECT lexeme, count(*) FROM memories, unnest(tsvector_to_array(content_words)) AS lexeme
GROUP BY lexeme;

-- Apply a change of the store's words: `removed` and `added` are the content_words of the
-- memories that left and joined (an edited memory is in both).
CREATE FUNCTION count_memory_words(removed tsvector[], added tsvector[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE memory_word_totals SET memories = memories + cardinality(added) - cardinality(removed);
    INSERT INTO memory_word_counts AS counts (lexeme, memories)
    SELECT lexeme, sum(change) FROM (
        SELECT lexeme, 1 AS change FROM unnest(added) AS w, unnest(tsvector_to_array(w)) AS lexeme
        UNION ALL
        SELECT lexeme, -1 FROM unnest(removed) AS w, unnest(tsvector_to_array(w)) AS lexeme
    ) changes
    GROUP BY lexeme HAVING sum(change) <> 0
    ORDER BY lexeme -- the same lock order in every writer
    ON CONFLICT (lexeme) DO UPDATE SET memories = counts.memories + excluded.memories;
$$;

CREATE FUNCTION memories_words_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    removed tsvector[] := '{}';
    joined tsvector[] := '{}';
BEGIN
    IF TG_OP = 'INSERT' THEN
        joined := ARRAY(SELECT content_words FROM added);
    ELSIF TG_OP = 'DELETE' THEN
        removed := ARRAY(SELECT content_words FROM gone);
    ELSE
        -- Most updates (validity, re-embedding) leave the words alone: only edits count.
        removed := ARRAY(SELECT gone.content_words FROM gone JOIN added USING (memory_id)
                         WHERE gone.content_words IS DISTINCT FROM added.content_words);
        joined := ARRAY(SELECT added.content_words FROM gone JOIN added USING (memory_id)
                        WHERE gone.content_words IS DISTINCT FROM added.content_words);
    END IF;
    -- A statement that changed no words takes no lock.
    IF cardinality(removed) + cardinality(joined) > 0 THEN
        PERFORM count_memory_words(removed, joined);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION memories_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_word_totals SET memories = 0;
    DELETE FROM memory_word_counts;
    RETURN NULL;
END
$$;

CREATE TRIGGER memories_words_inserted AFTER INSERT ON memories
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memories_words_changed();
CREATE TRIGGER memories_words_deleted AFTER DELETE ON memories
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION memories_words_changed();
CREATE TRIGGER memories_words_updated AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS gone NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION memories_words_changed();
CREATE TRIGGER memories_words_truncated AFTER TRUNCATE ON memories
    FOR EACH STATEMENT EXECUTE FUNCTION memories_truncated();
