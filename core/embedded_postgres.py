"""How the embedded Postgres is configured: settings written into its data folder before each start.

Postgres ships with `shared_buffers = 128MB`, sized for any machine at all. Searches read the
HNSW and GIN indexes page by page; once a user's chunks and memories outgrow 128 MB (about 100k
document chunks: 160 MB of rows, 195 MB of vector index), every search copies thousands of pages
in from the operating system's cache. The document search statement over a copy of
bench/documents.py's 100k chunks (one table, warm) went from p50 / p95 13.4-13.9 / 18.5-19.8 ms
with 128 MB to 9.4-11.5 / 13.3-15.5 ms with 1 GB (bench/RESULTS.md, 2026-12-04). A server of your
own (DATABASE_URL) keeps its administrator's settings: managed services already size
shared_buffers to the machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

SETTINGS_FILE = "resolveai.conf"  # in the data folder, included from postgresql.conf
_INCLUDE = f"include_if_exists = '{SETTINGS_FILE}'  # written by ResolveAI at each start\n"

MIN_SHARED_BUFFERS_MB = 128  # Postgres's own default
# A quarter of the memory is the usual starting point (the Postgres manual, "Resource
# Consumption"), but this server shares its machine with the app, the embedder and the local
# model (about 1.5 GB together): at most 1 GiB, enough for the indexes of ~250k chunks.
MAX_SHARED_BUFFERS_MB = 1024
_CGROUP_MEMORY_LIMIT = Path("/sys/fs/cgroup/memory.max")


def automatic_shared_buffers_mb(memory_bytes: int, limit_bytes: int | None) -> int:
    """A quarter of the memory this process may use (the container's limit if lower), within
    MIN_SHARED_BUFFERS_MB and MAX_SHARED_BUFFERS_MB."""
    usable = min(memory_bytes, limit_bytes) if limit_bytes else memory_bytes
    quarter = usable // 4 // (1024 * 1024)
    return max(MIN_SHARED_BUFFERS_MB, min(MAX_SHARED_BUFFERS_MB, quarter))


def machine_shared_buffers_mb() -> int:
    """`automatic_shared_buffers_mb` for this machine (and its cgroup v2 memory limit, if any)."""
    limit: int | None = None
    try:
        text = _CGROUP_MEMORY_LIMIT.read_text().strip()
        limit = int(text) if text.isdigit() else None
    except OSError:
        pass
    return automatic_shared_buffers_mb(psutil.virtual_memory().total, limit)


def write_settings(pgdata: Path, shared_buffers_mb: int) -> None:
    """Write the settings for the next start of the server in `pgdata` (an initialized data
    folder). A server already running keeps its own until it restarts."""
    conf = pgdata / "postgresql.conf"
    if _INCLUDE not in conf.read_text():
        with conf.open("a") as file:
            file.write("\n" + _INCLUDE)
    settings = pgdata / SETTINGS_FILE
    partial = settings.with_name(f"{SETTINGS_FILE}.{os.getpid()}.tmp")
    partial.write_text(f"shared_buffers = '{int(shared_buffers_mb)}MB'\n")
    owner = pgdata.stat()
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # pgserver runs Postgres as its own user
        os.chown(partial, owner.st_uid, owner.st_gid)
    partial.replace(settings)  # whole: another process may be starting it too
