"""OpenAI's error shape for the OpenAI-compatible API under /v1, and only there.

Clients of that API (the `openai` SDKs, Open WebUI, LangChain…) read errors as

    {"error": {"message": "…", "type": "…", "param": "…" | null, "code": "…" | null}}

and pick their exception by status (401 AuthenticationError, 404 NotFoundError, 400
BadRequestError, 429 RateLimitError…). The rest of the API keeps the app's one shape
(core/http_errors.py); /v1 answers differently in two places, both scoped to its paths:

- its routes raise `OpenAIError` (type, param and code their own) and FastAPI's validation errors
  on /v1 answer 400 with the field named in `param` (`install_openai_errors`);
- every other error on /v1 (401 from require_user, the guards' 400/403/413/422, 404 and 405, the
  database's 503, the last-resort 500) is written in the app's shape by code that knows nothing of
  /v1: `OpenAIErrorShape` rewrites those answers (they are small JSON bodies) into OpenAI's, with
  a type and code from the status; a 422 becomes 400, which is what OpenAI clients expect for a
  body they should not have sent.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.http_errors import describe_invalid_request
from core.redact import redact

PREFIX = "/v1"

# type and code by status, as OpenAI's own API answers them (its SDKs go by the status).
KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    409: ("invalid_request_error", "conflict"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", "service_unavailable"),
}


class OpenAIErrorDetail(BaseModel):
    message: str = Field(description="What went wrong, in a sentence.")
    type: str = Field(description="invalid_request_error, authentication_error, rate_limit_error…")
    param: str | None = Field(description="The request field at fault, if one is.")
    code: str | None = Field(description="A short machine-readable reason, if there is one.")


class OpenAIErrorBody(BaseModel):
    """The body of every error the OpenAI-compatible API (/v1) answers."""

    error: OpenAIErrorDetail


def is_openai_path(scope: Scope) -> bool:
    path = scope.get("path", "")
    return path == PREFIX or path.startswith(PREFIX + "/")


def kind_of(status: int) -> tuple[str, str | None]:
    return KINDS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))


def openai_error_response(
    status: int,
    message: str,
    *,
    type: str | None = None,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    default_type, default_code = kind_of(status)
    body = {
        "error": {
            "message": redact(message),
            "type": type or default_type,
            "param": param,
            "code": code or default_code,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


class OpenAIError(Exception):
    """An error a /v1 route answers in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers
        self.type, self.param, self.code = type, param, code

    def response(self) -> JSONResponse:
        return openai_error_response(
            self.status, self.message, type=self.type, param=self.param, code=self.code,
            headers=self.headers,
        )  # fmt: skip


def _param_of(error: RequestValidationError) -> str | None:
    """The first invalid field, dotted as OpenAI names them (`messages.0.content`)."""
    for item in error.errors():
        if item["type"] == "json_invalid":  # its loc is a position in the text, not a field
            return None
        where = [str(p) for p in item["loc"] if p not in ("body", "header", "query", "path")]
        if where:
            return ".".join(where)
    return None


def install_openai_errors(app: FastAPI) -> None:
    """OpenAI's shape for /v1: its routes' `OpenAIError`, its validation errors (400), and the
    middleware for the rest. Call after core/http_errors.py's `install_error_handlers` and after
    the app's other middlewares (this one must be outside RequestContext, to see its 500)."""
    fallback = app.exception_handlers[RequestValidationError]

    @app.exception_handler(OpenAIError)
    async def openai_error(request: Request, error: OpenAIError) -> JSONResponse:
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> Any:
        if not is_openai_path(request.scope):
            return await fallback(request, error)
        return openai_error_response(400, describe_invalid_request(error), param=_param_of(error))

    app.add_middleware(OpenAIErrorShape)


class OpenAIErrorShape:
    """On /v1, an error answered in the app's shape (`{"error": "…", "request_id": …}`) is
    rewritten into OpenAI's; answers already in it, successes and streams pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_openai_path(scope):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    start = None
                    await send(message)
                    return
                start = message  # held until the body is all there
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            status, content = _rewritten(start["status"], b"".join(body))
            headers = [
                (name, value) for name, value in start.get("headers", [])
                if name.lower() != b"content-length"
            ]  # fmt: skip
            headers.append((b"content-length", str(len(content)).encode()))
            if not any(name.lower() == b"content-type" for name, _ in headers):
                headers.append((b"content-type", b"application/json"))
            await send({**start, "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": content})

        await self.app(scope, receive, rewrite)


def _rewritten(status: int, content: bytes) -> tuple[int, bytes]:
    try:
        data = json.loads(content or b"null")
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return status, content  # already OpenAI's
    message = data.get("error") if isinstance(data, dict) else None
    if not isinstance(message, str) or not message:
        message = content.decode("utf-8", "replace").strip() or f"HTTP {status}"
    status = 400 if status == 422 else status
    kind, code = kind_of(status)
    error = {"message": message, "type": kind, "param": None, "code": code}
    return status, json.dumps({"error": error}).encode()
