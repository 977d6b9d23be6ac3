"""Automatic memory recall: what it adds to preparing a reply, against the same step without it.

    python -m bench.recall [--memories 300] [--questions 60]

`build_prompt` reads the chat and its latest messages and, with memory on, recalls the memories that
fit the user's message (query embedding + hybrid search, chat/memory_recall.py), all three at once.
This times that step both ways on a scratch embedded Postgres holding `--memories` real memories
(LoCoMo turns of one conversation, embedded with the bundled model), for `--questions` LoCoMo
questions, each timed with and without recall in alternating order: the baseline is the same reads
without the recall, in the same run. Reported: p50/p95 of both, and the overhead (median of the
paired differences). Target: at most 30 ms p50.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from types import SimpleNamespace

from chat.memory_recall import recall_memories
from chat.state import TurnContext
from core import chat_store, memory_store
from core.accounts import LOCAL_USER_ID
from evals.datasets import load_locomo
from evals.scratch import scratch_database
from rag.embedder import Embedder


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def run(memories: int, questions: int) -> None:
    conversation = load_locomo()[0]
    texts = [t.text for s in conversation.sessions for t in s.turns][:memories]
    asked = [q.question for c in load_locomo() for q in c.questions][:questions]
    async with scratch_database() as database, Embedder() as embedder:
        pool = database.pool
        vectors = await embedder.embed_documents(texts)
        for text, vector in zip(texts, vectors, strict=True):
            await memory_store.add_memory(pool, text[:500], vector, embedder.model_name)
        chat = await chat_store.create_chat(pool, "bench")
        for n in range(6):  # a short chat history to read, as a real turn does
            await chat_store.add_message(pool, chat["chat_id"], "user", f"Question {n}?")
            await chat_store.add_message(pool, chat["chat_id"], "assistant", f"Answer {n}.")
        services = SimpleNamespace(database=database, embedder=embedder)

        async def prepare(question: str, recall: bool) -> float:
            turn = TurnContext(
                services=services,  # type: ignore[arg-type]  # what recall reads of Services
                chat_id=chat["chat_id"], user_message_id=uuid.uuid4(), run_id=uuid.uuid4(),
                user_id=LOCAL_USER_ID,
                user_text=question,
                trace_id="bench", started=time.monotonic(), memory="recall" if recall else "off",
            )  # fmt: skip
            started = time.perf_counter()
            await asyncio.gather(
                chat_store.get_chat(pool, chat["chat_id"], user_id=None),
                chat_store.recent_messages(pool, chat["chat_id"], limit=11),
                recall_memories(turn, question),
            )
            return (time.perf_counter() - started) * 1000

        for question in asked[:5]:  # warm-up: first queries, the model's first calls
            await prepare(question, True)
        with_recall, without, differences = [], [], []
        for i, question in enumerate(asked):
            order = (True, False) if i % 2 else (False, True)
            timed = {recall: await prepare(question, recall) for recall in order}
            with_recall.append(timed[True])
            without.append(timed[False])
            differences.append(timed[True] - timed[False])
    print(f"build_prompt's reads, {len(texts)} memories, {len(asked)} questions (ms)\n")
    print("| | p50 | p95 |\n| --- | --- | --- |")
    print(f"| without recall (baseline) | {percentile(without, 50):.1f} | "
          f"{percentile(without, 95):.1f} |")  # fmt: skip
    print(f"| with recall | {percentile(with_recall, 50):.1f} | "
          f"{percentile(with_recall, 95):.1f} |")  # fmt: skip
    print(f"\nOverhead of recall (median paired difference): "
          f"{statistics.median(differences):.1f} ms (target <= 30 ms)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=300)
    parser.add_argument("--questions", type=int, default=60)
    options = parser.parse_args()
    asyncio.run(run(options.memories, options.questions))


if __name__ == "__main__":
    main()
