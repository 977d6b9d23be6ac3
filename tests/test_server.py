"""The real run command (`python server.py`) as a new user runs it: start-up log, health, restarts,
two processes on one data folder, and one-line errors for bad configuration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.config import PROJECT_ROOT, load_settings
from core.db import Database
from core.services import open_services
from rag.embedder import Embedder
from tests.chat_client import free_port

START_TIMEOUT = 120


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("_API_KEY") and not key.startswith(("LANGFUSE_", "DATABASE_URL"))
    }
    # No warm-up: it would assemble the local model's 1.1 GB and start it in every test here
    # (tests/test_local_model.py runs the model; this module tests the server around it).
    env.update(APP_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", LOCAL_MODEL_WARM_UP="false")
    env.setdefault("SHUTDOWN_GRACE_SECONDS", "0")  # the tests of the grace set it
    env.update(extra)
    return env


class RunningServer:
    """`python server.py` in a subprocess, its output collected in a file."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        command: tuple[str, ...] = ("server.py",),
        **extra: str,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, *command],
            cwd=PROJECT_ROOT,
            env=server_env(data_dir, APP_PORT=str(self.port), **extra),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_healthy(self, warm: bool = False) -> dict:
        """/api/health once the app answers it 200 (`warm`: and the embedder has loaded), not
        core/launcher.py's "starting" while the server imports."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.output()}")
            try:
                response = httpx.get(f"{self.url}/api/health", timeout=5)
                health = response.json() if response.status_code == 200 else {}
                if health and "starting" not in health and not (warm and health["warming_up"]):
                    return health
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"server not healthy in {START_TIMEOUT} s:\n{self.output()}")

    def wait_exit(self, seconds: float) -> int:
        """The exit code, once the process has exited; if it has not within `seconds`, a failure
        with its log, and in it what the scripted server was waiting for (its SIGUSR1 dump)."""
        try:
            return self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(2)
            raise AssertionError(
                f"the server did not exit within {seconds:g} s:\n{self.output()[-20000:]}"
            ) from None

    def stop(self) -> int:
        """SIGTERM, as a service manager would; uvicorn shuts down, then re-raises the signal."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator:
    servers: list[RunningServer] = []

    def start(
        data_dir: Path, command: tuple[str, ...] = ("server.py",), **extra: str
    ) -> RunningServer:
        server = RunningServer(data_dir, tmp_path / f"server{len(servers)}.log", command, **extra)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def run_server_expecting_failure(tmp_path: Path, **extra: str) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "server.py"],
        cwd=PROJECT_ROOT,
        env=server_env(tmp_path / "data", **{"APP_PORT": str(free_port()), **extra}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


def test_first_start_with_no_configuration(tmp_path: Path, start_server) -> None:
    server = start_server(tmp_path / "data")
    health = server.wait_healthy(warm=True)
    assert health["ok"] is True and health["warming_up"] is False
    assert health["database"]["ok"] is True
    assert health["embedder"] == {"model": "all-MiniLM-L6-v2", "state": "ready"}
    assert health["models"]["chat"].startswith("local/qwen2.5-coder-1.5b")
    assert health["local_model"]["state"] == "not started"  # starts on first use
    page = httpx.get(server.url + "/", timeout=5)
    assert page.status_code == 200 and "ResolveAI" in page.text

    assert server.stop() in (0, -signal.SIGTERM)
    log = server.output()
    for line in (
        "Database: embedded Postgres 18 at",
        "Database: applied migration 0001_init",
        "Embedder: all-MiniLM-L6-v2 (bundled, offline), 384 dims",
        "Chat model: local/qwen2.5-coder-1.5b-instruct",
        "Utility model: local/qwen2.5-coder-1.5b-instruct",
        "Web search: off (TAVILY_API_KEY not set)",
        "Tracing: off",
        "Server imported in",
        "ResolveAI is ready",
        "ResolveAI stopped",
    ):
        assert line in log, f"missing {line!r} in:\n{log}"
    assert "Traceback" not in log
    # It listened before the imports ended (core/launcher.py), and was ready after them.
    assert log.index("Uvicorn running on") < log.index("Server imported in")
    assert log.index("Server imported in") < log.index("ResolveAI is ready")


async def test_two_processes_share_one_data_folder_and_restarts_keep_data(
    tmp_path: Path, start_server
) -> None:
    data_dir = tmp_path / "data"
    first, second = start_server(data_dir), start_server(data_dir)
    first.wait_healthy()
    second.wait_healthy()

    settings = load_settings(_env_file=None, app_data_dir=data_dir)
    database = await Database.open(settings)
    try:
        async with database.pool.connection() as conn:
            applied = await (
                await conn.execute("SELECT count(*) FROM schema_migrations")
            ).fetchone()
            cursor = await conn.execute(
                "INSERT INTO chats (title) VALUES (%s) RETURNING chat_id", ("kept across restarts",)
            )
            chat_id = (await cursor.fetchone())[0]
        assert applied[0] == len(list((PROJECT_ROOT / "core" / "migrations").glob("*.sql")))
    finally:
        await database.close()

    assert first.stop() in (0, -signal.SIGTERM)
    assert second.wait_healthy()["database"]["ok"] is True  # the other's exit left Postgres up
    assert second.stop() in (0, -signal.SIGTERM)

    restarted = start_server(data_dir)
    restarted.wait_healthy()
    database = await Database.open(settings)
    try:
        async with database.pool.connection() as conn:
            row = await (
                await conn.execute("SELECT title FROM chats WHERE chat_id = %s", (chat_id,))
            ).fetchone()
        assert row == ("kept across restarts",)
    finally:
        await database.close()
    assert "applied migration" not in restarted.output()


def test_wrong_database_url_is_one_clear_line(tmp_path: Path) -> None:
    code, output = run_server_expecting_failure(
        tmp_path, DATABASE_URL="postgresql://app:hunter2@127.0.0.1:1/nowhere"
    )
    assert code != 0
    errors = [line for line in output.splitlines() if "Cannot start:" in line]
    assert len(errors) == 1, output
    assert "DATABASE_URL" in errors[0]
    assert "Traceback" not in output
    assert "hunter2" not in output


def test_a_database_url_of_another_kind_is_refused_without_its_password(tmp_path: Path) -> None:
    code, output = run_server_expecting_failure(
        tmp_path, DATABASE_URL="mysql://app:hunter2@127.0.0.1/app"
    )
    assert code == 2
    assert "Invalid setting DATABASE_URL = 'mysql://app:***@127.0.0.1/app'" in output, output
    assert "hunter2" not in output and "Traceback" not in output


def test_invalid_setting_is_one_clear_line(tmp_path: Path) -> None:
    code, output = run_server_expecting_failure(tmp_path, APP_PORT="not-a-port")
    assert code == 2
    assert "Invalid setting APP_PORT" in output
    assert "Traceback" not in output


SCRIPTED_SERVER = ("-m", "tests.scripted_server")  # server.py with every model role scripted


def scripted(words: int, **extra: str) -> dict[str, str]:
    """SCRIPTED_SERVER's settings: replies of `words` words (one every 0.05 s)."""
    config = str(PROJECT_ROOT / "tests" / "models.scripted.yaml")
    return {"MODELS_CONFIG": config, "SCRIPTED_WORDS": str(words), **extra}


def read_sse(response: httpx.Response) -> Iterator[dict]:
    data = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())
        elif not line and data:
            yield json.loads("\n".join(data))
            data = []


def test_a_server_killed_mid_reply_loses_nothing_and_frees_the_chat(
    tmp_path: Path, start_server
) -> None:
    data = tmp_path / "data"
    settings = scripted(400, CHAT_LEASE_SECONDS="3")
    first = start_server(data, SCRIPTED_SERVER, **settings)
    first.wait_healthy()
    streamed, chat_id = [], None
    body = {"content": "Write a lot"}
    with httpx.stream("POST", f"{first.url}/api/messages", json=body, timeout=30) as response:
        for event in read_sse(response):
            chat_id = event.get("chat_id", chat_id)
            if event["type"] == "token":
                streamed.append(event["text"])
            if len(streamed) == 20:
                first.process.kill()  # SIGKILL mid-reply: no shutdown code runs
                break
    first.process.wait()
    killed_at = time.monotonic()

    second = start_server(data, SCRIPTED_SERVER, **settings)
    second.wait_healthy()
    # The chat takes a new message once the dead server's lease (3 s) is over; the reply it was
    # writing is there first, as far as it had reached the event log.
    time.sleep(max(0.0, 3.5 - (time.monotonic() - killed_at)))
    with httpx.stream(
        "POST", f"{second.url}/api/chats/{chat_id}/messages", json={"content": "Go on"}, timeout=60
    ) as response:
        assert response.status_code == 200, response.read()
        last = list(read_sse(response))[-1]
    assert last["type"] == "done"
    saved = httpx.get(f"{second.url}/api/chats/{chat_id}/messages", timeout=10).json()
    assert [(m["role"], m["status"]) for m in saved] == [
        ("user", "complete"), ("assistant", "interrupted"), ("user", "complete"),
        ("assistant", "complete"),
    ]  # fmt: skip
    recovered = saved[1]["content"].split()
    full = [f"word{i}" for i in range(400)]
    assert recovered == full[: len(recovered)]
    # Lost at most what was not yet flushed (FLUSH_SECONDS of tokens) when the server died.
    assert len(recovered) >= len("".join(streamed).split()) - 3, (recovered, streamed)


async def test_the_server_answers_while_the_embedder_loads(
    settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up does not wait for the bundled embedder: health is ok and says it is warming up,
    and a search asked meanwhile waits for the load and then runs."""
    release = threading.Event()
    real_open = Embedder._open_model

    def slow_open(self: Embedder) -> Any:
        release.wait(60)
        return real_open(self)

    monkeypatch.setattr(Embedder, "_open_model", slow_open)
    services = await open_services(settings)
    try:
        health = await services.health()
        assert health["ok"] is True and health["warming_up"] is True
        assert health["embedder"]["state"] == "loading"
        query = asyncio.ensure_future(services.embedder.embed_query("hello"))
        await asyncio.sleep(0.2)
        assert not query.done()  # queued behind the load
        release.set()
        assert (await asyncio.wait_for(query, 60)).shape == (384,)
        await asyncio.wait_for(services.warming_up, 60)
        health = await services.health()
        assert health["warming_up"] is False and health["embedder"]["state"] == "ready"
    finally:
        release.set()
        await services.close()


def test_sigterm_lets_the_replies_being_written_finish_within_the_grace(
    tmp_path: Path, start_server
) -> None:
    """A rolling deploy: the server stops taking requests and ends its streams at once (the UI
    follows a dropped stream again, through another process behind a balancer: see
    tests/test_scale_out.py), while the replies it is writing, one watched and one whose reader
    left, run to their end and are saved before it exits."""
    data = tmp_path / "data"
    server = start_server(data, SCRIPTED_SERVER, **scripted(60, SHUTDOWN_GRACE_SECONDS="30"))
    server.wait_healthy()
    chats = []
    with httpx.stream("POST", f"{server.url}/api/messages", json={"content": "Left"}) as response:
        for event in read_sse(response):
            chats.append(event.get("chat_id"))
            break  # the reader leaves; the reply goes on
    events = []
    with (
        httpx.stream(
            "POST", f"{server.url}/api/messages", json={"content": "Watched"}, timeout=60
        ) as response,
        contextlib.suppress(httpx.RemoteProtocolError),
    ):  # the stream ends at SIGTERM
        for event in read_sse(response):
            events.append(event)
            if len([e for e in events if e["type"] == "token"]) == 3:
                server.process.send_signal(signal.SIGTERM)
    chats.append(next(e["chat_id"] for e in events if "chat_id" in e))
    assert events[-1]["type"] != "done"
    server.wait_exit(60)
    log = server.output()
    assert "Shutting down: waiting up to 30 s for 2 replies" in log
    assert log.count("reply saved") == 2
    assert log.rindex("reply saved") < log.index("ResolveAI stopped")

    again = start_server(data, SCRIPTED_SERVER, **scripted(60))
    again.wait_healthy()
    full = " ".join(f"word{i}" for i in range(60))
    for chat_id in chats:
        saved = httpx.get(f"{again.url}/api/chats/{chat_id}/messages", timeout=10).json()
        assert [(m["role"], m["status"]) for m in saved] == [
            ("user", "complete"), ("assistant", "complete"),
        ]  # fmt: skip
        assert saved[1]["content"] == full


def test_sigterm_saves_a_reply_longer_than_the_grace_as_interrupted(
    tmp_path: Path, start_server
) -> None:
    data = tmp_path / "data"
    server = start_server(data, SCRIPTED_SERVER, **scripted(400, SHUTDOWN_GRACE_SECONDS="1"))
    server.wait_healthy()
    streamed, chat_id = [], None
    with httpx.stream(
        "POST", f"{server.url}/api/messages", json={"content": "Write a lot"}, timeout=60
    ) as response:
        try:
            for event in read_sse(response):
                chat_id = event.get("chat_id", chat_id)
                if event["type"] == "token":
                    streamed.append(event["text"])
                    if len(streamed) == 3:
                        server.process.send_signal(signal.SIGTERM)
        except httpx.RemoteProtocolError:
            pass  # the grace ran out: the server closed the stream
    server.wait_exit(60)  # about 2 s of grace at most, not the reply's 20 s

    again = start_server(data, SCRIPTED_SERVER, **scripted(400))
    again.wait_healthy()
    saved = httpx.get(f"{again.url}/api/chats/{chat_id}/messages", timeout=10).json()
    assert [(m["role"], m["status"]) for m in saved] == [
        ("user", "complete"), ("assistant", "interrupted"),
    ]  # fmt: skip
    kept = saved[1]["content"].split()
    assert len(streamed) <= len(kept) < 400
    assert kept == [f"word{i}" for i in range(len(kept))]


def test_migrate_is_a_command_of_its_own_safe_when_run_twice_at_once(
    tmp_path: Path, standalone_postgres: str
) -> None:
    """A deploy on a Postgres the app does not own migrates before starting servers; two at once
    (two replicas' deploy steps) apply each migration once, and a later run applies nothing."""
    env = server_env(tmp_path / "data", DATABASE_URL=standalone_postgres)
    command = [sys.executable, "server.py", "migrate"]
    both = [
        subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120)[0] for process in both]
    assert [process.returncode for process in both] == [0, 0], outputs
    migrations = sorted(p.stem for p in (PROJECT_ROOT / "core" / "migrations").glob("*.sql"))
    applied = [line.split("applied migration ")[1] for o in outputs for line in o.splitlines()
               if "applied migration " in line]  # fmt: skip
    assert sorted(applied) == migrations  # each once, by one or the other
    assert all(f"schema up to date ({len(migrations)} migrations)" in o for o in outputs)
    assert not (tmp_path / "data" / "pg").exists()  # the embedded server was never started

    again = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert again.returncode == 0 and "applied migration" not in again.stderr + again.stdout

    wrong = subprocess.run([*command, "--now"], cwd=PROJECT_ROOT, env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert wrong.returncode == 2 and "usage: python server.py migrate" in wrong.stderr
