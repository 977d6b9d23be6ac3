"""Rank a search round's chunks against the query and keep the best `top_k`.

Default: hybrid ranking, BM25 and dense (cosine similarity of the embedder's normalized vectors)
fused with Reciprocal Rank Fusion (score = Σ 1 / (RRF_K + rank) over the two rankings). Measured on
the SQuAD pages (`python -m evals evidence-ranking`: 872 questions, the 194 chunks of all five pages
ranked per question), hybrid beats dense-only on every measure: recall@5 0.979 against 0.913,
recall@20 0.993 against 0.991, MRR 0.884 against 0.781. (BM25 alone does well on SQuAD, whose
questions were written from the paragraphs and share their words; dense keeps paraphrased queries
in reach, and the fusion is better than either at 5.)

Speed: only `DENSE_CANDIDATES` chunks are embedded per round: BM25's best, then, when fewer chunks
share a word with the query, the others in search-result order. Chunk headers name the page, so a
page whose title matches the query has every chunk matched. Candidates take the top of the fused
list; the other chunks follow by BM25 alone. When no chunk shares a word with the query, every chunk
is embedded and the ranking is dense-only. Embedding goes in calls of `EMBED_BATCH` texts of similar
length. The app passes the embedder's ranking view (rag/embedder.py), which on a CPU with
AVX512-BF16 embeds with a bfloat16 copy of the model. bench/web_rank.py (5 pages, 49 KB, 58 chunks),
against embedding every chunk in one batch: 3.9× faster in float32 and 8.1× with the bf16 copy,
recall@5 and @20 equal (2026-12-04).

`cache` maps chunk text → vector and belongs to one user message: a page seen by an earlier search
round of the same message is not embedded again. Embedding runs in the embedder's worker thread,
BM25 in a worker thread, so the event loop never waits on the CPU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from rag.md_chunker import Chunk
from rag.search_providers import BM25Scorer

Method = Literal["hybrid", "dense", "bm25"]

DEFAULT_METHOD: Method = "hybrid"
RRF_K = 60  # the usual constant (Cormack et al., 2009); keeps one list's top from dominating
DEFAULT_TOP_K = 20
# Texts per embedding call: 1.2-1.3× faster than the embedder's batches of 64 (bench/web_rank.py).
EMBED_BATCH = 8
# Chunks embedded per round (the BM25 prefilter); None embeds every chunk. As many as a round
# keeps, so meaning can reorder the whole kept list: 3.1-3.9× faster than embedding all 58 chunks
# of 5 pages with no recall lost; 15 was 3.8-5.0×, also without loss on SQuAD, but leaves the last
# five kept chunks to BM25 alone.
DENSE_CANDIDATES: int | None = 20


class EmbedderLike(Protocol):
    async def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    async def embed_query(self, text: str) -> np.ndarray: ...


@dataclass
class RankedChunk:
    chunk: Chunk
    score: float  # RRF score (hybrid), cosine similarity (dense) or BM25 score (bm25)
    rank: int  # 1 = best


def _order(scores: np.ndarray, mask: np.ndarray | None = None) -> list[int]:
    """Indices by descending score (stable: ties keep page order), only where mask is true."""
    order = np.argsort(-scores, kind="stable")
    if mask is not None:
        order = order[mask[order]]
    return [int(i) for i in order]


async def embed_chunks(
    texts: Sequence[str], embedder: EmbedderLike, cache: dict[str, np.ndarray] | None
) -> np.ndarray:
    """One vector per text, computing only the texts not already in `cache` (and each distinct
    text once)."""
    cache = {} if cache is None else cache
    missing = list(dict.fromkeys(t for t in texts if t not in cache))
    # Small batches of similar length: on CPU a batch of 64 × 256 tokens spends its time moving
    # attention matrices (batch × heads × length²) through memory; see bench/web_rank.py.
    missing.sort(key=len)
    for start in range(0, len(missing), EMBED_BATCH):
        group = missing[start : start + EMBED_BATCH]
        cache.update(zip(group, await embedder.embed_documents(group), strict=True))
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([cache[t] for t in texts])


async def rank_chunks(
    query: str,
    chunks: list[Chunk],
    embedder: EmbedderLike,
    top_k: int = DEFAULT_TOP_K,
    cache: dict[str, np.ndarray] | None = None,
    *,
    method: Method = DEFAULT_METHOD,
    dense_candidates: int | None = DENSE_CANDIDATES,
) -> list[RankedChunk]:
    """The `top_k` chunks best matching `query`, best first."""
    if not chunks or top_k <= 0:
        return []
    texts = [c.text for c in chunks]
    if method == "dense":
        similarities = await _dense_scores(query, texts, range(len(texts)), embedder, cache)
        ranked = [(i, float(similarities[i])) for i in _order(similarities)]
        return _result(chunks, ranked, top_k)

    bm25 = await asyncio.to_thread(lambda: BM25Scorer(texts).scores(query))
    matched = bm25 > 0
    if method == "bm25":
        ranked = [(i, float(bm25[i])) for i in _order(bm25, matched)]
        return _result(chunks, ranked, top_k)

    if not matched.any():  # no query word anywhere: only meaning can rank
        return await rank_chunks(query, chunks, embedder, top_k, cache, method="dense")
    lexical = _order(bm25, matched)
    if dense_candidates is None or dense_candidates >= len(chunks):
        candidates = list(range(len(chunks)))
    else:
        # BM25's best first; when fewer chunks share a word with the query, fill up with the
        # others in search-result order, so meaning still gets a say on chunks that use other
        # words (and a round never returns fewer chunks than the budget allows).
        unmatched = [i for i in range(len(chunks)) if not matched[i]]
        candidates = (lexical + unmatched)[:dense_candidates]
    similarities = await _dense_scores(query, texts, candidates, embedder, cache)
    in_candidates = np.zeros(len(chunks), dtype=bool)
    in_candidates[candidates] = True
    semantic = _order(similarities, in_candidates)
    fused = np.zeros(len(chunks), dtype=np.float64)
    for ranking in (lexical, semantic):
        for position, index in enumerate(ranking, start=1):
            fused[index] += 1.0 / (RRF_K + position)
    ranked = [(i, float(fused[i])) for i in _order(fused, fused > 0)]
    return _result(chunks, ranked, top_k)


async def _dense_scores(
    query: str,
    texts: list[str],
    indices: Sequence[int],
    embedder: EmbedderLike,
    cache: dict[str, np.ndarray] | None,
) -> np.ndarray:
    """Cosine similarity of `texts[i]` to the query for i in `indices`; -inf elsewhere."""
    selected = [texts[i] for i in indices]
    vectors = await embed_chunks(selected, embedder, cache)
    query_vector = await embedder.embed_query(query)
    scores = np.full(len(texts), -np.inf, dtype=np.float32)
    if selected:
        scores[list(indices)] = vectors @ query_vector
    return scores


def _result(chunks: list[Chunk], ranked: list[tuple[int, float]], top_k: int) -> list[RankedChunk]:
    return [
        RankedChunk(chunks[index], score, rank)
        for rank, (index, score) in enumerate(ranked[:top_k], start=1)
    ]
