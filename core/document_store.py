"""The user's documents in Postgres (migration 0009): the files, their processing jobs and chunks.

Uploading stores the file and queues its job in one statement (`add_document`); the same bytes
uploaded again by the same user give back the document they already have. Any server process
claims the oldest job (`claim_job`: FOR UPDATE SKIP LOCKED and a lease), reports its progress
(`set_progress`) and stores the chunks, the document's status and the job's end in one
transaction (`store_chunks`), which finds nothing to do if the document was cancelled or
deleted meanwhile. Every function a route calls is scoped by `user_id`: another user's document
is not there.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from core.statements import Db, execute, fetch_all, fetch_one

LEASE_SECONDS = 600  # longer than converting and embedding the largest file allowed
MAX_ATTEMPTS = 3
DOCUMENT_COLUMNS = (
    "document_id, chat_id, filename, media_type, size_bytes, status, stage, done, total, error,"
    " kind, pages, chunks, created_at, updated_at"
)


@dataclass(frozen=True)
class StoredChunk:
    """A chunk ready to store: its place in the document, its text and vector."""

    page: int | None
    heading: str
    content: str
    embedding: Any


def _clean_name(filename: str) -> str:
    # A path a browser sent along ("C:\\Users\\…\\report.pdf") is not part of the name.
    name = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    return " ".join(name.split())[:255] or "document"


async def add_document(
    db: Db,
    user_id: uuid.UUID,
    filename: str,
    media_type: str,
    data: bytes,
    chat_id: uuid.UUID | None = None,
) -> tuple[dict[str, Any], bool]:
    """Store an uploaded file and queue it for processing: (the document, whether it is new). The
    same bytes already uploaded by this user give back that document, unchanged."""
    row = await fetch_one(
        db,
        "WITH added AS (INSERT INTO documents"
        "  (user_id, chat_id, filename, media_type, size_bytes, sha256, content, stage)"
        "  VALUES (%(user)s, %(chat)s, %(name)s, %(type)s, %(size)s, %(sha)s, %(data)s, 'queued')"
        f"  ON CONFLICT (user_id, sha256) DO NOTHING RETURNING {DOCUMENT_COLUMNS}),"
        " queued AS (INSERT INTO document_jobs (document_id) SELECT document_id FROM added)"
        f" SELECT {DOCUMENT_COLUMNS}, true AS new FROM added"
        f" UNION ALL SELECT {DOCUMENT_COLUMNS}, false FROM documents"
        "  WHERE user_id = %(user)s AND sha256 = %(sha)s AND NOT EXISTS (SELECT 1 FROM added)",
        {"user": user_id, "chat": chat_id, "name": _clean_name(filename), "type": media_type,
         "size": len(data), "sha": hashlib.sha256(data).digest(), "data": data},
    )  # fmt: skip
    assert row is not None
    new = row.pop("new")
    return row, new


async def list_documents(db: Db, user_id: uuid.UUID) -> list[dict[str, Any]]:
    return await fetch_all(
        db,
        f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE user_id = %s ORDER BY created_at DESC",
        (user_id,),
    )


async def get_document(db: Db, document_id: uuid.UUID, user_id: uuid.UUID) -> dict | None:
    return await fetch_one(
        db,
        f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE document_id = %s AND user_id = %s",
        (document_id, user_id),
    )


async def get_documents(
    db: Db, document_ids: Sequence[uuid.UUID], user_id: uuid.UUID
) -> list[dict[str, Any]]:
    """Those of the documents that are `user_id`'s, in the order asked."""
    if not document_ids:
        return []
    return await fetch_all(
        db,
        f"SELECT {DOCUMENT_COLUMNS} FROM documents"
        " WHERE document_id = ANY(%(ids)s) AND user_id = %(user)s"
        " ORDER BY array_position(%(ids)s, document_id)",
        {"ids": list(document_ids), "user": user_id},
    )


async def read_documents(
    db: Db,
    document_ids: Sequence[uuid.UUID],
    user_id: uuid.UUID,
    chat_id: uuid.UUID,
    chars: int,
) -> list[dict[str, Any]]:
    """Those of the user's documents that are ready, each with its chunks from the start in
    order, `chars` of text in all shared between them: a file sent with a message, read for it.
    Each not yet in a chat becomes `chat_id`'s on the way (its passages then come first in the
    chat's searches). Rows: the document's columns, `pages_read` and `chunks_read` (a list of
    chunk_id, page, heading, content)."""
    share = chars // max(1, len(document_ids))
    return await fetch_all(
        db,
        "WITH attached AS (UPDATE documents SET chat_id = %(chat)s"
        "  WHERE document_id = ANY(%(ids)s) AND user_id = %(user)s AND chat_id IS NULL)"
        f" SELECT {', '.join(f'd.{c}' for c in DOCUMENT_COLUMNS.split(', '))},"
        "  max(r.page) AS pages_read,"
        "  jsonb_agg(jsonb_build_object('chunk_id', r.chunk_id, 'page', r.page,"
        "   'heading', r.heading, 'content', r.content) ORDER BY r.ordinal) AS chunks_read"
        " FROM documents AS d CROSS JOIN LATERAL ("
        "  SELECT c.*, sum(length(c.content)) OVER (ORDER BY c.ordinal) AS upto"
        "  FROM document_chunks AS c"
        "  WHERE c.document_id = d.document_id AND c.user_id = %(user)s) AS r"
        " WHERE d.document_id = ANY(%(ids)s) AND d.user_id = %(user)s AND d.status = 'ready'"
        "  AND (r.ordinal = 0 OR r.upto <= %(share)s)"
        " GROUP BY d.document_id ORDER BY array_position(%(ids)s, d.document_id)",
        {"ids": list(document_ids), "user": user_id, "chat": chat_id, "share": share},
    )


async def get_file(db: Db, document_id: uuid.UUID, user_id: uuid.UUID) -> dict | None:
    """The original: its name, media type and bytes."""
    return await fetch_one(
        db,
        "SELECT filename, media_type, content FROM documents"
        " WHERE document_id = %s AND user_id = %s",
        (document_id, user_id),
    )


async def rename_document(
    db: Db, document_id: uuid.UUID, user_id: uuid.UUID, filename: str
) -> dict | None:
    return await fetch_one(
        db,
        "UPDATE documents SET filename = %s, updated_at = now()"
        f" WHERE document_id = %s AND user_id = %s RETURNING {DOCUMENT_COLUMNS}",
        (_clean_name(filename), document_id, user_id),
    )


async def delete_document(db: Db, document_id: uuid.UUID, user_id: uuid.UUID) -> bool:
    """Delete a document, its chunks and its job (by cascade)."""
    return bool(
        await execute(
            db,
            "DELETE FROM documents WHERE document_id = %s AND user_id = %s",
            (document_id, user_id),
        )
    )


async def reindex_document(db: Db, document_id: uuid.UUID, user_id: uuid.UUID) -> dict | None:
    """Process the document again (after a failure, a cancel, or a better converter)."""
    return await fetch_one(
        db,
        "WITH doc AS (UPDATE documents SET status = 'processing', stage = 'queued', done = 0,"
        "  total = 0, error = NULL, updated_at = now()"
        f"  WHERE document_id = %(doc)s AND user_id = %(user)s RETURNING {DOCUMENT_COLUMNS}),"
        " queued AS (INSERT INTO document_jobs (document_id) SELECT document_id FROM doc"
        "  ON CONFLICT (document_id) DO UPDATE SET attempts = 0, claimed_until = NULL)"
        f" SELECT {DOCUMENT_COLUMNS} FROM doc",
        {"doc": document_id, "user": user_id},
    )


async def cancel_document(db: Db, document_id: uuid.UUID, user_id: uuid.UUID) -> dict | None:
    """Stop processing a document: its job goes, and whoever runs it finds nothing to store.
    None if the user has no such document being processed."""
    return await fetch_one(
        db,
        "WITH doc AS (UPDATE documents SET status = 'cancelled', stage = NULL, updated_at = now()"
        "  WHERE document_id = %(doc)s AND user_id = %(user)s AND status = 'processing'"
        f"  RETURNING {DOCUMENT_COLUMNS}),"
        " unqueued AS (DELETE FROM document_jobs"
        "  WHERE document_id IN (SELECT document_id FROM doc))"
        f" SELECT {DOCUMENT_COLUMNS} FROM doc",
        {"doc": document_id, "user": user_id},
    )


async def document_chunks(
    db: Db, document_id: uuid.UUID, user_id: uuid.UUID, page: int | None = None
) -> list[dict[str, Any]]:
    """A document's chunks in order (one page's, with `page`); the caller checked it is the
    user's (whose partition of the chunks is read)."""
    return await fetch_all(
        db,
        "SELECT chunk_id, ordinal, page, heading, content FROM document_chunks"
        " WHERE document_id = %s AND user_id = %s AND (%s::int IS NULL OR page = %s)"
        " ORDER BY ordinal",
        (document_id, user_id, page, page),
    )


def has_documents_sql(user_id: str) -> str:
    """Whether the user the column `user_id` names has a document to search, as an SQL
    expression, for a statement that reads it on the way (a message's claim of its chat)."""
    return (
        "EXISTS (SELECT 1 FROM documents AS d"
        f" WHERE d.user_id = {user_id} AND d.status = 'ready' AND d.chunks > 0)"
    )


# ---------------------------------------------------------------------------------------------
# Processing


async def claim_job(db: Db, lease_seconds: int = LEASE_SECONDS) -> dict[str, Any] | None:
    """The oldest document waiting, leased to the caller, with its bytes (`content`), owner and
    `attempts`; None when there is none."""
    return await fetch_one(
        db,
        "WITH job AS (UPDATE document_jobs SET attempts = attempts + 1,"
        "  claimed_until = now() + make_interval(secs => %(lease)s)"
        "  WHERE document_id = (SELECT document_id FROM document_jobs"
        "   WHERE claimed_until IS NULL OR claimed_until < now()"
        "   ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)"
        "  RETURNING document_id, attempts)"
        " SELECT d.document_id, d.user_id, d.filename, d.media_type, d.content, job.attempts"
        " FROM job JOIN documents AS d USING (document_id)",
        {"lease": lease_seconds},
    )


async def set_progress(db: Db, document_id: uuid.UUID, stage: str, done: int, total: int) -> bool:
    """Report progress; False if the document is no longer being processed (cancelled, deleted:
    the worker stops)."""
    return bool(
        await execute(
            db,
            "UPDATE documents SET stage = %s, done = %s, total = %s, updated_at = now()"
            " WHERE document_id = %s AND status = 'processing'",
            (stage, done, total, document_id),
        )
    )


async def store_chunks(
    pool: AsyncConnectionPool,
    document_id: uuid.UUID,
    chunks: Sequence[StoredChunk],
    embed_model: str,
    kind: str,
    pages: int | None,
) -> bool:
    """Replace the document's chunks with these and mark it ready, ending its job, in one
    transaction; False (nothing written) if it was cancelled or deleted meanwhile."""
    async with (
        pool.connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await cur.execute(
            "UPDATE documents SET status = 'ready', stage = NULL, done = total, error = NULL,"
            " kind = %s, pages = %s, chunks = %s, updated_at = now()"
            " WHERE document_id = %s AND status = 'processing' RETURNING user_id",
            (kind, pages, len(chunks), document_id),
        )
        owner = await cur.fetchone()
        if owner is None:
            return False
        await cur.execute(
            "DELETE FROM document_chunks WHERE document_id = %s AND user_id = %s",
            (document_id, owner["user_id"]),
        )
        await cur.executemany(
            "INSERT INTO document_chunks"
            " (document_id, user_id, ordinal, page, heading, content, embedding, embed_model)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (document_id, owner["user_id"], n, c.page, c.heading, c.content, c.embedding,
                 embed_model)
                for n, c in enumerate(chunks)
            ],
        )  # fmt: skip
        await cur.execute("DELETE FROM document_jobs WHERE document_id = %s", (document_id,))
    return True


async def fail_document(db: Db, document_id: uuid.UUID, error: str) -> None:
    """The document cannot be processed (`error` says why, for the user); its job ends."""
    await execute(
        db,
        "WITH failed AS (UPDATE documents SET status = 'failed', stage = NULL, error = %(error)s,"
        "  updated_at = now() WHERE document_id = %(doc)s AND status = 'processing')"
        " DELETE FROM document_jobs WHERE document_id = %(doc)s",
        {"doc": document_id, "error": error[:1000]},
    )


async def retry_later(db: Db, document_id: uuid.UUID, attempts: int, error: str) -> bool:
    """A failure worth retrying (the database, the embedder): the job is freed for another try,
    or the document fails after MAX_ATTEMPTS. Returns whether it will be retried."""
    if attempts >= MAX_ATTEMPTS:
        await fail_document(db, document_id, f"Processing failed {attempts} times: {error}")
        return False
    await execute(
        db, "UPDATE document_jobs SET claimed_until = NULL WHERE document_id = %s", (document_id,)
    )
    return True
