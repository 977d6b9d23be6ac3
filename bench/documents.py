"""Documents: ingest throughput of `rag.document_ingest.ingest_document`, the embedding batch size
for document chunks, and `search_documents` latency and recall at 10k and 100k chunks.

    python -m bench.documents                 # 100-page PDF + 50 files, 10k and 100k chunks
    python -m bench.documents --quick         # 10 pages, 10 files, 2k and 10k chunks (~2 min)

Everything runs on an embedded Postgres (pgvector) in a temporary folder, deleted afterwards,
with the app's schema (core/migrations) and the bundled embedder; the app's data folder is never
touched. The text is the five SQuAD pages (../shared/evaldata/squad/pages.json, read in place,
never copied; EVALDATA_DIR overrides), cycled.

Ingest. A PDF of `--pages` pages (evals/pdf_pages.py, 40 lines of ~90 characters a page) and a
folder of `--files` files (Markdown, text, HTML and PDF in turn, one SQuAD section each) go through
the real `ingest_document` (conversion in its own limited process, chunking in a thread, embedding
in calls of EMBED_BATCH with a progress report before each, one transaction to store). Baseline,
in the same run, alternated with it: the naive path, the same pieces called directly
(`convert_document` in a thread, `document_chunks`, every chunk embedded in one call, no progress,
`store_chunks`). Each document is uploaded again for each round (a new sha: a new row).

Batch size. The PDF's chunks embedded with `Embedder.embed_documents` in calls of 8, 16, 32, 64
and all at once, the sizes interleaved round by round; the median per size.

Search. Synthetic chunks spread over 10 users (one document each), loaded with COPY (binary) into
the indexed table (HNSW and GIN maintained row by row), then ANALYZEd. The chunks are partitioned
by user (migration 0014), so the user measured is the one whose partition holds the most chunks
(users hash into partitions at random: the slowest case of the run). Their text is real (SQuAD
sentences, cycled); their vectors are derived from real embeddings of those sentences as
bench/memory.py derives them (`derived_vectors`, "mix"). Queries: SQuAD questions embedded once;
`search_documents` is given an embedder that hands back the precomputed vector, so only the store
is timed, for one user's chunks among everyone's. Recall@10: the vector half (the HNSW path with
the app's ef_search and iterative scan, LIMIT 10) against the exact top 10 of that user's chunks
by numpy; and what `search_documents(limit=10)` returns against the same call with index scans off
(exact, "kept" recall).
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from psycopg_pool import AsyncConnectionPool

from bench.memory import EXACT, GivenVectors, derived_vectors, open_pool, percentile
from core import document_store
from core.config import load_settings
from core.db import Database
from core.document_store import StoredChunk
from core.memory_search import ef_search_sql
from core.memory_store import ITERATIVE_SCAN_SQL
from evals.datasets import SQUAD_FILE
from evals.pdf_pages import pdf_with_pages, wrap
from rag import document_ingest
from rag.conversion_process import convert_in_subprocess
from rag.document_convert import convert_document
from rag.document_ingest import document_chunks, ingest_document
from rag.document_search import CANDIDATES, search_documents
from rag.embedder import Embedder

SEED = 7
LINES_PER_PAGE = 40  # ~3,000 characters: a dense page of a report
BATCHES = (8, 16, 32, 64)
USERS = 10
K = 10
MEDIA = {
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".html": "text/html",
    ".pdf": "application/pdf",
}


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- data ------------------------------------------------------------------------------------


def squad() -> dict:
    return json.loads(SQUAD_FILE.read_text("utf-8"))


def paragraphs() -> list[str]:
    """The SQuAD pages' paragraphs, in order (the "# Title" lines left out)."""
    out: list[str] = []
    for page in squad()["pages"]:
        out += [p for p in page["markdown"].split("\n\n")[1:] if p.strip()]
    return out


def sentences() -> list[str]:
    texts = {" ".join(s.split()) for p in paragraphs() for s in re.split(r"(?<=[.!?])\s+", p)}
    unique = sorted(t for t in texts if 30 <= len(t) <= 600)
    random.Random(SEED).shuffle(unique)
    return unique


def pdf_of(pages: int, salt: int) -> bytes:
    """A `pages`-page PDF of the SQuAD paragraphs cycled; `salt` makes its bytes unique."""
    lines = [line for p in paragraphs() for line in [*wrap(p), ""]]
    start = salt * 7 % len(lines)
    body = [lines[(start + i) % len(lines)] for i in range(pages * LINES_PER_PAGE)]
    chunks = [body[i : i + LINES_PER_PAGE] for i in range(0, len(body), LINES_PER_PAGE)]
    chunks[0] = [f"Report {salt}", *chunks[0][:-1]]
    return pdf_with_pages(chunks)


def folder_of(count: int, salt: int) -> list[tuple[str, bytes]]:
    """`count` files, Markdown, text, HTML and PDF in turn, each ~6 SQuAD paragraphs."""
    texts = paragraphs()
    files: list[tuple[str, bytes]] = []
    for n in range(count):
        body = [texts[(n * 6 + i) % len(texts)] for i in range(6)]
        title = f"Notes {salt}-{n}"
        kind = (".md", ".txt", ".html", ".pdf")[n % 4]
        if kind == ".md":
            data = (f"# {title}\n\n" + "\n\n".join(body)).encode()
        elif kind == ".txt":
            data = (f"{title}\n\n" + "\n\n".join(body)).encode()
        elif kind == ".html":
            paras = "".join(f"<p>{p}</p>" for p in body)
            data = f"<html><body><h1>{title}</h1>{paras}</body></html>".encode()
        else:
            lines = [title, "", *[line for p in body for line in [*wrap(p), ""]]]
            data = pdf_with_pages(
                [lines[i : i + LINES_PER_PAGE] for i in range(0, len(lines), LINES_PER_PAGE)]
            )
        files.append((f"notes-{salt}-{n}{kind}", data))
    return files


# --- ingest ----------------------------------------------------------------------------------


@dataclass
class IngestRow:
    name: str
    path: str  # "ingest_document" or "naive"
    seconds: float
    pages: int
    chunks: int

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds


async def new_document(pool: AsyncConnectionPool, user: uuid.UUID, name: str, data: bytes):
    row, _ = await document_store.add_document(pool, user, name, MEDIA[Path(name).suffix], data)
    return row["document_id"]


async def real_path(pool, embedder, user, files: list[tuple[str, bytes]]) -> tuple[int, int]:
    pages = chunks = 0
    for name, data in files:
        document_id = await new_document(pool, user, name, data)
        result = await ingest_document(pool, embedder, document_id, name, data)
        pages += result.pages or 1
        chunks += result.chunks
    return pages, chunks


async def naive_path(pool, embedder, user, files: list[tuple[str, bytes]]) -> tuple[int, int]:
    """Convert in process, embed every chunk in one call, no progress reports, store."""
    pages = chunks = 0
    for name, data in files:
        document_id = await new_document(pool, user, name, data)
        converted = await asyncio.to_thread(convert_document, data, name)
        pieces = await asyncio.to_thread(document_chunks, converted, name, embedder)
        vectors = await embedder.embed_documents([p.content for p in pieces])
        stored = [
            StoredChunk(p.page, p.heading, p.content, v)
            for p, v in zip(pieces, vectors, strict=True)
        ]
        await document_store.store_chunks(
            pool, document_id, stored, embedder.model_name, converted.kind, converted.page_count
        )
        pages += converted.page_count or 1
        chunks += len(stored)
    return pages, chunks


async def measure_ingest(pool, embedder, user, pages: int, files: int, rounds: int):
    rows: list[IngestRow] = []
    # Untimed: the first file through each path pays one-off costs (the conversion process's start
    # and imports, the embedder's first calls) that would land on whichever path ran first.
    for salt, path in enumerate((real_path, naive_path), start=10_000):
        await path(pool, embedder, user, folder_of(4, salt))
    for r in range(rounds):
        workloads = {
            f"{pages}-page PDF": lambda salt: [(f"report-{salt}.pdf", pdf_of(pages, salt))],
            f"folder of {files} files": lambda salt: folder_of(files, salt),
        }
        for name, make in workloads.items():
            paths = [("ingest_document", real_path), ("naive", naive_path)]
            if r % 2:
                paths.reverse()
            for label, path in paths:
                docs = make(r * 10 + len(rows))
                started = time.perf_counter()
                done_pages, done_chunks = await path(pool, embedder, user, docs)
                seconds = time.perf_counter() - started
                rows.append(IngestRow(name, label, seconds, done_pages, done_chunks))
                progress(f"ingest round {r + 1}: {name}, {label}: {seconds:.1f} s")
    return rows


async def measure_conversion(pages: int, rounds: int) -> dict[str, float]:
    """Seconds to convert the PDF: in its own limited process (the app) and in a thread."""
    data = pdf_of(pages, 998)
    seconds: dict[str, list[float]] = {"own process": [], "thread": []}
    for _ in range(rounds):
        started = time.perf_counter()
        await convert_in_subprocess(data, "report.pdf")
        seconds["own process"].append(time.perf_counter() - started)
        started = time.perf_counter()
        await asyncio.to_thread(convert_document, data, "report.pdf")
        seconds["thread"].append(time.perf_counter() - started)
    return {name: statistics.median(s) for name, s in seconds.items()}


async def measure_batches(embedder, pages: int, rounds: int, limit: int | None) -> dict[str, float]:
    converted = convert_document(pdf_of(pages, 999), "report.pdf")
    texts = [p.content for p in document_chunks(converted, "report.pdf", embedder)][:limit]
    sizes: list[int | None] = [b for b in BATCHES if b < len(texts)] + [None]
    seconds: dict[str, list[float]] = {}
    for r in range(rounds):
        order = sizes if r % 2 == 0 else sizes[::-1]
        for size in order:
            step = size or len(texts)
            started = time.perf_counter()
            for start in range(0, len(texts), step):
                await embedder.embed_documents(texts[start : start + step])
            name = f"{size}" if size else f"all {len(texts)} at once"
            seconds.setdefault(name, []).append(time.perf_counter() - started)
            progress(f"batch round {r + 1}: {name}: {seconds[name][-1]:.1f} s")
    return {name: len(texts) / statistics.median(s) for name, s in seconds.items()}


# --- search ----------------------------------------------------------------------------------


@dataclass
class SearchRow:
    chunks: int
    user_chunks: int
    p50_ms: float
    p95_ms: float
    exact_p50_ms: float
    exact_p95_ms: float
    vector_recall: float  # HNSW half's top 10 vs exact top 10 (numpy) of the user's chunks
    kept_recall: float  # search_documents(limit=10) vs the same with index scans off
    load_s: float
    partition_users: int = 0  # users whose chunks share the measured user's partition
    partition_chunks: int = 0


async def crowded_user(pool, owners) -> tuple[uuid.UUID, int, int]:
    """The user whose partition of the chunks (migration 0014) holds the most other users'
    chunks: the slowest case to measure. Returns (user, users in it, chunks in it)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT tableoid, user_id, count(*) FROM document_chunks GROUP BY 1, 2"
        )
        rows = await cur.fetchall()
    by_partition: dict[int, list[tuple[uuid.UUID, int]]] = {}
    for partition, user, count in rows:
        by_partition.setdefault(partition, []).append((user, count))
    order = [user for user, _ in owners]
    crowded = max(by_partition.values(), key=lambda users: (sum(c for _, c in users), len(users)))
    user = min((u for u, _ in crowded), key=order.index)
    return user, len(crowded), sum(c for _, c in crowded)


async def make_users(pool: AsyncConnectionPool, count: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(user, document) pairs: a user and one ready document of theirs each."""
    out = []
    async with pool.connection() as conn:
        for n in range(count):
            cur = await conn.execute(
                "INSERT INTO users (username) VALUES (%s) RETURNING user_id", (f"bench{n}",)
            )
            (user,) = await cur.fetchone()  # type: ignore[misc]
            cur = await conn.execute(
                "INSERT INTO documents (user_id, filename, media_type, size_bytes, sha256, content,"
                " status, kind) VALUES (%s, %s, 'text/plain', 1, %s, '', 'ready', 'text')"
                " RETURNING document_id",
                (user, f"bulk-{n}.txt", uuid.uuid4().bytes),
            )
            (document,) = await cur.fetchone()  # type: ignore[misc]
            out.append((user, document))
    return out


async def bulk_chunks(pool, owners, texts, vectors, model: str, offset: int, count: int) -> None:
    async with (
        pool.connection() as conn,
        conn.cursor() as cur,
        cur.copy(
            "COPY document_chunks (document_id, user_id, ordinal, page, heading, content,"
            " embedding, embed_model) FROM STDIN (FORMAT BINARY)"
        ) as copy,
    ):
        copy.set_types(["uuid", "uuid", "int4", "int4", "text", "text", "vector", "text"])
        for i in range(count):
            n = offset + i
            user, document = owners[n % len(owners)]
            text = texts[n % len(texts)]
            await copy.write_row(
                (document, user, n // len(owners), n % 97 + 1, "", text, vectors[i], model)
            )
    async with pool.connection() as conn:
        await conn.execute("ANALYZE document_chunks")


VECTOR_SQL = (
    "SELECT chunk_id FROM document_chunks WHERE user_id = %(user)s AND embed_model = %(model)s"
    " ORDER BY embedding <=> %(vector)s LIMIT %(k)s"
)


async def hnsw_top(pool, user, model, vector) -> list[uuid.UUID]:
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(ef_search_sql(CANDIDATES))
        await conn.execute(ITERATIVE_SCAN_SQL)
        params = {"user": user, "model": model, "vector": vector, "k": K}
        cur = await conn.execute(VECTOR_SQL, params)
        return [row[0] for row in await cur.fetchall()]


async def user_vectors(pool, user) -> tuple[list[uuid.UUID], np.ndarray]:
    ids, vecs = [], []
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT chunk_id, embedding FROM document_chunks WHERE user_id = %s", (user,)
        )
        for chunk_id, vector in await cur.fetchall():
            ids.append(chunk_id)
            vecs.append(vector.to_numpy())
    return ids, np.asarray(vecs, dtype=np.float32)


async def measure_search(pool, exact_pool, given: GivenVectors, user, queries, size, load_s):
    ids, matrix = await user_vectors(pool, user)
    vector_hits = kept_hits = kept_total = 0
    fast: list[float] = []
    slow: list[float] = []
    for query in queries[:10]:  # warm-up
        await search_documents(pool, given, query, user_id=user, limit=K)
    # Each path in a pass of its own: an exact scan reads the whole table through the shared
    # buffers, so one between two index searches would time the next one on evicted pages.
    found: dict[str, set[uuid.UUID]] = {}
    for query in queries:
        started = time.perf_counter()
        chunks = await search_documents(pool, given, query, user_id=user, limit=K)
        fast.append(time.perf_counter() - started)
        found[query] = {c.chunk_id for c in chunks}
    for query in queries:
        started = time.perf_counter()
        exact = await search_documents(exact_pool, given, query, user_id=user, limit=K)
        slow.append(time.perf_counter() - started)
        expected = {c.chunk_id for c in exact}
        kept_hits += len(expected & found[query])
        kept_total += len(expected)
    for query in queries:
        vector = given.vectors[query]
        top = np.argsort(-(matrix @ vector), kind="stable")[:K]
        hnsw = await hnsw_top(pool, user, given.model_name, vector)
        vector_hits += len({ids[i] for i in top} & set(hnsw))
    return SearchRow(
        size, len(ids),
        percentile(fast, 0.5) * 1000, percentile(fast, 0.95) * 1000,
        percentile(slow, 0.5) * 1000, percentile(slow, 0.95) * 1000,
        vector_hits / (K * len(queries)), kept_hits / kept_total if kept_total else 1.0, load_s,
    )  # fmt: skip


# --- run -------------------------------------------------------------------------------------


@dataclass
class Report:
    load: float
    ingest: list[IngestRow] = field(default_factory=list)
    batches: dict[str, float] = field(default_factory=dict)  # chunks/s by batch size
    conversion: dict[str, float] = field(default_factory=dict)  # seconds, the PDF
    searches: list[SearchRow] = field(default_factory=list)
    embed_batch: int = document_ingest.EMBED_BATCH
    real_vectors: int = 0


async def run(conninfo: str, embedder: Embedder, args: argparse.Namespace) -> Report:
    report = Report(load=os.getloadavg()[0])
    pool = await open_pool(conninfo)
    exact_pool = await open_pool(conninfo, EXACT)
    try:
        owners = await make_users(pool, USERS)
        if not args.no_ingest:
            ingest_user = owners[0][0]
            progress("ingest")
            report.ingest = await measure_ingest(
                pool, embedder, ingest_user, args.pages, args.files, args.rounds
            )
            async with pool.connection() as conn:  # the search measures synthetic chunks only
                await conn.execute("DELETE FROM documents WHERE user_id = %s AND kind <> 'text'",
                                   (ingest_user,))  # fmt: skip
            progress("batch sizes")
            report.conversion = await measure_conversion(args.pages, max(args.rounds, 2))
            report.batches = await measure_batches(
                embedder, args.pages, args.batch_rounds, args.batch_texts
            )
        texts = sentences()[: args.real]
        progress(f"embedding {len(texts)} real sentences")
        real = np.asarray(await embedder.embed_documents(texts), dtype=np.float32)
        report.real_vectors = len(texts)
        data = squad()
        questions = [" ".join(q["question"].split()) for q in data["questions"]]
        random.Random(SEED).shuffle(questions)
        questions = list(dict.fromkeys(questions))[: args.queries]
        given = GivenVectors(
            embedder.model_name,
            {q: await embedder.embed_query(q) for q in questions},
        )
        rng = np.random.default_rng(SEED)
        loaded = 0
        for size in [int(s) for s in args.sizes.split(",")]:
            count = size - loaded
            vectors = real if loaded == 0 and count <= len(real) else None
            if vectors is None or len(vectors) < count:
                vectors = derived_vectors(real, count, rng)
            started = time.perf_counter()
            await bulk_chunks(pool, owners, texts, vectors, embedder.model_name, loaded, count)
            load_s = time.perf_counter() - started
            loaded = size
            progress(f"{size:,} chunks loaded in {load_s:.0f} s; searching")
            user, row_users, row_chunks = await crowded_user(pool, owners)
            row = await measure_search(pool, exact_pool, given, user, questions, size, load_s)
            row.load_s = load_s
            row.partition_users, row.partition_chunks = row_users, row_chunks
            report.searches.append(row)
            progress(f"{size:,}: p50 {row.p50_ms:.1f} ms p95 {row.p95_ms:.1f} ms")
    finally:
        await exact_pool.close()
        await pool.close()
    return report


def print_report(report: Report, args: argparse.Namespace) -> None:
    print(
        f"Load average at start {report.load:.1f}; EMBED_BATCH = {report.embed_batch};"
        f" {args.rounds} round(s), paths alternated.\n"
    )
    if report.ingest:
        print("Ingest (median of rounds)\n")
        print("| workload | path | pages | chunks | seconds | pages/s | chunks/s | vs naive |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name in dict.fromkeys(r.name for r in report.ingest):
            med = {}
            for path in ("naive", "ingest_document"):
                rows = [r for r in report.ingest if r.name == name and r.path == path]
                med[path] = statistics.median(r.seconds for r in rows)
                pages, chunks = rows[0].pages, rows[0].chunks
                print(
                    f"| {name} | {path} | {pages} | {chunks} | {med[path]:.1f} |"
                    f" {pages / med[path]:.2f} | {chunks / med[path]:.1f} |"
                    f" {med['naive'] / med[path]:.2f}× |"
                )
        print(
            f"\nConverting the {args.pages}-page PDF alone: in its own limited process (the app)"
            f" {report.conversion['own process']:.1f} s, in a thread"
            f" {report.conversion['thread']:.1f} s.\n"
        )
        print("Embedding batch size (the PDF's chunks, Embedder.embed_documents)\n")
        print("| texts per call | chunks/s | vs 8 |")
        print("| --- | ---: | ---: |")
        for name, rate in report.batches.items():
            print(f"| {name} | {rate:.1f} | {rate / report.batches['8']:.2f}× |")
    print(
        f"\nSearch (search_documents, query vector given, one user's chunks among {USERS} users';"
        f" vectors derived from {report.real_vectors} real embeddings; {args.queries} queries)\n"
    )
    print(
        "| chunks | the user's | their partition: users, chunks | p50 | p95 | exact p50"
        " | exact p95 | vector recall@10 | search_documents recall@10 vs exact | COPY load |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in report.searches:
        print(
            f"| {r.chunks:,} | {r.user_chunks:,} | {r.partition_users}, {r.partition_chunks:,}"
            f" | {r.p50_ms:.1f} ms | {r.p95_ms:.1f} ms"
            f" | {r.exact_p50_ms:.1f} ms | {r.exact_p95_ms:.1f} ms | {r.vector_recall:.3f}"
            f" | {r.kept_recall:.3f} | {r.load_s:.0f} s |"
        )


async def main_async(args: argparse.Namespace) -> Report:
    with tempfile.TemporaryDirectory(prefix="bench-documents-") as scratch:
        settings = load_settings(_env_file=None, app_data_dir=Path(scratch), database_url=None)
        database = await Database.open(settings)
        embedder = Embedder()
        try:
            await embedder.load()
            report = await run(database.conninfo, embedder, args)
        finally:
            embedder.close()
            await database.close()
    print_report(report, args)
    return report


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="10 pages, 10 files, 2k/10k chunks")
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--real", type=int, default=3000, help="at most this many real sentences")
    parser.add_argument("--batch-texts", type=int, default=128, help="chunks for batch sizes")
    parser.add_argument("--batch-rounds", type=int, default=2)
    parser.add_argument("--no-ingest", action="store_true", help="the search part only")
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.files, args.rounds, args.batch_texts = 10, 8, 1, 32
        args.batch_rounds = 1
        args.sizes, args.queries, args.real = "2000,10000", 40, 500
    return args


def main() -> None:
    args = parse()
    report = asyncio.run(main_async(args))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(report), default=str, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
