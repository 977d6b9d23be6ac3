"""Start-up time: from `python server.py` to a healthy /api/health (core/launcher.py answers it
while the server imports) and to the app itself answering it, first start on an empty data
folder and later starts, plus the server's memory at rest and after loading each model.

    python -m bench.startup [--runs 3] [--compare DIR] [--no-models]

Baseline, measured in the same run: a bare FastAPI app started by uvicorn (what any Python web
server pays before doing anything). Runs are interleaved (baseline, first start, later start, then
again), so a busy machine slows every row alike. `--compare DIR` adds the same two rows for the
server of another checkout (e.g. `git archive HEAD | tar -x -C /tmp/before`), run by this
interpreter on the same data folders: a before/after in one run.

Memory: RSS of the server process when healthy (database pool open, embedder loaded, the local
model not yet: it starts on first use). Then, step by step in one fresh process doing what the
server does: the server's imports, `open_services` (database + embedder), the local model's own
process started (`LocalModelProvider.process.endpoint()`: `core.local_model.serve` loads the GGUF)
and after its first short reply (`provider.generate`; llama.cpp maps the GGUF file, its pages
count once read, and the KV cache is allocated), each with the RSS of the model's process beside
the server's. The local model is the app's own (data/models, assembled by
`python -m core.local_model.weights` or the first chat) when present; `--no-models` skips these
steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from core.config import PROJECT_ROOT, load_settings
from core.local_model.weights import default_model_path
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

# Run in a fresh interpreter from the project folder; prints one JSON line per step:
# [step, server RSS, seconds, model process RSS or null].
MEMORY_STEPS = """
import asyncio, json, time
import psutil

def report(step, started, model_pid=None):
    rss = psutil.Process().memory_info().rss
    model = psutil.Process(model_pid).memory_info().rss if model_pid else None
    print(json.dumps([step, rss, time.perf_counter() - started, model]), flush=True)

started = time.perf_counter()
report("Python interpreter (+ psutil)", started)
started = time.perf_counter()
import server  # noqa: F401  (what `python server.py` imports before start-up)
report("server's imports (FastAPI, LangGraph, LiteLLM, app modules)", started)

from core.config import get_settings
from core.llm_router import provider_handler
from core.local_model.provider import LocalModelProvider
from core.services import open_services

async def main():
    started = time.perf_counter()
    services = await open_services(get_settings())
    await services.embedder.embed_query("warm up")
    report("open_services: database pool + embedder loaded (healthy)", started)
    local = provider_handler("local")
    if not isinstance(local, LocalModelProvider):  # a models config without `local`
        local = LocalModelProvider(services.settings)
    started = time.perf_counter()
    pid = (await local.process.endpoint()).pid
    report("local model's process started (llama.cpp server, weights mapped)", started, pid)
    started = time.perf_counter()
    messages = [{"role": "user", "content": "Say hello in five words."}]
    async for _ in local.generate("local", messages, {"max_tokens": 16, "temperature": 0.0}):
        pass
    report("after its first reply (weights read, KV cache in use)", started, pid)
    local.close()
    await services.close()

asyncio.run(main())
"""


def time_to_healthy(
    command: list[str], env: dict[str, str], port: int, cwd: Path = PROJECT_ROOT
) -> tuple[float, float, int]:
    """Seconds until /api/health answers 200, seconds until the app itself answers it (not
    core/launcher.py's `"starting"` while the server imports; the same moment for a server
    without it), and the process's memory (RSS bytes) then."""
    started = time.perf_counter()
    healthy = None
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command} exited with {process.returncode}")
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2)
                if response.status_code == 200:
                    now = time.perf_counter() - started
                    healthy = healthy or now
                    if "starting" not in response.json():
                        return healthy, now, psutil.Process(process.pid).memory_info().rss
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    finally:
        process.terminate()
        process.wait(30)


def memory_steps(env: dict[str, str]) -> list[tuple[str, int, float, int | None]]:
    """(step, server RSS bytes, seconds the step took, model process RSS bytes or None) from
    MEMORY_STEPS in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_STEPS],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"memory steps failed:\n{done.stderr[-2000:]}")
    return [tuple(json.loads(line)) for line in done.stdout.splitlines() if line.startswith("[")]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--compare", type=Path, help="another checkout's folder: time its server too"
    )
    parser.add_argument("--no-models", action="store_true", help="skip the memory steps")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("DATABASE_URL", None)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    servers = {"": PROJECT_ROOT}
    if args.compare:
        servers[f" ({args.compare})"] = args.compare.resolve()
    samples: dict[str, list[tuple[float, float, int]]] = {"bare FastAPI app (baseline)": []}
    with tempfile.TemporaryDirectory() as scratch:
        # No warm-up: it would start the local model in the background of the timed starts
        # (the model's own steps are measured below).
        server_env = {**env, "HF_HUB_OFFLINE": "1", "LOCAL_MODEL_WARM_UP": "false"}
        for run in range(args.runs):
            port = free_port()
            code = BASELINE_APP.replace("{port}", str(port))
            samples["bare FastAPI app (baseline)"].append(
                time_to_healthy([sys.executable, "-c", code], env, port)
            )
            for number, (label, root) in enumerate(servers.items()):
                # a fresh data folder each run: initdb and migrations included
                server_env["APP_DATA_DIR"] = str(Path(scratch) / f"data{run}-{number}")
                for kind in ("first start, empty data folder", "later start"):
                    port = free_port()
                    command = [sys.executable, str(root / "server.py")]
                    timing = time_to_healthy(
                        command, {**server_env, "APP_PORT": str(port)}, port, cwd=root
                    )
                    samples.setdefault(kind + label, []).append(timing)
        steps = []
        if not args.no_models:
            model = default_model_path(load_settings(_env_file=None))
            # The model's own process, started in the scratch folder: never a server of yours
            # (an empty LOCAL_MODEL_URL overrides one in .env).
            steps_env = {
                **server_env,
                "APP_DATA_DIR": str(Path(scratch) / "steps"),
                "LOCAL_MODEL_URL": "",
            }
            if model.exists():
                steps_env["LOCAL_MODEL_PATH"] = str(model)
            steps = memory_steps(steps_env)

    base = statistics.median(s for s, _, _ in samples["bare FastAPI app (baseline)"])
    print(f"Start-up, median of {args.runs} runs (command → healthy; → the app answers)\n")
    print("| what | healthy | vs baseline | app started | memory (RSS) then |")
    print("| --- | --- | --- | --- | --- |")
    for name, timings in samples.items():
        seconds = statistics.median(s for s, _, _ in timings)
        app = statistics.median(a for _, a, _ in timings)
        memory = statistics.median(m for _, _, m in timings) / 2**20
        ratio = seconds / base
        print(f"| {name} | {seconds:.2f} s | {ratio:.1f}× | {app:.2f} s | {memory:.0f} MiB |")
    if steps:
        print("\nMemory of one process doing what the server does, step by step (one run)\n")
        print("| step | took | server RSS after | added | model process RSS |")
        print("| --- | ---: | ---: | ---: | ---: |")
        previous = 0
        for step, rss, seconds, model in steps:
            shown = f"{model / 2**20:.0f} MiB" if model is not None else ""
            print(
                f"| {step} | {seconds:.1f} s | {rss / 2**20:.0f} MiB"
                f" | {(rss - previous) / 2**20:+.0f} MiB | {shown} |"
            )
            previous = rss


if __name__ == "__main__":
    main()
