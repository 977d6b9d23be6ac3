"""One uploaded document → searchable chunks: convert (rag/document_convert.py, in a child process),
chunk each page with the web pages' chunker (rag/md_chunker.py: the same cleaning, section headers
and token budget), embed in batches, store (core/document_store.py), reporting progress on the way.

Every step reports its progress to the document's row, which is also how a cancel is noticed: a
report that finds the document no longer processing stops the work, and nothing is stored.
Chunking and embedding run in threads (the embedder's own), never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from core import document_store
from core.document_store import StoredChunk
from rag.conversion_process import convert_in_subprocess
from rag.document_convert import Converted, DocumentRejected
from rag.embedder import Embedder
from rag.md_chunker import NO_SECTION, budget_for, chunk_page
from rag.search_providers import SearchResult

log = logging.getLogger("resolveai.documents")

# Texts per embedding call, and how often progress is reported (and a cancel noticed).
# bench/documents.py on a 100-page PDF's chunks (2 runs, bench/RESULTS.md): chunks/s 8 → 5.9,
# 16 → 8.5, 32 → 10.3, 64 → 12.1, all at once 12.5. 32 takes most of the gain (1.7× of 8) while a
# call holds the shared embedder ~3 s, not ~5 s, so a chat's query embedding waits less behind it.
EMBED_BATCH = 32
NO_TEXT = "No text found in this file; scanned PDFs need OCR, which ResolveAI does not do yet."


class Cancelled(Exception):
    """The document was cancelled or deleted while it was being processed."""


@dataclass
class IngestResult:
    chunks: int
    pages: int | None
    seconds: float


def document_chunks(converted: Converted, filename: str, embedder: Embedder) -> list[StoredChunk]:
    """The converted pages' chunks (CPU work: run in a thread), without vectors yet."""
    budget = budget_for(embedder)
    chunks: list[StoredChunk] = []
    for index, page in enumerate(converted.pages):
        if not page.markdown.strip():
            continue
        title = f"{filename}, page {page.number}" if page.number is not None else filename
        result = SearchResult(url="", title=title, content=page.markdown)
        for chunk in chunk_page(result, index, embedder.count_tokens, budget, keep_small=True):
            heading = "" if chunk.heading_path == NO_SECTION else chunk.heading_path
            chunks.append(StoredChunk(page.number, heading, chunk.text, None))
    return chunks


async def ingest_document(
    pool: AsyncConnectionPool, embedder: Embedder, document_id: uuid.UUID, filename: str,
    data: bytes,
) -> IngestResult:  # fmt: skip
    """Convert, chunk, embed and store one document. Raises DocumentRejected (the file cannot be
    read: say why) or Cancelled; other errors are worth a retry."""
    started = time.monotonic()

    async def progress(stage: str, done: int = 0, total: int = 0) -> None:
        if not await document_store.set_progress(pool, document_id, stage, done, total):
            raise Cancelled

    await progress("converting")
    converted = await convert_in_subprocess(data, filename)
    await progress("chunking", 0, len(converted.pages))
    pieces = await asyncio.to_thread(document_chunks, converted, filename, embedder)
    if not pieces:
        raise DocumentRejected(NO_TEXT)
    # Shortest first: a batch is padded to its longest text, so texts of like length batch
    # together, as one call of all the texts would sort them (sentence-transformers does).
    order = sorted(range(len(pieces)), key=lambda i: len(pieces[i].content))
    vectors: list[Any] = [None] * len(pieces)
    for start in range(0, len(pieces), EMBED_BATCH):
        await progress("embedding", start, len(pieces))
        batch = order[start : start + EMBED_BATCH]
        found = await embedder.embed_documents([pieces[i].content for i in batch])
        for i, vector in zip(batch, found, strict=True):
            vectors[i] = vector
    chunks = [
        StoredChunk(p.page, p.heading, p.content, vector)
        for p, vector in zip(pieces, vectors, strict=True)
    ]
    stored = await document_store.store_chunks(
        pool, document_id, chunks, embedder.model_name, converted.kind, converted.page_count
    )
    if not stored:
        raise Cancelled
    return IngestResult(len(chunks), converted.page_count, time.monotonic() - started)
