"""Send one message through the real chat flow (runner + graph) in-process, as the server does
for POST /api/messages, and collect what the user would see: the saved reply, its sources, the
tool calls, the steps, the memories the reply used and the time taken."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from chat import summary, titles
from chat.runner import start_turn, stream_turn
from core import chat_store
from core.accounts import LOCAL_USER_ID
from core.services import Services


@dataclass
class Exchange:
    chat_id: uuid.UUID
    reply: str  # as saved (what a reload shows)
    status: str  # the saved message's status, or "error"
    error: str | None
    sources: list[dict[str, Any]]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # tool_start events
    steps: list[str] = field(default_factory=list)  # the progress lines the user saw
    seconds: float = 0.0
    user_message_id: uuid.UUID | None = None  # the message sent (what extraction reads)
    message_id: uuid.UUID | None = None  # the saved reply
    # The memories recalled into the reply's prompt or retrieved by retrieve_memory, as saved
    # with it (messages.memory_ids: what "Used 2 memories" shows).
    memory_ids: list[uuid.UUID] = field(default_factory=list)

    def calls_of(self, tool: str) -> list[dict[str, Any]]:
        return [call for call in self.tool_calls if call.get("name") == tool]


async def ask(
    services: Services,
    content: str,
    chat_id: uuid.UUID | None = None,
    use_web: bool = False,
    user_id: uuid.UUID = LOCAL_USER_ID,
    mode: str = "chat",
) -> Exchange:
    """One user message and its whole reply. The summary fold it may start (after the reply, in
    the background) is waited for, not timed: the next message then finds the chat as it would
    after a pause, and a fold on the local model does not slow the next reply's figures."""
    started = time.perf_counter()
    turn = await start_turn(services, chat_id, content, use_web, user_id=user_id, mode=mode)
    tool_calls: list[dict[str, Any]] = []
    steps: list[str] = []
    message_id: str | None = None
    error: str | None = None
    async for event in stream_turn(turn):
        if event["type"] == "tool_start":
            tool_calls.append(event)
        elif event["type"] == "step":
            steps.append(event["text"])
        elif event["type"] == "done":
            message_id = event["message_id"]
        elif event["type"] == "error":
            error = event["message"]
    seconds = time.perf_counter() - started
    await summary.settled()
    await titles.settled()  # a new chat's title call too (chat/titles.py)
    saved = None
    if message_id is not None:
        messages = await chat_store.list_messages(services.database.pool, turn.context.chat_id)
        saved = next((m for m in messages if str(m["message_id"]) == message_id), None)
    return Exchange(
        chat_id=turn.context.chat_id,
        reply=saved["content"] if saved else "",
        status=saved["status"] if saved else "error",
        error=error,
        sources=list(saved["sources"]) if saved else [],
        tool_calls=tool_calls,
        steps=steps,
        seconds=seconds,
        user_message_id=turn.context.user_message_id,
        message_id=saved["message_id"] if saved else None,
        memory_ids=list(saved["memory_ids"]) if saved else [],
    )
