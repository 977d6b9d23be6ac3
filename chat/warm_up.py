"""Warms the local model after start-up, so that a new user's first reply does not wait for it.

With no keys, the first message would otherwise start the model's process (a few seconds) and
have it read the chat instructions, then the memory extraction's instructions and examples:
hundreds of tokens at 20-40 a second on two cores, 10-30 s before the first word. In the
background after start-up, this starts the process and has it read both prompts' fixed
beginnings once; its prompt cache keeps them, so the first message reads only its own words.
It is background work: a message sent meanwhile is served first (core.local_model.queue).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from core.llm_router import provider_handler
from core.local_model.provider import LocalModelProvider
from core.prompts import chat_instructions, memory_extraction_request
from core.services import Services

log = logging.getLogger("resolveai.models")


async def warm_local_model(services: Services) -> None:
    """Start the local model and read the prompts' fixed beginnings (when the chat runs on it)."""
    plan = services.model_plan
    provider = provider_handler("local")
    if not plan.runs_locally("chat") or not isinstance(provider, LocalModelProvider):
        return
    if provider.process is None:  # a server of the user's (LOCAL_MODEL_URL): theirs to run
        return
    started = time.monotonic()
    now = datetime.now(UTC)
    try:
        if plan.runs_locally("memory"):
            await services.router.acompletion(
                model="memory",
                messages=memory_extraction_request("1. Hello.", None, [], now),
                max_tokens=1,
            )
        # Last, so that its state is also the model's live one when the first message comes.
        memory = "tools" if plan.capability("chat", "memory_tools") else "recall"
        await services.router.acompletion(
            model="chat",
            messages=[
                {"role": "system", "content": chat_instructions(now, None, memory=memory)},
                {"role": "user", "content": "Hello."},
            ],
            max_tokens=1,
        )
    except Exception as error:  # the first message starts it then, and says why if it cannot
        log.warning("Local model: warm-up failed (%s: %s)", type(error).__name__, error)
        return
    log.info("Local model: warmed up in %.1f s", time.monotonic() - started)
