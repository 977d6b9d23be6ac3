"""Progress lines ("steps") of a turn: shown live in the browser, logged, saved with the reply."""

from __future__ import annotations

import logging
import time
from typing import Any

from langgraph.config import get_stream_writer

from chat.state import TurnContext

log = logging.getLogger("resolveai.chat")


def short_id(value: object) -> str:
    return str(value)[:8]


def step_event(turn: TurnContext, text: str, **extra: Any) -> dict[str, Any]:
    """A plain-language progress line, sent to the browser, logged, and kept with the reply."""
    elapsed_ms = round((time.monotonic() - turn.started) * 1000)
    step = {"text": text, "elapsed_ms": elapsed_ms, **extra}
    turn.steps.append(step)
    send_event({"type": "step", **step})
    log.info("Chat %s: %s (%d ms)", short_id(turn.chat_id), text, elapsed_ms)
    return step


def send_event(event: dict[str, Any]) -> None:
    """Send an event to the browser; a no-op outside a graph run (a tool invoked on its own)."""
    try:
        writer = get_stream_writer()
    except (KeyError, RuntimeError):
        return
    writer(event)
