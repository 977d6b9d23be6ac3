"""Optional Langfuse tracing of model calls, through LiteLLM's own Langfuse callback.

Off unless LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY are set. One user message is one trace:
every model call made while answering it passes `trace_metadata(...)` with the same trace id, so its
calls nest as generations under that one trace (no duplicate traces), with the chat id as session.
"""

from __future__ import annotations

import os
from typing import Any

import litellm

from core.config import Settings

CALLBACK = "langfuse"


def configure_tracing(settings: Settings) -> str:
    """Switch LiteLLM's Langfuse callback on or off; return the plain-language status line."""
    if not settings.langfuse_enabled:
        _remove_callback()
        return "Tracing: off (LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY not set)"
    # The Langfuse SDK reads its keys from the environment; settings may come from .env.
    assert settings.langfuse_public_key and settings.langfuse_secret_key
    os.environ["LANGFUSE_PUBLIC_KEY"] = settings.langfuse_public_key.get_secret_value()
    os.environ["LANGFUSE_SECRET_KEY"] = settings.langfuse_secret_key.get_secret_value()
    os.environ["LANGFUSE_HOST"] = settings.langfuse_host
    for hook in ("success_callback", "failure_callback"):
        callbacks = getattr(litellm, hook)
        if CALLBACK not in callbacks:
            callbacks.append(CALLBACK)
    return f"Tracing: Langfuse at {settings.langfuse_host}"


def _remove_callback() -> None:
    for hook in ("success_callback", "failure_callback"):
        setattr(litellm, hook, [c for c in getattr(litellm, hook) if c != CALLBACK])


def trace_metadata(trace_id: str, chat_id: str, step: str, **extra: Any) -> dict[str, Any]:
    """LiteLLM `metadata` that files a model call under the user message's trace."""
    return {
        "trace_id": trace_id,
        "trace_name": "chat message",
        "session_id": chat_id,
        "generation_name": step,
        **extra,
    }
