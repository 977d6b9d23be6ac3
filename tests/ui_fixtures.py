"""Data for the browser tests: chats and memories written straight into the database (with
sources, steps, summaries and memory histories the scripted model cannot produce on its own), and
the realistic "showcase" chat and memories the screenshots show."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from core import chat_store
from core.accounts import LOCAL_USER_ID
from rag.embedder import Embedder


async def seed_chat(
    pool: AsyncConnectionPool,
    title: str,
    turns: list[tuple[str, dict[str, Any]]],
    temporary: bool = False,
) -> uuid.UUID:
    """A chat with these (user text, assistant message fields) turns; returns its id."""
    chat = await chat_store.create_chat(pool, title, temporary=temporary)
    for question, reply in turns:
        await chat_store.add_message(pool, chat["chat_id"], "user", question)
        await chat_store.add_message(pool, chat["chat_id"], "assistant", **reply)
    return chat["chat_id"]


async def user_message_ids(pool: AsyncConnectionPool, chat_id: uuid.UUID) -> list[uuid.UUID]:
    """The chat's user messages, oldest first."""
    messages = await chat_store.list_messages(pool, chat_id)
    return [m["message_id"] for m in messages if m["role"] == "user"]


async def seed_memory(
    pool: AsyncConnectionPool,
    embedder: Embedder,
    content: str,
    quote: str,
    *,
    chat_id: uuid.UUID | None = None,
    message_id: uuid.UUID | None = None,
    created_at: datetime | None = None,
    valid_to: datetime | None = None,
    superseded_by: uuid.UUID | None = None,
) -> uuid.UUID:
    """A memory row as the store would write it (real embedding, so recall finds it); returns
    its id. Written with SQL so a test can give it any history (valid_to, superseded_by)."""
    vector = (await embedder.embed_documents([content]))[0]
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "INSERT INTO memories (content, quote, embedding, embed_model, source_chat_id,"
            " source_message_id, valid_from, valid_to, superseded_by, created_at, updated_at)"
            " VALUES (%(content)s, %(quote)s, %(vector)s, %(model)s, %(chat)s, %(message)s,"
            " coalesce(%(created)s, now()), %(valid_to)s, %(by)s, coalesce(%(created)s, now()),"
            " coalesce(%(created)s, now())) RETURNING memory_id",
            {
                "content": content,
                "quote": quote,
                "vector": vector,
                "model": embedder.model_name,
                "chat": chat_id,
                "message": message_id,
                "created": created_at,
                "valid_to": valid_to,
                "by": superseded_by,
            },
        )
        row = await cur.fetchone()
    assert row is not None
    return row["memory_id"]


async def memory_row(pool: AsyncConnectionPool, memory_id: uuid.UUID) -> dict[str, Any] | None:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT memory_id, content, quote, source_chat_id, source_message_id, valid_to,"
            " superseded_by FROM memories WHERE memory_id = %s",
            (memory_id,),
        )
        return await cur.fetchone()


async def count_memories(pool: AsyncConnectionPool) -> int:
    """The single-user install's memories (the browser tests' user; the accounts tests' users
    have their own)."""
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.execute("SELECT count(*) FROM memories WHERE user_id = %s", (LOCAL_USER_ID,))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


# Oldest first: the last one ends up just under the showcase chat.
SHOWCASE_SIDEBAR = [
    "Cover letter for a data analyst job",
    "Why is my sourdough so dense?",
    "Regex for UK postcodes",
    "Plan a 5 km running program",
    "Compare two mortgage offers",
    "Kubernetes readiness vs liveness",
    "Vegetarian dinner ideas for six",
    "Translate a letter to Portuguese",
    "Sourdough starter feeding schedule",
    "Weekend trip to Lisbon in April",
    "Explain Postgres MVCC simply",
    "Birthday gift ideas for a 10-year-old",
    "Fix a flaky pytest fixture",
    "Monthly budget spreadsheet formulas",
]

SHOWCASE_QUESTION = "What changed in Python 3.13, and should I upgrade my Django app?"

SHOWCASE_ANSWER = """Python 3.13 is mostly about the interpreter itself [1]:

| Change | Status | What it means for you |
| --- | --- | --- |
| Free-threaded build (no GIL) | experimental | a separate `python3.13t`; C extensions opt in [2] |
| JIT compiler | experimental, off by default | no speed-up yet for typical web code [3] |
| New interactive shell | stable | colours, multi-line editing, `exit` without parentheses [1] |

**Should you upgrade?** Django 5.1.3 and later support 3.13 [4], so:

1. Run your test suite on 3.13 in CI first.
2. Check that compiled dependencies (`psycopg`, `Pillow`) ship 3.13 wheels.
3. Stay on the default build: the free-threaded one is not for production yet.

```python
import sys

if sys.version_info >= (3, 13):
    print("GIL enabled:", sys._is_gil_enabled())
```
"""

SHOWCASE_SOURCES = [
    {
        "n": 1,
        "title": "What's New In Python 3.13",
        "url": "https://docs.python.org/3/whatsnew/3.13.html",
    },
    {
        "n": 2,
        "title": "PEP 703 – Making the Global Interpreter Lock Optional",
        "url": "https://peps.python.org/pep-0703/",
    },
    {"n": 3, "title": "PEP 744 – JIT Compilation", "url": "https://peps.python.org/pep-0744/"},
    {
        "n": 4,
        "title": "Django 5.1.3 release notes",
        "url": "https://docs.djangoproject.com/en/5.1/releases/5.1.3/",
    },
]

SHOWCASE_STEPS = [
    {"text": "Thinking", "elapsed_ms": 12},
    {"text": "Searching the web for Python 3.13 changes", "elapsed_ms": 840, "tool": "web_search"},
    {"text": "Reading 5 pages", "elapsed_ms": 2210},
    {"text": "Checking the evidence", "elapsed_ms": 3105},
    {"text": "Writing the answer with 4 sources", "elapsed_ms": 3920},
]

SHOWCASE_TOOL_CALLS = [
    {
        "id": "call_1",
        "name": "web_search",
        "args": {"query": "Python 3.13 changes"},
        "result": "",
        "ok": True,
        "duration_ms": 3050,
    }
]


async def seed_showcase(pool: AsyncConnectionPool) -> uuid.UUID:
    """Realistic chats for the screenshots; the showcase chat is the newest."""
    for title in SHOWCASE_SIDEBAR:
        await seed_chat(pool, title, [("Hi", {"content": "Hello!"})])
    return await seed_chat(
        pool,
        "Python 3.13 and Django",
        [
            (
                SHOWCASE_QUESTION,
                {
                    "content": SHOWCASE_ANSWER,
                    "sources": SHOWCASE_SOURCES,
                    "steps": SHOWCASE_STEPS,
                    "tool_calls": SHOWCASE_TOOL_CALLS,
                },
            )
        ],
    )


SHOWCASE_MEMORY_CHAT = [
    (
        "We just moved from Lisbon to Porto, so I need a new running route near the river.",
        {"content": "Porto's riverside is great for running: try the Douro path from Ribeira."},
    ),
    (
        "I'm vegetarian, and my daughter Mia is allergic to peanuts.",
        {"content": "Noted. Here are three peanut-free vegetarian dinners…"},
    ),
]


async def seed_showcase_memories(pool: AsyncConnectionPool, embedder: Embedder) -> uuid.UUID:
    """The Memory page of the screenshots: a chat the facts came from, a replaced fact (moved
    from Lisbon to Porto) and two current ones. Returns the chat's id."""
    chat_id = await seed_chat(pool, "Running and dinner plans", SHOWCASE_MEMORY_CHAT)
    first, second = await user_message_ids(pool, chat_id)
    source = {"chat_id": chat_id}
    porto = await seed_memory(
        pool, embedder, "The user lives in Porto", "We just moved from Lisbon to Porto",
        message_id=first, **source,
    )  # fmt: skip
    now = datetime.now().astimezone()
    await seed_memory(
        pool, embedder, "The user lives in Lisbon", "We just moved from Lisbon",
        message_id=first, created_at=now - timedelta(days=40), valid_to=now, superseded_by=porto,
        **source,
    )  # fmt: skip
    await seed_memory(
        pool, embedder, "The user is vegetarian", "I'm vegetarian", message_id=second, **source
    )
    await seed_memory(
        pool, embedder, "The user's daughter Mia is allergic to peanuts",
        "my daughter Mia is allergic to peanuts", message_id=second, **source,
    )  # fmt: skip
    return chat_id
