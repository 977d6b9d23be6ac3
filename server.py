"""ResolveAI's web server: the FastAPI app, its start-up and shutdown, and `python server.py`.

Start-up (the lifespan) opens the services in `core/services.py`; routes reach them through
`request.app.state.services`. The server keeps nothing between requests but those shared services:
all state lives in Postgres, so several processes can serve one database.

`python server.py` listens before it imports the rest of this module (core/launcher.py): the
imports below take seconds, and meanwhile /api/health says the server is starting.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and sys.argv[1:2] not in (["add-user"], ["migrate"]):  # see COMMANDS
    from core.launcher import run_server

    sys.exit(run_server("server:app"))

import asyncio
import gc
import getpass
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chat import summary, titles
from chat.auth import SESSION_COOKIE, identify, prepare_accounts, require_user
from chat.auth_routes import public_router as auth_public_router
from chat.auth_routes import router as auth_router
from chat.document_routes import router as document_router
from chat.document_worker import DocumentWorker
from chat.export_routes import router as export_router
from chat.memory_routes import router as memory_router
from chat.memory_worker import MemoryWorker
from chat.openai_routes import router as openai_router
from chat.routes import router as chat_router
from chat.search_routes import router as search_router
from chat.settings_routes import router as settings_router
from chat.turn_jobs import TurnJobs
from chat.turn_recovery import recover_abandoned_turns
from chat.usage_routes import router as usage_router
from chat.warm_up import warm_local_model
from core import accounts
from core.api_schema import install_api_schema
from core.config import Settings, get_settings
from core.db import Database, load_migrations
from core.errors import StartupError
from core.http_errors import (
    RequestContext,
    allowed_methods,
    error_response,
    errors,
    install_error_handlers,
)
from core.http_guard import BodyGuard, HostOriginGuard, HttpPolicy
from core.launcher import command_settings, run_server
from core.logs import report_startup_failure
from core.openai_errors import install_openai_errors
from core.services import Services, open_services

COMMANDS = ("add-user", "migrate")  # `python server.py COMMAND ...`; anything else serves
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
# FastAPI's own API docs pages load Swagger UI / ReDoc from a CDN: off unless API_DOCS=true, and
# then served without the CSP (which would block them).
CSP_EXEMPT_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc")


class Pages(StaticFiles):
    """The UI's files. Mounted at /, it gets every request no route took, those to /api/ too:
    there it answers what the API would, a 405 (with Allow) for an endpoint asked with another
    method and a 404 for no endpoint at all, never StaticFiles' own 405 or a file.

    With AUTH_MODE=password the app's page goes only to a signed-in browser; any other is sent
    to the sign-in page before a byte of the app loads (its scripts and styles hold no data)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        if scope["path"].startswith(("/api/", "/v1/")):
            if allowed_methods(scope["app"], scope["path"]):
                raise HTTPException(405)  # Allow: added by the handler (core/http_errors.py)
            raise HTTPException(404, f"No API endpoint at {scope['path']}")
        if path in ("", ".", "index.html") and not await self._signed_in(scope):
            return RedirectResponse("/login.html", status_code=303)
        return await super().get_response(path, scope)

    @staticmethod
    async def _signed_in(scope: Scope) -> bool:
        request = Request(scope)
        settings = request.app.state.settings
        if settings.auth_mode == "none":
            return True
        pool = request.app.state.services.database.pool
        return await identify(settings, pool, {}, request.cookies.get(SESSION_COOKIE)) is not None


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

        exempt = scope["path"] in CSP_EXEMPT_PATHS and scope["app"].state.settings.api_docs

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

    def configure(app: FastAPI, active: Settings) -> None:
        # What the HTTP layer (core/http_guard.py, the docs) reads from the settings.
        app.state.settings = active
        app.state.http_policy = HttpPolicy.from_settings(active)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if services is not None:
            configure(app, settings or services.settings)
            app.state.services = services
            async with queue_workers(app, services), summary_folds(), turn_jobs(app, services):
                freeze_startup_objects()
                yield
            return
        try:
            active = settings or get_settings()
            configure(app, active)
            opened = await open_services(active)
        except StartupError as error:
            report_startup_failure(str(error))
            raise
        try:
            await prepare_accounts(active, opened.database.pool)
        except StartupError as error:
            report_startup_failure(str(error))
            await opened.close()
            raise
        app.state.services = opened
        try:
            async with (
                queue_workers(app, opened),
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

    app = FastAPI(title="ResolveAI", lifespan=lifespan, docs_url=None, redoc_url=None)
    # Outermost last: headers on every answer, then the request id and last-resort 500, then
    # the guards (core/http_guard.py) before anything reads the request.
    app.add_middleware(BodyGuard)
    app.add_middleware(HostOriginGuard)
    app.add_middleware(RequestContext)
    app.add_middleware(SecurityHeaders)
    install_error_handlers(app)
    install_openai_errors(app)  # /v1 answers errors in OpenAI's shape (its own middleware too)
    install_api_schema(app, lambda: app.state.settings.max_request_bytes)
    # Every API router but sign-in is behind require_user (chat/auth.py): no route can forget it.
    signed_in: dict[str, Any] = {"dependencies": [Depends(require_user)], "responses": errors(401)}
    app.include_router(auth_public_router)
    app.include_router(auth_router, **signed_in)
    app.include_router(chat_router, **signed_in)
    app.include_router(memory_router, **signed_in)
    app.include_router(document_router, **signed_in)
    app.include_router(export_router, **signed_in)
    app.include_router(settings_router, **signed_in)
    app.include_router(search_router, **signed_in)
    app.include_router(usage_router, **signed_in)
    app.include_router(openai_router, **signed_in)
    add_docs_pages(app)

    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(psycopg_pool.PoolTimeout)
    async def database_down(request: Request, error: Exception) -> JSONResponse:
        log.warning("Database unavailable for %s %s: %s", request.method, request.url.path,
                    str(error).splitlines()[0] if str(error) else type(error).__name__)  # fmt: skip
        return error_response(request.scope, 503, DATABASE_DOWN, {"Retry-After": "5"})

    @app.get("/api/health")
    async def health(request: Request) -> JSONResponse:
        services: Services = request.app.state.services
        report = await services.health()
        return JSONResponse(report, status_code=200 if report["ok"] else 503)

    app.mount("/", Pages(directory=STATIC_DIR, html=True), name="static")
    return app


def add_docs_pages(app: FastAPI) -> None:
    """/docs and /redoc, answering 404 unless API_DOCS=true (decided per request: the settings
    are known once the app starts)."""

    def enabled(request: Request) -> None:
        if not request.app.state.settings.api_docs:
            raise HTTPException(404, "The API docs pages are off (API_DOCS=false); the schema "
                                "is at /openapi.json.")  # fmt: skip

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        enabled(request)
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="ResolveAI API",
            oauth2_redirect_url="/docs/oauth2-redirect",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_redirect(request: Request) -> HTMLResponse:
        enabled(request)
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        enabled(request)
        return get_redoc_html(openapi_url="/openapi.json", title="ResolveAI API")


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
async def queue_workers(app: FastAPI, services: Services) -> AsyncIterator[None]:
    """This process's workers of the queues in Postgres (memory extraction, documents), for as
    long as the app runs."""
    app.state.memory_worker = MemoryWorker(services)
    app.state.document_worker = DocumentWorker(services)
    workers = (app.state.memory_worker, app.state.document_worker)
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        for worker in workers:
            await worker.close()


@asynccontextmanager
async def turn_jobs(app: FastAPI, services: Services) -> AsyncIterator[TurnJobs]:
    """The replies this process writes (chat/turn_jobs.py). At start-up, the replies a process
    that died left unfinished are saved as interrupted; at shutdown, this process's get
    SHUTDOWN_GRACE_SECONDS to end, then are saved as interrupted."""
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
        await jobs.close(services.settings.shutdown_grace_seconds)


@asynccontextmanager
async def summary_folds() -> AsyncIterator[None]:
    """At shutdown, this process's summary folds (chat/summary.py) get a moment to finish before
    the services they use close; the rest are cancelled and folded again by a later turn. Title
    calls (chat/titles.py) likewise; a cancelled one leaves the chat's first title."""
    try:
        yield
    finally:
        await summary.close()
        await titles.close()


def freeze_startup_objects() -> None:
    """Keep what start-up loaded out of every later garbage collection.

    Torch, the embedder, LiteLLM and the rest leave a few million objects in memory for good. A
    full collection walks them all and holds the GIL meanwhile: the event loop, and so every
    stream, stood still for hundreds of ms (`bench/turn.py` saw up to 1.4 s on a busy machine).
    Collected once here, then frozen, later collections only walk what requests create.
    """
    gc.collect()
    gc.freeze()


app = create_app()


def add_user_command(settings: Settings, args: list[str]) -> int:
    """`python server.py add-user NAME [--admin]`: an account, its password typed twice (or
    taken from RESOLVEAI_NEW_PASSWORD, for scripts). The first admin takes over the single-user
    install's chats and memories."""
    names = [a for a in args if not a.startswith("--")]
    if len(names) != 1 or set(args) - {*names, "--admin"}:
        print("usage: python server.py add-user NAME [--admin]", file=sys.stderr)
        return 2
    password = os.environ.get("RESOLVEAI_NEW_PASSWORD") or getpass.getpass("Password: ")
    if "RESOLVEAI_NEW_PASSWORD" not in os.environ and getpass.getpass("Again: ") != password:
        print("The passwords differ; nothing changed.", file=sys.stderr)
        return 1

    async def add() -> dict[str, Any]:
        database = await Database.open(settings)
        try:
            return await accounts.add_user(database.pool, names[0], password, "--admin" in args)
        finally:
            await database.close()

    try:
        row = asyncio.run(add())
    except accounts.AccountError as error:
        print(error, file=sys.stderr)
        return 1
    role = "admin" if row["is_admin"] else "user"
    print(f"Added {role} {row['username']} ({row['user_id']}). Sign in with AUTH_MODE=password.")
    return 0


def migrate_command(settings: Settings, args: list[str]) -> int:
    """`python server.py migrate`: bring the database's schema up to date, then exit. For a
    Postgres the app does not own, a deploy runs it once before starting the new servers (each
    server's start-up does the same, under the same advisory lock, so either order is safe)."""
    if args:
        print("usage: python server.py migrate", file=sys.stderr)
        return 2

    async def run() -> None:
        database = await Database.open(settings)  # migrates (core/db.py: migrate)
        await database.close()

    try:
        asyncio.run(run())
    except StartupError as error:
        report_startup_failure(str(error))
        return 1
    log.info("Database: schema up to date (%d migrations)", len(load_migrations()))
    return 0


def main() -> int:
    """`python server.py [COMMAND ...]` (and tests/scripted_server.py, with this module loaded)."""
    command = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in COMMANDS else None
    if command is None:
        return run_server("server:app")
    settings = command_settings()
    if settings is None:
        return 2
    run = add_user_command if command == "add-user" else migrate_command
    return run(settings, sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
