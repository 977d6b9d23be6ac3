"""A reply's text in batches: chunks a fast model hands over together go out as one token event,
a slow model's one by one, and none waits longer than BATCH_SECONDS (core/token_batcher.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from core.token_batcher import BATCH_SECONDS, TokenBatcher
from tests.chat_client import messages_of, send


def batcher() -> tuple[TokenBatcher, list[str]]:
    written: list[str] = []

    return TokenBatcher(written.append), written


async def test_chunks_that_come_together_go_out_together() -> None:
    to, written = batcher()
    for piece in ("Hello", " there", ",", " friend", "!"):
        to.add(piece)
    assert written == ["Hello"]  # the first at once: nothing went out before it
    to.flush()
    assert written == ["Hello", " there, friend!"]
    to.flush()
    assert written == ["Hello", " there, friend!"]  # nothing left, nothing sent


async def test_text_held_back_goes_out_within_the_batch_time_by_itself() -> None:
    to, written = batcher()
    to.add("One")
    to.add(" two")  # within BATCH_SECONDS of "One": held back
    assert written == ["One"]
    await asyncio.sleep(BATCH_SECONDS * 3)  # and no more text comes
    assert written == ["One", " two"]


async def test_a_slow_models_chunks_go_out_one_by_one() -> None:
    to, written = batcher()
    for piece in ("Slow", " and", " steady"):
        to.add(piece)
        await asyncio.sleep(BATCH_SECONDS * 1.5)
    to.flush()
    assert written == ["Slow", " and", " steady"]


async def test_a_reply_that_comes_at_once_streams_in_few_events_and_is_saved_whole(
    client: Any, model: Any
) -> None:
    chunks = [f"word{n} " for n in range(40)]
    model.push({"chunks": chunks})
    events = await send(client, "Tell me forty words.")
    tokens = [e["text"] for e in events if e["type"] == "token"]
    assert "".join(tokens) == "".join(chunks)
    assert len(tokens) < len(chunks) / 4  # not one event per chunk
    saved = await messages_of(client, events[0]["chat_id"])
    assert saved[-1]["content"] == "".join(chunks)  # what streamed is what is saved
