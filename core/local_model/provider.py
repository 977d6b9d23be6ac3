"""The `local` deployment: LiteLLM's route to the local model's OpenAI-compatible server.

The model runs in a process of its own (`core.local_model.process`), or wherever `LOCAL_MODEL_URL`
points. This client adds what a slow, shared, single-request model needs around each call, which
a plain `openai/` deployment in LiteLLM could not do:

- it starts the model on first use, and waits its turn in the machine's queue
  (`core.local_model.queue`), telling the chat what it is doing (`core.model_progress`);
- background work (a call nobody watches that wants its answer whole: titles, memory extraction,
  summaries) gives the model up to a reply someone is waiting for, within POLL_SECONDS, and
  starts again after it; nothing of a try that gave way reaches its caller;
- it fits the prompt to the context window (oldest history first), counting with the model's own
  tokenizer, and refuses a message that cannot fit with a clear error;
- the chat template's control tokens (`<|im_end|>`, …) in any message's text are given
  look-alike brackets, as the server would read them as the real tokens (see `_request`);
- JSON replies (`response_format`) and a forced tool call are held to their schema by the server's
  llama.cpp grammar, so they cannot be malformed;
- closing the stream is how Stop reaches the model: the server stops within a token, or within a
  prompt batch while it is still reading (`core.local_model.serve`);
- a lost connection to a process that died gives a plain error and restarts the process;
- a deadline (`MODEL_CALL_DEADLINE`) bounds every call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any, TypeVar

import httpx
import openai

from core.config import Settings
from core.custom_provider import (
    CustomProvider,
    ProviderEvent,
    ProviderFailure,
    TextDelta,
    ToolCallRequest,
    UsageReport,
)
from core.local_model.process import Endpoint, LocalModelFailure, LocalModelProcess
from core.local_model.queue import POLL_SECONDS, ModelQueue, QueueFull
from core.model_progress import reading_what, report_progress, someone_is_watching
from core.prompt_blocks import neutralise_control_tokens
from core.redact import redact

log = logging.getLogger("resolveai.models")

T = TypeVar("T")

DEFAULT_TEMPERATURE = 0.2
CRASHED = "The local model stopped unexpectedly; restarting it. Send your message again shortly."
# Tokens the chat template adds around each message (role markers, newlines), counted generously.
TEMPLATE_TOKENS_PER_MESSAGE = 8
# Without the model's tokenizer (a server at LOCAL_MODEL_URL), tokens are estimated from length.
CHARS_PER_TOKEN_ESTIMATE = 3.0
TOKEN_COUNT_CACHE = 512
FIRST_USE_HINT = "Starting the local model (first use, ~10 s)"
# What a request meets when the process is not ready, by its state (core/local_model/process.py):
# the warm-up after start-up may have begun starting it; only a crash restarts it.
PROCESS_STEPS = {"not started": FIRST_USE_HINT, "starting": "Starting the local model"}


class LocalModelProvider(CustomProvider):
    """Serves `local/<anything>`."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.process = None if settings.local_model_url else LocalModelProcess(settings)
        self.queue = (
            ModelQueue(self.process.folder, settings.local_model_queue) if self.process else None
        )
        self._client: openai.AsyncOpenAI | None = None
        self._client_endpoint: Endpoint | None = None
        self._token_counts: OrderedDict[str, int] = OrderedDict()

    def health(self) -> dict[str, Any]:
        if self.process is None:
            # /api/health is public to the machine: a password in the URL stays out of it.
            return {"state": "external", "url": redact(str(self.settings.local_model_url))}
        return self.process.health()

    def close(self) -> None:
        if self.process is not None:
            self.process.close()

    async def generate(
        self,
        model: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        whole: bool = False,
    ) -> AsyncIterator[ProviderEvent]:
        request = _request(messages, params, self.settings.local_model_max_tokens)
        deadline = time.monotonic() + self.settings.model_call_deadline
        endpoint = await self._endpoint()
        if whole and self.queue is not None and not someone_is_watching():
            async for event in self._background(self.queue, endpoint, request, deadline):
                yield event
            return
        async with self._turn():
            client = self._client_of(endpoint)
            prompt_tokens = await self._fit_to_context(endpoint, request)
            async for event in self._stream(client, request, prompt_tokens, deadline):
                yield event

    async def _background(
        self, queue: ModelQueue, endpoint: Endpoint, request: dict[str, Any], deadline: float
    ) -> AsyncIterator[ProviderEvent]:
        """A request nobody watches: served whole, again from the start each time it gives way
        to a watched one (all tries within the one deadline)."""
        while True:
            events: list[ProviderEvent] = []
            async with _queued(queue):
                client = self._client_of(endpoint)
                prompt_tokens = await self._fit_to_context(endpoint, request)
                give_way = asyncio.Event()
                watcher = asyncio.create_task(_set_when_someone_waits(queue, give_way))
                try:
                    async for event in self._stream(
                        client, request, prompt_tokens, deadline, give_way
                    ):
                        events.append(event)
                except _GaveWay:
                    log.info("Local model: background work gave way to a reply; it goes on after")
                    continue
                finally:
                    watcher.cancel()
            for event in events:
                yield event
            return

    async def _endpoint(self) -> Endpoint:
        if self.process is None:
            return Endpoint(str(self.settings.local_model_url).rstrip("/"), "not-needed")
        if self.process.state != "ready":
            report_progress(PROCESS_STEPS.get(self.process.state, "Restarting the local model"))
        try:
            return await self.process.endpoint()
        except LocalModelFailure as error:
            raise ProviderFailure(str(error)) from None

    def _turn(self) -> AbstractAsyncContextManager[None]:
        if self.queue is None:
            return nullcontext()
        return _queued(self.queue)

    def _client_of(self, endpoint: Endpoint) -> openai.AsyncOpenAI:
        if self._client is None or self._client_endpoint != endpoint:
            # Retries are the Router's; a dead process is reported, not retried into.
            self._client = openai.AsyncOpenAI(
                base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0
            )
            self._client_endpoint = endpoint
        return self._client

    async def _stream(
        self,
        client: openai.AsyncOpenAI,
        request: dict[str, Any],
        prompt_tokens: int,
        deadline: float,
        give_way: asyncio.Event | None = None,
    ) -> AsyncIterator[ProviderEvent]:
        calls: dict[int, dict[str, Any]] = {}
        completion_tokens = 0
        finish = "stop"
        stream = None
        try:
            stream = await _within(
                client.chat.completions.create(**request, stream=True), deadline, give_way
            )
            chunks = stream.__aiter__()
            while True:
                try:
                    chunk = await _within(chunks.__anext__(), deadline, give_way)
                except StopAsyncIteration:
                    break
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                if delta.content:
                    if completion_tokens == 0:
                        report_progress("Writing…")
                    completion_tokens += 1
                    yield TextDelta(delta.content)
                for fragment in delta.tool_calls or ():
                    call = calls.setdefault(fragment.index or 0, {"arguments": []})
                    if fragment.id:
                        call["id"] = fragment.id
                    if fragment.function and fragment.function.name:
                        call["name"] = fragment.function.name
                    if fragment.function and fragment.function.arguments:
                        completion_tokens += 1
                        call["arguments"].append(fragment.function.arguments)
                if choice.finish_reason == "length":
                    finish = "length"
        except TimeoutError:
            raise ProviderFailure(
                f"The local model did not finish within {self.settings.model_call_deadline:.0f} s "
                "(MODEL_CALL_DEADLINE)",
                status_code=504,
            ) from None
        except (openai.APIConnectionError, httpx.TransportError) as error:
            if self.process is not None and await self.process.after_failure():
                raise ProviderFailure(CRASHED) from None
            raise ProviderFailure(f"Local model: connection lost ({error})") from None
        except openai.APIStatusError as error:
            status = error.status_code if 400 <= error.status_code < 500 else 503
            raise ProviderFailure(
                f"Local model: {_error_text(error)}", status_code=status
            ) from None
        finally:
            if stream is not None:
                # Closing the connection is what stops the model (see core.local_model.serve).
                await stream.close()
        for _, call in sorted(calls.items()):
            yield ToolCallRequest(name=call.get("name", ""), arguments=_arguments(call))
        yield UsageReport(prompt_tokens, completion_tokens, finish)

    # --- the prompt budget ------------------------------------------------------------------

    async def _fit_to_context(self, endpoint: Endpoint, request: dict[str, Any]) -> int:
        """Drop the oldest history until the prompt leaves room for the reply; return its size."""
        messages = request["messages"]
        counts = [await self._count(endpoint, _text_of(m.get("content"))) for m in messages]
        counts = [c + TEMPLATE_TOKENS_PER_MESSAGE for c in counts]
        fixed = await self._count(endpoint, json.dumps(request.get("tools") or ""))
        budget = self.settings.local_model_context - request["max_tokens"] - fixed
        keep_from = _last_user_index(messages)
        first = 1 if messages and messages[0]["role"] == "system" else 0
        essential = sum(counts[:first]) + sum(counts[keep_from:])
        if essential > budget:
            newest = counts[-1] - TEMPLATE_TOKENS_PER_MESSAGE
            raise ProviderFailure(
                f"This message is about {newest} tokens, more than the local model can read with "
                f"its context of {self.settings.local_model_context} tokens (LOCAL_MODEL_CONTEXT). "
                "Shorten it, or split it into several messages.",
                status_code=400,
            )
        # Keep the newest history that fits; drop a whole turn at a time from the oldest.
        start = first
        while essential + sum(counts[start:keep_from]) > budget and start < keep_from:
            start += 1
            while start < keep_from and messages[start]["role"] == "tool":
                start += 1  # a tool result without its call would confuse the model
        if start > first:
            log.info(
                "Local model: left out the %d oldest messages to fit its context", start - first
            )
            request["messages"] = messages[:first] + messages[start:]
            counts = counts[:first] + counts[start:]
        report_progress(_reading_step(request["messages"][-1], counts[-1]))
        return sum(counts) + fixed

    async def _count(self, endpoint: Endpoint, text: str) -> int:
        if not text:
            return 0
        cached = self._token_counts.get(text)
        if cached is not None:
            self._token_counts.move_to_end(text)
            return cached
        if self.process is None:
            return int(len(text) / CHARS_PER_TOKEN_ESTIMATE) + 1
        url = endpoint.base_url.removesuffix("/v1") + "/extras/tokenize"
        client = self._client_of(endpoint)
        response = await client.post(url, body={"input": text}, cast_to=httpx.Response)
        count = len(response.json()["tokens"])
        self._token_counts[text] = count
        if len(self._token_counts) > TOKEN_COUNT_CACHE:
            self._token_counts.popitem(last=False)
        return count


@asynccontextmanager
async def _queued(queue: ModelQueue) -> AsyncIterator[None]:
    def waiting(ahead: int) -> None:
        report_progress(f"Waiting for the local model ({ahead} ahead)")

    try:
        async with queue.turn(waiting, watched=someone_is_watching()):
            yield
    except QueueFull as error:
        raise ProviderFailure(str(error), status_code=503) from None


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


class _GaveWay(Exception):
    """Background work stopped for a watched request (`_stream` closes the connection)."""


async def _within(awaitable: Awaitable[T], deadline: float, give_way: asyncio.Event | None) -> T:
    """`awaitable`'s result; TimeoutError past the deadline, _GaveWay once `give_way` is set."""
    if give_way is None:
        return await asyncio.wait_for(awaitable, _left(deadline))
    task = asyncio.ensure_future(awaitable)
    stop = asyncio.ensure_future(give_way.wait())
    try:
        done, _ = await asyncio.wait(
            {task, stop}, timeout=_left(deadline), return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task in done:
        return task.result()
    raise _GaveWay if give_way.is_set() else TimeoutError


async def _set_when_someone_waits(queue: ModelQueue, give_way: asyncio.Event) -> None:
    # The watched request may be another process's: its ticket file is all there is to look at.
    while not queue.someone_waits():  # noqa: ASYNC110
        await asyncio.sleep(POLL_SECONDS)
    give_way.set()


def _reading_step(message: dict[str, Any], tokens: int) -> str:
    what = "what the tools found" if message["role"] == "tool" else reading_what.get()
    return f"Reading {what} ({tokens} tokens)"


def _last_user_index(messages: list[dict[str, Any]]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "user":
            return index
    return max(len(messages) - 1, 0)


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    text = "".join(call["arguments"]).strip()
    try:
        arguments = json.loads(text) if text else {}
    except ValueError:
        log.warning("Local model: a tool call's arguments were cut short: %r", text[:200])
        return {}
    return arguments if isinstance(arguments, dict) else {}


def _error_text(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        detail = body.get("message") or body.get("detail") or body.get("error")
        if detail:
            return str(detail)[:300]
    return str(error)[:300]


# --- the request ------------------------------------------------------------------------------


def _request(messages: list[Any], params: dict[str, Any], default_max_tokens: int) -> dict:
    """The OpenAI request for the server, from LiteLLM's messages and optional params.

    The server formats the messages with the chat template and tokenises the prompt with special
    tokens parsed, so `<|im_end|>\\n<|im_start|>system` typed by the user, or in an earlier reply
    (a web page the model quoted), would end that message and open a system one. Every text the
    template writes out (content, names, tool calls) has those tokens given look-alike brackets
    (`core.prompt_blocks.neutralise_control_tokens`); text without one is sent as written, so
    the same conversation still gives the same prompt for the model's prompt cache. Hosted APIs
    take the messages as data, so only this client needs it."""
    request: dict[str, Any] = {
        "model": "local",
        "messages": [_plain_message(m) for m in messages],
        "max_tokens": int(
            params.get("max_tokens") or params.get("max_completion_tokens") or default_max_tokens
        ),
        "temperature": float(
            DEFAULT_TEMPERATURE if params.get("temperature") is None else params["temperature"]
        ),
    }
    for name in ("top_p", "seed", "stop"):
        if params.get(name) is not None:
            request[name] = params[name]
    response_format = _response_format(params.get("response_format"))
    if response_format is not None:
        # A reply held to a JSON grammar cannot hold a tool call, so no tools are offered.
        request["response_format"] = response_format
        return request
    tools, choice = _offered_tools(params)
    if tools:
        request["tools"] = tools
        if choice is not None:
            request["tool_choice"] = choice
    return request


def _response_format(response_format: Any) -> dict[str, Any] | None:
    """OpenAI's `json_schema`/`json_object` as llama-cpp-python's server takes it
    (`{"type": "json_object", "schema": ...}`); None for free text."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ProviderFailure(
            f"Local model: response_format must be an object, not {response_format!r}",
            status_code=400,
        )
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
    else:
        raise ProviderFailure(
            f"Local model: unsupported response_format type {kind!r} "
            "(use json_schema, json_object or text)",
            status_code=400,
        )
    return {"type": "json_object", **({"schema": schema} if schema is not None else {})}


def _offered_tools(params: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """The tools to offer: none for tool_choice "none", only the named one when a function is
    forced (the server then holds the call's arguments to that function's schema)."""
    tools = list(params.get("tools") or [])
    choice = params.get("tool_choice")
    if choice == "none":
        return [], None
    if isinstance(choice, dict):
        forced = (choice.get("function") or {}).get("name")
        named = [t for t in tools if (t.get("function") or {}).get("name") == forced]
        return (named, choice) if named else (tools, None)
    return tools, None


def _plain_message(message: Any) -> dict[str, Any]:
    """One message as the server takes it: its text in one string, the chat template's control
    tokens in it neutralised (see `_request`)."""
    if not isinstance(message, dict):
        message = message.model_dump() if hasattr(message, "model_dump") else dict(message)
    role = {"developer": "system", "function": "tool"}.get(message["role"], message["role"])
    content = neutralise_control_tokens(_text_of(message.get("content")))
    plain: dict[str, Any] = {"role": role, "content": content}
    for name in ("name", "tool_call_id"):
        if message.get(name):
            plain[name] = neutralise_control_tokens(str(message[name]))
    if role == "assistant" and message.get("tool_calls"):
        plain["tool_calls"] = [_plain_tool_call(call) for call in message["tool_calls"]]
    return plain


def _plain_tool_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict):
        call = call.model_dump() if hasattr(call, "model_dump") else dict(call)
    function = dict(call.get("function") or {})
    if not isinstance(function.get("arguments"), str):
        function["arguments"] = json.dumps(function.get("arguments") or {})
    # Still JSON: a token is only ever inside a string of it, and `‹`, `›` need no escaping.
    function["arguments"] = neutralise_control_tokens(function["arguments"])
    if isinstance(function.get("name"), str):
        function["name"] = neutralise_control_tokens(function["name"])
    return {"id": call.get("id"), "type": "function", "function": function}


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part)
            for part in content
            if isinstance(part, str) or (isinstance(part, dict) and part.get("type") == "text")
        )
    return str(content)
