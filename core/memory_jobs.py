"""The queue of memory extractions still to do, in Postgres.

After a reply is saved, its user message is queued here (`enqueue`, in the same transaction as the
reply, so a crash cannot lose it). Any server process takes the oldest job with `claim`: a row
lock with SKIP LOCKED picks it, and a lease (`claimed_until`) keeps other processes off it while
the extraction runs; a process that dies mid-job only delays it until the lease runs out. `finish`
deletes the job (and says whether another waits); `fail` records the error and leaves it for a
retry after a wait that doubles each time (`RETRY_SECONDS`), up to `MAX_ATTEMPTS`. Until then,
recall gives the user's own words from the queue (`queued_messages`): what they said is known at
once, the memory made from it later.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from core.statements import Db, execute, fetch_all, fetch_one

LEASE_SECONDS = 300  # longer than the slowest extraction call (the local model on a busy CPU)
# A failed extraction waits 30 s, then 60, 120 and 240 s: the local model refuses calls while it
# is busy with replies (a keyless trial: one extraction refused three times within a second, when
# a retry came at once, and dropped), and a hosted one may be down for a minute or two.
RETRY_SECONDS = 30
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class MemoryJob:
    message_id: uuid.UUID  # the user message to read for facts
    chat_id: uuid.UUID
    attempts: int  # including this one


async def enqueue(db: Db, message_id: uuid.UUID, chat_id: uuid.UUID) -> None:
    """Queue a user message for extraction (a pool or the caller's open transaction)."""
    await execute(
        db,
        "INSERT INTO memory_jobs (message_id, chat_id) VALUES (%s, %s)"
        " ON CONFLICT (message_id) DO NOTHING",
        (message_id, chat_id),
    )


@dataclass(frozen=True)
class QueuedMessage:
    content: str  # the user's message, as written
    sent_at: datetime


async def queued_messages(
    db: Db, *, user_id: uuid.UUID, other_than_chat: uuid.UUID | None, limit: int
) -> list[QueuedMessage]:
    """The user's newest `limit` messages still queued (or being extracted), newest first, from
    chats other than `other_than_chat` (whose history holds its own; None: from every chat)."""
    rows = await fetch_all(
        db,
        "SELECT m.content, m.sent_at FROM memory_jobs j"
        " JOIN chats c ON c.chat_id = j.chat_id JOIN messages m ON m.message_id = j.message_id"
        " WHERE c.user_id = %s AND j.chat_id IS DISTINCT FROM %s ORDER BY m.sent_at DESC LIMIT %s",
        (user_id, other_than_chat, limit),
    )
    return [QueuedMessage(**row) for row in rows]


async def claim(db: Db, lease_seconds: int = LEASE_SECONDS) -> MemoryJob | None:
    """The oldest job nobody holds, now leased to the caller; None when there is none."""
    row = await fetch_one(
        db,
        "UPDATE memory_jobs SET attempts = attempts + 1,"
        " claimed_until = now() + make_interval(secs => %(lease)s)"
        " WHERE message_id = (SELECT message_id FROM memory_jobs"
        "   WHERE claimed_until IS NULL OR claimed_until < now()"
        "   ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)"
        " RETURNING message_id, chat_id, attempts",
        {"lease": lease_seconds},
    )
    return MemoryJob(**row) if row else None


async def finish(db: Db, message_id: uuid.UUID) -> bool:
    """Delete the job; returns whether another one waits, free to claim (so a worker that has
    just done the last one does not ask again)."""
    row = await fetch_one(
        db,
        "WITH done AS (DELETE FROM memory_jobs WHERE message_id = %(job)s)"
        " SELECT EXISTS (SELECT 1 FROM memory_jobs WHERE message_id <> %(job)s"
        "  AND (claimed_until IS NULL OR claimed_until < now())) AS more",
        {"job": message_id},
    )
    return bool(row and row["more"])


async def fail(db: Db, job: MemoryJob, error: str) -> bool:
    """Record the failure; the job is claimed again after its wait, or dropped after
    `MAX_ATTEMPTS`. Returns whether it will be retried."""
    if job.attempts >= MAX_ATTEMPTS:
        await finish(db, job.message_id)
        return False
    await execute(
        db,
        "UPDATE memory_jobs SET claimed_until = now() + make_interval(secs => %s), last_error = %s"
        " WHERE message_id = %s",
        (RETRY_SECONDS * 2 ** (job.attempts - 1), error[:1000], job.message_id),
    )
    return True


async def pending(db: Db) -> int:
    """How many jobs wait (for /api/health, tests and benchmarks)."""
    row = await fetch_one(db, "SELECT count(*) AS n FROM memory_jobs", ())
    return int(row["n"]) if row else 0
