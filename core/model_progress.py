"""What a slow model is doing right now, told to whoever waits for it.

A provider below LiteLLM (the local model's client) cannot reach the chat's event stream, so the
chat flow sets `progress_listener` around a model call and the provider calls `report_progress`
("Waiting for the local model (1 ahead)", "Reading your message (812 tokens)", "Writing…").
A context variable follows the call into the provider's generator, which runs in the caller's task.
A call with a listener is one a person is watching; the local model serves it before background
work (`someone_is_watching`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
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


@contextmanager
def watched_by(listener: Callable[[str], None]) -> Iterator[None]:
    """Model calls in this block are watched, and their progress goes to `listener`."""
    token = progress_listener.set(listener)
    try:
        yield
    finally:
        progress_listener.reset(token)


def watched_quietly() -> AbstractContextManager[None]:
    """Model calls in this block are watched (served before background work), their progress
    not shown: the caller's own steps say what they do."""
    return watched_by(_not_shown)


def _not_shown(text: str) -> None:
    pass
