"""The memory API: the user sees, searches, edits, deletes, exports and pauses what is remembered.

There is no way to create a memory here: memories come only from the user's own messages (the
extraction after each reply, or `save_memory` when the user asks), each with its quote. An edit
may change the fact's wording (re-embedded) or its quote, which must still be found in the source
message. Errors are `{"error": ..., "request_id": ...}` (core/http_errors.py): 404 unknown
memory, 409 a stale "forget everything" token, 422 bad input.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from chat.auth import user_of
from chat.tools import TOOLS_BY_NAME
from core import memory_store
from core.api_schema import NON_BLANK_TEXT
from core.clock import MAX_ZONE_CHARS, known_time_zone
from core.http_errors import errors
from core.memory_store import public_memory
from core.preferences import MAX_INSTRUCTIONS_CHARS, get_preferences, set_preferences
from core.services import Services

router = APIRouter(prefix="/api")


class MemoryEdit(BaseModel):
    # The schema states the rule below: at least one of the two, as a string.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"anyOf": [
        {"required": [name], "properties": {name: {"type": "string"}}}
        for name in ("content", "quote")
    ]})  # fmt: skip

    content: (
        Annotated[str, Field(min_length=1, max_length=memory_store.MAX_MEMORY_CHARS,
                             json_schema_extra={"pattern": NON_BLANK_TEXT})] | None
    ) = None  # fmt: skip
    quote: str | None = Field(None, min_length=1, max_length=2000)

    # NUL characters never get here: core/http_guard.py refuses them in every request.
    @model_validator(mode="after")
    def _something_to_change(self) -> MemoryEdit:
        if self.content is None and self.quote is None:
            raise ValueError("give the new content or quote")
        if self.content is not None and not self.content.strip():
            raise ValueError("content: the memory is empty")
        return self


# The names of the tools a user may switch off (chat/tools.py lists them): an enum in the schema.
ToolName = Literal[tuple(TOOLS_BY_NAME)]  # type: ignore[valid-type]


class SettingsEdit(BaseModel):
    """Any of the user's preferences (core/preferences.py); those left out keep their value."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    # Each optional, none nullable: the defaults (never validated) only mark "left out".
    memory_paused: StrictBool = None  # type: ignore[assignment]
    theme: Literal["system", "light", "dark"] = None  # type: ignore[assignment]
    use_web_default: StrictBool = None  # type: ignore[assignment]
    # The whole list of the tools switched off (not a change to it): what the Settings page shows.
    disabled_tools: list[ToolName] = Field(None, max_length=len(TOOLS_BY_NAME))  # type: ignore[assignment]
    # The browser's IANA zone (Intl.DateTimeFormat().resolvedOptions().timeZone).
    time_zone: str = Field(None, min_length=1, max_length=MAX_ZONE_CHARS)  # type: ignore[assignment]
    # How the user wants to be answered ("" for none).
    custom_instructions: str = Field(None, max_length=MAX_INSTRUCTIONS_CHARS)  # type: ignore[assignment]

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        if not known_time_zone(value):
            raise ValueError(f"{value!r} is not a time zone this server knows (IANA names only)")
        return value

    @model_validator(mode="after")
    def _something_to_change(self) -> SettingsEdit:
        if not self.model_fields_set:
            raise ValueError("give at least one setting to change")
        return self

    def changes(self) -> dict[str, Any]:
        changes = self.model_dump(include=self.model_fields_set)
        if "disabled_tools" in changes:  # in TOOLS' order, once each
            changes["disabled_tools"] = [t for t in TOOLS_BY_NAME if t in changes["disabled_tools"]]
        return changes


def _services(request: Request) -> Services:
    return request.app.state.services


@router.get("/memories")
async def list_memories(
    request: Request,
    q: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    include_superseded: bool = False,
) -> dict[str, Any]:
    """Memories newest first (`q` finds text in the fact or its quote); `forget_token` is what
    "forget everything" must send back."""
    pool, user_id = _services(request).database.pool, user_of(request).user_id
    rows, total = await memory_store.list_memories(
        pool, user_id, q, limit, offset, include_superseded
    )
    return {
        "memories": [public_memory(row) for row in rows],
        "total": total,
        "forget_token": await memory_store.forget_token(pool, user_id),
    }


@router.get("/memories/export")
async def export_memories(request: Request) -> JSONResponse:
    """Every memory, superseded ones included, as one JSON file."""
    pool = _services(request).database.pool
    return JSONResponse(
        {
            "exported_at": datetime.now(UTC).isoformat(),
            "memories": await memory_store.export_memories(pool, user_of(request).user_id),
        },
        headers={"Content-Disposition": 'attachment; filename="resolveai-memories.json"'},
    )


@router.api_route("/memories/export", methods=["PATCH", "DELETE"], include_in_schema=False)
async def export_is_read_only() -> None:
    # Without this, PATCH /memories/export would reach PATCH /memories/{memory_id} and be told
    # "export" is not a valid id: the export is a resource of its own, read-only.
    raise HTTPException(405)


@router.get("/memories/{memory_id}", responses=errors(404))
async def get_memory(request: Request, memory_id: uuid.UUID) -> dict[str, Any]:
    row = await memory_store.get_memory(
        _services(request).database.pool, memory_id, user_of(request).user_id
    )
    if row is None:
        raise HTTPException(404, f"No memory with id {memory_id}")
    return public_memory(row)


@router.patch("/memories/{memory_id}", responses=errors(404))
async def edit_memory(request: Request, memory_id: uuid.UUID, body: MemoryEdit) -> dict[str, Any]:
    services = _services(request)
    try:
        row = await memory_store.update_memory(
            services.database.pool,
            services.embedder,
            memory_id,
            user_id=user_of(request).user_id,
            content=body.content,
            quote=body.quote,
        )
    except memory_store.NotGrounded as error:
        raise HTTPException(422, f"quote: {error}") from None
    if row is None:
        raise HTTPException(404, f"No memory with id {memory_id}")
    return public_memory(row)


@router.delete("/memories/{memory_id}", status_code=204, responses=errors(404))
async def delete_memory(request: Request, memory_id: uuid.UUID) -> Response:
    if not await memory_store.delete_memory(
        _services(request).database.pool, memory_id, user_of(request).user_id
    ):
        raise HTTPException(404, f"No memory with id {memory_id}")
    return Response(status_code=204)


@router.delete("/memories", responses=errors(409))
async def forget_everything(
    request: Request, confirm: Annotated[str, Query(min_length=1, max_length=100)]
) -> dict[str, Any]:
    """Delete every memory; `confirm` must be the `forget_token` of the latest listing."""
    deleted = await memory_store.forget_all(
        _services(request).database.pool, user_of(request).user_id, confirm
    )
    if deleted is None:
        raise HTTPException(
            409, "The memories changed since you looked: reload the list and confirm again."
        )
    return {"deleted": deleted}


@router.get("/settings")
async def get_settings(request: Request) -> dict[str, Any]:
    """The user's preferences (what the server runs on: GET /api/settings/system)."""
    return await get_preferences(_services(request).database.pool, user_of(request).user_id)


@router.patch("/settings")
async def edit_settings(request: Request, body: SettingsEdit) -> dict[str, Any]:
    """Change the preferences given (at least one); answers them all."""
    return await set_preferences(
        _services(request).database.pool, user_of(request).user_id, **body.changes()
    )
