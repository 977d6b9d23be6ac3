"""`python server.py` without the wait: listen at once, then import and start the app behind it.

The server's imports (FastAPI, LangGraph, LiteLLM and the app's own modules) take most of a start:
8 s of 9 on a slow machine, LiteLLM alone 5 s. `StartingApp` is a small ASGI app that uvicorn
serves from the first second: it imports the real app in a thread and runs the real app's start-up
(its lifespan) in the background, answering meanwhile

- `/api/health` with 200, `"warming_up": true` and `"starting"`: what it is doing (the process
  is up, what it is asked will be served), the same contract as while the embedder loads
  (core/services.py);
- every other request once the app is ready: it waits, and is then served as usual.

A start-up that fails ends the process as uvicorn would (exit code 3), with the app's one-line
reason (core/logs.report_startup_failure) and no traceback after it; requests that waited get a
503 in the API's error shape. Shutdown waits for a start-up under way, then shuts the app down.

Only uvicorn, the settings and the logging are imported before the socket is open.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from core.errors import StartupError
from core.logs import configure_logging, report_startup_failure, startup_traceback_filter

if TYPE_CHECKING:
    from core.config import Settings

log = logging.getLogger("resolveai")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HEALTH_PATH = "/api/health"
FAILED = "ResolveAI could not start; the server's log says why."


class StartingApp:
    """The ASGI app uvicorn serves: the real app (`module:attribute`) once it has started."""

    def __init__(self, app_path: str, on_failure: Callable[[], None] = lambda: None) -> None:
        self.app_path = app_path
        self.on_failure = on_failure  # asks the server to stop (uvicorn: should_exit)
        self.app: Any = None  # the real app, set once its start-up completed
        self.failed = False
        self.phase = "importing the server"
        self._ready: asyncio.Event | None = None
        self._starting: asyncio.Task[None] | None = None
        self._stopping = False
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._app_lifespan: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if self.app is None and not self.failed:
            if scope["type"] == "http" and scope["path"] == HEALTH_PATH:
                await self._starting_health(send)
                return
            assert self._ready is not None, "requests come after the lifespan's start"
            await self._ready.wait()
        if self.app is None:
            if scope["type"] == "http":
                await _json(send, 503, {"error": FAILED, "request_id": secrets.token_hex(6)})
            return
        await self.app(scope, receive, send)

    async def _starting_health(self, send: Send) -> None:
        await _json(send, 200, {"ok": True, "warming_up": True, "starting": self.phase})

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup: answered at once, so uvicorn opens the socket now
        self._ready = asyncio.Event()
        self._starting = asyncio.create_task(self._start(scope), name="app start-up")
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        self._stopping = True
        await self._starting  # an import can't be interrupted; it ends within seconds
        if self._app_lifespan is not None and not self.failed:
            await self._to_app.put({"type": "lifespan.shutdown"})
            reply = await self._reply()
            if reply["type"] != "lifespan.shutdown.complete":
                self._log_failure(reply, "shut down")
            await asyncio.gather(self._app_lifespan, return_exceptions=True)
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self, scope: Scope) -> None:
        assert self._ready is not None
        started = time.perf_counter()
        module_name, _, attribute = self.app_path.partition(":")
        log.info("Importing the server; requests wait for it, /api/health says it is starting")
        try:
            module = await asyncio.to_thread(importlib.import_module, module_name)
            app = getattr(module, attribute)
        except Exception as error:  # a broken install: say what, and stop
            if isinstance(error, StartupError):
                report_startup_failure(str(error))
            else:
                log.exception("Cannot start: importing %s failed", module_name)
            self._fail()
            return
        log.info("Server imported in %.1f s", time.perf_counter() - started)
        if self._stopping:  # stopped while importing: nothing was started, nothing to stop
            self._ready.set()
            return
        self.phase = "opening the database"
        self._app_lifespan = asyncio.create_task(
            app(dict(scope), self._to_app.get, self._from_app.put), name="app lifespan"
        )
        await self._to_app.put({"type": "lifespan.startup"})
        reply = await self._reply()
        if reply["type"] != "lifespan.startup.complete":
            self._log_failure(reply, "start")
            # Starlette re-raises after saying startup.failed: collect it (logged above, or not
            # at all after the app's one line).
            await asyncio.gather(self._app_lifespan, return_exceptions=True)
            self._fail()
            return
        self.app = app
        self._ready.set()

    async def _reply(self) -> Message:
        """The app's next lifespan message, or a failure if its lifespan ended without one."""
        assert self._app_lifespan is not None
        getting = asyncio.ensure_future(self._from_app.get())
        await asyncio.wait({getting, self._app_lifespan}, return_when=asyncio.FIRST_COMPLETED)
        if getting.done():
            return getting.result()
        getting.cancel()
        error = self._app_lifespan.exception()
        return {"type": "lifespan.failed", "message": repr(error) if error else ""}

    def _log_failure(self, reply: Message, what: str) -> None:
        # The app said why in one line (report_startup_failure) unless the error was unexpected;
        # then its traceback is the only clue.
        if what != "start" or not startup_traceback_filter.reported:
            log.error("Cannot %s the server:\n%s", what, reply.get("message") or reply["type"])

    def _fail(self) -> None:
        assert self._ready is not None
        self.failed = True
        self._ready.set()
        self.on_failure()


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def serve(app_path: str, host: str, port: int, grace: float) -> int:
    """Serve the app at `app_path` through `StartingApp`; uvicorn's exit code. On SIGTERM,
    uvicorn gives open connections (streamed replies) `grace` seconds to end."""
    server: uvicorn.Server | None = None

    def stop() -> None:
        assert server is not None
        server.should_exit = True

    app = StartingApp(app_path, on_failure=stop)
    # log_config=None: uvicorn's records go through our one-line format.
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, timeout_graceful_shutdown=grace
    )
    server = uvicorn.Server(config)
    server.run()
    return STARTUP_FAILURE if app.failed or not server.started else 0


def command_settings() -> Settings | None:
    """What every `python server.py` command does first: our log format, then the settings;
    None, after one line saying which setting is wrong, when one is."""
    from core.config import get_settings

    configure_logging()
    try:
        settings = get_settings()
    except StartupError as error:
        report_startup_failure(str(error))
        return None
    configure_logging(settings.log_level)
    return settings


def run_server(app_path: str) -> int:
    """`python server.py`: the settings (a bad one is one line and exit code 2), then serve."""
    settings = command_settings()
    if settings is None:
        return 2
    return serve(app_path, settings.app_host, settings.app_port, settings.shutdown_grace_seconds)
