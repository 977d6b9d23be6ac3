"""Accounts (AUTH_MODE=password) through the real HTTP API: signing in, what a user who is not
signed in gets, two users who cannot reach each other's chats, memories, replies or settings, the
CSRF token, session expiry and revocation, sign-in throttling, disabled accounts, and the first
admin taking over a single-user install's data; the per-user message limit across two server
processes; and the refusal to serve without accounts on an address other machines can reach."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool
from pydantic import SecretStr

from chat.auth import prepare_accounts
from core import accounts
from core.config import Settings
from core.errors import StartupError
from core.services import Services
from tests.chat_client import password_services, send, serve
from tests.scripted_model import ScriptedProvider
from tests.test_server import SCRIPTED_SERVER, RunningServer, run_server_expecting_failure
from tests.ui_fixtures import seed_memory

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
async def auth_url(chat_services: Services) -> AsyncIterator[str]:
    """The real app with AUTH_MODE=password (no message limits: tests/test_accounts.py's last
    test checks those across processes)."""
    services = password_services(
        chat_services, rate_limit_messages_per_minute=0, rate_limit_concurrent_replies=0
    )
    async with serve(services) as url:
        yield url


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def new_user(pool: AsyncConnectionPool, name: str, admin: bool = False) -> str:
    username = unique(name)
    await accounts.add_user(pool, username, PASSWORD, is_admin=admin)
    return username


async def sign_in(url: str, username: str, password: str = PASSWORD) -> httpx.AsyncClient:
    """A client signed in by its session cookie, sending the session's CSRF token on changes."""
    client = httpx.AsyncClient(base_url=url, timeout=60)
    response = await client.post(
        "/api/auth/login", json={"username": username, "password": password}
    )
    assert response.status_code == 200, response.text
    assert "resolveai_session" in client.cookies
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
    return client


@pytest.fixture
async def users(
    auth_url: str, chat_services: Services
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    pool = chat_services.database.pool
    alice = await sign_in(auth_url, await new_user(pool, "alice"))
    bob = await sign_in(auth_url, await new_user(pool, "bob"))
    yield alice, bob
    await alice.aclose()
    await bob.aclose()


async def test_without_signing_in_only_health_and_sign_in_answer(auth_url: str) -> None:
    async with httpx.AsyncClient(base_url=auth_url, timeout=30) as anonymous:
        for method, path in (("GET", "/api/chats"), ("GET", "/api/config"),
                             ("GET", "/api/memories"), ("POST", "/api/auth/tokens"),
                             ("GET", "/api/auth/me")):  # fmt: skip
            response = await anonymous.request(method, path, json={"name": "x"})
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"] == "Sign in first." and response.json()["request_id"]
        sent = await anonymous.post("/api/messages", json={"content": "hello?"})
        assert sent.status_code == 401
        assert (await anonymous.get("/api/health")).status_code in (200, 503)
        page = await anonymous.get("/")
        assert page.status_code == 303 and page.headers["location"] == "/login.html"
        assert "ResolveAI" not in page.text  # not a byte of the app
        wrong = await anonymous.post(
            "/api/auth/login", json={"username": "nobody-here", "password": "not it at all"}
        )
        assert wrong.status_code == 401 and wrong.json()["error"] == "Wrong username or password."
        forged = await anonymous.get(
            "/api/chats", headers={"Authorization": "Bearer rai_not-a-real-token"}
        )
        assert forged.status_code == 401


async def test_two_users_cannot_reach_each_others_chats_memories_or_replies(
    users: tuple[httpx.AsyncClient, httpx.AsyncClient],
    model: ScriptedProvider,
    chat_services: Services,
    embedder: Any,
) -> None:
    alice, bob = users
    tag = uuid.uuid4().hex[:8]
    model.push({"text": "Noted, Alice."}, {"text": "Hello Bob."})
    events = await send(alice, f"Planning the {tag} garden")
    chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")
    question = next(e["user_message_id"] for e in events if e["type"] == "turn")
    pool = chat_services.database.pool
    memory_id = await seed_memory(
        pool, embedder, f"The user grows {tag} tomatoes", f"Planning the {tag} garden",
        chat_id=uuid.UUID(chat_id), message_id=uuid.UUID(question),
    )  # fmt: skip
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE memories SET user_id = (SELECT user_id FROM chats WHERE chat_id = %s)"
            " WHERE memory_id = %s",
            (chat_id, memory_id),
        )
    # Alice sees her own.
    assert [c["chat_id"] for c in (await alice.get(f"/api/chats?q={tag}")).json()] == [chat_id]
    assert (await alice.get(f"/api/memories/{memory_id}")).status_code == 200

    # Bob: none of it is listed, found, or reachable by its id.
    assert chat_id not in [c["chat_id"] for c in (await bob.get("/api/chats")).json()]
    assert (await bob.get(f"/api/chats?q={tag}")).json() == []
    listed = (await bob.get(f"/api/memories?q={tag}")).json()
    assert listed["memories"] == [] and listed["total"] == 0
    chat = f"/api/chats/{chat_id}"
    for method, path, body in (
        ("GET", f"{chat}/messages", None),
        ("GET", f"{chat}/summary", None),
        ("GET", f"{chat}/stream", None),
        ("PATCH", chat, {"title": "mine now"}),
        ("POST", f"{chat}/stop", None),
        ("POST", f"{chat}/messages", {"content": "let me in"}),
        ("POST", f"{chat}/messages/{question}/regenerate", None),
        ("PATCH", f"{chat}/messages/{question}", {"content": "edited by bob"}),
        ("POST", f"{chat}/messages/{question}/show", None),
        ("DELETE", chat, None),
        ("GET", f"/api/memories/{memory_id}", None),
        ("PATCH", f"/api/memories/{memory_id}", {"content": "The user grows nothing"}),
        ("DELETE", f"/api/memories/{memory_id}", None),
    ):
        response = await bob.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
    # "Forget everything" forgets only Bob's memories.
    token = (await bob.get("/api/memories")).json()["forget_token"]
    assert (await bob.delete(f"/api/memories?confirm={token}")).json() == {"deleted": 0}
    # Pausing memory is Bob's own setting.
    assert (await bob.patch("/api/settings", json={"memory_paused": True})).status_code == 200
    assert (await alice.get("/api/settings")).json()["memory_paused"] is False
    assert (await bob.patch("/api/settings", json={"memory_paused": False})).status_code == 200

    # Bob's own chat recalls nothing of Alice's: the prompt the model got does not hold it.
    model.calls.clear()
    await send(bob, f"What do I grow in the {tag} garden?")
    prompt = str(model.calls[0]["messages"])
    assert tag in prompt and "tomatoes" not in prompt
    # Everything of Alice's is still there, unchanged.
    messages = (await alice.get(f"{chat}/messages")).json()
    assert [m["content"] for m in messages] == [f"Planning the {tag} garden", "Noted, Alice."]
    assert (await alice.get(f"/api/memories/{memory_id}")).json()["content"].endswith("tomatoes")


async def test_a_change_signed_by_the_cookie_needs_the_csrf_token(
    users: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    alice, _ = users
    csrf = alice.headers.pop("X-CSRF-Token")
    refused = await alice.patch("/api/settings", json={"memory_paused": False})
    assert refused.status_code == 403 and "X-CSRF-Token" in refused.json()["error"]
    wrong = await alice.patch(
        "/api/settings", json={"memory_paused": False}, headers={"X-CSRF-Token": csrf[:-2] + "xx"}
    )
    assert wrong.status_code == 403
    assert (await alice.get("/api/settings")).status_code == 200  # reading needs none
    alice.headers["X-CSRF-Token"] = csrf
    created = await alice.post("/api/auth/tokens", json={"name": "script"})
    assert created.status_code == 201 and created.json()["token"].startswith("rai_")
    # A token is no ambient credential: a script using it sends no CSRF token, and no cookie.
    async with httpx.AsyncClient(base_url=str(alice.base_url), timeout=30) as script:
        bearer = {"Authorization": f"Bearer {created.json()['token']}"}
        changed = await script.patch("/api/settings", json={"memory_paused": False}, headers=bearer)
        assert changed.status_code == 200
        me = (await script.get("/api/auth/me", headers=bearer)).json()
        assert (
            me["user"]["username"] == (await alice.get("/api/auth/me")).json()["user"]["username"]
        )
        # Revoked, it stops working.
        token_id = created.json()["token_id"]
        assert (await alice.delete(f"/api/auth/tokens/{token_id}")).status_code == 204
        assert (await script.get("/api/chats", headers=bearer)).status_code == 401
    listed = (await alice.get("/api/auth/tokens")).json()
    assert token_id not in [t["token_id"] for t in listed]


async def test_sessions_expire_and_a_password_change_ends_the_others(
    auth_url: str, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    name = await new_user(pool, "carol")
    laptop, phone, tablet = [await sign_in(auth_url, name) for _ in range(3)]
    try:
        # The tablet's session runs out.
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE sessions SET expires_at = now() - interval '1 second'"
                " WHERE token_hash = sha256(convert_to(%s, 'UTF8'))",
                (tablet.cookies["resolveai_session"],),
            )
        assert (await tablet.get("/api/chats")).status_code == 401
        assert (await phone.get("/api/chats")).status_code == 200

        wrong = await laptop.post("/api/auth/password",
                                  json={"current_password": "not my password",
                                        "new_password": "a new long password"})  # fmt: skip
        assert wrong.status_code == 403
        short = await laptop.post(
            "/api/auth/password", json={"current_password": PASSWORD, "new_password": "short"}
        )
        assert short.status_code == 422
        changed = await laptop.post("/api/auth/password",
                                    json={"current_password": PASSWORD,
                                          "new_password": "a new long password"})  # fmt: skip
        assert changed.status_code == 200, changed.text
        laptop.headers["X-CSRF-Token"] = changed.json()["csrf_token"]
        # The phone is signed out; the laptop, signed in again by the answer, goes on.
        assert (await phone.get("/api/chats")).status_code == 401
        assert (await laptop.get("/api/chats")).status_code == 200
        assert (await laptop.patch("/api/settings", json={"memory_paused": False})).is_success
        old = await laptop.post("/api/auth/login", json={"username": name, "password": PASSWORD})
        assert old.status_code == 401
        (await sign_in(auth_url, name, "a new long password")).cookies.clear()
        # Signing out ends the session for good (its cookie, sent again, is refused).
        cookie = laptop.cookies["resolveai_session"]
        assert (await laptop.post("/api/auth/logout")).status_code == 204
        replayed = await tablet.get("/api/chats", cookies={"resolveai_session": cookie})
        assert replayed.status_code == 401
    finally:
        for client in (laptop, phone, tablet):
            await client.aclose()


async def test_failed_sign_ins_are_throttled_even_for_the_right_password(
    auth_url: str, chat_services: Services
) -> None:
    name = await new_user(chat_services.database.pool, "dave")
    limit = chat_services.settings.login_max_failures
    async with httpx.AsyncClient(base_url=auth_url, timeout=60) as guesser:
        for attempt in range(limit):
            response = await guesser.post(
                "/api/auth/login", json={"username": name, "password": f"guess number {attempt}"}
            )
            assert response.status_code == 401
        throttled = await guesser.post(
            "/api/auth/login", json={"username": name.upper(), "password": PASSWORD}
        )
        assert throttled.status_code == 429, throttled.text
        assert 0 < int(throttled.headers["retry-after"]) <= 901
        assert "try again in" in throttled.json()["error"]


async def test_admins_add_and_disable_users_and_a_disabled_one_is_signed_out(
    auth_url: str, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    admin = await sign_in(auth_url, await new_user(pool, "admin", admin=True))
    name = unique("erin")
    try:
        added = await admin.post("/api/admin/users",
                                 json={"username": name, "password": PASSWORD})  # fmt: skip
        assert added.status_code == 201 and added.json()["is_admin"] is False
        taken = await admin.post("/api/admin/users",
                                 json={"username": name.upper(), "password": PASSWORD})  # fmt: skip
        assert taken.status_code == 409
        erin = await sign_in(auth_url, name)
        token = (await erin.post("/api/auth/tokens", json={"name": "cli"})).json()["token"]
        assert (await erin.get("/api/admin/users")).status_code == 403  # not an admin
        listed = (await admin.get("/api/admin/users")).json()
        assert name in [u["username"] for u in listed]
        user_id = added.json()["user_id"]
        disabled = await admin.patch(f"/api/admin/users/{user_id}", json={"disabled": True})
        assert disabled.status_code == 200 and disabled.json()["disabled"] is True
        assert (await erin.get("/api/chats")).status_code == 401
        bearer = {"Authorization": f"Bearer {token}"}
        assert (await admin.get("/api/chats", headers=bearer)).status_code == 401
        refused = await admin.post("/api/auth/login", json={"username": name, "password": PASSWORD})
        assert refused.status_code == 401
        me = (await admin.get("/api/auth/me")).json()["user"]
        myself = await admin.patch(f"/api/admin/users/{me['user_id']}", json={"disabled": True})
        assert myself.status_code == 409
        await erin.aclose()
    finally:
        await admin.aclose()


# --- real server processes ---------------------------------------------------------------------


def _messages_until_limited(url: str, cookie_jar: httpx.Cookies, csrf: str, n: int) -> list[int]:
    statuses = []
    with httpx.Client(base_url=url, cookies=cookie_jar, timeout=60) as client:
        for i in range(n):
            with client.stream("POST", "/api/messages", json={"content": f"message {i}"},
                               headers={"X-CSRF-Token": csrf}) as response:  # fmt: skip
                response.read()
                statuses.append(response.status_code)
                if response.status_code == 429:
                    assert int(response.headers["retry-after"]) > 0
    return statuses


@pytest.fixture
def data_dir_with_a_chat(tmp_path: Path) -> Iterator[Path]:
    """A data folder a single-user server (AUTH_MODE=none) left one chat in."""
    data = tmp_path / "data"
    server = RunningServer(data, tmp_path / "single.log", SCRIPTED_SERVER, **SCRIPTED)
    try:
        server.wait_healthy()
        with (
            httpx.Client(base_url=server.url, timeout=60) as client,
            client.stream("POST", "/api/messages", json={"content": "My old chat"}) as r,
        ):
            assert r.status_code == 200
            r.read()
    finally:
        server.stop()
    yield data


SCRIPTED = {"MODELS_CONFIG": "tests/models.scripted.yaml", "SCRIPTED_WORDS": "3",
            "SCRIPTED_DELAY": "0"}  # fmt: skip


async def test_processes_starting_at_once_make_one_first_admin_and_all_start(
    memory_pool: AsyncConnectionPool, settings: Settings
) -> None:
    """Each process checks for an account, finds none, and makes the admin: the second one's
    insert finds the name taken, which is the first one's doing, not a reason to refuse to start."""
    admin = {
        "auth_mode": "password",
        "admin_username": "admin",
        "admin_password": SecretStr(PASSWORD),
    }
    password_settings = settings.model_copy(update=admin)
    starts = [prepare_accounts(password_settings, memory_pool) for _ in range(3)]
    assert await asyncio.gather(*starts, return_exceptions=True) == [None, None, None]
    assert [u["username"] for u in await accounts.list_users(memory_pool)] == ["admin"]

    # A name taken by an account nobody can sign in to still stops a start.
    async with memory_pool.connection() as conn:
        await conn.execute("UPDATE users SET username = 'someone', password_hash = NULL")
        await conn.execute("INSERT INTO users (username) VALUES ('Admin')")
    with pytest.raises(StartupError, match="'admin' is taken"):
        await prepare_accounts(password_settings, memory_pool)


def test_the_first_admin_gets_the_data_and_limits_hold_across_two_processes(
    tmp_path: Path, data_dir_with_a_chat: Path
) -> None:
    settings = {**SCRIPTED, "AUTH_MODE": "password", "ADMIN_USERNAME": "admin",
                "ADMIN_PASSWORD": PASSWORD, "RATE_LIMIT_MESSAGES_PER_MINUTE": "3"}  # fmt: skip
    servers = [
        RunningServer(data_dir_with_a_chat, tmp_path / f"auth{i}.log", SCRIPTED_SERVER, **settings)
        for i in range(2)
    ]
    try:
        for server in servers:
            server.wait_healthy()
        first, second = (server.url for server in servers)
        with httpx.Client(base_url=first, timeout=60) as client:
            signed = client.post(
                "/api/auth/login", json={"username": "admin", "password": PASSWORD}
            )
            assert signed.status_code == 200, signed.text
            csrf, jar = signed.json()["csrf_token"], client.cookies
            # The single-user install's chat is the first admin's now.
            titles = [c["title"] for c in client.get("/api/chats").json()]
            assert titles == ["My old chat"]
        # The session is in Postgres: the second process knows it too.
        assert httpx.get(f"{second}/api/auth/me", cookies=jar).json()["user"]["username"] == "admin"
        # Three messages a (clock) minute: start early in one, so all of them fall in it.
        if time.time() % 60 > 40:
            time.sleep(61 - time.time() % 60)
        statuses = _messages_until_limited(first, jar, csrf, 2)
        statuses += _messages_until_limited(second, jar, csrf, 2)
        statuses += _messages_until_limited(first, jar, csrf, 1)
        assert statuses == [200, 200, 200, 429, 429], statuses
    finally:
        for server in servers:
            server.stop()


def test_without_accounts_the_server_refuses_an_address_others_can_reach(tmp_path: Path) -> None:
    code, output = run_server_expecting_failure(tmp_path, APP_HOST="0.0.0.0")
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "AUTH_MODE=none: refusing to serve on 0.0.0.0" in lines[0], output
    code, output = run_server_expecting_failure(tmp_path, AUTH_MODE="password")
    assert code != 0 and "no account exists yet: set ADMIN_USERNAME and ADMIN_PASSWORD" in output, (
        output
    )
