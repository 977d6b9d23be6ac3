"""The export and import API: take your data out, and bring it (or a ChatGPT export) in.

- `GET /api/chats/{id}/export?format=markdown|json`: one chat as a download: Markdown shows the
  branch on screen (roles, times, sources), JSON every message of the tree with its versions
  (importable like the full export).
- `GET /api/chats/{id}/messages/{message_id}/export`: one reply (a research report) as Markdown,
  its sources listed.
- `GET /api/export`: everything as one JSON file (core/data_transfer.py describes it).
- `POST /api/import` (multipart `file`; `format=auto|resolveai|chatgpt`): a ResolveAI export, or
  a ChatGPT `conversations.json` (or the .zip it comes in). Idempotent, one transaction; the
  answer says what was imported and skipped, and the new chats' ids.

Errors are the usual JSON shape: 404 unknown chat, 409 ids that clash with the user's own data,
413 over IMPORT_MAX_BYTES, 415 not a JSON text file (NUL bytes, not UTF-8), 422 not valid JSON
(a truncated file) or not a file of a known shape.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, File, HTTPException, Query, Request, Response, UploadFile

from chat.auth import user_of
from core import chat_store, data_transfer
from core.http_errors import errors
from core.services import Services

router = APIRouter(prefix="/api")


def _services(request: Request) -> Services:
    return request.app.state.services


def _download(body: str | bytes, filename: str, media_type: str) -> Response:
    # An ASCII name for old clients, the exact one (RFC 5987) for the rest.
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "")
    disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"
    return Response(body, media_type=media_type, headers={"Content-Disposition": disposition})


def _json_bytes(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False, indent=1).encode()


@router.get(
    "/export",
    response_class=Response,
    responses={
        200: {
            "content": {"application/json": {}},
            "description": "Everything of yours, as a JSON download.",
        }
    },
)
async def export_everything(request: Request) -> Response:
    """Every chat (every message, every version), memory (with its quote and evidence),
    document's metadata (not the file) and preference of yours, as one JSON file."""
    document = await data_transfer.export_everything(
        _services(request).database.pool, user_of(request).user_id
    )
    body = await asyncio.to_thread(_json_bytes, document)
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    return _download(body, f"resolveai-export-{day}.json", "application/json")


@router.get(
    "/chats/{chat_id}/export",
    response_class=Response,
    responses={
        **errors(404),
        200: {
            "content": {"text/markdown": {}, "application/json": {}},
            "description": "The chat, as a download.",
        },
    },
)
async def export_chat(
    request: Request,
    chat_id: uuid.UUID,
    format: Annotated[Literal["markdown", "json"], Query()] = "markdown",
) -> Response:
    """One chat: `markdown`, the branch shown; `json`, every message with its versions."""
    document = await data_transfer.export_chat(
        _services(request).database.pool, user_of(request).user_id, chat_id
    )
    if document is None:
        raise HTTPException(404, f"No chat with id {chat_id}")
    name = f"{data_transfer.slug(document['chats'][0]['title'])}-{str(chat_id)[:8]}"
    if format == "json":
        body = await asyncio.to_thread(_json_bytes, document)
        return _download(body, f"{name}.json", "application/json")
    markdown = await asyncio.to_thread(data_transfer.chat_markdown, document)
    return _download(markdown, f"{name}.md", "text/markdown; charset=utf-8")


@router.get(
    "/chats/{chat_id}/messages/{message_id}/export",
    response_class=Response,
    responses={
        **errors(404),
        200: {"content": {"text/markdown": {}}, "description": "The message, as a download."},
    },
)
async def export_message(request: Request, chat_id: uuid.UUID, message_id: uuid.UUID) -> Response:
    """One message of yours (a reply, a research report) as a Markdown file, its sources listed
    under it."""
    pool = _services(request).database.pool
    chat = await chat_store.get_chat(pool, chat_id, user_id=user_of(request).user_id)
    message = await chat_store.get_message(pool, chat_id, message_id) if chat else None
    if message is None:
        raise HTTPException(404, f"No message with id {message_id} in this chat")
    heading = message["content"].split("\n", 1)[0]
    title = heading[2:] if heading.startswith("# ") else chat["title"]
    name = f"{data_transfer.slug(title)}-{str(message_id)[:8]}.md"
    return _download(data_transfer.reply_markdown(message), name, "text/markdown; charset=utf-8")


@router.post("/import", responses=errors(409, 413, 415))
async def import_file(
    request: Request,
    file: Annotated[
        UploadFile,
        File(description="A ResolveAI export (.json), or a ChatGPT conversations.json or .zip."),
    ],
    format: Annotated[data_transfer.ImportFormat, Query()] = "auto",
) -> dict[str, Any]:
    """Import chats (and, from a ResolveAI export, memories and preferences). Importing a file
    again adds nothing: what is already here is skipped."""
    services = _services(request)
    limit = request.app.state.settings.import_max_bytes
    data = await file.read(limit + 1)
    try:
        bundle, found = await asyncio.to_thread(data_transfer.parse_import, data, limit, format)
        result = await data_transfer.import_bundle(
            services.database.pool, services.embedder, user_of(request).user_id, bundle
        )
    except data_transfer.ImportRejected as error:
        name = (file.filename or "").strip()
        raise HTTPException(error.status, f"{name}: {error}" if name else str(error)) from None
    return {"format": found, **result}
