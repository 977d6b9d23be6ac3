"""The memory search's word half: the word counts migration 0005 keeps, and which memories its
relevance test admits. Vectors are made by hand, so each memory's cosine similarity to the query is
exactly what the test says (the real embedder's ranking is tests/test_memory.py's and the
memory-retrieval suite's business)."""

from __future__ import annotations

import numpy as np
import pytest
from psycopg_pool import AsyncConnectionPool

from core import memory_search, memory_store
from core.accounts import LOCAL_USER_ID

MODEL = "hand-made"
DIMENSIONS = memory_store.EMBED_DIMENSIONS


def at_similarity(similarity: float) -> np.ndarray:
    """A unit vector whose cosine similarity to QUERY_VECTOR is `similarity`."""
    vector = np.zeros(DIMENSIONS, dtype=np.float32)
    vector[0], vector[1] = similarity, np.sqrt(1.0 - similarity**2)
    return vector


QUERY_VECTOR = at_similarity(1.0)


class GivenQuery:
    """An embedder whose every query is QUERY_VECTOR."""

    model_name = MODEL

    async def embed_documents(self, texts: list[str]) -> list[np.ndarray]:
        raise AssertionError("the search embeds only its query")

    async def embed_query(self, text: str) -> np.ndarray:
        return QUERY_VECTOR


async def add(pool: AsyncConnectionPool, content: str, similarity: float = 0.0) -> None:
    await memory_store.add_memory(pool, content, at_similarity(similarity), MODEL)


async def counts(pool: AsyncConnectionPool) -> tuple[int, dict[str, int]]:
    """What migration 0005's tables say: the number of memories, memories per word."""
    async with pool.connection() as conn:
        total = await (await conn.execute("SELECT memories FROM memory_word_totals")).fetchall()
        words = await conn.execute(
            "SELECT lexeme, memories FROM memory_word_counts WHERE memories <> 0"
        )
        return total[0][0], dict(await words.fetchall())


async def recounted(pool: AsyncConnectionPool) -> tuple[int, dict[str, int]]:
    """The same, counted from the memories themselves."""
    async with pool.connection() as conn:
        total = await (await conn.execute("SELECT count(*) FROM memories")).fetchone()
        words = await conn.execute(
            "SELECT lexeme, count(*) FROM memories, unnest(tsvector_to_array(content_words))"
            " AS lexeme GROUP BY lexeme"
        )
        assert total is not None
        return total[0], dict(await words.fetchall())


async def test_word_counts_follow_every_change_to_the_memories(
    memory_pool: AsyncConnectionPool,
) -> None:
    assert await counts(memory_pool) == (0, {})
    for content in ("The user's dog Rex is a beagle.", "Rex sleeps a lot.", "Tea, not coffee."):
        await add(memory_pool, content)
    total, words = await counts(memory_pool)
    assert (total, words["rex"], words["beagl"]) == (3, 2, 1)
    assert (total, words) == await recounted(memory_pool)

    async with memory_pool.connection() as conn:
        await conn.execute("UPDATE memories SET content = 'Rex is a poodle.' WHERE content ~ 'bea'")
        # Validity and vectors leave the words alone (and are not counted twice).
        await conn.execute("UPDATE memories SET valid_to = now() WHERE content ~ 'Tea'")
        await conn.execute("UPDATE memories SET embed_model = 'other'")
    total, words = await counts(memory_pool)
    assert (total, words["rex"], words["poodl"], "beagl" in words) == (3, 2, 1, False)
    assert (total, words) == await recounted(memory_pool)

    async with memory_pool.connection() as conn:
        await conn.execute("DELETE FROM memories WHERE content ~ 'sleeps'")
    assert await counts(memory_pool) == await recounted(memory_pool)
    async with memory_pool.connection() as conn:
        await conn.execute("DELETE FROM memories WHERE false")  # no rows: nothing changes
        await conn.execute("DELETE FROM memories")
    assert await counts(memory_pool) == (0, {})

    await add(memory_pool, "Rex is a poodle.")
    async with memory_pool.connection() as conn:
        await conn.execute("TRUNCATE memories")
    assert await counts(memory_pool) == (0, {})
    await add(memory_pool, "Rex is a poodle.")
    assert await counts(memory_pool) == await recounted(memory_pool) == (1, {"rex": 1, "poodl": 1})


async def search(pool: AsyncConnectionPool, query: str) -> dict[str, float]:
    found = await memory_search.retrieve_memories(
        pool, GivenQuery(), query, limit=10, user_id=LOCAL_USER_ID
    )
    return {memory.content: memory.similarity for memory in found}


async def test_a_strong_word_match_is_admitted_below_the_similarity_floor(
    memory_pool: AsyncConnectionPool,
) -> None:
    below = memory_search.RELEVANCE_FLOOR - 0.1
    assert below > memory_search.WORDS_FLOOR
    await add(memory_pool, "The user's neighbour Okonkwo repairs bicycles.", below)
    await add(memory_pool, "The user repairs old radios.", below)  # one of the query's words
    await add(memory_pool, "Okonkwo repairs bicycles on Sundays.", memory_search.WORDS_FLOOR / 2)
    await add(memory_pool, "The user is vegetarian.", memory_search.RELEVANCE_FLOOR + 0.1)
    for filler in range(6):
        await add(memory_pool, f"The user visited museum number {filler}.", 0.2)

    found = await search(memory_pool, "Who repairs bicycles, Okonkwo?")

    # Close in meaning: in, whatever its words. Holding the query's words: in, down to
    # WORDS_FLOOR, with its true similarity. Holding one of them, or too far in meaning: out.
    assert found == pytest.approx(
        {
            "The user is vegetarian.": memory_search.RELEVANCE_FLOOR + 0.1,
            "The user's neighbour Okonkwo repairs bicycles.": below,
        },
        abs=1e-5,
    )
    # A query sharing no word: only what is close in meaning.
    assert await search(memory_pool, "Which river flows through Warsaw?") == pytest.approx(
        {"The user is vegetarian.": memory_search.RELEVANCE_FLOOR + 0.1}, abs=1e-5
    )


async def test_words_that_are_not_lexemes_are_searched_literally(
    memory_pool: AsyncConnectionPool,
) -> None:
    # Quotes, backslashes and tsquery operators in a word must not break the word half's query.
    await add(memory_pool, r"The user's password hint is o'neil\stage & |pipe| !bang (x:*)", 0.2)
    for query in (r"o'neil\stage", "|pipe| & !bang", "(x:*)", "'", "\\", "the and of"):
        await memory_search.retrieve_memories(
            memory_pool, GivenQuery(), query, user_id=LOCAL_USER_ID
        )
    found = await search(memory_pool, r"What is the password hint o'neil\stage?")
    assert list(found) == [r"The user's password hint is o'neil\stage & |pipe| !bang (x:*)"]
