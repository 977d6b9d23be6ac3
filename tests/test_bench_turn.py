"""Smoke check of the per-turn benchmark (`bench/turn.py`) at a tiny size: it runs end to end on
the real server, database and embedder, every message gets its reply, and what it counts is
plausible. Not a performance test: no timing is asserted, only that the numbers exist and add up.

    .venv/bin/python -m pytest tests/test_bench_turn.py -q
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench.turn import (
    WITHOUT_EVENT_LOG,
    Bench,
    Options,
    Phase,
    event_log_line,
    median_interval,
    render,
    run_bench,
)
from core import turn_store
from core.config import Settings
from core.db import Database
from core.llm_router import build_router, plan_models
from core.services import Services
from rag.embedder import Embedder
from tests.conftest import SCRIPTED_MODELS

OPTIONS = Options(
    clients=[1, 2], turns=2, rounds=1, memory_clients=1, side_turns=2, local=False,
    without_event_log=True,
)  # fmt: skip


@pytest.fixture
async def bench_services(
    settings: Settings, fresh_database: str, embedder: Embedder
) -> AsyncIterator[Services]:
    """The server's services (the session's embedder, every model scripted) on a database of their
    own: the bench saves memories, and memories are global to the install."""
    own = settings.model_copy(
        update={"models_config": SCRIPTED_MODELS, "database_url": fresh_database}
    )
    database = await Database.open(own)
    plan = plan_models(own)
    try:
        yield Services(own, database, embedder, build_router(own, plan), plan)
    finally:
        await database.close()


async def test_bench_runs_every_phase_and_counts_plausibly(
    bench_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The event log's finishes, by phase: each reply's own, in its own phase (a reply's end is
    # waited for before its phase is counted), and none while the event log is patched out.
    finish_turn = turn_store.finish_turn
    finished: list[object] = []
    finishes: list[tuple[str, int, int]] = []

    async def counted_finish(*args: Any, **kwargs: Any) -> None:
        finished.append(args[1])
        await finish_turn(*args, **kwargs)

    phase = Bench.phase

    async def counted_phase(self: Bench, server: str, url: str, clients: int, turns: int) -> Phase:
        before = len(finished)
        result = await phase(self, server, url, clients, turns)
        finishes.append((server, clients, len(finished) - before))
        return result

    monkeypatch.setattr(turn_store, "finish_turn", counted_finish)
    monkeypatch.setattr(Bench, "phase", counted_phase)
    report = await run_bench(bench_services, OPTIONS)

    # Every message of every phase got its reply.
    servers = [(phase.server, phase.clients) for phase in report.phases]
    assert servers == [
        ("baseline", 1), ("resolveai", 1), (WITHOUT_EVENT_LOG, 1),
        ("baseline", 2), ("resolveai", 2), (WITHOUT_EVENT_LOG, 2),
        ("resolveai + embeddings", 1),
    ]  # fmt: skip
    for phase in report.phases:
        assert phase.turns_each == 2  # OPTIONS.turns, and OPTIONS.side_turns for embeddings
        assert len(phase.turns) == phase.expected == 2 * phase.clients
        assert phase.errors == []
        assert phase.done == phase.expected
        for turn in phase.turns:
            assert 0 < turn["first"] <= turn["done"] <= turn["end"]
        assert phase.wall > 0 and phase.lag, "the lag probe took no sample"
        assert not math.isnan(phase.ms("done", 99))

    # Round trips are counted for the real server only, per phase.
    for phase in report.of("baseline"):
        assert phase.round_trips == 0
    for phase in report.of("resolveai") + report.of("resolveai + embeddings"):
        # A message claims its chat, saves two messages, reads its history and releases the chat;
        # after the reply, its memory extraction claims the job, reads the message and finishes.
        # Some writes are periodic (the event log every 0.1 s while events wait, the stop flag
        # every 0.5 s), so a turn slowed by a loaded machine makes more: 28 seen at load 4.
        assert 5 <= phase.round_trips_per_turn <= 40
        # The session's Postgres runs on this machine: its CPU is counted (in clock ticks of
        # 10 ms, so a phase of a few messages may show none), and statements cost some.
        assert phase.postgres_cpu >= 0
    assert (
        sum(p.postgres_cpu for p in report.of("resolveai") + report.of("resolveai + embeddings"))
        > 0
    )
    # One message, the work it leaves behind included (the breakdown takes the fewest of three).
    # What needs no statement of its own: the turn row (saved with the question), the chat row
    # (read with the history), the user's preferences (read by the claim and by the memory job).
    # Then the usage rows of its model calls, in one write, when the recorder runs (the app
    # starts it; a test before this one may have), and a summary fold when one is due (its own
    # read of the history).
    assert 5 <= sum(report.breakdown.values()) <= 25
    separate = ("turn_store.create_turn", "chat_store.get_chat", "preferences.get_preferences")
    assert not [label for label in report.breakdown if any(name in label for name in separate)]
    assert any("add_message" in label for label in report.breakdown)

    # The embeddings phase embeds; the table shows every row.
    assert report.embed_calls >= OPTIONS.memory_clients * OPTIONS.side_turns
    # A step, the 20 words of the reply (handed over at once, so in a few batches), done.
    assert 3 <= report.events_per_turn <= 15
    table = render(report, OPTIONS)
    assert table.count("| ResolveAI |") == 2 and table.count("**overhead**") == 2
    assert "ResolveAI + embeddings" in table and "while embeddings run" in table

    # With the event log patched out a message finishes no turn (nor stores its events; its turn
    # row rides with the question either way), and the patch is gone once its phases are: the
    # phases after it still finish theirs, each reply once, within its own phase.
    unlogged = ("baseline", WITHOUT_EVENT_LOG)  # (the bare baseline has no event log at all)
    assert finishes == [
        (phase.server, phase.clients, 0 if phase.server in unlogged else phase.expected)
        for phase in report.phases
    ]
    assert len(set(finished)) == len(finished)
    assert turn_store.finish_turn is counted_finish
    assert table.count("| ResolveAI, event log patched out |") == 2
    assert "the event log's p50 cost at 2 clients" in event_log_line(report, 2)


def test_the_median_interval_is_the_sign_tests() -> None:
    # The textbook 95% intervals: the 4th and 12th of 15 values, the 16th and 30th of 45 (in any
    # order given); too few values for 95% give the extremes.
    assert median_interval([float(v) for v in reversed(range(1, 16))]) == (4.0, 12.0)
    assert median_interval([float(v) for v in range(1, 46)]) == (16.0, 30.0)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
