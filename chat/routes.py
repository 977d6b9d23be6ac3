"""The chat API: send a message (a Server-Sent Events stream), list, read, rename and delete chats.

Errors are JSON `{"error": "..."}` with a 4xx status: 404 unknown chat, 409 a reply already being
written in the chat, 422 bad input (empty or too long message, malformed id). A new chat may be
`temporary` (no memory read or written); deleting a chat may forget the memories it gave.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, Field, field_validator, model_validator
from sse_starlette import EventSourceResponse, ServerSentEvent

from chat.runner import MAX_MESSAGE_CHARS, ChatBusy, ChatNotFound, start_turn, stream_turn
from core import chat_store, memory_store
from core.preferences import memory_paused
from core.services import Services

router = APIRouter(prefix="/api")

HEARTBEAT_SECONDS = 10
MESSAGE_FIELDS = ("message_id", "role", "content", "status", "sources", "steps", "tool_calls",
                  "error", "sent_at")  # fmt: skip
CHAT_FIELDS = ("chat_id", "title", "temporary", "created_at", "updated_at")


class MessageIn(BaseModel):
    content: str = Field(max_length=MAX_MESSAGE_CHARS)
    use_web: bool = False

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the message is empty")
        return value


class NewMessageIn(MessageIn):
    chat_id: uuid.UUID | None = None
    # A temporary chat reads nothing from memory and writes nothing to it (new chats only).
    temporary: bool = False

    @model_validator(mode="after")
    def _temporary_is_for_new_chats(self) -> NewMessageIn:
        if self.temporary and self.chat_id is not None:
            raise ValueError("temporary: only a new chat can be made temporary")
        return self


class RenameIn(BaseModel):
    title: str = Field(min_length=1, max_length=200)

    @field_validator("title")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the title is empty")
        return value.strip()


def services_of(request: Request) -> Services:
    return request.app.state.services


def public(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return jsonable_encoder({name: row[name] for name in fields})


def event_json(event: dict[str, Any]) -> str:
    """An event's JSON. Events are plain JSON data but for the odd id or date: `jsonable_encoder`
    only for those (it costs more than `json.dumps` itself, on every token)."""
    try:
        return json.dumps(event)
    except TypeError:
        return json.dumps(jsonable_encoder(event))


async def _stream(request: Request, chat_id: uuid.UUID | None, body: MessageIn) -> Response:
    services = services_of(request)
    if body.use_web and services.search_provider is None:
        raise HTTPException(400, f"Web search is not available: {services.features['web_search']}.")
    try:
        turn = await start_turn(
            services,
            chat_id,
            body.content,
            body.use_web,
            temporary=getattr(body, "temporary", False),
            wake_memory=request.app.state.memory_worker.wake,
        )
    except ChatNotFound as error:
        raise HTTPException(404, str(error)) from None
    except ChatBusy as error:
        raise HTTPException(409, str(error)) from None

    async def events() -> AsyncIterator[ServerSentEvent]:
        async for event in stream_turn(turn):
            yield ServerSentEvent(event=event["type"], data=event_json(event))

    return EventSourceResponse(
        events(),
        ping=HEARTBEAT_SECONDS,
        ping_message_factory=lambda: ServerSentEvent(
            event="heartbeat", data='{"type":"heartbeat"}'
        ),
        headers={"X-Accel-Buffering": "no", "Cache-Control": "no-cache"},
    )


@router.get("/config")
async def client_config(request: Request) -> dict[str, Any]:
    """What the browser needs to know: limits, and whether web search can be offered (and if not,
    why, so the "Use web tool" box can say so)."""
    services = services_of(request)
    available = services.search_provider is not None
    return {
        "max_message_chars": MAX_MESSAGE_CHARS,
        "memory": {"paused": await memory_paused(services.database.pool)},
        "web_search": {
            "available": available,
            "reason": None if available else services.features["web_search"],
        },
    }


@router.post("/messages")
async def send_message(request: Request, body: NewMessageIn) -> Response:
    """Send a message; with no `chat_id` it starts a new chat (announced by a `chat` event)."""
    return await _stream(request, body.chat_id, body)


@router.post("/chats/{chat_id}/messages")
async def send_message_to_chat(request: Request, chat_id: uuid.UUID, body: MessageIn) -> Response:
    return await _stream(request, chat_id, body)


@router.get("/chats")
async def list_chats(
    request: Request,
    q: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[dict[str, Any]]:
    """Chats, newest activity first; `q` filters by title."""
    rows = await chat_store.list_chats(services_of(request).database.pool, limit, q)
    return [public(row, CHAT_FIELDS) for row in rows]


async def _chat_or_404(request: Request, chat_id: uuid.UUID) -> dict[str, Any]:
    chat = await chat_store.get_chat(services_of(request).database.pool, chat_id)
    if chat is None:
        raise HTTPException(404, f"No chat with id {chat_id}")
    return chat


@router.get("/chats/{chat_id}/messages")
async def list_messages(request: Request, chat_id: uuid.UUID) -> list[dict[str, Any]]:
    await _chat_or_404(request, chat_id)
    pool = services_of(request).database.pool
    rows = await chat_store.list_messages(pool, chat_id)
    used = await memory_store.get_memories(pool, [i for row in rows for i in row["memory_ids"]])
    contents = {memory["memory_id"]: memory["content"] for memory in used}
    return [
        {
            **public(row, MESSAGE_FIELDS),
            "memories": [
                {"memory_id": str(i), "content": contents[i]}
                for i in row["memory_ids"]
                if i in contents
            ],
        }
        for row in rows
    ]


@router.get("/chats/{chat_id}/summary")
async def get_summary(request: Request, chat_id: uuid.UUID) -> dict[str, Any]:
    chat = await _chat_or_404(request, chat_id)
    return jsonable_encoder(
        {
            "chat_id": chat_id,
            "summary": chat["summary"],
            "summary_upto_message_id": chat["summary_upto_message_id"],
        }
    )


@router.patch("/chats/{chat_id}")
async def rename_chat(request: Request, chat_id: uuid.UUID, body: RenameIn) -> dict[str, Any]:
    chat = await chat_store.rename_chat(services_of(request).database.pool, chat_id, body.title)
    if chat is None:
        raise HTTPException(404, f"No chat with id {chat_id}")
    return public(chat, CHAT_FIELDS)


@router.delete("/chats/{chat_id}", status_code=204)
async def delete_chat(
    request: Request, chat_id: uuid.UUID, forget_memories: bool = False
) -> Response:
    """Delete a chat; `forget_memories=true` also deletes the memories that came from it."""
    pool = services_of(request).database.pool
    if not await chat_store.delete_chat(pool, chat_id, forget_memories=forget_memories):
        raise HTTPException(404, f"No chat with id {chat_id}")
    return Response(status_code=204)
