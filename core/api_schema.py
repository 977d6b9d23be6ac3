"""The OpenAPI schema says what the API really does.

FastAPI writes the schema from the routes; `install_api_schema` completes it with what happens
around them: every operation's error statuses in the one error shape (core/http_errors.py), the
guards' answers (core/http_guard.py: 400 Host, 403 Origin, 413 body cap, 422 unstorable text, on
every operation), the 500 and the database's 503, and the limits. Routes declare only their own
statuses (`errors(404, 409)`) and, for the replies they stream, `**event_stream_route(...)`: a
`text/event-stream` answer with its event types instead of FastAPI's default JSON.

Every string a request carries (parameters and JSON bodies) is documented with `STORABLE_TEXT`,
the pattern the guard enforces, so a client (or schemathesis) generating valid input never sends
a NUL. A model field with a pattern of its own (`NON_BLANK_TEXT`) must exclude NUL itself.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.responses import Response

from core.http_errors import DESCRIPTIONS, ApiError, errors
from core.openai_errors import OpenAIErrorBody

# JSON Schema (ECMA-262) patterns, written with explicit code points so that every regex engine
# (Python's, ECMA's, Rust's in schemathesis) reads them alike: `\s` differs between them.
STORABLE_TEXT = r"^[^\u0000]*$"
# What str.strip() removes (str.isspace: \x1c-\x1f and \x85 too, unlike ECMA's \s); every such
# character is below U+3001.
SPACES = "".join(f"\\u{c:04x}" for c in range(0x3001) if chr(c).isspace())
# Something besides those spaces, and no NUL: what the routes' "is it blank" check accepts.
NON_BLANK_TEXT = rf"^[^\u0000]*[^\u0000{SPACES}][^\u0000]*$"

ERROR_REF = {"$ref": "#/components/schemas/ApiError"}
OPENAI_ERROR_REF = {"$ref": "#/components/schemas/OpenAIErrorBody"}
GUARD_STATUSES = (400, 413, 422, 500, 503)  # any operation: Host, body cap, text, crash, database
STATE_CHANGING = ("post", "put", "patch", "delete")

STREAM_EVENTS = {
    "chat": "a new chat was created: `chat_id`, `title`, `temporary` (first message only)",
    "turn": "which user message this answers: `user_message_id`",
    "step": 'progress: `text` ("Searching the web for …"), timings',
    "memories": "the memories recalled for the reply: `memories` [{`memory_id`, `content`}]",
    "token": "a piece of the reply: `text`",
    "tool_start": "a tool call begins: `id`, `name`, `args`",
    "tool_end": "a tool call ended: `id`, `name`, `ok`",
    "sources": "the web sources cited: `sources` [{`n`, `title`, `url`}]",
    "draft": "research mode: the report so far, `text`, each time it gains a part (kept for a "
    "server that dies mid-research; the report itself streams as `token` at the end)",
    "done": "the reply is complete and saved: `message_id`, `model` (the LiteLLM model that "
    "wrote it), `model_name` (as shown), `notes` (plain sentences shown with it) (last event)",
    "interrupted": "stopped (Stop, or the server went away); the reply so far is saved (last)",
    "error": "the reply failed: `message` (a sentence ending with a ref the log names); what "
    "was written is saved (last event)",
    "heartbeat": "every 10 s while nothing else is sent; no id",
}


class EventStream(Response):
    """For the schema only: the route answers `text/event-stream` (its handler returns the
    stream itself, which FastAPI passes on as it is)."""

    media_type = "text/event-stream"


def event_stream_route(*statuses: int) -> dict[str, Any]:
    """A streaming route's `response_class` and `responses`: `**event_stream_route(404, 409)`."""
    events = "\n".join(f"- `{name}`: {what}" for name, what in STREAM_EVENTS.items())
    stream = {
        "description": "Server-Sent Events: each event's name is its type and its data is JSON "
        "with that `type`; every event but `heartbeat` carries its number as its id (resume "
        "with `GET /api/chats/{chat_id}/stream?after=N` or `Last-Event-ID`). The stream ends "
        f"after one of `done`, `interrupted`, `error`.\n\n{events}",
        "content": {
            "text/event-stream": {
                "itemSchema": {
                    "type": "object",
                    "required": ["event", "data"],
                    "properties": {
                        "event": {"type": "string", "enum": list(STREAM_EVENTS)},
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "contentSchema": {
                                "type": "object",
                                "required": ["type"],
                                "properties": {"type": {"enum": list(STREAM_EVENTS)}},
                            },
                        },
                        "id": {"type": "string"},
                    },
                },
            }
        },
    }
    return {"response_class": EventStream, "responses": {200: stream, **errors(*statuses)}}


def _string_schemas(schema: Any) -> list[dict[str, Any]]:
    """Every `type: string` schema in `schema` (through anyOf, arrays, properties)."""
    found, pending = [], [schema]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if item.get("type") == "string":
                found.append(item)
            # Not into `not`: a pattern there would turn the rule around.
            skip = ("enum", "const", "default", "not")
            pending.extend(v for k, v in item.items() if k not in skip)
        elif isinstance(item, list):
            pending.extend(item)
    return found


def _document_storable_text(schema: dict[str, Any]) -> None:
    """`STORABLE_TEXT` on every free-text string of every request (not ids, dates, enums)."""
    components = schema.get("components", {}).get("schemas", {})
    seen: set[str] = set()
    targets: list[Any] = []
    for operation in _operations(schema):
        targets += [p.get("schema") for p in operation.get("parameters", [])]
        for media in operation.get("requestBody", {}).get("content", {}).values():
            targets.append(media.get("schema"))
    while targets:  # follow $refs into the components the requests use
        target = targets.pop()
        for string in _string_schemas(target):
            if "format" not in string and "pattern" not in string and "enum" not in string:
                string["pattern"] = STORABLE_TEXT
        for ref in _refs(target):
            name = ref.rsplit("/", 1)[1]
            if name not in seen and name in components:
                seen.add(name)
                targets.append(components[name])


def _refs(schema: Any) -> list[str]:
    refs, pending = [], [schema]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$ref"), str):
                refs.append(item["$ref"])
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return refs


def _operations(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for path in schema.get("paths", {}).values() for op in path.values()]


def complete_schema(schema: dict[str, Any], max_request_bytes: int) -> dict[str, Any]:
    """FastAPI's schema with the error statuses, the guards and the limits added."""
    schema = copy.deepcopy(schema)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["ApiError"] = ApiError.model_json_schema()
    if any(name.startswith("/v1/") for name in schema.get("paths", {})):
        defs = OpenAIErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(defs.pop("$defs", {}))
        components["OpenAIErrorBody"] = defs
    for path_name, path in schema.get("paths", {}).items():
        for method, operation in path.items():
            responses = operation.setdefault("responses", {})
            statuses = [*GUARD_STATUSES, *((403,) if method in STATE_CHANGING else ())]
            for status in statuses:
                # FastAPI's own 422 (its HTTPValidationError) is replaced: ours is ApiError.
                if str(status) not in responses or status == 422:
                    responses[str(status)] = {"description": DESCRIPTIONS[status]}
            # The OpenAI-compatible API (/v1) answers errors in OpenAI's shape instead.
            error_ref = OPENAI_ERROR_REF if path_name.startswith("/v1/") else ERROR_REF
            for status, response in responses.items():
                if status[0] in "45":
                    response["content"] = {"application/json": {"schema": error_ref}}
                stream = response.get("content", {}).get("text/event-stream")
                if stream is not None:
                    # FastAPI gives the response class's media type `type: string`; the stream
                    # is described event by event (`itemSchema`, as OpenAPI 3.2 does).
                    stream.pop("schema", None)
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    _document_storable_text(schema)
    schema["info"]["description"] = (
        "A self-hosted assistant with memory and web search.\n\n"
        '**Errors** are JSON `{"error": "…", "request_id": "…"}` for every 4xx and 5xx '
        "(the id is also in `X-Request-ID`, and in the server's log); the OpenAI-compatible "
        "API under `/v1` answers OpenAI's "
        '`{"error": {"message", "type", "param", "code"}}`.\n\n'
        f"**Limits**: request bodies up to {max_request_bytes:,} bytes (`MAX_REQUEST_BYTES`, "
        "413 beyond, checked before the body is read); text without NUL characters or lone "
        "surrogates (422); the lengths given per field. Requests must name the server in "
        "`Host` (the loopback names, `APP_HOST`, `APP_PUBLIC_URL`, `ALLOWED_HOSTS`; else 400) "
        "and state-changing ones from a browser must come from its own origin (`Origin`, "
        "`Sec-Fetch-Site`; else 403).\n\n"
        "**Replies stream** as Server-Sent Events (`text/event-stream`) and outlive their "
        "connection: follow one again with `GET /api/chats/{chat_id}/stream`."
    )
    return schema


def install_api_schema(app: FastAPI, max_request_bytes: Any) -> None:
    """Serve the completed schema at /openapi.json (built once, on first request).
    `max_request_bytes` is called then: the settings are only known once the app starts."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            generated = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = complete_schema(generated, max_request_bytes())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
