"""A throwaway copy of the app's stack for a suite: an embedded Postgres in a temporary folder (so
an eval never touches the user's chats and memories, even with DATABASE_URL set), with the models
the user configured (.env / environment: cloud keys, MODELS_CONFIG) and the local model's weights
from the app's data folder when they are already there."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from core.config import Settings, load_settings
from core.db import Database
from core.local_model.weights import default_model_path
from core.services import Services, open_services


def eval_settings(data_dir: Path, **overrides: object) -> Settings:
    configured = load_settings()
    weights = default_model_path(configured)
    update: dict[str, object] = {"app_data_dir": data_dir, "database_url": None}
    if configured.local_model_path is None and weights.is_file():
        update["local_model_path"] = weights  # not assembled again in the temporary folder
    return configured.model_copy(update=update | overrides)


@asynccontextmanager
async def scratch_database() -> AsyncIterator[Database]:
    with tempfile.TemporaryDirectory(prefix="resolveai-eval-") as folder:
        database = await Database.open(eval_settings(Path(folder)))
        try:
            yield database
        finally:
            await database.close()


@asynccontextmanager
async def scratch_services(**overrides: object) -> AsyncIterator[Services]:
    with tempfile.TemporaryDirectory(prefix="resolveai-eval-") as folder:
        services = await open_services(eval_settings(Path(folder), **overrides))
        try:
            yield services
        finally:
            await services.close()


async def forget_everything(pool: AsyncConnectionPool) -> None:
    """Empty the store between conversations: memories are global to an install."""
    async with pool.connection() as conn:
        # memory_jobs, turns and turn_events too: they reference messages (migrations 0004, 0006),
        # and TRUNCATE refuses to empty a table another one not in the list refers to.
        await conn.execute(
            "TRUNCATE memories, memory_jobs, turn_events, turns, document_jobs, document_chunks,"
            " documents, messages, chats"
        )
