"""The OpenAI-compatible API (/v1) through the real `openai` SDK against the real server (real
database, embedder and turn flow; the scripted model; web search on a folder of pages): streaming
and not, usage, memory, web sources, chats continued by header, and errors in OpenAI's shape.

Memories are global to a database, so this module has a database of its own."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from core import accounts, chat_store
from core.accounts import LOCAL_USER_ID
from core.config import Settings
from core.db import Database
from core.services import Services, open_services
from tests.chat_client import messages_of, password_services, serve
from tests.conftest import SCRIPTED_MODELS, extractions_done, new_database
from tests.scripted_model import ScriptedProvider

CHAT_HEADER = "X-ResolveAI-Chat-Id"
PAGE = "---\ntitle: Lisbon trams\nurl: https://example.org/lisbon-trams\n---\n\n{}\n"


@pytest.fixture(scope="module")
async def chat_services(
    settings: Settings, database: Database, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Services]:
    """The app's services on a database of this module's own, web search on one page."""
    pages = tmp_path_factory.mktemp("openai-pages")
    (pages / "trams.md").write_text(PAGE.format(
        "Lisbon's trams climb the hills of Alfama. Tram 28 is the best known line of the city."
    ))  # fmt: skip
    async with new_database(database) as conninfo:
        services = await open_services(settings.model_copy(update={
            "models_config": SCRIPTED_MODELS, "database_url": conninfo,
            "web_search_provider": "pages", "web_pages_dir": pages,
        }))  # fmt: skip
        yield services
        await services.close()


@pytest.fixture
def sdk(base_url: str) -> openai.AsyncOpenAI:
    # No retries: a 429 or 503 must reach the test as it was answered.
    return openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="anything", max_retries=0)


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def extension(item: Any) -> dict[str, Any]:
    """The `resolveai` extension field of an SDK object (kept by its models as an extra)."""
    return (item.model_extra or {})["resolveai"]


async def test_models_lists_resolveai(sdk: openai.AsyncOpenAI) -> None:
    listed = await sdk.models.list()
    assert [m.id for m in listed.data] == ["resolveai", "resolveai-research"]
    assert (await sdk.models.retrieve("resolveai")).owned_by == "resolveai"
    assert (await sdk.models.retrieve("resolveai-research")).id == "resolveai-research"
    with pytest.raises(openai.NotFoundError) as raised:
        await sdk.models.retrieve("gpt-4o")
    assert raised.value.code == "model_not_found"


async def test_the_research_model_answers_with_a_cited_report(
    sdk: openai.AsyncOpenAI, model: ScriptedProvider
) -> None:
    sub_question = "Which tram line is the best known in Lisbon?"
    for stream in (False, True):
        model.push(
            {"text": json.dumps({"sub_questions": [sub_question]})},
            {"text": json.dumps({"answered": [1]})},
            {"text": "Tram 28 is the best known line [1]."},
        )
        asked = [{"role": "user", "content": "Which tram is Lisbon's best known?"}]
        # Temporary: no memory extraction left running into the next test.
        options = {"extra_body": {"resolveai": {"temporary": True}}}
        if stream:
            chunks = await sdk.chat.completions.create(
                model="resolveai-research", messages=asked, stream=True, **options
            )
            text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        else:
            completion = await sdk.chat.completions.create(
                model="resolveai-research", messages=asked, **options
            )
            text = completion.choices[0].message.content
        assert [c["model"] for c in model.calls][-3:] == ["utility", "utility", "chat"]
        assert text.startswith("# Which tram is Lisbon's best known?\n\n**Short answer:** Tram 28")
        assert f"## {sub_question}\n\nTram 28 is the best known line [1]." in text
        # Its sources are listed once: the report's own list, no second one under it.
        assert text.count("[1] [") == 1 and text.index("## Sources") > text.index("[1].")


async def test_a_completion_is_a_new_chat_seeded_with_the_earlier_messages(
    sdk: openai.AsyncOpenAI, client: httpx.AsyncClient, model: ScriptedProvider,
    chat_services: Services,
) -> None:  # fmt: skip
    model.push({"text": "Tram 28 goes through Alfama."})
    raw = await sdk.chat.completions.with_raw_response.create(
        model="resolveai",
        messages=[
            {"role": "system", "content": "You are a pirate."},
            {"role": "user", "content": "I am planning a trip to Lisbon."},
            {"role": "assistant", "content": "Lovely! What would you like to see?"},
            {"role": "user", "content": [{"type": "text", "text": "Which tram should I take?"}]},
        ],
        temperature=0.2,  # accepted, not used
    )
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "Tram 28 goes through Alfama."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens > 10 and completion.usage.completion_tokens > 3
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    chat_id = raw.headers[CHAT_HEADER]
    assert extension(completion)["chat_id"] == chat_id
    saved = await messages_of(client, chat_id)
    assert [(m["role"], m["content"]) for m in saved] == [
        ("user", "I am planning a trip to Lisbon."),
        ("assistant", "Lovely! What would you like to see?"),
        ("user", "Which tram should I take?"),
        ("assistant", "Tram 28 goes through Alfama."),
    ]
    assert extension(completion)["message_id"] == saved[-1]["message_id"]
    # The model saw ResolveAI's instructions, then the client's system message as the user's own
    # instructions (as Settings' custom instructions are, in their block), and the earlier
    # messages.
    seen = model.calls[0]["messages"]
    assert seen[0]["role"] == "system" and seen[0]["content"].startswith("<instructions>")
    assert "<user_instructions>\nYou are a pirate.\n</user_instructions>" in seen[0]["content"]
    assert [m["content"] for m in seen[1:3]] == [
        "I am planning a trip to Lisbon.",
        "Lovely! What would you like to see?",
    ]
    assert "pirate" not in json.dumps(seen[1:])
    chat = next(c for c in (await client.get("/api/chats")).json() if c["chat_id"] == chat_id)
    assert chat["title"] == "I am planning a trip to Lisbon." and chat["temporary"] is False
    # Only the new message goes to memory extraction: the earlier ones were, when they were new.
    await extractions_done(chat_services)
    extracted = [c["messages"][-1]["content"] for c in model.own_calls["memory"]]
    assert len(extracted) == 1 and "[1] Which tram should I take?" in extracted[0]
    assert "[1] I am planning a trip" not in extracted[0]


async def test_streaming_sends_chunks_then_the_usage(
    sdk: openai.AsyncOpenAI, model: ScriptedProvider
) -> None:
    model.push({"chunks": ["Hello", " from", " Lisbon!"]})
    stream = await sdk.chat.completions.create(
        model="resolveai",
        messages=[{"role": "user", "content": "Say hello."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [
        c.choices[0].delta.content for c in chunks[1:] if c.choices and c.choices[0].delta.content
    ]
    # The first piece at once, the rest as they came together (core/token_batcher.py).
    assert texts[0] == "Hello" and "".join(texts) == "Hello from Lisbon!"
    finish = chunks[-2]
    assert finish.choices[0].finish_reason == "stop" and finish.usage is None
    assert extension(finish)["status"] == "complete"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens >= 3 and last.usage.prompt_tokens >= 2
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")

    model.push({"text": "No usage this time."})
    plain = await sdk.chat.completions.create(
        model="resolveai", messages=[{"role": "user", "content": "Again."}], stream=True
    )
    chunks = [chunk async for chunk in plain]
    assert all(c.choices for c in chunks)  # no usage chunk unless asked for
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "No usage this time."


async def test_the_sdk_streams_an_answer_that_used_a_stored_memory(
    sdk: openai.AsyncOpenAI, model: ScriptedProvider
) -> None:
    name = f"Miso-{uuid.uuid4().hex[:6]}"
    fact = f"The user's cat is called {name}"
    said = f"My cat is called {name}"
    model.push(tool_call("save_memory", content=fact, quote=said), {"text": "Noted."})
    await sdk.chat.completions.create(
        model="resolveai", messages=[{"role": "user", "content": f"Remember this: {said}."}]
    )

    model.push({"text": f"Your cat is {name}."})
    stream = await sdk.chat.completions.create(
        model="resolveai",
        messages=[{"role": "user", "content": "What is my cat called?"}],
        stream=True,
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == f"Your cat is {name}."
    # Recalled before the reply: in the prompt the model answered, and named in the extension.
    assert fact in model.calls[-1]["messages"][-1]["content"]
    assert [m["content"] for m in extension(chunks[-1])["memories"]] == [fact]

    # A temporary chat reads no memory: the same question, answered without it.
    model.push({"text": "I do not know."})
    temporary = await sdk.chat.completions.create(
        model="resolveai",
        messages=[{"role": "user", "content": "What is my cat called?"}],
        extra_body={"resolveai": {"temporary": True}},
    )
    assert fact not in model.calls[-1]["messages"][-1]["content"]
    assert extension(temporary)["memories"] == []


async def test_a_chat_is_continued_by_its_header(
    sdk: openai.AsyncOpenAI, client: httpx.AsyncClient, model: ScriptedProvider
) -> None:
    model.push({"text": "Hi Ana."}, {"text": "You said your name is Ana."})
    first = await sdk.chat.completions.with_raw_response.create(
        model="resolveai", messages=[{"role": "user", "content": "Hello, I am Ana."}]
    )
    chat_id = first.headers[CHAT_HEADER]
    history = [
        {"role": "user", "content": "Hello, I am Ana."},
        {"role": "assistant", "content": "Hi Ana."},
        {"role": "user", "content": "What is my name?"},
    ]
    second = await sdk.chat.completions.with_raw_response.create(
        model="resolveai", messages=history, extra_headers={CHAT_HEADER: chat_id}
    )
    assert second.headers[CHAT_HEADER] == chat_id
    assert second.parse().choices[0].message.content == "You said your name is Ana."
    # The earlier messages were in the chat already: not saved twice.
    saved = await messages_of(client, chat_id)
    assert [m["content"] for m in saved] == [
        "Hello, I am Ana.",
        "Hi Ana.",
        "What is my name?",
        "You said your name is Ana.",
    ]
    assert [m["content"] for m in model.calls[-1]["messages"][1:3]] == [
        "Hello, I am Ana.",
        "Hi Ana.",
    ]


async def test_web_search_is_asked_for_by_a_tool_and_its_sources_come_back(
    sdk: openai.AsyncOpenAI, model: ScriptedProvider
) -> None:
    model.push(
        tool_call("web_search", query="Lisbon tram Alfama", context=""),
        {"text": json.dumps({"reason": "It is stated.", "enough": "yes"})},
        {"text": "Tram 28 climbs through Alfama[1]."},
    )
    completion = await sdk.chat.completions.create(
        model="resolveai",
        messages=[{"role": "user", "content": "Which tram goes through Alfama?"}],
        tools=[{"type": "function", "function": {"name": "web_search", "parameters": {}}}],
    )
    sources = extension(completion)["sources"]
    assert sources[0]["url"] == "https://example.org/lisbon-trams"
    assert completion.choices[0].message.content == (
        "Tram 28 climbs through Alfama[1].\n\nSources:\n"
        "[1] [Lisbon trams](https://example.org/lisbon-trams)"
    )
    assert model.calls[0]["tools"] is not None  # the search was offered (and forced)


async def test_errors_are_in_openai_shape_with_their_statuses(
    sdk: openai.AsyncOpenAI, client: httpx.AsyncClient, model: ScriptedProvider
) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        await sdk.chat.completions.create(
            model="resolveai", messages=[{"role": "user", "content": "hi"}],
            extra_headers={CHAT_HEADER: str(uuid.uuid4())},
        )  # fmt: skip
    assert unknown.value.code == "chat_not_found"
    with pytest.raises(openai.NotFoundError) as no_model:
        await sdk.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    assert no_model.value.param == "model"
    with pytest.raises(openai.BadRequestError) as last:
        await sdk.chat.completions.create(
            model="resolveai", messages=[{"role": "assistant", "content": "hi"}]
        )
    assert last.value.param == "messages.0.role"
    with pytest.raises(openai.BadRequestError) as invalid:
        await sdk.chat.completions.create(model="resolveai", messages=[{"role": "wizard"}])  # type: ignore[list-item]
    assert invalid.value.param == "messages.0.role"
    with pytest.raises(openai.BadRequestError) as malformed:
        await sdk.chat.completions.create(
            model="resolveai", messages=[{"role": "user", "content": "hi"}],
            extra_headers={CHAT_HEADER: "not-an-id"},
        )  # fmt: skip
    assert malformed.value.param == CHAT_HEADER
    with pytest.raises(openai.BadRequestError) as too_long:
        await sdk.chat.completions.create(
            model="resolveai",
            messages=[
                {"role": "system", "content": "x" * 8001},
                {"role": "user", "content": "hi"},
            ],
        )
    assert too_long.value.code == "instructions_too_long" and too_long.value.param == "messages"
    assert model.calls == []  # none of those reached the model

    # The shape itself, and the other errors of /v1 (a wrong method, a body not JSON).
    response = await client.post("/v1/chat/completions", content=b"{nope")
    assert response.status_code == 400
    assert set(response.json()) == {"error"}
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    wrong = await client.get("/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert (await client.get("/v1/embeddings")).json()["error"]["type"] == "invalid_request_error"
    # The rest of the API keeps its own shape.
    elsewhere = await client.get(f"/api/chats/{uuid.uuid4()}/messages")
    assert elsewhere.status_code == 404 and isinstance(elsewhere.json()["error"], str)


async def test_a_reply_the_model_cannot_write_is_a_503(
    sdk: openai.AsyncOpenAI, model: ScriptedProvider
) -> None:
    busy = "The local model is busy with 3 requests already; try again in a minute"
    model.push({"error": busy}, {"error": busy})
    with pytest.raises(openai.InternalServerError) as whole:
        await sdk.chat.completions.create(
            model="resolveai", messages=[{"role": "user", "content": "hi"}]
        )
    assert whole.value.status_code == 503 and busy in whole.value.message
    with pytest.raises(openai.InternalServerError) as streamed:
        await sdk.chat.completions.create(
            model="resolveai", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    assert streamed.value.status_code == 503
    assert streamed.value.response.headers["retry-after"] == "30"

    # Failing once the answer has started: the stream's status was sent, the error comes last.
    model.push({"chunks": ["The first ", "half"], "error": "connection reset"})
    stream = await sdk.chat.completions.create(
        model="resolveai", messages=[{"role": "user", "content": "A story?"}], stream=True
    )
    received = []
    with pytest.raises(openai.APIError) as cut:
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "The first half"
    # The raw reason stays in the log; the client reads the sentence with its ref.
    assert "connection reset" not in cut.value.message
    assert re.search(
        r"The model is unavailable right now\. .*\(ref [0-9a-f]{6}\)", cut.value.message
    )


async def test_password_mode_takes_personal_tokens_and_limits_replies(
    chat_services: Services, model: ScriptedProvider
) -> None:
    pool = chat_services.database.pool
    user = await accounts.add_user(pool, f"sdk-{uuid.uuid4().hex[:8]}", "a long password here")
    user_id = uuid.UUID(str(user["user_id"]))
    token = (await accounts.create_token(pool, user_id, "sdk"))["token"]
    services = password_services(
        chat_services, rate_limit_messages_per_minute=0, rate_limit_concurrent_replies=1
    )
    async with serve(services) as url:
        wrong = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="rai_wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as refused:
            await wrong.models.list()
        assert refused.value.code == "invalid_api_key"
        signed = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0)
        assert [m.id for m in (await signed.models.list()).data] == [
            "resolveai",
            "resolveai-research",
        ]
        model.push({"chunks": ["One", " slow", " reply."], "delay": 0.3})
        stream = await signed.chat.completions.with_raw_response.create(
            model="resolveai", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        chat_id = uuid.UUID(stream.headers[CHAT_HEADER])
        # The chat is the token's user's.
        assert await chat_store.get_chat(pool, chat_id, user_id=user_id) is not None
        assert await chat_store.get_chat(pool, chat_id, user_id=LOCAL_USER_ID) is None
        # One reply at a time for this user: a second while the first is written is a 429.
        with pytest.raises(openai.RateLimitError) as limited:
            await signed.chat.completions.create(
                model="resolveai", messages=[{"role": "user", "content": "again"}]
            )
        assert limited.value.response.headers["retry-after"] == "5"
        text = "".join(
            [c.choices[0].delta.content or "" async for c in stream.parse() if c.choices]
        )
        assert text == "One slow reply."
