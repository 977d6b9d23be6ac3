"""The documents API: upload a file (from the composer or the Documents page), see it being
processed, rename, re-index, cancel, delete it, download the original, and read a page's text.

`POST /api/documents` (multipart: `file`, optional `chat_id` to attach it to a chat) stores the
file and queues it (chat/document_worker.py); the answer is the document with `status`
`processing`, and `stage`, `done` and `total` say how far it is; then `ready` (with `pages` and
`chunks`) or `failed` with an `error` the user can act on. The same bytes uploaded again give back
the document already there (200 instead of 201). Errors are the usual JSON shape: 404 unknown
document or chat, 409 nothing to cancel, 413 over DOCUMENT_MAX_BYTES, 415 a type ResolveAI does
not read, 422 an empty file or bad fields.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, File, Form, HTTPException, Query, Request, Response, UploadFile
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from chat.auth import user_of
from core import chat_store, document_store
from core.api_schema import NON_BLANK_TEXT
from core.http_errors import errors
from core.http_guard import readable_size
from rag.document_convert import DocumentRejected, kind_of

router = APIRouter(prefix="/api")


class RenameIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filename: str = Field(
        min_length=1, max_length=255, json_schema_extra={"pattern": NON_BLANK_TEXT}
    )


def _pool(request: Request) -> Any:
    return request.app.state.services.database.pool


async def _document_or_404(request: Request, document_id: uuid.UUID) -> dict[str, Any]:
    row = await document_store.get_document(_pool(request), document_id, user_of(request).user_id)
    if row is None:
        raise HTTPException(404, f"No document with id {document_id}")
    return row


@router.post("/documents", status_code=201, responses=errors(404, 415))
async def upload_document(
    request: Request,
    file: Annotated[
        UploadFile,
        File(description="The file: PDF, DOCX, PPTX, XLSX, CSV, HTML, Markdown or text."),
    ],
    chat_id: Annotated[uuid.UUID | None, Form()] = None,
) -> JSONResponse:
    """Upload a document; it is processed in the background (poll it, or the list)."""
    user = user_of(request)
    filename = (file.filename or "").strip() or "document"
    try:
        kind_of(filename)
    except DocumentRejected as error:
        raise HTTPException(415, f"{filename}: {error}") from None
    data = await file.read()
    limit = request.app.state.settings.document_max_bytes
    if len(data) > limit:
        raise HTTPException(
            413, f"{filename} is larger than {readable_size(limit)}, the largest file accepted"
            " (DOCUMENT_MAX_BYTES).",
        )  # fmt: skip
    if not data:
        raise HTTPException(422, f"{filename!r} is empty.")
    if chat_id is not None and not await chat_store.get_chat(
        _pool(request), chat_id, user_id=user.user_id
    ):
        raise HTTPException(404, f"No chat with id {chat_id}")
    row, new = await document_store.add_document(
        _pool(request), user.user_id, filename, file.content_type or "", data, chat_id
    )
    if new:
        request.app.state.document_worker.wake()
    return JSONResponse(jsonable_encoder(row), status_code=201 if new else 200)


@router.get("/documents")
async def list_documents(request: Request) -> list[dict[str, Any]]:
    """Your documents, newest first, with their processing status."""
    rows = await document_store.list_documents(_pool(request), user_of(request).user_id)
    return jsonable_encoder(rows)


@router.get("/documents/{document_id}", responses=errors(404))
async def get_document(request: Request, document_id: uuid.UUID) -> dict[str, Any]:
    return jsonable_encoder(await _document_or_404(request, document_id))


@router.get("/documents/{document_id}/file", responses=errors(404),
            response_class=Response)  # fmt: skip
async def download_document(request: Request, document_id: uuid.UUID) -> Response:
    """The original file, as a download (never shown inline: an uploaded HTML page must not run
    as part of this site)."""
    row = await document_store.get_file(_pool(request), document_id, user_of(request).user_id)
    if row is None:
        raise HTTPException(404, f"No document with id {document_id}")
    return Response(
        bytes(row["content"]),
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(row['filename'])}",
            "Content-Security-Policy": "sandbox",
        },
    )


@router.get("/documents/{document_id}/chunks", responses=errors(404))
async def document_text(
    request: Request,
    document_id: uuid.UUID,
    page: Annotated[int | None, Query(ge=0, le=100_000)] = None,
) -> list[dict[str, Any]]:
    """The document's text as stored for search, in order (`page`: one page's only): what a
    citation's viewer shows, the cited passage among them."""
    await _document_or_404(request, document_id)
    rows = await document_store.document_chunks(
        _pool(request), document_id, user_of(request).user_id, page
    )
    return jsonable_encoder(rows)


@router.patch("/documents/{document_id}", responses=errors(404))
async def rename_document(
    request: Request, document_id: uuid.UUID, body: RenameIn
) -> dict[str, Any]:
    row = await document_store.rename_document(
        _pool(request), document_id, user_of(request).user_id, body.filename
    )
    if row is None:
        raise HTTPException(404, f"No document with id {document_id}")
    return jsonable_encoder(row)


@router.post("/documents/{document_id}/reindex", responses=errors(404))
async def reindex_document(request: Request, document_id: uuid.UUID) -> dict[str, Any]:
    """Process the document again (after a failure or a cancel)."""
    row = await document_store.reindex_document(
        _pool(request), document_id, user_of(request).user_id
    )
    if row is None:
        raise HTTPException(404, f"No document with id {document_id}")
    request.app.state.document_worker.wake()
    return jsonable_encoder(row)


@router.post("/documents/{document_id}/cancel", responses=errors(404, 409))
async def cancel_document(request: Request, document_id: uuid.UUID) -> dict[str, Any]:
    """Stop processing the document (it stays, `cancelled`; re-index to process it again)."""
    row = await document_store.cancel_document(
        _pool(request), document_id, user_of(request).user_id
    )
    if row is None:
        await _document_or_404(request, document_id)
        raise HTTPException(409, "This document is not being processed.")
    return jsonable_encoder(row)


@router.delete("/documents/{document_id}", status_code=204, responses=errors(404))
async def delete_document(request: Request, document_id: uuid.UUID) -> Response:
    """Delete the document and its chunks; replies that cited it keep the passages they quoted."""
    if not await document_store.delete_document(
        _pool(request), document_id, user_of(request).user_id
    ):
        raise HTTPException(404, f"No document with id {document_id}")
    return Response(status_code=204)
