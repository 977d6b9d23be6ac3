"""Long-term memories in Postgres: saving a fact once, finding facts by meaning, re-embedding.

A memory is a short fact about the user (1-500 characters) with a 384-number embedding and the
name of the model that made it. Memories are global to the install (one user).

- `save_memory` stores a fact unless one that says the same is already stored (cosine similarity
  at least `DUPLICATE_SIMILARITY`), so the model re-saving a fact in every chat does not pile up
  copies.
- `retrieve_memories` returns the facts closest in meaning to a query, best first, leaving out
  those below `RELEVANCE_FLOOR` so an unrelated query gets nothing rather than noise.
- When the configured embedding model changes, vectors from the old model are meaningless to the
  new one, so `reembed_stale_memories` recomputes them at start-up. Searches only compare vectors
  of the current model.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import numpy as np
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

logger = logging.getLogger("resolveai.db")

MAX_MEMORY_CHARS = 500
EMBED_DIMENSIONS = 384
REEMBED_BATCH_SIZE = 64

# Both thresholds are cosine similarities (1 - pgvector's `<=>` distance) of all-MiniLM-L6-v2
# vectors, measured by `python -m evals.memory_thresholds` (re-run it after changing the embedder).
#
# RELEVANCE_FLOOR: 387 LoCoMo questions (categories 1-4) searched over their conversation's turns
# (1,297 turns, as "<speaker>: <text>"). The 160 evidence turns that reach a question's top 5 score
# p1 0.365 / median 0.593; the best hit of 1,969 unrelated SQuAD questions searched in each
# conversation (5,907 searches) scores p95 0.318 / p99 0.390. 0.35 keeps 99.4% of those evidence
# hits (0.40 would keep 97.5%, 0.45 93.1%) and leaves 97.4% of unrelated searches empty.
# Cross-check with 30 hand-written questions about the user against 120 third-person facts: 96%
# of the answers that reach the top 5 are kept (0.45 would keep 81%). A relevant memory lost costs
# more than an unrelated one shown (the model can ignore it), hence the highest floor keeping
# >= 99% of evidence hits.
RELEVANCE_FLOOR = 0.35
# DUPLICATE_SIMILARITY: 40 hand-written paraphrase pairs of one fact (tests/data/memory_pairs.json)
# score median 0.909 (p5 0.725); 40 pairs of different facts on the same topic ("is vegetarian" /
# "is vegan") median 0.698, p95 0.897; real distinct facts (393 LoCoMo evidence turns against the
# nearest other evidence turn of their conversation) median 0.683, p99 0.856. At 0.90: recall 58%
# of paraphrases (23/40), 2/40 same-topic pairs merged ("writing" / "reading a novel about sailors"
# 0.937, "prefers tea to coffee" / "coffee to tea" 0.997: word-order and one-word changes look
# alike to this model), 2/393 LoCoMo facts merged; precision 0.92 against the same-topic pairs.
# 0.85 would catch 78% of paraphrases but merge 18% of same-topic pairs. Merging loses a new fact
# while a missed paraphrase only stores it twice, so the lowest threshold merging <= 5% of
# same-topic pairs and <= 1% of LoCoMo facts.
DUPLICATE_SIMILARITY = 0.90

# How many candidates the HNSW index gathers for a memory search (pgvector's hnsw.ef_search, default
# 40; the rows returned are the best `limit` of them). Measured by `python -m bench.memory` (2,013
# real LoCoMo/SQuAD memories topped up with vectors made from them, 200 questions, k = 5), share of
# the exact top 5 found at 100k memories: 0.942 with 40, 0.986 with 100, 0.997 with 200; with the
# harder `--derived noise` vectors 0.70 with 40 and 0.85 with 100. At 10k: 0.990 / 0.997. 100 costs
# about half a millisecond more per search than 40 at 50k-100k rows; 200 doubles the index work
# again for little gain. On a small table (a few thousand rows) the planner reads it all instead
# (exact), whatever this says.
EF_SEARCH = 100

# Hybrid search: the CANDIDATES memories nearest in meaning (the HNSW index) and the CANDIDATES
# best by shared words (Postgres full-text search, the GIN index of migration 0003), fused with
# Reciprocal Rank Fusion (score = sum of 1 / (RRF_K + rank) over the two lists), then the relevance
# floor, then the limit. Measured with `python -m evals memory-retrieval` (LoCoMo turns as
# memories, 498 questions): the vectors alone find a question's evidence turns far less often than
# plain keyword search (BM25), and fusing both beats either (see evals/RESULTS.md). The floor keeps
# its meaning: a memory sharing a word with the query but not its meaning is still left out.
CANDIDATES = 20
RRF_K = 60  # the usual constant; the same as the web ranker's

# Fixed key for the advisory lock around re-embedding ("ResolveM"); differs from the migration
# lock in core/db.py.
REEMBED_LOCK_KEY = 0x5265736F6C76654D
# Fixed key for the transaction lock around save_memory's check-then-insert ("ResolveS"): two
# processes saving the same fact at once would both find nothing and both insert without it.
SAVE_LOCK_KEY = 0x5265736F6C766553

_MEMORY_COLUMNS = (
    "memory_id, content, embed_model, source_chat_id, source_message_id, created_at, updated_at"
)

# The memories closest to a vector, with their cosine distance. ORDER BY the bare `<=>` with a
# LIMIT is the shape the HNSW index (vector_cosine_ops) answers; ordering by a similarity
# expression or filtering on the distance would scan the whole table, so thresholds are applied
# to the rows this returns. Only vectors of the current model are comparable; after start-up's
# re-embedding that is every row, so the filter removes nothing the index scan would need.
NEAREST_SQL = (
    f"SELECT {_MEMORY_COLUMNS}, embedding <=> %(vector)s AS distance FROM memories"
    " WHERE embed_model = %(model)s ORDER BY embedding <=> %(vector)s LIMIT %(limit)s"
)


class Embedder(Protocol):
    """What this module needs from an embedding model (the real one lives elsewhere)."""

    model_name: str

    async def embed_documents(self, texts: list[str]) -> Sequence[np.ndarray]: ...


class QueryEmbedder(Embedder, Protocol):
    """An embedder that can also embed search queries (rag/embedder.py's `Embedder`)."""

    async def embed_query(self, text: str) -> np.ndarray: ...


@dataclass(frozen=True)
class SaveResult:
    """What `save_memory` did: stored `memory`, or found it already known as `memory`."""

    saved: bool
    # The new row, or the stored memory that already says the same (row without the embedding).
    memory: dict[str, Any]
    # When not saved: how similar the stored memory is to the one offered (1.0 for the same text).
    similarity: float | None = None


@dataclass(frozen=True)
class RetrievedMemory:
    """One memory found by `retrieve_memories`."""

    memory_id: uuid.UUID
    content: str
    similarity: float  # cosine similarity to the query, 1 - pgvector's `<=>` distance
    created_at: datetime


def normalize_memory(content: str) -> str:
    """`content` with runs of whitespace made single spaces; ValueError if empty or too long."""
    text = " ".join(content.split())
    if not text:
        raise ValueError("A memory can't be empty: give one short fact about the user")
    if len(text) > MAX_MEMORY_CHARS:
        raise ValueError(
            f"A memory must be at most {MAX_MEMORY_CHARS} characters, not {len(text)}:"
            " save one short fact about the user"
        )
    return text


def _check_embedding(embedding: Any) -> np.ndarray:
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.shape != (EMBED_DIMENSIONS,):
        raise ValueError(f"An embedding must have {EMBED_DIMENSIONS} numbers, not {vector.shape}")
    return vector


async def add_memory(
    pool: AsyncConnectionPool,
    content: str,
    embedding: Any,
    embed_model: str,
    source_chat_id: uuid.UUID | None = None,
    source_message_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """Store a memory; returns its row without the embedding. Raises ValueError if too long."""
    # The database checks the length too; checking here gives a message the model can act on.
    if not 1 <= len(content) <= MAX_MEMORY_CHARS:
        raise ValueError(f"A memory must be 1 to {MAX_MEMORY_CHARS} characters, not {len(content)}")
    vector = _check_embedding(embedding)
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "INSERT INTO memories"
            " (content, embedding, embed_model, source_chat_id, source_message_id)"
            f" VALUES (%s, %s, %s, %s, %s) RETURNING {_MEMORY_COLUMNS}",
            (content, vector, embed_model, source_chat_id, source_message_id),
        )
        row = await cur.fetchone()
    assert row is not None
    return row


async def save_memory(
    pool: AsyncConnectionPool,
    embedder: Embedder,
    content: str,
    source_chat_id: uuid.UUID | None = None,
    source_message_id: uuid.UUID | None = None,
) -> SaveResult:
    """Store one fact unless a memory saying the same is already stored (see `SaveResult`).

    Whitespace is normalized; ValueError if the fact is empty or over 500 characters. The source
    ids are kept if that chat and message still exist, else left empty (deleting a chat mid-turn
    must not make the save fail).
    """
    text = normalize_memory(content)
    # Embed before taking the lock: the model is the slow part and needs no database state.
    vector = _check_embedding((await embedder.embed_documents([text]))[0])
    async with (
        pool.connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):
        # Held until the transaction ends, so a concurrent save of the same fact (another
        # request, another server process) checks only after this one's row is committed.
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (SAVE_LOCK_KEY,))
        await cur.execute(NEAREST_SQL, {"vector": vector, "model": embedder.model_name, "limit": 1})
        nearest = await cur.fetchone()
        if nearest is not None:
            similarity = 1.0 - float(nearest.pop("distance"))
            if similarity >= DUPLICATE_SIMILARITY:
                return SaveResult(saved=False, memory=nearest, similarity=similarity)
        await cur.execute(
            "INSERT INTO memories"
            " (content, embedding, embed_model, source_chat_id, source_message_id)"
            " VALUES (%(content)s, %(vector)s, %(model)s,"
            " (SELECT chat_id FROM chats WHERE chat_id = %(chat)s),"
            " (SELECT message_id FROM messages WHERE message_id = %(message)s))"
            f" RETURNING {_MEMORY_COLUMNS}",
            {
                "content": text,
                "vector": vector,
                "model": embedder.model_name,
                "chat": source_chat_id,
                "message": source_message_id,
            },
        )
        row = await cur.fetchone()
    assert row is not None
    return SaveResult(saved=True, memory=row)


def ef_search_sql(limit: int, ef_search: int = EF_SEARCH) -> str:
    """The statement setting the HNSW search breadth for the current transaction (never below
    `limit`: the index returns at most ef_search rows; pgvector allows up to 1000)."""
    return f"SET LOCAL hnsw.ef_search = {min(max(int(limit), int(ef_search)), 1000)}"


# Any of the query's words (plainto_tsquery joins them with AND, which a question rarely meets).
# Each CTE is a shape its index answers: ORDER BY `<=>` LIMIT (HNSW) and `@@` (GIN).
HYBRID_SQL = f"""
WITH query AS (
    SELECT replace(plainto_tsquery('english', %(text)s)::text, ' & ', ' | ')::tsquery AS words
), by_meaning AS (
    SELECT memory_id, row_number() OVER (ORDER BY distance) AS rank FROM (
        SELECT memory_id, embedding <=> %(vector)s AS distance FROM memories
        WHERE embed_model = %(model)s ORDER BY embedding <=> %(vector)s LIMIT %(candidates)s
    ) nearest
), by_words AS (
    SELECT memory_id, row_number() OVER (ORDER BY score DESC, memory_id) AS rank FROM (
        SELECT memory_id, ts_rank_cd(content_words, query.words) AS score FROM memories, query
        WHERE content_words @@ query.words ORDER BY score DESC LIMIT %(candidates)s
    ) matching
), fused AS (
    SELECT memory_id, sum(1.0 / (%(rrf_k)s + rank)) AS score
    FROM (SELECT * FROM by_meaning UNION ALL SELECT * FROM by_words) ranks GROUP BY memory_id
)
SELECT {_MEMORY_COLUMNS}, embedding <=> %(vector)s AS distance
FROM fused JOIN memories USING (memory_id)
WHERE embedding <=> %(vector)s <= %(max_distance)s AND embed_model = %(model)s
ORDER BY fused.score DESC, distance LIMIT %(limit)s
"""


async def retrieve_memories(
    pool: AsyncConnectionPool,
    embedder: QueryEmbedder,
    query: str,
    limit: int = 5,
    ef_search: int = EF_SEARCH,
) -> list[RetrievedMemory]:
    """Up to `limit` memories most relevant to `query` (by meaning and shared words, see
    `CANDIDATES`), best first.

    Memories less similar in meaning than `RELEVANCE_FLOOR` are left out, so an unrelated query
    returns nothing; the floor applies to the candidates the indexes return, so it never makes
    them return fewer (the only other filter, the embedding model, matches every row after
    start-up's re-embedding). `ef_search`: see `EF_SEARCH`. ValueError if the query is empty or
    `limit` is below 1.
    """
    text = " ".join(query.split())
    if not text:
        raise ValueError("The memory search query can't be empty")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    vector = _check_embedding(await embedder.embed_query(text))
    candidates = max(limit, CANDIDATES)
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        # Pipelined: BEGIN, the setting (for this transaction only), the search and COMMIT go to
        # the server together instead of one round trip each.
        async with conn.pipeline(), conn.transaction():
            await conn.execute(ef_search_sql(candidates, ef_search))
            await cur.execute(
                HYBRID_SQL,
                {
                    "text": text,
                    "vector": vector,
                    "model": embedder.model_name,
                    "candidates": candidates,
                    "rrf_k": RRF_K,
                    "max_distance": 1.0 - RELEVANCE_FLOOR,
                    "limit": limit,
                },
            )
        rows = await cur.fetchall()
    return [
        RetrievedMemory(
            memory_id=row["memory_id"],
            content=row["content"],
            similarity=1.0 - float(row["distance"]),
            created_at=row["created_at"],
        )
        for row in rows
    ]


async def reembed_stale_memories(pool: AsyncConnectionPool, embedder: Embedder) -> int:
    """Re-embed every memory made by another model than `embedder`; returns how many.

    Holds a session advisory lock on one connection for the whole run, so when two processes
    start together the second waits and then finds nothing left to do (and when this returns,
    every memory matches the current model). Each batch commits on its own, so no transaction
    stays open while the model runs, and an interrupted run resumes where it stopped.
    """
    model = embedder.model_name
    count = 0
    async with pool.connection() as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (REEMBED_LOCK_KEY,))
        await conn.commit()
        try:
            last_id: uuid.UUID | None = None
            while True:
                # Keyset pagination by memory_id: each row is visited once even if an update
                # below is skipped, so the loop always ends.
                cursor = await conn.execute(
                    "SELECT memory_id, content FROM memories WHERE embed_model <> %s"
                    " AND (%s::uuid IS NULL OR memory_id > %s) ORDER BY memory_id LIMIT %s",
                    (model, last_id, last_id, REEMBED_BATCH_SIZE),
                )
                batch = await cursor.fetchall()
                await conn.commit()
                if not batch:
                    break
                last_id = batch[-1][0]
                vectors = await embedder.embed_documents([content for _, content in batch])
                if len(vectors) != len(batch):
                    raise RuntimeError(
                        f"Embedder {model} returned {len(vectors)} vectors for {len(batch)} texts"
                    )
                async with conn.cursor() as cur:
                    # `content = %s`: if the memory was edited meanwhile, its new text was
                    # embedded by whoever edited it; do not overwrite that with a stale vector.
                    await cur.executemany(
                        "UPDATE memories SET embedding = %s, embed_model = %s"
                        " WHERE memory_id = %s AND content = %s AND embed_model <> %s",
                        [
                            (_check_embedding(vector), model, memory_id, content, model)
                            for (memory_id, content), vector in zip(batch, vectors, strict=True)
                        ],
                    )
                    count += max(cur.rowcount, 0)
                await conn.commit()
        finally:
            # Roll back first: after an error the connection's transaction may be aborted.
            await conn.rollback()
            await conn.execute("SELECT pg_advisory_unlock(%s)", (REEMBED_LOCK_KEY,))
            await conn.commit()
    if count:
        logger.info("Memories: re-embedded %d with %s", count, model)
    return count
