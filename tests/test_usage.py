"""Usage analytics through the real server: every model call of a message (each deployment the
Router tried) is a `model_calls` row with its role, deployment, tokens, latency and time to first
token, and `GET /api/usage` reports them per day, per model and per tool, with totals.

The message uses the calculator and then searches the web (the offline `pages` provider); the
scripted model answers, below LiteLLM, so LiteLLM's own callback and usage figures run for real.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import litellm
import pytest

from core import chat_store, model_calls, tracing
from core.accounts import LOCAL_USER_ID
from core.config import Settings
from core.services import Services
from core.statements import fetch_all
from tests.chat_client import send
from tests.test_web_search import calculator_then_search, pages_dir, web_services  # noqa: F401

STEPS = {"chat call 1", "chat call 2", "evidence check", "web answer"}


@pytest.fixture(scope="module")
async def chat_services(settings: Settings, pages_dir: Path) -> AsyncIterator[Services]:  # noqa: F811
    async with web_services(settings, pages_dir) as services:
        yield services


async def rows_of(services: Services, chat_id: str, steps: set[str]) -> list[dict[str, Any]]:
    """The chat's model_calls rows once every step in `steps` was recorded (LiteLLM writes them
    from a background task after each call)."""
    rows: list[dict[str, Any]] = []
    for _ in range(100):
        rows = await fetch_all(
            services.database.pool,
            "SELECT * FROM model_calls WHERE chat_id = %s ORDER BY called_at",
            (uuid.UUID(chat_id),),
        )
        if steps <= {r["step"] for r in rows}:
            return rows
        await asyncio.sleep(0.1)
    raise AssertionError(f"not recorded: {steps - {r['step'] for r in rows}}")


def today() -> str:
    return datetime.now(UTC).date().isoformat()


async def test_each_model_call_is_recorded_and_reported(client, model, chat_services) -> None:
    before = (await client.get("/api/usage", params={"group_by": "model"})).json()
    model.push(
        *calculator_then_search(
            "6 * 7", "Warsaw population", "Warsaw has about 1.7 million inhabitants[1]."
        )
    )
    events = await send(client, "How many people live in Warsaw? And what is 6 times 7?")
    assert events[-1]["type"] == "done"
    chat_id = events[0]["chat_id"]

    rows = await rows_of(chat_services, chat_id, STEPS)
    by_step = {r["step"]: r for r in rows if r["step"] in STEPS}
    assert len([r for r in rows if r["step"] in STEPS]) == len(STEPS)  # each call once
    for step, row in by_step.items():
        assert row["user_id"] == LOCAL_USER_ID, step
        assert row["prompt_tokens"] > 0 and row["completion_tokens"] >= 0, step
        assert row["latency_ms"] >= 0 and row["error"] is None and not row["fallback"], step
        assert row["cost"] == 0.0  # the scripted model is in no cost map
    assert by_step["web answer"]["role"] == "chat"
    assert by_step["web answer"]["model"] == "scripted/chat"
    assert by_step["web answer"]["ttft_ms"] is not None  # streamed: the first token's time
    assert by_step["web answer"]["completion_tokens"] > 0
    assert by_step["evidence check"]["ttft_ms"] is None  # answered at once: no first token
    assert by_step["evidence check"]["role"] == "utility"
    assert by_step["evidence check"]["model"] == "scripted/utility"

    after = (await client.get("/api/usage", params={"group_by": "model"})).json()
    assert after["from"] == (datetime.now(UTC).date() - timedelta(days=29)).isoformat()
    assert after["to"] == today()
    calls = {g["key"]: g["calls"] for g in after["groups"]}
    was = {g["key"]: g["calls"] for g in before["groups"]}
    assert calls["scripted/chat"] - was.get("scripted/chat", 0) >= 3
    assert calls["scripted/utility"] - was.get("scripted/utility", 0) >= 1
    # The totals are the sum of the groups.
    for figure in ("calls", "prompt_tokens", "completion_tokens", "errors", "fallbacks"):
        assert after["totals"][figure] == sum(g[figure] for g in after["groups"]), figure
    assert after["totals"]["latency_p95_ms"] >= after["totals"]["latency_p50_ms"] >= 0

    by_day = (await client.get("/api/usage", params={"group_by": "day", "from": today()})).json()
    assert [g["key"] for g in by_day["groups"]] == [today()]
    assert by_day["groups"][0]["calls"] == by_day["totals"]["calls"] >= len(STEPS)
    week = (await client.get("/api/usage", params={"group_by": "day", "from":
            (datetime.now(UTC).date() - timedelta(days=6)).isoformat()})).json()  # fmt: skip
    assert len(week["groups"]) == 7  # every day, empty ones too
    assert sum(g["calls"] for g in week["groups"]) == week["totals"]["calls"]

    tools = (await client.get("/api/usage", params={"group_by": "tool"})).json()
    used = {g["key"]: g for g in tools["groups"]}
    assert used["calculator"]["calls"] >= 1 and used["web_search"]["calls"] >= 1
    assert used["calculator"]["duration_p50_ms"] is not None


async def test_the_calls_of_a_message_are_stored_together(
    client, model, chat_services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row a call was two of a message's ~11 round trips: the calls recorded within
    WRITE_SECONDS of each other are stored in one."""
    written: list[int] = []
    insert_calls = model_calls.insert_calls

    async def counted(db: Any, rows: list[dict[str, Any]]) -> None:
        written.append(len(rows))
        await insert_calls(db, rows)

    monkeypatch.setattr(model_calls, "insert_calls", counted)
    model.push(*calculator_then_search("6 * 7", "Warsaw population", "About 1.7 million[1]."))
    events = await send(client, "How many people live in Warsaw? And what is 6 times 7?")
    assert events[-1]["type"] == "done"
    rows = await rows_of(chat_services, events[0]["chat_id"], STEPS)
    assert sum(written) >= len(rows) >= len(STEPS)
    assert len(written) < len(STEPS), written  # not a write per call


def recorders_litellm_calls() -> set[int]:
    """The usage recorders in any of LiteLLM's callback lists (it copies `litellm.callbacks` into
    lists of its own on each call)."""
    every = litellm.logging_callback_manager.get_all_callbacks()
    return {id(c) for c in every if isinstance(c, model_calls.UsageRecorder)}


async def test_recording_stopped_leaves_no_recorder_behind(client, model, chat_services) -> None:
    """Services closed and opened again in one process (each test module, the benchmark) record
    with the new recorder only: one left in LiteLLM's own lists went on recording, unseen by
    `written()`, and the benchmark counted its rows in the phase after theirs."""
    model.push(*calculator_then_search("6 * 7", "Warsaw population", "About 1.7 million[1]."))
    events = await send(client, "How many people live in Warsaw? And what is 6 times 7?")
    await rows_of(chat_services, events[0]["chat_id"], STEPS)  # LiteLLM has called the recorder
    opened = list(model_calls._pools)
    for pool in opened:
        await model_calls.stop_recording(pool)
    try:
        assert recorders_litellm_calls() == set()
    finally:
        for pool in opened:
            model_calls.start_recording(pool)

    model.push(*calculator_then_search("6 * 7", "Warsaw population", "About 1.7 million[1]."))
    events = await send(client, "How many people live in Warsaw? And what is 6 times 7?")
    await rows_of(chat_services, events[0]["chat_id"], STEPS)
    assert recorders_litellm_calls() == {id(r) for r in model_calls._recorders()}
    assert len(model_calls._recorders()) == 1


async def test_a_row_of_a_deleted_user_does_not_fail_the_rows_stored_with_it(
    chat_services: Services,
) -> None:
    """Rows wait to be stored together: one of a user deleted meanwhile (their usage went with
    the account) is left out, and the others are stored."""
    step = f"stored together {uuid.uuid4()}"
    row = {"chat": None, "role": "chat", "model": "scripted/chat", "fallback": False,
           "step": step, "prompt_tokens": 1, "completion_tokens": 1, "cost": 0.0,
           "latency_ms": 5, "ttft_ms": None, "error": None}  # fmt: skip
    pool = chat_services.database.pool
    rows = [{**row, "user": uuid.uuid4()}, {**row, "user": LOCAL_USER_ID}]
    await model_calls.insert_calls(pool, rows)
    stored = await fetch_all(pool, "SELECT user_id FROM model_calls WHERE step = %s", (step,))
    assert [r["user_id"] for r in stored] == [LOCAL_USER_ID]


async def test_a_fallback_and_the_failed_attempt_are_both_recorded(
    client, model, chat_services
) -> None:
    chat_id = str((await chat_store.create_chat(chat_services.database.pool, "flaky"))["chat_id"])
    model.push({"text": "hello"})
    await chat_services.router.acompletion(
        model="flaky",
        messages=[{"role": "user", "content": "hi"}],
        metadata=tracing.trace_metadata(str(uuid.uuid4()), chat_id, "flaky call"),
    )
    rows = await rows_of(chat_services, chat_id, {"flaky call"})
    for _ in range(50):
        if len(rows) == 2:
            break
        await asyncio.sleep(0.1)
        rows = await rows_of(chat_services, chat_id, {"flaky call"})
    by_model = {r["model"]: r for r in rows}
    assert set(by_model) == {"scripted/down", "scripted/chat"}
    failed, answered = by_model["scripted/down"], by_model["scripted/chat"]
    assert failed["error"] and failed["ttft_ms"] is None and not failed["fallback"]
    assert answered["error"] is None and answered["fallback"] and answered["role"] == "flaky"
    assert {r["user_id"] for r in rows} == {LOCAL_USER_ID}  # the chat's owner

    report = (await client.get("/api/usage", params={"group_by": "model", "from": today()})).json()
    groups = {g["key"]: g for g in report["groups"]}
    assert groups["scripted/down"]["errors"] >= 1
    assert groups["scripted/chat"]["fallbacks"] >= 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "2026-13-01"}, "from"),
        ({"to": "yesterday"}, "to"),
        ({"from": "2026-12-02", "to": "2026-12-01"}, "from"),
        ({"from": "2024-01-01", "to": "2026-12-01"}, "from"),
        ({"group_by": "week"}, "group_by"),
    ],
)
async def test_bad_usage_queries_get_a_clear_422(client, params, field) -> None:
    response = await client.get("/api/usage", params=params)
    assert response.status_code == 422
    body = response.json()
    assert set(body) == {"error", "request_id"}  # the one error shape
    assert field in body["error"]
