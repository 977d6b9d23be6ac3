"""Saving an assistant reply: one place for the normal, interrupted and failed endings alike.

While the database does not answer, the reply (held in memory) is saved again and again for up to
SAVE_RETRY_SECONDS: a database that restarts or a network blip in the middle of a reply loses
nothing. Past that, ReplyNotSaved says so in words the user can act on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
import psycopg_pool

from chat.state import TurnContext
from chat.steps import short_id
from core import chat_store, memory_jobs
from core.grounding import may_tell_about_user
from core.logs import first_line
from core.model_names import friendly_name

log = logging.getLogger("resolveai.chat")

SAVE_RETRY_SECONDS = 30.0
DATABASE_ERRORS = (psycopg.OperationalError, psycopg_pool.PoolTimeout)


class ReplyNotSaved(RuntimeError):
    """The database stayed unreachable: the reply could not be saved."""

    plain = True  # its text is a sentence for the user (chat/user_errors.py)


async def save_reply(context: TurnContext, text: str, **fields: Any) -> dict[str, Any]:
    """Save the assistant's reply (with the memories it used) and, in the same transaction, queue
    the user's message for memory extraction: a crash cannot lose one without the other. The
    extraction runs later, in the background, so `done` never waits for it. Retried while the
    database is unreachable (see the module docstring)."""
    deadline = time.monotonic() + SAVE_RETRY_SECONDS
    delay = 0.25
    while True:
        try:
            return await _save(context, text, **fields)
        except DATABASE_ERRORS as error:
            if time.monotonic() + delay > deadline:
                raise ReplyNotSaved(
                    "The reply could not be saved: the database is not answering. Try again"
                    " once it is back."
                ) from error
            log.warning("Chat %s: saving the reply failed (%s); trying again",
                        short_id(context.chat_id), first_line(error))  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


def done_event(context: TurnContext, message: dict[str, Any]) -> dict[str, Any]:
    """The event that ends a turn whose reply is saved complete."""
    return {
        "type": "done",
        "message_id": str(message["message_id"]),
        "model": context.model,
        "model_name": friendly_name(context.model),
        "notes": list(context.notes),
    }


async def _save(context: TurnContext, text: str, **fields: Any) -> dict[str, Any]:
    pool = context.services.database.pool
    read_for_memories = context.memory != "off" and may_tell_about_user(context.user_text)
    # Pipelined: the statements go to the server in two exchanges instead of one each.
    async with pool.connection() as conn, conn.pipeline(), conn.transaction():
        message = await chat_store.add_message(
            conn, context.chat_id, "assistant", text, steps=context.steps,
            memory_ids=list(context.memories), reply_to=context.user_message_id,
            run_id=context.run_id, model=context.model, notes=list(context.notes), **fields,
        )  # fmt: skip
        if read_for_memories:
            await memory_jobs.enqueue(conn, context.user_message_id, context.chat_id)
    if read_for_memories:
        context.wake_memory()
    return message
