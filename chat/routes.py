"""The chat API: send a message (a Server-Sent Events stream), follow or stop a reply being written,
list, read, rename, pin and delete chats.

A reply is a job (chat/turn_jobs.py): the POST's stream is only its first reader, and leaving it
stops nothing. `GET /api/chats/{id}/stream?after=N` (or SSE `Last-Event-ID: N`) replays the reply
being written from event N and follows it, from any server process; every event carries its
number as its SSE id. `POST /api/chats/{id}/stop` stops it, whichever process writes it.

Versions (core/chat_store.py's message tree): regenerate a reply, edit a question (a branch of its
own), continue a stopped reply, all streamed like a new message; `…/show` picks the version shown.

Errors are JSON `{"error": "...", "request_id": "..."}` (core/http_errors.py) with a 4xx status:
404 unknown chat (or no reply to follow), 409 a reply already being written in the chat (or none
to stop), 422 bad input (empty or too long message, malformed id, an unknown field); the guards
in core/http_guard.py answer before any route (Host, Origin, body cap, unstorable text). A new
chat may be `temporary` (no memory read or written); deleting a chat may forget the memories it
gave.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema
from sse_starlette import EventSourceResponse, ServerSentEvent

from chat.auth import user_of
from chat.runner import (
    MAX_MESSAGE_CHARS,
    MAX_SENT_DOCUMENTS,
    ChatBusy,
    ChatNotFound,
    MessageNotFound,
    start_turn,
)
from chat.turn_jobs import TurnJobs, follow_turn, request_stop
from chat.user_errors import web_search_status
from core import accounts, chat_store, document_store, memory_store, turn_store
from core.api_schema import NON_BLANK_TEXT, event_stream_route
from core.http_errors import errors
from core.model_names import friendly_name
from core.preferences import get_preferences
from core.services import Services

router = APIRouter(prefix="/api")

HEARTBEAT_SECONDS = 10
DELETE_WAIT_SECONDS = 5  # deleting a chat waits this long at most for its reply to stop
MESSAGE_FIELDS = ("message_id", "role", "content", "status", "sources", "steps", "tool_calls",
                  "error", "sent_at", "versions", "model", "notes", "mode")  # fmt: skip
CHAT_FIELDS = ("chat_id", "title", "title_source", "temporary", "pinned", "created_at",
               "updated_at")  # fmt: skip


class MessageIn(BaseModel):
    # An unknown field is a mistake (a typo of use_web…) to report, not to drop in silence.
    model_config = ConfigDict(extra="forbid")

    content: str = Field(
        max_length=MAX_MESSAGE_CHARS, json_schema_extra={"pattern": NON_BLANK_TEXT}
    )
    # Strict: "yes" or 1 is a mistake to report, not a way to say true.
    use_web: StrictBool = False
    # research: the question answered as a cited report from several searches (needs web search).
    mode: Literal["chat", "research"] = "chat"
    # Files uploaded first (POST /api/documents) and sent with the message: the reply reads them.
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=MAX_SENT_DOCUMENTS)

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the message is empty")
        return value


class NewMessageIn(MessageIn):
    # The schema states the rule below: no `temporary: true` with a `chat_id`.
    model_config = ConfigDict(json_schema_extra={"not": {
        "required": ["chat_id", "temporary"],
        "properties": {"chat_id": {"type": "string"}, "temporary": {"const": True}},
    }})  # fmt: skip

    chat_id: uuid.UUID | None = None
    # A temporary chat reads nothing from memory and writes nothing to it (new chats only).
    temporary: StrictBool = False

    @model_validator(mode="after")
    def _temporary_is_for_new_chats(self) -> NewMessageIn:
        if self.temporary and self.chat_id is not None:
            raise ValueError("temporary: only a new chat can be made temporary")
        return self


class RegenerateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Unset: as the message was first sent.
    use_web: StrictBool | None = None
    mode: Literal["chat", "research"] | None = None


def _optional(schema: dict[str, Any], **extra: Any) -> None:
    # A field that may be left out but not sent as null: its schema shows no `default: null`.
    schema.pop("default", None)
    schema.update(extra)


class ChatEdit(BaseModel):
    """A rename (`title`, then the user's: a generated title never replaces it) and/or a pin."""

    # At least one of the two; neither may be null (leave it out to keep it as is).
    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    title: Annotated[str, Field(min_length=1, max_length=200)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=lambda schema: _optional(schema, pattern=NON_BLANK_TEXT)
    )
    pinned: StrictBool | SkipJsonSchema[None] = Field(default=None, json_schema_extra=_optional)

    @field_validator("title")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is None:
            raise ValueError("the title cannot be null: leave it out to keep it")
        if not value.strip():
            raise ValueError("the title is empty")
        return value.strip()

    @field_validator("pinned")
    @classmethod
    def _not_null(cls, value: bool | None) -> bool | None:
        if value is None:
            raise ValueError("pinned cannot be null: leave it out to keep it")
        return value

    @model_validator(mode="after")
    def _something(self) -> ChatEdit:
        if not self.model_fields_set:
            raise ValueError("nothing to change: give a title and/or pinned")
        return self


def services_of(request: Request) -> Services:
    return request.app.state.services


def jobs_of(request: Request) -> TurnJobs:
    return request.app.state.turn_jobs


def public(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return jsonable_encoder({name: row[name] for name in fields})


def event_json(event: dict[str, Any]) -> str:
    """An event's JSON. Events are plain JSON data but for the odd id or date: `jsonable_encoder`
    only for those (it costs more than `json.dumps` itself, on every token)."""
    try:
        return json.dumps(event)
    except TypeError:
        return json.dumps(jsonable_encoder(event))


async def _stream(
    request: Request,
    chat_id: uuid.UUID | None,
    content: str,
    use_web: bool,
    temporary: bool = False,
    regenerate: uuid.UUID | None = None,
    edit: uuid.UUID | None = None,
    resume: uuid.UUID | None = None,
    mode: str = "chat",
    document_ids: list[uuid.UUID] | None = None,
) -> Response:
    services = services_of(request)
    if (use_web or mode == "research") and services.search_provider is None:
        status = services.features["web_search"]
        # A sentence to act on ("Web search is off: add a Tavily key in .env (see README).").
        raise HTTPException(400, web_search_status(status) or f"Web search is off: {status}.")
    user = user_of(request)
    await _within_limits(request, user)
    if document_ids:
        await _documents_or_404(services, document_ids, user.user_id)
    try:
        turn = await start_turn(
            services,
            chat_id,
            content,
            use_web,
            user_id=user.user_id,
            temporary=temporary,
            wake_memory=request.app.state.memory_worker.wake,
            regenerate=regenerate,
            edit=edit,
            resume=resume,
            mode=mode,
            document_ids=document_ids or [],
        )
    except (ChatNotFound, MessageNotFound) as error:
        raise HTTPException(404, str(error)) from None
    except ChatBusy as error:
        raise HTTPException(409, str(error)) from None
    job = await jobs_of(request).start(turn)
    return event_stream(job.follow(0))


async def _documents_or_404(
    services: Services, document_ids: list[uuid.UUID], user_id: uuid.UUID
) -> None:
    """404 for a document sent with a message that is not one of the user's."""
    found = await document_store.get_documents(services.database.pool, document_ids, user_id)
    known = {row["document_id"] for row in found}
    for document_id in document_ids:
        if document_id not in known:
            raise HTTPException(404, f"No document with id {document_id}")


async def _within_limits(request: Request, user: accounts.User) -> None:
    """429 past the user's message limits (AUTH_MODE=password; one user has none)."""
    settings = request.app.state.settings
    if settings.auth_mode != "password":
        return
    wait = await accounts.admit_message(
        services_of(request).database.pool,
        user.user_id,
        settings.rate_limit_messages_per_minute,
        settings.rate_limit_concurrent_replies,
    )
    if wait is not None:
        raise HTTPException(
            429, f"You are sending messages faster than this server allows: try again in {wait} s.",
            {"Retry-After": str(wait)},
        )  # fmt: skip


def event_stream(events: AsyncIterator[tuple[int, dict[str, Any]]]) -> EventSourceResponse:
    """Numbered events as Server-Sent Events (the number as the id), with heartbeats."""

    async def sse() -> AsyncIterator[ServerSentEvent]:
        async for seq, event in events:
            yield ServerSentEvent(event=event["type"], data=event_json(event), id=str(seq))

    return EventSourceResponse(
        sse(),
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
    preferences = await get_preferences(services.database.pool, user_of(request).user_id)
    available = services.search_provider is not None
    status = services.features["web_search"]
    reason = None if available else status
    message = None if available else web_search_status(status)
    if available and "web_search" in preferences["disabled_tools"]:
        available, reason = False, "off (you switched it off in Settings)"
        message = "Web search is off: you switched it off in Settings."
    return {
        "max_message_chars": MAX_MESSAGE_CHARS,
        "memory": {"paused": preferences["memory_paused"]},
        # The reason as a sentence to act on ("Web search is off: add a Tavily key…").
        "web_search": {"available": available, "reason": reason, "message": message},
    }


@router.post("/messages", **event_stream_route(404, 409, 429))
async def send_message(request: Request, body: NewMessageIn) -> Response:
    """Send a message; with no `chat_id` it starts a new chat (announced by a `chat` event)."""
    return await _stream(
        request, body.chat_id, body.content, body.use_web, body.temporary, mode=body.mode,
        document_ids=body.document_ids,
    )  # fmt: skip


@router.post("/chats/{chat_id}/messages", **event_stream_route(404, 409, 429))
async def send_message_to_chat(request: Request, chat_id: uuid.UUID, body: MessageIn) -> Response:
    return await _stream(
        request, chat_id, body.content, body.use_web, mode=body.mode,
        document_ids=body.document_ids,
    )  # fmt: skip


@router.post(
    "/chats/{chat_id}/messages/{message_id}/regenerate", **event_stream_route(404, 409, 429)
)
@router.post("/chats/{chat_id}/messages/{message_id}/retry", **event_stream_route(404, 409, 429))
async def regenerate_reply(
    request: Request, chat_id: uuid.UUID, message_id: uuid.UUID, body: RegenerateIn | None = None
) -> Response:
    """Answer a question again (`message_id`: the question, or a reply to it): the new reply is
    another version, shown; the others stay (a failed reply with no text is replaced). The
    question is not sent twice; `use_web` and `mode` as first sent unless given. `retry` is the
    same."""
    first = await turn_store.asked_for(services_of(request).database.pool, message_id)
    use_web = first[0] if body is None or body.use_web is None else body.use_web
    mode = first[1] if body is None or body.mode is None else body.mode
    return await _stream(request, chat_id, "", use_web, regenerate=message_id, mode=mode)


@router.patch("/chats/{chat_id}/messages/{message_id}", **event_stream_route(404, 409, 429))
async def edit_message(
    request: Request, chat_id: uuid.UUID, message_id: uuid.UUID, body: MessageIn
) -> Response:
    """Edit one of your messages: the new text is another version of it, answered on a branch of
    its own (streamed like a new message); the old branch stays, one version away."""
    return await _stream(
        request, chat_id, body.content, body.use_web, edit=message_id, mode=body.mode,
        document_ids=body.document_ids,
    )  # fmt: skip


@router.post("/chats/{chat_id}/messages/{message_id}/continue", **event_stream_route(404, 409, 429))
async def continue_reply(request: Request, chat_id: uuid.UUID, message_id: uuid.UUID) -> Response:
    """Continue a reply that was stopped or failed (the chat's last): the stream starts with its
    text so far and goes on from there; the whole is saved in its place. 404 for any other; 409
    for a research report (assembled from parts: there is no text to go on with)."""
    await _chat_or_404(request, chat_id)
    if await turn_store.wrote_research(services_of(request).database.pool, chat_id, message_id):
        raise HTTPException(
            409, "A research report cannot be continued: Regenerate researches the question again."
        )
    return await _stream(request, chat_id, "", False, resume=message_id)


@router.post("/chats/{chat_id}/messages/{message_id}/show", responses=errors(404, 409))
async def show_version(
    request: Request, chat_id: uuid.UUID, message_id: uuid.UUID
) -> list[dict[str, Any]]:
    """Show another version of a message (an id from its `versions`): the chat's branch through
    it becomes the one shown, and read by the next reply. Answers the branch's messages, like
    `GET …/messages`. 409 while a reply is being written in the chat."""
    pool = services_of(request).database.pool
    await _chat_or_404(request, chat_id)
    if await chat_store.show_version(pool, chat_id, message_id) is None:
        if await chat_store.get_message(pool, chat_id, message_id) is None:
            raise HTTPException(404, f"No message with id {message_id} in this chat")
        raise HTTPException(409, "A reply is being written in this chat; wait for it or stop it.")
    return await list_messages(request, chat_id)


@router.get("/chats/{chat_id}/stream", **event_stream_route(404))
async def follow_reply(
    request: Request,
    chat_id: uuid.UUID,
    after: Annotated[int | None, Query(ge=0, le=10_000_000)] = None,
) -> Response:
    """The reply being written in the chat (or the one just finished), from event `after` on
    (default: the `Last-Event-ID` header, else the start), live until it ends."""
    await _chat_or_404(request, chat_id)
    if after is None:
        after = _last_event_id(request)
    events = await follow_turn(services_of(request), jobs_of(request), chat_id, after)
    if events is None:
        raise HTTPException(404, "No reply is being written in this chat.")
    return event_stream(events)


def _last_event_id(request: Request) -> int:
    value = request.headers.get("last-event-id", "").strip()
    if not value:
        return 0
    if not value.isdigit() or len(value) > 8:
        raise HTTPException(422, "Last-Event-ID: expected an event number")
    return int(value)


@router.post("/chats/{chat_id}/stop", responses=errors(404, 409))
async def stop_reply(request: Request, chat_id: uuid.UUID) -> dict[str, Any]:
    """Stop the reply being written in the chat, whichever server process writes it: it ends
    with an `interrupted` event and is saved with what it had written."""
    await _chat_or_404(request, chat_id)
    if not await request_stop(services_of(request), jobs_of(request), chat_id):
        raise HTTPException(409, "No reply is being written in this chat.")
    return {"stopping": True}


@router.get("/chats")
async def list_chats(
    request: Request,
    q: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[dict[str, Any]]:
    """Your chats, newest activity first; `q` filters by title."""
    rows = await chat_store.list_chats(
        services_of(request).database.pool, user_of(request).user_id, limit, q
    )
    return [public(row, CHAT_FIELDS) for row in rows]


async def _chat_or_404(request: Request, chat_id: uuid.UUID) -> dict[str, Any]:
    chat = await chat_store.get_chat(
        services_of(request).database.pool, chat_id, user_id=user_of(request).user_id
    )
    if chat is None:
        raise HTTPException(404, f"No chat with id {chat_id}")
    return chat


@router.get("/chats/{chat_id}/messages", responses=errors(404))
async def list_messages(request: Request, chat_id: uuid.UUID) -> list[dict[str, Any]]:
    await _chat_or_404(request, chat_id)
    pool = services_of(request).database.pool
    rows = await chat_store.list_messages(pool, chat_id)
    used = await memory_store.get_memories(pool, [i for row in rows for i in row["memory_ids"]])
    contents = {memory["memory_id"]: memory["content"] for memory in used}
    sent = await document_store.get_documents(
        pool, [i for row in rows for i in row["document_ids"]], user_of(request).user_id
    )
    filenames = {document["document_id"]: document["filename"] for document in sent}
    return [
        {
            **public(row, MESSAGE_FIELDS),
            "model_name": friendly_name(row["model"]),
            "memories": [
                {"memory_id": str(i), "content": contents[i]}
                for i in row["memory_ids"]
                if i in contents
            ],
            # The files sent with a question (a deleted one is left out).
            "documents": [
                {"document_id": str(i), "filename": filenames[i]}
                for i in row["document_ids"]
                if i in filenames
            ],
        }
        for row in rows
    ]


@router.get("/chats/{chat_id}/summary", responses=errors(404))
async def get_summary(request: Request, chat_id: uuid.UUID) -> dict[str, Any]:
    chat = await _chat_or_404(request, chat_id)
    return jsonable_encoder(
        {
            "chat_id": chat_id,
            "summary": chat["summary"],
            "summary_upto_message_id": chat["summary_upto_message_id"],
        }
    )


@router.patch("/chats/{chat_id}", responses=errors(404))
async def edit_chat(request: Request, chat_id: uuid.UUID, body: ChatEdit) -> dict[str, Any]:
    """Rename a chat (`title`) and/or pin it to the top of the list (`pinned`)."""
    chat = await chat_store.edit_chat(
        services_of(request).database.pool,
        chat_id,
        user_of(request).user_id,
        title=body.title,
        pinned=body.pinned,
    )
    if chat is None:
        raise HTTPException(404, f"No chat with id {chat_id}")
    return public(chat, CHAT_FIELDS)


@router.delete("/chats/{chat_id}", status_code=204, responses=errors(404))
async def delete_chat(
    request: Request, chat_id: uuid.UUID, forget_memories: bool = False
) -> Response:
    """Delete a chat; `forget_memories=true` also deletes the memories that came from it."""
    pool = services_of(request).database.pool
    await _chat_or_404(request, chat_id)  # before stopping anything: only your own chat's reply
    # A reply being written stops first (saved, then deleted with the chat); its readers see it end.
    await request_stop(services_of(request), jobs_of(request), chat_id)
    job = jobs_of(request).running(chat_id)
    if job is not None and job.task is not None:
        await asyncio.wait({job.task}, timeout=DELETE_WAIT_SECONDS)
    if not await chat_store.delete_chat(
        pool, chat_id, user_of(request).user_id, forget_memories=forget_memories
    ):
        raise HTTPException(404, f"No chat with id {chat_id}")
    return Response(status_code=204)
