"""Start-up time: from `python server.py` to a healthy /api/health, first start on an empty data
folder and later starts, plus the server's memory at rest. Baseline, measured in the same run: a
bare FastAPI app started by uvicorn (what any Python web server pays before doing anything).

    python -m bench.startup [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from core.config import PROJECT_ROOT
from tests.chat_client import free_port

BASELINE_APP = """
import uvicorn
from fastapi import FastAPI
app = FastAPI()
@app.get("/api/health")
def health():
    return {"ok": True}
uvicorn.run(app, host="127.0.0.1", port={port}, log_level="warning")
"""


def time_to_healthy(command: list[str], env: dict[str, str], port: int) -> tuple[float, int]:
    """Seconds until /api/health answers 200, and the process's memory (RSS bytes) then."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command} exited with {process.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                    elapsed = time.perf_counter() - started
                    return elapsed, psutil.Process(process.pid).memory_info().rss
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    finally:
        process.terminate()
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("DATABASE_URL", None)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch) / "data"
        server_env = {**env, "APP_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1"}
        baseline = []
        for _ in range(args.runs):
            port = free_port()
            code = BASELINE_APP.replace("{port}", str(port))
            baseline.append(time_to_healthy([sys.executable, "-c", code], env, port))
        first = []
        later = []
        for run in range(args.runs):
            if run:
                # a fresh data folder each time: initdb and migrations included
                data_dir = Path(scratch) / f"data{run}"
                server_env["APP_DATA_DIR"] = str(data_dir)
            port = free_port()
            first.append(
                time_to_healthy(
                    [sys.executable, "server.py"], {**server_env, "APP_PORT": str(port)}, port
                )
            )
            port = free_port()
            later.append(
                time_to_healthy(
                    [sys.executable, "server.py"], {**server_env, "APP_PORT": str(port)}, port
                )
            )
    base = statistics.median(s for s, _ in baseline)
    for name, samples in (
        ("bare FastAPI app (baseline)", baseline),
        ("first start, empty data folder", first),
        ("later start", later),
    ):
        seconds = statistics.median(s for s, _ in samples)
        memory = statistics.median(m for _, m in samples) / 2**20
        rows.append(f"| {name} | {seconds:.2f} s | {seconds / base:.1f}× | {memory:.0f} MiB |")
    print(f"Start-up, median of {args.runs} runs (command → healthy)\n")
    print("| what | time | vs baseline | memory (RSS) at healthy |")
    print("| --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
