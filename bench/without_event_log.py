"""The event log patched out of a running server, for `bench.turn --without-event-log`: what the
durable-turn machinery (#13) costs a message, measured against the same code in the same run.

Patched out: the turn row (saved with the question, or on its own), the shared writer's event
inserts, the finish and the Stop look. The reply still streams from the job's memory and is saved
as always; only what makes it outlive its connection is gone. Messages sent while the patch holds
leave no turn rows, so nothing is left unfinished for a later message of the same chat to recover.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from core import chat_store, turn_store


async def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


async def _none_stopped(*args: Any, **kwargs: Any) -> set[Any]:
    return set()


@contextlib.contextmanager
def event_log_patched_out() -> Iterator[None]:
    """Within the block, the app writes and reads no turn row and no event. Callers reach these
    functions through their modules (`turn_store.finish_turn(…)`), so the patch applies at once."""
    add_message = chat_store.add_message

    async def add_message_without_turn(*args: Any, turn: Any = None, **kwargs: Any) -> Any:
        return await add_message(*args, **kwargs)

    patches = {
        (turn_store, "create_turn"): _nothing,
        (turn_store, "append_events"): _nothing,
        (turn_store, "finish_turn"): _nothing,
        (turn_store, "stopped_turns"): _none_stopped,
        (chat_store, "add_message"): add_message_without_turn,
    }
    saved = {key: getattr(*key) for key in patches}
    for (module, name), replacement in patches.items():
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for (module, name), original in saved.items():
            setattr(module, name, original)
