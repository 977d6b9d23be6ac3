"""Rank a search round's chunks against the query and keep the best `top_k`.

Default: hybrid ranking, BM25 and dense (cosine similarity of the embedder's normalized vectors)
fused with Reciprocal Rank Fusion (score = Σ 1 / (RRF_K + rank) over the two rankings). On the SQuAD
pages (evals/evidence_ranking.py) it beat dense-only on recall@5, recall@20 and MRR; the numbers
are in that script's results file.

Speed: only the BM25 top `DENSE_CANDIDATES` chunks are embedded (the prefilter); the rest keep
their BM25 rank in the fusion. bench/web_rank.py measured the prefilter against embedding every
chunk, and evals/evidence_ranking.py measured that it costs no recall. When BM25 finds nothing
(no query word in any chunk) every chunk is embedded and ranking is dense-only.

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
# Texts per embedding call (measured in bench/web_rank.py).
EMBED_BATCH = 8
# Chunks embedded per round, chosen by BM25. None embeds every chunk.
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
