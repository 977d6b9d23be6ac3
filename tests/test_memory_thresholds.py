"""The memory store's similarity thresholds (core/memory_store.py) against the hand-written fact
pairs they were set from (tests/data/memory_pairs.json), with the real embedder: a change of the
embedder or of a threshold that breaks what the thresholds promise fails here.
`python -m evals.memory_thresholds` prints the full tables (and the LoCoMo side of each).
"""

from __future__ import annotations

import numpy as np

from core import memory_store
from evals.memory_thresholds import load_hand_written, pair_similarities
from rag.embedder import Embedder


async def test_every_change_can_close_its_fact_and_most_unrelated_facts_cannot(
    embedder: Embedder,
) -> None:
    own = load_hand_written()
    changes = await pair_similarities(embedder, own.changes)
    updates = await pair_similarities(embedder, own.updates)
    pairs = [[a, b] for i, a in enumerate(own.unrelated) for b in own.unrelated[i + 1 :]]
    unrelated = await pair_similarities(embedder, pairs)

    assert (len(changes), len(updates), len(unrelated)) == (24, 8, 153)
    assert changes.min() >= memory_store.SUPERSEDE_SIMILARITY  # measured: lowest 0.340
    assert updates.min() >= memory_store.UPDATE_SIMILARITY  # lowest 0.632
    # Measured: 105 of the 153 unrelated pairs (68.6%) cannot close each other, 152 cannot
    # overwrite each other.
    assert int((unrelated < memory_store.SUPERSEDE_SIMILARITY).sum()) >= 105
    assert int((unrelated < memory_store.UPDATE_SIMILARITY).sum()) >= 152


async def test_the_duplicate_threshold_merges_few_different_facts(embedder: Embedder) -> None:
    own = load_hand_written()
    paraphrases = await pair_similarities(embedder, own.paraphrases)
    same_topic = await pair_similarities(embedder, own.distinct)
    threshold = memory_store.DUPLICATE_SIMILARITY

    assert (len(paraphrases), len(same_topic)) == (40, 40)
    # Measured at 0.90: 3 of the 40 same-topic pairs merged ("prefers tea to coffee" / "coffee to
    # tea" 0.997, "learning" / "teaches Spanish" 0.924, "a sister" / "a brother named Ana" 0.906),
    # 22 of the 40 paraphrases caught.
    assert int((same_topic >= threshold).sum()) <= 3
    assert int((paraphrases >= threshold).sum()) >= 22
    assert float(np.median(paraphrases)) > float(np.median(same_topic))
