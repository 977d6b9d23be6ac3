"""What a slow model is doing right now, told to whoever waits for it.

A provider below LiteLLM (the local model's client) cannot reach the chat's event stream, so the
chat flow sets `progress_listener` around a model call and the provider calls `report_progress`
("Waiting for the local model (1 ahead)", "Reading your message (812 tokens)", "Writing…").
A context variable follows the call into the provider's generator, which runs in the caller's task.
A call with a listener is one a person is watching; the local model serves it before background
work (`someone_is_watching`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

progress_listener: ContextVar[Callable[[str], None] | None] = ContextVar(
    "progress_listener", default=None
)
# What the model reads in the call under way, for "Reading … (812 tokens)".
reading_what: ContextVar[str] = ContextVar("reading_what", default="your message")


def report_progress(text: str) -> None:
    listener = progress_listener.get()
    if listener is not None:
        listener(text)


def someone_is_watching() -> bool:
    return progress_listener.get() is not None
