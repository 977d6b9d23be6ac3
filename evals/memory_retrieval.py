"""Suite `memory-retrieval`: does `retrieve_memory` find the turns that answer a question, and
nothing for a question about something else?

    python -m evals memory-retrieval [--data PATH] [--limit N] [--unrelated N]

LoCoMo conversations stand in for a user's memories: every turn is stored in the real memory store
(Postgres + pgvector, through the real embedder) as one memory, "<speaker> on <date>: <text>". Each
question with evidence then goes through `retrieve_memories`, the function behind the
retrieve_memory tool, exactly as the tool calls it but with 10 results (it returns 5), relevance
floor included. Scores: recall@5 and recall@10 (share of a question's evidence turns among the
first 5 / 10 memories) and MRR (1 / rank of the first evidence turn, 0 when none of the 10 is one),
per question category and overall. "empty" is the share of questions for which retrieval returned
nothing (every memory under the relevance floor).

Baselines in the same run: BM25 (bm25s, the tokenizer web search uses) over the same memory texts,
and "vectors only", retrieve_memory's vector half alone (what it was before it became hybrid).
An experiment beside them, "token rerank" (evals/token_rerank.py, not shipped): retrieve_memory's
first 40 re-ranked with the embedder's token vectors.
Each conversation is stored alone (the store is emptied in between). `--limit` takes that many
questions spread evenly over the file. No language model is needed.

Precision: `--unrelated N` SQuAD questions (../shared/evaldata/squad, about five Wikipedia
articles; spread evenly, 300 by default, 0 for none) are searched in every conversation too, with
the app's limit of 5; the share that returns nothing is what keeps the automatic recall before
every reply quiet when the message has nothing to do with the user's memories.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from psycopg_pool import AsyncConnectionPool

from core import memory_search, memory_store
from core.accounts import LOCAL_USER_ID
from evals.datasets import (
    LOCOMO_CATEGORIES,
    LOCOMO_FILE,
    SQUAD_FILE,
    Conversation,
    LocomoQuestion,
    load_locomo,
    load_squad,
    sample,
)
from evals.metrics import mean_by, recall_at, reciprocal_rank
from evals.report import Report, Table
from evals.scratch import forget_everything, scratch_database
from evals.token_rerank import CANDIDATES, TokenReranker
from rag.embedder import Embedder, bundled_model_dir
from rag.search_providers import BM25Scorer

DEFAULT_DATA = LOCOMO_FILE
RETRIEVED = 10  # enough for recall@10; the tool itself asks for 5
TOKEN_RERANK = "token rerank (experiment)"
METHODS = ("retrieve_memory", "vectors only", "BM25 baseline", TOKEN_RERANK)
UNRELATED = 300  # SQuAD questions per conversation: 900 searches, about 10 s
UNRELATED_RETRIEVED = 5  # what the automatic recall and the tool ask for
# BM25 returns every memory sharing a word, so it has no "nothing found" to measure.
UNRELATED_METHODS = ("retrieve_memory", "vectors only")


def add_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--unrelated",
        type=int,
        default=UNRELATED,
        help=f"SQuAD questions searched in each conversation, for precision (default {UNRELATED})",
    )


def memory_text(speaker: str, date: str, text: str) -> str:
    """A turn as one memory; cut to the store's limit (LoCoMo turns are shorter than that)."""
    return " ".join(f"{speaker} on {date}: {text}".split())[: memory_store.MAX_MEMORY_CHARS]


@dataclass
class StoredConversation:
    turn_ids: list[str]
    texts: list[str]
    turn_of_memory: dict[uuid.UUID, str]


async def store_conversation(
    pool: AsyncConnectionPool, embedder: Embedder, conversation: Conversation
) -> StoredConversation:
    await forget_everything(pool)
    turn_ids, texts = [], []
    for session in conversation.sessions:
        for turn in session.turns:
            turn_ids.append(turn.id)
            texts.append(memory_text(turn.speaker, session.date, turn.text))
    vectors = await embedder.embed_documents(texts)
    turn_of_memory = {}
    for turn_id, text, vector in zip(turn_ids, texts, vectors, strict=True):
        row = await memory_store.add_memory(pool, text, vector, embedder.model_name)
        turn_of_memory[row["memory_id"]] = turn_id
    return StoredConversation(turn_ids, texts, turn_of_memory)


async def nearest_by_meaning(
    pool: AsyncConnectionPool,
    embedder: memory_store.QueryEmbedder,
    question: str,
    limit: int = RETRIEVED,
) -> list[uuid.UUID]:
    """The vector half of retrieve_memory alone (its search before it became hybrid), with the
    same relevance floor: what the word half adds is the difference."""
    vector = await embedder.embed_query(question)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            memory_store.NEAREST_SQL,
            {"vector": vector, "model": embedder.model_name, "limit": limit, "user": LOCAL_USER_ID},
        )
        rows = await cursor.fetchall()
    floor = 1.0 - memory_search.RELEVANCE_FLOOR
    return [row[0] for row in rows if row[-1] <= floor]


def scores(ranked: Sequence[str], evidence: set[str]) -> dict[str, float]:
    return {
        "recall@5": recall_at(ranked, evidence, 5),
        "recall@10": recall_at(ranked, evidence, 10),
        "MRR": reciprocal_rank(ranked, evidence),
        "empty": float(not ranked),
    }


class CachedQueries:
    """The embedder, with each query embedded once: the unrelated questions are searched in every
    conversation, by two methods."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.model_name = embedder.model_name
        self._vectors: dict[str, np.ndarray] = {}

    async def embed_documents(self, texts: list[str]) -> Sequence[np.ndarray]:
        return await self.embedder.embed_documents(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        if text not in self._vectors:
            self._vectors[text] = await self.embedder.embed_query(text)
        return self._vectors[text]


async def evaluate(
    pool: AsyncConnectionPool,
    embedder: Embedder,
    conversations: list[Conversation],
    limit: int | None = None,
    unrelated: list[str] | None = None,
) -> dict[str, Any]:
    """Per method, per category and overall: mean scores over the (sampled) questions; with
    `unrelated` questions, per method the share of their searches (in every conversation) that
    found nothing and the mean number of memories found."""
    asked: list[tuple[Conversation, LocomoQuestion]] = []
    for conversation in conversations:
        known = {t.id for s in conversation.sessions for t in s.turns}
        asked += [
            (conversation, q)
            for q in conversation.questions
            if q.evidence and set(q.evidence) <= known
        ]
    asked = sample(asked, limit)
    rows: dict[str, list[tuple[str, dict[str, float]]]] = {method: [] for method in METHODS}
    found_unrelated: dict[str, list[int]] = {method: [] for method in UNRELATED_METHODS}
    cached = CachedQueries(embedder)
    tokens_model = await asyncio.to_thread(_tokens_model)
    memories = 0
    for conversation in conversations:
        questions = [q for c, q in asked if c is conversation]
        if not questions and not unrelated:
            continue
        stored = await store_conversation(pool, embedder, conversation)
        memories += len(stored.texts)
        bm25 = BM25Scorer(stored.texts)
        reranker = await asyncio.to_thread(TokenReranker, tokens_model, stored.texts)
        for question in questions:
            evidence = set(question.evidence)
            found = await memory_search.retrieve_memories(
                pool, embedder, question.question, limit=RETRIEVED, user_id=LOCAL_USER_ID
            )
            hybrid = [stored.turn_of_memory[m.memory_id] for m in found]
            nearest = await nearest_by_meaning(pool, embedder, question.question)
            dense = [stored.turn_of_memory[memory_id] for memory_id in nearest]
            keyword_scores = bm25.scores(question.question)
            order = np.argsort(-keyword_scores, kind="stable")[:RETRIEVED]
            keyword = [stored.turn_ids[i] for i in order if keyword_scores[i] > 0]
            rows["retrieve_memory"].append((question.category_name, scores(hybrid, evidence)))
            rows["vectors only"].append((question.category_name, scores(dense, evidence)))
            rows["BM25 baseline"].append((question.category_name, scores(keyword, evidence)))
            pool_found = await memory_search.retrieve_memories(
                pool, embedder, question.question, limit=CANDIDATES, user_id=LOCAL_USER_ID
            )
            order = reranker.rerank(question.question, [m.content for m in pool_found])
            reranked = [stored.turn_of_memory[pool_found[i].memory_id] for i in order]
            rows[TOKEN_RERANK].append((question.category_name, scores(reranked, evidence)))
        for text in unrelated or []:
            found = await memory_search.retrieve_memories(
                pool, cached, text, limit=UNRELATED_RETRIEVED, user_id=LOCAL_USER_ID
            )
            found_unrelated["retrieve_memory"].append(len(found))
            nearest = await nearest_by_meaning(pool, cached, text, UNRELATED_RETRIEVED)
            found_unrelated["vectors only"].append(len(nearest))
    return {
        "questions": len(asked),
        "memories_stored": memories,
        "retrieved_per_question": RETRIEVED,
        "relevance_floor": memory_search.RELEVANCE_FLOOR,
        "embedder": embedder.describe(),
        "by_method": {method: mean_by(rows[method]) for method in METHODS},
        "unrelated_questions": len(unrelated or []),
        "unrelated": {
            method: {
                "n": len(counts),
                "empty": float(np.mean([not n for n in counts])),
                "mean_found": float(np.mean(counts)),
            }
            for method, counts in found_unrelated.items()
            if counts
        },
    }


def _tokens_model() -> Any:
    """The bundled embedder as sentence-transformers loads it, for its token vectors (the app's
    Embedder may run a traced forward pass that gives sentence vectors only)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(bundled_model_dir()), device="cpu")


def tables(results: dict[str, Any]) -> list[Table]:
    by_method = results["by_method"]
    present = by_method[METHODS[0]]
    categories = [name for name in (*LOCOMO_CATEGORIES.values(), "all") if name in present]
    table = Table(
        f"Memory retrieval: {results['questions']} LoCoMo questions,"
        f" {results['memories_stored']} turns stored as memories",
        ["category", "n", "method", "recall@5", "recall@10", "MRR", "empty"],
    )
    for category in categories:
        for method in METHODS:
            row = by_method[method][category]
            table.rows.append(
                [
                    f"**{category}**" if category == "all" else category,
                    row["n"],
                    method,
                    row["recall@5"],
                    row["recall@10"],
                    row["MRR"],
                    f"{row['empty']:.0%}",
                ]
            )
    if not results.get("unrelated"):
        return [table]
    precision = Table(
        f"Unrelated questions: {results['unrelated_questions']} SQuAD questions searched in each"
        f" conversation, first {UNRELATED_RETRIEVED} results",
        ["method", "searches", "found nothing", "memories found (mean)"],
    )
    for method, row in results["unrelated"].items():
        precision.rows.append([method, row["n"], f"{row['empty']:.1%}", row["mean_found"]])
    return [table, precision]


def unrelated_questions(count: int) -> list[str]:
    """`count` SQuAD questions spread evenly over the file (none if it is missing)."""
    if count < 1 or not SQUAD_FILE.is_file():
        return []
    return sample([q.question for q in load_squad(SQUAD_FILE).questions], count)


async def run(args: argparse.Namespace) -> Report:
    conversations = load_locomo(args.data)
    unrelated = unrelated_questions(args.unrelated)
    async with Embedder() as embedder, scratch_database() as database:
        results = await evaluate(database.pool, embedder, conversations, args.limit, unrelated)
    return Report(
        "memory-retrieval",
        args.data,
        tables(results),
        results,
        {"embedder": embedder.describe()},
        [
            f"retrieve_memory: hybrid (pgvector HNSW cosine + Postgres full-text with IDF, each"
            f" candidate scored on both, weight {memory_search.MEANING_WEIGHT} on meaning),"
            f" relevance floor {memory_search.RELEVANCE_FLOOR} or a word match covering"
            f" {memory_search.WORDS_MIN_COVERAGE:.0%} of the query's IDF (cosine at least"
            f" {memory_search.WORDS_FLOOR}), first {RETRIEVED} results; vectors only: the HNSW"
            " half alone, cosine floor only; BM25: bm25s over the same memory texts;"
            f" token rerank (not shipped, evals/token_rerank.py): retrieve_memory's first"
            f" {CANDIDATES} re-ranked by IDF-weighted MaxSim over the embedder's token vectors,"
            " fused with their order.",
        ],
    )
