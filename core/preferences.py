"""Install-wide preferences the user sets in the UI, kept in Postgres so every server process
sees the same (today: whether memory is paused)."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from core.statements import Db, execute, fetch_all

DEFAULTS: dict[str, Any] = {"memory_paused": False}


async def get_preferences(db: Db) -> dict[str, Any]:
    """Every preference, the default where none was set."""
    rows = await fetch_all(
        db, "SELECT name, value FROM preferences WHERE name = ANY(%s)", (list(DEFAULTS),)
    )
    stored = {row["name"]: row["value"] for row in rows}
    return {name: stored.get(name, default) for name, default in DEFAULTS.items()}


async def set_preferences(db: Db, **values: Any) -> dict[str, Any]:
    """Store the given preferences (names from `DEFAULTS`); returns them all."""
    unknown = set(values) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"Unknown preference(s): {', '.join(sorted(unknown))}")
    for name, value in values.items():
        await execute(
            db,
            "INSERT INTO preferences (name, value) VALUES (%s, %s) ON CONFLICT (name)"
            " DO UPDATE SET value = excluded.value, updated_at = now()",
            (name, Jsonb(value)),
        )
    return await get_preferences(db)


async def memory_paused(db: Db) -> bool:
    return bool((await get_preferences(db))["memory_paused"])


# The same as an SQL expression, for a statement that reads it on the way (a message's claim of
# its chat: one round trip less per message).
MEMORY_PAUSED_SQL = (
    "coalesce((SELECT (value #>> '{}')::boolean FROM preferences WHERE name = 'memory_paused'),"
    f" {'true' if DEFAULTS['memory_paused'] else 'false'})"
)
