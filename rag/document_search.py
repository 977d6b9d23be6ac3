"""Search one user's document chunks: by meaning (HNSW) and by words (the GIN full-text index),
fused with Reciprocal Rank Fusion as the web ranker fuses BM25 and dense (rag/ranker.py's RRF_K),
in one SQL statement.

Each half is a shape its index answers: `ORDER BY embedding <=> … LIMIT` with pgvector's iterative
scan (one user's chunks among everyone's, core/memory_store.py's ITERATIVE_SCAN_SQL), and `@@` a
tsquery of the message's words joined by OR (as BM25 counts any shared word: an AND of every word,
`websearch_to_tsquery`, found the answer's passage in the top 5 for 0.90 of the SQuAD questions
against 0.97 with OR, evals `documents-qa --limit 300`). Only their union is scored. A chunk is
kept if it is close enough in meaning (`RELEVANCE_FLOOR`) or matched by words and not unrelated in
meaning (`WORDS_FLOOR`), so a question about something else finds nothing and no document is
pushed into every answer. Chunks of the documents attached to the chat come first among equals
(`CHAT_BOOST`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from core.memory_search import LEXEME_QUERY, ef_search_sql
from core.memory_store import ITERATIVE_SCAN_SQL, QueryEmbedder, check_embedding
from rag.ranker import RRF_K

CANDIDATES = 40  # from each half
# MiniLM similarity of a question to a passage that answers it is mostly 0.35-0.7; an unrelated
# passage sits below 0.2. Tuned on aggregates of the SQuAD pages (evals), never on single cases.
RELEVANCE_FLOOR = 0.3
WORDS_FLOOR = 0.15
# A chunk of a file attached in this chat counts as if ranked this much higher in both lists.
CHAT_BOOST = 1.0 / (RRF_K + 1)

SEARCH_SQL = f"""
WITH query AS (
    SELECT string_agg({LEXEME_QUERY}::text, ' | ')::tsquery AS any_word
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme
), by_meaning AS (
    SELECT chunk_id, row_number() OVER (ORDER BY distance, chunk_id) AS rank FROM (
        SELECT chunk_id, embedding <=> %(vector)s AS distance FROM document_chunks
        WHERE user_id = %(user)s AND embed_model = %(model)s
        ORDER BY embedding <=> %(vector)s LIMIT %(candidates)s) nearest
), by_words AS (
    SELECT chunk_id, row_number() OVER (ORDER BY score DESC, chunk_id) AS rank FROM (
        SELECT chunk_id, ts_rank(content_words, query.any_word, 1) AS score
        FROM document_chunks, query
        WHERE user_id = %(user)s AND content_words @@ query.any_word
        ORDER BY score DESC LIMIT %(candidates)s) matched
), fused AS (
    SELECT chunk_id, sum(1.0 / ({RRF_K} + rank)) AS score, bool_or(words) AS words
    FROM (SELECT chunk_id, rank, false AS words FROM by_meaning
          UNION ALL SELECT chunk_id, rank, true FROM by_words) ranked
    GROUP BY chunk_id
)
SELECT c.chunk_id, c.document_id, d.filename, c.page, c.heading, c.content,
       1 - (c.embedding <=> %(vector)s) AS similarity,
       f.score + CASE WHEN d.chat_id = %(chat)s THEN {CHAT_BOOST} ELSE 0 END AS score
FROM fused f JOIN document_chunks c USING (chunk_id) JOIN documents d USING (document_id)
WHERE d.status = 'ready'
  AND (1 - (c.embedding <=> %(vector)s) >= %(floor)s
       OR (f.words AND 1 - (c.embedding <=> %(vector)s) >= %(words_floor)s))
ORDER BY score DESC, c.document_id, c.ordinal
LIMIT %(limit)s
"""


@dataclass(frozen=True)
class FoundChunk:
    chunk_id: uuid.UUID
    document_id: uuid.UUID
    filename: str
    page: int | None
    heading: str
    content: str  # the chunk's text, its `[Page: … | Section: …]` header line included
    similarity: float
    score: float


async def search_documents(
    pool: AsyncConnectionPool,
    embedder: QueryEmbedder,
    query: str,
    *,
    user_id: uuid.UUID,
    chat_id: uuid.UUID | None = None,
    limit: int = 5,
) -> list[FoundChunk]:
    """Up to `limit` of the user's document chunks most relevant to `query`, best first."""
    text = " ".join(query.split())
    if not text:
        raise ValueError("The document search query can't be empty")
    vector = check_embedding(await embedder.embed_query(text))
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        async with conn.pipeline(), conn.transaction():
            await conn.execute(ef_search_sql(CANDIDATES))
            await conn.execute(ITERATIVE_SCAN_SQL)
            await cur.execute(
                SEARCH_SQL,
                {"user": user_id, "model": embedder.model_name, "vector": vector, "text": text,
                 "candidates": CANDIDATES, "chat": chat_id, "floor": RELEVANCE_FLOOR,
                 "words_floor": WORDS_FLOOR, "limit": limit},
            )  # fmt: skip
        rows = await cur.fetchall()
    return [FoundChunk(**row) for row in rows]
