"""The HTTP layer's guards, from outside, over real HTTP against the real app (uvicorn on a loopback
port): the Host allow-list (DNS rebinding) and the Origin check (cross-site requests), text Postgres
cannot store, the request body cap, one JSON error shape for every error, the API docs switch."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from chat.runner import start_turn
from core import chat_store
from core.accounts import LOCAL_USER_ID
from core.config import Settings
from core.services import Services
from tests.chat_client import send, serve_app


def assert_error_shape(response: httpx.Response, status: int) -> dict:
    """The one error shape: `{"error": "<what>", "request_id": "<id>"}`, the id also a header."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error", "request_id"}, body
    assert isinstance(body["error"], str) and body["error"]
    assert body["request_id"] == response.headers["x-request-id"]
    return body


async def chat_count(pool) -> int:
    async with pool.connection() as conn:
        return (await (await conn.execute("SELECT count(*) FROM chats")).fetchone())[0]


@pytest.fixture(scope="module")
async def port(base_url: str) -> int:
    return int(base_url.rsplit(":", 1)[1])


# --- Host allow-list and Origin check ------------------------------------------------------------


FORGED_HOSTS = ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example",
                "localhost.evil.example:{port}", "[::2]:{port}", "", "a b"]  # fmt: skip


@pytest.mark.parametrize("host", FORGED_HOSTS)
async def test_a_forged_host_is_refused_before_anything_is_read(client, port, model, host) -> None:
    # A DNS-rebinding page on evil.example, its name now pointing at 127.0.0.1, sends its own name.
    model.push({"text": "secret reply"})
    await send(client, "My secret is the blue door")
    forged = host.format(port=port)
    for method, url in (("GET", "/api/chats"), ("GET", "/api/memories"), ("GET", "/"),
                        ("POST", "/api/messages")):  # fmt: skip
        response = await client.request(
            method, url, headers={"host": forged}, json={"content": "x"}
        )
        body = assert_error_shape(response, 400)
        assert "Host" in body["error"] and "blue door" not in response.text


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}",
                                  "LOCALHOST:{port}", "127.0.0.1", "localhost"])  # fmt: skip
async def test_loopback_names_are_accepted(client, port, host) -> None:
    response = await client.get("/api/chats", headers={"host": host.format(port=port)})
    assert response.status_code == 200, response.text


async def test_a_cross_site_request_changes_nothing(client, model, base_url) -> None:
    model.push({"text": "kept"})
    chat_id = (await send(client, "A chat a page must not touch"))[0]["chat_id"]
    calls = len(model.calls)
    for headers in (
        {"origin": "http://evil.example"},
        {"origin": "http://evil.example:8000"},
        {"origin": base_url.replace("127.0.0.1", "localhost")},  # another origin, same machine
        {"origin": "null"},  # sandboxed frames, file:// pages
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},  # e.g. another port of localhost
    ):
        attempts = [
            client.patch(f"/api/chats/{chat_id}", json={"title": "pwned"}, headers=headers),
            client.delete(f"/api/chats/{chat_id}", headers=headers),
            client.post("/api/messages", json={"content": "injected"}, headers=headers),
            client.patch("/api/settings", json={"memory_paused": True}, headers=headers),
            client.delete("/api/memories?confirm=x", headers=headers),
        ]
        for response in await asyncio.gather(*attempts):
            body = assert_error_shape(response, 403)
            assert "cross-origin" in body["error"]
    assert len(model.calls) == calls
    chat = (await client.get(f"/api/chats/{chat_id}/messages")).json()
    assert len(chat) == 2
    titles = [c["title"] for c in (await client.get("/api/chats")).json()]
    assert "pwned" not in titles
    assert (await client.get("/api/settings")).json()["memory_paused"] is False


async def test_same_origin_and_non_browser_requests_are_accepted(client, model, base_url) -> None:
    model.push({"text": "a"}, {"text": "b"})
    chat_id = (await send(client, "Renamed three ways"))[0]["chat_id"]
    for headers in (
        {"origin": base_url, "sec-fetch-site": "same-origin"},  # the browser UI
        {"sec-fetch-site": "same-origin"},
        {"sec-fetch-site": "none"},  # typed by the user
        {},  # curl, scripts
    ):
        response = await client.patch(
            f"/api/chats/{chat_id}", json={"title": "ok"}, headers=headers
        )
        assert response.status_code == 200, (headers, response.text)
    # Reading is never blocked by Origin: a cross-site page cannot read the answer anyway (no CORS).
    response = await client.get("/api/chats", headers={"origin": "http://evil.example"})
    assert response.status_code == 200


@pytest.fixture
async def app_with(chat_services: Services):
    """Serve the real app with some settings changed (its services those of the tests)."""

    def factory(**changes: object):
        from server import create_app

        settings: Settings = chat_services.settings.model_copy(update=changes)
        return serve_app(create_app(settings=settings, services=chat_services))

    return factory


async def test_allowed_hosts_and_public_url_behind_a_proxy(app_with) -> None:
    async with (
        app_with(
            allowed_hosts=["chat.example.com", "10.0.0.5:8443"],
            app_public_url="https://resolve.example.org",
        ) as url,  # fmt: skip
        httpx.AsyncClient(base_url=url) as http,
    ):
        for host, status in (
            ("chat.example.com", 200),
            ("CHAT.example.com:443", 200),
            ("resolve.example.org", 200),
            ("10.0.0.5:8443", 200),
            ("10.0.0.5:9999", 400),  # listed with its port: that port only
            ("example.com", 400),
            ("127.0.0.1", 200),  # loopback still works on the machine itself
        ):
            response = await http.get("/api/config", headers={"host": host})
            assert response.status_code == status, (host, response.text)
        # A proxy that rewrites Host to 127.0.0.1 still passes the browser's Origin through.
        proxied = await http.patch(
            "/api/settings", json={"memory_paused": False},
            headers={"origin": "https://resolve.example.org"},
        )  # fmt: skip
        assert proxied.status_code == 200, proxied.text
        other = await http.patch(
            "/api/settings", json={"memory_paused": False},
            headers={"origin": "https://chat.example.com.evil.example"},
        )  # fmt: skip
        assert_error_shape(other, 403)


async def test_a_wildcard_bind_accepts_addresses_but_not_names(app_with) -> None:
    # Bound to every interface, the server is reached by IP on the LAN; an IP address in Host
    # cannot come from DNS rebinding (the page's own name would be sent), a name can.
    async with app_with(app_host="0.0.0.0") as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/api/config", headers={"host": "192.168.1.20:8000"})).is_success
        assert (await http.get("/api/config", headers={"host": "[fe80::1]:8000"})).is_success
        refused = await http.get("/api/config", headers={"host": "nas.local:8000"})
        assert "ALLOWED_HOSTS" in assert_error_shape(refused, 400)["error"]


async def test_allowed_hosts_star_turns_the_host_check_off(app_with) -> None:
    async with app_with(allowed_hosts=["*"]) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/api/config", headers={"host": "anything.example"})).is_success


# --- text Postgres cannot store ------------------------------------------------------------------

NUL = "bad\x00text"
SURROGATE = "bad\ud800text"  # a lone surrogate: valid JSON (\ud800), not encodable as UTF-8


def unstorable_requests(chat_id: str, memory_id: str) -> list[tuple[str, str, object]]:
    requests: list[tuple[str, str, object]] = []
    for text in (NUL, SURROGATE):
        requests += [
            ("POST", "/api/messages", {"content": text}),
            ("POST", "/api/messages", {"content": "fine", "chat_id": None, text: 1}),  # a key
            ("POST", f"/api/chats/{chat_id}/messages", {"content": text}),
            ("PATCH", f"/api/chats/{chat_id}", {"title": text}),
            ("PATCH", f"/api/memories/{memory_id}", {"content": text}),
            ("PATCH", f"/api/memories/{memory_id}", {"quote": text}),
            ("PATCH", "/api/settings", {"memory_paused": False, "note": [text]}),
        ]
    requests += [
        ("GET", "/api/chats?q=bad%00text", None),
        ("GET", "/api/chats?q%00=1", None),
        ("GET", "/api/memories?q=bad%00text", None),
        ("DELETE", "/api/memories?confirm=a%00b", None),
        ("GET", "/api/config?anything=%00", None),
        ("GET", "/index%00.html", None),
        ("GET", f"/api/chats/{chat_id}%00/messages", None),
    ]
    return requests


async def test_text_postgres_cannot_store_is_refused_everywhere(client, model, chat_services):
    model.push({"text": "ok"})
    chat_id = (await send(client, "A chat to aim at"))[0]["chat_id"]
    calls = len(model.calls)
    pool = chat_services.database.pool
    before = await chat_count(pool)
    for method, url, body in unstorable_requests(chat_id, str(uuid.uuid4())):
        # Sent as JSON text by hand: the lone surrogate cannot be encoded by httpx's json=.
        content = json.dumps(body) if body is not None else None
        response = await client.request(
            method, url, content=content, headers={"content-type": "application/json"}
        )
        error = assert_error_shape(response, 422)["error"]
        assert "NUL" in error or "Unicode" in error, (method, url, error)
    assert await chat_count(pool) == before  # no half-created chat
    assert len((await client.get(f"/api/chats/{chat_id}/messages")).json()) == 2
    assert len(model.calls) == calls  # no message reached the model


async def test_a_failed_first_message_leaves_no_chat_behind(model, chat_services) -> None:
    # Below the HTTP guard: a first message the database refuses must not leave its new chat.
    pool = chat_services.database.pool
    before = await chat_count(pool)
    with pytest.raises(Exception, match=r"NUL|0x00"):
        # The NUL past the title's first 60 characters: the title alone is storable.
        await start_turn(
            chat_services,
            None,
            "word " * 20 + "half\x00written",
            use_web=False,
            user_id=LOCAL_USER_ID,
        )
    assert await chat_count(pool) == before


# --- the request body cap ------------------------------------------------------------------------


async def test_a_body_over_the_cap_is_refused_before_it_is_read(client, model, chat_services):
    limit = chat_services.settings.max_request_bytes
    pool = chat_services.database.pool
    before = await chat_count(pool)
    big = json.dumps({"content": "x" * (limit + 10)}).encode()

    declared = await client.post(
        "/api/messages", content=big, headers={"content-type": "application/json"}
    )
    assert "1 MB" in assert_error_shape(declared, 413)["error"]

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: Transfer-Encoding: chunked
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    streamed = await client.post(
        "/api/messages", content=chunked(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in streamed.request.headers
    assert_error_shape(streamed, 413)
    assert await chat_count(pool) == before
    assert model.calls == []


async def test_a_body_under_the_cap_goes_through_whole(client, model) -> None:
    model.push({"text": "read it"})
    content = "y" * 30_000 + " end"

    async def chunked() -> AsyncIterator[bytes]:
        data = json.dumps({"content": content}).encode()
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]

    async with client.stream(
        "POST", "/api/messages", content=chunked(), headers={"content-type": "application/json"}
    ) as response:
        assert response.status_code == 200
        await response.aread()
    assert model.calls[0]["messages"][-1]["content"].endswith(" end")


async def test_the_cap_is_a_setting(app_with) -> None:
    async with app_with(max_request_bytes=2048) as url, httpx.AsyncClient(base_url=url) as http:
        small = await http.patch(f"/api/chats/{uuid.uuid4()}", json={"title": "t" * 100})
        assert small.status_code == 404
        big = await http.patch(f"/api/chats/{uuid.uuid4()}", json={"title": "t" * 3000})
        assert "2 KB" in assert_error_shape(big, 413)["error"]


# --- one JSON error shape ------------------------------------------------------------------------


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("method", "url", "content", "headers", "status"),
    [
        ("GET", "/api/nothing-here", None, {}, 404),
        ("POST", "/api/nothing/here", b"{}", {}, 404),
        ("GET", "/no-such-page.html", None, {}, 404),
        ("PUT", "/api/chats", b"{}", {}, 405),
        ("DELETE", "/api/config", None, {}, 405),
        ("POST", "/api/messages", b'{"content": "caf\xe9"}', JSON, 422),
        ("POST", "/api/messages", b'{"content": ', {"content-type": "application/json"}, 422),
        ("POST", "/api/messages", b"content=hi", {"content-type": "text/plain"}, 422),
        ("POST", "/api/messages", b"[1, 2]", {"content-type": "application/json"}, 422),
        ("GET", "/api/chats?limit=lots", None, {}, 422),
        ("GET", "/api/chats/not-an-id/messages", None, {}, 422),
    ],
)
async def test_every_error_has_the_one_json_shape(client, method, url, content, headers, status):
    response = await client.request(method, url, content=content, headers=headers)
    body = assert_error_shape(response, status)
    assert "detail" not in body
    if status == 405:
        assert response.headers["allow"]


async def test_an_unexpected_error_is_a_json_500_with_a_request_id_in_the_log(
    client, monkeypatch, caplog
) -> None:
    async def broken(*args: object, **kwargs: object) -> list:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(chat_store, "list_chats", broken)
    with caplog.at_level(logging.ERROR):
        response = await client.get("/api/chats")
    body = assert_error_shape(response, 500)
    assert "fire" not in body["error"]  # internals stay in the log
    assert body["request_id"] in body["error"]  # what the user quotes
    logged = [r for r in caplog.records if body["request_id"] in r.getMessage()]
    assert logged and logged[0].exc_info is not None
    assert response.headers["content-security-policy"]  # headers kept on errors too


async def test_every_response_has_a_request_id(client) -> None:
    first, second = await client.get("/api/config"), await client.get("/api/config")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


# --- API docs -------------------------------------------------------------------------------------


async def test_docs_pages_are_off_by_default_the_schema_stays(client) -> None:
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert_error_shape(await client.get(path), 404)
    schema = await client.get("/openapi.json")
    assert schema.status_code == 200 and schema.json()["info"]["title"] == "ResolveAI"


async def test_docs_pages_when_switched_on(app_with) -> None:
    async with app_with(api_docs=True) as url, httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/docs")
        assert page.status_code == 200 and "swagger" in page.text.lower()
        # They load Swagger UI from a CDN: outside the app's CSP, so only when asked for.
        assert "content-security-policy" not in page.headers
        assert (await http.get("/redoc")).status_code == 200
        assert (await http.get("/api/config")).headers["content-security-policy"]
