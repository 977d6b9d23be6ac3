"""One request at a time to the local model, across this machine's ResolveAI processes: first
come first served, except that a request someone is watching (a chat reply) goes before the
background work (memory extraction, summary folds, titles) that is waiting, and background work
being served gives way to it (`someone_waits`, used by the provider).

The model process reads one prompt at a time anyway; queueing here instead of inside it lets a
request know how many are ahead of it ("Waiting for the local model (1 ahead)"), refuse to wait
behind too many, and know that it is the only one being served (which the model process's "client
left" flag relies on). The model process belongs to the machine, so its queue lives in its folder:
each waiting request holds an exclusive `flock` on a ticket file named by its priority and arrival
time, and the request being served holds `serving.lock`. A process that dies drops its locks with
it; a ticket nobody holds any more is removed by the next request that finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO

POLL_SECONDS = 0.2
# A wait is told (a step on screen) only once it has lasted this long: background work being
# served gives way within ~0.2-0.4 s, and every keyless reply after the first found the last
# one's memory extraction running, so each showed "Waiting for the local model (1 ahead)" for
# a wait nobody would notice.
SHOW_WAIT_AFTER = 1.0
# Tickets' name prefixes: watched requests' names sort before all background work's.
_WATCHED, _BACKGROUND = "0", "1"


class QueueFull(RuntimeError):
    """More requests are waiting than the queue's bound allows."""


class ModelQueue:
    def __init__(self, folder: Path, bound: int) -> None:
        self.tickets = folder / "waiting"
        self.serving_lock = folder / "serving.lock"
        self.bound = bound

    @contextlib.asynccontextmanager
    async def turn(
        self, waiting: Callable[[int], None], watched: bool = True
    ) -> AsyncIterator[None]:
        """Wait for this request's turn; `waiting(n)` is told how many are ahead when it changes,
        once the wait has lasted SHOW_WAIT_AFTER.
        `watched`: someone waits on screen for it (it goes before background work).

        Raises QueueFull at once when more than `bound` requests are ahead already.
        """
        self.tickets.mkdir(parents=True, exist_ok=True)
        ticket, ticket_file = self._take_ticket(watched)
        serving = self.serving_lock.open("a")
        told, show_at = -1, time.monotonic() + SHOW_WAIT_AFTER
        try:
            for polls in itertools.count():
                ahead = self._waiting_before(ticket.name)
                if ahead == 0 and _try_lock(serving):
                    break
                ahead += 1  # the request being served
                if polls == 0 and ahead > self.bound:
                    raise QueueFull(
                        f"The local model is busy with {ahead} requests already; "
                        "try again in a minute"
                    )
                if ahead != told and time.monotonic() >= show_at:
                    waiting(ahead)
                    told = ahead
                await asyncio.sleep(POLL_SECONDS)
        except BaseException:
            serving.close()
            raise
        finally:
            ticket.unlink(missing_ok=True)
            ticket_file.close()
        try:
            yield
        finally:
            serving.close()  # closing the file drops its lock

    def someone_waits(self) -> bool:
        """Whether a watched request is waiting (from any process on this machine)."""
        return self.tickets.is_dir() and self._waiting_before(_BACKGROUND) > 0

    def _take_ticket(self, watched: bool) -> tuple[Path, IO[str]]:
        # Names sort by priority, then by arrival.
        priority = _WATCHED if watched else _BACKGROUND
        name = f"{priority}-{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
        hidden = self.tickets / f".{name}"
        handle = hidden.open("w")
        fcntl.flock(handle, fcntl.LOCK_EX)
        # Locked before it is visible, so no other request ever takes it for a dead one's.
        ticket = self.tickets / name
        hidden.rename(ticket)
        return ticket, handle

    def _waiting_before(self, name: str) -> int:
        ahead = 0
        for entry in os.scandir(self.tickets):
            if entry.name.startswith(".") or entry.name >= name:
                continue
            try:
                with open(entry.path) as other:
                    if _try_lock(other, shared=True):
                        os.unlink(entry.path)  # its process is gone
                        continue
            except FileNotFoundError:
                continue  # its request got its turn meanwhile
            ahead += 1
        return ahead


def _try_lock(handle: IO[str], shared: bool = False) -> bool:
    try:
        fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
