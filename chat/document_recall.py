"""Automatic document search: the passages of the user's documents that fit their message, found
before the first model call, numbered as sources the reply cites with `[n]`.

Only for a user who has documents ready (the chat's claim reads that on the way: no cost for
anyone else). The search (rag/document_search.py) keeps only passages above its relevance floor,
so a question about something else brings none. The sources are announced to the browser with
a `sources` event before the first token and saved with the reply; each names its file, page,
section and passage, so the citation opens the file there even after the file is deleted.

Files sent with the message (attached in the composer) are read for it, whatever it says:
"Summarize this." shares no word with the file, so its search finds nothing. The whole file if it
fits (`SENT_CHARS`), else its start, said in a note; the search's passages follow.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from chat.state import TurnContext
from chat.steps import send_event, short_id, step_event
from core import document_store
from core.tracing import traced
from rag.document_search import FoundChunk, search_documents

log = logging.getLogger("resolveai.documents")

RECALL_LIMIT = 5
# Of the files sent with a message, read for it (shared between them). The local model read a
# prompt at ~45 tokens/s on two cores (a keyless trial: 8,000 characters of a PDF, 2,662 tokens
# with the instructions, took 62 s before the first word), so it gets about a page: ~3,000
# characters, ~1,000 tokens, ~20 s. A hosted model reads 40,000 (~10,000 tokens) in a second or two.
SENT_CHARS_LOCAL = 3_000
SENT_CHARS = 40_000


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
    """The passages read or found: (their sources, for the browser and the saved reply; the
    numbered blocks the model reads, as core/prompts.py's `source_blocks` takes them)."""
    if not (turn.has_documents or turn.sent_documents) or not text.strip():
        return [], []  # (a file sent still being read is not counted as one to search)
    read = await _read_sent(turn) if turn.sent_documents else []
    found = await _search(turn, text)
    seen = {chunk.chunk_id for chunk in read}
    found = [chunk for chunk in found if chunk.chunk_id not in seen]
    if found:
        files = len({chunk.document_id for chunk in found})
        passages = "1 passage" if len(found) == 1 else f"{len(found)} passages"
        documents = "1 of your documents" if files == 1 else f"{files} of your documents"
        step_event(turn, f"Found {passages} {'more ' if read else ''}in {documents}")
    chunks = read + found
    if not chunks:
        return [], []
    sources = [chunk.source(n) for n, chunk in enumerate(chunks, 1)]
    turn.document_sources.extend(sources)
    send_event({"type": "sources", "sources": sources})
    blocks = [(s["n"], s["title"], [c.content]) for s, c in zip(sources, chunks, strict=True)]
    return sources, blocks


async def _search(turn: TurnContext, text: str) -> list[FoundChunk]:
    started = time.perf_counter()
    try:
        found = await document_search(turn)(text, RECALL_LIMIT)
    except Exception as error:  # a reply without the documents beats no reply
        log.warning("Documents: search failed, answering without it (%s: %s)",
                    type(error).__name__, error)  # fmt: skip
        return []
    log.info("Documents: %d passages for chat %s (%d ms)", len(found), short_id(turn.chat_id),
             (time.perf_counter() - started) * 1000)  # fmt: skip
    return found


async def _read_sent(turn: TurnContext) -> list[FoundChunk]:
    """The files sent with the message, read from their start (each one's step says how much),
    and a note for each that cannot be read."""
    services = turn.services
    chars = SENT_CHARS_LOCAL if services.model_plan.runs_locally("chat") else SENT_CHARS
    pool, ids = services.database.pool, turn.sent_documents
    rows = await document_store.read_documents(pool, ids, turn.user_id, turn.chat_id, chars)
    read: list[FoundChunk] = []
    for row in rows:
        chunks = row["chunks_read"]
        step_event(turn, _reading(row, len(chunks) == row["chunks"]))
        if len(chunks) < row["chunks"]:
            turn.add_note(
                f"Only the start of {row['filename']} was read for this reply; ask about a"
                " part of it to have that part found."
            )
        read += [_passage(row, chunk) for chunk in chunks]
    if len(rows) < len(ids):  # not ready, failed, or deleted since
        read_ids = {row["document_id"] for row in rows}
        for document in await document_store.get_documents(pool, ids, turn.user_id):
            if document["document_id"] not in read_ids:
                turn.add_note(_unread(document))
    return read


def _passage(document: dict[str, Any], chunk: dict[str, Any]) -> FoundChunk:
    """A chunk read from a sent file, as a passage the search would have found."""
    return FoundChunk(
        chunk_id=uuid.UUID(chunk["chunk_id"]), document_id=document["document_id"],
        filename=document["filename"], page=chunk["page"], heading=chunk["heading"],
        content=chunk["content"], similarity=1.0, score=1.0,
    )  # fmt: skip


def _reading(document: dict[str, Any], whole: bool) -> str:
    """'Reading guide.pdf (4 pages)', 'Reading the start of notes.pdf (pages 1-3 of 117)'."""
    name, pages = document["filename"], document["pages"]
    if whole:
        return f"Reading {name} ({pages} page{'s' * (pages != 1)})" if pages else f"Reading {name}"
    if pages and document["pages_read"]:
        read = document["pages_read"]
        upto = f"pages 1-{read}" if read > 1 else "page 1"
        return f"Reading the start of {name} ({upto} of {pages})"
    return f"Reading the start of {name}"


def _unread(document: dict[str, Any]) -> str:
    name = document["filename"]
    if document["status"] == "failed":
        return f"{name} could not be read: {document['error']}"
    if document["status"] == "processing":
        return f"{name} is still being read: send your message again once it shows Ready."
    return f"{name} has no text to read."
