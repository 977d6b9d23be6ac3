"""Tests of core/chat_store.py against the real embedded Postgres; each test makes its own chats."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from core import chat_store
from core.accounts import LOCAL_USER_ID
from core.chat_store import ChatNotFound


async def test_create_get_rename_delete(pool: AsyncConnectionPool) -> None:
    chat = await chat_store.create_chat(pool, "  Trip   planning ")
    assert isinstance(chat["chat_id"], uuid.UUID)
    assert chat["title"] == "Trip planning"  # whitespace tidied
    assert chat["summary"] is None

    assert await chat_store.get_chat(pool, chat["chat_id"], user_id=None) == chat

    renamed = await chat_store.rename_chat(pool, chat["chat_id"], "Japan trip", LOCAL_USER_ID)
    assert renamed is not None
    assert renamed["title"] == "Japan trip"
    assert renamed["updated_at"] == chat["updated_at"]  # renaming is not activity
    assert await chat_store.rename_chat(pool, uuid.uuid4(), "nobody", LOCAL_USER_ID) is None

    assert await chat_store.delete_chat(pool, chat["chat_id"], LOCAL_USER_ID) is True
    assert await chat_store.get_chat(pool, chat["chat_id"], user_id=None) is None
    assert await chat_store.delete_chat(pool, chat["chat_id"], LOCAL_USER_ID) is False


async def test_missing_or_blank_title_becomes_new_chat(pool: AsyncConnectionPool) -> None:
    assert (await chat_store.create_chat(pool))["title"] == "New chat"
    assert (await chat_store.create_chat(pool, "   "))["title"] == "New chat"


async def test_list_chats_newest_activity_first_and_filtered(pool: AsyncConnectionPool) -> None:
    tag = uuid.uuid4().hex
    first = await chat_store.create_chat(pool, f"{tag} first")
    second = await chat_store.create_chat(pool, f"{tag} second")
    # Its own tag too: the database may hold the chats of other tests (or of an earlier run).
    other_tag = uuid.uuid4().hex
    other = await chat_store.create_chat(pool, f"unrelated 100% {other_tag}")

    listed = await chat_store.list_chats(
        pool, LOCAL_USER_ID, title_filter=tag.upper()
    )  # ignores case
    assert [c["chat_id"] for c in listed] == [second["chat_id"], first["chat_id"]]

    # A new message in the older chat moves it to the top.
    await chat_store.add_message(pool, first["chat_id"], "user", "bump")
    listed = await chat_store.list_chats(pool, LOCAL_USER_ID, title_filter=tag)
    assert [c["chat_id"] for c in listed] == [first["chat_id"], second["chat_id"]]
    assert listed[0]["updated_at"] > first["updated_at"]

    everything = await chat_store.list_chats(pool, LOCAL_USER_ID, limit=1000)
    ids = [c["chat_id"] for c in everything]
    assert ids.index(first["chat_id"]) < ids.index(other["chat_id"])
    assert len(await chat_store.list_chats(pool, LOCAL_USER_ID, limit=2)) == 2

    # % and _ in the filter are literal characters, not wildcards.
    assert [
        c["chat_id"]
        for c in await chat_store.list_chats(
            pool, LOCAL_USER_ID, title_filter=f"d 100% {other_tag}"
        )
    ] == [other["chat_id"]]
    assert await chat_store.list_chats(pool, LOCAL_USER_ID, title_filter=f"{tag}%second") == []


async def test_add_and_update_messages(pool: AsyncConnectionPool) -> None:
    chat = await chat_store.create_chat(pool, "messages")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "What is pgvector?")
    assert question["role"] == "user"
    assert question["status"] == "complete"
    assert question["sources"] == [] and question["steps"] == [] and question["tool_calls"] == []
    assert question["error"] is None

    reply = await chat_store.add_message(
        pool, chat["chat_id"], "assistant", "", status="streaming", steps=[{"step": "search"}]
    )
    sources = [{"title": "pgvector", "url": "https://github.com/pgvector/pgvector"}]
    updated = await chat_store.update_message(
        pool, reply["message_id"], content="An extension.", status="complete", sources=sources
    )
    assert updated is not None
    assert updated["content"] == "An extension."
    assert updated["status"] == "complete"
    assert updated["sources"] == sources
    assert updated["steps"] == [{"step": "search"}]  # not given, so unchanged

    failed = await chat_store.update_message(pool, reply["message_id"], status="error", error="x")
    assert failed is not None
    assert (failed["status"], failed["error"], failed["content"]) == ("error", "x", "An extension.")

    unchanged = await chat_store.update_message(pool, reply["message_id"])
    assert unchanged == failed
    assert await chat_store.update_message(pool, uuid.uuid4(), content="nobody") is None


async def test_invalid_messages_are_refused(pool: AsyncConnectionPool) -> None:
    chat = await chat_store.create_chat(pool)
    with pytest.raises(ChatNotFound):
        await chat_store.add_message(pool, uuid.uuid4(), "user", "lost")
    with pytest.raises(ValueError, match="role"):
        await chat_store.add_message(pool, chat["chat_id"], "system", "no")
    with pytest.raises(ValueError, match="status"):
        await chat_store.add_message(pool, chat["chat_id"], "user", "no", status="done")
    # The database enforces the same rules for anyone writing SQL directly.
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            await conn.execute(
                "INSERT INTO messages (chat_id, role, content) VALUES (%s, 'system', 'x')",
                (chat["chat_id"],),
            )
        await conn.rollback()
    assert await chat_store.list_messages(pool, chat["chat_id"]) == []


async def test_messages_in_one_transaction_keep_their_order(pool: AsyncConnectionPool) -> None:
    chat = await chat_store.create_chat(pool)
    async with pool.connection() as conn:
        # Passing a connection: all ten inserts share one transaction (committed when the pool's
        # block ends), so now() is the same for all of them; clock_timestamp() still orders them.
        for i in range(10):
            await chat_store.add_message(
                conn, chat["chat_id"], "user" if i % 2 == 0 else "assistant", f"m{i}"
            )
    messages = await chat_store.list_messages(pool, chat["chat_id"])
    assert [m["content"] for m in messages] == [f"m{i}" for i in range(10)]
    assert len({m["sent_at"] for m in messages}) == 10


async def test_a_caller_transaction_that_rolls_back_keeps_nothing(
    pool: AsyncConnectionPool,
) -> None:
    chat = await chat_store.create_chat(pool)
    async with pool.connection() as conn:
        await chat_store.add_message(conn, chat["chat_id"], "user", "never saved")
        # A failure inside the caller's transaction leaves it usable (savepoint) ...
        with pytest.raises(ChatNotFound):
            await chat_store.add_message(conn, uuid.uuid4(), "user", "no chat")
        assert len(await chat_store.list_messages(conn, chat["chat_id"])) == 1
        await conn.rollback()
    # ... and rolling it back undoes everything done through it.
    assert await chat_store.list_messages(pool, chat["chat_id"]) == []


async def test_recent_messages_and_the_summary_window(pool: AsyncConnectionPool) -> None:
    chat = await chat_store.create_chat(pool)
    ids = []
    for i in range(6):
        message = await chat_store.add_message(
            pool, chat["chat_id"], "user" if i % 2 == 0 else "assistant", f"m{i}"
        )
        ids.append(message["message_id"])

    recent = await chat_store.recent_messages(pool, chat["chat_id"], limit=4)
    assert [m["content"] for m in recent] == ["m2", "m3", "m4", "m5"]  # latest four, oldest first
    assert len(await chat_store.recent_messages(pool, chat["chat_id"])) == 6

    chat_id = chat["chat_id"]
    assert await chat_store.unsummarised(pool, uuid.uuid4()) == (None, [], False)
    summary, everything, found = await chat_store.unsummarised(pool, chat_id)
    assert summary == {"summary": None, "summary_upto_message_id": None}
    assert [m["message_id"] for m in everything] == ids and not found
    assert "chat_summary" not in everything[0]  # messages only, as every other read gives them
    assert await chat_store.branch_position(pool, chat_id, ids[2]) == 3

    assert await chat_store.set_summary(pool, chat_id, "They said hello.", ids[2])
    summary, after, found = await chat_store.unsummarised(pool, chat_id)
    assert summary == {"summary": "They said hello.", "summary_upto_message_id": ids[2]}
    assert [m["content"] for m in after] == ["m3", "m4", "m5"] and found
    stored = await chat_store.get_chat(pool, chat_id, user_id=None)
    assert stored is not None and stored["summary"] == "They said hello."
    assert await chat_store.set_summary(pool, chat_id, "All of it.", ids[-1], ids[2])
    assert (await chat_store.unsummarised(pool, chat_id))[1:] == ([], True)
    # A summary up to a message not on the branch hides none of this chat's messages.
    assert await chat_store.set_summary(pool, chat_id, "Elsewhere.", uuid.uuid4(), ids[-1])
    _, after, found = await chat_store.unsummarised(pool, chat_id)
    assert len(after) == 6 and not found
    assert not await chat_store.set_summary(pool, uuid.uuid4(), "nobody", ids[2])


async def test_deleting_a_chat_deletes_its_messages(pool: AsyncConnectionPool) -> None:
    chat = await chat_store.create_chat(pool)
    keep = await chat_store.create_chat(pool)
    for text in ("a", "b", "c"):
        await chat_store.add_message(pool, chat["chat_id"], "user", text)
    await chat_store.add_message(pool, keep["chat_id"], "user", "stays")

    assert await chat_store.delete_chat(pool, chat["chat_id"], LOCAL_USER_ID)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM messages WHERE chat_id = %s", (chat["chat_id"],)
        )
        assert await cursor.fetchone() == (0,)
    assert [m["content"] for m in await chat_store.list_messages(pool, keep["chat_id"])] == [
        "stays"
    ]
