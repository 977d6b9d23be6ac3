"""Durable turns: a reply outlives its connection (chat/turn_jobs.py, chat/turn_recovery.py).

Through the real server (real Postgres, scripted model): leaving the stream stops nothing; a
reader resumes from any event, on this server or another one on the same database; Stop works from
any server; a reply whose server died is recovered from its event log; one reply per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil
import psycopg
import psycopg_pool
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from chat import nodes, replies, turn_jobs
from chat.turn_recovery import recover_abandoned_turns
from core import chat_store, turn_store
from core.config import Settings
from core.db import Database, _configure_connection
from core.llm_router import build_router, plan_models
from core.services import Services
from core.statements import execute
from rag.embedder import Embedder
from server import DATABASE_DOWN, create_app
from tests.chat_client import (
    free_port,
    messages_of,
    read_events,
    read_numbered_events,
    send,
    serve_app,
)
from tests.conftest import SCRIPTED_MODELS


def words(count: int) -> str:
    return " ".join(f"word{i}" for i in range(count))


async def start_reading(
    client: httpx.AsyncClient, content: str, tokens: int
) -> tuple[str, int, str]:
    """Send a message, read until `tokens` tokens arrived, leave: (chat id, last event id, text)."""
    chat_id, last, text = "", 0, []
    async with client.stream("POST", "/api/messages", json={"content": content}) as response:
        assert response.status_code == 200
        async for seq, event in read_numbered_events(response):
            assert seq is not None and seq == last + 1, (seq, last)  # numbered 1, 2, 3, ...
            last = seq
            if event["type"] == "chat":
                chat_id = event["chat_id"]
            if event["type"] == "token":
                text.append(event["text"])
                if len(text) == tokens:
                    break  # leaving the block closes the connection
    return chat_id, last, "".join(text)


async def follow(
    client: httpx.AsyncClient, chat_id: str, after: int | None = None, **headers: str
) -> list[tuple[int | None, dict[str, Any]]]:
    query = "" if after is None else f"?after={after}"
    async with client.stream("GET", f"/api/chats/{chat_id}/stream{query}", headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        return [(s, e) async for s, e in read_numbered_events(r) if e["type"] != "heartbeat"]


def text_of(events: list[tuple[int | None, dict[str, Any]]]) -> str:
    return "".join(e["text"] for _, e in events if e["type"] == "token")


async def test_leaving_the_stream_stops_nothing_and_a_reader_resumes_where_it_left(
    client, model
) -> None:
    model.push({"text": words(40), "delay": 0.02})
    chat_id, last, head = await start_reading(client, "Write a lot", tokens=3)
    rest = await follow(client, chat_id, after=last)
    assert rest[0][0] == last + 1  # nothing skipped, nothing repeated
    assert rest[-1][1]["type"] == "done"
    saved = await messages_of(client, chat_id)
    assert [m["role"] for m in saved] == ["user", "assistant"]
    assert saved[1]["status"] == "complete"
    assert saved[1]["content"] == head + text_of(rest) == words(40)  # what streamed is saved
    # The whole reply again, from the start, through the Last-Event-ID header, after it ended.
    again = await follow(client, chat_id, **{"Last-Event-ID": "0"})
    assert text_of(again) == words(40) and again[-1][1]["type"] == "done"


async def test_stop_from_the_api_ends_the_reply_within_a_second_and_saves_what_streamed(
    client, model
) -> None:
    model.push({"text": words(300), "delay": 0.05})
    async with client.stream("POST", "/api/messages", json={"content": "Write a lot"}) as r:
        streamed, chat_id, stopped_at = [], "", None
        async for event in read_events(r):
            if event["type"] == "chat":
                chat_id = event["chat_id"]
            elif event["type"] == "token":
                streamed.append(event["text"])
                if len(streamed) == 3 and stopped_at is None:
                    stopped_at = time.monotonic()
                    assert (await client.post(f"/api/chats/{chat_id}/stop")).status_code == 200
        assert event["type"] == "interrupted"
        assert time.monotonic() - stopped_at < 1.0
    saved = await messages_of(client, chat_id)
    assert saved[1]["status"] == "interrupted"
    assert saved[1]["content"] == "".join(streamed)
    # Nothing is being written now: stopping again is refused, a new message is taken.
    response = await client.post(f"/api/chats/{chat_id}/stop")
    assert response.status_code == 409 and "No reply" in response.json()["error"]
    model.push({"text": "ok"})
    assert [e["type"] for e in await send(client, "still there?", chat_id)][-1] == "done"


async def test_a_stop_landing_after_the_reply_was_saved_ends_the_stream_with_done(
    client, model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Stop falls between the save's commit and the `done` event: the reply is complete, so
    the stream says so (`done` with its id), as the saved message does; nothing says stopped."""
    saved_it, stop_sent = asyncio.Event(), asyncio.Event()

    async def save_then_wait_for_the_stop(context: Any, text: str, **fields: Any) -> Any:
        message = await replies.save_reply(context, text, **fields)
        saved_it.set()
        await stop_sent.wait()  # the node is cancelled here, before it can emit `done`
        return message

    monkeypatch.setattr(nodes, "save_reply", save_then_wait_for_the_stop)
    model.push({"text": "All of it."})
    async with client.stream("POST", "/api/messages", json={"content": "Short one"}) as r:
        events = []
        async for event in read_events(r):
            events.append(event)
            if event["type"] == "chat":
                chat_id = event["chat_id"]
            if event["type"] == "token" and not stop_sent.is_set():
                await saved_it.wait()
                assert (await client.post(f"/api/chats/{chat_id}/stop")).status_code == 200
                stop_sent.set()
    saved = await messages_of(client, chat_id)
    assert [(m["role"], m["status"]) for m in saved] == [
        ("user", "complete"), ("assistant", "complete"),
    ]  # fmt: skip
    assert events[-1] == {**events[-1], "type": "done", "message_id": saved[1]["message_id"]}
    assert "interrupted" not in [e["type"] for e in events]
    assert saved[1]["content"] == text_of([(None, e) for e in events]) == "All of it."
    # Replayed from the event log, it ends the same way.
    assert (await follow(client, chat_id))[-1][1]["type"] == "done"


@asynccontextmanager
async def server_with(services: Services, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of another server on the same database (its own app, so its own jobs: as another
    process would be), with these settings changed."""
    changed = dataclasses.replace(services, settings=services.settings.model_copy(update=settings))
    async with (
        serve_app(create_app(services=changed)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        yield http


@pytest.fixture
async def second_server(chat_services: Services) -> AsyncIterator[httpx.AsyncClient]:
    async with server_with(chat_services) as other:
        yield other


async def test_another_server_follows_and_stops_a_reply(client, second_server, model) -> None:
    model.push({"text": words(300), "delay": 0.04})
    chat_id, last, head = await start_reading(client, "Write a lot", tokens=2)
    async with second_server.stream("GET", f"/api/chats/{chat_id}/stream?after={last}") as r:
        followed = []
        async for seq, event in read_numbered_events(r):
            followed.append((seq, event))
            if len(followed) == 5:
                stopped_at = time.monotonic()
                assert (await second_server.post(f"/api/chats/{chat_id}/stop")).status_code == 200
        assert event["type"] == "interrupted"
        # The job sees the flag within WATCH_SECONDS; its last events reach the reader within
        # FOLLOW_SECONDS + FLUSH_SECONDS.
        assert time.monotonic() - stopped_at < 1.5
    assert followed[0][0] == last + 1
    saved = await messages_of(client, chat_id)
    assert saved[1]["status"] == "interrupted"
    assert saved[1]["content"] == head + text_of(followed)


async def test_replies_written_at_once_share_their_event_writes_and_stop_checks(
    client, second_server, model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process stores the new events of all the replies it is writing in one statement per
    flush, and looks for Stop requests for all of them in one, rather than each reply on its own:
    at 10 clients that was ~2 of a message's round trips. What they store is what streamed."""
    model.responder = lambda _model, _messages: {"text": words(30), "delay": 0.03}
    append, stopped = turn_store.append_events, turn_store.stopped_turns
    writes: list[set[uuid.UUID]] = []
    checks: list[set[uuid.UUID]] = []

    async def counted_append(db: Any, events: list[tuple[uuid.UUID, int, dict]]) -> None:
        writes.append({run_id for run_id, _, _ in events})
        await append(db, events)

    async def counted_stopped(db: Any, run_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        checks.append(set(run_ids))
        return await stopped(db, run_ids)

    monkeypatch.setattr(turn_store, "append_events", counted_append)
    monkeypatch.setattr(turn_store, "stopped_turns", counted_stopped)
    started = time.monotonic()
    replies_sent = await asyncio.gather(*(send(client, f"Write {i}") for i in range(4)))
    elapsed = time.monotonic() - started
    await turn_jobs.settled()

    assert [events[-1]["type"] for events in replies_sent] == ["done"] * 4
    assert max(len(runs) for runs in writes) == 4  # one write held events of all four replies
    assert max(len(runs) for runs in checks) == 4  # one look for a Stop covered all four
    assert len(writes) <= elapsed / turn_jobs.FLUSH_SECONDS + 2, (len(writes), elapsed)
    assert len(checks) <= elapsed / turn_jobs.WATCH_SECONDS + 2, (len(checks), elapsed)
    for events in replies_sent:  # another server replays each reply from what was stored
        chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")
        replayed = await follow(second_server, chat_id, after=0)
        assert [e for _, e in replayed] == [e for e in events if e["type"] != "heartbeat"]
        assert text_of(replayed) == words(30)


async def test_a_question_and_its_turn_are_saved_by_one_statement(chat_services) -> None:
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "one statement")
    run_id = uuid.uuid4()
    assert await chat_store.claim_chat_run(pool, chat["chat_id"], run_id, 60, user_id=None)
    turn = turn_store.NewTurn(run_id, use_web=True, mode="research")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "Why?", turn=turn)
    latest = await turn_store.latest_turn(pool, chat["chat_id"])
    assert latest is not None and latest["run_id"] == run_id
    assert latest["user_message_id"] == question["message_id"]
    assert (latest["use_web"], latest["mode"]) == (True, "research")
    assert latest["finished_at"] is None

    # Both or neither: a turn the database refuses (its id taken) leaves no question behind.
    with pytest.raises(psycopg.errors.UniqueViolation):
        await chat_store.add_message(pool, chat["chat_id"], "user", "Again?", turn=turn)
    assert [m["content"] for m in await chat_store.list_messages(pool, chat["chat_id"])] == ["Why?"]
    with pytest.raises(chat_store.ChatNotFound):
        await chat_store.add_message(
            pool, uuid.uuid4(), "user", "Anyone?", turn=turn_store.NewTurn(uuid.uuid4())
        )
    # Ended, as its job would end it: no unfinished turn is left for recovery to find.
    await turn_store.finish_turn(pool, run_id)
    await chat_store.release_chat_run(pool, chat["chat_id"], run_id)


async def test_a_reply_whose_server_died_is_recovered_from_its_events(
    client, chat_services: Services, model
) -> None:
    """As if a server was killed mid-reply: its turn unfinished, its claim on the chat expired."""
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "crashed")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "Tell me a story")
    run_id = uuid.uuid4()
    assert await chat_store.claim_chat_run(pool, chat["chat_id"], run_id, 60, user_id=None)
    await turn_store.create_turn(pool, run_id, chat["chat_id"], question["message_id"])
    sources = [{"n": 1, "title": "A page", "url": "https://example.org/"}]
    written = [
        {"type": "step", "text": "Writing…", "elapsed_ms": 5},
        {"type": "token", "text": "Once upon"},
        {"type": "sources", "sources": sources},
        {"type": "token", "text": " a time"},
    ]
    await turn_store.append_events(
        pool, [(run_id, seq, event) for seq, event in enumerate(written, start=1)]
    )
    # While its claim holds, it is someone's live reply: nothing to recover, Stop is accepted.
    assert await recover_abandoned_turns(chat_services) == 0
    assert await turn_store.request_stop(pool, chat["chat_id"]) == run_id
    await execute(
        pool,
        "UPDATE chats SET run_expires_at = now() - interval '1 second' WHERE chat_id = %s",
        (chat["chat_id"],),
    )
    # The next message in the chat finds the old reply recovered, then gets its own.
    model.push({"text": "The end."})
    events = await send(client, "Go on", chat["chat_id"])
    assert events[-1]["type"] == "done"
    saved = await messages_of(client, str(chat["chat_id"]))
    assert [(m["role"], m["status"]) for m in saved] == [
        ("user", "complete"), ("assistant", "interrupted"), ("user", "complete"),
        ("assistant", "complete"),
    ]  # fmt: skip
    assert saved[1]["content"] == "Once upon a time"
    assert saved[1]["sources"] == sources
    assert saved[1]["steps"] == [{"text": "Writing…", "elapsed_ms": 5}]
    assert "server stopped" in saved[1]["error"]
    assert await recover_abandoned_turns(chat_services) == 0  # recovered once only


async def test_start_up_recovers_what_a_dead_server_left(chat_services: Services) -> None:
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "crashed at start")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "Hello?")
    run_id = uuid.uuid4()
    assert await chat_store.claim_chat_run(
        pool, chat["chat_id"], run_id, -1, user_id=None
    )  # expired
    await turn_store.create_turn(pool, run_id, chat["chat_id"], question["message_id"])
    await turn_store.append_events(pool, [(run_id, 1, {"type": "token", "text": "Hi"})])
    async with serve_app(create_app(services=chat_services)):  # its start-up recovers it
        reply = await chat_store.reply_of_run(pool, run_id)
    assert reply is not None and (reply["status"], reply["content"]) == ("interrupted", "Hi")


async def test_a_research_report_whose_server_died_keeps_its_parts_written(
    chat_services: Services,
) -> None:
    """A report streams at its end; until then its drafts (the report so far, rag/research.py)
    are in the event log, and the last one is what is recovered."""
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "crashed research")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "Two things?")
    run_id = uuid.uuid4()
    assert await chat_store.claim_chat_run(pool, chat["chat_id"], run_id, -1, user_id=None)
    await turn_store.create_turn(pool, run_id, chat["chat_id"], question["message_id"])
    written = [
        {"type": "step", "text": "Research plan: 2 sub-questions", "elapsed_ms": 5},
        {"type": "draft", "text": "# Two things?\n\n## Not finished"},
        {"type": "draft", "text": "# Two things?\n\n## One\n\nThe first answer."},
    ]
    await turn_store.append_events(
        pool, [(run_id, seq, event) for seq, event in enumerate(written, start=1)]
    )
    assert await recover_abandoned_turns(chat_services) == 1
    reply = await chat_store.reply_of_run(pool, run_id)
    assert reply is not None and reply["status"] == "interrupted"
    assert reply["content"] == "# Two things?\n\n## One\n\nThe first answer."


async def test_one_reply_per_turn_whichever_path_saves_it(
    chat_services: Services,
) -> None:
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "one reply")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "Hi")
    reply = {"reply_to": question["message_id"], "run_id": uuid.uuid4()}
    first = await chat_store.add_message(
        pool, chat["chat_id"], "assistant", "Hel", status="interrupted", **reply
    )
    second = await chat_store.add_message(pool, chat["chat_id"], "assistant", "Hello!", **reply)
    assert second["message_id"] == first["message_id"] and second["content"] == "Hello!"
    # A complete reply stays: a late interrupted save (a recovery, a stop) cannot replace it.
    third = await chat_store.add_message(
        pool, chat["chat_id"], "assistant", "Hel", status="interrupted", **reply
    )
    assert (third["content"], third["status"]) == ("Hello!", "complete")
    rows = await chat_store.list_messages(pool, chat["chat_id"])
    assert [m["role"] for m in rows] == ["user", "assistant"]


async def test_following_and_stopping_need_a_reply_being_written(
    client, chat_services: Services
) -> None:
    unknown = uuid.uuid4()
    for method, path in (("GET", "stream"), ("POST", "stop")):
        response = await client.request(method, f"/api/chats/{unknown}/{path}")
        assert response.status_code == 404 and "No chat" in response.json()["error"]
    empty = (await chat_store.create_chat(chat_services.database.pool, "no turns"))["chat_id"]
    response = await client.get(f"/api/chats/{empty}/stream")
    assert response.status_code == 404
    assert response.json()["error"] == "No reply is being written in this chat."
    response = await client.post(f"/api/chats/{empty}/stop")
    assert response.status_code == 409
    assert response.json()["error"] == "No reply is being written in this chat."
    response = await client.get(f"/api/chats/{empty}/stream", headers={"Last-Event-ID": "x1"})
    assert response.status_code == 422 and "Last-Event-ID" in response.json()["error"]
    response = await client.get(f"/api/chats/{empty}/stream?after=-1")
    assert response.status_code == 422


async def test_deleting_chats_while_their_replies_stream_ends_every_stream_cleanly(
    client, model, caplog: pytest.LogCaptureFixture
) -> None:
    """30 chats at once, each deleted as its first token arrives: every delete succeeds, every
    stream ends with a final event, no 5xx and no traceback."""
    model.responder = lambda _model, _messages: {"text": words(100), "delay": 0.02}

    async def send_and_delete() -> tuple[int, dict[str, Any]]:
        async with client.stream("POST", "/api/messages", json={"content": "Long"}) as r:
            assert r.status_code == 200
            chat_id, deleted, last = "", 0, {}
            async for event in read_events(r):
                if event["type"] == "chat":
                    chat_id = event["chat_id"]
                elif event["type"] == "token" and not deleted:
                    deleted = (await client.delete(f"/api/chats/{chat_id}")).status_code
                last = event
        return deleted, last

    results = await asyncio.gather(*(send_and_delete() for _ in range(30)))
    await turn_jobs.settled()
    assert [status for status, _ in results] == [204] * 30
    assert {last["type"] for _, last in results} <= {"interrupted", "error"}, results
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert (await client.get("/api/chats")).status_code == 200


async def test_while_the_database_is_down_requests_get_a_quick_json_503(
    chat_services: Services,
) -> None:
    nobody = f"host=127.0.0.1 port={free_port()} dbname=none user=none connect_timeout=2"
    pool = psycopg_pool.AsyncConnectionPool(nobody, min_size=0, max_size=2, timeout=1.0, open=False)
    await pool.open(wait=False)
    down = dataclasses.replace(chat_services, database=SimpleNamespace(pool=pool))
    try:
        async with (
            serve_app(create_app(services=down)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            for method, path, body in (
                ("GET", "/api/chats", None),
                ("POST", "/api/messages", {"content": "hello"}),
            ):
                started = time.monotonic()
                response = await http.request(method, path, json=body)
                assert response.status_code == 503, response.text
                assert response.json()["error"] == DATABASE_DOWN
                assert time.monotonic() - started < 5  # the pool's wait, not a 10 s timeout
    finally:
        await pool.close()


async def test_a_reply_past_the_turn_deadline_ends_with_an_error_keeping_its_text(
    chat_services: Services, model
) -> None:
    model.push({"text": words(300), "delay": 0.05})
    async with (
        server_with(chat_services, turn_deadline=1.0) as http,
        http.stream("POST", "/api/messages", json={"content": "Write a lot"}) as r,
    ):
        events = [e async for e in read_events(r) if e["type"] != "heartbeat"]
        chat_id = events[0]["chat_id"]
        saved = await messages_of(http, chat_id)
    assert events[-1]["type"] == "error" and "took longer than 1 s" in events[-1]["message"]
    streamed = "".join(e["text"] for e in events if e["type"] == "token")
    assert streamed and len(streamed.split()) < 100
    assert (saved[1]["status"], saved[1]["content"]) == ("interrupted", streamed)


async def test_a_reply_whose_chat_another_server_took_over_ends_with_an_error(
    chat_services: Services, model
) -> None:
    model.push({"text": words(300), "delay": 0.05})
    async with (
        server_with(chat_services, chat_lease_seconds=3.0) as client,  # renewed every second
        client.stream("POST", "/api/messages", json={"content": "Write a lot"}) as r,
    ):
        events = []
        async for event in read_events(r):
            events.append(event)
            if len([e for e in events if e["type"] == "token"]) == 2:
                await execute(
                    chat_services.database.pool,
                    "UPDATE chats SET run_id = gen_random_uuid() WHERE chat_id = %s",
                    (events[0]["chat_id"],),
                )
    assert events[-1]["type"] == "error"
    assert "another server took this chat over" in events[-1]["message"]


async def test_retry_answers_the_question_again_in_place_of_its_failed_reply(
    client, chat_services: Services, model
) -> None:
    model.push({"error": "service unavailable"})
    events = await send(client, "Are you there?")
    chat_id = events[0]["chat_id"]
    question = next(e for e in events if e["type"] == "turn")["user_message_id"]
    assert events[-1]["type"] == "error"
    retry_path = f"/api/chats/{chat_id}/messages/{question}/retry"
    model.push({"text": "Yes."})
    async with client.stream("POST", retry_path, json={}) as r:
        assert r.status_code == 200
        again = [e async for e in read_events(r) if e["type"] != "heartbeat"]
    assert again[-1]["type"] == "done"
    assert next(e for e in again if e["type"] == "turn")["user_message_id"] == question
    saved = await messages_of(client, chat_id)
    assert [(m["role"], m["status"], m["content"]) for m in saved] == [
        ("user", "complete", "Are you there?"), ("assistant", "complete", "Yes."),
    ]  # fmt: skip
    # The failed reply (no text) was replaced; a reply that completed is kept as a version.
    model.push({"text": "Yes, still."})
    async with client.stream("POST", retry_path, json={}) as r:
        assert r.status_code == 200 and [e async for e in read_events(r)][-1]["type"] == "done"
    saved = await messages_of(client, chat_id)
    assert [m["content"] for m in saved] == ["Are you there?", "Yes, still."]
    assert len(saved[1]["versions"]) == 2
    for path in (
        f"/api/chats/{uuid.uuid4()}/messages/{question}/retry",
        f"/api/chats/{chat_id}/messages/{uuid.uuid4()}/retry",
    ):
        response = await client.post(path, json={})
        assert response.status_code == 404 and "error" in response.json()


async def test_retry_keeps_use_web_as_first_sent(client, chat_services: Services) -> None:
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "web question")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "News today?")
    await turn_store.create_turn(pool, uuid.uuid4(), chat["chat_id"], question["message_id"], True)
    retry_path = f"/api/chats/{chat['chat_id']}/messages/{question['message_id']}/retry"
    # This server has no search provider: asking for the web is refused, so it was asked for.
    response = await client.post(retry_path)
    assert response.status_code == 400 and "Web search is off" in response.json()["error"]
    response = await client.post(retry_path, json={"use_web": "yes please"})
    assert response.status_code == 422


class PostgresProxy:
    """A TCP proxy to the test database (its Unix socket, or its TCP port on the standalone tier)
    that can drop every connection and refuse new ones (`cut`) until `restore`: the database going
    away and coming back, as seen by the app."""

    def __init__(self, conninfo: str) -> None:
        target = conninfo_to_dict(conninfo)
        host, port = str(target.get("host") or "localhost"), int(target.get("port") or 5432)
        if host.startswith("/"):
            self._connect = lambda: asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        else:
            self._connect = lambda: asyncio.open_connection(host, port)
        self.port = free_port()
        self.conninfo = make_conninfo(conninfo, host="127.0.0.1", port=str(self.port))
        self.down = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.close()
            return
        up_reader, up_writer = await self._connect()
        self._writers |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        self.down = True
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.down = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()


@asynccontextmanager
async def server_through(
    proxy: PostgresProxy, services: Services
) -> AsyncIterator[httpx.AsyncClient]:
    """A server whose database connections all go through `proxy`."""
    await proxy.start()
    pool = psycopg_pool.AsyncConnectionPool(
        proxy.conninfo, min_size=1, max_size=4, timeout=1.0, configure=_configure_connection,
        open=False,
    )  # fmt: skip
    await pool.open(wait=True)
    try:
        through = dataclasses.replace(services, database=SimpleNamespace(pool=pool))
        async with (
            serve_app(create_app(services=through)) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            yield http
    finally:
        await proxy.close()
        await pool.close()


async def stream_cutting_the_database(
    http: httpx.AsyncClient, proxy: PostgresProxy, back_after: float | None
) -> list[dict[str, Any]]:
    """Send a message; after its 5th token the database goes away (back after `back_after` s)."""
    events: list[dict[str, Any]] = []
    async with http.stream("POST", "/api/messages", json={"content": "Write a lot"}) as r:
        async for event in read_events(r):
            events.append(event)
            if [e["type"] for e in events].count("token") == 5 and event["type"] == "token":
                proxy.cut()
                if back_after is not None:
                    asyncio.get_running_loop().call_later(back_after, proxy.restore)
    return [e for e in events if e["type"] != "heartbeat"]


async def test_the_database_going_away_mid_reply_loses_nothing(
    chat_services: Services, model
) -> None:
    proxy = PostgresProxy(chat_services.database.conninfo)
    model.push({"text": words(40), "delay": 0.03})
    async with server_through(proxy, chat_services) as http:
        events = await stream_cutting_the_database(http, proxy, back_after=2.0)
        assert events[-1]["type"] == "done", events[-1]
        chat_id = events[0]["chat_id"]
        saved = await messages_of(http, chat_id)  # and the server works again, no restart
    assert [(m["role"], m["status"]) for m in saved] == [
        ("user", "complete"), ("assistant", "complete"),
    ]  # fmt: skip
    assert saved[1]["content"] == "".join(e["text"] for e in events if e["type"] == "token")
    assert saved[1]["content"] == words(40)


async def test_a_database_down_for_good_ends_the_reply_with_a_clear_error_then_recovers(
    chat_services: Services, model, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replies, "SAVE_RETRY_SECONDS", 2.0)
    proxy = PostgresProxy(chat_services.database.conninfo)
    model.push({"text": words(40), "delay": 0.03})
    async with server_through(proxy, chat_services) as http:
        events = await stream_cutting_the_database(http, proxy, back_after=None)
        assert events[-1]["type"] == "error"
        assert re.fullmatch(
            r"The reply could not be saved: the database is not answering\. Try again once it"
            r" is back\. \(ref [0-9a-f]{6}\)",
            events[-1]["message"],
        ), events[-1]["message"]
        proxy.restore()
        # No restart needed: once the pool has reconnected (503 meanwhile) and the ended turn
        # has given the chat back (409 meanwhile), the chat takes a message again.
        path = f"/api/chats/{events[0]['chat_id']}/messages"
        model.push({"text": "Back."})
        for _ in range(60):
            async with http.stream("POST", path, json={"content": "Are you back?"}) as r:
                if r.status_code == 200:
                    again = [e async for e in read_events(r)]
                    break
                assert r.status_code in (409, 503), await r.aread()
            await asyncio.sleep(0.25)
    assert again[-1]["type"] == "done"


async def test_postgres_stopped_mid_reply_and_started_again_loses_nothing(
    settings: Settings, embedder: Embedder, model, tmp_path: Path
) -> None:
    # A Postgres of its own (the embedded server in a folder of this test's), so that its
    # postmaster can be stopped for real, as `pg_ctl stop -m fast` does (SIGINT), then started
    # again as it was. (Not through pgserver: its start-up takes a lock shared by every process
    # on the machine, which another test session may hold.)
    own = settings.model_copy(
        update={"models_config": SCRIPTED_MODELS, "app_data_dir": tmp_path, "database_url": None}
    )
    database = await Database.open(own)
    plan = plan_models(own)
    services = Services(own, database, embedder, build_router(own, plan), plan)
    postmaster = psutil.Process(int((own.pg_data_dir / "postmaster.pid").read_text().split()[0]))
    command, user, env = postmaster.cmdline(), postmaster.username(), postmaster.environ()
    restarted: asyncio.subprocess.Process | None = None
    model.push({"text": words(40), "delay": 0.05})
    try:
        async with (
            asyncio.timeout(120),  # a hang fails here, with its traceback
            serve_app(create_app(services=services)) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            events: list[dict[str, Any]] = []
            down: list[httpx.Response] = []
            async with http.stream("POST", "/api/messages", json={"content": "Write"}) as r:
                async for event in read_events(r):
                    events.append(event)
                    if event["type"] == "token" and len(events) > 5 and not down:
                        postmaster.send_signal(signal.SIGINT)
                        await asyncio.to_thread(postmaster.wait, 10)
                        down.append(await http.get("/api/chats"))  # meanwhile: a quick 503
                        restarted = await asyncio.create_subprocess_exec(
                            *command, env=env, user=user if os.geteuid() == 0 else None,
                            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                        )  # fmt: skip
            assert down[0].status_code == 503 and down[0].json()["error"] == DATABASE_DOWN
            assert events[-1]["type"] == "done", events[-1]
            chat_id = events[0]["chat_id"]
            saved = await messages_of(http, chat_id)  # no restart of the app
            model.push({"text": "Still here."})
            again = await send(http, "Still there?", chat_id)
            assert again[-1]["type"] == "done"
    finally:
        await database.close()
        if restarted is not None:  # pgserver knows only the postmaster it started
            restarted.send_signal(signal.SIGINT)
            await asyncio.wait_for(restarted.wait(), 30)
    streamed = "".join(e["text"] for e in events if e["type"] == "token")
    assert [(m["role"], m["status"], m["content"]) for m in saved] == [
        ("user", "complete", "Write"), ("assistant", "complete", streamed),
    ]  # fmt: skip
    assert streamed == words(40)
