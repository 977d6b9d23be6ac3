"""Search one user's document chunks: by meaning (HNSW) and by words (the GIN full-text index),
fused with Reciprocal Rank Fusion as the web ranker fuses BM25 and dense (rag/ranker.py's RRF_K),
in one SQL statement.

Each half is a shape its index answers: `ORDER BY embedding <=> … LIMIT` with pgvector's iterative
scan (the chunks are partitioned by user, migration 0014, so Postgres reads the user's partition
only and skips the few other users sharing it, core/memory_store.py's ITERATIVE_SCAN_SQL), and
`@@` a tsquery of the message's words joined by OR (as BM25 counts any shared word: an AND of
every word, `websearch_to_tsquery`, found the answer's passage in the top 5 for 0.90 of the SQuAD
questions against 0.97 with OR, evals `documents-qa --limit 300`), leaving out words so common in
a large library that looking for them would rank thousands of chunks (`COMMON_WORD_CHUNKS`; they
still score). Only their union is scored. A chunk is kept if it is close enough in meaning
(`RELEVANCE_FLOOR`) or matched by words and not unrelated in meaning (`WORDS_FLOOR`), so a
question about something else finds nothing and no document is pushed into every answer. Chunks
of the documents attached to the chat come first among equals (`CHAT_BOOST`).
"""

from __future__ import annotations

import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from core.memory_search import LEXEME_QUERY, ef_search_sql
from core.memory_store import ITERATIVE_SCAN_SQL, QueryEmbedder, check_embedding
from rag.ranker import RRF_K

PASSAGE_CHARS = 600  # of a passage's text kept in the saved source, for its preview

CANDIDATES = 40  # from the words half
# From the meaning half. One user's chunks among many: pgvector's iterative scan visits about
# (candidates / the user's share) index entries and their table rows, mostly out of the CPU's
# caches for a new query. evals `documents-qa --limit 300` (five pages), 40 → 20: recall@5 the
# same (0.973 Markdown, 0.937 PDF), recall@20 0.997 → 0.993 and 0.973 → 0.967, MRR 0.893 → 0.892
# and 0.816 → 0.815; a reply cites the top 5.
MEANING_CANDIDATES = 20
# Words in more chunks than this (by Postgres's statistics of the table, refreshed by autovacuum's
# ANALYZE) are not looked for, as core/memory_search.py's MAX_WORD_SHARE: each match of a common
# word is ranked ("year" in a SQuAD question matched 10k of 100k chunks). They still count in the
# score of the chunks the rarer words find. A small library (under this many chunks) has no such
# words: every word is looked for. On bench/documents.py's 100k chunks (10 users; bench/RESULTS.md,
# 2026-12-03), the statement alone, before → after these two changes, p50 / p95: 47 / 73 →
# 28 / 42 ms; its words half alone 15.5 / 35.8 → 13.7 / 26.4 ms, its meaning half alone 15.6 /
# 31.4 → 14.1 / 25.7 ms.
COMMON_WORD_CHUNKS = 2000
# MiniLM similarity of a question to a passage that answers it is mostly 0.35-0.7; an unrelated
# passage sits below 0.2. Tuned on aggregates of the SQuAD pages (evals), never on single cases.
RELEVANCE_FLOOR = 0.3
# A passage sharing a word with the message is kept from this similarity on. `python -m evals
# documents-qa` (recall@5 of 872 SQuAD questions / share of 500 unrelated LoCoMo questions given
# any passage), Markdown and PDF: 0.15 0.975 / 36.2% and 0.936 / 30.2% (a reply then works the
# passages in: trip ideas quoting the Zen of Python, with citations); 0.2 0.959 / 17.0% and
# 0.917 / 12.4%. Markdown only, with 12 everyday requests among the unrelated: 0.25 0.935 / 7.2%,
# 0.3 0.901 / 2.3%: too many answers lost for the precision gained.
WORDS_FLOOR = 0.2
# A file attached in this very chat is what the user is talking about: 0.15 there, as before.
ATTACHED_WORDS_FLOOR = 0.15
# A chunk of a file attached in this chat counts as if ranked this much higher in both lists.
CHAT_BOOST = 1.0 / (RRF_K + 1)

# The partitions of document_chunks (migration 0014: by hash of user_id).
USER_PARTITIONS = 16

# The lexemes in more than %(common_chunks)s chunks, from Postgres's statistics of the partitions
# (autovacuum analyzes each partition, never the partitioned table), summed over them.
COMMON_WORDS_SQL = """
SELECT coalesce(array_agg(lexeme), '{}') FROM (
    SELECT e.lexeme FROM pg_inherits AS i
    JOIN pg_class AS c ON c.oid = i.inhrelid
    JOIN pg_stats AS s ON s.schemaname = current_schema() AND s.tablename = c.relname
         AND s.attname = 'content_words' AND NOT s.inherited,
    unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(lexeme, share)
    WHERE i.inhparent = 'document_chunks'::regclass
      AND e.lexeme IS NOT NULL  -- the frequencies array ends with 3 summary figures
      AND c.reltuples > 0
    GROUP BY e.lexeme HAVING sum(e.share * c.reltuples) > %(common_chunks)s
) common
"""
# Read again this often by each server process. The statistics change only when Postgres analyzes
# the table (autovacuum, after a good share of it changed), and reading them in the search
# statement cost ~4 ms of every search (planning the pg_stats view, unpacking its arrays).
COMMON_WORDS_SECONDS = 300.0
_common_words: weakref.WeakKeyDictionary[AsyncConnectionPool, tuple[float, int, list[str]]] = (
    weakref.WeakKeyDictionary()
)

# The message's words as two tsqueries: every word (`any_word`, which scores) and the words looked
# for (`rare_word`: not one of %(common)s).
QUERY_WORDS_SQL = f"""
query AS (
    SELECT string_agg({LEXEME_QUERY}::text, ' | ')::tsquery AS any_word,
           string_agg({LEXEME_QUERY}::text, ' | ')
               FILTER (WHERE lexeme <> ALL (%(common)s::text[]))::tsquery AS rare_word
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme
)"""

SEARCH_SQL = f"""
WITH {QUERY_WORDS_SQL}, by_meaning AS (
    SELECT chunk_id, row_number() OVER (ORDER BY distance, chunk_id) AS rank FROM (
        SELECT chunk_id, embedding <=> %(vector)s AS distance FROM document_chunks
        WHERE user_id = %(user)s AND embed_model = %(model)s
        ORDER BY embedding <=> %(vector)s LIMIT %(meaning_candidates)s) nearest
), by_words AS (
    SELECT chunk_id, row_number() OVER (ORDER BY score DESC, chunk_id) AS rank FROM (
        SELECT chunk_id, ts_rank(content_words, query.any_word, 1) AS score
        FROM document_chunks, query
        WHERE user_id = %(user)s AND content_words @@ query.rare_word
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
FROM fused f JOIN document_chunks c ON c.chunk_id = f.chunk_id AND c.user_id = %(user)s
JOIN documents d USING (document_id)
WHERE d.status = 'ready'
  AND (1 - (c.embedding <=> %(vector)s) >= %(floor)s
       OR (f.words AND 1 - (c.embedding <=> %(vector)s) >= CASE WHEN d.chat_id = %(chat)s
                THEN %(attached_words_floor)s ELSE %(words_floor)s END))
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

    @property
    def url(self) -> str:
        """Where its citation leads: the document viewer, at the passage (and page)."""
        page = f"&page={self.page}" if self.page is not None else ""
        return f"#/documents/{self.document_id}?chunk={self.chunk_id}{page}"

    @property
    def title(self) -> str:
        return f"{self.filename}, page {self.page}" if self.page is not None else self.filename

    def source(self, n: int) -> dict[str, Any]:
        """The passage as numbered source `n` (the shape web sources have, plus where it is):
        saved with the reply, it opens the file there even after the file is deleted."""
        body = self.content.split("\n", 1)[1] if "\n" in self.content else self.content
        return {
            "n": n,
            "kind": "document",
            "title": self.title,
            "url": self.url,
            "document_id": str(self.document_id),
            "chunk_id": str(self.chunk_id),
            "page": self.page,
            "section": self.heading,
            "text": body[:PASSAGE_CHARS],
        }


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
        common = await common_words(pool, conn)
        async with conn.pipeline(), conn.transaction():
            await conn.execute(ef_search_sql(MEANING_CANDIDATES))
            await conn.execute(ITERATIVE_SCAN_SQL)
            await cur.execute(
                SEARCH_SQL,
                search_parameters(user_id=user_id, chat_id=chat_id, vector=vector, text=text,
                                  model=embedder.model_name, common=common, limit=limit),
            )  # fmt: skip
        rows = await cur.fetchall()
    return [FoundChunk(**row) for row in rows]


def search_parameters(
    *,
    user_id: uuid.UUID,
    chat_id: uuid.UUID | None,
    vector: Any,
    text: str,
    model: str,
    common: list[str],
    limit: int,
) -> dict[str, Any]:
    """SEARCH_SQL's parameters: the query (`text`, its `vector` by `model`), whose chunks, the
    chat searched from, the words not looked for (`common_words`) and how many to return."""
    return {
        "user": user_id, "model": model, "vector": vector, "text": text,
        "candidates": CANDIDATES, "meaning_candidates": MEANING_CANDIDATES, "common": common,
        "chat": chat_id, "floor": RELEVANCE_FLOOR, "words_floor": WORDS_FLOOR,
        "attached_words_floor": ATTACHED_WORDS_FLOOR, "limit": limit,
    }  # fmt: skip


async def common_words(pool: AsyncConnectionPool, conn: AsyncConnection[Any]) -> list[str]:
    """The lexemes not looked for (COMMON_WORD_CHUNKS), as last read from `pool`'s database."""
    now = time.monotonic()
    cached = _common_words.get(pool)
    if cached and cached[1] == COMMON_WORD_CHUNKS and now - cached[0] < COMMON_WORDS_SECONDS:
        return cached[2]
    async with conn.transaction():  # not left open: the pool would roll it back with a warning
        cur = await conn.execute(COMMON_WORDS_SQL, {"common_chunks": COMMON_WORD_CHUNKS})
        row = await cur.fetchone()
    words = list(row[0]) if row else []
    _common_words[pool] = (now, COMMON_WORD_CHUNKS, words)
    return words
