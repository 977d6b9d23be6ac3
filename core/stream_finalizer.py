"""LiteLLM's stream wrapper without its finalizer: on Python 3.11 the finalizer could corrupt the
context of whatever code was running when the garbage collector freed a stream.

CPython before 3.12 has a use-after-free in `ContextVar.set` (gh-148891): setting a variable
allocates, an allocation can start a collection, and a finalizer that sets a context variable in
the same context frees the mapping the first set is still reading. The result is a context that
silently lost variables or a segfault. LiteLLM's `CustomStreamWrapper.__del__` sets two (its
correlation ids) and about half of its streams are freed by the collector (they sit in reference
cycles). In `bench.turn` at 10 clients that lost LangGraph's config in a running node about once
in 3,000 messages ("Called get_config outside of a runnable context": the reply failed), and
crashed one run. The finalizer only matters with `litellm.request_correlation_in_logs`, which
ResolveAI never turns on: a finished stream restores the ids itself, outside the collector.
"""

from __future__ import annotations

import litellm
from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper


def drop_stream_finalizer() -> None:
    """Remove `CustomStreamWrapper.__del__` unless correlation ids are logged (idempotent)."""
    if not litellm.request_correlation_in_logs and "__del__" in vars(CustomStreamWrapper):
        del CustomStreamWrapper.__del__
