"""Chats and their messages in Postgres: plain async functions, one SQL statement each.

Every function takes either the pool or an open connection, whose transaction it then joins
(core/statements.py: one round trip a call either way).

Rows come back as dicts keyed by column name; ids are `uuid.UUID`; `sources`, `steps` and
`tool_calls` are the decoded JSON lists.

Message statuses: 'complete', 'interrupted' (stopped by the user or a dropped connection),
'error' (see the `error` column) and 'streaming' (a reply saved while still being written; the
writer updates it with `update_message` when it ends).

A chat's messages form a tree (migration 0007): each message's `parent_id` is the one before it on
its branch. Regenerating a reply adds a sibling reply to its question; editing a question adds a
sibling question. Siblings are each other's versions; `head_id` is the last message of the branch
shown, and the branch (root to head) is what the screen and the prompt read.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from core.accounts import LOCAL_USER_ID
from core.document_store import has_documents_sql
from core.preferences import preferences_sql
from core.statements import Db, fetch_all, fetch_one
from core.turn_store import NewTurn

DEFAULT_TITLE = "New chat"
ROLES = ("user", "assistant")
STATUSES = ("complete", "interrupted", "error", "streaming")

_MESSAGE_COLUMNS = (
    "message_id, chat_id, role, content, status, sources, steps, tool_calls, error, sent_at,"
    " memory_ids, reply_to, parent_id, model, notes, document_ids"
)
# The chat's head: the message `head_id` names, or its latest message if that one is gone
# (head_id is no foreign key, see migration 0007). `c` is the chats row.
_HEAD = (
    "COALESCE((SELECT h.message_id FROM messages AS h"
    "  WHERE h.message_id = c.head_id AND h.chat_id = c.chat_id),"
    " (SELECT l.message_id FROM messages AS l WHERE l.chat_id = c.chat_id"
    "  ORDER BY l.sent_at DESC, l.message_id DESC LIMIT 1))"
)


def _branch_sql(stop: str) -> str:
    """`branch`: the branch of chat %(chat)s shown, from its head (`depth` 0) up to the root, or
    up to and including the message `stop` (an SQL expression) names when it is on it."""
    return (
        "branch AS ("
        f" SELECT m.*, 0 AS depth FROM chats AS c JOIN messages AS m ON m.message_id = {_HEAD}"
        "  WHERE c.chat_id = %(chat)s"
        " UNION ALL"
        " SELECT m.*, b.depth + 1 FROM branch AS b JOIN messages AS m"
        "  ON m.message_id = b.parent_id"
        f"  WHERE b.message_id IS DISTINCT FROM {stop})"
    )


_BRANCH = f"WITH RECURSIVE {_branch_sql('%(stop)s::uuid')}"  # up to %(stop)s
_BRANCH_COLUMNS = ", ".join(f"b.{name}" for name in _MESSAGE_COLUMNS.split(", "))
HEAD = "head"  # add_message(parent=HEAD): after the chat's head, where a new message goes


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


async def create_chat(
    db: Db, title: str | None = None, temporary: bool = False, user_id: uuid.UUID = LOCAL_USER_ID
) -> dict[str, Any]:
    """A new empty chat of `user_id`'s; a missing or blank title becomes 'New chat'. A temporary
    chat neither reads nor writes memory."""
    row = await fetch_one(
        db,
        "INSERT INTO chats (title, temporary, user_id) VALUES (%s, %s, %s) RETURNING *",
        (_clean_title(title), temporary, user_id),
    )
    assert row is not None
    return row


async def start_chat(
    db: Db,
    title: str | None,
    first_message: str,
    run_id: uuid.UUID,
    lease_seconds: float,
    user_id: uuid.UUID,
    temporary: bool = False,
    document_ids: Sequence[uuid.UUID] = (),
) -> tuple[dict[str, Any], uuid.UUID]:
    """A new chat of `user_id`'s with its first (user) message as its head, claimed for
    `run_id`'s reply (the row carries `previous_run_id`, None, and `preferences`, as
    `claim_chat_run`'s does): the chat's row and the message's id. One statement, so a message
    the database refuses leaves no empty chat. `document_ids`: the documents sent with it."""
    message_id = uuid.uuid4()  # known up front: the chat's head from its first row on
    row = await fetch_one(
        db,
        "WITH chat AS (INSERT INTO chats"
        "  (title, temporary, run_id, run_expires_at, head_id, user_id)"
        " VALUES (%(title)s, %(temporary)s, %(run)s,"
        "  now() + make_interval(secs => %(lease)s), %(message)s, %(user)s) RETURNING *),"
        " added AS (INSERT INTO messages (message_id, chat_id, role, content, document_ids)"
        "  SELECT %(message)s, chat_id, 'user', %(content)s, %(documents)s FROM chat"
        "  RETURNING message_id)"
        " SELECT chat.*, NULL::uuid AS previous_run_id,"
        f" {preferences_sql('chat.user_id')} AS preferences,"
        f" {has_documents_sql('chat.user_id')} AS has_documents FROM chat, added",
        {"title": _clean_title(title), "temporary": temporary, "run": run_id, "user": user_id,
         "lease": lease_seconds, "message": message_id, "content": first_message,
         "documents": list(document_ids)},
    )  # fmt: skip
    assert row is not None
    return row, message_id


async def get_chat(
    db: Db, chat_id: uuid.UUID, *, user_id: uuid.UUID | None
) -> dict[str, Any] | None:
    """The chat, if it is `user_id`'s (None: whoever's it is, for the server's own work)."""
    return await fetch_one(
        db,
        "SELECT * FROM chats WHERE chat_id = %s AND (%s::uuid IS NULL OR user_id = %s)",
        (chat_id, user_id, user_id),
    )


async def list_chats(
    db: Db, user_id: uuid.UUID, limit: int = 100, title_filter: str | None = None
) -> list[dict[str, Any]]:
    """The user's chats, pinned ones first, then the most recent activity first; `title_filter`
    matches part of the title, ignoring case, with `%` and `_` taken literally."""
    if title_filter:
        escaped = title_filter.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return await fetch_all(
            db,
            "SELECT * FROM chats WHERE user_id = %s AND title ILIKE %s"
            " ORDER BY pinned DESC, updated_at DESC, created_at DESC LIMIT %s",
            (user_id, f"%{escaped}%", limit),
        )
    return await fetch_all(
        db,
        "SELECT * FROM chats WHERE user_id = %s"
        " ORDER BY pinned DESC, updated_at DESC, created_at DESC LIMIT %s",
        (user_id, limit),
    )


async def rename_chat(
    db: Db, chat_id: uuid.UUID, title: str, user_id: uuid.UUID
) -> dict[str, Any] | None:
    """The renamed chat, or None if the user has no such chat. The title is the user's from now
    on (`title_source` 'user'): a title generated later never replaces it.

    Leaves `updated_at` alone: renaming is not activity, so it does not move the chat to the top.
    """
    return await edit_chat(db, chat_id, user_id, title=title)


async def edit_chat(
    db: Db,
    chat_id: uuid.UUID,
    user_id: uuid.UUID,
    *,
    title: str | None = None,
    pinned: bool | None = None,
) -> dict[str, Any] | None:
    """Rename (the title becomes the user's) and/or pin or unpin one of the user's chats, in one
    statement (None: leave as is); the chat, or None if the user has no such chat. Neither is
    activity: `updated_at` stays."""
    return await fetch_one(
        db,
        "UPDATE chats SET title = COALESCE(%(title)s, title),"
        " title_source = CASE WHEN %(title)s::text IS NULL THEN title_source ELSE 'user' END,"
        " pinned = COALESCE(%(pinned)s, pinned)"
        " WHERE chat_id = %(chat)s AND user_id = %(user)s RETURNING *",
        {"title": None if title is None else _clean_title(title), "pinned": pinned,
         "chat": chat_id, "user": user_id},
    )  # fmt: skip


async def set_generated_title(db: Db, chat_id: uuid.UUID, title: str) -> dict[str, Any] | None:
    """Store a generated title, only over the first one (`title_source` 'auto'): a chat renamed
    meanwhile keeps its name. The chat, or None if it was renamed (or deleted)."""
    return await fetch_one(
        db,
        "UPDATE chats SET title = %s, title_source = 'generated'"
        " WHERE chat_id = %s AND title_source = 'auto' RETURNING *",
        (_clean_title(title), chat_id),
    )


async def delete_chat(
    db: Db, chat_id: uuid.UUID, user_id: uuid.UUID, forget_memories: bool = False
) -> bool:
    """Delete one of the user's chats and (by cascade) its messages; False if there is none.

    Memories learned from it stay, with their source set to NULL, unless `forget_memories`: then
    they go too, in the same statement.
    """
    row = await fetch_one(
        db,
        "WITH chat AS (SELECT chat_id FROM chats WHERE chat_id = %(chat)s AND user_id = %(user)s),"
        " forgotten AS (DELETE FROM memories WHERE %(forget)s"
        "  AND source_chat_id IN (SELECT chat_id FROM chat))"
        " DELETE FROM chats WHERE chat_id IN (SELECT chat_id FROM chat) RETURNING chat_id",
        {"chat": chat_id, "user": user_id, "forget": forget_memories},
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
    db: Db,
    chat_id: uuid.UUID,
    run_id: uuid.UUID,
    lease_seconds: float,
    *,
    user_id: uuid.UUID | None,
) -> dict[str, Any] | None:
    """Claim the chat for one reply (or extend this run's claim): the chat's id, `temporary` flag,
    owner (`user_id`), `previous_run_id` (an expired claim taken over: its turn may need
    recovering) and the owner's stored preferences (`preferences`, read on the way), or None if
    another run holds it (or `user_id` has no such chat; None: whoever's it is)."""
    return await fetch_one(
        db,
        "UPDATE chats AS c SET run_id = %(run)s,"
        " run_expires_at = now() + make_interval(secs => %(lease)s)"
        " FROM (SELECT chat_id, run_id FROM chats WHERE chat_id = %(chat)s"
        "  AND (%(user)s::uuid IS NULL OR user_id = %(user)s) FOR UPDATE) AS old"
        " WHERE c.chat_id = old.chat_id"
        " AND (c.run_id IS NULL OR c.run_id = %(run)s OR c.run_expires_at < now())"
        " RETURNING c.chat_id, c.temporary, c.user_id,"
        " CASE WHEN old.run_id <> %(run)s THEN old.run_id END AS previous_run_id,"
        f" {preferences_sql('c.user_id')} AS preferences,"
        f" {has_documents_sql('c.user_id')} AS has_documents",
        {"chat": chat_id, "run": run_id, "lease": lease_seconds, "user": user_id},
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
    run_id: uuid.UUID | None = None,
    parent: uuid.UUID | str | None = HEAD,
    model: str | None = None,
    notes: list[str] | None = None,
    turn: NewTurn | None = None,
    document_ids: Sequence[uuid.UUID] = (),
) -> dict[str, Any]:
    """Add a message and mark the chat as just used; raises `ChatNotFound`. `memory_ids`: the
    memories recalled or retrieved for an assistant reply; `model`: the LiteLLM model that wrote
    it (core/model_names.py); `notes`: plain sentences shown with it (a fallback answered…).

    Where it goes: a reply (`reply_to`, its user message) under that message; a user message
    after the chat's head (`parent=HEAD`), or after `parent` (an edited question's version: the
    same parent as the question it replaces, None for a first question). A user message becomes
    the chat's head; a reply too if its question is the head (another branch may be shown).

    `run_id` (the turn writing a reply) makes it the one reply of that turn: a reply the turn
    saved before is replaced, unless it is complete, which then stays and is returned. `turn`
    (for a user message): the turn that answers it, recorded by the same statement;
    `document_ids` (for a user message): the documents sent with it."""
    _check_choice(role, ROLES, "role")
    _check_choice(status, STATUSES, "status")
    if reply_to is not None:
        parent = reply_to
    try:
        # One statement: the message is added and the chat touched (its head moved) together, or
        # neither (no chat).
        message = await fetch_one(
            db,
            "WITH chat AS (SELECT c.chat_id,"
            f"  CASE WHEN %(at_head)s THEN {_HEAD} ELSE %(parent)s::uuid END AS parent_id"
            "  FROM chats AS c WHERE c.chat_id = %(chat)s),"
            " added AS (INSERT INTO messages (chat_id, role, content, status, sources, steps,"
            "  tool_calls, error, memory_ids, reply_to, parent_id, run_id, model, notes,"
            "  document_ids)"
            "  SELECT chat_id, %(role)s, %(content)s, %(status)s, %(sources)s, %(steps)s,"
            "  %(tool_calls)s, %(error)s, %(memory_ids)s, %(reply_to)s, parent_id, %(run)s,"
            "  %(model)s, %(notes)s, %(document_ids)s"
            "  FROM chat"
            "  ON CONFLICT (run_id) WHERE run_id IS NOT NULL DO UPDATE SET"
            "  content = EXCLUDED.content, status = EXCLUDED.status, sources = EXCLUDED.sources,"
            "  steps = EXCLUDED.steps, tool_calls = EXCLUDED.tool_calls, error = EXCLUDED.error,"
            "  memory_ids = EXCLUDED.memory_ids, model = COALESCE(EXCLUDED.model, messages.model),"
            "  notes = EXCLUDED.notes WHERE messages.status <> 'complete'"
            f"  RETURNING {_MESSAGE_COLUMNS}),"
            " moved AS (UPDATE chats AS c SET updated_at = now(), head_id = CASE"
            "  WHEN added.role = 'user' OR c.head_id IS NOT DISTINCT FROM added.parent_id"
            "  THEN added.message_id ELSE c.head_id END"
            "  FROM added WHERE c.chat_id = added.chat_id)"
            + (f", turn AS ({turn.insert_sql('added')})" if turn else "")
            + " SELECT * FROM added",
            {
                **(turn.params() if turn else {}),
                "chat": chat_id,
                "role": role,
                "content": content,
                "status": status,
                "sources": Jsonb(sources or []),
                "steps": Jsonb(steps or []),
                "tool_calls": Jsonb(tool_calls or []),
                "error": error,
                "model": model,
                "notes": Jsonb(notes or []),
                "memory_ids": list(memory_ids or []),
                "document_ids": list(document_ids),
                "reply_to": reply_to,
                "run": run_id,
                "at_head": parent == HEAD,
                "parent": None if parent == HEAD else parent,
            },
        )
    except psycopg.errors.ForeignKeyViolation:  # the chat (or the message) was deleted meanwhile
        raise ChatNotFound(f"No chat {chat_id}") from None
    if message is None and run_id is not None:  # a complete reply was there first
        message = await reply_of_run(db, run_id)
    if message is None:
        raise ChatNotFound(f"No chat {chat_id}")
    return message


async def get_message(db: Db, chat_id: uuid.UUID, message_id: uuid.UUID) -> dict[str, Any] | None:
    return await fetch_one(
        db,
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE message_id = %s AND chat_id = %s",
        (message_id, chat_id),
    )


async def reply_of_run(db: Db, run_id: uuid.UUID) -> dict[str, Any] | None:
    """The reply a turn saved, if any."""
    return await fetch_one(
        db, f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE run_id = %s", (run_id,)
    )


async def reanswer(db: Db, chat_id: uuid.UUID, message_id: uuid.UUID) -> dict[str, Any] | None:
    """For a regenerate: the user message to answer again (`message_id` itself, or the question
    the reply `message_id` answers), made the chat's head so that the new reply is the one shown;
    None if it is not a message of this chat. Its failed replies with no text and nothing after
    them are deleted (nothing to keep); every other reply stays, as a version."""
    return await fetch_one(
        db,
        "WITH question AS ("
        f" SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = %(chat)s AND role = 'user'"
        "  AND message_id = (SELECT CASE WHEN role = 'user' THEN message_id ELSE reply_to END"
        "   FROM messages WHERE message_id = %(message)s AND chat_id = %(chat)s)),"
        " dropped AS (DELETE FROM messages AS r"
        "  WHERE r.reply_to = (SELECT message_id FROM question)"
        "  AND r.status = 'error' AND r.content = ''"
        "  AND NOT EXISTS (SELECT 1 FROM messages AS k WHERE k.parent_id = r.message_id)),"
        " moved AS (UPDATE chats SET head_id = (SELECT message_id FROM question)"
        "  WHERE chat_id = %(chat)s AND EXISTS (SELECT 1 FROM question))"
        " SELECT * FROM question",
        {"chat": chat_id, "message": message_id},
    )


async def resume_reply(
    db: Db, chat_id: uuid.UUID, message_id: uuid.UUID, run_id: uuid.UUID
) -> dict[str, Any] | None:
    """For a continue: the reply `message_id`, handed to the turn `run_id` (whose saves then go
    to it) and marked as being written, made the chat's head. None unless it is a reply of this
    chat that stopped or failed with some text written and nothing after it."""
    return await fetch_one(
        db,
        "WITH resumed AS (UPDATE messages AS r SET run_id = %(run)s, status = 'streaming'"
        "  WHERE r.message_id = %(message)s AND r.chat_id = %(chat)s AND r.role = 'assistant'"
        "  AND r.status IN ('interrupted', 'error') AND r.content <> ''"
        "  AND NOT EXISTS (SELECT 1 FROM messages AS k WHERE k.parent_id = r.message_id)"
        f"  RETURNING {_MESSAGE_COLUMNS}),"
        " moved AS (UPDATE chats SET head_id = (SELECT message_id FROM resumed)"
        "  WHERE chat_id = %(chat)s AND EXISTS (SELECT 1 FROM resumed))"
        " SELECT * FROM resumed",
        {"chat": chat_id, "message": message_id, "run": run_id},
    )


async def show_version(db: Db, chat_id: uuid.UUID, message_id: uuid.UUID) -> dict[str, Any] | None:
    """Show the branch through `message_id` (a version the user picked): the head moves to the
    latest message under it, following at each step the version picked last (else the newest).
    None if it is not a message of this chat, or a reply is being written in the chat."""
    return await fetch_one(
        db,
        "WITH RECURSIVE free AS (SELECT chat_id FROM chats WHERE chat_id = %(chat)s"
        "  AND (run_id IS NULL OR run_expires_at < now())),"
        " picked AS (UPDATE messages SET chosen_at = clock_timestamp()"
        "  WHERE message_id = %(message)s AND chat_id = (SELECT chat_id FROM free)"
        "  RETURNING message_id),"
        " down AS ("
        " SELECT message_id, 0 AS depth FROM picked"
        " UNION ALL"
        " SELECT child.message_id, down.depth + 1 FROM down CROSS JOIN LATERAL ("
        "  SELECT k.message_id FROM messages AS k WHERE k.parent_id = down.message_id"
        "  ORDER BY COALESCE(k.chosen_at, k.sent_at) DESC, k.message_id DESC LIMIT 1) AS child)"
        " UPDATE chats SET head_id = (SELECT message_id FROM down ORDER BY depth DESC LIMIT 1)"
        " WHERE chat_id = (SELECT chat_id FROM free) AND EXISTS (SELECT 1 FROM picked)"
        " RETURNING chat_id, head_id",
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
    """The messages of the branch shown, oldest first, each with its `versions`: the ids of
    itself and its siblings (same parent, same role), oldest first; and its `mode`: "research"
    for a reply written by a research turn, else "chat"."""
    return await fetch_all(
        db,
        f"{_BRANCH} SELECT {_BRANCH_COLUMNS},"
        " (SELECT array_agg(v.message_id ORDER BY v.sent_at, v.message_id) FROM messages AS v"
        "  WHERE v.chat_id = b.chat_id AND v.role = b.role"
        "  AND v.parent_id IS NOT DISTINCT FROM b.parent_id) AS versions,"
        " COALESCE((SELECT t.mode FROM turns AS t WHERE t.run_id = b.run_id), 'chat') AS mode"
        " FROM branch AS b ORDER BY b.depth DESC",
        {"chat": chat_id, "stop": None},
    )


async def unsummarised(
    db: Db, chat_id: uuid.UUID
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], bool]:
    """The chat's summary (`summary`, `summary_upto_message_id`; None if there is no such chat),
    the messages of the branch shown after the last one the summary covers, oldest first, and
    whether that message is on the branch. If it is not (none yet, or on another branch: the user
    picked another version before it), every message of the branch is returned: what the summary
    says belongs to another branch. One statement, so one snapshot: a fold stored meanwhile cannot
    make the summary and the messages disagree."""
    rows = await fetch_all(
        db,
        "WITH RECURSIVE chat AS (SELECT summary, summary_upto_message_id FROM chats"
        "  WHERE chat_id = %(chat)s),"
        f" {_branch_sql('(SELECT summary_upto_message_id FROM chat)')}"
        " SELECT chat.summary AS chat_summary, chat.summary_upto_message_id AS chat_upto,"
        f" {_BRANCH_COLUMNS} FROM chat LEFT JOIN branch AS b ON true ORDER BY b.depth DESC",
        {"chat": chat_id},
    )
    if not rows:
        return None, [], False
    chat = {"summary": rows[0]["chat_summary"], "summary_upto_message_id": rows[0]["chat_upto"]}
    messages = [
        {k: v for k, v in row.items() if k not in ("chat_summary", "chat_upto")}
        for row in rows
        if row["message_id"] is not None
    ]
    upto = chat["summary_upto_message_id"]
    if upto is not None and messages and messages[0]["message_id"] == upto:
        return chat, messages[1:], True
    return chat, messages, False


async def branch_position(db: Db, chat_id: uuid.UUID, message_id: uuid.UUID) -> int:
    """How many messages lead to `message_id` on its branch, it included (0 if it is not a message
    of this chat)."""
    row = await fetch_one(
        db,
        "WITH RECURSIVE up AS ("
        " SELECT message_id, parent_id FROM messages WHERE message_id = %s AND chat_id = %s"
        " UNION ALL"
        " SELECT m.message_id, m.parent_id FROM up"
        "  JOIN messages AS m ON m.message_id = up.parent_id)"
        " SELECT count(*) AS n FROM up",
        (message_id, chat_id),
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


async def user_message_in_context(db: Db, message_id: uuid.UUID) -> dict[str, Any] | None:
    """A user message with what memory extraction needs around it: its chat's `temporary` flag,
    the assistant's reply just before it on its branch (`previous_reply`, None for a first
    message) and the owner's stored preferences (`preferences`, read on the way)."""
    return await fetch_one(
        db,
        "SELECT m.message_id, m.chat_id, m.content, m.sent_at, c.temporary, c.user_id,"
        " (SELECT p.content FROM messages AS p WHERE p.message_id = m.parent_id"
        "  AND p.role = 'assistant') AS previous_reply,"
        f" {preferences_sql('c.user_id')} AS preferences"
        " FROM messages AS m JOIN chats AS c USING (chat_id)"
        " WHERE m.message_id = %s AND m.role = 'user'",
        (message_id,),
    )


# How many of a user's later messages an extraction looks at for requests to forget: those sent
# while the message waited to be read (on the local model, behind the replies: a few).
LATER_REQUESTS = 20


async def asking_to_forget_since(db: Db, user_id: uuid.UUID, after: datetime) -> list[str]:
    """The user's messages sent after `after` (outside temporary chats) that may ask to forget
    something: those that speak of forgetting or memory (core/forget_requests.py tells which
    do), oldest first."""
    rows = await fetch_all(
        db,
        "SELECT m.content FROM messages AS m JOIN chats AS c USING (chat_id)"
        " WHERE c.user_id = %s AND NOT c.temporary AND m.role = 'user' AND m.sent_at > %s"
        " AND m.content ~* '(forget|remember|memor)' ORDER BY m.sent_at LIMIT %s",
        (user_id, after, LATER_REQUESTS),
    )
    return [row["content"] for row in rows]
