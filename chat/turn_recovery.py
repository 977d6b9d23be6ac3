"""Finishing a turn whose server process died mid-reply: nothing it wrote is lost.

Whichever process notices first does it: at start-up (`recover_abandoned_turns`), when the chat
gets its next message (its claim had expired), or when a reader following the turn finds it
abandoned. The reply so far (its text, sources and steps, rebuilt from the turn's event log; for
a research report not yet streamed, its last draft) is saved as interrupted, unless a reply to
that message was saved already, and the user's message is queued for memory extraction as a
finished reply would have done.
"""

from __future__ import annotations

import contextlib
import logging
import uuid

from chat.steps import short_id
from core import chat_store, memory_jobs, turn_store
from core.services import Services

log = logging.getLogger("resolveai.chat")

# The event that ends the stream of a stopped (or recovered) reply.
STOPPED = {"type": "interrupted", "message": "Stopped. The reply so far is saved."}


async def recover_turn(services: Services, run_id: uuid.UUID | None = None) -> bool:
    """Finish one turn whose process died (`run_id`'s, or any): its reply so far, rebuilt from its
    events, is saved as interrupted (unless a reply was saved already). False if there was none."""
    pool = services.database.pool
    stale = await turn_store.claim_stale_turn(pool, run_id)
    if stale is None:
        return False
    async with pool.connection() as conn, conn.transaction():
        saved = await chat_store.reply_of_run(conn, stale["run_id"])
        # (A reply being continued is there from the start, marked as being written.)
        if saved is not None and saved["status"] != "streaming":
            return True  # it ended normally just before its process went away
        events = [event for _, event in await turn_store.events_after(conn, stale["run_id"], 0)]
        text = "".join(e.get("text", "") for e in events if e.get("type") == "token")
        if not text:  # a research report streams at its end: its last draft is what was written
            text = next((e["text"] for e in reversed(events) if e.get("type") == "draft"), "")
        sources = next((e["sources"] for e in reversed(events) if e.get("type") == "sources"), [])
        steps = [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "step"]
        with contextlib.suppress(chat_store.ChatNotFound):  # the chat was deleted meanwhile
            await chat_store.add_message(
                conn, stale["chat_id"], "assistant", text, status="interrupted",
                sources=sources, steps=steps, reply_to=stale["user_message_id"],
                run_id=stale["run_id"],
                error="The server stopped while writing this reply.",
            )  # fmt: skip
            await memory_jobs.enqueue(conn, stale["user_message_id"], stale["chat_id"])
    log.info("Chat %s: recovered a reply its server left unfinished (%d chars)",
             short_id(stale["chat_id"]), len(text))  # fmt: skip
    return True


async def recover_abandoned_turns(services: Services) -> int:
    """At start-up: finish every turn a process that died left behind (see `recover_turn`)."""
    recovered = 0
    while await recover_turn(services):
        recovered += 1
    return recovered
