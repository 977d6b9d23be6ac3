"""The OpenAI-compatible API: `GET /v1/models` and `POST /v1/chat/completions`, so the `openai`
SDKs and other chat UIs (Open WebUI…) can talk to ResolveAI.

A completion is a turn of the same flow the browser's messages go through (chat/runner.py,
chat/turn_jobs.py): memory recalled and extracted, documents searched, the web searched when the
request asks for it (a tool named `web_search` in `tools`, or `"resolveai": {"use_web": true}`),
the reply saved in a chat. Which chat:

- `X-ResolveAI-Chat-Id: <id>` (or `"resolveai": {"chat_id": …}`) continues that chat of yours: the
  last message (a user's) is the new one; the earlier ones are in the chat already, so they are
  not read again.
- Otherwise the request is a new chat, shown in the chat list like any other: its earlier
  messages (user and assistant) are saved into it, in one transaction, before the last one is
  answered. Memory is read and the last message written to it (the earlier ones were, when they
  were last); `"resolveai": {"temporary": true}` makes it a temporary chat (no memory read or
  written).

System (and developer) messages are the client's instructions for how to answer (Open WebUI's
system prompt): for that answer they take the place of the custom instructions of the user's
Settings, under ResolveAI's own (core/prompts.py), not instead of them.

Every answer names its chat in the `X-ResolveAI-Chat-Id` header (and `resolveai.chat_id`). Errors
are OpenAI's shape (core/openai_errors.py). Sampling parameters (temperature, max_tokens…) and a
client's own tools are accepted and not used: the server's MODELS_CONFIG decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from sse_starlette import EventSourceResponse, ServerSentEvent

from chat import openai_format
from chat.auth import user_of
from chat.openai_format import MODES, ReplyState, model_card
from chat.routes import HEARTBEAT_SECONDS, _within_limits, jobs_of, services_of
from chat.runner import MAX_MESSAGE_CHARS, ChatBusy, ChatNotFound, start_turn, title_from
from chat.turn_jobs import TurnJob
from core import chat_store
from core.openai_errors import KINDS, OpenAIError, OpenAIErrorBody
from core.turn_store import FINAL_EVENTS

router = APIRouter(prefix="/v1")

CHAT_HEADER = "X-ResolveAI-Chat-Id"
MAX_MESSAGES = 1000
# A client's system prompt (a character card, a style guide) fits; a document pasted into it
# belongs in the user's documents.
MAX_CLIENT_INSTRUCTIONS_CHARS = 8000
# A stream's status is sent with its first byte: it waits this long for the reply's first word,
# so a reply that fails at once (the local model busy, a provider down) is a plain 503.
FIRST_WORD_SECONDS = 2.0


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str = Field(max_length=50)
    text: str | None = None


class CompletionMessage(BaseModel):
    # name, tool_calls, tool_call_id…: accepted, not used.
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None


class FunctionIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(max_length=200)


class ToolIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str = Field("function", max_length=50)
    function: FunctionIn


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: StrictBool = False


class ResolveAIOptions(BaseModel):
    """ResolveAI's own request fields (`extra_body={"resolveai": {...}}` in the openai SDK)."""

    model_config = ConfigDict(extra="forbid")

    use_web: StrictBool = Field(False, description="Search the web for the answer.")
    chat_id: uuid.UUID | None = Field(None, description=f"Continue this chat (as {CHAT_HEADER}).")
    temporary: StrictBool = Field(False, description="A new chat that reads and writes no memory.")


class ChatCompletionIn(BaseModel):
    # OpenAI's other fields (temperature, max_tokens, top_p, n, seed…): accepted, not used.
    model_config = ConfigDict(extra="allow")

    # The schema names the one model; another is a 404 (model_not_found), as OpenAI answers.
    model: str = Field(
        max_length=200, description="`resolveai`, or `resolveai-research` for a research report"
        " (see GET /v1/models).", json_schema_extra={"enum": list(MODES)},
    )  # fmt: skip
    messages: list[CompletionMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    tools: list[ToolIn] | None = Field(None, max_length=128)
    user: str | None = Field(None, max_length=200)
    resolveai: ResolveAIOptions | None = None


def _error_statuses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {"model": OpenAIErrorBody, "description": f"OpenAI error ({KINDS[status][0]})."}
        for status in statuses
    }


COMPLETION_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The completion (`stream: false`), or with `stream: true` Server-Sent "
        "Events, each `data:` a `chat.completion.chunk` (JSON), the last `data: [DONE]`. The "
        "`X-ResolveAI-Chat-Id` header names the chat.",
        "model": openai_format.ChatCompletion,
        "content": {"text/event-stream": {"itemSchema": {"type": "object"}}},
    },
    **_error_statuses(404, 409, 429),
}


def _text_of(message: CompletionMessage, index: int) -> str:
    """A message's text; parts other than text are refused (ResolveAI reads no images)."""
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    texts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise OpenAIError(
                400, f"Only text content is supported, not {part.type!r}.",
                param=f"messages.{index}.content", code="unsupported_content",
            )  # fmt: skip
        texts.append(part.text)
    return "\n".join(texts)


def _conversation(
    messages: list[CompletionMessage],
) -> tuple[str, list[tuple[str, str]], str]:
    """The new message (the last, a user's, with text), the chat before it ((role, text) of the
    user and assistant messages with text) and the client's instructions (its system messages)."""
    last = len(messages) - 1
    question = _text_of(messages[last], last)
    if messages[last].role != "user":
        raise OpenAIError(
            400, "The last message must be the user's: it is the one answered.",
            param=f"messages.{last}.role",
        )  # fmt: skip
    if not question.strip():
        raise OpenAIError(400, "The last message is empty.", param=f"messages.{last}.content")
    if len(question) > MAX_MESSAGE_CHARS:
        raise OpenAIError(
            400, f"The last message is longer than {MAX_MESSAGE_CHARS:,} characters.",
            param=f"messages.{last}.content", code="message_too_long",
        )  # fmt: skip
    history, instructions = [], []
    for index, message in enumerate(messages[:last]):
        text = _text_of(message, index)
        if message.role in ("user", "assistant") and text.strip():
            history.append((message.role, text))
        elif message.role in ("system", "developer") and text.strip():
            instructions.append(text.strip())
    said = "\n\n".join(instructions)
    if len(said) > MAX_CLIENT_INSTRUCTIONS_CHARS:
        raise OpenAIError(
            400, f"The system messages are longer than {MAX_CLIENT_INSTRUCTIONS_CHARS:,}"
            " characters in all.", param="messages", code="instructions_too_long",
        )  # fmt: skip
    return question, history, said


def _mode_of(model: str) -> str:
    """The turn's mode the model id asks for ("chat" or "research"); 404 for another id."""
    if model not in MODES:
        served = " and ".join(repr(m) for m in MODES)
        raise OpenAIError(
            404, f"The model {model!r} does not exist; ResolveAI serves {served}.",
            param="model", code="model_not_found",
        )  # fmt: skip
    return MODES[model]


@router.get("/models", response_model=openai_format.ModelList)
async def list_models() -> dict[str, Any]:
    """`resolveai`: ResolveAI's whole flow (memory, documents, web search) on the chat model of
    its MODELS_CONFIG; `resolveai-research`: a cited report from several searches."""
    return {"object": "list", "data": [model_card(model) for model in MODES]}


@router.get(
    "/models/{model}", response_model=openai_format.ModelCard, responses=_error_statuses(404)
)
async def get_model(model: Annotated[str, Path(max_length=200)]) -> dict[str, Any]:
    _mode_of(model)
    return model_card(model)


async def _seed_chat(
    request: Request, title: str, history: list[tuple[str, str]], temporary: bool
) -> uuid.UUID:
    """A new chat of the user's holding the request's earlier messages, all or none."""
    pool = services_of(request).database.pool
    async with pool.connection() as conn, conn.transaction():
        chat = await chat_store.create_chat(conn, title, temporary, user_of(request).user_id)
        for role, text in history:
            await chat_store.add_message(conn, chat["chat_id"], role, text)
    return chat["chat_id"]


# The header is read by hand: declared as an optional id, FastAPI's schema would say it may be
# JSON null, which a header cannot be (a client sending "null" would be told it was valid).
CHAT_HEADER_PARAMETER = {
    "name": CHAT_HEADER,
    "in": "header",
    "required": False,
    "description": "Continue this chat of yours (an id from an earlier answer's header).",
    "schema": {"type": "string", "format": "uuid"},
}


def _chat_header(request: Request) -> uuid.UUID | None:
    value = request.headers.get(CHAT_HEADER)
    if value is None:
        return None
    try:
        return uuid.UUID(value.strip())
    except ValueError:
        raise OpenAIError(400, f"{CHAT_HEADER}: not a valid chat id.", param=CHAT_HEADER) from None


@router.post(
    "/chat/completions",
    response_model=None,
    responses=COMPLETION_ANSWERS,
    openapi_extra={"parameters": [CHAT_HEADER_PARAMETER]},
)
async def chat_completions(request: Request, body: ChatCompletionIn) -> Response:
    """A reply of ResolveAI's to the conversation in `messages` (see the module docstring for
    which chat it goes to), streamed with `stream: true` (`stream_options.include_usage` adds a
    last chunk with the usage). 404: no such model or chat; 409: a reply is already being
    written in that chat; 429: past your message limits; 503: the model could not answer."""
    mode = _mode_of(body.model)
    chat_header = _chat_header(request)
    options = body.resolveai or ResolveAIOptions()
    if chat_header and options.chat_id and chat_header != options.chat_id:
        raise OpenAIError(400, f"{CHAT_HEADER} and resolveai.chat_id name different chats.",
                          param="resolveai.chat_id")  # fmt: skip
    chat_id = chat_header or options.chat_id
    if chat_id is not None and options.temporary:
        raise OpenAIError(400, "Only a new chat can be made temporary.",
                          param="resolveai.temporary")  # fmt: skip
    question, history, instructions = _conversation(body.messages)
    use_web = options.use_web or any(t.function.name == "web_search" for t in body.tools or [])
    services = services_of(request)
    if (use_web or mode == "research") and services.search_provider is None:
        raise OpenAIError(
            400, f"Web search is not available: {services.features['web_search']}.",
            param="model" if mode == "research" else "tools", code="web_search_unavailable",
        )  # fmt: skip
    user = user_of(request)
    await _within_limits(request, user)  # 429 (rewritten into OpenAI's shape)
    seeded = None
    if chat_id is None and history:
        seeded = chat_id = await _seed_chat(
            request, title_from(history[0][1]), history, options.temporary
        )
    try:
        turn = await start_turn(
            services, chat_id, question, use_web, user_id=user.user_id,
            temporary=options.temporary, wake_memory=request.app.state.memory_worker.wake,
            mode=mode, instructions=instructions or None,
        )  # fmt: skip
        job = await jobs_of(request).start(turn)
    except BaseException as error:
        if seeded is not None:  # nothing was answered: the chat made for it goes too
            with contextlib.suppress(Exception):
                await chat_store.delete_chat(services.database.pool, seeded, user.user_id)
        if isinstance(error, ChatNotFound):
            raise OpenAIError(404, str(error), param=CHAT_HEADER, code="chat_not_found") from None
        if isinstance(error, ChatBusy):
            raise OpenAIError(409, str(error), code="chat_busy") from None
        raise
    chat = str(turn.context.chat_id)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    reply = ReplyState(f"chatcmpl-{turn.run_id.hex}", body.model, chat, include_usage)
    prompt = [{"role": r, "content": t} for r, t in history] + [
        {"role": "user", "content": question}
    ]
    headers = {CHAT_HEADER: chat}
    if not body.stream:
        return await _whole(job, reply, prompt, headers)
    return await _stream(job, reply, prompt, headers)


def _failed(message: str, headers: dict[str, str]) -> OpenAIError:
    return OpenAIError(503, message, code="reply_failed", headers={**headers, "Retry-After": "30"})


async def _whole(
    job: TurnJob, reply: ReplyState, prompt: list[dict[str, str]], headers: dict[str, str]
) -> JSONResponse:
    """The reply once it is written (and saved), as one `chat.completion`."""
    error = None
    async for _, event in job.follow(0):
        reply.note(event)
        if event["type"] == "error":
            error = event["message"]
    if error is not None:
        raise _failed(error, headers)
    footer = reply.sources_footer()
    if footer:
        reply.text.append(footer)
    counted = await asyncio.to_thread(openai_format.usage, prompt, "".join(reply.text))
    return JSONResponse(reply.completion(counted), headers=headers)


async def _stream(
    job: TurnJob, reply: ReplyState, prompt: list[dict[str, str]], headers: dict[str, str]
) -> Response:
    """The reply as chunks while it is written. Its first word is awaited (FIRST_WORD_SECONDS at
    most) before the answer starts, so a reply failing at once gets its status; a failure later
    comes as a last `data: {"error": …}` (the SDKs raise it)."""
    events = job.follow(0)
    held: list[dict[str, Any]] = []
    pending: asyncio.Task[Any] | None = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIRST_WORD_SECONDS
    while True:
        pending = asyncio.ensure_future(anext(events, None))
        done, _ = await asyncio.wait({pending}, timeout=max(0.0, deadline - loop.time()))
        if not done:
            break  # slow to start: stream what comes, from the pending event on
        item, pending = pending.result(), None
        if item is None:
            break
        event = item[1]
        held.append(event)
        if event["type"] == "error" and not any(e["type"] == "token" for e in held):
            raise _failed(event["message"], headers)
        if event["type"] == "token" or event["type"] in FINAL_EVENTS:
            break

    async def rest() -> AsyncIterator[dict[str, Any]]:
        for event in held:
            yield event
        if pending is not None:
            item = await pending
            if item is None:
                return
            yield item[1]
        async for _, event in events:
            yield event

    async def chunks() -> AsyncIterator[ServerSentEvent]:
        yield _data(reply.chunk({"role": "assistant", "content": ""}))
        async for event in rest():
            text = reply.note(event)
            if text:
                yield _data(reply.chunk({"content": text}))
            if event["type"] == "error":
                yield _data({"error": {"message": event["message"], "type": "server_error",
                                       "param": None, "code": "reply_failed"}})  # fmt: skip
                return
            if event["type"] in FINAL_EVENTS:
                break
        footer = reply.sources_footer()
        if footer:
            reply.text.append(footer)
            yield _data(reply.chunk({"content": footer}))
        yield _data(reply.chunk({}, "stop", resolveai=reply.extension()))
        if reply.include_usage:
            counted = await asyncio.to_thread(openai_format.usage, prompt, "".join(reply.text))
            yield _data(reply.usage_chunk(counted))
        yield ServerSentEvent(data="[DONE]")

    return EventSourceResponse(
        chunks(),
        ping=HEARTBEAT_SECONDS,
        sep="\n",
        headers={**headers, "X-Accel-Buffering": "no", "Cache-Control": "no-cache"},
    )


def _data(payload: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(payload))
