"""A deterministic model for tests, registered in LiteLLM as the `scripted` provider.

Each call consumes the next pre-written turn, so a whole conversation is reproducible while the real
router, graph, database and embedder run above it. A turn is a dict:

- `{"text": "Hello there"}`: the reply, streamed word by word;
- `{"chunks": ["Hel", "lo"]}`: the reply, streamed in exactly these pieces;
- `{"tool_calls": [{"name": "save_memory", "arguments": {"content": "..."}}]}`: tool calls
  (optionally with `"text"` before them);
- `{"error": "message"}`: the call fails like an unavailable hosted model; with `text` or
  `chunks` too, it fails after streaming them (a reply cut short);
- `"delay": seconds` (optional, any turn): a pause before each piece, to test streaming and stops.

The model name `scripted/down` always fails without consuming a turn: a stand-in for a provider
that is down, to exercise the Router's fallbacks. Turns come from `SCRIPTED_TURNS_FILE` (a JSON
list) when the server starts, or from `push()` in in-process tests. Every call is recorded in
`calls`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from core.inprocess_provider import (
    InProcessProvider,
    ProviderEvent,
    ProviderFailure,
    TextDelta,
    ToolCallRequest,
    UsageReport,
)

ScriptedTurn = dict[str, Any]


class ScriptedProvider(InProcessProvider):
    """Replays scripted turns in order; the one part of the stack tests script."""

    def __init__(self, turns_file: Path | None = None) -> None:
        super().__init__()
        self._turns: deque[ScriptedTurn] = deque()
        self.calls: list[dict[str, Any]] = []
        if turns_file is not None:
            self.push(*json.loads(turns_file.read_text(encoding="utf-8")))

    def push(self, *turns: ScriptedTurn) -> None:
        """Queue turns to be consumed by the next calls, in order."""
        self._turns.extend(turns)

    def reset(self) -> None:
        self._turns.clear()
        self.calls.clear()

    @property
    def remaining(self) -> int:
        return len(self._turns)

    async def generate(
        self, model: str, messages: list[dict[str, Any]], params: dict[str, Any]
    ) -> AsyncIterator[ProviderEvent]:
        self.calls.append({"model": model, "messages": messages, "tools": params.get("tools")})
        if model == "down":
            raise ProviderFailure("scripted provider 'down' is unavailable")
        if not self._turns:
            raise ProviderFailure("scripted provider has no turn left", status_code=500)
        turn = self._turns.popleft()
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
        yield UsageReport(prompt_tokens=prompt_words, completion_tokens=len(pieces))
