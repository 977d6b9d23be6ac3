"""Running one SQL statement, on the pool or inside a caller's transaction, in one round trip.

Every store function takes either the pool (it borrows a connection and commits) or an open
connection. Given a connection, the work joins the caller's transaction and never commits it, so
several calls can commit (or roll back) together; a call that fails is undone back to a savepoint,
leaving the caller's transaction usable. Given the pool, the statement runs in autocommit: a single
statement is a transaction of its own, and wrapping it in BEGIN and COMMIT would cost two more
round trips to the server for nothing (`bench/turn.py` counts them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

Db = AsyncConnectionPool | psycopg.AsyncConnection[Any]


@asynccontextmanager
async def transaction_for(db: Db) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """Where to run one statement: a pooled connection in autocommit, or a savepoint in the
    caller's transaction."""
    if isinstance(db, AsyncConnectionPool):
        async with db.connection() as conn:
            await conn.set_autocommit(True)
            try:
                yield conn
            finally:
                # Pooled connections are handed out in transaction mode (memory_store relies on
                # it). A broken connection refuses the switch; the pool discards it anyway.
                with suppress(psycopg.Error):
                    await conn.set_autocommit(False)
    else:
        if not db.autocommit and db.info.transaction_status == pq.TransactionStatus.IDLE:
            # On an idle connection psycopg's transaction() would BEGIN and COMMIT on the
            # caller's behalf. Opening the caller's (implicit) transaction first makes it a
            # savepoint instead, and committing stays the caller's decision.
            await db.execute("SELECT 1")
        # A savepoint, so a failed statement here leaves the caller's transaction usable.
        async with db.transaction():
            yield db


async def fetch_one(db: Db, query: str | sql.Composed, params: Any) -> dict[str, Any] | None:
    async with transaction_for(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchone()


async def fetch_all(db: Db, query: str | sql.Composed, params: Any) -> list[dict[str, Any]]:
    async with transaction_for(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


async def execute(db: Db, query: str | sql.Composed, params: Any = None) -> int:
    """Run one statement; returns how many rows it touched."""
    async with transaction_for(db) as conn, conn.cursor() as cur:
        await cur.execute(query, params)
        return max(cur.rowcount, 0)
