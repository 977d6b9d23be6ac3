"""Automatic document search: the passages of the user's documents that fit their message, found
before the first model call, numbered as sources the reply cites with `[n]`.

Only for a user who has documents ready (the chat's claim reads that on the way: no cost for
anyone else). The search (rag/document_search.py) keeps only passages above its relevance floor,
so a question about something else brings none. The sources are announced to the browser with
a `sources` event before the first token and saved with the reply; each names its file, page,
section and passage, so the citation opens the file there even after the file is deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from chat.state import TurnContext
from chat.steps import send_event, short_id, step_event
from core.tracing import traced
from rag.document_search import FoundChunk, search_documents

log = logging.getLogger("resolveai.documents")

RECALL_LIMIT = 5


def document_search(turn: TurnContext) -> Callable[[str, int], Awaitable[list[FoundChunk]]]:
    """A search of the user's documents (this chat's first): `search(query, limit)`."""
    services = turn.services

    async def search(query: str, limit: int) -> list[FoundChunk]:
        return await search_documents(
            services.database.pool, services.embedder, query,
            user_id=turn.user_id, chat_id=turn.chat_id, limit=limit,
        )  # fmt: skip

    return search


@traced("document recall", kind="retriever")
async def recall_documents(
    turn: TurnContext, text: str
) -> tuple[list[dict[str, Any]], list[tuple[int, str, list[str]]]]:
    """The passages found: (their sources, for the browser and the saved reply; the numbered
    blocks the model reads, as core/prompts.py's `source_blocks` takes them)."""
    if not turn.has_documents or not text.strip():
        return [], []
    started = time.perf_counter()
    try:
        found = await document_search(turn)(text, RECALL_LIMIT)
    except Exception as error:  # a reply without the documents beats no reply
        log.warning("Documents: search failed, answering without it (%s: %s)",
                    type(error).__name__, error)  # fmt: skip
        return [], []
    log.info("Documents: %d passages for chat %s (%d ms)", len(found), short_id(turn.chat_id),
             (time.perf_counter() - started) * 1000)  # fmt: skip
    if not found:
        return [], []
    sources = [chunk.source(n) for n, chunk in enumerate(found, 1)]
    turn.document_sources.extend(sources)
    files = len({chunk.document_id for chunk in found})
    passages = "1 passage" if len(found) == 1 else f"{len(found)} passages"
    documents = "1 of your documents" if files == 1 else f"{files} of your documents"
    step_event(turn, f"Found {passages} in {documents}")
    send_event({"type": "sources", "sources": sources})
    return sources, [(s["n"], s["title"], [c.content]) for s, c in zip(sources, found, strict=True)]
