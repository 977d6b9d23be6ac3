"""Export and import (chat/export_routes.py, core/data_transfer.py, core/chatgpt_import.py)
through the real server (AUTH_MODE=password, real Postgres and embedder, scripted model).

A user's export imported by a fresh user gives back the same chats, messages (every version),
memories (quotes, history) and preferences; importing again adds nothing, and a chat deleted then
imported comes back with its own ids. A ChatGPT conversations.json (tests/fixtures) becomes chats
of the current branch that open and can be continued. Bad files (not JSON, another shape,
truncated, NUL bytes, too large, inconsistent) are refused in the error shape with nothing
written. One chat exports as Markdown (the branch shown, with sources) or JSON.
"""

from __future__ import annotations

import io
import json
import re
import uuid
import zipfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from core import accounts, data_transfer
from core.services import Services
from tests.chat_client import messages_of, password_services, read_events, send, serve
from tests.scripted_model import ScriptedProvider

PASSWORD = "correct horse battery"
FIXTURE = Path(__file__).parent / "fixtures" / "chatgpt_conversations.json"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SMALL_CAP = 4096


def _services(chat_services: Services, **settings: Any) -> Services:
    return password_services(
        chat_services,
        rate_limit_messages_per_minute=0,
        rate_limit_concurrent_replies=0,
        **settings,
    )


@pytest.fixture(scope="module")
async def url(chat_services: Services) -> AsyncIterator[str]:
    async with serve(_services(chat_services)) as base:
        yield base


@pytest.fixture(scope="module")
async def small_cap_url(chat_services: Services) -> AsyncIterator[str]:
    async with serve(_services(chat_services, import_max_bytes=SMALL_CAP)) as base:
        yield base


class User:
    """A new account and a client signed in as it."""

    def __init__(self, user_id: uuid.UUID, client: httpx.AsyncClient) -> None:
        self.user_id, self.client = user_id, client


async def new_user(base: str, pool: AsyncConnectionPool) -> User:
    name = f"xfer-{uuid.uuid4().hex[:8]}"
    row = await accounts.add_user(pool, name, PASSWORD)
    client = httpx.AsyncClient(base_url=base, timeout=120)
    response = await client.post("/api/auth/login", json={"username": name, "password": PASSWORD})
    assert response.status_code == 200, response.text
    client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
    return User(row["user_id"], client)


@pytest.fixture
async def users(url: str, chat_services: Services) -> AsyncIterator[Any]:
    made: list[User] = []

    async def make(base: str = url) -> User:
        made.append(await new_user(base, chat_services.database.pool))
        return made[-1]

    yield make
    for user in made:
        await user.client.aclose()


async def counts(pool: AsyncConnectionPool, user_id: uuid.UUID) -> dict[str, int]:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT (SELECT count(*) FROM chats WHERE user_id = %(u)s) AS chats,"
            " (SELECT count(*) FROM messages JOIN chats USING (chat_id) WHERE user_id = %(u)s)"
            " AS messages, (SELECT count(*) FROM memories WHERE user_id = %(u)s) AS memories,"
            " (SELECT count(*) FROM preferences WHERE user_id = %(u)s) AS preferences",
            {"u": user_id},
        )
        row = await cur.fetchone()
    assert row is not None
    return dict(row)


async def stream(client: httpx.AsyncClient, method: str, path: str, **body: Any) -> list[dict]:
    async with client.stream(method, path, json=body) as response:
        assert response.status_code == 200, await response.aread()
        events = [e async for e in read_events(response) if e["type"] != "heartbeat"]
    assert events[-1]["type"] == "done", events
    return events


async def add_memory(
    pool: AsyncConnectionPool,
    services: Services,
    user_id: uuid.UUID,
    content: str,
    quote: str,
    message: dict[str, Any] | None,
    chat_id: Any,
    created_at: datetime,
    valid_to: datetime | None = None,
    superseded_by: uuid.UUID | None = None,
) -> uuid.UUID:
    """A memory of the user's as the store writes one (real vector), with any history."""
    vector = (await services.embedder.embed_documents([content]))[0]
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "INSERT INTO memories (user_id, content, quote, embedding, embed_model,"
            " source_chat_id, source_message_id, valid_from, valid_to, superseded_by,"
            " created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " RETURNING memory_id",
            (
                user_id,
                content,
                quote,
                vector,
                services.embedder.model_name,
                chat_id if message else None,
                message["message_id"] if message else None,
                created_at,
                valid_to,
                superseded_by,
                created_at,
                created_at,
            ),
        )
        row = await cur.fetchone()
    assert row is not None
    return row["memory_id"]


async def alice_with_data(users: Any, model: ScriptedProvider, services: Services) -> User:
    """A user with two chats (one with a regenerated reply and an edited question), memories
    (one superseded by another, one without a source) and memory paused."""
    pool = services.database.pool
    alice = await users()
    model.push({"text": "Hello Ada! Lyon is lovely."})
    chat_id = (await send(alice.client, "Hi, I'm Ada and I live in Lyon.", None))[0]["chat_id"]
    first = await messages_of(alice.client, chat_id)
    model.push({"text": "Bonjour Ada — Lyon, then."})
    await stream(
        alice.client, "POST", f"/api/chats/{chat_id}/messages/{first[1]['message_id']}/regenerate"
    )
    model.push({"text": "Croissants at Boulangerie du Palais."})
    await send(alice.client, "Where do I get croissants?", chat_id)
    shown = await messages_of(alice.client, chat_id)
    model.push({"text": "Try Bouchon Daniel et Denise."})
    await stream(
        alice.client,
        "PATCH",
        f"/api/chats/{chat_id}/messages/{shown[2]['message_id']}",
        content="Where do I eat a bouchon?",
    )
    model.push({"text": "Noted: the trip is in May."})
    other = (await send(alice.client, "My trip to Kyōto is in May 🌸.", None))[0]["chat_id"]
    trip = (await messages_of(alice.client, other))[0]

    now = datetime.now(UTC)
    new = await add_memory(
        pool,
        services,
        alice.user_id,
        "Lives in Lyon.",
        "I live in Lyon",
        first[0],
        chat_id,
        now - timedelta(minutes=1),
    )
    await add_memory(
        pool,
        services,
        alice.user_id,
        "Lives in Paris.",
        "I'm Ada",
        first[0],
        chat_id,
        now - timedelta(minutes=3),
        valid_to=now,
        superseded_by=new,
    )
    await add_memory(
        pool,
        services,
        alice.user_id,
        "Travels to Kyōto in May.",
        "My trip to Kyōto is in May",
        trip,
        other,
        now - timedelta(minutes=2),
    )
    await add_memory(
        pool,
        services,
        alice.user_id,
        "Is called Ada.",
        "I'm Ada",
        None,
        None,
        now - timedelta(minutes=4),
    )
    response = await alice.client.patch("/api/settings", json={"memory_paused": True})
    assert response.status_code == 200, response.text
    return alice


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def canonical(export: dict[str, Any]) -> str:
    """The export with its ids renamed in order of appearance (and without its own time): two
    exports of the same data under other ids compare equal."""
    text = json.dumps(
        {k: v for k, v in export.items() if k not in ("exported_at", "documents")},
        sort_keys=True,
        ensure_ascii=False,
    )
    names: dict[str, str] = {}
    return UUID.sub(lambda m: names.setdefault(m.group(), f"id{len(names)}"), text)


async def export_of(user: User) -> dict[str, Any]:
    response = await user.client.get("/api/export")
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"].startswith("attachment;")
    assert "resolveai-export-" in response.headers["content-disposition"]
    return response.json()


async def import_file(
    user: User, data: bytes, name: str = "export.json", **params: str
) -> httpx.Response:
    return await user.client.post(
        "/api/import", files={"file": (name, data, "application/json")}, params=params
    )


async def test_an_export_imported_by_a_fresh_user_gives_back_the_same_data(
    users: Any, model: ScriptedProvider, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    alice = await alice_with_data(users, model, chat_services)
    first_chat = (await alice.client.get("/api/chats")).json()[-1]["chat_id"]
    pinned = await alice.client.patch(f"/api/chats/{first_chat}", json={"pinned": True})
    assert pinned.status_code == 200, pinned.text
    exported = await export_of(alice)
    # Pins, where a title came from, and which model wrote each reply travel with the chats.
    assert [c["pinned"] for c in exported["chats"]].count(True) == 1
    assert {c["title_source"] for c in exported["chats"]} <= {"auto", "generated", "user"}
    replies = [m for c in exported["chats"] for m in c["messages"] if m["role"] == "assistant"]
    assert any(m["model"] for m in replies) and all("notes" in m for m in replies)
    assert exported["format"] == "resolveai-export" and exported["version"] == 1
    assert [len(c["messages"]) for c in exported["chats"]] == [7, 2]  # every version kept
    first = exported["chats"][0]["messages"]
    assert [len(m["versions"]) for m in first] == [1, 2, 2, 2, 1, 2, 1]
    assert sorted(m["quote"] for m in exported["memories"]) == [
        "I live in Lyon",
        "I'm Ada",
        "I'm Ada",
        "My trip to Kyōto is in May",
    ]
    assert exported["preferences"]["memory_paused"] is True

    # Bob's ids cannot be Alice's (they are hers): the same data under other ids.
    bob = await users()
    response = await import_file(bob, json.dumps(exported).encode())
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["format"] == "resolveai"
    assert result["chats"] == {"imported": 2, "skipped": 0} and result["messages"] == 9
    assert result["memories"] == {"imported": 4, "skipped": 0}
    again = await export_of(bob)
    assert canonical(again) == canonical(exported)
    assert {c["chat_id"] for c in again["chats"]}.isdisjoint(
        c["chat_id"] for c in exported["chats"]
    )
    # The imported chat opens on the branch Alice saw, its versions with it.
    bob_chat = again["chats"][0]["chat_id"]
    alice_chat = exported["chats"][0]["chat_id"]
    shown = await messages_of(bob.client, bob_chat)
    alice_shown = await messages_of(alice.client, alice_chat)
    assert [(m["role"], m["content"], m["sent_at"], len(m["versions"])) for m in shown] == [
        (m["role"], m["content"], m["sent_at"], len(m["versions"])) for m in alice_shown
    ]
    memories = (await bob.client.get("/api/memories?include_superseded=true")).json()["memories"]
    lyon = next(m for m in memories if m["content"] == "Lives in Lyon.")
    assert lyon["chat_id"] == bob_chat and lyon["message_id"] == shown[0]["message_id"]
    assert (
        next(m for m in memories if m["content"] == "Lives in Paris.")["superseded_by"]
        == (lyon["memory_id"])
    )
    # Alice's data is untouched; Bob's memories are embedded with the server's model.
    assert canonical(await export_of(alice)) == canonical(exported)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT DISTINCT embed_model FROM memories WHERE user_id = %s", (bob.user_id,)
        )
        assert await cursor.fetchall() == [(chat_services.embedder.model_name,)]

    # Importing the same file again adds nothing.
    before = await counts(pool, bob.user_id)
    response = await import_file(bob, json.dumps(exported).encode())
    assert response.status_code == 200, response.text
    assert response.json()["chats"] == {"imported": 0, "skipped": 2}
    assert response.json()["memories"] == {"imported": 0, "skipped": 4}
    assert await counts(pool, bob.user_id) == before


async def test_a_chat_deleted_then_imported_comes_back_with_its_own_ids(
    users: Any, model: ScriptedProvider, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    alice = await alice_with_data(users, model, chat_services)
    exported = await export_of(alice)
    before = await counts(pool, alice.user_id)
    response = await import_file(alice, json.dumps(exported).encode())
    assert response.json()["chats"] == {"imported": 0, "skipped": 2}
    assert await counts(pool, alice.user_id) == before

    chat = exported["chats"][1]
    assert (await alice.client.delete(f"/api/chats/{chat['chat_id']}")).status_code == 204
    response = await import_file(alice, json.dumps(exported).encode())
    assert response.status_code == 200, response.text
    assert response.json()["chat_ids"] == [chat["chat_id"]]
    restored = await export_of(alice)
    assert restored["chats"][1] == chat  # the very same ids, times and content
    assert await counts(pool, alice.user_id) == before

    # One chat's JSON export imports the same way.
    response = await alice.client.get(f"/api/chats/{chat['chat_id']}/export?format=json")
    assert response.status_code == 200
    assert response.json()["chats"] == [chat]
    assert (await import_file(alice, response.content)).json()["chats"]["skipped"] == 1


async def test_one_chat_exports_as_markdown_of_the_branch_shown(
    users: Any, model: ScriptedProvider, chat_services: Services
) -> None:
    alice = await alice_with_data(users, model, chat_services)
    chat_id = (await export_of(alice))["chats"][0]["chat_id"]
    response = await alice.client.get(f"/api/chats/{chat_id}/export", params={"format": "markdown"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/markdown")
    disposition = response.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="hi-i-m-ada-and-i-live-in-lyon-')
    assert disposition.endswith(".md")
    text = response.text
    assert text.startswith("# Hi, I'm Ada and I live in Lyon.\n")
    assert re.findall(r"^### (You|Assistant) · \d{4}-\d\d-\d\d \d\d:\d\d UTC$", text, re.M) == [
        "You",
        "Assistant",
        "You",
        "Assistant",
    ]
    assert "Bonjour Ada — Lyon, then." in text and "Try Bouchon Daniel et Denise." in text
    # The versions not shown are not in it.
    assert "Hello Ada!" not in text and "croissants" not in text

    # Only your own chats.
    bob = await users()
    for path in (f"/api/chats/{chat_id}/export", f"/api/chats/{uuid.uuid4()}/export?format=json"):
        response = await bob.client.get(path)
        assert response.status_code == 404 and "error" in response.json(), response.text


def test_the_markdown_lists_a_reply_s_sources() -> None:
    at = "2026-01-02T03:04:05+00:00"
    export = {
        "exported_at": at,
        "chats": [
            {
                "title": "Sources",
                "created_at": at,
                "updated_at": at,
                "head_id": "b",
                "messages": [
                    {
                        "message_id": "a",
                        "parent_id": None,
                        "role": "user",
                        "content": "Weather?",
                        "status": "complete",
                        "error": None,
                        "sources": [],
                        "sent_at": at,
                    },
                    {
                        "message_id": "b",
                        "parent_id": "a",
                        "role": "assistant",
                        "content": "Sunny [1].",
                        "status": "interrupted",
                        "error": None,
                        "sent_at": at,
                        "sources": [
                            {"n": 1, "title": "Météo [Lyon]", "url": "https://example.org/a(b)"},
                            {"n": 2, "title": "notes.pdf, page 2", "url": "#/documents/x?chunk=y"},
                        ],
                    },
                ],
            }
        ],
    }
    text = data_transfer.chat_markdown(export)
    listed = "**Sources**\n\n- [1] [Météo \\[Lyon\\]](https://example.org/a(b%29)\n"
    assert listed in text
    assert "- [2] notes.pdf, page 2\n" in text  # an in-app link is no use outside the app
    assert "*(interrupted)*" in text
    # One reply on its own: its text, then the same list.
    reply = export["chats"][0]["messages"][1]
    assert data_transfer.reply_markdown(reply) == (
        "Sunny [1].\n\n*(interrupted)*\n\n" + listed + "- [2] notes.pdf, page 2\n"
    )
    # A research report lists its cited sources itself: not twice.
    report = {**reply, "status": "complete", "content": "# R\n\nSunny [1].\n\n## Sources\n\n[1] x"}
    assert data_transfer.reply_markdown(report) == report["content"] + "\n"


async def test_a_chatgpt_export_imports_the_current_branches_and_they_continue(
    users: Any, model: ScriptedProvider, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    carol = await users()
    response = await import_file(carol, FIXTURE.read_bytes(), "conversations.json")
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["format"] == "chatgpt"
    assert result["chats"] == {"imported": 3, "skipped": 0} and result["messages"] == 8
    chats = (await carol.client.get("/api/chats")).json()
    # Newest activity first, with ChatGPT's titles and times; the empty conversation is left out.
    assert [c["title"] for c in chats] == [
        "Haiku about Mondays",
        "Sourdough hydration",
        "Trip to Kyōto ✈️",
    ]
    kyoto = chats[2]
    assert when(kyoto["created_at"]) == datetime(2024, 5, 1, 12, 0, 0, 123456, UTC)
    assert when(kyoto["updated_at"]) == datetime(2024, 5, 1, 12, 2, 5, 623456, UTC)

    shown = await messages_of(carol.client, kyoto["chat_id"])
    assert [(m["role"], m["content"][:30]) for m in shown] == [
        ("user", "I'm going to Kyōto in November"),
        ("assistant", "November is maple season 🍁. Se"),
        ("user", "Where can I eat vegetarian foo"),
        ("assistant", "Try shōjin ryōri at Shigetsu i"),
    ]
    assert when(shown[0]["sent_at"]) == datetime(2024, 5, 1, 12, 0, 10, 123456, UTC)
    assert all(len(m["versions"]) == 1 for m in shown)  # only the current branch
    bread = await messages_of(carol.client, chats[1]["chat_id"])
    assert bread[0]["content"] == (
        "Here is my dough after 4 hours.\n\nIt has 500 g flour and"
        " 375 g water. What hydration is that?"
    )
    assert bread[1]["content"] == (
        "Let me compute that.\n\nThat is **75 %** hydration — a fairly wet dough."
    )
    haiku = await messages_of(carol.client, chats[0]["chat_id"])
    assert haiku[1]["content"].startswith("Grey light, cold coffee")  # the regenerated one

    # It continues: the new question follows the imported branch, and the model reads it.
    model.push({"text": "Kyōto in December is quiet and cold."})
    events = await send(carol.client, "And in December?", kyoto["chat_id"])
    assert events[-1]["type"] == "done", events
    after = await messages_of(carol.client, kyoto["chat_id"])
    assert [m["content"] for m in after][:4] == [m["content"] for m in shown]
    assert [m["content"] for m in after][4:] == [
        "And in December?",
        "Kyōto in December is quiet and cold.",
    ]
    prompt = [call["messages"] for call in model.calls if call["model"] == "chat"][-1]
    assert "精進料理" in json.dumps(prompt, ensure_ascii=False)
    assert "And where should I eat?" not in json.dumps(prompt)  # the branch not shown
    # And a reply of it regenerates like any other.
    model.push({"text": "Try Ajiro."})
    await stream(
        carol.client,
        "POST",
        f"/api/chats/{kyoto['chat_id']}/messages/{shown[3]['message_id']}/regenerate",
    )
    assert (await messages_of(carol.client, kyoto["chat_id"]))[3]["content"] == "Try Ajiro."

    # Again: nothing new. Another user gets chats of their own.
    before = await counts(pool, carol.user_id)
    response = await import_file(carol, FIXTURE.read_bytes(), "conversations.json")
    assert response.json()["chats"] == {"imported": 0, "skipped": 3}
    assert await counts(pool, carol.user_id) == before
    dave = await users()
    response = await import_file(dave, FIXTURE.read_bytes(), "conversations.json")
    assert response.status_code == 200, response.text
    assert response.json()["chats"]["imported"] == 3
    assert set(response.json()["chat_ids"]).isdisjoint(c["chat_id"] for c in chats)


def _inconsistent_export() -> bytes:
    """A valid first chat and a second whose messages' parents form a loop."""
    at = "2026-01-02T03:04:05+00:00"
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    chat = {
        "title": "fine",
        "created_at": at,
        "updated_at": at,
        "messages": [{"message_id": a, "role": "user", "content": "hi", "sent_at": at}],
    }
    loop = {
        "title": "loop",
        "created_at": at,
        "updated_at": at,
        "messages": [
            {"message_id": b, "parent_id": c, "role": "user", "content": "x", "sent_at": at},
            {"message_id": c, "parent_id": b, "role": "assistant", "content": "y", "sent_at": at},
        ],
    }
    chats = [{**chat, "chat_id": str(uuid.uuid4())}, {**loop, "chat_id": str(uuid.uuid4())}]
    return json.dumps({"format": "resolveai-export", "version": 1, "chats": chats}).encode()


def _export_with_memory(content: str) -> bytes:
    at = "2026-01-02T03:04:05+00:00"
    memory = {"memory_id": str(uuid.uuid4()), "content": content, "quote": "I said so",
              "valid_from": at, "created_at": at, "updated_at": at}  # fmt: skip
    return json.dumps({"format": "resolveai-export", "version": 1, "memories": [memory]}).encode()


FIXTURE_BYTES = FIXTURE.read_bytes()
BAD_FILES = {
    "not JSON": (b"Hello, this is my chat history.", 422, "not valid JSON"),
    "another shape": (b'{"chats": "yes"}', 422, "not a file ResolveAI imports"),
    "a list of numbers": (b"[1, 2, 3]", 422, "not a file ResolveAI imports"),
    "truncated": (FIXTURE_BYTES[: len(FIXTURE_BYTES) // 2], 422, "cut short"),
    "NUL bytes": (FIXTURE_BYTES[:100] + b"\x00\x00" + FIXTURE_BYTES[100:], 415, "NUL"),
    "an escaped NUL": (
        FIXTURE_BYTES.replace("Kyōto".encode(), b"Ky\\u0000to", 1),
        422,
        "NUL character",
    ),
    "a lone surrogate": (FIXTURE_BYTES.replace(b"Haiku", b"Hai\\ud800ku", 1), 422, "surrogate"),
    "not UTF-8": ('[{"mapping": {}, "title": "caf\u00e9"}]'.encode("latin-1"), 415, "UTF-8"),
    "a wrong version": (b'{"format": "resolveai-export", "version": 9}', 422, "version 9"),
    "a bad field": (
        b'{"format": "resolveai-export", "version": 1, "chats": [{"chat_id": 1}]}',
        422,
        "chats.0.chat_id",
    ),
    "a loop of parents": (_inconsistent_export(), 422, "loop"),
    "a blank memory": (_export_with_memory("   "), 422, "memories.0.content"),
    "a ResolveAI file read as ChatGPT": (
        b'{"format": "resolveai-export", "version": 1}',
        422,
        "not a ChatGPT conversations.json",
    ),
    "an empty file": (b"  \n", 422, "empty"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
async def test_a_bad_file_is_refused_and_nothing_is_written(
    case: str, users: Any, model: ScriptedProvider, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    erin = await users()
    model.push({"text": "ok"})
    await send(erin.client, "something to keep", None)
    before = await counts(pool, erin.user_id)
    data, status, says = BAD_FILES[case]
    params = {"format": "chatgpt"} if case == "a ResolveAI file read as ChatGPT" else {}
    response = await import_file(erin, data, "conversations.json", **params)
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "request_id"} and says in body["error"], body
    assert body["error"].startswith("conversations.json: ")
    assert await counts(pool, erin.user_id) == before


async def test_a_file_over_the_cap_is_refused_with_413(
    small_cap_url: str, users: Any, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    frank = await users(small_cap_url)
    before = await counts(pool, frank.user_id)
    assert len(FIXTURE_BYTES) > SMALL_CAP  # read by the route, which refuses it
    response = await import_file(frank, FIXTURE_BYTES, "conversations.json")
    assert response.status_code == 413, response.text
    assert "IMPORT_MAX_BYTES" in response.json()["error"]
    # Far over it: the body guard refuses before reading the body.
    response = await import_file(frank, b"[" + b" " * (200 * 1024) + b"]")
    assert response.status_code == 413, response.text
    assert set(response.json()) == {"error", "request_id"}
    assert "IMPORT_MAX_BYTES" in response.json()["error"]
    assert await counts(pool, frank.user_id) == before
    # Under it, the same server imports.
    one = [
        {
            "title": "Small",
            "create_time": 1714564800,
            "current_node": "b",
            "mapping": {
                "a": {
                    "id": "a",
                    "parent": None,
                    "children": ["b"],
                    "message": {
                        "author": {"role": "user"},
                        "content": {"content_type": "text", "parts": ["Hi"]},
                    },
                },
                "b": {
                    "id": "b",
                    "parent": "a",
                    "children": [],
                    "message": {
                        "author": {"role": "assistant"},
                        "content": {"content_type": "text", "parts": ["Hello"]},
                        "create_time": 1714564801,
                    },
                },
            },
        }
    ]
    response = await import_file(frank, json.dumps(one).encode(), "conversations.json")
    assert response.status_code == 200, response.text
    assert (await counts(pool, frank.user_id))["messages"] == before["messages"] + 2


async def test_a_chatgpt_zip_imports_its_conversations_json(
    users: Any, chat_services: Services
) -> None:
    grace = await users()
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("chat.html", "<html></html>")
        archive.writestr("conversations.json", FIXTURE_BYTES)
    response = await import_file(grace, packed.getvalue(), "chatgpt-export.zip")
    assert response.status_code == 200, response.text
    assert response.json()["format"] == "chatgpt"
    assert response.json()["chats"] == {"imported": 3, "skipped": 0}

    before = await counts(chat_services.database.pool, grace.user_id)
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("photos/cat.json", "[]")
    response = await import_file(grace, other.getvalue(), "photos.zip")
    assert response.status_code == 422, response.text
    assert "no conversations.json" in response.json()["error"]
    assert await counts(chat_services.database.pool, grace.user_id) == before
