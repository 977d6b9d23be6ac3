"""`GET /api/search?q=…&limit=`: search across your chats (core/chat_search.py).

Answers the matching chats, best first, each with its title and the best matching message (its
id, role, whether it is on the branch shown, and a snippet). Titles and snippets come as parts,
`[{"text": …, "match": true|false}]`, plain text the browser marks up itself: never HTML.

422 for a query that is missing, blank, longer than 200 characters or not storable text (a NUL:
core/http_guard.py answers that one before the route); a query with no searchable word ("!!!")
finds nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder

from chat.auth import user_of
from core.api_schema import NON_BLANK_TEXT
from core.chat_search import MAX_QUERY_CHARS, search_chats
from core.services import Services

router = APIRouter(prefix="/api")


@router.get("/search")
async def search(
    request: Request,
    q: Annotated[
        str,
        Query(
            min_length=1, max_length=MAX_QUERY_CHARS, json_schema_extra={"pattern": NON_BLANK_TEXT}
        ),
    ],
    limit: Annotated[int, Query(ge=1, le=50)] = 20,
) -> list[dict[str, Any]]:
    """Your chats (not temporary ones) whose messages or title match `q`: words (stemmed in
    English, as written in any language), "a phrase", -left-out, or."""
    if not q.strip():
        raise HTTPException(422, "q: the search is empty")
    services: Services = request.app.state.services
    found = await search_chats(services.database.pool, user_of(request).user_id, q.strip(), limit)
    return jsonable_encoder(found)
