"""Turns as jobs: a reply is written to its end whether or not anyone is listening.

The POST that sends a message starts a `TurnJob` and streams it as its first reader; closing that
stream (a reload, a closed tab, a sleeping phone) stops nothing. Every event the job emits gets a
sequence number and goes to this process's readers at once and to Postgres (`core.turn_store`)
every FLUSH_SECONDS, so a reader on any server process can replay a reply from any point and
follow it live (`follow_turn`). Stop is a flag on the turn: `request_stop` sets it from any
process, and the process running the job sees it within WATCH_SECONDS (at once when it is this
one). A turn whose process died is finished by chat/turn_recovery.py.

`TurnJobs` is only this process's view of the jobs it runs; everything another process needs is
in Postgres. One task of it tends them all while any runs: the new events of every reply in one
insert per FLUSH_SECONDS, and one look for Stop requests per WATCH_SECONDS (not a flusher and a
watcher per reply: at 10 clients those were ~2 of a message's ~12 round trips, bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from chat.runner import Turn, stream_turn
from chat.steps import short_id
from chat.turn_recovery import STOPPED, recover_turn
from chat.user_errors import reply_ended, reply_failed
from core import chat_store, turn_store
from core.services import Services
from core.turn_store import FINAL_EVENTS

log = logging.getLogger("resolveai.chat")

FLUSH_SECONDS = 0.1  # tokens reach other processes' readers this often (all jobs' in one insert)
WATCH_SECONDS = 0.5  # how often the running jobs are checked for a Stop another process asked for
LEASE_RENEWALS = 3  # it renews its claim on the chat this often per lease (CHAT_LEASE_SECONDS)
FOLLOW_SECONDS = 0.25  # how often a reader following another process's job looks for new events
# A turn whose chat claim is gone but which is not marked finished: its process is finishing it
# (its last events and the mark follow within moments) or died. A reader waits this long first.
ABANDONED_SECONDS = 3.0


class TurnJob:
    """One reply being written in this process, with the events emitted so far."""

    def __init__(self, turn: Turn, jobs: TurnJobs) -> None:
        self.turn = turn
        self.run_id = turn.run_id
        self.chat_id = turn.context.chat_id
        self.events: list[dict[str, Any]] = []
        self.finished = False
        self._jobs = jobs
        self.pool = turn.context.services.database.pool
        self.unsaved: list[tuple[int, dict[str, Any]]] = []  # events not stored yet
        self._wake = asyncio.Event()
        self.ended = False  # the reply is over: its own end stores the rest, nothing else does
        self.started = self.renewed = time.monotonic()  # its claim on the chat renewed
        self.task: asyncio.Task[None] | None = None
        self.failure: str | None = None  # why the turn was ended, when not by a Stop
        self.failure_detail: str | None = None  # the raw reason behind it (logged only)

    def publish(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.unsaved.append((len(self.events), event))
        self._wake.set()
        self._wake = asyncio.Event()

    async def follow(self, after: int = 0) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """The events after number `after`, then each new one, until the job ends."""
        seq = max(after, 0)
        while True:
            while seq < len(self.events):
                seq += 1
                yield seq, self.events[seq - 1]
            if self.finished:
                return
            await self._wake.wait()

    def stop(self, failure: str | None = None, detail: str | None = None) -> None:
        """End the turn: stopped by the user, or (`failure`, a plain reason; `detail`, the raw
        one, logged) for that reason, as an error."""
        if self.task is not None and not self.task.done() and not self.ended:
            if self.failure is None:
                self.failure, self.failure_detail = failure, detail
            self.ended = True  # once: a second cancel would cut the reply's saving short
            self.task.cancel()

    async def run(self) -> None:
        try:
            async for event in stream_turn(self.turn):
                self.publish(event)
        except asyncio.CancelledError:
            # Stopped (here or from another process), ended, or the server is shutting down:
            # stream_turn saved the reply so far as interrupted before this was reached, unless
            # it was saved complete already (`done`: sent, or to send).
            if self.turn.done is not None:
                if not self.events or self.events[-1] is not self.turn.done:
                    self.publish(self.turn.done)
            elif self.failure is None:
                self.publish(STOPPED)
            else:
                message = reply_ended(self.failure, self.failure_detail, self.chat_id)
                self.publish({"type": "error", "message": message})
        except chat_store.ChatNotFound:
            self.publish({"type": "error", "message": "This chat was deleted."})
        except Exception as error:  # stream_turn reports the graph's own failures as events
            log.exception("Chat %s: the reply could not be saved", short_id(self.chat_id))
            self.publish({"type": "error", "message": reply_failed(error, self.chat_id)})
        finally:
            self.ended = True
            await asyncio.shield(self._finish())

    async def _finish(self) -> None:
        """Readers first (their streams end with the final event), then the rest of the events,
        the finished mark and, if stream_turn could not, the chat's claim: retried while the
        database is away, for up to a lease (then the lease frees the chat anyway)."""
        self.finished = True
        self._wake.set()
        try:
            # A write of this job's events under way (they were taken from `unsaved`) lands
            # first, or puts them back: the events are stored in order, before the finish.
            async with self._jobs.writing:
                pass
            await self._persist_end()
        finally:
            self._jobs.forget(self)

    async def _persist_end(self) -> None:
        deadline = time.monotonic() + self.turn.context.services.settings.chat_lease_seconds
        delay = 0.25
        while True:
            try:
                await turn_store.finish_turn(self.pool, self.run_id, self.unsaved)
                self.unsaved = []
                if not self.turn.released:  # the database was away when the turn ended
                    await chat_store.release_chat_run(self.pool, self.chat_id, self.run_id)
                    self.turn.released = True
                return
            except psycopg.errors.ForeignKeyViolation:
                return  # the turn is gone with its chat
            except Exception as error:  # the database is away
                if time.monotonic() + delay > deadline:
                    log.warning("Chat %s: the reply's events could not be saved (%s)",
                                short_id(self.chat_id), error)  # fmt: skip
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def renew_claim(self, now: float) -> None:
        """Renew the job's claim on its chat (LEASE_RENEWALS times a lease); a claim lost
        (another process took the chat over) or not renewable for a whole lease ends the turn
        with an error."""
        lease = self.turn.context.services.settings.chat_lease_seconds
        try:
            claimed = await chat_store.claim_chat_run(
                self.pool, self.chat_id, self.run_id, lease, user_id=None
            )
        except Exception as error:
            if now - self.renewed > lease:
                self.stop("the database did not answer", str(error))
            return
        if claimed is None:
            return self.stop("another server took this chat over")
        self.renewed = now


class TurnJobs:
    """The turns this process is running, by chat."""

    def __init__(self) -> None:
        self._by_chat: dict[uuid.UUID, TurnJob] = {}
        self.writing = asyncio.Lock()  # held while events taken from jobs are being stored
        self._tender: asyncio.Task[None] | None = None
        _registries.add(self)

    async def start(self, turn: Turn) -> TurnJob:
        """Record the turn in Postgres and start it; it runs until it ends, listened to or not."""
        context = turn.context
        pool = context.services.database.pool
        try:
            if not turn.recorded:  # (a new question's turn is recorded with it)
                await turn_store.create_turn(
                    pool,
                    turn.run_id,
                    context.chat_id,
                    context.user_message_id,
                    turn.use_web,
                    turn.mode,
                )
        except BaseException:
            with contextlib.suppress(Exception):  # else the chat waits for its lease to run out
                await chat_store.release_chat_run(pool, context.chat_id, turn.run_id)
            raise
        job = TurnJob(turn, self)
        self._by_chat[job.chat_id] = job
        job.task = asyncio.create_task(job.run(), name=f"turn {short_id(job.chat_id)}")
        if self._tender is None:
            self._tender = asyncio.create_task(self._tend(), name="turn events")
        return job

    def _writing_jobs(self) -> list[TurnJob]:
        return [job for job in self._by_chat.values() if not job.ended]

    async def _tend(self) -> None:
        """While this process writes replies: every FLUSH_SECONDS, the new events of all of them
        in one insert; every WATCH_SECONDS, one look for Stop requests (from any process) for all
        of them, their deadlines, and the claims due for renewal. Ends when no reply is left
        (`start` starts it again)."""
        next_watch = time.monotonic() + WATCH_SECONDS
        try:
            while self._writing_jobs():
                await asyncio.sleep(FLUSH_SECONDS)
                with contextlib.suppress(Exception):  # retried on the next tick
                    await self._flush()
                if time.monotonic() >= next_watch:
                    next_watch = time.monotonic() + WATCH_SECONDS
                    await self._watch()
        finally:
            self._tender = None

    async def _flush(self) -> None:
        async with self.writing:
            taken = [(job, job.unsaved) for job in self._writing_jobs() if job.unsaved]
            if not taken:
                return
            for job, _ in taken:
                job.unsaved = []
            events = [(job.run_id, seq, event) for job, batch in taken for seq, event in batch]
            try:
                await turn_store.append_events(taken[0][0].pool, events)
            except BaseException:
                for job, batch in taken:  # stored next time (a pair stored already is ignored)
                    job.unsaved = batch + job.unsaved
                raise

    async def _watch(self) -> None:
        jobs = self._writing_jobs()
        if not jobs:
            return
        with contextlib.suppress(Exception):
            stopped = await turn_store.stopped_turns(jobs[0].pool, [job.run_id for job in jobs])
            for job in jobs:
                if job.run_id in stopped:
                    log.info("Chat %s: stop requested", short_id(job.chat_id))
                    job.stop()
        now = time.monotonic()
        renewals = []
        for job in self._writing_jobs():
            settings = job.turn.context.services.settings
            if now - job.started > settings.turn_deadline:
                job.stop(f"took longer than {settings.turn_deadline:g} s")
            elif now - job.renewed >= settings.chat_lease_seconds / LEASE_RENEWALS:
                renewals.append(job.renew_claim(now))
        await asyncio.gather(*renewals)

    def running(self, chat_id: uuid.UUID) -> TurnJob | None:
        """The chat's reply this process is writing, if any."""
        job = self._by_chat.get(chat_id)
        return job if job is not None and not job.finished else None

    def latest(self, chat_id: uuid.UUID) -> TurnJob | None:
        """That, or the one it has just finished (still storing its end): its events in memory
        are all there are, while the database may not have the last of them yet."""
        return self._by_chat.get(chat_id)

    def forget(self, job: TurnJob) -> None:
        if self._by_chat.get(job.chat_id) is job:
            del self._by_chat[job.chat_id]

    async def close(self, grace: float = 0.0) -> None:
        """Shutting down: the running replies get `grace` seconds to end, then what is left of
        each is saved as interrupted."""
        tasks = [job.task for job in self._by_chat.values() if job.task and not job.task.done()]
        if tasks and grace > 0:
            log.info("Shutting down: waiting up to %.0f s for %d replies", grace, len(tasks))
            await asyncio.wait(tasks, timeout=grace)
        jobs = list(self._by_chat.values())
        for job in jobs:
            job.stop()
        await asyncio.gather(*(job.task for job in jobs if job.task), return_exceptions=True)
        if self._tender is not None:  # (it ends by itself at its next tick, with no job left)
            await asyncio.gather(self._tender, return_exceptions=True)


# Every TurnJobs of this process, for `settled` (tests: one app per test server, several servers).
_registries: weakref.WeakSet[TurnJobs] = weakref.WeakSet()


async def settled() -> None:
    """Wait for every reply this process is writing to end (tests, before the next one's turns)."""
    tasks = [job.task for jobs in list(_registries) for job in jobs._by_chat.values() if job.task]
    await asyncio.gather(*tasks, return_exceptions=True)


async def request_stop(services: Services, jobs: TurnJobs, chat_id: uuid.UUID) -> bool:
    """Stop the chat's reply, whichever process writes it; False if none is being written."""
    run_id = await turn_store.request_stop(services.database.pool, chat_id)
    job = jobs.running(chat_id)
    if job is not None and (run_id is None or job.run_id == run_id):
        job.stop()  # here: no need to wait for the watcher
        return True
    return run_id is not None


async def follow_turn(
    services: Services, jobs: TurnJobs, chat_id: uuid.UUID, after: int = 0
) -> AsyncIterator[tuple[int, dict[str, Any]]] | None:
    """The chat's latest reply as numbered events from after `after`, live while it is written;
    None if the chat has no reply being written (nor one just finished, events kept)."""
    job = jobs.latest(chat_id)
    if job is not None:
        return job.follow(after)
    pool = services.database.pool
    turn = await turn_store.latest_turn(pool, chat_id)
    if turn is None:
        return None
    return _follow_from_database(services, turn, after)


async def _follow_from_database(
    services: Services, turn: dict[str, Any], after: int
) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    pool = services.database.pool
    run_id, seen = turn["run_id"], after
    abandoned_since: float | None = None
    while True:
        for seq, event in await turn_store.events_after(pool, run_id, seen):
            seen = seq
            yield seq, event
            if event.get("type") in FINAL_EVENTS:
                return
        latest = await turn_store.latest_turn(pool, turn["chat_id"])
        if latest is None or latest["run_id"] != run_id or latest["finished_at"] is not None:
            # Finished (or replaced) between the two reads: what it wrote last is stored now.
            for seq, event in await turn_store.events_after(pool, run_id, seen):
                yield seq, event
            return
        if latest["live"]:
            abandoned_since = None
        elif abandoned_since is None:
            abandoned_since = time.monotonic()
        elif time.monotonic() - abandoned_since > ABANDONED_SECONDS:  # its process died
            await recover_turn(services, run_id)
            reply = await chat_store.reply_of_run(pool, run_id)
            if reply is not None and reply["status"] == "complete":  # it ended just before
                yield seen + 1, {"type": "done", "message_id": str(reply["message_id"])}
            else:
                yield seen + 1, STOPPED
            return
        await asyncio.sleep(FOLLOW_SECONDS)
