"""An experiment measured beside the shipped memory search: re-rank `retrieve_memories`' candidates
by late interaction over all-MiniLM-L6-v2's token vectors (memory-retrieval's "token rerank" row).

Issue #11 asks for recall@10 0.75 on LoCoMo; the hybrid search reaches 0.707, and an oracle that
puts every evidence turn among its 40 candidates first would reach 0.80, so a better scorer over
the candidates is what is missing. This one uses only the bundled embedder: each question token
(weighted by its IDF over the conversation's memories) takes its best cosine against a memory's
tokens (ColBERT's MaxSim, on a model not trained for it), and that order is fused with the hybrid
order by reciprocal ranks. It is not shipped: it needs every memory's token vectors (~40 x 384
floats each) stored or computed per search, and on all 498 questions it reaches recall@10 0.728
and MRR 0.557 against the hybrid's 0.707 and 0.531 (evals/RESULTS.md), still short of 0.75.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

CANDIDATES = 40  # the hybrid's first 40 (40 from each half, the relevance floor applied)
FUSION_K = 10  # reciprocal-rank constant: 1 / (K + rank) from each order, summed


class TokenReranker:
    """Token vectors and word-piece IDF of one conversation's memories."""

    def __init__(self, model: Any, texts: Sequence[str]) -> None:
        """`model`: a sentence-transformers model of the embedder (blocking: seconds for a
        thousand memories)."""
        self._model = model
        self._vectors = dict(zip(texts, self._token_vectors(list(texts)), strict=True))
        pieces = Counter(piece for text in texts for piece in set(self._pieces(text)))
        count = len(texts)
        self._idf = {piece: math.log((count + 1) / (n + 0.5)) for piece, n in pieces.items()}
        self._unseen = math.log((count + 1) / 0.5)

    def _token_vectors(self, texts: list[str]) -> list[np.ndarray]:
        encoded = self._model.encode(texts, output_value="token_embeddings", batch_size=64)
        vectors = []
        for tokens in encoded:
            inner = tokens.numpy()[1:-1]  # without [CLS] and [SEP]
            vectors.append(inner / np.linalg.norm(inner, axis=1, keepdims=True))
        return vectors

    def _pieces(self, text: str) -> list[int]:
        ids = self._model.tokenizer(text, truncation=True, max_length=256)["input_ids"]
        return ids[1:-1]

    def rerank(self, question: str, candidates: Sequence[str]) -> list[int]:
        """The positions of `candidates` (memory texts, best first) in the fused order."""
        if not candidates:
            return []
        query = self._token_vectors([question])[0]
        weights = np.array([self._idf.get(p, self._unseen) for p in self._pieces(question)])
        weights = weights[: len(query)]
        query = query[: len(weights)]
        late = np.array([float(self._best(query, text) @ weights) for text in candidates])
        late_rank = np.empty(len(candidates))
        late_rank[np.argsort(-late, kind="stable")] = np.arange(len(candidates))
        fused = 1 / (FUSION_K + np.arange(len(candidates))) + 1 / (FUSION_K + late_rank)
        return [int(i) for i in np.argsort(-fused, kind="stable")]

    def _best(self, query: np.ndarray, text: str) -> np.ndarray:
        """Each query token's best cosine against the memory's tokens."""
        if text not in self._vectors:
            self._vectors[text] = self._token_vectors([text])[0]
        return (query @ self._vectors[text].T).max(axis=1)
