"""Per-turn server overhead: what one chat message costs the server beyond what any server pays.

    python -m bench.turn [--clients 1,10,50] [--turns 20] [--rounds 3] [--think 0]
                         [--memories 20] [--side-turns 5] [--no-local] [--without-event-log]
                         [--message TEXT]
    python -m bench.turn --tiny        # smoke-check size: 1 and 2 clients, 3 messages, 1 round

What runs: the real app (`server.create_app`) on uvicorn in this process's event loop, on the real
database (embedded Postgres in a temporary data folder) and the real embedder, with every model role
on the scripted model (`tests/scripted_model.py`) answering at once: a 20-word reply, streamed word
by word with no delay (the server sends the words on in a few batches, core/token_batcher.py), so
whatever time a turn takes is the server's. The clients run in a
subprocess (`bench/turn_client.py`, httpx), so their work never runs on the loop being measured.
Each client sends its messages (`--message`, by default a question that tells nothing about the
user, so it is not read for memories; each text made distinct by a number at its start, so no turn
reuses another's vectors) one after another in a chat of its own, the next as soon as a reply has
ended (or `--think` seconds later, like a person reading it). The user has `--memories` memories (a
returning user's: more than a few, so each message is embedded to search them; with 5 or fewer
all are given without a search, chat/memory_recall.py), and the server folds the chat's older
messages into its summary as it does for real: 10 at a time once 20 are unsummarised, after
the reply's stream has ended (`chat/summary.py`); a phase waits for those folds, as for the memory
extractions, so their work counts in the phase that caused it. With no think time the clients
keep the server busy all the time, so at 10 or 50 clients a message mostly waits for the others'
turns: latency there is about clients × the server's time per turn (see the CPU column).

Baseline, measured in the same run and interleaved with it round by round: a bare FastAPI app on
uvicorn, in the same loop, whose endpoints parse the same JSON body and stream the very events of a
ResolveAI turn (captured from a real one at warm-up) through sse-starlette. It pays for uvicorn,
FastAPI, SSE and the client, nothing else. Overhead = ResolveAI minus baseline at each percentile,
paired within a round, median over rounds. With `--without-event-log` a third server runs in every
round too: ResolveAI itself with its event log patched out (`bench/without_event_log.py`: no turn
row, no stored events, no finish, no Stop look), so what the durable turns of #13 cost a message
is a difference paired within each round, not between runs minutes apart.

Measured per turn: request to first `token` event, request to `done`, turns/s (all messages of a
phase over its wall time), percentiles over every message of a phase (median over rounds), the
server process's CPU time per message (all its threads), Postgres's (all its processes, when it
runs on this machine: it shares the cores), and:

- DB round trips per turn: every request/response exchange psycopg has with Postgres (statements,
  BEGIN, COMMIT, ROLLBACK, the pool's check of a connection on checkout), counted by wrapping
  psycopg's `execute` generator for the whole process while the bench runs, divided by the
  phase's messages (pipelined statements, like a memory search's, are not counted: 1-2 more per
  message with `--memories` over 5). A table also shows where the round trips of one message
  come from.
- Event-loop lag: a task in the server's loop sleeps 5 ms again and again and records how late it
  wakes up; the largest delay is the longest stall of the loop (p99 shown too). Also shown: the
  longest part of a delay that the loop's thread spent on CPU (running a callback too long: a
  stall of our own making); the rest of a delay is waiting for the GIL or, on a busy machine, for
  a core. The bare baseline's stalls in the same run show what the machine's load alone does.

Two more phases (one round of `--side-turns` messages per client, at 10 clients) check the stall
target: messages whose scripted model calls `save_memory` / `retrieve_memory` (so the embedder runs,
in its own thread), and plain messages while the real local llama.cpp model generates in its own
process (`core/local_model/`, weights from data/models; skipped with --no-local or when the weights
are missing); the CPU column is this process's, the model's is not in it. For stalls over 50 ms the
table adds what the loop's thread was running (a watchdog thread's snapshot), and it lists the
garbage collector's pauses, which stop the loop too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import faulthandler
import gc
import json
import logging
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import psutil
import psycopg._cursor_base
import psycopg._server_cursor_base
import psycopg.generators
from fastapi import FastAPI, Response
from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER
from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent

from bench.turn_client import MESSAGE
from bench.without_event_log import event_log_patched_out
from chat import summary, turn_jobs
from chat.memory_worker import MemoryWorker
from core import memory_jobs, memory_store, model_calls
from core.config import PROJECT_ROOT, load_settings
from core.llm_router import provider_handler, register_provider
from core.logs import configure_logging
from core.services import Services, open_services
from tests.chat_client import read_events, serve_app
from tests.scripted_model import ScriptedProvider, ScriptedTurn

REPLY = (
    "Miso would suit a small grey cat: short, soft, easy to call across the room, and it sounds "
    "like a sleepy yawn."
)  # 20 words, so 20 token events
SUMMARY = "The user asked, more than once, for a name for a small grey cat; Miso was suggested."
TARGET_P50_MS = 15.0  # overhead at TARGET_CLIENTS concurrent clients, request to `done`
TARGET_P99_MS = 60.0
TARGET_CLIENTS = 10
TARGET_STALL_MS = 50.0  # no longer stall while embeddings or the local model run
TARGET_EVENT_LOG_P50_MS = 5.0  # what the event log may add at TARGET_CLIENTS clients (#13)
WITHOUT_EVENT_LOG = "resolveai without event log"
LAG_INTERVAL = 0.005
LOCAL_MAX_TOKENS = 48
LOCAL_PROMPT = [
    {"role": "system", "content": "You are a helpful assistant. Answer in two sentences."},
    {"role": "user", "content": "Why do cats like to sleep in warm places like windowsills?"},
]


# --- what the scripted model answers -------------------------------------------------------------


def plain_reply(model: str, messages: list[dict[str, Any]]) -> ScriptedTurn:
    """Every chat call gets the reply, every summary call (the `utility` role) a summary."""
    return {"text": SUMMARY if model == "utility" else REPLY}


class MemoryReplies:
    """Each message: first one memory tool call (save and retrieve in turn), then the reply."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, model: str, messages: list[dict[str, Any]]) -> ScriptedTurn:
        if model == "utility":
            return {"text": SUMMARY}
        if messages and messages[-1].get("role") == "tool":
            return {"text": REPLY}
        self.calls += 1
        n = self.calls
        if n % 2:
            # Grounded in the message (its words), as a save must be; numbered, so each is new.
            fact = f"The user has small grey cat number {n}, who likes to sleep on the windowsill"
            said = str(messages[-1].get("content", "")).rsplit("\n\n", 1)[-1]
            call = {"name": "save_memory", "arguments": {"content": fact, "quote": said}}
            return {"tool_calls": [call]}
        query = "Where does the user's cat like to sleep?"
        return {"tool_calls": [{"name": "retrieve_memory", "arguments": {"query": query}}]}


# --- probes --------------------------------------------------------------------------------------


class LagProbe:
    """Sleeps LAG_INTERVAL in the loop again and again; each sample is how late it woke up (s).

    A watchdog thread also notes what the loop's thread was running when the loop had not come
    back for STALL_SNAPSHOT seconds: the longest such stall of a phase comes with that stack.
    """

    STALL_SNAPSHOT = 0.04

    def __init__(self) -> None:
        self.samples: list[float] = []
        # Of each delay, the part the loop's thread spent running (its CPU time beyond the sleep):
        # a stall of our own making. The rest is the thread waiting: for the GIL (another thread of
        # ours holding it) or for a core (the machine busy with other processes).
        self.on_cpu: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._beat = time.perf_counter()
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.worst_stall: tuple[float, str] = (0.0, "")  # seconds, stack while stalled

    async def _run(self) -> None:
        while True:
            started, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(LAG_INTERVAL)
            self._beat = now = time.perf_counter()
            late = max(0.0, now - started - LAG_INTERVAL)
            self.samples.append(late)
            self.on_cpu.append(min(late, max(0.0, time.thread_time() - cpu - LAG_INTERVAL)))

    def _watch(self) -> None:
        snapshot: tuple[float, str] | None = None  # (beat it belongs to, stack)
        while not self._stop.wait(0.01):
            beat = self._beat
            stalled = time.perf_counter() - beat
            if stalled < self.STALL_SNAPSHOT:
                continue
            if snapshot is None or snapshot[0] != beat:
                frame = sys._current_frames().get(self._loop_thread)
                snapshot = (beat, _stack_summary(frame))
            if stalled > self.worst_stall[0]:
                self.worst_stall = (stalled, snapshot[1])

    def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._task = asyncio.create_task(self._run())
        self._watchdog = threading.Thread(target=self._watch, name="lag-watchdog", daemon=True)
        self._watchdog.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def take(self) -> tuple[list[float], list[float], tuple[float, str]]:
        """The delays, their parts on CPU, and the worst stall since the last call."""
        samples, self.samples = self.samples, []
        on_cpu, self.on_cpu = self.on_cpu, []
        worst, self.worst_stall = self.worst_stall, (0.0, "")
        return samples, on_cpu, worst


def _stack_summary(frame: FrameType | None, depth: int = 6) -> str:
    """The innermost frames of a stack, innermost first: `module.function:line`."""
    parts = []
    while frame is not None and len(parts) < depth:
        code = frame.f_code
        parts.append(f"{Path(code.co_filename).stem}.{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " ← ".join(parts) or "(no Python frame)"


class GcPauses:
    """The garbage collector's pauses (they stop the loop): count and longest, per generation."""

    def __init__(self) -> None:
        self._started = (0.0, 0.0)
        self.pauses: list[tuple[int, float, float]] = []  # (generation, seconds, CPU seconds)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
        else:
            wall, cpu = (
                time.perf_counter() - self._started[0],
                time.thread_time() - self._started[1],
            )
            self.pauses.append((info["generation"], wall, cpu))

    def install(self) -> None:
        gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)

    def take(self) -> list[tuple[int, float, float]]:
        pauses, self.pauses = self.pauses, []
        return pauses


# psycopg frames that tell what kind of exchange a round trip is (innermost first).
_EXCHANGE_KINDS = {
    "check_connection": "pool check",
    "_commit_gen": "COMMIT",
    "_rollback_gen": "ROLLBACK",
    "_start_query": "BEGIN",
}
_PROJECT_DIRS = tuple(str(PROJECT_ROOT / name) for name in ("chat", "core", "rag", "server.py"))


# Set in the bench's own task while it waits for the memory queue: its polling is not the
# server's work (the worker's exchanges, in the app's task, still count).
_UNCOUNTED: contextvars.ContextVar[bool] = contextvars.ContextVar("uncounted", default=False)


class RoundTrips:
    """Counts psycopg's request/response exchanges with Postgres (see the module docstring).

    psycopg runs every exchange (send, then read every result) through `psycopg.generators.execute`;
    `install()` wraps it where psycopg looks it up. A pipeline's exchanges (a memory search sends
    its settings and query together) take another path and are not counted. With `labelled`, each
    exchange is also tallied by kind and by the project functions that caused it (from the call
    stack: slow, for one turn).
    """

    def __init__(self) -> None:
        self.count = 0
        self.labelled = False
        self.labels: Counter[str] = Counter()
        self._original: Callable[..., Any] | None = None

    def install(self) -> None:
        original = self._original = psycopg.generators.execute

        def counted(pgconn: Any) -> Generator[Any, Any, Any]:
            if _UNCOUNTED.get():
                return (yield from original(pgconn))
            self.count += 1
            if self.labelled:
                self.labels[_label(sys._getframe(1))] += 1
            return (yield from original(pgconn))

        for module in (psycopg.generators, psycopg._cursor_base, psycopg._server_cursor_base):
            module.execute = counted  # type: ignore[attr-defined]

    def uninstall(self) -> None:
        if self._original is not None:
            for module in (psycopg.generators, psycopg._cursor_base, psycopg._server_cursor_base):
                module.execute = self._original  # type: ignore[attr-defined]
            self._original = None

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


class PostgresCpu:
    """CPU seconds of the Postgres server, all its processes (the postmaster, the connections'
    backends, the background workers, and those that ended), when it runs on this machine: it
    shares the cores with the server, so statements the server sends cost there too. The kernel
    counts it in clock ticks (10 ms): a figure for a phase of many messages, not for one."""

    def __init__(self, postmaster: psutil.Process | None) -> None:
        self.postmaster = postmaster

    @classmethod
    async def find(cls, services: Services) -> PostgresCpu:
        """The server behind the app's pool: the parent of a connection's backend process."""
        token = _UNCOUNTED.set(True)
        try:
            async with services.database.pool.connection() as conn:
                row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
        finally:
            _UNCOUNTED.reset(token)
        try:
            return cls(psutil.Process(row[0]).parent() if row else None)
        except psutil.Error:  # elsewhere (a DATABASE_URL on another machine)
            return cls(None)

    def seconds(self) -> float:
        if self.postmaster is None:
            return math.nan
        try:
            own = self.postmaster.cpu_times()
            total = own.user + own.system + own.children_user + own.children_system
        except psutil.Error:
            return math.nan
        for child in self.postmaster.children():
            with contextlib.suppress(psutil.Error):  # ended meanwhile: in children_* by now
                times = child.cpu_times()
                total += times.user + times.system
        return total


def _label(frame: FrameType | None) -> str:
    kind = "statement"
    where: list[str] = []
    while frame is not None and len(where) < 2:
        code = frame.f_code
        if kind == "statement" and code.co_name in _EXCHANGE_KINDS:
            kind = _EXCHANGE_KINDS[code.co_name]
        if code.co_filename.startswith(_PROJECT_DIRS) and not code.co_name.startswith("_"):
            where.append(f"{Path(code.co_filename).stem}.{code.co_name}")
        frame = frame.f_back
    return f"{kind:<10} {' ← '.join(where) or '(pool)'}"


# --- servers and clients -------------------------------------------------------------------------


class _Message(BaseModel):
    content: str
    use_web: bool = False


def baseline_app(first: list[dict[str, Any]], later: list[dict[str, Any]]) -> FastAPI:
    """A bare FastAPI app streaming `first` (a new chat's events) or `later` over SSE."""
    app = FastAPI()

    def stream(events: list[dict[str, Any]]) -> Response:
        async def generate() -> AsyncIterator[ServerSentEvent]:
            for event in events:
                yield ServerSentEvent(event=event["type"], data=json.dumps(event))

        return EventSourceResponse(generate(), headers={"Cache-Control": "no-cache"})

    @app.post("/api/messages")
    async def new_chat(body: _Message) -> Response:
        return stream(first)

    @app.post("/api/chats/{chat_id}/messages")
    async def to_chat(chat_id: uuid.UUID, body: _Message) -> Response:
        return stream(later)

    return app


class ClientProcess:
    """bench/turn_client.py in a subprocess: one command in, one JSON result out."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> ClientProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.turn_client", cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=1 << 26,
        )  # fmt: skip
        return cls(process)

    async def run(
        self, url: str, clients: int, turns: int, think: float = 0.0, message: str = MESSAGE
    ) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        command = {"url": url, "clients": clients, "turns": turns, "think": think,
                   "message": message}  # fmt: skip
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        await self.process.stdin.drain()
        line = await self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the client process ended (exit code {await self.process.wait()})")
        return json.loads(line)

    async def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


# --- results -------------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


PERCENTILES = (50, 95, 99)


@dataclass
class Phase:
    """One batch of messages against one server: `clients` clients × `turns_each` messages."""

    server: str  # "baseline", "resolveai", "resolveai + embeddings", ...
    clients: int
    turns_each: int
    turns: list[dict[str, Any]]
    wall: float
    lag: list[float]  # the probe's samples, seconds
    round_trips: int
    cpu: float = math.nan  # CPU seconds of this process (all threads) during the phase
    postgres_cpu: float = math.nan  # CPU seconds of the Postgres server during the phase
    stall: tuple[float, str] = (0.0, "")  # the longest stall seen by the watchdog, and its stack
    gc_pauses: list[tuple[int, float, float]] = field(default_factory=list)  # generation, s, CPU s
    lag_on_cpu: list[float] = field(default_factory=list)  # of each lag sample, the part on CPU

    @property
    def gc_summary(self) -> str:
        """E.g. '3 × gen 2, longest 180 ms (40 ms CPU)', for the oldest generation collected."""
        if not self.gc_pauses:
            return "none"
        oldest = max(generation for generation, _, _ in self.gc_pauses)
        pauses = [(wall, cpu) for generation, wall, cpu in self.gc_pauses if generation == oldest]
        wall, cpu = max(pauses)
        return (
            f"{len(pauses)} × gen {oldest}, longest {1000 * wall:.0f} ms ({1000 * cpu:.0f} ms CPU)"
        )

    @property
    def lag_on_cpu_max_ms(self) -> float:
        return 1000 * max(self.lag_on_cpu, default=math.nan)

    @property
    def expected(self) -> int:
        return self.clients * self.turns_each

    @property
    def done(self) -> int:
        """Messages that got their `done` event and no error."""
        return sum(1 for t in self.turns if t["done"] is not None and t["error"] is None)

    @property
    def errors(self) -> list[str]:
        return [t["error"] for t in self.turns if t["error"]]

    def ms(self, key: str, p: float) -> float:
        return 1000 * percentile([t[key] for t in self.turns if t[key] is not None], p)

    @property
    def turns_per_s(self) -> float:
        return len(self.turns) / self.wall if self.wall else math.nan

    @property
    def round_trips_per_turn(self) -> float:
        return self.round_trips / len(self.turns) if self.turns else math.nan

    @property
    def cpu_ms_per_turn(self) -> float:
        return 1000 * self.cpu / len(self.turns) if self.turns else math.nan

    @property
    def postgres_cpu_ms_per_turn(self) -> float:
        return 1000 * self.postgres_cpu / len(self.turns) if self.turns else math.nan

    @property
    def lag_max_ms(self) -> float:
        return 1000 * max(self.lag, default=math.nan)

    @property
    def lag_p99_ms(self) -> float:
        return 1000 * percentile(self.lag, 99)


@dataclass
class Report:
    phases: list[Phase] = field(default_factory=list)
    breakdown: Counter[str] = field(default_factory=Counter)  # round trips of one message
    events_per_turn: int = 0
    embed_calls: int = 0  # the embedder's encode calls during the embeddings phase
    notes: list[str] = field(default_factory=list)

    def of(self, server: str, clients: int | None = None) -> list[Phase]:
        return [p for p in self.phases if p.server == server and clients in (None, p.clients)]


@dataclass
class Options:
    clients: list[int] = field(default_factory=lambda: [1, 10, 50])
    turns: int = 20  # messages per client
    rounds: int = 3
    think: float = 0.0  # seconds a client waits after a reply before its next message
    memories: int = 20  # the user's memories when the phases start
    memory_clients: int = TARGET_CLIENTS
    side_turns: int = 5  # messages per client in the embeddings and local-model phases (one round)
    local: bool = True
    local_clients: int = TARGET_CLIENTS
    without_event_log: bool = False  # a third server in every round: ours, event log patched out
    message: str = MESSAGE  # what the clients send (each message numbered)

    @classmethod
    def tiny(cls) -> Options:
        return cls(clients=[1, 2], turns=3, rounds=1, memory_clients=2, side_turns=3, local=False)


# --- the bench -----------------------------------------------------------------------------------


async def capture_turn_events(
    url: str, message: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The events of a new chat's first message and of a second message, as the server sent them."""

    async def send(http: httpx.AsyncClient, path: str) -> list[dict[str, Any]]:
        async with http.stream("POST", path, json={"content": message}) as response:
            response.raise_for_status()
            return [e async for e in read_events(response) if e["type"] != "heartbeat"]

    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        first = await send(http, "/api/messages")
        chat_id = next(e["chat_id"] for e in first if e["type"] == "chat")
        later = await send(http, f"/api/chats/{chat_id}/messages")
    return first, later


class Bench:
    def __init__(self, services: Services, provider: ScriptedProvider) -> None:
        self.services = services
        self.provider = provider
        self.probe = LagProbe()
        self.round_trips = RoundTrips()
        self.gc_pauses = GcPauses()
        self.postgres = PostgresCpu(None)  # found when the bench runs
        self.client: ClientProcess | None = None
        self.worker: MemoryWorker | None = None  # the app's, once it runs
        self.think = 0.0
        self.message = MESSAGE

    async def phase(self, server: str, url: str, clients: int, turns: int) -> Phase:
        assert self.client is not None
        await self.work_settled()
        self.probe.take()
        self.round_trips.take()
        self.gc_pauses.take()
        cpu, postgres_cpu = time.process_time(), self.postgres.seconds()
        patch = event_log_patched_out if server == WITHOUT_EVENT_LOG else contextlib.nullcontext
        with patch():
            result = await self.client.run(url, clients, turns, self.think, self.message)
        if server != "baseline":  # (the bare baseline queues none; its count stays its own)
            await self.work_settled()
        lag, on_cpu, stall = self.probe.take()
        phase = Phase(server, clients, turns, result["turns"], result["wall"], lag,
                      self.round_trips.take(), time.process_time() - cpu,
                      self.postgres.seconds() - postgres_cpu, stall, self.gc_pauses.take(),
                      on_cpu)  # fmt: skip
        print(
            f"  {server}, {clients} clients: {phase.done}/{phase.expected} done, done p50 "
            f"{phase.ms('done', 50):.1f} ms, {phase.turns_per_s:.0f} turns/s",
            file=sys.stderr,
        )
        return phase

    async def work_settled(self) -> None:
        """Wait for the replies' ends, summary folds, memory extractions and usage rows started so
        far. They run after each reply's `done`, in this process: their work belongs to the phase
        that caused it, not the next (a reply's event-log finish counted in the next phase, or
        skipped there by the patch of `--without-event-log`)."""
        token = _UNCOUNTED.set(True)
        try:
            await turn_jobs.settled()
            await summary.settled()  # (the folds' own round trips are counted: not this task's)
            # Polling: jobs are claimed by the worker's own task, at its own pace.
            assert self.worker is not None
            while (  # noqa: ASYNC110
                await memory_jobs.pending(self.services.database.pool) or not self.worker.settled
            ):
                await asyncio.sleep(0.01)
            # Every call's LiteLLM callback run, then its usage row stored (by the writer's own
            # task: counted).
            await GLOBAL_LOGGING_WORKER.flush()
            await model_calls.written()
        finally:
            _UNCOUNTED.reset(token)

    async def breakdown(self, url: str, tries: int = 3) -> Counter[str]:
        """Round trips of one message (the second of a chat) and of the work it leaves behind
        (summary check, memory extraction), by kind and cause. The fewest of `tries` messages: a
        pool growing or the memory worker waking twice adds a few exchanges at random."""
        fewest: Counter[str] | None = None
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for _ in range(tries):
                async with http.stream(
                    "POST", "/api/messages", json={"content": self.message}
                ) as r:
                    events = [e async for e in read_events(r)]
                chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")
                await self.work_settled()  # the first message's work is not counted
                self.round_trips.labels.clear()
                self.round_trips.labelled = True
                try:
                    path = f"/api/chats/{chat_id}/messages"
                    async with http.stream("POST", path, json={"content": self.message}) as r:
                        [e async for e in read_events(r)]
                    await self.work_settled()
                finally:
                    self.round_trips.labelled = False
                labels = Counter(self.round_trips.labels)
                if fewest is None or labels.total() < fewest.total():
                    fewest = labels
        assert fewest is not None
        return fewest

    async def run(self, options: Options) -> Report:
        report = Report()
        self.think = options.think
        self.message = options.message
        self.provider.reset()
        self.provider.responder = plain_reply
        self.round_trips.install()
        self.gc_pauses.install()
        self.postgres = await PostgresCpu.find(self.services)
        await self.remember(options.memories)
        self.probe.start()
        self.client = await ClientProcess.start()
        from chat import queue_worker
        from server import create_app

        # Every job here is queued by this process, which wakes its worker at once: the periodic
        # look for other processes' jobs would only put stray exchanges into the phases' counts.
        poll_seconds, queue_worker.POLL_SECONDS = queue_worker.POLL_SECONDS, 24 * 3600.0

        try:
            app = create_app(services=self.services)
            async with serve_app(app) as ours:
                self.worker = app.state.memory_worker
                first, later = await capture_turn_events(ours, self.message)
                report.events_per_turn = len(later)
                async with serve_app(baseline_app(first, later)) as base:
                    # Warm-up (not measured): first requests, prepared statements, caches.
                    for url in (base, ours):
                        await self.client.run(url, 2, 3, message=self.message)
                    report.breakdown = await self.breakdown(ours)
                    servers = [("baseline", base), ("resolveai", ours)]
                    if options.without_event_log:
                        servers.append((WITHOUT_EVENT_LOG, ours))
                    for clients in options.clients:
                        for round_number in range(options.rounds):
                            # Each server takes each place in turn: none always runs first.
                            turn = round_number % len(servers)
                            for server, url in servers[turn:] + servers[:turn]:
                                report.phases.append(
                                    await self.phase(server, url, clients, options.turns)
                                )
                    if options.side_turns:  # (0: the side phases are not wanted)
                        await self.memory_phase(report, ours, options)
                        if options.local:
                            await self.local_phase(report, ours, options)
        finally:
            queue_worker.POLL_SECONDS = poll_seconds
            await self.client.close()
            await self.probe.stop()
            self.round_trips.uninstall()
            self.gc_pauses.uninstall()
            self.provider.reset()
        return report

    async def remember(self, count: int) -> None:
        """Give the user `count` memories (each text its own evidence, as the evals load theirs)."""
        facts = [f"The user's locker at the gym is number {n}." for n in range(count)]
        if not facts:
            return
        vectors = await self.services.embedder.embed_documents(facts)
        for fact, vector in zip(facts, vectors, strict=True):
            await memory_store.add_memory(
                self.services.database.pool, fact, vector, self.services.embedder.model_name
            )

    async def memory_phase(self, report: Report, url: str, options: Options) -> None:
        """Messages whose model saves or looks up a memory: the embedder runs once per message."""
        embedder = self.services.embedder
        encode = embedder._encode_blocking
        timings: list[float] = []

        def timed(texts: list[str], bf16: bool = False) -> Any:
            started = time.perf_counter()
            try:
                return encode(texts, bf16)
            finally:
                timings.append(time.perf_counter() - started)

        self.provider.responder = MemoryReplies()
        setattr(embedder, "_encode_blocking", timed)  # noqa: B010
        try:
            phase = await self.phase(
                "resolveai + embeddings", url, options.memory_clients, options.side_turns
            )
            report.phases.append(phase)
        finally:
            delattr(embedder, "_encode_blocking")
            self.provider.responder = plain_reply
        report.embed_calls = len(timings)
        if timings:
            median_ms = 1000 * statistics.median(timings)
            report.notes.append(
                f"embeddings: {len(timings)} encode calls, median {median_ms:.1f} ms each"
                " (in the embedder's thread)"
            )

    async def local_phase(self, report: Report, url: str, options: Options) -> None:
        """Plain messages while the real local model generates, in its own process (reached as
        the app reaches it: `LocalModelProvider`, HTTP streaming from this loop)."""
        from core.custom_provider import TextDelta
        from core.local_model.provider import LocalModelProvider
        from core.local_model.weights import MODEL_FILENAME

        settings = self.services.settings
        path = settings.local_model_path or PROJECT_ROOT / "data" / "models" / MODEL_FILENAME
        if not path.is_file():
            report.notes.append(f"local model: skipped, no weights at {path}")
            return
        # Its process is started in the bench's scratch data folder, with the app's thread
        # default: never a model server that the settings or another process may point at.
        own = {"local_model_path": path, "local_model_threads": None, "local_model_url": None}
        provider = LocalModelProvider(settings.model_copy(update=own))
        assert provider.process is not None
        started = time.perf_counter()
        try:
            await provider.process.endpoint()
        except BaseException:
            provider.close()
            raise
        load_s = time.perf_counter() - started
        params = {"max_tokens": LOCAL_MAX_TOKENS, "temperature": 0.0}
        generations: list[float] = []
        speeds: list[float] = []  # text pieces (about one a token) per second after the first

        async def generate_once() -> None:
            began = time.perf_counter()
            pieces: list[float] = []
            async for event in provider.generate("bench", LOCAL_PROMPT, params):
                if isinstance(event, TextDelta):
                    pieces.append(time.perf_counter())
            generations.append(time.perf_counter() - began)
            if len(pieces) > 1 and pieces[-1] > pieces[0]:
                speeds.append((len(pieces) - 1) / (pieces[-1] - pieces[0]))

        try:
            await generate_once()  # warm-up
            self.probe.take()
            self.round_trips.take()
            self.gc_pauses.take()
            alone_started = time.perf_counter()
            await generate_once()
            wall = time.perf_counter() - alone_started
            lag, on_cpu, stall = self.probe.take()
            alone = Phase("local model alone", 0, 0, [], wall, lag, 0, stall=stall,
                          gc_pauses=self.gc_pauses.take(), lag_on_cpu=on_cpu)  # fmt: skip
            report.phases.append(alone)
            stop = asyncio.Event()

            async def keep_generating() -> None:
                while not stop.is_set():
                    await generate_once()

            generator = asyncio.create_task(keep_generating())
            try:
                report.phases.append(
                    await self.phase(
                        "resolveai + local model", url, options.local_clients, options.side_turns
                    )
                )
            finally:
                stop.set()
                await generator
        finally:
            provider.close()
        speed = f", {statistics.median(speeds):.1f} tokens/s" if speeds else ""
        report.notes.append(
            f"local model: {path.name} started in {load_s:.1f} s (its own process, "
            f"{provider.process.threads} threads; its CPU is not in the server's column); "
            f"{len(generations)} generations of {LOCAL_MAX_TOKENS} tokens at most, median "
            f"{statistics.median(generations):.2f} s{speed}"
        )


# --- the table -----------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _triple(values: list[float], signed: bool = False) -> str:
    form = "{:+.1f}" if signed else "{:.1f}"
    return " / ".join(form.format(v) for v in values)


def _lag_cell(phases: list[Phase]) -> str:
    """Longest delay / median p99 / longest delay spent on CPU by the loop thread, in ms."""
    lag_max = max(p.lag_max_ms for p in phases)
    lag_p99 = _median([p.lag_p99_ms for p in phases])
    on_cpu = max(p.lag_on_cpu_max_ms for p in phases)
    return f"{lag_max:.1f} / {lag_p99:.1f} / {on_cpu:.1f}"


def paired_ms(
    report: Report, clients: int, key: str, p: float, base: str = "baseline"
) -> list[float]:
    """ResolveAI minus `base` at percentile `p`, for each round (the two ran in the same one)."""
    ours = report.of("resolveai", clients)
    other = report.of(base, clients)
    return [o.ms(key, p) - b.ms(key, p) for o, b in zip(ours, other, strict=True)]


def overhead_ms(report: Report, clients: int, key: str, p: float) -> float:
    """ResolveAI minus baseline at percentile `p`, paired within each round, median over rounds."""
    return _median(paired_ms(report, clients, key, p))


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of `values` (the sign test's: order statistics
    k and n + 1 - k, k the largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2); the
    extremes when there are too few values for `confidence`."""
    ordered = sorted(values)
    n = len(ordered)
    k, below = 0, 0.0  # below = P(Binomial(n, 1/2) < k + 1)
    while k < n // 2:
        below += math.comb(n, k) / 2**n
        if below > (1 - confidence) / 2:
            break
        k += 1
    k = max(k, 1)
    return ordered[k - 1], ordered[n - k]


def event_log_line(report: Report, clients: int) -> str:
    """What the event log adds to the p50 of `done`: ResolveAI minus itself with the event log
    patched out, paired within each round; the median over rounds (a round beside a burst of
    load moves one pair, not the median), with its 95% interval."""
    differences = paired_ms(report, clients, "done", 50, base=WITHOUT_EVENT_LOG)
    cost = _median(differences)
    low, high = median_interval(differences)
    verdict = "met" if cost < TARGET_EVENT_LOG_P50_MS else "MISSED"
    return (
        f"the event log's p50 cost at {clients} clients (request → done) under "
        f"{TARGET_EVENT_LOG_P50_MS:.0f} ms: {cost:+.1f} ms, {verdict} (median of "
        f"{len(differences)} rounds' differences; 95% interval {low:+.1f} to {high:+.1f} ms)"
    )


def render(report: Report, options: Options) -> str:
    lines = [
        f"Per-turn server overhead: {options.turns} messages per client"
        + (f" ({options.think:g} s apart)" if options.think else "")
        + f", median of {options.rounds} rounds; scripted model answering at once "
        f"({report.events_per_turn} SSE events per message); baseline: a bare FastAPI SSE "
        "endpoint streaming the same events, in the same run.",
        "",
        "| clients | server | first token p50 / p95 / p99 (ms) | done p50 / p95 / p99 (ms) "
        "| turns/s | server CPU / turn (ms) | Postgres CPU / turn (ms) | DB round trips / turn "
        "| loop lag max / p99 / longest on CPU (ms) "
        "| messages done |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def row(label: str, clients: int, phases: list[Phase]) -> str:
        first = [_median([p.ms("first", q) for p in phases]) for q in PERCENTILES]
        done = [_median([p.ms("done", q) for p in phases]) for q in PERCENTILES]
        rate = _median([p.turns_per_s for p in phases])
        trips = _median([p.round_trips_per_turn for p in phases])
        cpu = _median([p.cpu_ms_per_turn for p in phases])
        postgres_cpu = _median([p.postgres_cpu_ms_per_turn for p in phases])
        lag = _lag_cell(phases)
        finished = sum(p.done for p in phases)
        expected = sum(p.expected for p in phases)
        return (
            f"| {clients} | {label} | {_triple(first)} | {_triple(done)} | {rate:.0f} | {cpu:.1f} "
            f"| {postgres_cpu:.1f} | {trips:.1f} | {lag} | {finished}/{expected} |"
        )

    for clients in options.clients:
        base = report.of("baseline", clients)
        ours = report.of("resolveai", clients)
        lines.append(row("bare FastAPI SSE (baseline)", clients, base))
        lines.append(row("ResolveAI", clients, ours))
        without = report.of(WITHOUT_EVENT_LOG, clients)
        if without:
            lines.append(row("ResolveAI, event log patched out", clients, without))
        first = [overhead_ms(report, clients, "first", q) for q in PERCENTILES]
        done = [overhead_ms(report, clients, "done", q) for q in PERCENTILES]
        ratio = _median([o.turns_per_s / b.turns_per_s for o, b in zip(ours, base, strict=True)])
        lines.append(
            f"| {clients} | **overhead** (ResolveAI − baseline) | {_triple(first, True)} "
            f"| {_triple(done, True)} | {ratio:.2f}× | | | | | |"
        )
    for server in ("resolveai + embeddings", "resolveai + local model"):
        phases = report.of(server)
        if phases:
            lines.append(row(server.replace("resolveai", "ResolveAI"), phases[0].clients, phases))
    alone = report.of("local model alone")
    if alone:
        lines.append(f"| 0 | local model alone (one generation) | | | | | | {_lag_cell(alone)} | |")

    lines += ["", "Targets:"]
    if TARGET_CLIENTS in options.clients:
        p50 = overhead_ms(report, TARGET_CLIENTS, "done", 50)
        p99 = overhead_ms(report, TARGET_CLIENTS, "done", 99)
        lines.append(
            f"- p50 overhead at {TARGET_CLIENTS} clients (request → done) under "
            f"{TARGET_P50_MS:.0f} ms: {p50:.1f} ms, {'met' if p50 < TARGET_P50_MS else 'MISSED'}"
        )
        lines.append(
            f"- p99 overhead at {TARGET_CLIENTS} clients (request → done) under "
            f"{TARGET_P99_MS:.0f} ms: {p99:.1f} ms, {'met' if p99 < TARGET_P99_MS else 'MISSED'}"
        )
        if report.of(WITHOUT_EVENT_LOG, TARGET_CLIENTS):
            lines.append(f"- {event_log_line(report, TARGET_CLIENTS)}")
    for server, what in (
        ("resolveai + embeddings", "embeddings run"),
        ("resolveai + local model", "the local model generates"),
        ("local model alone", "the local model generates, no clients"),
    ):
        phases = report.of(server)
        if phases:
            stall = max(p.lag_max_ms for p in phases)
            on_cpu = max(p.lag_on_cpu_max_ms for p in phases)
            verdict = "met" if stall < TARGET_STALL_MS else "MISSED"
            lines.append(
                f"- no loop stall over {TARGET_STALL_MS:.0f} ms while {what}: longest "
                f"{stall:.1f} ms, {verdict} (longest spent running on the loop: {on_cpu:.1f} ms)"
            )
    baseline_lag = max((p.lag_max_ms for p in report.of("baseline")), default=math.nan)
    lines.append(
        f"- for scale, the longest stall while the bare baseline ran, in this run: "
        f"{baseline_lag:.1f} ms (what the machine's load alone does to a loop)"
    )
    lines += [f"- {note}" for note in report.notes]
    stalls: dict[tuple[str, int], tuple[float, str]] = {}
    for phase in report.phases:
        key = (phase.server, phase.clients)
        if phase.stall[0] * 1000 > TARGET_STALL_MS and phase.stall[0] > stalls.get(key, (0,))[0]:
            stalls[key] = phase.stall
    if stalls:
        lines += ["", f"Stalls over {TARGET_STALL_MS:.0f} ms: what the loop's thread was running"]
        for (server, clients), (seconds, stack) in stalls.items():
            lines.append(f"- {server}, {clients} clients, {1000 * seconds:.0f} ms: `{stack}`")
    lines += ["", "Garbage collections (they pause the loop), per phase: "]
    for phase in report.phases:
        lines.append(f"- {phase.server}, {phase.clients} clients: {phase.gc_summary}")
    if report.breakdown:
        lines += [
            "",
            f"DB round trips of one message (the second of a chat, one client): "
            f"{sum(report.breakdown.values())}",
            "",
            "| round trips | kind and cause (innermost project function first) |",
            "| --- | --- |",
        ]
        for label, count in report.breakdown.most_common():
            lines.append(f"| {count} | `{label}` |")
    failed = [error for phase in report.phases for error in phase.errors]
    if failed:
        lines += ["", f"{len(failed)} messages failed, e.g.: {failed[0]}"]
    return "\n".join(lines)


# --- entry points --------------------------------------------------------------------------------


async def run_bench(services: Services, options: Options) -> Report:
    """Run the bench on `services` (whose models must all be the scripted provider)."""
    provider = provider_handler("scripted")
    if not isinstance(provider, ScriptedProvider):
        raise RuntimeError("the bench needs every model role on the scripted provider")
    return await Bench(services, provider).run(options)


async def _main(options: Options) -> None:
    # The scripted model is the tests' own; the app never registers it.
    register_provider("scripted", ScriptedProvider())
    with tempfile.TemporaryDirectory(prefix="bench-turn-") as scratch:
        scratch_dir = Path(scratch)
        models = scratch_dir / "models.yaml"
        models.write_text(
            "model_list:\n"
            "  - {model_name: chat, litellm_params: {model: scripted/chat}}\n"
            "  - {model_name: utility, litellm_params: {model: scripted/utility}}\n"
            "router_settings: {num_retries: 0}\n",
            encoding="utf-8",
        )
        settings = load_settings(
            _env_file=None, app_data_dir=scratch_dir / "data", database_url=None,
            models_config=models,
        )  # fmt: skip
        # Log like the server does (INFO lines, access log), to a file instead of the terminal.
        configure_logging(settings.log_level)
        logging.getLogger().handlers[0].setStream(  # type: ignore[attr-defined]
            (scratch_dir / "server.log").open("w", encoding="utf-8")
        )
        services = await open_services(settings)
        try:
            report = await run_bench(services, options)
        finally:
            await services.close()
    print(render(report, options))


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Per-turn server overhead against a bare FastAPI SSE endpoint."
    )
    parser.add_argument("--clients", default="1,10,50", help="concurrent clients, e.g. 1,10,50")
    parser.add_argument("--turns", type=int, default=20, help="messages per client")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--think", type=float, default=0.0, help="seconds between a reply and the next message"
    )
    parser.add_argument(
        "--side-turns", type=int, default=5,
        help="messages per client in the embeddings and local-model phases",
    )  # fmt: skip
    parser.add_argument(
        "--memories", type=int, default=20, help="the user's memories (5 or fewer: no search)"
    )
    parser.add_argument("--no-local", action="store_true", help="skip the local model phase")
    parser.add_argument(
        "--without-event-log", action="store_true",
        help="also run ResolveAI with its event log patched out, in every round (#13's cost)",
    )  # fmt: skip
    parser.add_argument(
        "--message", default=MESSAGE,
        help="what the clients send (default: a question that tells nothing about the user)",
    )  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="smoke-check size")
    args = parser.parse_args()
    faulthandler.enable()  # a crash in native code (torch, llama.cpp, libpq) says where
    if args.tiny:
        options = Options.tiny()
    else:
        clients = [int(c) for c in args.clients.split(",") if c.strip()]
        options = Options(clients=clients, turns=args.turns, rounds=args.rounds, think=args.think,
                          memories=args.memories, memory_clients=min(TARGET_CLIENTS, max(clients)),
                          side_turns=args.side_turns, local=not args.no_local,
                          local_clients=min(TARGET_CLIENTS, max(clients)),
                          without_event_log=args.without_event_log,
                          message=args.message)  # fmt: skip
    asyncio.run(_main(options))


if __name__ == "__main__":
    main()
