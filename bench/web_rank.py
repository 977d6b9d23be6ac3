"""Speed of the part of a search round we own: chunk + embed + rank 5 pages (~50 KB of Markdown).

    python -m bench.web_rank [--runs 5]

Pages: the five SQuAD 2.0 pages (../shared/evaldata/squad, CC BY-SA 4.0, read in place; EVALDATA_DIR
overrides), each cut to its first PAGE_CHARS characters at a paragraph break: about 50 KB in all, a
typical search round. Each timed round takes a different answerable question (whose answer lies in
the kept text) as its query and starts from the pages' Markdown, with an empty embedding cache (a
new user message), ending with the top 20 chunks.

Baseline, measured in the same run: the same chunks, every chunk embedded with sentence-transformers
`model.encode` in one batch (batch_size = number of chunks), dense ranking. Each attempt at going
faster is a row; recall@20 (a chunk holding an answer span in the top 20, span mapping as in
evals/evidence_ranking.py) is measured for every row over all the questions, because speed must not
cost recall. The rows "bf16 ranking copy" embed with a bfloat16 copy of the model
(rag/embedder.py's `RankingEmbedder`, what WEB_RANK_PRECISION=auto picks on a CPU with AVX512-BF16);
int8 quantization is a row for comparison, not used.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import torch

from evals.datasets import SQUAD_FILE, Squad, load_squad
from evals.datasets import SquadQuestion as Question
from evals.evidence_ranking import QueryCachingEmbedder, find_evidence
from rag import ranker
from rag.embedder import Embedder, RankingEmbedder, cpu_computes_bf16
from rag.md_chunker import Chunk, budget_for, chunk_pages
from rag.search_providers import SearchResult

PAGE_CHARS = 10_000
TOP_K = 20


def bench_pages(squad: Squad) -> Squad:
    """Each page's first PAGE_CHARS characters (cut at a paragraph break) and the questions whose
    answer spans all lie in the kept text."""
    pages = {}
    for title, text in squad.pages.items():
        cut = text.rfind("\n\n", 0, PAGE_CHARS)
        pages[title] = text[: cut if cut > 0 else PAGE_CHARS]
    questions = [
        q for q in squad.answerable if all(end <= len(pages[q.page]) for _, end in q.spans)
    ]
    return Squad(pages, questions)


Round = Callable[[str], Awaitable[list[int]]]  # query → indices of the top chunks


class CountingEmbedder:
    """The app's embedder, counting the chunks it embeds (the rows' "embedded" column)."""

    def __init__(self, embedder: Embedder | RankingEmbedder) -> None:
        self.embedder = embedder
        self.count = 0

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.count += len(texts)
        return await self.embedder.embed_documents(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return await self.embedder.embed_query(text)


class Bench:
    def __init__(self, embedder: Embedder, squad: Squad, budget: int) -> None:
        self.embedder = embedder
        self.model = embedder.model
        self.squad = squad
        self.results: list[SearchResult] = squad.results()
        self.budget = budget
        self.chunks: list[Chunk] = chunk_pages(self.results, embedder.count_tokens, budget)
        self.index = {c.text: i for i, c in enumerate(self.chunks)}
        evidence = find_evidence(squad, squad.questions, self.chunks)
        self.relevant = evidence.by_span
        self.queries = QueryCachingEmbedder(embedder)  # recall runs: each query embedded once
        self.counting = CountingEmbedder(RankingEmbedder(embedder, "float32"))
        self.counting_bf16 = CountingEmbedder(RankingEmbedder(embedder, "bfloat16"))

    @property
    def embedded(self) -> int:
        return self.counting.count + self.counting_bf16.count

    def chunk(self) -> list[Chunk]:
        return chunk_pages(self.results, self.embedder.count_tokens, self.budget)

    # --- ways to run a round ------------------------------------------------------------------

    def encode_round(self, batch_size: int | None, model: torch.nn.Module | None = None) -> Round:
        """Chunk, embed every chunk with model.encode, dense top 20."""
        st_model = model or self.model

        async def run(query: str) -> list[int]:
            chunks = self.chunk()
            texts = [c.text for c in chunks]
            self.counting.count += len(texts)  # the bench's count of chunks embedded
            vectors = st_model.encode(
                texts,
                batch_size=batch_size or len(texts),
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            query_vector = st_model.encode(
                [query], normalize_embeddings=True, show_progress_bar=False
            )[0]
            order = np.argsort(-(vectors @ query_vector), kind="stable")[:TOP_K]
            return [int(i) for i in order]

        return run

    def ranker_round(
        self, cache: dict[str, np.ndarray] | None = None, bf16: bool = False, **options: object
    ) -> Round:
        """Chunk (in a worker thread), then rag.ranker.rank_chunks with a fresh cache, embedding
        with the float32 model or the bf16 ranking copy."""
        embedder = self.counting_bf16 if bf16 else self.counting

        async def run(query: str) -> list[int]:
            chunks = await asyncio.to_thread(self.chunk)
            ranked = await ranker.rank_chunks(
                query,
                chunks,
                embedder,
                TOP_K,
                cache={} if cache is None else cache,
                **options,  # type: ignore[arg-type]
            )
            return [self.index[r.chunk.text] for r in ranked]

        return run

    # --- measuring ----------------------------------------------------------------------------

    async def time_rounds(self, run: Round, queries: list[str]) -> list[float]:
        await run(queries[-1])  # warm-up: first-call costs are start-up, not a round
        seconds = []
        for query in queries:
            started = time.perf_counter()
            await run(query)
            seconds.append(time.perf_counter() - started)
        return seconds

    async def recall(self, rank: Callable[[Question], Awaitable[list[int]]]) -> tuple[float, float]:
        """(recall@5, recall@20) over the bench questions."""
        at_5 = at_20 = 0
        for q in self.squad.questions:
            top = await rank(q)
            at_5 += bool(set(top[:5]) & self.relevant[q.id])
            at_20 += bool(set(top[:TOP_K]) & self.relevant[q.id])
        n = len(self.squad.questions)
        return at_5 / n, at_20 / n

    async def dense_recall(self, model: torch.nn.Module | None = None) -> tuple[float, float]:
        """recall@20 of dense ranking with every chunk embedded by `model` (vectors made once)."""
        st_model = model or self.model
        vectors = st_model.encode([c.text for c in self.chunks], normalize_embeddings=True)
        questions = [q.question for q in self.squad.questions]
        query_vectors = st_model.encode(questions, normalize_embeddings=True)
        by_id = dict(zip([q.id for q in self.squad.questions], query_vectors, strict=True))

        async def rank(q: Question) -> list[int]:
            order = np.argsort(-(vectors @ by_id[q.id]), kind="stable")[:TOP_K]
            return [int(i) for i in order]

        return await self.recall(rank)

    async def ranker_recall(self, bf16: bool = False, **options: object) -> tuple[float, float]:
        cache: dict[str, np.ndarray] = {}  # shared: results don't depend on it, only speed
        # Float32: each query embedded once over the rows (a cache); bf16: the copy's own vectors.
        embedder = self.counting_bf16 if bf16 else self.queries

        async def rank(q: Question) -> list[int]:
            ranked = await ranker.rank_chunks(
                q.question,
                self.chunks,
                embedder,
                TOP_K,
                cache=cache,
                **options,  # type: ignore[arg-type]
            )
            return [self.index[r.chunk.text] for r in ranked]

        return await self.recall(rank)


def bf16_model(model: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(model).to(torch.bfloat16)


def int8_model(model: torch.nn.Module) -> torch.nn.Module:
    return torch.ao.quantization.quantize_dynamic(
        copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8
    )


@dataclass
class Attempt:
    name: str
    run: Round
    recall: Callable[[], Awaitable[tuple[float, float]]]
    note: str = ""


async def run_bench(runs: int) -> None:
    embedder = Embedder()
    await embedder.load()
    squad = bench_pages(load_squad(SQUAD_FILE))
    bench = Bench(embedder, squad, budget_for(embedder))
    step = max(1, len(squad.questions) // runs)
    queries = [q.question for q in squad.questions[::step][:runs]]
    kilobytes = sum(len(r.content.encode()) for r in bench.results) / 1000
    tokens = sum(c.token_count for c in bench.chunks)
    print(
        f"Chunk + embed + rank, {len(bench.results)} pages, {kilobytes:.0f} KB of Markdown,"
        f" {len(bench.chunks)} chunks ({tokens} tokens), budget {bench.budget}. Median of {runs}"
        f" rounds, each a different query, attempts interleaved round by round (so a busy"
        f" machine slows them alike); CPU = process CPU time, all threads. Recall over"
        f" {len(squad.questions)} questions. torch threads: {torch.get_num_threads()}. This CPU"
        f" {'computes' if cpu_computes_bf16() else 'lacks'} bfloat16 (AVX512-BF16).\n"
    )
    threads = torch.get_num_threads()

    def one_thread(run: Round) -> Round:
        async def wrapped(query: str) -> list[int]:
            torch.set_num_threads(1)
            try:
                return await run(query)
            finally:
                torch.set_num_threads(threads)

        return wrapped

    def embed_batch(run: Round, size: int) -> Round:
        async def wrapped(query: str) -> list[int]:
            default = ranker.EMBED_BATCH
            ranker.EMBED_BATCH = size
            try:
                return await run(query)
            finally:
                ranker.EMBED_BATCH = default

        return wrapped

    batch = ranker.EMBED_BATCH
    warm: dict[str, np.ndarray] = {}
    await bench.ranker_round(cache=warm, method="hybrid", dense_candidates=None)(queries[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices
        bf16 = bf16_model(bench.model)
        int8 = int8_model(bench.model)
    native_bf16 = cpu_computes_bf16()
    default_f32 = " (default here)" if not native_bf16 else " (default without AVX512-BF16)"
    default_bf16 = " (default here)" if native_bf16 else " (default with AVX512-BF16)"
    attempts = [
        Attempt(
            "baseline: model.encode, one batch, dense",
            bench.encode_round(None),
            bench.dense_recall,
        ),
        Attempt(
            "model.encode, batches of 32 sorted by length (its default), dense",
            bench.encode_round(32),
            bench.dense_recall,
        ),
        Attempt(
            "model.encode, batches of 8 sorted by length, dense",
            bench.encode_round(8),
            bench.dense_recall,
        ),
        Attempt(
            "Embedder, one call (its batches of 64), dense, all chunks",
            embed_batch(bench.ranker_round(method="dense"), 64),
            lambda: bench.ranker_recall(method="dense"),
        ),
        Attempt(
            f"Embedder, calls of {batch} sorted by length, dense, all chunks",
            bench.ranker_round(method="dense"),
            lambda: bench.ranker_recall(method="dense"),
        ),
        Attempt(
            f"hybrid (BM25 + dense, RRF), all chunks embedded, calls of {batch}",
            bench.ranker_round(method="hybrid", dense_candidates=None),
            lambda: bench.ranker_recall(method="hybrid", dense_candidates=None),
        ),
        Attempt(
            f"hybrid, BM25 prefilter: top {ranker.DENSE_CANDIDATES} embedded, one call",
            embed_batch(bench.ranker_round(), 64),
            bench.ranker_recall,
        ),
        *[
            Attempt(
                f"hybrid, BM25 prefilter: top {n} embedded, calls of {batch}"
                + (default_f32 if n == ranker.DENSE_CANDIDATES else ""),
                bench.ranker_round(method="hybrid", dense_candidates=n),
                lambda n=n: bench.ranker_recall(method="hybrid", dense_candidates=n),
            )
            for n in (40, 30, 20, 15, 10)
        ],
        Attempt(
            "default, later round of the same message (pages seen: cache hits)",
            bench.ranker_round(cache=warm),
            bench.ranker_recall,
        ),
        Attempt(
            "default, torch threads = 1", one_thread(bench.ranker_round()), bench.ranker_recall
        ),
        Attempt(
            f"hybrid, top {ranker.DENSE_CANDIDATES} embedded, bf16 ranking copy{default_bf16}",
            bench.ranker_round(bf16=True),
            lambda: bench.ranker_recall(bf16=True),
        ),
        Attempt(
            "bf16 ranking copy, all chunks embedded, dense",
            bench.ranker_round(bf16=True, method="dense"),
            lambda: bench.ranker_recall(bf16=True, method="dense"),
        ),
        Attempt(
            "baseline with bf16 weights",
            bench.encode_round(None, bf16),
            lambda: bench.dense_recall(bf16),
        ),
        Attempt(
            "baseline with int8 dynamic quantization",
            bench.encode_round(None, int8),
            lambda: bench.dense_recall(int8),
            "not used: recall@5 drops",
        ),
    ]
    for attempt in attempts:
        await attempt.run(queries[-1])  # warm-up: first-call costs are start-up, not a round
    wall: dict[str, list[float]] = {a.name: [] for a in attempts}
    cpu: dict[str, list[float]] = {a.name: [] for a in attempts}
    embedded: dict[str, list[int]] = {a.name: [] for a in attempts}
    for query in queries:
        for attempt in attempts:
            count = bench.embedded
            started, started_cpu = time.perf_counter(), time.process_time()
            await attempt.run(query)
            wall[attempt.name].append(time.perf_counter() - started)
            cpu[attempt.name].append(time.process_time() - started_cpu)
            embedded[attempt.name].append(bench.embedded - count)

    base = statistics.median(wall[attempts[0].name])
    base_cpu = statistics.median(cpu[attempts[0].name])
    print(
        "| what | chunks embedded | median | vs baseline | CPU | vs baseline (CPU)"
        " | recall@5 | recall@20 | note |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for attempt in attempts:
        seconds = statistics.median(wall[attempt.name])
        cpu_seconds = statistics.median(cpu[attempt.name])
        at_5, at_20 = await attempt.recall()
        print(
            f"| {attempt.name} | {statistics.mean(embedded[attempt.name]):.0f}"
            f" | {seconds * 1000:.0f} ms | {base / seconds:.1f}×"
            f" | {cpu_seconds * 1000:.0f} ms | {base_cpu / cpu_seconds:.1f}×"
            f" | {at_5:.3f} | {at_20:.3f} | {attempt.note} |"
        )
    chunk_seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        bench.chunk()
        chunk_seconds.append(time.perf_counter() - started)
    print(
        f"\nChunking alone (in every row): {statistics.median(chunk_seconds) * 1000:.0f} ms"
        " per round."
    )
    embedder.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run_bench(args.runs))


if __name__ == "__main__":
    main()
