"""How long a reply someone waits for waits behind background work on the local model.

    python -m bench.local_give_way [--rounds 3]

Background work (a title, a memory extraction, a summary: a call nobody watches that wants its
answer whole) runs on the local model; one second into it, while it is still reading its prompt,
a reply someone watches asks for the model. Measured: the reply's time to its first token, and how
long the background work then takes to finish. With give-way (the app's way: `whole=True`) the
background work stops and starts again after the reply; the baseline, in the same run and
alternated round by round, is the same call streamed (`whole=False`), which never gives way: the
reply waits for it to end, as every reply did before give-way.

The background prompt (~60 short notes and a JSON question, about the size of a memory
extraction's) differs in every round so that no round reads it from the model's prompt cache. The
model runs in its own process from the weights in data/models, in a scratch data folder.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from core.config import load_settings
from core.custom_provider import TextDelta
from core.local_model.provider import LocalModelProvider
from core.local_model.weights import ensure_local_model
from core.model_progress import progress_listener

REPLY = [{"role": "user", "content": "Say hi to Dana."}]


def background_prompt(label: str) -> list[dict[str, str]]:
    notes = " ".join(f"Note {n}: the {label} meeting moved to room {n % 7}." for n in range(60))
    return [{"role": "user", "content": f"{notes}\nList every room number mentioned, as JSON."}]


async def one_round(
    provider: LocalModelProvider, label: str, give_way: bool
) -> tuple[float, float]:
    """(seconds to the reply's first token, seconds from then until the background work ends)."""

    async def background() -> None:
        params = {"max_tokens": 150, "temperature": 0.0}
        async for _ in provider.generate("local", background_prompt(label), params, whole=give_way):
            pass

    working = asyncio.create_task(background())
    await asyncio.sleep(1.0)  # it is reading its prompt
    watching = progress_listener.set(lambda text: None)
    started = time.monotonic()
    first = None
    try:
        async for event in provider.generate("local", REPLY, {"max_tokens": 16}):
            if isinstance(event, TextDelta) and first is None:
                first = time.monotonic() - started
    finally:
        progress_listener.reset(watching)
    replied = time.monotonic()
    await working
    assert first is not None, "the reply had no text"
    return first, time.monotonic() - replied


async def run(rounds: int) -> None:
    settings = load_settings(
        _env_file=None, app_data_dir=Path(tempfile.mkdtemp(prefix="bench-give-way-")),
        database_url=None,
    )  # fmt: skip
    path = ensure_local_model(settings)
    provider = LocalModelProvider(settings.model_copy(update={"local_model_path": path}))
    assert provider.process is not None
    try:
        await provider.process.endpoint()
        async for _ in provider.generate("local", REPLY, {"max_tokens": 4}):
            pass  # warm-up: the reply's prompt is cached for every round alike
        times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for number in range(rounds):
            for give_way in (True, False) if number % 2 == 0 else (False, True):
                times[give_way].append(await one_round(provider, f"r{number}{give_way}", give_way))
    finally:
        provider.close()
    print(
        f"Reply asked for 1 s into background work on the local model; median of {rounds} rounds,"
        " alternated.\n"
    )
    print("| background work | reply's first token | background work ends after the reply |")
    print("| --- | ---: | ---: |")
    for give_way, label in ((False, "never gives way (baseline)"), (True, "gives way (the app)")):
        firsts, rests = zip(*times[give_way], strict=True)
        each = ", ".join(f"{f:.2f}" for f in firsts)
        print(
            f"| {label} | {statistics.median(firsts):.2f} s ({each})"
            f" | {statistics.median(rests):.1f} s |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.rounds))


if __name__ == "__main__":
    main()
