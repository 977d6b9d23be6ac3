"""Saving an assistant reply: one place for the normal, interrupted and failed endings alike."""

from __future__ import annotations

from typing import Any

from chat.state import TurnContext
from core import chat_store, memory_jobs


async def save_reply(context: TurnContext, text: str, **fields: Any) -> dict[str, Any]:
    """Save the assistant's reply (with the memories it used) and, in the same transaction, queue
    the user's message for memory extraction: a crash cannot lose one without the other. The
    extraction runs later, in the background, so `done` never waits for it."""
    pool = context.services.database.pool
    # Pipelined: the statements go to the server in two exchanges instead of one each.
    async with pool.connection() as conn, conn.pipeline(), conn.transaction():
        message = await chat_store.add_message(
            conn, context.chat_id, "assistant", text, steps=context.steps,
            memory_ids=list(context.memories), reply_to=context.user_message_id, **fields,
        )  # fmt: skip
        if context.memory != "off":
            await memory_jobs.enqueue(conn, context.user_message_id, context.chat_id)
    if context.memory != "off":
        context.wake_memory()
    return message
