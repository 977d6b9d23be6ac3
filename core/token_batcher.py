"""A reply's text shown in batches: what a fast model streams within BATCH_SECONDS goes out as one
token event instead of one per chunk.

Each event costs the server on its way to the browser (the graph's stream, the turn's event log,
an SSE frame), about as much per event whether it holds a word or a sentence, and a hosted model
or a busy network hands over many chunks at once. A slow model's tokens (the local model's come
~70 ms apart) still go out one by one, as they arrive: text goes out at once when nothing went out
in the last BATCH_SECONDS, else within BATCH_SECONDS, by a timer, so none waits longer than that
for a chunk that may not come.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# Shorter than a frame the eye tells apart; long enough to gather a burst of chunks.
BATCH_SECONDS = 0.03


class TokenBatcher:
    """Collects text for `write` (what sends a token event: through LangGraph's stream writer,
    which may be called from a loop callback); `flush()` sends what is left, at the end of the
    text and before any other event, which must not overtake it."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._pending: list[str] = []
        self._sent_at = float("-inf")
        self._timer: asyncio.TimerHandle | None = None

    def add(self, text: str) -> None:
        if not text:
            return
        self._pending.append(text)
        waited = time.monotonic() - self._sent_at
        if waited >= BATCH_SECONDS:
            self.flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(BATCH_SECONDS - waited, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending:
            text, self._pending = "".join(self._pending), []
            self._sent_at = time.monotonic()
            self._write(text)
