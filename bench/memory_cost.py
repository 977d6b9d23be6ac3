"""Where one memory search's time goes: pool checkout, Postgres planning and execution, the rest.

    python -m bench.memory_cost [--memories 20000] [--queries 100]

A quick look for #17's "memory search p95 < 10 ms at 100k" (bench/memory.py measures the search
itself at 1k-100k with real memories; loading 100k takes many minutes). Here: an embedded Postgres
in a temporary folder with the app's schema, --memories rows of random unit vectors (a hard case
for HNSW: every row about as far as any other) and texts of random words from a small vocabulary,
then --queries searches, twice over, each timed four ways: a pool checkout with `SELECT 1`, the
whole `retrieve_memories` (query vector given), and EXPLAIN ANALYZE of its statement (Postgres's
planning and execution times). The app's pool prepares a statement after its 5th use on a
connection (psycopg's default), so the planning time is mostly not paid by the app.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from psycopg_pool import AsyncConnectionPool

from bench.memory import GivenVectors, analyze, bulk_load
from core.accounts import LOCAL_USER_ID
from core.config import load_settings
from core.db import Database
from core.memory_search import (
    CANDIDATES,
    HYBRID_SQL,
    RELEVANCE_FLOOR,
    ef_search_sql,
    retrieve_memories,
)
from core.memory_store import ITERATIVE_SCAN_SQL

WORDS = ["apple", "banana", "cherry", "dog", "eagle", "falcon", "garden", "house", "island",
         "jungle", "kitten", "lemon", "mango", "night", "ocean", "piano", "queen", "river", "sun",
         "tiger", "umbrella", "violin", "water", "yacht", "zebra"]  # fmt: skip
MODEL = "random"


def unit_vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors = rng.standard_normal((count, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def percentile_ms(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000


async def measure(memories: int, query_count: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="bench-memory-cost-") as scratch:
        settings = load_settings(_env_file=None, app_data_dir=Path(scratch), database_url=None)
        database = await Database.open(settings)
        pool = database.pool
        try:
            rows = [
                (" ".join(rng.choice(WORDS, 8)) + f" item{i}", vector)
                for i, vector in enumerate(unit_vectors(rng, memories))
            ]
            await bulk_load(pool, rows, MODEL)
            await analyze(pool)
            queries = [
                " ".join(rng.choice(WORDS, 6)) + " what about it" for _ in range(query_count)
            ]
            vectors = dict(zip(queries, unit_vectors(rng, query_count), strict=True))
            embedder = GivenVectors(MODEL, vectors)
            times: dict[str, list[float]] = {
                "pool checkout + SELECT 1": [],
                "retrieve_memories (vector given)": [],
                "Postgres: planning": [],
                "Postgres: execution": [],
            }
            for _ in range(2):
                for query in queries:
                    started = time.perf_counter()
                    async with pool.connection() as conn:
                        await conn.execute("SELECT 1")
                    times["pool checkout + SELECT 1"].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    await retrieve_memories(pool, embedder, query, user_id=LOCAL_USER_ID)
                    times["retrieve_memories (vector given)"].append(time.perf_counter() - started)
                    plan = await explain(pool, query, vectors[query])
                    times["Postgres: planning"].append(plan["Planning Time"] / 1000)
                    times["Postgres: execution"].append(plan["Execution Time"] / 1000)
            return times
        finally:
            await database.close()


async def explain(pool: AsyncConnectionPool, query: str, vector: np.ndarray) -> dict[str, Any]:
    """EXPLAIN ANALYZE of retrieve_memories' statement, with its settings."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(ef_search_sql(CANDIDATES))
        await conn.execute(ITERATIVE_SCAN_SQL)
        cursor = await conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + HYBRID_SQL,
            {"text": query, "vector": vector, "model": MODEL, "candidates": CANDIDATES,
             "max_distance": 1 - RELEVANCE_FLOOR, "limit": 5, "history": False,
             "user": LOCAL_USER_ID},
        )  # fmt: skip
        row = await cursor.fetchone()
    assert row is not None
    return row[0][0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    times = asyncio.run(measure(args.memories, args.queries))
    print(f"{args.memories:,} memories (random vectors), {2 * args.queries} searches\n")
    print("| part | p50 | p95 |\n| --- | ---: | ---: |")
    for name, values in times.items():
        p50, p95 = percentile_ms(values, 0.5), percentile_ms(values, 0.95)
        print(f"| {name} | {p50:.2f} ms | {p95:.2f} ms |")


if __name__ == "__main__":
    main()
