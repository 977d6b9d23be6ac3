"""Chunk ranking: recall on the SQuAD pages above a measured floor, the per-message embedding
cache, the BM25 prefilter and the edge cases."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from evals.datasets import SQUAD_FILE, load_squad, sample
from evals.evidence_ranking import QueryCachingEmbedder, find_evidence
from rag import ranker
from rag.embedder import Embedder
from rag.md_chunker import Chunk, budget_for, chunk_pages
from rag.ranker import rank_chunks

SQUAD = SQUAD_FILE
QUESTIONS = 200  # evenly spread over the five pages; all 872 take a few minutes
# Measured with `python -m evals evidence-ranking` (default: hybrid, BM25 prefilter 20): recall@20
# 0.993 and recall@5 0.979 on all 872 answerable questions; `--limit 200` (these 200): 0.985 and
# 0.970, dense-only 0.985 and 0.895. The floors leave a margin of 1.5 to 3 points (3 to 6
# questions) for model and library drift; a broken chunker, mapping or fusion falls far below.
RECALL_AT_20_FLOOR = 0.97
RECALL_AT_5_FLOOR = 0.94
DENSE_RECALL_AT_5_FLOOR = 0.87
DEFAULT_BUDGET = 256


class CountingEmbedder:
    """The real embedder, counting what it is asked to embed."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.document_calls = 0
        self.documents: list[str] = []

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.document_calls += 1
        self.documents.extend(texts)
        return await self.embedder.embed_documents(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return await self.embedder.embed_query(text)


def chunk(text: str, source: int = 0) -> Chunk:
    return Chunk(
        f"[Page: P{source} | Section: S]\n{text}", f"https://e.org/{source}", "P", "S", 0, 0
    )


async def recall(
    embedder: QueryCachingEmbedder, method: ranker.Method, cache: dict[str, np.ndarray]
) -> tuple[float, float]:
    squad = load_squad(SQUAD)
    questions = sample(squad.answerable, QUESTIONS)
    chunks = chunk_pages(squad.results(), embedder.embedder.count_tokens, DEFAULT_BUDGET)
    evidence = find_evidence(squad, questions, chunks)
    index = {id(c): i for i, c in enumerate(chunks)}
    at_5 = at_20 = 0
    for q in questions:
        ranked = await rank_chunks(q.question, chunks, embedder, 20, cache, method=method)
        relevant = [r.rank for r in ranked if index[id(r.chunk)] in evidence.by_span[q.id]]
        at_20 += bool(relevant)
        at_5 += bool(relevant) and relevant[0] <= 5
    return at_5 / len(questions), at_20 / len(questions)


async def test_squad_recall_above_floor(embedder: Embedder) -> None:
    assert budget_for(embedder) == DEFAULT_BUDGET
    queries = QueryCachingEmbedder(embedder)
    cache: dict[str, np.ndarray] = {}
    at_5, at_20 = await recall(queries, ranker.DEFAULT_METHOD, cache)
    assert at_20 >= RECALL_AT_20_FLOOR
    assert at_5 >= RECALL_AT_5_FLOOR
    # The default must stay the better of the two measured: hybrid beats dense-only clearly at
    # 5 (at 20 both are near the ceiling).
    dense_at_5, dense_at_20 = await recall(queries, "dense", cache)
    assert dense_at_5 >= DENSE_RECALL_AT_5_FLOOR
    assert dense_at_20 >= RECALL_AT_20_FLOOR
    assert at_5 > dense_at_5 + 0.03


async def test_cache_avoids_embedding_a_page_twice(embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    first = [chunk(f"The steam engine number {i} was built in 17{i:02d}.", 0) for i in range(8)]
    second = [chunk(f"The water wheel number {i} turned a mill in 18{i:02d}.", 1) for i in range(4)]
    cache: dict[str, np.ndarray] = {}
    await rank_chunks("steam engine", first, counting, cache=cache, dense_candidates=None)
    assert counting.document_calls == 1 and len(counting.documents) == 8
    # Round 2 of the same message: the same page again plus a new one; only the new is embedded.
    ranked = await rank_chunks(
        "water wheel mill", first + second, counting, cache=cache, dense_candidates=None
    )
    assert counting.document_calls == 2 and len(counting.documents) == 12
    assert counting.documents[8:] == [c.text for c in second]
    assert ranked[0].chunk in second
    # Nothing new at all: no embedding call.
    await rank_chunks("steam", first + second, counting, cache=cache, dense_candidates=None)
    assert counting.document_calls == 2
    # A cache is per message: another message starts empty and embeds again.
    await rank_chunks("steam", first, counting, cache={}, dense_candidates=None)
    assert counting.document_calls == 3


async def test_identical_chunks_are_embedded_once(embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    same = [chunk("Watt improved the Newcomen engine in 1769."), chunk("Watt's engine.")] * 3
    ranked = await rank_chunks("Watt engine", same, counting, cache={}, dense_candidates=None)
    assert len(counting.documents) == 2
    assert len(ranked) == 6


async def test_prefilter_embeds_only_the_bm25_candidates(embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    chunks = [
        chunk(f"Report {i}: the boiler pressure was {i} bar in the steam plant.") for i in range(50)
    ]
    chunks.append(chunk("Unrelated text about gardening and tomatoes."))
    ranked = await rank_chunks("boiler pressure", chunks, counting, top_k=20, dense_candidates=10)
    assert len(counting.documents) == 10
    assert len(ranked) == 20
    assert [r.rank for r in ranked] == list(range(1, 21))
    assert all(a.score >= b.score for a, b in pairwise(ranked))
    assert chunks[-1] not in [r.chunk for r in ranked]


async def test_no_shared_words_falls_back_to_dense(embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    chunks = [
        chunk("The cat sat quietly on the warm windowsill."),
        chunk("Quarterly revenue grew thanks to strong exports."),
    ]
    ranked = await rank_chunks("kitten", chunks, counting)
    assert len(counting.documents) == 2
    assert ranked[0].chunk is chunks[0]


async def test_edge_cases(embedder: Embedder) -> None:
    assert await rank_chunks("anything", [], embedder) == []
    chunks = [chunk(f"Engine {i} pressure readings.") for i in range(5)]
    assert await rank_chunks("engine", chunks, embedder, top_k=0) == []
    ranked = await rank_chunks("engine", chunks, embedder, top_k=3)
    assert [r.rank for r in ranked] == [1, 2, 3]
    bm25_only = await rank_chunks("engine 3", chunks, embedder, method="bm25")
    assert bm25_only[0].chunk is chunks[3]


@pytest.mark.parametrize("method", ["dense", "hybrid"])
async def test_methods_find_the_obvious_chunk(embedder: Embedder, method: ranker.Method) -> None:
    chunks = [
        chunk("Warsaw is the capital and largest city of Poland."),
        chunk("The immune system protects the body from infection."),
        chunk("Packet switching groups data into packets."),
    ]
    ranked = await rank_chunks("What is the capital of Poland?", chunks, embedder, method=method)
    assert ranked[0].chunk is chunks[0]
