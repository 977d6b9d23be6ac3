"""Memory at scale: `retrieve_memories` latency (p50/p95) and recall against exact search with 1k,
10k and 100k memories, and the insert rate.

    python -m bench.memory [--sizes 1000,10000,100000] [--queries 200] [--real 3000]
    python -m bench.memory --sizes 300 --queries 40 --real 300      # smoke size, ~20 s

Everything runs on an embedded Postgres (pgvector) started in a temporary data folder, deleted
afterwards; the app's data folder is never touched. The schema is the app's (core/migrations), so
the memories table has its HNSW index (vector_cosine_ops, pgvector's defaults m=16,
ef_construction=64).

Memories. Real ones first: every LoCoMo turn as "<speaker>: <text>" and the sentences of the five
SQuAD pages (../shared/evaldata, read in place, never copied; EVALDATA_DIR overrides), shuffled,
embedded by the app's embedder (up to --real of them; 2,508 exist, 390 are held out for the insert
measurements). Embedding 100k texts would take many minutes on a small CPU, so sizes beyond the
real set are filled with *derived* vectors (`derived_vectors`): by default ("mix") normalize(a + u·b
+ w·c) of three random real embeddings, u and w uniform in [0, 1], which stay in the span of real
embeddings and are about as spread out as real ones (the header prints the median nearest-neighbour
similarity of the real set and of as many derived vectors: ~0.70 both); `--derived noise` makes
clouds of Gaussian noise around the real ones instead, a harder case for the index. They are loaded
with COPY (binary) into the table with its index, which is maintained row by row as the app's
inserts would, then the table is ANALYZEd.

Queries: LoCoMo questions and SQuAD questions (half each), embedded once with the real embedder.
The store's path is timed apart from the query embedding: `memory_search.retrieve_memories` given
an embedder that hands back the precomputed vector (pool checkout with its liveness check, the SQL,
rows to objects, the relevance floor). Query embedding (`Embedder.embed_query`) is timed on its own,
and the full path (real embedder + store) at the largest size.

Recall: recall@5 is the index's own quality: the vector search's top k (k = 5, what the chat tool
asks for) against the exact top k by numpy over every stored vector. "kept" recall is what the
model would really lose: what retrieve_memories returns (hybrid: vectors and words fused, after the
relevance floor) against what the same call returns with index scans off (exact).
Rows: the app's setting (memory_store.EF_SEARCH; on a small table the planner prefers a
sequential scan, the "HNSW in plan" column says which it chose), pgvector's default ef_search 40
(the app before), 200, the index forced; baseline, in the same run: the same
SQL with index scans off (exact, sequential scan + sort).
Queries run interleaved across rows (one query on every row, then the next), after one untimed
warm-up pass, so machine noise hits all rows alike; the exact baseline gets a pass of its own
after that (its full-table scans, run in between, slowed the row after them about twofold).

Inserts, at each size: `save_grounded_memory` (quote check, embedding one text + duplicate check +
insert, under its lock)
and `add_memory` (the insert alone, vector given) on held-out real texts, and the COPY rate of the
bulk load. Rows inserted by these measurements stay (a few hundred), so the next size is exact.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from psycopg_pool import AsyncConnectionPool

from core import chat_store, memory_search, memory_store
from core.accounts import LOCAL_USER_ID
from core.config import load_settings
from core.db import Database, _configure_connection
from core.grounding import told_by
from core.memory_search import EF_SEARCH, RELEVANCE_FLOOR, ef_search_sql
from core.memory_store import NEAREST_SQL
from evals.datasets import LOCOMO_FILE, SQUAD_FILE
from rag.embedder import Embedder

K = 5  # what the retrieve_memory tool asks for
DERIVED_NOISE = 0.035  # per dimension; 384 dims → noise of norm ~0.69 before normalizing
SEED = 7
SAVE_SAMPLES = 30  # save_memory calls per size
INSERT_SAMPLES = 100  # add_memory calls per size
EXACT = "-c enable_indexscan=off -c enable_bitmapscan=off"  # the planner must scan and sort
# The planner must use the HNSW index, even on a tiny table (else: the embed_model index + a sort).
HNSW_FORCED = "-c enable_seqscan=off -c enable_sort=off"
# Row name → (server options of its connections, hnsw.ef_search given to retrieve_memories).
DEFAULT_VARIANTS = {
    f"app: ef_search {EF_SEARCH} (planner's choice of plan)": ("", EF_SEARCH),
    "ef_search 40 (pgvector's default, the app before)": ("", 40),
    "ef_search 200": ("", 200),
    f"HNSW forced (seq scans and sorts off), ef_search {EF_SEARCH}": (HNSW_FORCED, EF_SEARCH),
    "exact: index scans off (baseline)": (EXACT, EF_SEARCH),
}


def progress(message: str) -> None:
    """A line on stderr: where the run is (the tables go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- data ------------------------------------------------------------------------------------


def memory_texts() -> list[str]:
    """Real memory texts: LoCoMo turns and SQuAD sentences (at most 500 characters) that the
    store takes as their own quote (a turn said only of the other speaker, "you're so kind!",
    tells nothing of the user), shuffled."""
    texts: list[str] = []
    locomo = json.loads(LOCOMO_FILE.read_text("utf-8"))
    for conversation in locomo["conversations"]:
        for session in conversation["sessions"]:
            texts += [f"{turn['speaker']}: {turn['text']}" for turn in session["turns"]]
    squad = json.loads(SQUAD_FILE.read_text("utf-8"))
    for page in squad["pages"]:
        for paragraph in page["markdown"].split("\n\n")[1:]:  # [0] is the "# Title" line
            texts += re.split(r"(?<=[.!?])\s+(?=[A-Z])", paragraph)
    normalized = {" ".join(t.split()) for t in texts}
    unique = sorted(
        t for t in normalized if 20 <= len(t) <= memory_store.MAX_MEMORY_CHARS and told_by(t, t)
    )
    random.Random(SEED).shuffle(unique)
    return unique


def query_texts(count: int) -> list[str]:
    """`count` questions, half LoCoMo (about the memories' people), half SQuAD."""
    locomo = json.loads(LOCOMO_FILE.read_text("utf-8"))
    squad = json.loads(SQUAD_FILE.read_text("utf-8"))
    rng = random.Random(SEED)
    people = [
        " ".join(q["question"].split()) for c in locomo["conversations"] for q in c["questions"]
    ]
    pages = [" ".join(q["question"].split()) for q in squad["questions"]]
    rng.shuffle(people)
    rng.shuffle(pages)
    half = count // 2
    chosen = list(dict.fromkeys(people[:half] + pages[: count - half]))
    rng.shuffle(chosen)
    return chosen


def derived_vectors(
    real: np.ndarray, count: int, rng: np.random.Generator, kind: str = "mix"
) -> np.ndarray:
    """`count` unit vectors made from the real ones (see the module docstring).

    "mix": normalize(a + u·b + w·c), three random real vectors, u and w uniform in [0, 1]: points
    on the patches between real memories, within the span of real embeddings. "noise":
    normalize(a + u·b + σ·noise), u in [0, 0.5], Gaussian noise σ = DERIVED_NOISE per dimension:
    clouds around the real ones in all 384 directions, a harder case for the index.
    """
    a = real[rng.integers(0, len(real), count)]
    b = real[rng.integers(0, len(real), count)]
    if kind == "mix":
        c = real[rng.integers(0, len(real), count)]
        u = rng.uniform(0.0, 1.0, (count, 1)).astype(np.float32)
        w = rng.uniform(0.0, 1.0, (count, 1)).astype(np.float32)
        vectors = a + u * b + w * c
    elif kind == "noise":
        u = rng.uniform(0.0, 0.5, (count, 1)).astype(np.float32)
        noise = rng.normal(0.0, DERIVED_NOISE, a.shape).astype(np.float32)
        vectors = a + u * b + noise
    else:
        raise ValueError(f"unknown kind of derived vectors: {kind!r}")
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def nearest_similarity(vectors: np.ndarray, among: np.ndarray, sample: int = 500) -> float:
    """Median similarity of (a sample of) `vectors` to their nearest other vector in `among`."""
    picked = vectors[:sample]
    similarities = picked @ among.T
    similarities[similarities > 0.99999] = -1.0  # itself
    return float(np.median(similarities.max(axis=1)))


# --- the store --------------------------------------------------------------------------------


class GivenVectors:
    """An embedder that returns precomputed query vectors: times the store without the model."""

    def __init__(self, model_name: str, vectors: dict[str, np.ndarray]) -> None:
        self.model_name = model_name
        self.vectors = vectors

    async def embed_query(self, text: str) -> np.ndarray:
        return self.vectors[text]

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


async def open_pool(conninfo: str, options: str = "") -> AsyncConnectionPool:
    """A pool like the app's (pgvector types, liveness check on checkout), with server options."""
    pool = AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=2,
        open=False,
        configure=_configure_connection,
        check=AsyncConnectionPool.check_connection,
        kwargs={"options": options} if options else {},
    )
    await pool.open(wait=True, timeout=30)
    return pool


async def bulk_load(
    pool: AsyncConnectionPool, rows: list[tuple[str, np.ndarray]], model: str
) -> None:
    """COPY (binary) rows of (content, embedding) into memories, the HNSW index maintained (each
    text is its own quote, as for `memory_store.add_memory`)."""
    async with (
        pool.connection() as conn,
        conn.cursor() as cur,
        cur.copy(
            "COPY memories (content, quote, embedding, embed_model) FROM STDIN (FORMAT BINARY)"
        ) as copy,
    ):
        copy.set_types(["text", "text", "vector", "text"])
        for content, vector in rows:
            await copy.write_row((content, content, vector, model))


async def analyze(pool: AsyncConnectionPool) -> None:
    """Fresh planner statistics (autovacuum would get there on its own, a little later)."""
    async with pool.connection() as conn:
        await conn.execute("ANALYZE memories")


async def stored_vectors(pool: AsyncConnectionPool) -> tuple[list[uuid.UUID], np.ndarray]:
    """Every memory's id and embedding, for exact search."""
    ids: list[uuid.UUID] = []
    vectors: list[np.ndarray] = []
    async with (
        pool.connection() as conn,
        conn.cursor() as cur,
        cur.copy("COPY memories (memory_id, embedding) TO STDOUT (FORMAT BINARY)") as copy,
    ):
        copy.set_types(["uuid", "vector"])
        async for memory_id, vector in copy.rows():
            ids.append(memory_id)
            vectors.append(vector.to_numpy())
    return ids, np.asarray(vectors, dtype=np.float32)


async def count_rows(pool: AsyncConnectionPool) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) FROM memories")).fetchone()
    assert row is not None
    return int(row[0])


async def nearest_ids(
    pool: AsyncConnectionPool, vector: np.ndarray, model: str, ef_search: int, explain: bool = False
) -> list[Any]:
    """retrieve_memories' SQL with its setting: the ids of the rows before the relevance floor
    (or, with `explain`, the plan's lines)."""
    sql = ("EXPLAIN " if explain else "") + NEAREST_SQL
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(ef_search_sql(K, ef_search))
        cursor = await conn.execute(
            sql, {"vector": vector, "model": model, "limit": K, "user": LOCAL_USER_ID}
        )
        return [row[0] for row in await cursor.fetchall()]


# --- measuring ----------------------------------------------------------------------------------


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@dataclass
class SearchRow:
    """One way of searching, at one size."""

    size: int
    name: str
    p50_ms: float
    p95_ms: float
    recall_at_k: float  # rows before the floor vs the exact top k
    kept_recall: float  # rows after the floor vs the exact top k above the floor
    short: int  # searches that returned fewer than k rows before the floor
    index_used: bool


@dataclass
class InsertRow:
    size: int
    save_ms: float  # median save_memory call (embedding included)
    save_per_s: float
    add_ms: float  # median add_memory call (insert alone)
    add_per_s: float
    copy_per_s: float | None  # bulk load into the indexed table (None: nothing loaded)


@dataclass
class Report:
    real: int
    derived: str  # how the vectors beyond the real ones were made: "mix" or "noise"
    nearest_real: float
    nearest_derived: float | None
    embed_docs_per_s: float
    embed_query_ms: tuple[float, float]  # p50, p95
    end_to_end_ms: tuple[float, float]  # p50, p95 at the largest size
    searches: list[SearchRow] = field(default_factory=list)
    inserts: list[InsertRow] = field(default_factory=list)


async def measure_searches(
    pools: dict[str, AsyncConnectionPool],
    efs: dict[str, int],
    apart: set[str],
    given: GivenVectors,
    queries: list[str],
    size: int,
) -> list[SearchRow]:
    ids, matrix = await stored_vectors(next(iter(pools.values())))
    assert len(ids) == size, (len(ids), size)
    query_matrix = np.stack([given.vectors[q] for q in queries])
    similarities = query_matrix @ matrix.T
    exact_top: list[list[uuid.UUID]] = []
    exact_kept: list[set[uuid.UUID]] = []
    for row in similarities:
        top = np.argsort(-row, kind="stable")[:K]
        exact_top.append([ids[i] for i in top])
        exact_kept.append({ids[i] for i in top if row[i] >= RELEVANCE_FLOOR})

    names = list(pools)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    kept: dict[str, list[set[uuid.UUID]]] = {name: [] for name in names}

    async def timed(name: str, query: str) -> None:
        started = time.perf_counter()
        found = await memory_search.retrieve_memories(
            pools[name], given, query, user_id=LOCAL_USER_ID, limit=K, ef_search=efs[name]
        )
        seconds[name].append(time.perf_counter() - started)
        kept[name].append({m.memory_id for m in found})

    for query in queries:  # warm-up: caches and connections, not measured
        for name in names:
            await memory_search.retrieve_memories(
                pools[name], given, query, user_id=LOCAL_USER_ID, limit=K, ef_search=efs[name]
            )
    # The exact scans read the whole table: run between the others, they would slow whichever
    # row comes next (caches), so they get a pass of their own, after the interleaved one.
    for query in queries:
        for name in names:
            if name not in apart:
                await timed(name, query)
    for name in apart:
        for query in queries:
            await timed(name, query)
    rows = []
    probe = given.vectors[queries[0]]
    # retrieve_memories fuses the vector and word searches: its exact twin is the truth for it.
    truth = kept[next(iter(apart))] if apart else exact_kept
    for name in names:
        tops = [
            await nearest_ids(pools[name], given.vectors[q], given.model_name, efs[name])
            for q in queries
        ]
        plan = await nearest_ids(pools[name], probe, given.model_name, efs[name], explain=True)
        overlap = [len(set(t) & set(e)) / K for t, e in zip(tops, exact_top, strict=True)]
        wanted = sum(len(e) for e in truth)
        got = sum(len(k & e) for k, e in zip(kept[name], truth, strict=True))
        rows.append(
            SearchRow(
                size=size,
                name=name,
                p50_ms=statistics.median(seconds[name]) * 1000,
                p95_ms=percentile(seconds[name], 0.95) * 1000,
                recall_at_k=statistics.fmean(overlap),
                kept_recall=got / wanted if wanted else 1.0,
                short=sum(len(t) < min(K, size) for t in tops),
                index_used=any("memories_embedding_idx" in line for line in plan),
            )
        )
    return rows


async def measure_inserts(
    pool: AsyncConnectionPool,
    embedder: Embedder,
    save_texts: list[str],
    add_rows: list[tuple[str, np.ndarray]],
    size: int,
    copy_per_s: float | None,
) -> InsertRow:
    save_seconds = []
    chat = await chat_store.create_chat(pool, "bench")
    for text in save_texts:
        said = await chat_store.add_message(pool, chat["chat_id"], "user", text)
        started = time.perf_counter()
        await memory_store.save_grounded_memory(pool, embedder, text, text, said["message_id"])
        save_seconds.append(time.perf_counter() - started)
    add_seconds = []
    for content, vector in add_rows:
        started = time.perf_counter()
        await memory_store.add_memory(pool, content, vector, embedder.model_name)
        add_seconds.append(time.perf_counter() - started)
    return InsertRow(
        size=size,
        save_ms=statistics.median(save_seconds) * 1000,
        save_per_s=len(save_seconds) / sum(save_seconds),
        add_ms=statistics.median(add_seconds) * 1000,
        add_per_s=len(add_seconds) / sum(add_seconds),
        copy_per_s=copy_per_s,
    )


async def run(
    conninfo: str,
    embedder: Embedder,
    sizes: list[int],
    query_count: int,
    real_limit: int,
    variants: dict[str, tuple[str, int]] | None = None,
    save_samples: int = SAVE_SAMPLES,
    insert_samples: int = INSERT_SAMPLES,
    derived: str = "mix",
) -> Report:
    """Measure on the (empty, migrated) database at `conninfo`; see the module docstring.

    `variants`: row name → (server options of its connections, ef_search); the first is the app's
    path (the full path and the inserts use it).
    """
    variants = variants or DEFAULT_VARIANTS
    sizes = sorted(sizes)
    texts = memory_texts()
    per_size = save_samples + insert_samples
    held_out = texts[: per_size * len(sizes)]
    base_texts = texts[per_size * len(sizes) :][:real_limit]

    progress(f"embedding {len(base_texts)} memories")
    started = time.perf_counter()
    base_vectors = await embedder.embed_documents(base_texts)
    embed_docs_per_s = len(base_texts) / (time.perf_counter() - started)
    held_vectors = await embedder.embed_documents(held_out[save_samples * len(sizes) :])

    queries = query_texts(query_count)
    vectors: dict[str, np.ndarray] = {}
    embed_seconds = []
    await embedder.embed_query(queries[0])  # warm-up
    for query in queries:
        started = time.perf_counter()
        vectors[query] = await embedder.embed_query(query)
        embed_seconds.append(time.perf_counter() - started)
    given = GivenVectors(embedder.model_name, vectors)

    rng = np.random.default_rng(SEED)
    extra = max(0, sizes[-1] - len(base_texts))
    made = derived_vectors(base_vectors, extra, rng, derived)
    nearest_real = nearest_similarity(base_vectors, base_vectors)
    # Spread at equal counts: as many derived vectors among themselves as real ones among theirs.
    same_count = made[: len(base_vectors)]
    nearest_derived = nearest_similarity(same_count, same_count) if extra else None
    load = [(t, v) for t, v in zip(base_texts, base_vectors, strict=True)] + [
        (f"derived memory {i}", v) for i, v in enumerate(made)
    ]

    pools = {name: await open_pool(conninfo, options) for name, (options, _) in variants.items()}
    efs = {name: ef_search for name, (_, ef_search) in variants.items()}
    apart = {name for name, (options, _) in variants.items() if options == EXACT}
    report = Report(
        real=len(base_texts),
        derived=derived,
        nearest_real=nearest_real,
        nearest_derived=nearest_derived,
        embed_docs_per_s=embed_docs_per_s,
        embed_query_ms=(
            statistics.median(embed_seconds) * 1000,
            percentile(embed_seconds, 0.95) * 1000,
        ),
        end_to_end_ms=(0.0, 0.0),
    )
    try:
        main_pool = next(iter(pools.values()))
        loaded = 0
        for step, size in enumerate(sizes):
            missing = size - await count_rows(main_pool)
            copy_per_s = None
            if missing > 0:
                progress(f"loading {missing} memories (COPY) to reach {size}")
                started = time.perf_counter()
                await bulk_load(main_pool, load[loaded : loaded + missing], embedder.model_name)
                copy_per_s = missing / (time.perf_counter() - started)
                loaded += missing
            await analyze(main_pool)
            progress(f"searching {size} memories")
            report.searches += await measure_searches(pools, efs, apart, given, queries, size)
            saves = held_out[step * save_samples : (step + 1) * save_samples]
            adds_at = step * insert_samples
            add_texts = held_out[save_samples * len(sizes) :][adds_at : adds_at + insert_samples]
            add_vectors = held_vectors[adds_at : adds_at + insert_samples]
            add_rows = list(zip(add_texts, add_vectors, strict=True))
            if step == len(sizes) - 1:
                seconds = []
                for query in queries:
                    started = time.perf_counter()
                    await memory_search.retrieve_memories(
                        main_pool, embedder, query, user_id=LOCAL_USER_ID, limit=K
                    )
                    seconds.append(time.perf_counter() - started)
                report.end_to_end_ms = (
                    statistics.median(seconds) * 1000,
                    percentile(seconds, 0.95) * 1000,
                )
            progress(f"inserting at {size} memories")
            report.inserts.append(
                await measure_inserts(main_pool, embedder, saves, add_rows, size, copy_per_s)
            )
    finally:
        for pool in pools.values():
            await pool.close()
    return report


def print_report(report: Report, queries: int) -> None:
    derived = (
        f"; the rest derived ({report.derived}), nearest-neighbour similarity"
        f" median {report.nearest_derived:.2f} at the same count"
        if report.nearest_derived is not None
        else ""
    )
    print(
        f"Memories: {report.real} real (embedded at {report.embed_docs_per_s:.0f} texts/s,"
        f" nearest-neighbour similarity median {report.nearest_real:.2f}){derived}."
        f" {queries} queries, k = {K}, relevance floor {RELEVANCE_FLOOR}.\n"
    )
    print(
        f"Query embedding (Embedder.embed_query): p50 {report.embed_query_ms[0]:.1f} ms,"
        f" p95 {report.embed_query_ms[1]:.1f} ms. Full retrieve_memories (embedding + store) at"
        f" {report.searches[-1].size:,} memories: p50 {report.end_to_end_ms[0]:.1f} ms,"
        f" p95 {report.end_to_end_ms[1]:.1f} ms.\n"
    )
    print("Store path (retrieve_memories, query vector given)\n")
    print(
        "| memories | search | p50 | p95 | recall@5 | kept recall (after floor)"
        " | short of 5 rows | HNSW in plan |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in report.searches:
        print(
            f"| {row.size:,} | {row.name} | {row.p50_ms:.2f} ms | {row.p95_ms:.2f} ms"
            f" | {row.recall_at_k:.3f} | {row.kept_recall:.3f} | {row.short}"
            f" | {'yes' if row.index_used else 'no'} |"
        )
    print("\nInserts (one at a time, HNSW index maintained)\n")
    print(
        f"| memories | save_memory (embed + dedupe + insert), {SAVE_SAMPLES} calls"
        f" | add_memory (insert alone), {INSERT_SAMPLES} calls | COPY bulk load |"
    )
    print("| ---: | ---: | ---: | ---: |")
    for row in report.inserts:
        copy = f"{row.copy_per_s:,.0f} rows/s" if row.copy_per_s else "–"
        print(
            f"| {row.size:,} | {row.save_ms:.1f} ms ({row.save_per_s:.0f}/s)"
            f" | {row.add_ms:.2f} ms ({row.add_per_s:.0f}/s) | {copy} |"
        )


async def main_async(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as scratch:
        settings = load_settings(_env_file=None, app_data_dir=Path(scratch), database_url=None)
        database = await Database.open(settings)
        embedder = Embedder()
        try:
            await embedder.load()
            report = await run(
                database.conninfo, embedder, sizes, args.queries, args.real, derived=args.derived
            )
        finally:
            embedder.close()
            await database.close()
    print_report(report, args.queries)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="1000,10000,100000", help="memory counts, comma-separated"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--real", type=int, default=3000, help="at most this many real memories")
    parser.add_argument("--derived", choices=["mix", "noise"], default="mix")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
