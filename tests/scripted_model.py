"""A deterministic model for tests, registered in LiteLLM as the `scripted` provider.

Only tests and evals register it (`tests/conftest.py`, `evals/memory_extraction.py`): a user's
MODELS_CONFIG naming `scripted/…` is refused at start-up like any unknown provider.

Each call consumes the next pre-written turn, so a whole conversation is reproducible while the real
router, graph, database and embedder run above it. A turn is a dict:

- `{"text": "Hello there"}`: the reply, streamed word by word;
- `{"chunks": ["Hel", "lo"]}`: the reply, streamed in exactly these pieces;
- `{"tool_calls": [{"name": "save_memory", "arguments": {"content": "..."}}]}`: tool calls
  (optionally with `"text"` before them);
- `{"error": "message"}`: the call fails like an unavailable hosted model; with `text` or
  `chunks` too, it fails after streaming them (a reply cut short);
- `"delay": seconds` (optional, any turn): a pause before each piece, to test streaming and stops;
- `"gate": asyncio.Event` (optional, any turn): the call waits for it before its first piece, to
  hold a background call (an extraction) while the test looks at what happens meanwhile;
- `"finish_reason": "length"` (optional): the reply reports being cut by the length limit.

`scripted/memory` (memory extraction) has a queue of its own, filled with `push_for("memory", …)`
(empty, it answers that there is nothing to remember), and records its calls in `own_calls`;
`scripted/title` (chat titles) too (empty, it answers nothing: the first title stays). The
model name `scripted/down` always fails without consuming a turn: a stand-in for a provider that
is down, to exercise the Router's fallbacks. Turns come from `push()`. When no turn is queued, a
`responder` (if set) writes one from the call itself: `responder(model, messages)` returns a turn.
Concurrent conversations (`bench/turn.py`) use it, as a shared queue would hand one chat's turn to
another. Every call is recorded in `calls` (model, messages, tools, max_tokens and
response_format; up to `MAX_RECORDED_CALLS`, the latest kept).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from core.custom_provider import (
    CustomProvider,
    ProviderEvent,
    ProviderFailure,
    TextDelta,
    ToolCallRequest,
    UsageReport,
)
from core.model_progress import someone_is_watching

ScriptedTurn = dict[str, Any]
Responder = Callable[[str, list[dict[str, Any]]], ScriptedTurn]

# Memory extraction runs after every reply, at a moment tests do not control: it has a queue of its
# own (`push_for("memory", ...)`), and with nothing queued it finds no fact to remember.
# Chat titles too (`push_for("title", ...)`): with nothing queued the answer is empty, and the chat
# keeps the start of its first message as its title.
OWN_QUEUE_DEFAULTS: dict[str, ScriptedTurn] = {
    "memory": {"text": '{"operations": []}'},
    "title": {"text": ""},
}

MAX_RECORDED_CALLS = 1000  # a long benchmark must not keep every prompt it sent


class ScriptedProvider(CustomProvider):
    """Replays scripted turns in order; the one part of the stack tests script."""

    def __init__(self) -> None:
        super().__init__()
        self._turns: deque[ScriptedTurn] = deque()
        # Models with a queue of their own (`push_for`): they never take a turn from the shared
        # queue, and answer `OWN_QUEUE_DEFAULTS[model]` when theirs is empty.
        self._own: dict[str, deque[Any]] = {m: deque() for m in OWN_QUEUE_DEFAULTS}
        self.calls: list[dict[str, Any]] = []
        self.own_calls: dict[str, list[dict[str, Any]]] = {m: [] for m in OWN_QUEUE_DEFAULTS}
        self.responder: Responder | None = None

    def push(self, *turns: ScriptedTurn) -> None:
        """Queue turns to be consumed by the next calls, in order."""
        self._turns.extend(turns)

    def push_for(self, model: str, *turns: ScriptedTurn | Responder) -> None:
        """Queue turns for one model with a queue of its own (`memory`); a turn may be a
        responder, called with the request when its turn comes."""
        self._own[model].extend(turns)

    def reset(self) -> None:
        self._turns.clear()
        for queue in self._own.values():
            queue.clear()
        for calls in self.own_calls.values():
            calls.clear()
        self.calls.clear()
        self.responder = None

    @property
    def remaining(self) -> int:
        return len(self._turns)

    async def generate(
        self,
        model: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        whole: bool = False,
    ) -> AsyncIterator[ProviderEvent]:
        # A model with a queue of its own records its calls apart too (`own_calls`), so a test
        # counting the chat's calls is not thrown by an extraction running meanwhile.
        calls = self.own_calls[model] if model in self._own else self.calls
        calls.append(
            {
                "model": model,
                "messages": messages,
                "tools": params.get("tools"),
                "max_tokens": params.get("max_tokens"),
                # As LiteLLM handed it on, so tests can assert a JSON reply (of what shape)
                # was asked for.
                "response_format": params.get("response_format"),
                # Whether someone watches it (a turn's call) and wants it whole: background work
                # on the local model is the unwatched whole kind (core/local_model/provider.py).
                "watched": someone_is_watching(),
                "whole": whole,
            }
        )
        if len(calls) > MAX_RECORDED_CALLS:
            del calls[: len(calls) - MAX_RECORDED_CALLS]
        if model == "down":
            raise ProviderFailure("scripted provider 'down' is unavailable")
        if model in self._own:
            own = self._own[model]
            turn = own.popleft() if own else OWN_QUEUE_DEFAULTS[model]
            if callable(turn):  # written from the call itself (e.g. naming a memory it was shown)
                turn = turn(model, messages)
        elif self._turns:
            turn = self._turns.popleft()
        elif self.responder is not None:
            turn = self.responder(model, messages)
        else:
            raise ProviderFailure("scripted provider has no turn left", status_code=500)
        if "gate" in turn:  # held until the test opens it (an `asyncio.Event`)
            await turn["gate"].wait()
        pieces = turn.get("chunks") or re.findall(r"\S+\s*|\s+", turn.get("text", ""))
        if "error" in turn and not pieces:
            raise ProviderFailure(str(turn["error"]))
        delay = float(turn.get("delay", 0))
        for piece in pieces:
            if delay:
                await asyncio.sleep(delay)
            yield TextDelta(piece)
        if "error" in turn:
            raise ProviderFailure(str(turn["error"]))
        for call in turn.get("tool_calls", []):
            yield ToolCallRequest(name=call["name"], arguments=call.get("arguments", {}))
        prompt_words = sum(len(str(m.get("content") or "").split()) for m in messages)
        yield UsageReport(
            prompt_tokens=prompt_words,
            completion_tokens=len(pieces),
            finish_reason=turn.get("finish_reason", "stop"),
        )
