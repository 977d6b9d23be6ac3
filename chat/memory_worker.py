"""The background worker that runs memory extractions queued in Postgres (core/memory_jobs.py):
a `QueueWorker` (chat/queue_worker.py) whose job is reading one user message for facts.
"""

from __future__ import annotations

import logging

from chat.memory_extraction import extract_memories
from chat.queue_worker import QueueWorker
from core import memory_jobs
from core.logs import first_line
from core.services import Services


class MemoryWorker(QueueWorker):
    name = "memory extraction"
    log = logging.getLogger("resolveai.memory")

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services
        # The last job's finish saw none waiting: this pass ends without asking the queue again
        # (a job queued since wakes the next pass).
        self._drained = False

    async def run_one(self) -> bool:
        if self._drained:
            self._drained = False
            return False
        job = await memory_jobs.claim(self.services.database.pool)
        if job is None:
            return False
        await self._run_job(job)
        return True

    async def _run_job(self, job: memory_jobs.MemoryJob) -> int:
        """1 if the job was done, 0 if it failed (and was left for a retry or dropped)."""
        pool = self.services.database.pool
        try:
            result = await extract_memories(self.services, job.message_id)
        except Exception as error:
            retry = await memory_jobs.fail(pool, job, f"{type(error).__name__}: {error}")
            self.log.warning(
                "Memory: extraction failed (%s: %s); %s",
                type(error).__name__,
                first_line(error),
                "will retry" if retry else "giving up on this message",
            )
            return 0
        self._drained = not await memory_jobs.finish(pool, job.message_id)
        if result.skipped is None:
            self.log.info(
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
