"""ResolveAI's web server: the FastAPI app, its start-up and shutdown, and `python server.py`.

Start-up (the lifespan) opens the services in `core/services.py`; routes reach them through
`request.app.state.services`. The server keeps nothing between requests but those shared services:
all state lives in Postgres, so several processes can serve one database.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import psycopg_pool
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chat import summary
from chat.memory_routes import router as memory_router
from chat.memory_worker import MemoryWorker
from chat.routes import router as chat_router
from chat.turn_jobs import TurnJobs
from chat.turn_recovery import recover_abandoned_turns
from chat.warm_up import warm_local_model
from core.config import Settings, get_settings
from core.errors import StartupError
from core.logs import configure_logging, report_startup_failure
from core.services import Services, open_services

STATIC_DIR = Path(__file__).resolve().parent / "static"
DATABASE_DOWN = (
    "The database is not answering, so nothing could be read or saved. Try again in a moment."
)
log = logging.getLogger("resolveai")

# The browser UI loads nothing from other origins and runs no inline script or style, so the
# policy can forbid both: model output that slips past the sanitizer still cannot run.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
# FastAPI's own API docs pages load Swagger UI / ReDoc from a CDN: they keep working, without CSP.
CSP_EXEMPT_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc")


class SecurityHeaders:
    """Adds the security headers to every HTTP response.

    Plain ASGI rather than BaseHTTPMiddleware: that one buffers through a task of its own, which
    gets in the way of streamed replies and of noticing that the client left (Stop).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        exempt = scope["path"] in CSP_EXEMPT_PATHS

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                extra = [
                    (n, v)
                    for n, v in SECURITY_HEADERS
                    if n not in names and not (exempt and n == b"content-security-policy")
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    """The app. Settings default to the environment's; tests may hand in services they opened
    (and then close them themselves)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if services is not None:
            app.state.services = services
            async with memory_worker(app, services), summary_folds(), turn_jobs(app, services):
                freeze_startup_objects()
                yield
            return
        try:
            active = settings or get_settings()
            opened = await open_services(active)
        except StartupError as error:
            report_startup_failure(str(error))
            raise
        app.state.services = opened
        try:
            async with (
                memory_worker(app, opened),
                summary_folds(),
                warm_up(opened),
                turn_jobs(app, opened),
            ):
                freeze_startup_objects()
                log.info("ResolveAI is ready: http://%s:%d", active.app_host, active.app_port)
                yield
        finally:
            await opened.close()
            log.info("ResolveAI stopped")

    app = FastAPI(title="ResolveAI", lifespan=lifespan)
    app.add_middleware(SecurityHeaders)
    app.include_router(chat_router)
    app.include_router(memory_router)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse({"error": error.detail}, status_code=error.status_code)

    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(psycopg_pool.PoolTimeout)
    async def database_down(request: Request, error: Exception) -> JSONResponse:
        log.warning("Database unavailable for %s %s: %s", request.method, request.url.path,
                    str(error).splitlines()[0] if str(error) else type(error).__name__)  # fmt: skip
        return JSONResponse({"error": DATABASE_DOWN}, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": describe_invalid_request(error)}, status_code=422)

    @app.get("/api/health")
    async def health(request: Request) -> JSONResponse:
        services: Services = request.app.state.services
        report = await services.health()
        return JSONResponse(report, status_code=200 if report["ok"] else 503)

    app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    return app


@asynccontextmanager
async def warm_up(services: Services) -> AsyncIterator[None]:
    """Warm the local model in the background (LOCAL_MODEL_WARM_UP), cancelled at shutdown."""
    task = (
        asyncio.create_task(warm_local_model(services), name="local model warm-up")
        if services.settings.local_model_warm_up
        else None
    )
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def memory_worker(app: FastAPI, services: Services) -> AsyncIterator[MemoryWorker]:
    """This process's memory extraction worker, for as long as the app runs."""
    worker = MemoryWorker(services)
    app.state.memory_worker = worker
    worker.start()
    try:
        yield worker
    finally:
        await worker.close()


@asynccontextmanager
async def turn_jobs(app: FastAPI, services: Services) -> AsyncIterator[TurnJobs]:
    """The replies this process writes (chat/turn_jobs.py). At start-up, the replies a process
    that died left unfinished are saved as interrupted; at shutdown, this process's are."""
    jobs = TurnJobs()
    app.state.turn_jobs = jobs
    try:
        recovered = await recover_abandoned_turns(services)
    except (psycopg.Error, psycopg_pool.PoolTimeout) as error:  # the next start or message does it
        log.warning("Unfinished replies not recovered at start-up: %s", error)
        recovered = 0
    if recovered:
        log.info("Recovered %d unfinished replies left by a server that stopped", recovered)
    try:
        yield jobs
    finally:
        await jobs.close()


@asynccontextmanager
async def summary_folds() -> AsyncIterator[None]:
    """At shutdown, this process's summary folds (chat/summary.py) get a moment to finish before
    the services they use close; the rest are cancelled and folded again by a later turn."""
    try:
        yield
    finally:
        await summary.close()


def freeze_startup_objects() -> None:
    """Keep what start-up loaded out of every later garbage collection.

    Torch, the embedder, LiteLLM and the rest leave a few million objects in memory for good. A
    full collection walks them all and holds the GIL meanwhile: the event loop, and so every
    stream, stood still for hundreds of ms (`bench/turn.py` saw up to 1.4 s on a busy machine).
    Collected once here, then frozen, later collections only walk what requests create.
    """
    gc.collect()
    gc.freeze()


def describe_invalid_request(error: RequestValidationError) -> str:
    """E.g. 'content: the message is empty; chat_id: not a valid id'."""
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"] if p not in ("body", "path", "query"))
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"].startswith("uuid"):
            message = "not a valid id"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


app = create_app()


def main() -> int:
    configure_logging()
    try:
        settings = get_settings()
    except StartupError as error:
        report_startup_failure(str(error))
        return 2
    configure_logging(settings.log_level)
    # log_config=None: uvicorn's records go through our one-line format.
    uvicorn.run(app, host=settings.app_host, port=settings.app_port, log_config=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
