"""Langfuse tracing, checked against a real OTLP/HTTP receiver on loopback (tests/otlp_receiver.py).

The app runs with Langfuse keys and LANGFUSE_HOST pointing at the receiver; one message uses the
calculator, then searches the web (the offline `pages` provider, the real chunker, ranker and
embedder) and the scripted model answers. The span tree that arrives is checked: one trace per
user message, a span per graph node, tool, recall and web step, a generation per model call with
its model, tokens and the deployment that answered, each under the span that made it.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import litellm
import pytest
from pydantic import SecretStr

from core import tracing
from core.accounts import LOCAL_USER_ID
from core.config import Settings
from core.services import Services
from tests.chat_client import send
from tests.otlp_receiver import TRACES_PATH, ReceivedSpan, Receiver, otlp_receiver
from tests.test_web_search import calculator_then_search, pages_dir, web_services  # noqa: F401

PUBLIC_KEY = "pk-lf-test"
SECRET_KEY = "sk-lf-test"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


@pytest.fixture(scope="module")
async def chat_services(
    settings: Settings,
    pages_dir: Path,  # noqa: F811 (the fixture imported above)
    receiver: Receiver,
) -> AsyncIterator[Services]:
    """The app's services with the `pages` search provider and Langfuse on, sending to the
    receiver."""
    keys = {
        "langfuse_public_key": SecretStr(PUBLIC_KEY),
        "langfuse_secret_key": SecretStr(SECRET_KEY),
    }
    async with web_services(settings, pages_dir, langfuse_host=receiver.url, **keys) as services:
        yield services


async def spans_of(receiver: Receiver, trace_id: str, *names: str) -> list[ReceivedSpan]:
    """The trace's spans once every name in `names` arrived (the SDK sends in batches)."""
    for _ in range(100):
        await asyncio.to_thread(tracing.flush)
        spans = [s for s in receiver.received() if s.trace_id == trace_id]
        if set(names) <= {s.name for s in spans}:
            return spans
        await asyncio.sleep(0.1)
    raise AssertionError(f"missing spans: {set(names) - {s.name for s in spans}}")


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def parent_of(spans: list[ReceivedSpan], span: ReceivedSpan) -> ReceivedSpan:
    return next(s for s in spans if s.span_id == span.parent_id)


def metadata(span: ReceivedSpan) -> dict[str, object]:
    """The observation's metadata, which Langfuse sends as one attribute per key."""
    prefix = "langfuse.observation.metadata."
    return {k.removeprefix(prefix): v for k, v in span.attributes.items() if k.startswith(prefix)}


async def test_a_message_is_one_trace_with_a_span_per_step(client, model, receiver) -> None:
    model.push(
        *calculator_then_search(
            "1.7 * 2", "Warsaw population", "Warsaw has about 1.7 million inhabitants[1]."
        )
    )
    # (It tells something of the user, so it is read for memories: a question alone is not.)
    events = await send(client, "I am moving to Warsaw. How many live there, and twice that?")
    assert events[-1]["type"] == "done"
    chat_id = events[0]["chat_id"]
    message_id = next(e for e in events if e["type"] == "turn")["user_message_id"]
    trace_id = uuid.UUID(message_id).hex  # a message's trace is found by its id

    nodes = ["build_prompt", "call_model", "tools", "use_tool_answer", "save_turn"]
    web = ["web search 1", "search", "chunk", "rank", "check", "answer"]
    calls = ["chat call 1", "chat call 2", "evidence check", "web answer"]
    # Every span asserted on below is waited for: a generation is exported from LiteLLM's callback,
    # after the call, so it may come after its parent (the memory extraction's did, once in CI).
    spans = await spans_of(
        receiver, trace_id, "chat message", *nodes, "tool calculator", "tool web_search",
        "memory recall", *web, *calls, "memory extraction", "memory extraction call",
    )  # fmt: skip

    # Sent where Langfuse listens, with the project's keys.
    assert receiver.paths == {TRACES_PATH}
    expected = base64.b64encode(f"{PUBLIC_KEY}:{SECRET_KEY}".encode()).decode()
    assert receiver.authorizations == {f"Basic {expected}"}
    # No duplicates: every span once.
    assert len({s.span_id for s in spans}) == len(spans)

    root = one(spans, "chat message")
    assert root.attributes["langfuse.internal.as_root"] is True
    assert root.attributes["session.id"] == chat_id
    assert root.attributes["user.id"] == str(LOCAL_USER_ID)
    assert "Warsaw" in root.json("langfuse.observation.input")
    assert "1.7 million" in root.json("langfuse.observation.output")

    # Every graph node under the root, in the order the graph ran them.
    node_spans = sorted((s for s in spans if s.name in nodes), key=lambda s: s.start_ns)
    assert [s.name for s in node_spans] == [
        "build_prompt", "call_model", "tools", "call_model", "tools", "use_tool_answer",
        "save_turn",
    ]  # fmt: skip
    assert {s.parent_id for s in node_spans} == {root.span_id}
    assert all(s.attributes["session.id"] == chat_id for s in node_spans)

    assert parent_of(spans, one(spans, "memory recall")).name == "build_prompt"
    calculator = one(spans, "tool calculator")
    assert parent_of(spans, calculator).name == "tools"
    assert calculator.attributes["langfuse.observation.type"] == "tool"
    assert calculator.json("langfuse.observation.output")["result"] == "3.4"
    round_ = one(spans, "web search 1")
    assert parent_of(spans, round_).name == "tool web_search"
    for step in web[1:]:
        assert parent_of(spans, one(spans, step)) == round_, step

    # A generation per model call, under the span that made it, with what Langfuse shows.
    parents = {"chat call 1": "call_model", "chat call 2": "call_model",
               "evidence check": "check", "web answer": "answer"}  # fmt: skip
    for name, parent in parents.items():
        generation = one(spans, name)
        assert parent_of(spans, generation).name == parent, name
        assert generation.attributes["langfuse.observation.type"] == "generation"
        usage = generation.json("langfuse.observation.usage_details")
        assert usage["input"] > 0 and usage["output"] >= 0, name
        assert "total" in generation.json("langfuse.observation.cost_details")
        assert generation.attributes["session.id"] == chat_id
        assert generation.end_ns >= generation.start_ns
    answer = one(spans, "web answer")
    assert answer.json("langfuse.observation.usage_details")["output"] > 0
    assert answer.attributes["langfuse.observation.model.name"] == "scripted/chat"
    assert metadata(answer) == {"role": "chat", "deployment": "scripted/chat", "fallback": False}
    check = one(spans, "evidence check")
    assert check.attributes["langfuse.observation.model.name"] == "scripted/utility"
    # Time to first token: the streamed answer has one, the check (answered at once) none.
    assert "langfuse.observation.completion_start_time" in answer.attributes
    assert "langfuse.observation.completion_start_time" not in check.attributes

    # Memory extraction ran after the reply, as a root of the same trace with its generation.
    extraction = one(spans, "memory extraction")
    assert extraction.attributes["langfuse.internal.as_root"] is True
    assert extraction.attributes["user.id"] == str(LOCAL_USER_ID)
    under = [s for s in spans if s.parent_id == extraction.span_id]
    assert [(s.name, s.attributes["langfuse.observation.type"]) for s in under] == [
        ("memory extraction call", "generation")
    ]


async def test_a_fallback_is_recorded_as_such(chat_services, model, receiver) -> None:
    """The deployment that failed and the one that answered are two generations under the span
    that made the call; the answer's says it came from a fallback."""
    model.push({"text": "hello"})
    with tracing.span("fallback check") as observation:
        assert observation is not None
        response = await chat_services.router.acompletion(
            model="flaky",
            messages=[{"role": "user", "content": "hi"}],
            metadata=tracing.trace_metadata(str(uuid.uuid4()), "chat-x", "flaky call"),
        )
    assert response.choices[0].message.content == "hello"
    parent_id = observation.id
    for _ in range(100):
        await asyncio.to_thread(tracing.flush)
        generations = [s for s in receiver.received() if s.parent_id == parent_id]
        if len(generations) == 2:
            break
        await asyncio.sleep(0.1)
    by_model = {s.attributes["langfuse.observation.model.name"]: s for s in generations}
    assert set(by_model) == {"scripted/down", "scripted/chat"}
    assert {s.name for s in generations} == {"flaky call"}
    assert by_model["scripted/down"].attributes["langfuse.observation.level"] == "ERROR"
    assert metadata(by_model["scripted/chat"]) == {
        "role": "flaky", "deployment": "scripted/chat", "fallback": True
    }  # fmt: skip


def test_off_without_keys_registers_nothing(settings: Settings) -> None:
    """Last in this module: it switches this process's tracing off."""
    assert tracing.configure_tracing(settings).startswith("Tracing: off")
    assert not any(isinstance(c, tracing.ModelCallTracer) for c in litellm.callbacks)
    with tracing.span("anything") as observation:
        assert observation is None
    assert "trace_parent" not in tracing.trace_metadata(str(uuid.uuid4()), "c", "step")
