"""The load generator of `bench/turn.py`, run by it in a subprocess so that the clients' own work
(HTTP, SSE parsing) never runs on the server's event loop it measures.

It reads one JSON command per line on stdin, `{"url": ..., "clients": N, "turns": T, "think": S,
"message": M}` (M optional: the bench's own question by default), runs N concurrent clients that
each send T messages (M, numbered), one after another with S seconds between the
end of a reply and the next message (0: at once), in one chat of their own (the
first message starts the chat, over `POST /api/messages`; the next go to
`POST /api/chats/{id}/messages`), and writes one JSON line back: the wall time and, per message,
the seconds from sending the request to the first `token` event, to the `done` event and to the
end of the stream, plus any error. Not meant to be run by hand; `python -m bench.turn` starts it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from typing import Any

import httpx

from tests.chat_client import read_events

MESSAGE = "What is a good name for a small grey cat that likes to sleep on the windowsill?"


_numbers = itertools.count()


def message_text(message: str = MESSAGE) -> str:
    """The bench's message, made distinct (as a person's messages are) so that no turn finds its
    text's vector already computed by an earlier one. The number goes first: after a question it
    would be a sentence of its own, one that may tell something (core/grounding.py)."""
    return f"({next(_numbers)}) {message}"


async def one_turn(
    http: httpx.AsyncClient, chat_id: str | None, content: str = MESSAGE
) -> dict[str, Any]:
    """Send one message; timings in seconds from just before the request was sent."""
    path = f"/api/chats/{chat_id}/messages" if chat_id else "/api/messages"
    result: dict[str, Any] = {"first": None, "done": None, "end": None, "error": None,
                              "chat_id": chat_id, "events": 0}  # fmt: skip
    started = time.perf_counter()
    async with http.stream("POST", path, json={"content": content}) as response:
        if response.status_code != 200:
            body = (await response.aread()).decode(errors="replace")[:200]
            result["error"] = f"HTTP {response.status_code}: {body}"
        else:
            async for event in read_events(response):
                kind = event["type"]
                result["events"] += 1
                if kind == "chat":
                    result["chat_id"] = event["chat_id"]
                elif kind == "token" and result["first"] is None:
                    result["first"] = time.perf_counter() - started
                elif kind == "done":
                    result["done"] = time.perf_counter() - started
                elif kind == "error":
                    result["error"] = event.get("message", "error event")
    result["end"] = time.perf_counter() - started
    return result


async def one_client(
    http: httpx.AsyncClient, turns: int, think: float, message: str = MESSAGE
) -> list[dict[str, Any]]:
    results = []
    chat_id = None
    for number in range(turns):
        if think and number:
            await asyncio.sleep(think)
        try:
            result = await one_turn(http, chat_id, message_text(message))
        except httpx.HTTPError as error:
            result = {"first": None, "done": None, "end": None, "events": 0,
                      "error": f"{type(error).__name__}: {error}", "chat_id": chat_id}  # fmt: skip
        chat_id = result["chat_id"]
        results.append(result)
    return results


async def run(
    url: str, clients: int, turns: int, think: float = 0.0, message: str = MESSAGE
) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        started = time.perf_counter()
        per_client = await asyncio.gather(
            *(one_client(http, turns, think, message) for _ in range(clients))
        )
        wall = time.perf_counter() - started
    return {"wall": wall, "turns": [turn for client in per_client for turn in client]}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        think, message = command.get("think", 0.0), command.get("message", MESSAGE)
        result = asyncio.run(
            run(command["url"], command["clients"], command["turns"], think, message)
        )
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
