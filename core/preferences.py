"""Each user's preferences set in the UI, kept in Postgres so every server process sees the same
(today: whether memory is paused)."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.types.json import Jsonb

from core.statements import Db, execute, fetch_all

DEFAULTS: dict[str, Any] = {"memory_paused": False}


async def get_preferences(db: Db, user_id: uuid.UUID) -> dict[str, Any]:
    """Every preference of the user's, the default where none was set."""
    rows = await fetch_all(
        db,
        "SELECT name, value FROM preferences WHERE user_id = %s AND name = ANY(%s)",
        (user_id, list(DEFAULTS)),
    )
    stored = {row["name"]: row["value"] for row in rows}
    return {name: stored.get(name, default) for name, default in DEFAULTS.items()}


async def set_preferences(db: Db, user_id: uuid.UUID, **values: Any) -> dict[str, Any]:
    """Store the given preferences (names from `DEFAULTS`); returns them all."""
    unknown = set(values) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"Unknown preference(s): {', '.join(sorted(unknown))}")
    for name, value in values.items():
        await execute(
            db,
            "INSERT INTO preferences (user_id, name, value) VALUES (%s, %s, %s)"
            " ON CONFLICT (user_id, name) DO UPDATE SET value = excluded.value, updated_at = now()",
            (user_id, name, Jsonb(value)),
        )
    return await get_preferences(db, user_id)


async def memory_paused(db: Db, user_id: uuid.UUID) -> bool:
    return bool((await get_preferences(db, user_id))["memory_paused"])


def memory_paused_sql(user_id: str) -> str:
    """The same as an SQL expression for the user the column `user_id` names, for a statement
    that reads it on the way (a message's claim of its chat: one round trip less per message)."""
    return (
        "coalesce((SELECT (value #>> '{}')::boolean FROM preferences"
        f" WHERE user_id = {user_id} AND name = 'memory_paused'),"
        f" {'true' if DEFAULTS['memory_paused'] else 'false'})"
    )
