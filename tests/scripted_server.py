"""`python -m tests.scripted_server`: the real server process (`server.main`, its settings from the
environment) with every model role scripted: a chat reply is SCRIPTED_WORDS words, one every
SCRIPTED_DELAY seconds. For tests that kill a server mid-reply (tests/test_server.py); run with
MODELS_CONFIG=tests/models.scripted.yaml.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
from types import FrameType
from typing import Any

from core.llm_router import register_provider
from tests.scripted_model import ScriptedProvider

WORDS = int(os.environ.get("SCRIPTED_WORDS", "400"))
DELAY = float(os.environ.get("SCRIPTED_DELAY", "0.05"))


def reply(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    if model == "memory":
        return {"text": '{"operations": []}'}
    return {"text": " ".join(f"word{i}" for i in range(WORDS)), "delay": DELAY}


def dump_state(signum: int, frame: FrameType | None) -> None:
    """SIGUSR1: every thread's stack and every asyncio task's, to the log (a test whose server
    does not exit asks it what it is waiting for)."""
    faulthandler.dump_traceback(all_threads=True)
    try:
        tasks = asyncio.all_tasks(asyncio.get_running_loop())
    except RuntimeError:  # no loop running (yet, or any more)
        return
    for task in tasks:
        task.print_stack(file=sys.stderr)
    sys.stderr.flush()


def main() -> int:
    signal.signal(signal.SIGUSR1, dump_state)
    provider = ScriptedProvider()
    provider.responder = reply
    register_provider("scripted", provider)
    import server

    return server.main()


if __name__ == "__main__":
    sys.exit(main())
