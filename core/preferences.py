"""Each user's preferences set in the UI, kept in Postgres so every server process sees the same:
whether memory is paused, the theme, whether "Use web tool" starts ticked, the tools switched off,
the browser's time zone (for the current_datetime tool) and the user's custom instructions.
Values are checked by the API (chat/memory_routes.py `SettingsEdit`); a stored value of the wrong
type reads as the default."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.types.json import Jsonb

from core.statements import Db, execute, fetch_all

DEFAULTS: dict[str, Any] = {
    "memory_paused": False,
    "theme": "system",  # "system", "light" or "dark"
    "use_web_default": False,  # "Use web tool" ticked in a new chat's composer
    "disabled_tools": [],  # names of chat/tools.py TOOLS never offered to the model
    "time_zone": None,  # an IANA name the browser reported, e.g. "Europe/Lisbon"
    # How the user wants to be answered, in their words (ChatGPT's custom instructions): given
    # to the chat model with every message.
    "custom_instructions": "",
}
MAX_INSTRUCTIONS_CHARS = 1500


async def get_preferences(db: Db, user_id: uuid.UUID) -> dict[str, Any]:
    """Every preference of the user's, the default where none was set."""
    rows = await fetch_all(
        db,
        "SELECT name, value FROM preferences WHERE user_id = %s AND name = ANY(%s)",
        (user_id, list(DEFAULTS)),
    )
    return with_defaults({row["name"]: row["value"] for row in rows})


def with_defaults(stored: dict[str, Any] | None) -> dict[str, Any]:
    """Every preference from the stored ones (name → value), the default for the rest."""
    stored = stored or {}
    return {
        name: _or_default(stored.get(name, default), default) for name, default in DEFAULTS.items()
    }


def _or_default(value: Any, default: Any) -> Any:
    # A value written by hand (or by an older version) of another type must not break a turn.
    if default is None:
        return value if value is None or isinstance(value, str) else None
    return value if type(value) is type(default) else default


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


def preferences_sql(user_id: str) -> str:
    """The stored preferences (a JSON object, name → value; `with_defaults` completes them) as an
    SQL expression for the user the column `user_id` names, for a statement that reads them on
    the way (a message's claim of its chat: one round trip less per message)."""
    return f"(SELECT jsonb_object_agg(name, value) FROM preferences WHERE user_id = {user_id})"
