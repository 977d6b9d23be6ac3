"""Measure the two similarity thresholds of core/memory_store.py; prints Markdown tables.

    python -m evals.memory_thresholds

RELEVANCE_FLOOR (retrieve_memories drops memories less similar than this to the query):
LoCoMo conversations (../shared/evaldata/locomo, CC BY-NC 4.0, read in place, never copied) stand in
for a memory store: every turn, embedded as "<speaker>: <text>", is one memory, and every question
of categories 1-4 is a query whose `evidence` names the turns that answer it. We compare the
question's similarity to its evidence turns with its similarity to the other turns, and count how
many of the evidence turns that make the top 5 (what retrieval returns) a floor would throw away.
Questions about something else entirely (SQuAD questions about five Wikipedia articles,
../shared/evaldata/squad) show what an unrelated query scores against the same memories. A cross-
check in the app's own form: hand-written questions about a user against hand-written third-person
facts (tests/data/memory_pairs.json).

SUPERSEDE_SIMILARITY and UPDATE_SIMILARITY (how like the memory it names a fact must be to close or
overwrite it): hand-written changes and refinements of a fact against pairs of unrelated facts about
one user, from the same file.

DUPLICATE_SIMILARITY (save_memory refuses a memory this similar to a stored one): paraphrases of one
fact and pairs of different facts on the same topic, both hand-written in
tests/data/memory_pairs.json, plus real distinct facts: each LoCoMo evidence turn (a turn some
question is about, so it carries a fact) against the nearest other evidence turn of its
conversation. The nearest neighbour over *all* turns is shown too but not used: its high end is
chit-chat ("Thanks, Evan! Your support means a lot.") said many times, which is not a fact and
really is a repeat.

Similarities are cosine similarities of the app's own embedder (normalized vectors, so a dot
product; pgvector's `1 - (a <=> b)` gives the same numbers). The script prints what its fixed rules
recommend next to the values currently in core/memory_store.py. It takes about a minute on a laptop
CPU.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from core import memory_search, memory_store
from evals import datasets
from rag.embedder import Embedder

PAIRS_FILE = datasets.ROOT / "tests" / "data" / "memory_pairs.json"

TOP_K = 5  # retrieve_memories' default limit
ANSWERABLE_CATEGORIES = {1, 2, 3, 4}  # 5 is adversarial: no evidence in the conversation
MIN_FACT_WORDS = 8  # for the all-turns neighbour row: shorter turns are greetings and thanks

# Recommendation rules, fixed before looking at individual questions (tune on aggregates only).
# Floor: the highest one that still keeps this share of the evidence turns ranked in the top 5.
# A relevant memory thrown away is worse than an unrelated one shown to the model, which can
# ignore it, so the floor only cuts what real questions (almost) never need.
FLOOR_KEEP_EVIDENCE = 0.99
# Duplicates: the lowest threshold at which at most these shares of different facts are merged.
# Merging loses the new fact; missing a paraphrase only stores it twice, so precision comes first.
DUP_MAX_MERGED_SAME_TOPIC = 0.05
DUP_MAX_MERGED_LOCOMO = 0.01

GRID = np.round(np.arange(0.0, 1.0001, 0.01), 2)


# --- data ------------------------------------------------------------------------------------


@dataclass
class Conversation:
    sample_id: str
    turn_ids: list[str]
    turn_texts: list[str]
    questions: list[tuple[str, list[str]]]  # (question, evidence turn ids)

    def evidence_indices(self) -> list[int]:
        index = {turn_id: i for i, turn_id in enumerate(self.turn_ids)}
        return sorted({index[e] for _, evidence in self.questions for e in evidence})


@dataclass
class HandWritten:
    paraphrases: list[list[str]]
    distinct: list[list[str]]
    queries: list[list[str]]  # (question, the fact answering it)
    changes: list[list[str]]  # (a fact, what it became: a supersede)
    updates: list[list[str]]  # (a fact, the same fact made more precise: an update)
    unrelated: list[str]  # facts about one user, each pair about different things

    @property
    def facts(self) -> list[str]:
        return sorted({text for pair in self.paraphrases + self.distinct for text in pair})


def load_locomo() -> list[Conversation]:
    conversations = []
    for raw in datasets.load_locomo(datasets.LOCOMO_FILE):
        turns = [turn for session in raw.sessions for turn in session.turns]
        ids = [turn.id for turn in turns]
        known = set(ids)
        questions = [
            (q.question, [e for e in q.evidence if e in known])
            for q in raw.questions
            if q.category in ANSWERABLE_CATEGORIES
        ]
        conversations.append(
            Conversation(
                raw.sample_id,
                ids,
                [f"{turn.speaker}: {turn.text}" for turn in turns],
                [q for q in questions if q[1]],
            )
        )
    return conversations


def load_squad_questions() -> list[str]:
    return [q.question for q in datasets.load_squad(datasets.SQUAD_FILE).questions]


def load_hand_written() -> HandWritten:
    data = json.loads(PAIRS_FILE.read_text("utf-8"))
    return HandWritten(
        data["paraphrases"],
        data["distinct"],
        data["queries"],
        data["changes"],
        data["updates"],
        data["unrelated"],
    )


async def embed_queries(embedder: Embedder, texts: list[str]) -> np.ndarray:
    # One at a time through embed_query, so a model's query prefix is applied exactly as in
    # retrieve_memories.
    return np.stack([await embedder.embed_query(text) for text in texts])


# --- statistics ------------------------------------------------------------------------------


PERCENTILE_HEADER = (
    "| similarity of | n | p1 | p5 | p25 | median | p75 | p95 | p99 | max |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def percentiles_row(name: str, values: Iterable[float]) -> str:
    array = np.asarray(list(values), dtype=np.float64)
    cells = [f"{np.percentile(array, p):.3f}" for p in (1, 5, 25, 50, 75, 95, 99)]
    return f"| {name} | {array.size} | {' | '.join(cells)} | {array.max():.3f} |"


def share_at_least(values: np.ndarray, threshold: float) -> float:
    return float((values >= threshold).mean()) if values.size else 0.0


def top_k(similarities: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """Indices of the k largest values along the last axis, best first."""
    k = min(k, similarities.shape[-1])
    part = np.argpartition(-similarities, k - 1, axis=-1)[..., :k]
    order = np.take_along_axis(similarities, part, axis=-1).argsort(axis=-1)[..., ::-1]
    return np.take_along_axis(part, order, axis=-1)


def mark(value: float, recommended: float, current: float) -> str:
    return (" (recommended)" if value == recommended else "") + (
        " (current)" if value == current else ""
    )


# --- relevance floor -------------------------------------------------------------------------


@dataclass
class FloorData:
    evidence_all: np.ndarray  # question -> each of its evidence turns
    evidence_top: np.ndarray  # ... only those ranked in the question's top 5
    best_evidence_top: np.ndarray  # per question with an evidence hit in its top 5: the best one
    other_all: np.ndarray  # question -> every non-evidence turn
    other_top: np.ndarray  # non-evidence turns in the question's top 5
    offtopic_top1: np.ndarray  # SQuAD question -> best turn, once per conversation
    offtopic_top: np.ndarray  # SQuAD question -> its top 5 turns, once per conversation
    own_query_fact: np.ndarray  # hand-written question -> the fact answering it
    own_query_fact_top: np.ndarray  # ... when that fact is in the question's top 5 of all facts
    offtopic_facts_top1: np.ndarray  # SQuAD question -> best hand-written fact


async def measure_floor(
    embedder: Embedder,
    conversations: list[Conversation],
    turn_vectors: list[np.ndarray],
    offtopic: np.ndarray,
    own: HandWritten,
) -> FloorData:
    evidence_all: list[float] = []
    evidence_top: list[float] = []
    best: list[float] = []
    other_all: list[float] = []
    other_top: list[float] = []
    offtopic_top1: list[float] = []
    offtopic_top: list[float] = []
    for conv, turns in zip(conversations, turn_vectors, strict=True):
        index = {turn_id: i for i, turn_id in enumerate(conv.turn_ids)}
        questions = await embed_queries(embedder, [q for q, _ in conv.questions])
        for (_, evidence), sims in zip(conv.questions, questions @ turns.T, strict=True):
            is_evidence = np.zeros(len(sims), dtype=bool)
            is_evidence[[index[e] for e in evidence]] = True
            ranked = top_k(sims)
            hits = [float(sims[i]) for i in ranked if is_evidence[i]]
            evidence_all.extend(sims[is_evidence])
            other_all.extend(sims[~is_evidence])
            evidence_top.extend(hits)
            other_top.extend(float(sims[i]) for i in ranked if not is_evidence[i])
            if hits:
                best.append(max(hits))
        off = offtopic @ turns.T
        ranked_off = np.take_along_axis(off, top_k(off), axis=1)
        offtopic_top1.extend(ranked_off[:, 0])
        offtopic_top.extend(ranked_off.ravel())

    facts = own.facts
    fact_vectors = await embedder.embed_documents(facts)
    own_questions = await embed_queries(embedder, [q for q, _ in own.queries])
    own_sims = own_questions @ fact_vectors.T
    answer = np.array([facts.index(fact) for _, fact in own.queries])
    own_fact = own_sims[np.arange(len(answer)), answer]
    in_top = np.array([a in row for a, row in zip(answer, top_k(own_sims), strict=True)])
    return FloorData(
        np.array(evidence_all),
        np.array(evidence_top),
        np.array(best),
        np.array(other_all),
        np.array(other_top),
        np.array(offtopic_top1),
        np.array(offtopic_top),
        own_fact,
        own_fact[in_top],
        (offtopic @ fact_vectors.T).max(axis=1),
    )


def recommend_floor(data: FloorData) -> float:
    kept = [f for f in GRID if share_at_least(data.evidence_top, f) >= FLOOR_KEEP_EVIDENCE]
    return float(max(kept))


def report_floor(
    data: FloorData, conversations: list[Conversation], n_offtopic: int, own: HandWritten
) -> float:
    recommended = recommend_floor(data)
    current = memory_search.RELEVANCE_FLOOR
    n_turns = sum(len(c.turn_ids) for c in conversations)
    n_questions = sum(len(c.questions) for c in conversations)
    print("## RELEVANCE_FLOOR\n")
    print(
        f"LoCoMo {', '.join(c.sample_id for c in conversations)}: {n_turns} turns as memories,"
        f" {n_questions} questions (categories 1-4) with {data.evidence_all.size} evidence turns,"
        f" {data.evidence_top.size} of them in their question's top {TOP_K}. Off-topic:"
        f" {n_offtopic} SQuAD questions, each searched in every conversation"
        f" ({data.offtopic_top1.size} searches). Hand-written: {len(own.queries)} questions"
        f" about a user against {len(own.facts)} facts.\n"
    )
    print(PERCENTILE_HEADER)
    rows = [
        ("question → its evidence turns", data.evidence_all),
        (f"question → evidence turns in its top {TOP_K}", data.evidence_top),
        (f"question → best evidence turn in its top {TOP_K}", data.best_evidence_top),
        ("question → non-evidence turns", data.other_all),
        (f"question → non-evidence turns in its top {TOP_K}", data.other_top),
        ("off-topic question → best turn", data.offtopic_top1),
        (f"off-topic question → its top {TOP_K} turns", data.offtopic_top),
        ("hand-written question → its fact", data.own_query_fact),
        (f"hand-written question → its fact, when in top {TOP_K}", data.own_query_fact_top),
        ("off-topic question → best hand-written fact", data.offtopic_facts_top1),
    ]
    for name, values in rows:
        print(percentiles_row(name, values))
    print()
    print(
        f"| floor | evidence hits in top {TOP_K} kept | questions keeping ≥ 1 evidence hit"
        f" | non-evidence top-{TOP_K} results dropped | off-topic top-{TOP_K} results dropped"
        " | off-topic searches returning nothing | hand-written: fact in top 5 kept"
        " | hand-written: off-topic searches returning nothing |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    floors = sorted({*np.round(np.arange(0.10, 0.61, 0.05), 2), recommended, current})
    for floor in floors:
        print(
            f"| {floor:.2f}{mark(floor, recommended, current)}"
            f" | {share_at_least(data.evidence_top, floor):.1%}"
            f" | {share_at_least(data.best_evidence_top, floor):.1%}"
            f" | {1 - share_at_least(data.other_top, floor):.1%}"
            f" | {1 - share_at_least(data.offtopic_top, floor):.1%}"
            f" | {1 - share_at_least(data.offtopic_top1, floor):.1%}"
            f" | {share_at_least(data.own_query_fact_top, floor):.1%}"
            f" | {1 - share_at_least(data.offtopic_facts_top1, floor):.1%} |"
        )
    print(
        f"\nRule: the highest floor keeping ≥ {FLOOR_KEEP_EVIDENCE:.0%} of the LoCoMo evidence"
        f" turns that rank in the top {TOP_K} → **{recommended:.2f}**"
        f" (core/memory_store.py has {current:.2f}).\n"
    )
    return recommended


# --- duplicate threshold ---------------------------------------------------------------------


@dataclass
class DuplicateData:
    paraphrase: np.ndarray
    same_topic: np.ndarray
    locomo_evidence_nearest: np.ndarray
    locomo_all_nearest: np.ndarray


async def pair_similarities(embedder: Embedder, pairs: list[list[str]]) -> np.ndarray:
    first = await embedder.embed_documents([a for a, _ in pairs])
    second = await embedder.embed_documents([b for _, b in pairs])
    return (first * second).sum(axis=1)


def nearest_neighbours(vectors: np.ndarray) -> np.ndarray:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -1.0)
    return sims.max(axis=1)


async def measure_duplicates(
    embedder: Embedder,
    conversations: list[Conversation],
    turn_vectors: list[np.ndarray],
    own: HandWritten,
) -> DuplicateData:
    evidence_nearest: list[float] = []
    all_nearest: list[float] = []
    for conv, turns in zip(conversations, turn_vectors, strict=True):
        evidence_nearest.extend(nearest_neighbours(turns[conv.evidence_indices()]))
        # The text starts with "<speaker>:", hence the - 1.
        long = [i for i, t in enumerate(conv.turn_texts) if len(t.split()) - 1 >= MIN_FACT_WORDS]
        all_nearest.extend(nearest_neighbours(turns[long]))
    return DuplicateData(
        await pair_similarities(embedder, own.paraphrases),
        await pair_similarities(embedder, own.distinct),
        np.array(evidence_nearest),
        np.array(all_nearest),
    )


def recommend_duplicate(data: DuplicateData) -> float:
    ok = [
        t
        for t in GRID
        if share_at_least(data.same_topic, t) <= DUP_MAX_MERGED_SAME_TOPIC
        and share_at_least(data.locomo_evidence_nearest, t) <= DUP_MAX_MERGED_LOCOMO
    ]
    return float(min(ok))


def precision(positives: np.ndarray, negatives: np.ndarray, threshold: float) -> float:
    true_pos = int((positives >= threshold).sum())
    false_pos = int((negatives >= threshold).sum())
    return true_pos / (true_pos + false_pos) if true_pos + false_pos else 1.0


def count(values: np.ndarray, threshold: float) -> str:
    return f"{share_at_least(values, threshold):.1%} ({int((values >= threshold).sum())})"


def report_duplicates(data: DuplicateData, own: HandWritten) -> float:
    recommended = recommend_duplicate(data)
    current = memory_store.DUPLICATE_SIMILARITY
    print("## DUPLICATE_SIMILARITY\n")
    print(PERCENTILE_HEADER)
    rows = [
        ("paraphrases of one fact (hand-written)", data.paraphrase),
        ("different facts, same topic (hand-written)", data.same_topic),
        ("LoCoMo evidence turn → nearest other evidence turn", data.locomo_evidence_nearest),
        (f"LoCoMo turn → nearest other turn (≥ {MIN_FACT_WORDS} words)", data.locomo_all_nearest),
    ]
    for name, values in rows:
        print(percentiles_row(name, values))
    both = np.concatenate([data.same_topic, data.locomo_evidence_nearest])
    print(
        "\nA memory counts as a duplicate when its similarity is ≥ the threshold. Recall: share of"
        " paraphrase pairs caught. Precision: paraphrase pairs caught / all pairs caught, against"
        f" the {data.same_topic.size} same-topic pairs, and against those plus the"
        f" {data.locomo_evidence_nearest.size} LoCoMo evidence neighbours.\n"
    )
    print(
        "| threshold | recall | same-topic pairs merged | LoCoMo evidence turns merged"
        " | precision (same-topic) | precision (same-topic + LoCoMo) |\n"
        "|---:|---:|---:|---:|---:|---:|"
    )
    thresholds = sorted({*np.round(np.arange(0.75, 0.99, 0.025), 3), recommended, current})
    for t in thresholds:
        print(
            f"| {t:.3f}{mark(t, recommended, current)}"
            f" | {count(data.paraphrase, t)}"
            f" | {count(data.same_topic, t)}"
            f" | {count(data.locomo_evidence_nearest, t)}"
            f" | {precision(data.paraphrase, data.same_topic, t):.2f}"
            f" | {precision(data.paraphrase, both, t):.2f} |"
        )
    print(f"\nSame-topic facts merged at {current:.2f} (current):\n")
    for (a, b), s in zip(own.distinct, data.same_topic, strict=True):
        if s >= current:
            print(f"- {s:.3f}: {a!r} / {b!r}")
    print(f"\nParaphrases stored twice at {current:.2f} (current):\n")
    for (a, b), s in zip(own.paraphrases, data.paraphrase, strict=True):
        if s < current:
            print(f"- {s:.3f}: {a!r} / {b!r}")
    print(
        f"\nRule: the lowest threshold merging ≤ {DUP_MAX_MERGED_SAME_TOPIC:.0%} of the"
        f" same-topic pairs and ≤ {DUP_MAX_MERGED_LOCOMO:.0%} of the LoCoMo evidence turns"
        f" → **{recommended:.2f}** (core/memory_store.py has {current:.2f}).\n"
    )
    return recommended


# --- supersede and update ---------------------------------------------------------------------


async def report_related(embedder: Embedder, own: HandWritten) -> None:
    """How like the memory it names a fact must be to close it (SUPERSEDE_SIMILARITY) or to
    overwrite it (UPDATE_SIMILARITY): every hand-written change and update must pass, and as few
    pairs of unrelated facts as that allows."""
    changes = await pair_similarities(embedder, own.changes)
    updates = await pair_similarities(embedder, own.updates)
    pairs = [[a, b] for i, a in enumerate(own.unrelated) for b in own.unrelated[i + 1 :]]
    unrelated = await pair_similarities(embedder, pairs)
    supersede, update = memory_store.SUPERSEDE_SIMILARITY, memory_store.UPDATE_SIMILARITY
    print("## SUPERSEDE_SIMILARITY and UPDATE_SIMILARITY\n")
    print(PERCENTILE_HEADER)
    for name, values in (
        ("a fact → what it became (hand-written changes)", changes),
        ("a fact → the same fact made more precise (updates)", updates),
        ("unrelated facts about one user (every pair)", unrelated),
    ):
        print(percentiles_row(name, values))
    print(
        "\n| threshold | changes that can close their fact | updates that can overwrite theirs"
        " | unrelated pairs that cannot touch each other |\n|---:|---:|---:|---:|"
    )
    for t in sorted({*np.round(np.arange(0.20, 0.66, 0.05), 2).tolist(), supersede, update}):
        current = " (SUPERSEDE)" * (t == supersede) + " (UPDATE)" * (t == update)
        print(
            f"| {t:.2f}{current} | {share_at_least(changes, t):.1%}"
            f" | {share_at_least(updates, t):.1%} | {1 - share_at_least(unrelated, t):.1%} |"
        )
    print("\nUnrelated pairs that could close each other (most alike first):\n")
    for s, (a, b) in sorted(zip(unrelated, pairs, strict=True), reverse=True)[:5]:
        print(f"- {s:.3f}: {a!r} / {b!r}")
    print(
        f"\nRule: every change ≥ SUPERSEDE_SIMILARITY (lowest {changes.min():.3f};"
        f" core/memory_store.py has {supersede:.2f}), every update ≥ UPDATE_SIMILARITY (lowest"
        f" {updates.min():.3f}; it has {update:.2f}).\n"
    )


async def main() -> int:
    if not datasets.LOCOMO_FILE.exists():
        print(f"No evaluation data in {datasets.EVALDATA} (set EVALDATA_DIR)", file=sys.stderr)
        return 1
    async with Embedder() as embedder:
        conversations = load_locomo()
        offtopic_questions = load_squad_questions()
        own = load_hand_written()
        turn_vectors = [await embedder.embed_documents(c.turn_texts) for c in conversations]
        offtopic = await embed_queries(embedder, offtopic_questions)
        print(f"# Memory thresholds ({embedder.describe()})\n")
        floor = await measure_floor(embedder, conversations, turn_vectors, offtopic, own)
        report_floor(floor, conversations, len(offtopic_questions), own)
        duplicates = await measure_duplicates(embedder, conversations, turn_vectors, own)
        report_duplicates(duplicates, own)
        await report_related(embedder, own)
    return 0


if __name__ == "__main__":
    # The bundled model loads offline; never ask a model hub for anything.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(asyncio.run(main()))
