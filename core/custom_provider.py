"""Base class for our own LiteLLM providers: the local model's client and the tests' scripted model.

Each produces a stream of `TextDelta` and `ToolCallRequest` events from one async generator; this
class turns that stream into what LiteLLM's custom-provider interface expects (streaming chunks or
a whole `ModelResponse`), so the Router, its fallbacks and everything above it treat them like any
hosted model.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from litellm.llms.custom_llm import CustomLLM, CustomLLMError
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    Function,
    GenericStreamingChunk,
    Message,
    ModelResponse,
    Usage,
)


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class TextDelta:
    """A piece of the reply's text, as soon as the model produced it."""

    text: str


@dataclass
class ToolCallRequest:
    """A complete tool call the model asked for."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=new_tool_call_id)


@dataclass
class UsageReport:
    """Token counts for the call, reported once at the end."""

    prompt_tokens: int
    completion_tokens: int
    # "length" when the reply was cut by max_tokens (the chat flow then continues it).
    finish_reason: str = "stop"


ProviderEvent = TextDelta | ToolCallRequest | UsageReport


class ProviderFailure(CustomLLMError):
    """The provider could not answer; LiteLLM's Router treats it like a failing hosted model."""

    def __init__(self, message: str, status_code: int = 503) -> None:
        super().__init__(status_code=status_code, message=message)


class CustomProvider(CustomLLM):
    """Adapts `generate()` to LiteLLM's four entry points (sync/async × streaming/whole)."""

    def health(self) -> dict[str, Any]:
        """What `/api/health` shows of this provider."""
        return {"state": "ready"}

    def close(self) -> None:
        """Let go of what the provider holds (a model process, connections)."""

    def generate(
        self,
        model: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        whole: bool = False,
    ) -> AsyncIterator[ProviderEvent]:
        """Yield the reply as events; `params` are LiteLLM's optional params (tools…). `whole`:
        the caller takes the reply only once it is complete (not streamed)."""
        raise NotImplementedError

    # --- async -------------------------------------------------------------------------------

    async def astreaming(  # type: ignore[override]
        self, model: str, messages: list, optional_params: dict, **_: Any
    ) -> AsyncIterator[GenericStreamingChunk]:
        async for chunk in self._stream_chunks(model, messages, optional_params):
            yield chunk

    async def _stream_chunks(
        self, model: str, messages: list, optional_params: dict
    ) -> AsyncIterator[GenericStreamingChunk]:
        tool_index = 0
        usage = None
        finish = "stop"
        async for event in self.generate(model, messages, optional_params):
            if isinstance(event, TextDelta):
                if event.text:
                    yield _chunk(text=event.text)
            elif isinstance(event, ToolCallRequest):
                yield _chunk(
                    tool_use={
                        "id": event.id,
                        "type": "function",
                        "function": {"name": event.name, "arguments": json.dumps(event.arguments)},
                        "index": tool_index,
                    }
                )
                tool_index += 1
            else:
                finish = event.finish_reason
                usage = {
                    "prompt_tokens": event.prompt_tokens,
                    "completion_tokens": event.completion_tokens,
                    "total_tokens": event.prompt_tokens + event.completion_tokens,
                }
        yield _chunk(finished="tool_calls" if tool_index else finish, usage=usage)

    async def acompletion(  # type: ignore[override]
        self,
        model: str,
        messages: list,
        model_response: ModelResponse,
        optional_params: dict,
        **_: Any,
    ) -> ModelResponse:
        text: list[str] = []
        calls: list[ToolCallRequest] = []
        usage = UsageReport(0, 0)
        async for event in self.generate(model, messages, optional_params, whole=True):
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, ToolCallRequest):
                calls.append(event)
            else:
                usage = event
        return _fill_response(model_response, model, "".join(text), calls, usage)

    # --- sync (LiteLLM's sync API; the app itself is async) ---------------------------------

    def streaming(self, model: str, messages: list, optional_params: dict, **_: Any):  # type: ignore[override]
        chunks = _run_async_iterator(self._stream_chunks(model, messages, optional_params))
        return iter(chunks)

    def completion(  # type: ignore[override]
        self,
        model: str,
        messages: list,
        model_response: ModelResponse,
        optional_params: dict,
        **_: Any,
    ) -> ModelResponse:
        return asyncio.run(
            self.acompletion(
                model=model,
                messages=messages,
                model_response=model_response,
                optional_params=optional_params,
            )
        )


def _chunk(
    text: str = "",
    tool_use: dict[str, Any] | None = None,
    finished: str | None = None,
    usage: dict[str, int] | None = None,
) -> GenericStreamingChunk:
    return {
        "text": text,
        "tool_use": tool_use,  # type: ignore[typeddict-item]
        "is_finished": finished is not None,
        "finish_reason": finished or "",
        "usage": usage,  # type: ignore[typeddict-item]
        "index": 0,
    }


def _fill_response(
    response: ModelResponse,
    model: str,
    text: str,
    calls: list[ToolCallRequest],
    usage: UsageReport,
) -> ModelResponse:
    tool_calls = [
        ChatCompletionMessageToolCall(
            id=call.id,
            type="function",
            function=Function(name=call.name, arguments=json.dumps(call.arguments)),
        )
        for call in calls
    ]
    response.choices[0].message = Message(  # type: ignore[union-attr]
        content=text or None, role="assistant", tool_calls=tool_calls or None
    )
    response.choices[0].finish_reason = "tool_calls" if calls else usage.finish_reason
    response.model = model
    response.created = int(time.time())
    response.usage = Usage(  # type: ignore[attr-defined]
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
    )
    return response


def _run_async_iterator(
    iterator: AsyncIterator[GenericStreamingChunk],
) -> Iterator[GenericStreamingChunk]:
    async def collect() -> list[GenericStreamingChunk]:
        return [item async for item in iterator]

    return iter(asyncio.run(collect()))
