"""core/launcher.py: the server listens before the app is imported, health says it is starting,
other requests wait for the app, and a start-up that fails stops the server with its one line.

The app here is a small Starlette app in a module written for each test, whose import waits for
the test's go-ahead: the real server's import is what it stands for (tests/test_server.py runs
`python server.py` itself).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import textwrap
import threading
import types
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from core.launcher import StartingApp
from core.logs import startup_traceback_filter
from tests.chat_client import free_port

APP_MODULE = """
import sys
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.errors import StartupError
from core.logs import report_startup_failure

gate = sys.modules["launcher_test_gate"]
gate.import_started.set()
gate.release.wait(30)
if gate.broken_import:
    raise RuntimeError("a module of the app is broken")


@asynccontextmanager
async def lifespan(app):
    gate.events.append("startup")
    if gate.no_database:
        report_startup_failure("Cannot connect to the database at DATABASE_URL")
        raise StartupError("Cannot connect to the database at DATABASE_URL")
    yield
    gate.events.append("shutdown")


async def health(request):
    return JSONResponse({"ok": True, "database": {"ok": True}})


async def hello(request):
    return JSONResponse({"hello": "world"})


app = Starlette(lifespan=lifespan, routes=[Route("/api/health", health), Route("/hello", hello)])
"""


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """What the app module reads at import, and what its lifespan records."""
    name = f"launcher_app_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    shared = types.SimpleNamespace(
        module=name,
        import_started=threading.Event(),
        release=threading.Event(),
        broken_import=False,
        no_database=False,
        events=[],
    )
    monkeypatch.setitem(sys.modules, "launcher_test_gate", shared)
    monkeypatch.setattr(startup_traceback_filter, "reported", False)
    yield shared
    shared.release.set()
    sys.modules.pop(name, None)


@asynccontextmanager
async def serving(module: str) -> AsyncIterator[tuple[str, StartingApp, asyncio.Task[None]]]:
    """uvicorn serving `StartingApp(module:app)` on a free port, as core.launcher.serve does."""
    server: uvicorn.Server | None = None

    def stop() -> None:
        assert server is not None
        server.should_exit = True

    app = StartingApp(f"{module}:app", on_failure=stop)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app, task
    finally:
        server.should_exit = True
        await asyncio.wait_for(asyncio.shield(task), 30)


async def test_health_answers_while_the_app_imports_and_requests_wait_for_it(gate) -> None:
    async with serving(gate.module) as (url, app, _), httpx.AsyncClient(base_url=url) as client:
        await asyncio.to_thread(gate.import_started.wait, 30)
        health = await client.get("/api/health")
        assert health.status_code == 200
        assert health.json() == {"ok": True, "warming_up": True, "starting": "importing the server"}
        assert health.headers["cache-control"] == "no-store"

        waiting = asyncio.ensure_future(client.get("/hello"))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # waits for the app instead of failing
        assert gate.events == []  # the app's start-up has not run

        gate.release.set()
        answer = await asyncio.wait_for(waiting, 30)
        assert answer.status_code == 200 and answer.json() == {"hello": "world"}
        assert gate.events == ["startup"]
        assert (await client.get("/api/health")).json() == {"ok": True, "database": {"ok": True}}
        assert app.failed is False
    assert gate.events == ["startup", "shutdown"]  # the app was shut down with the server


async def test_a_failed_start_up_stops_the_server_with_its_one_line(
    gate, caplog: pytest.LogCaptureFixture
) -> None:
    gate.no_database = True
    caplog.set_level(logging.INFO)
    async with serving(gate.module) as (url, app, task), httpx.AsyncClient(base_url=url) as client:
        await asyncio.to_thread(gate.import_started.wait, 30)
        waiting = asyncio.ensure_future(client.get("/hello"))
        await asyncio.sleep(0.2)
        gate.release.set()
        answer = await asyncio.wait_for(waiting, 30)
        assert answer.status_code == 503
        assert answer.json()["error"] == "ResolveAI could not start; the server's log says why."
        assert answer.json()["request_id"]
        await asyncio.wait_for(asyncio.shield(task), 30)  # the server stopped by itself
        assert app.failed is True
    assert gate.events == ["startup"]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert [e for e in errors if e.startswith("Cannot start")] == [
        "Cannot start: Cannot connect to the database at DATABASE_URL"
    ]
    assert not any("Traceback" in e or "Cannot start the server" in e for e in errors), errors


async def test_an_app_that_does_not_import_stops_the_server_and_says_why(
    gate, caplog: pytest.LogCaptureFixture
) -> None:
    gate.broken_import = True
    gate.release.set()
    async with serving(gate.module) as (_, app, task):
        await asyncio.wait_for(asyncio.shield(task), 30)
        assert app.failed is True
    failure = next(r for r in caplog.records if r.getMessage().startswith("Cannot start"))
    assert "importing" in failure.getMessage() and gate.module in failure.getMessage()
    assert failure.exc_info is not None and "a module of the app is broken" in str(
        failure.exc_info[1]
    )
    assert gate.events == []


async def test_a_stop_while_importing_starts_nothing(gate) -> None:
    async with serving(gate.module) as (_, app, task):
        await asyncio.to_thread(gate.import_started.wait, 30)
        stopping = asyncio.ensure_future(asyncio.shield(task))
        app.on_failure()  # what SIGTERM does: the server's should_exit
        await asyncio.sleep(0.3)
        assert not stopping.done()  # shutdown waits for the import under way
        gate.release.set()
        await asyncio.wait_for(stopping, 30)
    assert gate.events == []  # the app's start-up never ran
    assert app.failed is False
