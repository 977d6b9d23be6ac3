"""`GET /api/usage?from=&to=&group_by=day|model|tool`: your model calls and tool use
(core/model_calls.py).

`from` and `to` are dates (YYYY-MM-DD, whole UTC days, both included); by default the last 30
days up to today. Each group (a day, a model, a tool) and the totals carry calls, errors,
fallbacks, prompt and completion tokens, cost in USD (LiteLLM's offline cost map: 0 for the local
model), latency p50/p95 and time-to-first-token p50 in ms; a tool group its calls, failures and
median duration. 422 for a date that is not one, `from` after `to`, or a range over a year.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import Field

from chat.auth import user_of
from core.model_calls import usage
from core.services import Services

router = APIRouter(prefix="/api")

DEFAULT_DAYS = 30
MAX_DAYS = 366


# A date as written, YYYY-MM-DD: a bare number is not one (pydantic would read it as a Unix time).
Day = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$", json_schema_extra={"format": "date"})]


@router.get("/usage")
async def get_usage(
    request: Request,
    first: Annotated[Day | None, Query(alias="from")] = None,
    last: Annotated[Day | None, Query(alias="to")] = None,
    group_by: Literal["day", "model", "tool"] = "day",
) -> dict[str, Any]:
    """Your usage between two dates, grouped by day, model or tool, with totals."""
    end = _day("to", last) or datetime.now(UTC).date()
    start = _day("from", first) or end - timedelta(days=DEFAULT_DAYS - 1)
    if start > end:
        raise HTTPException(422, "from: the range starts after it ends")
    if (end - start).days + 1 > MAX_DAYS:
        raise HTTPException(422, f"from: a range is at most {MAX_DAYS} days")
    services: Services = request.app.state.services
    return await usage(services.database.pool, user_of(request).user_id, start, end, group_by)


def _day(name: str, value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise HTTPException(422, f"{name}: {value!r} is not a date (YYYY-MM-DD)") from None
