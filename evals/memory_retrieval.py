"""Suite `memory-retrieval`: does `retrieve_memory` find the turns that answer a question?

    python -m evals memory-retrieval [--data PATH] [--limit N]

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
Each conversation is stored alone (the store is emptied in between). `--limit` takes that many
questions spread evenly over the file. No language model is needed.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from psycopg_pool import AsyncConnectionPool

from core import memory_store
from evals.datasets import (
    LOCOMO_CATEGORIES,
    LOCOMO_FILE,
    Conversation,
    LocomoQuestion,
    load_locomo,
    sample,
)
from evals.metrics import mean_by, recall_at, reciprocal_rank
from evals.report import Report, Table
from evals.scratch import forget_everything, scratch_database
from rag.embedder import Embedder
from rag.search_providers import BM25Scorer

DEFAULT_DATA = LOCOMO_FILE
RETRIEVED = 10  # enough for recall@10; the tool itself asks for 5
METHODS = ("retrieve_memory", "vectors only", "BM25 baseline")


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
    pool: AsyncConnectionPool, embedder: Embedder, question: str, stored: StoredConversation
) -> list[str]:
    """The vector half of retrieve_memory alone (its search before it became hybrid), with the
    same relevance floor: what the fusion adds is the difference."""
    vector = await embedder.embed_query(question)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            memory_store.NEAREST_SQL,
            {"vector": vector, "model": embedder.model_name, "limit": RETRIEVED},
        )
        rows = await cursor.fetchall()
    floor = 1.0 - memory_store.RELEVANCE_FLOOR
    return [stored.turn_of_memory[row[0]] for row in rows if row[-1] <= floor]


def scores(ranked: Sequence[str], evidence: set[str]) -> dict[str, float]:
    return {
        "recall@5": recall_at(ranked, evidence, 5),
        "recall@10": recall_at(ranked, evidence, 10),
        "MRR": reciprocal_rank(ranked, evidence),
        "empty": float(not ranked),
    }


async def evaluate(
    pool: AsyncConnectionPool,
    embedder: Embedder,
    conversations: list[Conversation],
    limit: int | None = None,
) -> dict[str, Any]:
    """Per method, per category and overall: mean scores over the (sampled) questions."""
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
    memories = 0
    for conversation in conversations:
        questions = [q for c, q in asked if c is conversation]
        if not questions:
            continue
        stored = await store_conversation(pool, embedder, conversation)
        memories += len(stored.texts)
        bm25 = BM25Scorer(stored.texts)
        for question in questions:
            evidence = set(question.evidence)
            found = await memory_store.retrieve_memories(
                pool, embedder, question.question, limit=RETRIEVED
            )
            hybrid = [stored.turn_of_memory[m.memory_id] for m in found]
            dense = await nearest_by_meaning(pool, embedder, question.question, stored)
            keyword_scores = bm25.scores(question.question)
            order = np.argsort(-keyword_scores, kind="stable")[:RETRIEVED]
            keyword = [stored.turn_ids[i] for i in order if keyword_scores[i] > 0]
            rows["retrieve_memory"].append((question.category_name, scores(hybrid, evidence)))
            rows["vectors only"].append((question.category_name, scores(dense, evidence)))
            rows["BM25 baseline"].append((question.category_name, scores(keyword, evidence)))
    return {
        "questions": len(asked),
        "memories_stored": memories,
        "retrieved_per_question": RETRIEVED,
        "relevance_floor": memory_store.RELEVANCE_FLOOR,
        "embedder": embedder.describe(),
        "by_method": {method: mean_by(rows[method]) for method in METHODS},
    }


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
    return [table]


async def run(args: argparse.Namespace) -> Report:
    conversations = load_locomo(args.data)
    async with Embedder() as embedder, scratch_database() as database:
        results = await evaluate(database.pool, embedder, conversations, args.limit)
    return Report(
        "memory-retrieval",
        args.data,
        tables(results),
        results,
        {"embedder": embedder.describe()},
        [
            f"retrieve_memory: hybrid (pgvector HNSW cosine + Postgres full-text, RRF), relevance"
            f" floor {memory_store.RELEVANCE_FLOOR}, first {RETRIEVED} results; vectors only: the"
            " HNSW half alone, same floor; BM25: bm25s over the same memory texts.",
        ],
    )
