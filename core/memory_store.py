"""Long-term memories in Postgres: what start-up needs now (re-embedding) plus adding one.

A memory is a short fact about the user (1-500 characters) with a 384-number embedding and the
name of the model that made it. When the configured embedding model changes, vectors from the old
model are meaningless to the new one, so `reembed_stale_memories` recomputes them at start-up.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

logger = logging.getLogger("resolveai.db")

MAX_MEMORY_CHARS = 500
EMBED_DIMENSIONS = 384
REEMBED_BATCH_SIZE = 64

# Fixed key for the advisory lock around re-embedding ("ResolveM"); differs from the migration
# lock in core/db.py.
REEMBED_LOCK_KEY = 0x5265736F6C76654D

_MEMORY_COLUMNS = (
    "memory_id, content, embed_model, source_chat_id, source_message_id, created_at, updated_at"
)


class Embedder(Protocol):
    """What this module needs from an embedding model (the real one lives elsewhere)."""

    model_name: str

    async def embed_documents(self, texts: list[str]) -> Sequence[np.ndarray]: ...


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
