"""Starts, shares and restarts the local model's process (`core.local_model.serve`).

One model process per machine, whichever ResolveAI process needs it first: `<data>/local-model/`
holds `server.json` (its port, pid and access key, readable by this user only), `start.lock`
(taken while one process checks or starts it, so two never start two) and `users.lock` (held
shared by every ResolveAI process that may use it; the model process exits when nobody holds it,
and the last ResolveAI process to close stops it). So memory does not grow with the number of
server processes, and a crash in llama.cpp ends the model process, never the web server.

The process that started the model watches it and starts it again when it dies; any other notices
on its next request and does the same (under `start.lock`, so once).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from core.config import Settings
from core.errors import StartupError
from core.local_model.serve import ALIVE_PATH
from core.local_model.weights import ensure_local_model

log = logging.getLogger("resolveai.models")

# Tokens per prompt batch. Each saved prompt state holds one batch of logits (152k floats a
# token: 39 MB at 64); larger batches read prompts only ~5% faster on these CPUs (measured: 25.3
# tokens/s at 64, 26.7 at 256, one thread).
PROMPT_BATCH = 64
# Saved prompt states (KV cache of ~28 KB per token for this model): room for several
# conversations' prefixes at a few thousand tokens each.
PROMPT_CACHE_BYTES = 768 * 1024 * 1024
START_TIMEOUT_SECONDS = 180
STOP_TIMEOUT_SECONDS = 10
LOG_TAIL_LINES = 5


class LocalModelFailure(RuntimeError):
    """The model process could not be started or stopped answering; one plain line."""


@dataclass(frozen=True)
class Endpoint:
    """Where the model answers: an OpenAI-compatible base URL and its key."""

    base_url: str
    api_key: str
    pid: int | None = None


class LocalModelProcess:
    """This process's handle on the machine's model process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.folder = settings.app_data_dir / "local-model"
        self.threads = settings.local_model_threads or default_threads()
        self.state = "not started"  # starting, ready, restarting, failed, stopped
        self.last_error: str | None = None
        self.restarts = 0
        self._users: IO[str] | None = None
        self._child: subprocess.Popen | None = None
        self._start_lock = threading.Lock()  # one start attempt at a time in this process
        self._closing = False
        self._known: dict[str, Any] | None = None  # server.json as it was when last seen up

    @property
    def info_file(self) -> Path:
        return self.folder / "server.json"

    def health(self) -> dict[str, Any]:
        info = self._read_info()
        return {
            "state": self.state,
            "threads": self.threads,
            "pid": info.get("pid") if info else None,
            # The llama.cpp CPU variant it runs on (core.local_model.cpu_backend), None if built in.
            "cpu_backend": info.get("cpu_backend") if info else None,
            "restarts": self.restarts,
            "error": self.last_error,
        }

    async def endpoint(self) -> Endpoint:
        """The running model's endpoint, starting the process first if none answers."""
        return await asyncio.to_thread(self._ensure_running)

    async def after_failure(self) -> bool:
        """A request lost its connection: True if the process is gone (a restart is under way)."""
        if self._closing:
            return False
        info = self._read_info()
        if info and await asyncio.to_thread(_answers, info) is not None:
            return False
        self.state, self._known = "restarting", None
        self.last_error = "The local model stopped unexpectedly"
        log.warning("Local model: the model process stopped unexpectedly; restarting it")
        asyncio.get_running_loop().run_in_executor(None, self._restart_quietly)
        return True

    def close(self) -> None:
        """Let go of the model; the last ResolveAI process on the machine stops it."""
        self._closing = True
        if self._users is None:
            return
        last = _try_flock(self._users, fcntl.LOCK_EX)
        if last:
            info = self._read_info()
            if info:
                _signal_model_process(info, signal.SIGTERM)
                self.info_file.unlink(missing_ok=True)
            if self._child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._child.wait(timeout=STOP_TIMEOUT_SECONDS)
            elif info:  # another (gone) process's child: not ours to wait for, so watch it go
                _wait_until_gone(int(info["pid"]), STOP_TIMEOUT_SECONDS)
            log.info("Local model: stopped")
        self._users.close()
        self._users = None
        self.state = "stopped"

    # --- worker threads ------------------------------------------------------------------------

    def _ensure_running(self) -> Endpoint:
        info = self._read_info()
        if self.state == "ready" and info and info == self._known:
            # Up when last seen, and not restarted since: a dead one shows when a request's
            # connection fails (`after_failure`), so no check on every call.
            return _endpoint(info)
        with self._start_lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            if self._users is None:
                self._users = (self.folder / "users.lock").open("a")
                fcntl.flock(self._users, fcntl.LOCK_SH)
            with (self.folder / "start.lock").open("a") as start_lock:
                fcntl.flock(start_lock, fcntl.LOCK_EX)
                info = self._read_info()
                if info and _answers(info) is not None:
                    self.state, self._known = "ready", info
                    return _endpoint(info)
                restarting = self.state == "restarting"
                if not restarting:
                    self.state = "starting"
                try:
                    info = self._start(info)
                except LocalModelFailure as error:
                    self.state, self.last_error = "failed", str(error)
                    raise
                # Counted where a process is started: a crash seen both by a request and by the
                # watcher thread starts one process, and counts once.
                self.restarts += restarting
                self.state, self.last_error, self._known = "ready", None, info
                return _endpoint(info)

    def _start(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        try:
            model = ensure_local_model(self.settings)
        except StartupError as error:
            raise LocalModelFailure(str(error)) from None
        if previous:  # a process that stopped answering but still runs: it must go first
            _signal_model_process(previous, signal.SIGKILL)
        port = _free_port(previous["port"] if previous else None)
        key = secrets.token_urlsafe(24)
        log_path = self.folder / "server.log"
        command = [
            sys.executable, "-m", "core.local_model.serve", str(model),
            "--port", str(port), "--threads", str(self.threads),
            "--context", str(self.settings.local_model_context), "--batch", str(PROMPT_BATCH),
            "--cache-bytes", str(PROMPT_CACHE_BYTES),
            "--users-lock", str(self.folder / "users.lock"),
        ]  # fmt: skip
        log.info(
            "Local model: starting %s (%d threads, context %d tokens)",
            model.name,
            self.threads,
            self.settings.local_model_context,
        )
        started = time.monotonic()
        with log_path.open("w") as log_file:
            child = subprocess.Popen(
                command,
                env={**os.environ, "RESOLVEAI_LOCAL_MODEL_KEY": key},
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own session: a Ctrl+C in the terminal reaches the web server, which then
                # stops the model itself if it is the last user.
                start_new_session=True,
                cwd=Path(__file__).resolve().parents[2],
            )
        info = {"pid": child.pid, "port": port, "key": key}
        while (alive := _answers(info)) is None:
            code = child.poll()
            if code is not None:
                raise LocalModelFailure(_exit_reason(code, log_path))
            if time.monotonic() - started > START_TIMEOUT_SECONDS:
                child.kill()
                raise LocalModelFailure(
                    f"The local model did not start within {START_TIMEOUT_SECONDS} s"
                )
            time.sleep(0.25)
        info["cpu_backend"] = alive.get("cpu_backend")
        _write_private(self.info_file, json.dumps(info))
        self._child = child
        threading.Thread(target=self._watch, args=(child,), name="local-model-watch",
                         daemon=True).start()  # fmt: skip
        log.info(
            "Local model: ready in %.1f s (pid %d, llama.cpp CPU backend %s)",
            time.monotonic() - started,
            child.pid,
            info["cpu_backend"] or "built in",
        )
        return info

    def _watch(self, child: subprocess.Popen) -> None:
        code = child.wait()
        if self._closing or self._child is not child:
            return
        reason = _exit_reason(code, self.folder / "server.log")
        log.warning("Local model: %s; restarting it", reason)
        self.state, self.last_error = "restarting", reason
        self._restart_quietly()

    def _restart_quietly(self) -> None:
        if self._closing:
            return
        try:
            self._ensure_running()
        except LocalModelFailure as error:
            log.error("Local model: could not restart: %s", error)

    def _read_info(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.info_file.read_text())
        except (OSError, ValueError):
            return None


def _signal_model_process(info: dict[str, Any], signum: int) -> None:
    """Signal the model process `info` names, if that pid still is one (pids are reused)."""
    pid = int(info.get("pid") or 0)
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if pid and b"core.local_model.serve" in command:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _wait_until_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state == "Z":  # exited; its parent has yet to reap it
            return
        time.sleep(0.1)


def default_threads() -> int:
    """All cores but one for the web server (and the embedder), on a machine with two or more."""
    cores = len(os.sched_getaffinity(0))
    return max(cores - 1, 1)


def _endpoint(info: dict[str, Any]) -> Endpoint:
    return Endpoint(f"http://127.0.0.1:{info['port']}/v1", info["key"], info.get("pid"))


def _answers(info: dict[str, Any]) -> dict[str, Any] | None:
    """What the model process `info` names says of itself if it is up (it answers at once, even
    while it works), else None."""
    try:
        response = httpx.get(f"http://127.0.0.1:{info['port']}{ALIVE_PATH}", timeout=5)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, KeyError, ValueError):
        return None


def _free_port(preferred: int | None) -> int:
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise LocalModelFailure("No free port for the local model")


def _exit_reason(code: int, log_path: Path) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        reason = f"The local model stopped unexpectedly ({name})"
        if name == "SIGILL":
            reason += (
                "; its llama.cpp build uses an instruction this CPU lacks: reinstall it with "
                "`make clean install` (it builds llama.cpp's runtime CPU variants)"
            )
        return reason
    tail = [line for line in _tail(log_path) if line.strip()]
    last = tail[-1].strip() if tail else "no output"
    return f"The local model stopped unexpectedly (exit code {code}: {last[:200]})"


def _tail(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []


def _write_private(path: Path, text: str) -> None:
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _try_flock(handle: IO[str], mode: int) -> bool:
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
