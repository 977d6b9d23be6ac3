"""Data for the browser tests: chats written straight into the database (with sources, steps and
summaries the scripted model cannot produce on its own), and the realistic "showcase" chat the
screenshots show."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg_pool import AsyncConnectionPool

from core import chat_store


async def seed_chat(
    pool: AsyncConnectionPool, title: str, turns: list[tuple[str, dict[str, Any]]]
) -> uuid.UUID:
    """A chat with these (user text, assistant message fields) turns; returns its id."""
    chat = await chat_store.create_chat(pool, title)
    for question, reply in turns:
        await chat_store.add_message(pool, chat["chat_id"], "user", question)
        await chat_store.add_message(pool, chat["chat_id"], "assistant", **reply)
    return chat["chat_id"]


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
