"""What reaches the user of a model's text: never tool-call markup, and never a reply cut off by
the length limit. Real server, database and embedder; the scripted model writes the raw text a
small local model does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from chat.nodes import CONTINUE_REQUEST, MAX_CONTINUATIONS
from core.repetition import REPEATING_NOTE
from tests.chat_client import read_events, send

RAW_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def shown(events: list[dict[str, Any]]) -> str:
    return "".join(e["text"] for e in events if e["type"] == "token")


async def saved_reply(client: httpx.AsyncClient, chat_id: str) -> str:
    messages = (await client.get(f"/api/chats/{chat_id}/messages")).json()
    return messages[-1]["content"]


@contextlib.contextmanager
def pieces_produced(model: Any) -> Iterator[list[float]]:
    """The loop time of each piece the scripted model produces while the block runs."""
    loop = asyncio.get_running_loop()
    produced: list[float] = []
    generate = model.generate

    async def recording(name: str, messages: list, params: dict) -> AsyncIterator[Any]:
        async for event in generate(name, messages, params):
            produced.append(loop.time())
            yield event

    model.generate = recording
    try:
        yield produced
    finally:
        model.generate = generate


async def test_tool_markup_never_reaches_the_screen_or_the_saved_reply(client, model) -> None:
    # A call to a tool that was never offered, streamed in pieces that split the tags.
    model.push(
        {
            "chunks": [
                "It is sunny. ",
                "<tool",
                '_call>\n{"name": ',
                '"get_weather"}',
                "</tool_call>",
            ]
        },
        {"chunks": ["<tools>", RAW_CALL, "</tools>", " Anything else?"]},
        {"text": "Here: <tools></tools>done."},
        {"chunks": ["<memories>\n", "Waves on the shore.", "\n</memories>"]},  # an echoed tag
    )
    for expected in ("It is sunny.", "Anything else?", "Here: done.", "Waves on the shore."):
        events = await send(client, "How is the weather in Paris?")
        assert events[-1]["type"] == "done"
        assert shown(events).strip() == expected
        assert (await saved_reply(client, events[0]["chat_id"])).strip() == expected


async def test_a_tool_call_written_as_text_runs_as_a_call(client, model) -> None:
    """With tools offered, a call the model wrote as text is run like a structured one."""
    written = '<tool_call>{"name": "retrieve_memory", "arguments": {"query": "city"}}</tool_call>'
    model.push({"text": written}, {"text": "You did not tell me yet."})
    events = await send(client, "Where do I live?")
    assert [e["name"] for e in events if e["type"] == "tool_start"] == ["retrieve_memory"]
    assert shown(events) == "You did not tell me yet."
    assert "<tool" not in await saved_reply(client, events[0]["chat_id"])


async def test_a_reply_cut_by_the_length_limit_is_continued_and_stitched(client, model) -> None:
    model.push(
        {"text": "The three steps are: first, ", "finish_reason": "length"},
        {"text": "second, and ", "finish_reason": "length"},
        {"text": "third.", "finish_reason": "length"},
    )
    events = await send(client, "List the steps.")
    assert shown(events) == "The three steps are: first, second, and third."
    assert await saved_reply(client, events[0]["chat_id"]) == shown(events)
    chat_calls = [c for c in model.calls if c["model"] == "chat"]
    assert len(chat_calls) == 1 + MAX_CONTINUATIONS  # and no more, even cut again
    last = chat_calls[-1]["messages"]
    assert last[-1] == {"role": "user", "content": CONTINUE_REQUEST}
    assert last[-2]["content"] == "The three steps are: first, second, and "


async def test_a_reply_going_round_in_circles_ends_at_its_first_loop(client, model) -> None:
    """Seen in a keyless trial: asked how a bicycle gear works, the local model wrote one
    paragraph 40 times over (15,000 characters in 4 minutes), continued twice after the length
    limit. The second time a paragraph is written, the call ends: no more is generated or
    continued, what streamed is the reply, and the user is told why it ends there."""
    intro = "Bicycle gears change the ratio between the pedals and the back wheel.\n\n"
    circle = (
        "As you pedal harder still, the chain connected to the pedals moves even faster. This "
        "causes the gear on the front wheel to rotate even faster than the gear on the rear "
        "wheel. The ratio between the gears determines how much force is transmitted.\n\n"
    )
    with pieces_produced(model) as produced:
        model.push({"chunks": [intro] + [circle] * 40, "finish_reason": "length"})
        events = await send(client, "Explain how a bicycle gear works.")
    assert events[-1]["type"] == "done"
    assert shown(events) == intro + circle * 2
    assert await saved_reply(client, events[0]["chat_id"]) == shown(events)
    assert REPEATING_NOTE in events[-1]["notes"]
    assert len([c for c in model.calls if c["model"] == "chat"]) == 1  # not continued
    assert len(produced) < 10  # the stream was closed, not read to its end


async def test_stop_stops_the_model_too(client, model) -> None:
    """LangGraph leaves a node running when the run's consumer is cancelled: a stopped turn
    cancels it, so the model stops writing a reply nobody wants (the local model's CPU goes
    idle). Leaving the stream stops nothing (chat/turn_jobs.py); Stop does."""
    loop = asyncio.get_running_loop()
    with pieces_produced(model) as produced:
        model.push({"text": " ".join(f"w{i}" for i in range(100)), "delay": 0.05})
        async with client.stream("POST", "/api/messages", json={"content": "Write"}) as response:
            tokens, chat_id = 0, None
            async for event in read_events(response):
                chat_id = event.get("chat_id", chat_id)
                tokens += event["type"] == "token"
                if tokens == 3 and event["type"] == "token":
                    assert (await client.post(f"/api/chats/{chat_id}/stop")).status_code == 200
                    left = loop.time()
        assert event["type"] == "interrupted"
        await asyncio.sleep(1.5)
    # Without the turn stopping its nodes, ~30 more pieces came in this time.
    assert len([t for t in produced if t > left + 0.3]) == 0, len(produced)
