"""A background worker for a job queue kept in Postgres (memory extractions, documents).

One per queue per server process, started with the app. It takes jobs until none is left, then
sleeps until `wake()` (this process just queued one) or `POLL_SECONDS` pass (a job queued by
another process, or one a crashed process left behind). The queue is the truth: the worker keeps
nothing itself, so any process may do any job and a restart only delays them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

POLL_SECONDS = 15.0
ERROR_PAUSE_SECONDS = 5.0  # after the database itself failed, before trying again


class QueueWorker:
    """Subclasses say what one job is: `run_one()` claims and does the next job, returning
    whether there was one."""

    name = "queue"
    log = logging.getLogger("resolveai")

    def __init__(self) -> None:
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.idle = asyncio.Event()  # set while this worker is not at the queue (benchmarks wait)
        self.idle.set()

    async def run_one(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{self.name} worker")

    def wake(self) -> None:
        self._wake.set()

    @property
    def settled(self) -> bool:
        """Not at the queue, and not about to look (benchmarks wait for this)."""
        return self.idle.is_set() and not self._wake.is_set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            # Cleared before the pass: a job queued during it wakes the next one.
            self._wake.clear()
            try:
                await self.run_pending()
            except Exception as error:  # the database is down: try again later, quietly
                self.log.warning("%s queue unreachable (%s)", self.name.capitalize(), error)
                await asyncio.sleep(ERROR_PAUSE_SECONDS)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)

    async def run_pending(self) -> int:
        """Do queued jobs until none is free; returns how many there were."""
        done = 0
        self.idle.clear()
        try:
            while await self.run_one():
                done += 1
        finally:
            self.idle.set()
        return done
