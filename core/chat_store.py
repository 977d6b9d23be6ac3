"""Chats and their messages in Postgres: plain async functions, one SQL statement each.

Every function takes either the pool or an open connection, whose transaction it then joins
(core/statements.py: one round trip a call either way).

Rows come back as dicts keyed by column name; ids are `uuid.UUID`; `sources`, `steps` and
`tool_calls` are the decoded JSON lists.

Message statuses: 'complete', 'interrupted' (stopped by the user or a dropped connection),
'error' (see the `error` column) and 'streaming' (a reply saved while still being written; the
writer updates it with `update_message` when it ends).
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from core.statements import Db, fetch_all, fetch_one

DEFAULT_TITLE = "New chat"
ROLES = ("user", "assistant")
STATUSES = ("complete", "interrupted", "error", "streaming")

_MESSAGE_COLUMNS = (
    "message_id, chat_id, role, content, status, sources, steps, tool_calls, error, sent_at,"
    " memory_ids, reply_to"
)


class ChatNotFound(LookupError):
    """The chat does not exist (never did, or was deleted)."""


def _clean_title(title: str | None) -> str:
    cleaned = " ".join((title or "").split())
    return cleaned or DEFAULT_TITLE


def _check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    # The database has the same CHECK; failing here gives a clearer error before any I/O.
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")


# ---------------------------------------------------------------------------------------------
# Chats


async def create_chat(db: Db, title: str | None = None, temporary: bool = False) -> dict[str, Any]:
    """A new empty chat; a missing or blank title becomes 'New chat'. A temporary chat neither
    reads nor writes memory."""
    row = await fetch_one(
        db,
        "INSERT INTO chats (title, temporary) VALUES (%s, %s) RETURNING *",
        (_clean_title(title), temporary),
    )
    assert row is not None
    return row


async def get_chat(db: Db, chat_id: uuid.UUID) -> dict[str, Any] | None:
    return await fetch_one(db, "SELECT * FROM chats WHERE chat_id = %s", (chat_id,))


async def list_chats(
    db: Db, limit: int = 100, title_filter: str | None = None
) -> list[dict[str, Any]]:
    """Chats with the most recent activity first; `title_filter` matches part of the title,
    ignoring case, with `%` and `_` taken literally."""
    if title_filter:
        escaped = title_filter.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return await fetch_all(
            db,
            "SELECT * FROM chats WHERE title ILIKE %s"
            " ORDER BY updated_at DESC, created_at DESC LIMIT %s",
            (f"%{escaped}%", limit),
        )
    return await fetch_all(
        db, "SELECT * FROM chats ORDER BY updated_at DESC, created_at DESC LIMIT %s", (limit,)
    )


async def rename_chat(db: Db, chat_id: uuid.UUID, title: str) -> dict[str, Any] | None:
    """The renamed chat, or None if it does not exist.

    Leaves `updated_at` alone: renaming is not activity, so it does not move the chat to the top.
    """
    return await fetch_one(
        db,
        "UPDATE chats SET title = %s WHERE chat_id = %s RETURNING *",
        (_clean_title(title), chat_id),
    )


async def delete_chat(db: Db, chat_id: uuid.UUID, forget_memories: bool = False) -> bool:
    """Delete a chat and (by cascade) its messages; False if it did not exist.

    Memories learned from it stay, with their source set to NULL, unless `forget_memories`: then
    they go too, in the same statement.
    """
    row = await fetch_one(
        db,
        "WITH forgotten AS (DELETE FROM memories WHERE %(forget)s AND source_chat_id = %(chat)s)"
        " DELETE FROM chats WHERE chat_id = %(chat)s RETURNING chat_id",
        {"chat": chat_id, "forget": forget_memories},
    )
    return row is not None


async def set_summary(
    db: Db,
    chat_id: uuid.UUID,
    summary: str,
    upto_message_id: uuid.UUID,
    previous_upto_message_id: uuid.UUID | None = None,
) -> bool:
    """Store the rolling summary covering messages up to `upto_message_id`.

    Only if the chat's summary still ends at `previous_upto_message_id` (compare-and-set): when two
    processes fold the same messages at once, the second write is refused instead of overwriting.
    False if it was refused or there is no such chat.
    """
    row = await fetch_one(
        db,
        "UPDATE chats SET summary = %s, summary_upto_message_id = %s"
        " WHERE chat_id = %s AND summary_upto_message_id IS NOT DISTINCT FROM %s"
        " RETURNING chat_id",
        (summary, upto_message_id, chat_id, previous_upto_message_id),
    )
    return row is not None


async def claim_chat_run(
    db: Db, chat_id: uuid.UUID, run_id: uuid.UUID, lease_seconds: float
) -> dict[str, Any] | None:
    """Claim the chat for one reply (or extend this run's claim): the chat's id, `temporary` flag
    and `previous_run_id` (an expired claim taken over: its turn may need recovering), or None if
    another run holds it (or there is no such chat)."""
    return await fetch_one(
        db,
        "UPDATE chats AS c SET run_id = %(run)s,"
        " run_expires_at = now() + make_interval(secs => %(lease)s)"
        " FROM (SELECT chat_id, run_id FROM chats WHERE chat_id = %(chat)s FOR UPDATE) AS old"
        " WHERE c.chat_id = old.chat_id"
        " AND (c.run_id IS NULL OR c.run_id = %(run)s OR c.run_expires_at < now())"
        " RETURNING c.chat_id, c.temporary,"
        " CASE WHEN old.run_id <> %(run)s THEN old.run_id END AS previous_run_id",
        {"chat": chat_id, "run": run_id, "lease": lease_seconds},
    )


async def release_chat_run(db: Db, chat_id: uuid.UUID, run_id: uuid.UUID) -> None:
    """Let the next message in (only this run's own claim is released)."""
    await fetch_one(
        db,
        "UPDATE chats SET run_id = NULL, run_expires_at = NULL"
        " WHERE chat_id = %s AND run_id = %s RETURNING chat_id",
        (chat_id, run_id),
    )


# ---------------------------------------------------------------------------------------------
# Messages


async def add_message(
    db: Db,
    chat_id: uuid.UUID,
    role: str,
    content: str,
    status: str = "complete",
    sources: list[Any] | None = None,
    steps: list[Any] | None = None,
    tool_calls: list[Any] | None = None,
    error: str | None = None,
    memory_ids: list[uuid.UUID] | None = None,
    reply_to: uuid.UUID | None = None,
) -> dict[str, Any]:
    """Append a message and mark the chat as just used; raises `ChatNotFound`. `memory_ids`: the
    memories recalled or retrieved for an assistant reply.

    `reply_to` (an assistant reply's user message) makes it the one reply to that message: a
    reply saved before is replaced, unless it is complete, which then stays and is returned."""
    _check_choice(role, ROLES, "role")
    _check_choice(status, STATUSES, "status")
    try:
        # One statement: the chat is touched and the message added together, or neither (no chat).
        message = await fetch_one(
            db,
            "WITH chat AS (UPDATE chats SET updated_at = now() WHERE chat_id = %(chat)s"
            " RETURNING chat_id)"
            " INSERT INTO messages (chat_id, role, content, status, sources, steps, tool_calls,"
            " error, memory_ids, reply_to)"
            " SELECT chat_id, %(role)s, %(content)s, %(status)s, %(sources)s, %(steps)s,"
            " %(tool_calls)s, %(error)s, %(memory_ids)s, %(reply_to)s FROM chat"
            " ON CONFLICT (reply_to) WHERE reply_to IS NOT NULL DO UPDATE SET"
            " content = EXCLUDED.content, status = EXCLUDED.status, sources = EXCLUDED.sources,"
            " steps = EXCLUDED.steps, tool_calls = EXCLUDED.tool_calls, error = EXCLUDED.error,"
            " memory_ids = EXCLUDED.memory_ids WHERE messages.status <> 'complete'"
            f" RETURNING {_MESSAGE_COLUMNS}",
            {
                "chat": chat_id,
                "role": role,
                "content": content,
                "status": status,
                "sources": Jsonb(sources or []),
                "steps": Jsonb(steps or []),
                "tool_calls": Jsonb(tool_calls or []),
                "error": error,
                "memory_ids": list(memory_ids or []),
                "reply_to": reply_to,
            },
        )
    except psycopg.errors.ForeignKeyViolation:  # the chat (or the message) was deleted meanwhile
        raise ChatNotFound(f"No chat {chat_id}") from None
    if message is None and reply_to is not None:  # a complete reply was there first
        message = await fetch_one(
            db,
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE reply_to = %s AND chat_id = %s",
            (reply_to, chat_id),
        )
    if message is None:
        raise ChatNotFound(f"No chat {chat_id}")
    return message


async def reply_of(db: Db, user_message_id: uuid.UUID) -> dict[str, Any] | None:
    """The reply saved for a user message, if any."""
    return await fetch_one(
        db, f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE reply_to = %s", (user_message_id,)
    )


async def reopen_last_question(
    db: Db, chat_id: uuid.UUID, message_id: uuid.UUID
) -> dict[str, Any] | None:
    """For a retry: the chat's last user message, if it is `message_id` and its reply (if any) did
    not complete; that reply is deleted, as the retry's replaces it. None otherwise."""
    return await fetch_one(
        db,
        "WITH question AS ("
        f" SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = %(chat)s AND role = 'user'"
        " ORDER BY sent_at DESC, message_id DESC LIMIT 1),"
        " failed AS (DELETE FROM messages WHERE reply_to = %(message)s AND status <> 'complete'"
        "  AND EXISTS (SELECT 1 FROM question WHERE message_id = %(message)s))"
        " SELECT * FROM question WHERE message_id = %(message)s AND NOT EXISTS ("
        "  SELECT 1 FROM messages WHERE reply_to = %(message)s AND status = 'complete')",
        {"chat": chat_id, "message": message_id},
    )


async def update_message(
    db: Db,
    message_id: uuid.UUID,
    *,
    content: str | None = None,
    status: str | None = None,
    sources: list[Any] | None = None,
    steps: list[Any] | None = None,
    tool_calls: list[Any] | None = None,
    error: str | None = None,
) -> dict[str, Any] | None:
    """Change the given fields of a message (None means "leave as is"); None if no such message."""
    values: dict[str, Any] = {}
    if content is not None:
        values["content"] = content
    if status is not None:
        _check_choice(status, STATUSES, "status")
        values["status"] = status
    for name, value in (("sources", sources), ("steps", steps), ("tool_calls", tool_calls)):
        if value is not None:
            values[name] = Jsonb(value)
    if error is not None:
        values["error"] = error
    if not values:
        return await fetch_one(
            db, f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE message_id = %s", (message_id,)
        )
    # Column names come from the fixed list above, never from the caller; values are parameters.
    assignments = sql.SQL(", ").join(
        sql.SQL("{} = {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in values
    )
    query = sql.SQL("UPDATE messages SET {} WHERE message_id = {} RETURNING {}").format(
        assignments, sql.Placeholder("message_id"), sql.SQL(_MESSAGE_COLUMNS)
    )
    return await fetch_one(db, query, {**values, "message_id": message_id})


async def list_messages(db: Db, chat_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every message of the chat, oldest first."""
    return await fetch_all(
        db,
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = %s ORDER BY sent_at, message_id",
        (chat_id,),
    )


async def count_messages_upto(db: Db, chat_id: uuid.UUID, upto_message_id: uuid.UUID) -> int:
    """How many messages of the chat were sent up to `upto_message_id`, it included (0 if it is not
    a message of this chat), in the order of `list_messages`."""
    row = await fetch_one(
        db,
        "SELECT count(*) AS n FROM messages AS m"
        " JOIN messages AS boundary"
        "  ON boundary.message_id = %(upto)s AND boundary.chat_id = %(chat)s"
        " WHERE m.chat_id = %(chat)s"
        "  AND (m.sent_at, m.message_id) <= (boundary.sent_at, boundary.message_id)",
        {"chat": chat_id, "upto": upto_message_id},
    )
    return int(row["n"]) if row else 0


async def recent_messages(db: Db, chat_id: uuid.UUID, limit: int = 10) -> list[dict[str, Any]]:
    """The latest `limit` messages of the chat, returned oldest first."""
    return await fetch_all(
        db,
        f"SELECT * FROM (SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = %s"
        " ORDER BY sent_at DESC, message_id DESC LIMIT %s) AS latest"
        " ORDER BY sent_at, message_id",
        (chat_id, limit),
    )


async def messages_after(
    db: Db, chat_id: uuid.UUID, after_message_id: uuid.UUID | None
) -> list[dict[str, Any]]:
    """Messages sent after `after_message_id` (all of them if None), oldest first.

    Used for the part of a chat not yet folded into its summary. If `after_message_id` is not a
    message of this chat (e.g. it was deleted), every message is returned: better to resend too
    much than to silently drop part of the conversation.
    """
    # Compare (sent_at, message_id) like the ORDER BY does, so a tie on sent_at cannot drop or
    # repeat a message at the boundary.
    columns = ", ".join(f"m.{name}" for name in _MESSAGE_COLUMNS.split(", "))
    return await fetch_all(
        db,
        f"SELECT {columns} FROM messages AS m"
        " LEFT JOIN messages AS boundary"
        "  ON boundary.message_id = %(after)s AND boundary.chat_id = %(chat)s"
        " WHERE m.chat_id = %(chat)s AND (boundary.message_id IS NULL"
        "  OR (m.sent_at, m.message_id) > (boundary.sent_at, boundary.message_id))"
        " ORDER BY m.sent_at, m.message_id",
        {"chat": chat_id, "after": after_message_id},
    )


async def user_message_in_context(db: Db, message_id: uuid.UUID) -> dict[str, Any] | None:
    """A user message with what memory extraction needs around it: its chat's `temporary` flag
    and the assistant's reply just before it (`previous_reply`, None for a first message)."""
    return await fetch_one(
        db,
        "SELECT m.message_id, m.chat_id, m.content, m.sent_at, c.temporary,"
        " (SELECT p.content FROM messages AS p WHERE p.chat_id = m.chat_id AND p.role = 'assistant'"
        "  AND (p.sent_at, p.message_id) < (m.sent_at, m.message_id)"
        "  ORDER BY p.sent_at DESC, p.message_id DESC LIMIT 1) AS previous_reply"
        " FROM messages AS m JOIN chats AS c USING (chat_id)"
        " WHERE m.message_id = %s AND m.role = 'user'",
        (message_id,),
    )
