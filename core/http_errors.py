"""One JSON shape for every error the HTTP API answers, and a request id to quote.

Every 4xx and 5xx, whoever raises it (a route's HTTPException, FastAPI's validation, Starlette's
404 and 405, the guards in core/http_guard.py, an exception nobody expected), is

    {"error": "<what went wrong, in a sentence>", "request_id": "<id>"}

with the same id in the `X-Request-ID` header of every response. An unexpected exception is
logged with its traceback and that id, and the user sees only the id: enough to find the log
line, nothing of the internals. Messages pass through `core/redact.py` (a secret in an exception
text stays out of the answer).
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.redact import redact

log = logging.getLogger("resolveai.http")

REQUEST_ID_HEADER = "x-request-id"


class ApiError(BaseModel):
    """The body of every error response."""

    error: str = Field(description="What went wrong, in a sentence fit to show the user.")
    request_id: str = Field(
        description="This request's id, also in the X-Request-ID header; the server's log "
        "names it next to what happened."
    )


def request_id(scope: Scope) -> str:
    """This request's id (given by `RequestContext`; a fresh one outside it)."""
    state = scope.setdefault("state", {})
    if "request_id" not in state:
        state["request_id"] = secrets.token_hex(6)
    return state["request_id"]


def error_response(
    scope: Scope, status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The error shape, as a response."""
    return JSONResponse(
        {"error": redact(message), "request_id": request_id(scope)},
        status_code=status,
        headers=headers,
    )


async def send_error(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    """Answer with the error shape from plain ASGI code (the guards)."""
    await error_response(scope, status, message)(scope, receive, send)


class RequestContext:
    """Outermost of the app's own middlewares: gives each request its id (sent back in
    `X-Request-ID`) and turns an exception nothing else handled into a logged JSON 500.

    Starlette's own last-resort handler answers plain text and re-raises, so uvicorn logs the
    traceback a second time, without the id; here it is logged once, with it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [*message.get("headers", []), (b"x-request-id", rid.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("Request %s failed: %s %s", rid, scope.get("method"), scope.get("path"))
            if started:  # a stream already under way: it can only be cut short
                raise
            await send_error(
                scope,
                receive,
                send_with_id,
                500,
                f"Something went wrong on the server (request {rid}); it has been logged. "
                "Try again, and quote this id if it keeps happening.",
            )


def describe_invalid_request(error: RequestValidationError) -> str:
    """E.g. 'content: the message is empty; chat_id: not a valid id'."""
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"] if p not in ("body", "path", "query"))
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"].startswith("uuid"):
            message = "not a valid id"
        elif item["type"] == "json_invalid":
            where, message = "body", f"not valid JSON ({item.get('ctx', {}).get('error', '')})"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Every HTTPException (FastAPI's and Starlette's own: unknown paths, 405) and every
    validation error answer in the error shape."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        detail = error.detail if isinstance(error.detail, str) else str(error.detail)
        if error.status_code == 404 and detail == "Not Found":
            detail = f"Nothing at {request.url.path}"
        headers = error.headers
        if error.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
            # Allow: what the schema documents for the path (clients and schemathesis check it).
            if methods := allowed_methods(request.app, request.url.path):
                headers = {**(headers or {}), "Allow": ", ".join(methods)}
        return error_response(request.scope, error.status_code, detail, headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(request.scope, 422, describe_invalid_request(error))


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: these statuses, documented with the error shape (what each
    means is in the route's docstring)."""
    return {status: {"model": ApiError, "description": DESCRIPTIONS[status]} for status in statuses}


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the schema documents for `path`, from its most specific template (the
    literal /api/memories/export before /api/memories/{memory_id}), e.g. ['GET']; [] if none."""
    best: tuple[int, dict[str, Any]] | None = None
    for template, operations in app.openapi()["paths"].items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path) and (best is None or template.count("{") < best[0]):
            best = (template.count("{"), operations)
    return sorted(method.upper() for method in best[1]) if best else []


DESCRIPTIONS = {
    400: "Bad request: a Host the server does not answer to, or what was asked cannot be done "
    "with this configuration (e.g. web search with no provider).",
    401: "Not signed in (AUTH_MODE=password): no valid session cookie or `Authorization: Bearer` "
    "API token.",
    403: "A state-changing request from another site (its Origin or Sec-Fetch-Site), or without "
    "the session's X-CSRF-Token; or not allowed for this account.",
    404: "No such chat, message, memory or reply.",
    409: "Conflicts with the current state (a reply is already being written, a stale token, a "
    "taken username, accounts asked of a server with AUTH_MODE=none…).",
    413: "The request body is larger than MAX_REQUEST_BYTES (an upload: DOCUMENT_MAX_BYTES).",
    415: "A file of a type ResolveAI does not read.",
    422: "Invalid input: a field's type, length or format, or text Postgres cannot store "
    "(a NUL character, a lone surrogate).",
    429: "Too many requests (messages per minute, replies at once, failed sign-ins): wait for "
    "Retry-After seconds.",
    500: "An unexpected error, logged with the request id.",
    503: "The database is not answering; retry after a moment (Retry-After).",
}
