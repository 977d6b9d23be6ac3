"""Langfuse tracing over OpenTelemetry (the Langfuse v4 SDK): one trace per user message.

Off unless LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY are set; off, `span()` costs one check and
no LiteLLM callback is registered. On:
- the turn opens the trace's root (`message_trace`), whose trace id is the user message's id, so a
  message's trace is found by its id and work done for it later (the summary, the title, memory
  extraction in another process) joins the same trace;
- each graph node, tool call, memory recall and extraction, and web round step opens a child span
  (`span`, `traced`) as the current OpenTelemetry context, so what it calls nests under it;
- every model call becomes a generation under the span that made it (`trace_metadata` notes that
  span), recorded by `ModelCallTracer` from LiteLLM's callback once the call ended: the model, the
  deployment that answered (a fallback says so), tokens, cost, latency and time to first token.

Spans go to Langfuse's OTLP/HTTP endpoint (LANGFUSE_HOST + /api/public/otel/v1/traces) on a
TracerProvider of our own, never the process's global one.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import litellm
from litellm.integrations.custom_logger import CustomLogger

from core.config import Settings
from core.model_calls import call_row

if TYPE_CHECKING:
    from langfuse import Langfuse
    from opentelemetry.sdk.trace import TracerProvider

# The Langfuse SDK and OpenTelemetry's SDK are imported when tracing is switched on, never at
# start-up with it off: 0.38-0.46 s of imports (python -X importtime, after litellm's).

log = logging.getLogger("resolveai.tracing")

# Span attributes Langfuse reads (langfuse._client.attributes): a trace's session and user, and
# "this span is a root of its trace".
SESSION_ATTRIBUTE = "session.id"
USER_ATTRIBUTE = "user.id"
AS_ROOT_ATTRIBUTE = "langfuse.internal.as_root"
FLUSH_SECONDS = 10.0

_client: Langfuse | None = None
_provider: TracerProvider | None = None

P = ParamSpec("P")
R = TypeVar("R")


def configure_tracing(settings: Settings) -> str:
    """Switch tracing on or off for this process; return the plain-language status line."""
    shutdown_tracing()
    if not settings.langfuse_enabled:
        return "Tracing: off (LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY not set)"
    assert settings.langfuse_public_key and settings.langfuse_secret_key
    from langfuse import Langfuse
    from opentelemetry.sdk.trace import TracerProvider

    global _client, _provider
    _provider = TracerProvider()
    _client = Langfuse(
        public_key=settings.langfuse_public_key.get_secret_value(),
        secret_key=settings.langfuse_secret_key.get_secret_value(),
        base_url=settings.langfuse_host,
        tracer_provider=_provider,
    )
    litellm.callbacks.append(ModelCallTracer())
    return f"Tracing: Langfuse at {settings.langfuse_host}"


def shutdown_tracing() -> None:
    """Send what is buffered and switch tracing off."""
    global _client, _provider
    litellm.callbacks = [c for c in litellm.callbacks if not isinstance(c, ModelCallTracer)]
    if _provider is not None:
        _provider.force_flush(int(FLUSH_SECONDS * 1000))
        _provider.shutdown()
    _client = _provider = None


def flush() -> None:
    """Send the finished spans now (tests; the SDK otherwise sends them every few seconds)."""
    if _provider is not None:
        _provider.force_flush(int(FLUSH_SECONDS * 1000))


def trace_id_of(key: str) -> str:
    """The trace id for a user message's id (its 32 hex digits) or any other key (hashed)."""
    try:
        return uuid.UUID(key).hex
    except ValueError:
        from langfuse import Langfuse

        return Langfuse.create_trace_id(seed=key)


@contextlib.contextmanager
def message_trace(
    message_id: uuid.UUID, name: str, *, chat_id: uuid.UUID, user_id: uuid.UUID, input: Any = None
) -> Iterator[Any]:
    """A root of the user message's trace (the turn; later, its memory extraction), current for
    what runs inside it: the chat is the trace's session, its owner the trace's user."""
    if _client is None:
        yield None
        return
    from langfuse import propagate_attributes

    with (
        _client.start_as_current_observation(
            trace_context={"trace_id": message_id.hex}, name=name, input=input
        ) as root,
        propagate_attributes(session_id=str(chat_id), user_id=str(user_id), trace_name=name),
    ):
        yield root


@contextlib.contextmanager
def span(name: str, *, kind: str = "span", input: Any = None, **metadata: Any) -> Iterator[Any]:
    """A child of the current span (a node, a tool, a step), current while the block runs.

    `kind` is Langfuse's observation type: "span", "tool", "retriever", "chain"… Yields the
    observation (`.update(output=…)`), or None when tracing is off.
    """
    if _client is None:
        yield None
        return
    with _client.start_as_current_observation(
        name=name,
        as_type=kind,  # type: ignore[arg-type]
        input=input,
        metadata=metadata or None,
    ) as observation:
        yield observation


def traced(
    name: str, kind: str = "span"
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """An async function run inside `span(name)`."""

    def wrap(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(function)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with span(name, kind=kind):
                return await function(*args, **kwargs)

        return run

    return wrap


def trace_metadata(
    trace_id: str, chat_id: str, step: str, user_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    """LiteLLM `metadata` for a model call: what the generation is called and where it belongs
    (the span current here, else the root of trace `trace_id`)."""
    metadata = {"generation_name": step, "session_id": chat_id, **extra}
    if _client is None:
        return metadata
    from opentelemetry import trace as otel_trace

    current = otel_trace.get_current_span().get_span_context()
    if current.is_valid:
        parent = {"trace_id": f"{current.trace_id:032x}", "span_id": f"{current.span_id:016x}"}
    else:
        parent = {"trace_id": trace_id_of(trace_id)}
    return {**metadata, "trace_parent": parent, "trace_user_id": user_id}


class ModelCallTracer(CustomLogger):
    """Records each model call LiteLLM made (each deployment tried) as a Langfuse generation."""

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._record(kwargs, error=None)

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._record(kwargs, error=str(kwargs.get("exception") or "failed"))

    def _record(self, kwargs: dict[str, Any], error: str | None) -> None:
        client = _client
        metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
        parent = metadata.get("trace_parent")
        call = call_row(kwargs, error)
        if client is None or call is None or not parent:
            return  # not a call of ours (LiteLLM's own retries carry no parent), or tracing off
        try:
            _record_generation(client, kwargs["standard_logging_object"], metadata, parent, call)
        except Exception as failure:  # tracing must never fail a reply
            log.warning("Tracing: a model call was not recorded (%s)", failure)


def _record_generation(
    client: Langfuse,
    payload: dict[str, Any],
    metadata: dict[str, Any],
    parent: dict[str, str],
    call: dict[str, Any],
) -> None:
    """`call`: its `model_calls` row (core/model_calls.py), the figures both record."""
    from opentelemetry import trace as otel_trace
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    # A call made outside every span (the summary, the title: after the turn) is a root of the
    # message's trace, as the SDK makes one: under a parent id that is never sent.
    span_id = parent.get("span_id")
    context = otel_trace.set_span_in_context(
        otel_trace.NonRecordingSpan(
            otel_trace.SpanContext(
                trace_id=int(parent["trace_id"], 16),
                span_id=int(span_id, 16) if span_id else RandomIdGenerator().generate_span_id(),
                is_remote=False,
                trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED),
            )
        )
    )
    # The SDK starts a generation now; this one started when LiteLLM sent the call, so the OTel
    # span is started here with its real start time and wrapped as the SDK would (pinned SDK).
    otel_span = client._otel_tracer.start_span(
        metadata.get("generation_name") or "model call",
        context=context,
        start_time=_nanoseconds(payload["startTime"]),
    )
    if not span_id:
        otel_span.set_attribute(AS_ROOT_ATTRIBUTE, True)
    otel_span.set_attribute(SESSION_ATTRIBUTE, str(metadata.get("session_id") or ""))
    if metadata.get("trace_user_id"):
        otel_span.set_attribute(USER_ATTRIBUTE, metadata["trace_user_id"])
    ttft = call["ttft_ms"]
    first_token = payload["startTime"] + ttft / 1000 if ttft is not None else None
    error = call["error"]
    generation = client._create_observation_from_otel_span(
        otel_span=otel_span,
        as_type="generation",
        model=call["model"],
        usage_details={"input": call["prompt_tokens"], "output": call["completion_tokens"]},
        cost_details={"total": call["cost"]},
        completion_start_time=(datetime.fromtimestamp(first_token, UTC) if first_token else None),
        metadata={"role": call["role"], "deployment": call["model"], "fallback": call["fallback"]},
        level="ERROR" if error else None,
        status_message=error,
    )
    generation.end(end_time=_nanoseconds(payload["endTime"]))


def _nanoseconds(seconds: float) -> int:
    return int(seconds * 1_000_000_000)
