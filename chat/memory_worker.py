"""The background worker that runs memory extractions queued in Postgres (core/memory_jobs.py).

One per server process, started with the app. It takes jobs until none is left, then sleeps until
`wake()` (a reply was just saved in this process) or `POLL_SECONDS` pass (a job queued by another
process, or one a crashed process left behind). The queue is the truth: the worker keeps nothing
itself, so any process may do any job and a restart only delays them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from chat.memory_extraction import extract_memories
from core import memory_jobs
from core.services import Services

log = logging.getLogger("resolveai.memory")

POLL_SECONDS = 15.0
ERROR_PAUSE_SECONDS = 5.0  # after the database itself failed, before trying again


class MemoryWorker:
    def __init__(self, services: Services) -> None:
        self.services = services
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.idle = asyncio.Event()  # set while this worker is not at the queue (benchmarks wait)
        self.idle.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="memory worker")

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
                log.warning("Memory: extraction queue unreachable (%s)", error)
                await asyncio.sleep(ERROR_PAUSE_SECONDS)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)

    async def run_pending(self) -> int:
        """Do queued jobs until none is free; returns how many were done."""
        pool = self.services.database.pool
        done = 0
        self.idle.clear()
        try:
            while (job := await memory_jobs.claim(pool)) is not None:
                done += await self._run_job(job)
        finally:
            self.idle.set()
        return done

    async def _run_job(self, job: memory_jobs.MemoryJob) -> int:
        """1 if the job was done, 0 if it failed (and was left for a retry or dropped)."""
        pool = self.services.database.pool
        try:
            result = await extract_memories(self.services, job.message_id)
        except Exception as error:
            retry = await memory_jobs.fail(pool, job, f"{type(error).__name__}: {error}")
            log.warning(
                "Memory: extraction failed (%s: %s); %s",
                type(error).__name__,
                str(error).splitlines()[0][:200] if str(error) else "",
                "will retry" if retry else "giving up on this message",
            )
            return 0
        await memory_jobs.finish(pool, job.message_id)
        if result.skipped is None:
            log.info(
                "Memory: extraction done in %.1f s (%d saved, %d updated, %d replaced, %d known,"
                " %d refused)",
                result.seconds,
                len(result.saved),
                len(result.updated),
                len(result.superseded),
                result.duplicates,
                len(result.refused),
            )
        return 1
