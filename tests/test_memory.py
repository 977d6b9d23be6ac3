"""Long-term memory: core/memory_store.py's save/retrieve and the chat tools, on a real Postgres
with the real embedding model (each test gets a fresh database: memories are global)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from datetime import date
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool
from psycopg_pool import AsyncConnectionPool

from chat.state import TurnContext
from chat.tools import TOOLS, retrieve_memory, save_memory, tool_schemas
from core import chat_store, memory_search, memory_store
from core.accounts import LOCAL_USER_ID
from core.db import _configure_connection
from rag.embedder import Embedder

PETS = [
    "The user has a golden retriever named Max.",
    "The user has two cats, Luna and Milo.",
    "The user keeps tropical fish in a large aquarium.",
    "The user's daughter has a pet hamster called Nibbles.",
    "The user used to have a parrot as a child.",
    "The user is allergic to horses.",
    "The user volunteers at an animal shelter on Saturdays.",
]
OTHER_FACTS = [
    "The user works as a nurse in Lisbon.",
    "The user is learning to play the piano.",
    "The user prefers tea to coffee.",
]


async def count_memories(pool: AsyncConnectionPool) -> int:
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM memories")
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def user_said(pool: AsyncConnectionPool, text: str) -> dict[str, Any]:
    """A user message saying `text`, in a chat of its own: the evidence a memory needs."""
    chat = await chat_store.create_chat(pool)
    return await chat_store.add_message(pool, chat["chat_id"], "user", text)


async def save_said(pool: AsyncConnectionPool, embedder: Any, fact: str) -> memory_store.SaveResult:
    """Save `fact` as something the user said in those very words."""
    message = await user_said(pool, fact)
    return await memory_store.save_grounded_memory(
        pool, embedder, fact, fact, message["message_id"]
    )


async def save_all(pool: AsyncConnectionPool, embedder: Embedder, facts: list[str]) -> None:
    for fact in facts:
        result = await save_said(pool, embedder, fact)
        assert result.saved, f"{fact!r} was taken for {result.memory['content']!r}"


# ---------------------------------------------------------------------------------------------
# core/memory_store.py


async def test_saved_memory_is_found_by_meaning(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    await save_all(memory_pool, embedder, [PETS[0], *OTHER_FACTS])

    # No word in common with the memory but "the user".
    found = await memory_search.retrieve_memories(
        memory_pool, embedder, "Which animals live with the user?", user_id=LOCAL_USER_ID
    )

    assert found, "nothing found"
    assert found[0].content == PETS[0]
    assert found[0].similarity >= memory_search.RELEVANCE_FLOOR
    assert isinstance(found[0].memory_id, uuid.UUID)
    assert found[0].created_at.tzinfo is not None


async def test_unrelated_query_finds_nothing(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    await save_all(memory_pool, embedder, [*PETS[:3], *OTHER_FACTS])

    for query in ["What is the boiling point of nitrogen?", "Who won the 1998 World Cup final?"]:
        # The rows are there (without the floor the nearest would come back) ...
        async with memory_pool.connection() as conn:
            cursor = await conn.execute(
                memory_store.NEAREST_SQL,
                {
                    "vector": await embedder.embed_query(query),
                    "model": embedder.model_name,
                    "limit": 5,
                    "user": LOCAL_USER_ID,
                },
            )
            assert len(await cursor.fetchall()) == 5
        # ... but none is similar enough to count as relevant.
        assert (
            await memory_search.retrieve_memories(
                memory_pool, embedder, query, user_id=LOCAL_USER_ID
            )
            == []
        )


async def test_paraphrase_is_not_stored_twice(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    first = await save_said(memory_pool, embedder, "The user has a dog named Max.")
    assert first.saved
    assert first.similarity is None

    again = await save_said(memory_pool, embedder, "The user owns a dog called Max.")
    assert not again.saved
    assert again.memory["memory_id"] == first.memory["memory_id"]
    assert again.memory["content"] == "The user has a dog named Max."
    assert again.similarity is not None
    assert again.similarity >= memory_store.DUPLICATE_SIMILARITY

    # The same text with other spacing is the same memory (similarity 1).
    same = await save_said(memory_pool, embedder, "  The user has a dog\n named   Max.  ")
    assert not same.saved
    assert same.similarity == pytest.approx(1.0, abs=1e-4)
    assert await count_memories(memory_pool) == 1


async def test_different_facts_are_all_stored(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    facts = [
        "The user is allergic to peanuts.",
        "The user is allergic to shellfish.",  # same topic, a different fact
        "The user is vegetarian.",
        "The user is vegan.",  # similarity 0.87: close, and still a different fact
        "The user's daughter is called Mia.",
        "The user's son is called Leo.",
    ]
    results = [await save_said(memory_pool, embedder, fact) for fact in facts]

    assert [r.saved for r in results] == [True] * len(facts)
    assert [r.memory["content"] for r in results] == facts
    assert await count_memories(memory_pool) == len(facts)


async def test_empty_or_too_long_memory_is_rejected(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    with pytest.raises(ValueError, match="at most 500 characters, not 501"):
        await save_said(memory_pool, embedder, "x" * 501)
    with pytest.raises(ValueError, match="can't be empty"):
        await save_said(memory_pool, embedder, " \n\t ")
    assert await count_memories(memory_pool) == 0

    # The limit applies after whitespace is normalized: 500 characters plus padding is fine.
    fact = "The user likes long walks. " * 18 + "x" * 14
    assert len(fact) == 500
    result = await save_said(memory_pool, embedder, f"\n  {fact}  \n")
    assert result.saved
    assert result.memory["content"] == fact

    with pytest.raises(ValueError, match="can't be empty"):
        await memory_search.retrieve_memories(memory_pool, embedder, "   ", user_id=LOCAL_USER_ID)
    with pytest.raises(ValueError, match="at least 1"):
        await memory_search.retrieve_memories(
            memory_pool, embedder, "pets", limit=0, user_id=LOCAL_USER_ID
        )


class SimultaneousEmbedder:
    """The real embedder, but each call waits until `parties` calls have their vectors.

    So concurrent saves reach the database at the same moment, as two server processes can:
    without the lock both would find nothing and both insert.
    """

    def __init__(self, embedder: Embedder, parties: int) -> None:
        self.model_name = embedder.model_name
        self._embedder = embedder
        self._barrier = asyncio.Barrier(parties)

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        vectors = await self._embedder.embed_documents(texts)
        await self._barrier.wait()
        return vectors


async def test_concurrent_saves_of_one_fact_store_one_row(
    memory_pool: AsyncConnectionPool, embedder: Embedder, fresh_database: str
) -> None:
    # A second pool stands for a second server process on the same database.
    other_process = AsyncConnectionPool(
        fresh_database, min_size=1, max_size=2, open=False, configure=_configure_connection
    )
    await other_process.open(wait=True, timeout=10)
    try:
        together = SimultaneousEmbedder(embedder, parties=3)
        results = await asyncio.gather(
            save_said(memory_pool, together, "The user is vegetarian."),
            save_said(other_process, together, "The user is vegetarian."),
            save_said(memory_pool, together, "The user is  vegetarian."),
        )
    finally:
        await other_process.close()

    assert sorted(r.saved for r in results) == [False, False, True]
    assert len({r.memory["memory_id"] for r in results}) == 1
    assert await count_memories(memory_pool) == 1


async def test_retrieval_returns_the_five_most_relevant_best_first(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    await save_all(memory_pool, embedder, [*PETS, *OTHER_FACTS])
    query = "What pets does the user have?"

    found = await memory_search.retrieve_memories(
        memory_pool, embedder, query, user_id=LOCAL_USER_ID
    )

    assert len(found) == 5
    assert {m.content for m in found} <= set(PETS)  # nothing about work, piano or tea
    # Fused ranking (meaning and words), so not in order of similarity; the closest in meaning
    # is among them.
    facts = [*PETS, *OTHER_FACTS]
    expected = (await embedder.embed_documents(facts)) @ await embedder.embed_query(query)
    assert facts[int(np.argmax(expected))] in {m.content for m in found}
    for memory in found:  # each similarity is the model's cosine similarity
        assert memory.similarity == pytest.approx(
            float(expected[facts.index(memory.content)]), abs=1e-4
        )

    two = await memory_search.retrieve_memories(
        memory_pool, embedder, query, limit=2, user_id=LOCAL_USER_ID
    )
    assert [m.content for m in two] == [m.content for m in found[:2]]


async def test_a_shared_rare_word_lifts_a_memory_the_vectors_rank_low(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    name = "The user's neighbour Okonkwo waters the plants."
    await save_all(memory_pool, embedder, [*PETS, *OTHER_FACTS, name])
    query = "What pets does Okonkwo know I have?"
    facts = [*PETS, *OTHER_FACTS, name]
    similarity = (await embedder.embed_documents(facts)) @ await embedder.embed_query(query)
    by_meaning = [facts[i] for i in np.argsort(-similarity)]
    assert by_meaning.index(name) >= 2, "not a test of the word half: the vectors find it"

    found = await memory_search.retrieve_memories(
        memory_pool, embedder, query, limit=2, user_id=LOCAL_USER_ID
    )

    assert name in [m.content for m in found]


async def test_unrelated_words_alone_do_not_pass_the_floor(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    await save_all(memory_pool, embedder, OTHER_FACTS)
    # Shares "piano" with a memory, but means something else entirely.
    found = await memory_search.retrieve_memories(
        memory_pool,
        embedder,
        "Steinway piano factory tour schedule in Hamburg",
        user_id=LOCAL_USER_ID,
    )
    assert all(m.similarity >= memory_search.RELEVANCE_FLOOR for m in found)


async def test_hybrid_search_uses_both_indexes(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    await save_all(memory_pool, embedder, OTHER_FACTS)
    vector = await embedder.embed_query("pets")
    async with memory_pool.connection() as conn, conn.transaction(force_rollback=True):
        # On a table this small the planner rightly prefers reading it all and sorting (it picks
        # the indexes by itself from a few thousand rows). Forbid scans and sorts to see that
        # each half *can* be answered by its index: ordering by `1 - distance`, say, could not.
        for setting in ("enable_seqscan", "enable_sort"):
            await conn.execute(f"SET LOCAL {setting} = off")
        # Nor the user's own rows (a few here, all of one user) by the listing's index: dropped
        # for this transaction only, it cannot stand in for the word index.
        await conn.execute("DROP INDEX memories_user_id_created_at_idx")
        cursor = await conn.execute(
            "EXPLAIN " + memory_search.HYBRID_SQL,
            {
                "text": "pets at home",
                "vector": vector,
                "model": embedder.model_name,
                "candidates": 20,
                "rrf_k": 60,
                "max_distance": 0.65,
                "limit": 5,
                "history": False,
                "user": LOCAL_USER_ID,
            },
        )
        plan = "\n".join(row[0] for row in await cursor.fetchall())
    assert "memories_embedding_idx" in plan, plan
    assert "memories_content_words_idx" in plan, plan


async def test_save_keeps_its_evidence_and_refuses_what_the_user_did_not_say(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    chat = await chat_store.create_chat(memory_pool)
    message = await chat_store.add_message(
        memory_pool, chat["chat_id"], "user", "Hi! I’m a VEGETARIAN — mostly.\nI live in Porto."
    )
    reply = await chat_store.add_message(
        memory_pool, chat["chat_id"], "assistant", "You have a cat named Max, I think."
    )
    kept = await memory_store.save_grounded_memory(
        memory_pool, embedder, "The user is vegetarian.", '"i\'m a vegetarian - mostly"',
        message["message_id"],
    )  # fmt: skip
    assert kept.saved
    # Compared loosely (case, quote marks, dashes, spaces), stored exactly as the user wrote it.
    assert kept.memory["quote"] == "I’m a VEGETARIAN — mostly"
    assert kept.memory["source_chat_id"] == chat["chat_id"]
    assert kept.memory["source_message_id"] == message["message_id"]

    refusals = [
        # Invented: not in the message.
        ("The user has a cat named Max.", "I have a cat named Max", message["message_id"]),
        # The assistant's words are never evidence.
        ("The user has a cat named Max.", "You have a cat named Max", reply["message_id"]),
        # A real sentence with another fact attached.
        ("The user has a cat named Max.", "I live in Porto", message["message_id"]),
        # Too short to prove anything.
        ("The user is called Max.", "I", message["message_id"]),
        # No such message.
        ("The user lives in Porto.", "I live in Porto", uuid.uuid4()),
    ]
    for fact, quote, source in refusals:
        with pytest.raises(memory_store.NotGrounded, match="not something the user said"):
            await memory_store.save_grounded_memory(memory_pool, embedder, fact, quote, source)
    assert await count_memories(memory_pool) == 1

    # Close in meaning is not enough: a contradiction on the same topic is as close.
    with pytest.raises(memory_store.NotGrounded, match="does not state that fact"):
        await memory_store.save_grounded_memory(
            memory_pool, embedder, "The user's favourite meat is steak.", "I'm a vegetarian",
            message["message_id"],
        )  # fmt: skip
    home = await memory_store.save_grounded_memory(
        memory_pool, embedder, "The user lives in Porto, Portugal.", "I live in Porto",
        message["message_id"],
    )  # fmt: skip
    assert home.saved and home.memory["quote"] == "I live in Porto"


# ---------------------------------------------------------------------------------------------
# chat/tools.py


async def turn_config(
    pool: AsyncConnectionPool, embedder: Embedder, chat_id: uuid.UUID, said: str = "test message"
) -> Any:
    """A turn of this chat whose user message says `said`."""
    services = SimpleNamespace(database=SimpleNamespace(pool=pool), embedder=embedder)
    message = await chat_store.add_message(pool, chat_id, "user", said)
    turn = TurnContext(
        services=services,  # type: ignore[arg-type]  # what the tools use of Services
        chat_id=chat_id,
        user_id=LOCAL_USER_ID,
        user_message_id=message["message_id"],
        run_id=uuid.uuid4(),
        user_text=said,
        trace_id="test",
        started=time.monotonic(),
    )
    return {"configurable": {"turn": turn}}


def test_tool_schemas_show_only_the_model_arguments() -> None:
    schemas = tool_schemas()
    names = [s["function"]["name"] for s in schemas]
    assert names == ["save_memory", "retrieve_memory", "search_documents", "web_search",
                     "fetch_url", "calculator", "current_datetime"]  # fmt: skip
    assert [s["function"]["name"] for s in schemas] == [t.name for t in TOOLS]
    parameters = {s["function"]["name"]: s["function"]["parameters"] for s in schemas}
    assert set(parameters["save_memory"]["properties"]) == {"content", "quote"}
    assert parameters["save_memory"]["required"] == ["content", "quote"]
    assert set(parameters["retrieve_memory"]["properties"]) == {"query"}
    assert set(parameters["search_documents"]["properties"]) == {"query"}
    assert set(parameters["fetch_url"]["properties"]) == {"urls"}
    # `config` is injected by LangChain, never asked of the model.
    assert "config" not in json.dumps(schemas)
    for tool in TOOLS:
        assert "config" not in tool.tool_call_schema.model_json_schema()["properties"]
        assert convert_to_openai_tool(tool) in schemas
    # The descriptions tell the model when to call them, as plain one-line paragraphs.
    save_text = schemas[0]["function"]["description"]
    assert "third person" in save_text and "500 characters" in save_text
    assert "before answering a personal question" in schemas[1]["function"]["description"]
    assert all("\n    " not in s["function"]["description"] for s in schemas)

    assert tool_schemas(["retrieve_memory"]) == [schemas[1]]
    with pytest.raises(ValueError, match="web_serch"):
        tool_schemas(["web_serch"])


async def test_save_tool_says_saved_then_already_known(
    memory_pool: AsyncConnectionPool, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    chat = await chat_store.create_chat(memory_pool)
    said = "Remember that I'm vegetarian, please."
    config = await turn_config(memory_pool, embedder, chat["chat_id"], said)
    caplog.set_level(logging.INFO, logger="resolveai.memory")

    first = await save_memory.ainvoke(
        {"content": "The user is vegetarian.", "quote": "I'm vegetarian"}, config=config
    )
    again = await save_memory.ainvoke(
        {"content": "The user is a vegetarian.", "quote": "I’m vegetarian"}, config=config
    )
    with pytest.raises(memory_store.NotGrounded, match="not something the user said"):
        await save_memory.ainvoke(
            {"content": "The user has a dog.", "quote": "I have a dog"}, config=config
        )

    assert json.loads(first) == {"saved": True, "memory": "The user is vegetarian."}
    answer = json.loads(again)
    assert answer["saved"] is False
    assert answer["already_known"] == "The user is vegetarian."
    assert "already known" in answer["note"]
    assert await count_memories(memory_pool) == 1
    async with memory_pool.connection() as conn:
        cursor = await conn.execute("SELECT source_chat_id FROM memories")
        assert await cursor.fetchall() == [(chat["chat_id"],)]

    lines = [r.getMessage() for r in caplog.records if r.name == "resolveai.memory"]
    short_id = chat["chat_id"].hex[:8]
    assert len(lines) == 3
    assert lines[2].startswith("Memory: refused 'The user has a dog.': that is not something")
    assert lines[0].startswith(f"Memory: saved 'The user is vegetarian.' (chat {short_id}, ")
    assert lines[0].endswith(" ms)")
    assert lines[1].startswith(
        "Memory: already known 'The user is a vegetarian.' as 'The user is vegetarian.'"
    )


async def test_save_tool_refuses_an_answer_to_the_users_question(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    chat = await chat_store.create_chat(memory_pool)
    config = await turn_config(memory_pool, embedder, chat["chat_id"], "Which city is my home?")
    with pytest.raises(memory_store.NotGrounded, match="they asked it"):
        await save_memory.ainvoke(
            {"content": "The user's home city is Porto.", "quote": "Which city is my home?"},
            config=config,
        )
    assert await count_memories(memory_pool) == 0


async def test_save_tool_judges_a_quote_by_the_sentence_it_is_part_of(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    """A piece of a question is still asked, not told: "a small grey cat" out of "What is a good
    name for a small grey cat?" does not tell "The user has a small grey cat."."""
    chat = await chat_store.create_chat(memory_pool)
    said = "What is a good name for a small grey cat?"
    config = await turn_config(memory_pool, embedder, chat["chat_id"], said)
    with pytest.raises(memory_store.NotGrounded, match="they asked it"):
        await save_memory.ainvoke(
            {"content": "The user has a small grey cat.", "quote": "a small grey cat"},
            config=config,
        )
    assert await count_memories(memory_pool) == 0


async def test_save_tool_refuses_what_the_user_said_of_the_assistant(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    chat = await chat_store.create_chat(memory_pool)
    said = "You're doing an awesome job looking after your family!"
    config = await turn_config(memory_pool, embedder, chat["chat_id"], said)
    with pytest.raises(memory_store.NotGrounded, match="said it of someone else"):
        await save_memory.ainvoke(
            {"content": "The user looks after their family.", "quote": said}, config=config
        )
    assert await count_memories(memory_pool) == 0


async def test_save_tool_refuses_a_fact_its_quote_denies(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    """ "I'm not vegetarian any more" holds the word but says the opposite: no model can store
    "The user is vegetarian." with it; what the user did say can be stored."""
    chat = await chat_store.create_chat(memory_pool)
    said = "I'm not vegetarian any more, I eat fish now."
    config = await turn_config(memory_pool, embedder, chat["chat_id"], said)
    with pytest.raises(memory_store.NotGrounded, match="denied it"):
        await save_memory.ainvoke(
            {"content": "The user is vegetarian.", "quote": said}, config=config
        )
    assert await count_memories(memory_pool) == 0
    await save_memory.ainvoke(
        {"content": "The user is not vegetarian any more.", "quote": said}, config=config
    )
    assert await count_memories(memory_pool) == 1


async def test_save_tool_refuses_a_request_to_forget_as_its_quote(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    """ "Please forget that I live in Porto." asks to forget the fact, it does not tell it: no
    model, the chat's tool or the extraction alike, can store it from that quote."""
    chat = await chat_store.create_chat(memory_pool)
    said = "Please forget that I live in Porto."
    config = await turn_config(memory_pool, embedder, chat["chat_id"], said)
    with pytest.raises(memory_store.NotGrounded, match="asked to forget it"):
        await save_memory.ainvoke(
            {"content": "The user lives in Porto.", "quote": "I live in Porto"}, config=config
        )
    assert await count_memories(memory_pool) == 0


async def test_save_tool_rejects_a_too_long_fact(
    memory_pool: AsyncConnectionPool, embedder: Embedder
) -> None:
    chat = await chat_store.create_chat(memory_pool)
    config = await turn_config(memory_pool, embedder, chat["chat_id"], "I like x")
    with pytest.raises(ValueError, match="at most 500 characters"):
        await save_memory.ainvoke(
            {"content": "The user " + "x" * 500, "quote": "I like x"}, config=config
        )
    assert await count_memories(memory_pool) == 0


async def test_retrieve_tool_lists_memories_or_says_none(
    memory_pool: AsyncConnectionPool, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    await save_all(memory_pool, embedder, [*PETS[:2], *OTHER_FACTS])
    chat_id = (await chat_store.create_chat(memory_pool))["chat_id"]
    config = await turn_config(memory_pool, embedder, chat_id)
    caplog.set_level(logging.INFO, logger="resolveai.memory")

    found = json.loads(
        await retrieve_memory.ainvoke({"query": "What pets does the user have?"}, config=config)
    )
    nothing = json.loads(
        await retrieve_memory.ainvoke(
            {"query": "What is the boiling point of nitrogen?"}, config=config
        )
    )

    memories = found["memories"]
    assert 1 <= len(memories) <= 5
    assert {m["content"] for m in memories[:2]} == set(PETS[:2])
    assert all(set(m) == {"content", "saved_on"} for m in memories)
    # Saved moments ago (by the database's clock, which may be a day off in UTC).
    assert abs((date.fromisoformat(memories[0]["saved_on"]) - date.today()).days) <= 1
    assert nothing == {"memories": [], "note": "nothing relevant is known"}

    lines = [r.getMessage() for r in caplog.records if r.name == "resolveai.memory"]
    plural = "1 memory" if len(memories) == 1 else f"{len(memories)} memories"
    assert lines[0].startswith(
        f"Memory: {plural} found for 'What pets does the user have?' (chat {chat_id.hex[:8]}, "
    )
    assert lines[1].startswith("Memory: 0 memories found for 'What is the boiling point")
