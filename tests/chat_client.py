"""Test helpers: a real uvicorn server in the test's event loop (so tests can script the model it
uses), and a small Server-Sent Events reader."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn

if TYPE_CHECKING:  # bench/turn_client.py imports this module and nothing else of the app
    from fastapi import FastAPI

    from core.services import Services


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def serve(services: Services) -> AsyncIterator[str]:
    """Run the real app on a free loopback port with `services`; yields its base URL."""
    from server import create_app

    async with serve_app(create_app(services=services)) as url:
        yield url


def password_services(services: Services, **settings: Any) -> Services:
    """`services` with AUTH_MODE=password (and any other settings given), for a server whose
    users sign in."""
    changed = services.settings.model_copy(update={"auth_mode": "password", **settings})
    return dataclasses.replace(services, settings=changed)


@asynccontextmanager
async def serve_app(app: FastAPI) -> AsyncIterator[str]:
    """Run `app` on a free loopback port in this event loop; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def read_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Each SSE event as its JSON data, with `type` set from the event name."""
    async for _, event in read_numbered_events(response):
        yield event


async def read_numbered_events(
    response: httpx.Response,
) -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
    """Each SSE event as (its id as a number, None if it has none; its JSON data)."""
    name, data, event_id = None, [], None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("id:"):
            event_id = int(line.removeprefix("id:").strip())
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())
        elif line == "" and data:
            event = json.loads("\n".join(data))
            event.setdefault("type", name)
            yield event_id, event
            name, data, event_id = None, [], None


async def send(
    client: httpx.AsyncClient,
    content: str,
    chat_id: Any = None,
    use_web: bool = False,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Send a message (with any other `fields` of the request's body) and collect every event of
    the reply (heartbeats left out)."""
    url = f"/api/chats/{chat_id}/messages" if chat_id else "/api/messages"
    body = {"content": content, "use_web": use_web, **fields}
    async with client.stream("POST", url, json=body) as r:
        assert r.status_code == 200, await r.aread()
        return [e async for e in read_events(r) if e["type"] != "heartbeat"]


async def messages_of(client: httpx.AsyncClient, chat_id: Any) -> list[dict[str, Any]]:
    """The chat's messages, as `GET /api/chats/{id}/messages` lists them (the branch shown)."""
    response = await client.get(f"/api/chats/{chat_id}/messages")
    assert response.status_code == 200, response.text
    return response.json()
