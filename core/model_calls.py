"""Usage analytics: every model call recorded in `model_calls` (migration 0012), read back per user.

`UsageRecorder` is a LiteLLM callback: once a call ended (each deployment the Router tried, a
failed one too) it writes one row from LiteLLM's standard logging payload, so tokens and cost are
computed once per call by LiteLLM (its offline cost map), never per streamed chunk. Calls that
carry no step name (`generation_name` in their metadata, core/tracing.py's `trace_metadata`) are
not the user's to count (the local model's warm-up at start-up) and are skipped. Rows are stored
WRITE_SECONDS after the first of them, all in one statement (a message makes two or three model
calls, and a row each was two of its ~11 round trips); a server killed in between loses those
rows. A failed write is logged and dropped: analytics never fail a reply. `call_row` is also what
core/tracing.py records of a call.

`usage()` answers `GET /api/usage`: per day (UTC, every day of the range, empty ones too), per
model or per tool (from the replies' saved tool calls), with totals.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import date
from typing import Any

import litellm
from litellm.integrations.custom_logger import CustomLogger
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from core.statements import Db, execute, fetch_all, fetch_one

log = logging.getLogger("resolveai.usage")

MAX_ERROR_CHARS = 500
WRITE_SECONDS = 0.5  # how long a recorded call waits for others to be stored with it

# The rows of several calls in one statement (a JSON array of `call_row`s). A row of a user deleted
# meanwhile (their usage went with the account) is left out: it would fail the others.
INSERT_SQL = """
INSERT INTO model_calls (user_id, chat_id, role, model, fallback, step, prompt_tokens,
                         completion_tokens, cost, latency_ms, ttft_ms, error)
SELECT coalesce(r."user", (SELECT user_id FROM chats WHERE chat_id = r.chat)), r.chat, r.role,
       r.model, r.fallback, r.step, r.prompt_tokens, r.completion_tokens, r.cost, r.latency_ms,
       r.ttft_ms, r.error
FROM jsonb_to_recordset(%s) AS r("user" uuid, chat uuid, role text, model text, fallback boolean,
     step text, prompt_tokens integer, completion_tokens integer, cost double precision,
     latency_ms integer, ttft_ms integer, error text)
WHERE r."user" IS NULL OR EXISTS (SELECT 1 FROM users AS u WHERE u.user_id = r."user")
"""

# The figures of a set of calls (`c`), as every grouping and the totals report them.
FIGURES = """
    count(c.call_id) AS calls,
    count(c.call_id) FILTER (WHERE c.error IS NOT NULL) AS errors,
    count(c.call_id) FILTER (WHERE c.fallback) AS fallbacks,
    coalesce(sum(c.prompt_tokens), 0)::bigint AS prompt_tokens,
    coalesce(sum(c.completion_tokens), 0)::bigint AS completion_tokens,
    coalesce(sum(c.cost), 0)::float AS cost,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY c.latency_ms) AS latency_p50_ms,
    percentile_cont(0.95) WITHIN GROUP (ORDER BY c.latency_ms) AS latency_p95_ms,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY c.ttft_ms) AS ttft_p50_ms"""

# From the start of day `from` to the end of day `to`, UTC.
FROM_TS = "(%(from)s::date::timestamp AT TIME ZONE 'UTC')"
TO_TS = "((%(to)s::date + 1)::timestamp AT TIME ZONE 'UTC')"
MINE = f"c.user_id = %(user)s AND c.called_at >= {FROM_TS} AND c.called_at < {TO_TS}"

BY_DAY_SQL = f"""
SELECT d.day::date::text AS key, {FIGURES}
FROM generate_series(%(from)s::date::timestamp, %(to)s::date::timestamp, '1 day') AS d(day)
LEFT JOIN model_calls AS c
  ON {MINE} AND (c.called_at AT TIME ZONE 'UTC')::date = d.day::date
GROUP BY d.day ORDER BY d.day
"""

BY_MODEL_SQL = f"""
SELECT c.model AS key, {FIGURES}
FROM model_calls AS c WHERE {MINE}
GROUP BY c.model ORDER BY calls DESC, key
"""

TOTALS_SQL = f"SELECT {FIGURES} FROM model_calls AS c WHERE {MINE}"

# Tool use, from the tool calls saved with the user's replies.
BY_TOOL_SQL = f"""
SELECT t.call->>'name' AS key, count(*) AS calls,
       count(*) FILTER (WHERE (t.call->>'ok')::boolean IS FALSE) AS errors,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY (t.call->>'duration_ms')::float)
           AS duration_p50_ms
FROM messages AS m JOIN chats AS ch USING (chat_id),
     jsonb_array_elements(m.tool_calls) AS t(call)
WHERE ch.user_id = %(user)s AND m.role = 'assistant'
  AND m.sent_at >= {FROM_TS} AND m.sent_at < {TO_TS}
GROUP BY key ORDER BY calls DESC, key
"""


class UsageRecorder(CustomLogger):
    """Writes a `model_calls` row for each model call LiteLLM reports, into the database of the
    services opened last in this process (`start_recording`): one recorder, so no call is
    counted twice when tests open a second set of services beside the first."""

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[dict[str, Any]] = []
        self._writer: asyncio.Task[None] | None = None
        self._hurry: asyncio.Future[None] | None = None  # set: the writer stops waiting

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        await self._record(kwargs, error=None)

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        await self._record(kwargs, error=str(kwargs.get("exception") or "failed"))

    async def _record(self, kwargs: dict[str, Any], error: str | None) -> None:
        row = call_row(kwargs, error)
        if row is None or not _pools:
            return
        self._rows.append(row)
        writer = self._writer
        # (A writer of another event loop, one a test closed, would never run.)
        if writer is None or writer.done() or writer.get_loop() is not asyncio.get_running_loop():
            self._writer = asyncio.create_task(self._write_soon(), name="usage rows")

    async def _write_soon(self) -> None:
        self._hurry = hurry = asyncio.get_running_loop().create_future()
        await asyncio.wait([hurry], timeout=WRITE_SECONDS)
        self._writer = None
        await self.write()

    async def written(self) -> None:
        """Wait until the calls recorded so far are stored, by the writer (its own task)."""
        writer = self._writer
        if writer is None or writer.get_loop() is not asyncio.get_running_loop():
            return
        if self._hurry is not None and not self._hurry.done():
            self._hurry.set_result(None)
        await asyncio.gather(writer, return_exceptions=True)

    async def write(self) -> None:
        """Store the calls recorded so far, in one statement."""
        rows, self._rows = self._rows, []
        if not rows or not _pools:
            return
        try:
            await insert_calls(_pools[-1], rows)
        except Exception as failure:
            log.warning("Usage: %d model calls were not recorded (%s)", len(rows), failure)

    async def close(self) -> None:
        """Store what is waiting now (the services are closing). The writer is hurried, not
        cancelled: cancelled in its insert, it would lose the rows it took."""
        await self.written()
        self._writer = None  # (one of a closed event loop never runs)
        await self.write()


_pools: list[AsyncConnectionPool] = []


def start_recording(pool: AsyncConnectionPool) -> None:
    """Record this process's model calls into `pool`'s database (until `stop_recording`)."""
    _pools.append(pool)
    if not _recorders():
        litellm.callbacks.append(UsageRecorder())


def _recorders() -> list[UsageRecorder]:
    return [c for c in litellm.callbacks if isinstance(c, UsageRecorder)]


async def written() -> None:
    """Wait until the model calls recorded so far are stored (a benchmark's phase ends: their
    round trip belongs to it)."""
    for recorder in _recorders():
        await recorder.written()


async def stop_recording(pool: AsyncConnectionPool) -> None:
    """Store the calls waiting to be written, then no longer record into `pool`'s database."""
    for recorder in _recorders():
        await recorder.close()
    if pool in _pools:
        _pools.remove(pool)
    if not _pools:
        # From every list: LiteLLM copies `litellm.callbacks` into lists of its own on each call,
        # and a recorder left there records on, unseen by `written()`.
        for recorder in _recorders():
            litellm.logging_callback_manager.remove_callback_from_all_lists(recorder)


async def insert_calls(db: Db, rows: list[dict[str, Any]]) -> None:
    """Store `call_row`s, in one statement."""
    as_json = [{k: str(v) if isinstance(v, uuid.UUID) else v for k, v in r.items()} for r in rows]
    await execute(db, INSERT_SQL, (Jsonb(as_json),))


def call_row(kwargs: dict[str, Any], error: str | None) -> dict[str, Any] | None:
    """The `model_calls` row for one LiteLLM call, from its standard logging payload."""
    payload = kwargs.get("standard_logging_object")
    metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
    step = metadata.get("generation_name")
    if not payload or not step:
        return None
    started, ended = payload.get("startTime") or 0.0, payload.get("endTime") or 0.0
    first = payload.get("completionStartTime")
    return {
        "user": _uuid(metadata.get("trace_user_id") or metadata.get("user_id")),
        "chat": _uuid(metadata.get("session_id")),
        # The role asked for, and the deployment that answered (of a fallback's group when the
        # Router fell back).
        "role": metadata.get("original_model_group") or payload.get("model_group") or "",
        "model": payload.get("model") or "",
        "fallback": bool(metadata.get("attempted_fallbacks")),
        "step": step,
        "prompt_tokens": int(payload.get("prompt_tokens") or 0),
        "completion_tokens": int(payload.get("completion_tokens") or 0),
        "cost": float(payload.get("response_cost") or 0.0),
        "latency_ms": max(0, round((ended - started) * 1000)),
        # A streamed reply's first token; a call answered all at once has none to report.
        "ttft_ms": (
            round((first - started) * 1000)
            if first and payload.get("stream") and not error
            else None
        ),
        "error": error[:MAX_ERROR_CHARS] if error else None,
    }


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


async def usage(
    pool: AsyncConnectionPool, user_id: uuid.UUID, first: date, last: date, group_by: str
) -> dict[str, Any]:
    """The user's model calls from `first` to `last` (whole UTC days), grouped, with totals."""
    params = {"user": user_id, "from": first, "to": last}
    grouped = {"day": BY_DAY_SQL, "model": BY_MODEL_SQL, "tool": BY_TOOL_SQL}[group_by]
    # One snapshot for both statements: a call recorded between them (a title, an extraction,
    # written after the reply) would make the totals disagree with the groups.
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        groups = await fetch_all(conn, grouped, params)
        totals = await fetch_one(conn, TOTALS_SQL, params)
    return {
        "from": first.isoformat(),
        "to": last.isoformat(),
        "group_by": group_by,
        "groups": [_rounded(g) for g in groups],
        "totals": _rounded(totals or {}),
    }


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    """Milliseconds as whole numbers (percentiles interpolate), costs to a millionth of a dollar."""
    return {
        k: round(v) if k.endswith("_ms") and v is not None
        else round(v, 6) if k == "cost" else v
        for k, v in row.items()
    }  # fmt: skip
