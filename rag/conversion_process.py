"""Document conversion in a separate, limited process that stays up between files.

`convert_in_subprocess` hands a file to a child Python process (`python -m rag.conversion_process`,
which runs rag/document_convert.py's `convert_document`) with an address-space limit, a CPU limit
per file and a wall-clock time-out, so a parser that crashes, blows up memory or hangs on a hostile
file costs a refused upload, never the web server. It is not a sandbox: the child runs as the
server's user.

The child serves one file after another: starting Python and importing the parsers costs ~0.3 s,
which a process per file paid every time (a folder of 50 small files took 1.7× as long as
converting them in a thread; bench/documents.py). A child that crashed, ran out of memory, timed
out or was cancelled is killed and the next file starts a new one; after MAX_FILES files it is
replaced anyway, so nothing a parser leaks accumulates. Its pipes are plain OS pipes read in a
thread, so any event loop (and any thread) can use it; one file at a time per memory limit.

Protocol: the parent writes a JSON header line (`filename`, `size`, `cpu_seconds`, `fault`) and
then the file's bytes; the child answers with a length line and that many bytes of JSON. With the
parent gone, the idle child reads end-of-file and exits; a busy one is ended by its CPU limit.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import math
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from rag.document_convert import Converted, DocumentRejected, Page, convert_document, kind_of

logger = logging.getLogger(__name__)

MAX_FILES = 200  # then the child is replaced
_EXIT_MEMORY = 3
# What a library prints when an allocation fails under RLIMIT_AS before it gives up (Python's
# MemoryError, C++'s std::bad_alloc, malloc's ENOMEM, OpenBLAS's "Memory allocation still failed").
_OUT_OF_MEMORY_SIGNS = (
    "memoryerror",
    "bad_alloc",
    "cannot allocate memory",
    "out of memory",
    "memory allocation",
)
# Set only by the tests, to make the child hang, crash or run out of memory on purpose.
_FAULT_ENV = "RESOLVEAI_CONVERT_FAULT"
_PROJECT_ROOT = Path(__file__).resolve().parents[1]
_STDERR_KEPT = 2000  # characters of the child's stderr kept for the log


class _Child:
    """One conversion process and the tail of what it printed."""

    def __init__(self, memory_mb: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rag.conversion_process", f"--memory-mb={memory_mb}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=_PROJECT_ROOT,
            # openpyxl imports numpy when it is installed, whose OpenBLAS starts a thread (with
            # its own buffers) per core: the child computes nothing with it.
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        )
        self.files = 0
        self._stderr = ""  # the last _STDERR_KEPT characters it printed
        self._drain = threading.Thread(target=self._read_stderr, daemon=True,
                                       name="conversion-stderr")  # fmt: skip
        self._drain.start()

    def _read_stderr(self) -> None:
        # Read all the time: a child printing more than a pipe holds would block on it. In pieces,
        # not lines: a library may print a long run without a newline.
        assert self.process.stderr is not None
        for piece in iter(lambda: self.process.stderr.read1(4096), b""):  # type: ignore[union-attr]
            self._stderr = (self._stderr + piece.decode(errors="replace"))[-_STDERR_KEPT:]

    def stderr_tail(self) -> str:
        self._drain.join(timeout=2)
        return self._stderr

    def exchange(self, header: dict[str, Any], data: bytes) -> dict[str, Any] | None:
        """Send one file, wait for its answer (blocking); None if the child ended instead."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        self.files += 1
        try:
            stdin.write(json.dumps(header).encode() + b"\n" + data)
            stdin.flush()
            length = stdout.readline()
            if not length.strip():
                return None
            payload = _read_exactly(stdout, int(length))
        except (OSError, ValueError):  # a broken pipe: it died (or was killed) meanwhile
            return None
        if payload is None:
            return None
        with contextlib.suppress(ValueError):
            reply = json.loads(payload)
            if isinstance(reply, dict):
                return reply
        return None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Children:
    """This server process's conversion children, one per memory limit, each used by one file at a
    time (`locks`)."""

    def __init__(self) -> None:
        self._children: dict[int, _Child] = {}
        # An asyncio lock is tied to an event loop only while callers wait on it, so the files of
        # one loop queue here, and a later loop (a script's next asyncio.run) can use it too.
        self.locks: collections.defaultdict[int, asyncio.Lock] = collections.defaultdict(
            asyncio.Lock
        )

    def get(self, memory_mb: int) -> _Child:
        child = self._children.get(memory_mb)
        if child is None or child.process.poll() is not None or child.files >= MAX_FILES:
            if child is not None:
                child.kill()
            child = self._children[memory_mb] = _Child(memory_mb)
        return child

    def drop(self, memory_mb: int, child: _Child) -> None:
        child.kill()
        if self._children.get(memory_mb) is child:
            del self._children[memory_mb]


_children = _Children()


async def convert_in_subprocess(
    data: bytes,
    filename: str,
    # The child's own limit, which also sets its CPU limit: not a wrapper's time-out (ASYNC109).
    timeout: float = 120,  # noqa: ASYNC109
    memory_mb: int = 1024,
) -> Converted:
    """`convert_document` in the separate, limited process; never blocks the event loop.

    A time-out (`timeout` seconds of wall-clock time, from when the child takes the file), the
    memory limit (`memory_mb` of address space) or a crash of the child raise DocumentRejected, like
    a file that cannot be read. Cancelling the call kills the child.
    """
    kind_of(filename)  # the cheap refusals need no process
    if not data:
        raise DocumentRejected("This file is empty.")
    async with _children.locks[memory_mb]:
        return await _convert(data, filename, timeout, memory_mb)


async def _convert(data: bytes, filename: str, timeout: float, memory_mb: int) -> Converted:  # noqa: ASYNC109
    child = await asyncio.to_thread(_children.get, memory_mb)
    header = {
        "filename": filename,
        "size": len(data),
        # The CPU limit backs up the wall-clock one: it ends a child left behind by a dying server.
        "cpu_seconds": math.ceil(timeout) + 1,
        "fault": os.environ.get(_FAULT_ENV),
    }
    exchange = asyncio.ensure_future(asyncio.to_thread(child.exchange, header, data))
    try:
        reply = await asyncio.wait_for(asyncio.shield(exchange), timeout)
    except TimeoutError:
        await _end(child, memory_mb, exchange)
        raise DocumentRejected(
            f"Reading this file took longer than {timeout:g} s, so it was stopped: "
            "try a smaller file or split it."
        ) from None
    except BaseException:  # cancelled: the child must not go on with a file nobody waits for
        await asyncio.shield(_end(child, memory_mb, exchange))
        raise
    if reply is not None:
        if "rejected" in reply:
            raise DocumentRejected(reply["rejected"])
        pages = [Page(number, markdown) for number, markdown in reply["pages"]]
        return Converted(reply["kind"], pages, reply["page_count"])
    code = await asyncio.to_thread(_exit_code, child)
    await _end(child, memory_mb, exchange)
    tail = await asyncio.to_thread(child.stderr_tail)
    logger.warning("document conversion process ended with %s: %s", code, tail)
    if code == _EXIT_MEMORY or any(sign in tail.lower() for sign in _OUT_OF_MEMORY_SIGNS):
        raise DocumentRejected(
            f"Reading this file needed more than {memory_mb} MB of memory, so it was stopped."
        )
    if code == -signal.SIGXCPU:  # its CPU limit
        raise DocumentRejected(
            f"Reading this file took longer than {timeout:g} s, so it was stopped: "
            "try a smaller file or split it."
        )
    raise DocumentRejected(
        "The converter stopped unexpectedly while reading this file: it may be damaged."
    )


def _exit_code(child: _Child) -> int | None:
    """How the child ended (given a moment to end by itself); None if it did not."""
    try:
        return child.process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        return None


async def _end(child: _Child, memory_mb: int, exchange: asyncio.Future[Any]) -> None:
    """Kill the child and wait for the thread talking to it (it sees the pipes close)."""
    await asyncio.to_thread(_children.drop, memory_mb, child)  # kill, then reap: not on the loop
    with contextlib.suppress(BaseException):
        await exchange


# The child ---------------------------------------------------------------------------------------


def _limit(memory_mb: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crashing parser leaves no core file


def _limit_cpu(seconds: int) -> None:
    """This file may use `seconds` of CPU more than the child used so far (SIGXCPU past it)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = math.ceil(used.ru_utime + used.ru_stime)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    soft = spent + seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _fault(kind: str) -> None:
    if kind == "hang":
        while True:
            pass
    if kind == "crash":
        os.abort()
    if kind == "memory":
        hog = []
        while True:
            hog.append(bytearray(16 << 20))


def _answer(header: dict[str, Any], data: bytes) -> dict[str, Any] | None:
    """The reply for one file; None when it ran out of memory."""
    try:
        if header.get("fault"):
            _fault(header["fault"])
        converted = convert_document(data, header["filename"])
        return {
            "kind": converted.kind,
            "page_count": converted.page_count,
            "pages": [[page.number, page.markdown] for page in converted.pages],
        }
    except DocumentRejected as rejection:
        return {"rejected": str(rejection)}
    except MemoryError:
        return None


def main(argv: list[str] | None = None) -> int:
    """The child: files on stdin, one after another, each answered on stdout (see above)."""
    parser = argparse.ArgumentParser(description="Convert documents (stdin) to JSON pages.")
    parser.add_argument("--memory-mb", type=int, default=1024)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # The answers get stdout to themselves: whatever a library prints (Python or C) goes to stderr.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _limit(args.memory_mb)
    files = sys.stdin.buffer
    while header_line := files.readline():
        header = json.loads(header_line)
        data = _read_exactly(files, int(header["size"]))
        if data is None:
            return 0  # the parent went away mid-file
        _limit_cpu(int(header["cpu_seconds"]))
        reply = _answer(header, data)
        del data
        if reply is None:  # out of memory: handled out of the except block, frames freed
            return _EXIT_MEMORY
        payload = json.dumps(reply, ensure_ascii=False).encode()
        answers.write(b"%d\n" % len(payload) + payload)
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
