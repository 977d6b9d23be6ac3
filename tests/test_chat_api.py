"""The chat flow end to end: real server, database and embedder; the scripted model.

Each test scripts the model's turns, talks to the API over real HTTP, and checks the events, the
prompts the model saw and what the database kept.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from chat import summary
from chat.nodes import MAX_MODEL_CALLS
from chat.runner import MAX_MESSAGE_CHARS, start_turn, stream_turn
from chat.summary import FOLD_AT_UNSUMMARISED, FOLD_MESSAGES, summary_words
from core import chat_store
from core.accounts import LOCAL_USER_ID
from core.llm_router import provider_handler
from core.prompts import WEB_NOTE
from tests.chat_client import messages_of, read_events, send

# `chat_services` (the app's services on the scripted model), `model` (the scripted provider,
# reset) and `client` (HTTP to the real app on them) come from conftest.py.


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


# --- streaming and saving ------------------------------------------------------------------------


async def test_first_message_creates_chat_streams_and_saves(client, model) -> None:
    model.push({"chunks": ["Hello", " there", "!"]})
    events = await send(client, "Hi! Can you help me plan a trip to Lisbon next spring?")
    assert types(events)[0] == "chat"
    chat = events[0]
    assert chat["title"] == "Hi! Can you help me plan a trip to Lisbon next spring?"
    tokens = [e["text"] for e in events if e["type"] == "token"]
    assert (
        tokens[0] == "Hello" and "".join(tokens) == "Hello there!"
    )  # (batched: test_token_batcher)
    assert types(events)[-1] == "done"
    assert "step" in types(events)

    saved = await messages_of(client, chat["chat_id"])
    assert [(m["role"], m["content"], m["status"]) for m in saved] == [
        ("user", "Hi! Can you help me plan a trip to Lisbon next spring?", "complete"),
        ("assistant", "Hello there!", "complete"),
    ]
    assert saved[1]["message_id"] == events[-1]["message_id"]
    assert saved[1]["steps"][0]["text"] == "Thinking"
    listed = (await client.get("/api/chats")).json()
    assert listed[0]["chat_id"] == chat["chat_id"]


async def test_long_first_message_gets_a_short_title(client, model) -> None:
    model.push({"text": "ok"})
    events = await send(client, "word " * 50)
    assert len(events[0]["title"]) <= 61 and events[0]["title"].endswith("…")


async def test_prompt_order_and_every_unsummarised_message(client, model, chat_services) -> None:
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "long chat")
    for i in range(8):
        await chat_store.add_message(pool, chat["chat_id"], "user", f"question {i}")
        await chat_store.add_message(pool, chat["chat_id"], "assistant", f"answer {i}")
    second = (await chat_store.list_messages(pool, chat["chat_id"]))[3]
    assert await chat_store.set_summary(
        pool, chat["chat_id"], "They talked about i.", second["message_id"]
    )
    model.push({"text": "fine"})

    await send(client, "and now?", chat["chat_id"])
    await summary.settled()
    seen = model.calls[0]["messages"]
    assert seen[0]["role"] == "system"
    system = seen[0]["content"]
    assert system.index("<instructions>") < system.index("<conversation_summary>")
    assert "They talked about i." in system and "Current date and time:" in system
    # All 12 messages after the summary's last one, not a window of the latest few.
    assert [m["content"] for m in seen[1:-1]] == [
        text for i in range(2, 8) for text in (f"question {i}", f"answer {i}")
    ]
    assert seen[-1] == {"role": "user", "content": "and now?"}
    assert len(model.calls) == 1  # 18 messages, 14 of them unsummarised: no fold yet


async def test_web_note_reaches_the_model_not_the_database(model, chat_services) -> None:
    model.push({"text": "Searching is not possible here."})
    turn = await start_turn(
        chat_services, None, "Who won the 2026 World Cup?", use_web=True, user_id=LOCAL_USER_ID
    )
    events = [event async for event in stream_turn(turn)]
    assert types(events)[-1] == "done"
    assert model.calls[0]["messages"][-1]["content"].endswith(f"<note>{WEB_NOTE}</note>")
    saved = await chat_store.list_messages(chat_services.database.pool, turn.context.chat_id)
    assert saved[0]["content"] == "Who won the 2026 World Cup?"


# --- tools ---------------------------------------------------------------------------------------


async def test_memory_saved_in_one_chat_is_recalled_in_another(client, model) -> None:
    name = f"Miso-{uuid.uuid4().hex[:6]}"
    fact = f"The user's cat is called {name}"
    said = f"My cat is called {name}"
    model.push(tool_call("save_memory", content=fact, quote=said), {"text": "Noted, lovely name."})
    events = await send(client, f"Please remember: {said.lower()}.")
    assert "tool_start" in types(events) and "tool_end" in types(events)
    first_chat = events[0]["chat_id"]

    model.push(tool_call("retrieve_memory", query="name of the user's cat"), {"text": "Miso!"})
    events = await send(client, "Do you remember my cat's name?")
    assert events[0]["chat_id"] != first_chat
    tool_result = model.calls[3]["messages"][-1]
    assert tool_result["role"] == "tool" and fact in tool_result["content"]
    saved = await messages_of(client, events[0]["chat_id"])
    assert saved[1]["tool_calls"][0]["name"] == "retrieve_memory"
    assert saved[1]["content"] == "Miso!"
    # The reply records the memory it used; the quote kept is the user's own casing.
    assert [m["content"] for m in saved[1]["memories"]] == [fact]
    listed = (await client.get("/api/memories", params={"q": name})).json()["memories"]
    assert [m["quote"] for m in listed] == [said.lower()]
    steps = [s["text"] for s in saved[1]["steps"]]
    assert "Looking up what I know about you" in steps


async def test_failing_tool_gives_the_model_an_error_and_the_turn_goes_on(client, model) -> None:
    model.push(
        tool_call("save_memory", content="x" * 600, quote="this very long thing"),
        tool_call("no_such_tool"),
        {"text": "Sorry."},
    )
    events = await send(client, "Remember this very long thing")
    ends = [e for e in events if e["type"] == "tool_end"]
    assert [e["ok"] for e in ends] == [False, False]
    first_error = json.loads(model.calls[1]["messages"][-1]["content"])["error"]
    assert "save_memory" in first_error and "500" in first_error
    assert "no_such_tool" in json.loads(model.calls[2]["messages"][-1]["content"])["error"]
    assert types(events)[-1] == "done"


async def test_tool_loop_is_capped_and_the_last_call_has_no_tools(client, model) -> None:
    model.push(
        *[tool_call("retrieve_memory", query=f"anything {i}") for i in range(MAX_MODEL_CALLS - 1)]
    )
    model.push({"text": "Here is my answer anyway."})
    events = await send(client, "Loop forever please")
    assert len(model.calls) == MAX_MODEL_CALLS
    assert all(call["tools"] for call in model.calls[:-1])
    assert model.calls[-1]["tools"] is None
    assert types(events)[-1] == "done"
    saved = await messages_of(client, events[0]["chat_id"])
    assert saved[1]["content"] == "Here is my answer anyway."
    assert len(saved[1]["tool_calls"]) == MAX_MODEL_CALLS - 1


async def test_a_repeated_tool_call_gets_an_answer_instead(client, model) -> None:
    repeat = tool_call("retrieve_memory", query="favourite colour")
    model.push(repeat, repeat, {"text": "I don't know your favourite colour yet."})
    events = await send(client, "What's my favourite colour?")
    assert [bool(call["tools"]) for call in model.calls] == [True, True, False]
    assert [e["name"] for e in events if e["type"] == "tool_start"] == ["retrieve_memory"]
    saved = await messages_of(client, events[0]["chat_id"])
    assert saved[1]["content"] == "I don't know your favourite colour yet."


# --- failures ------------------------------------------------------------------------------------


async def test_provider_failure_is_reported_and_the_message_kept(client, model) -> None:
    model.push({"error": "service unavailable"})
    events = await send(client, "Are you there?")
    assert types(events)[-1] == "error"
    # In words a user can act on, with a ref to the log line (test_reply_transparency.py).
    assert "unavailable" in events[-1]["message"] and "(ref " in events[-1]["message"]
    assert "done" not in types(events)
    saved = await messages_of(client, events[0]["chat_id"])
    assert [(m["role"], m["content"], m["status"]) for m in saved] == [
        ("user", "Are you there?", "complete"),
        ("assistant", "", "error"),
    ]
    assert saved[1]["error"] == events[-1]["message"]


async def test_reply_cut_short_by_a_failure_keeps_its_text(client, model) -> None:
    model.push({"chunks": ["The first ", "half"], "error": "connection reset"})
    events = await send(client, "Tell me a story")
    assert types(events)[-1] == "error"
    saved = await messages_of(client, events[0]["chat_id"])
    assert (saved[1]["content"], saved[1]["status"]) == ("The first half", "error")
    model.push({"text": "Here it is again."})  # the chat is free for the next message
    again = await send(client, "Try again", events[0]["chat_id"])
    assert types(again)[-1] == "done"


async def test_failing_chat_provider_falls_back(chat_services, model, settings, tmp_path) -> None:
    import dataclasses

    from core.llm_router import build_router

    config = tmp_path / "models.yaml"
    config.write_text(
        "model_list:\n"
        "  - {model_name: chat, litellm_params: {model: scripted/down}}\n"
        "  - {model_name: backup, litellm_params: {model: scripted/backup}}\n"
        "  - {model_name: utility, litellm_params: {model: scripted/utility}}\n"
        "router_settings:\n  num_retries: 0\n  fallbacks: [{chat: [backup]}]\n"
    )
    router = build_router(settings.model_copy(update={"models_config": config}))
    backup = provider_handler("scripted")
    backup.push({"text": "answer from the backup"})
    services = dataclasses.replace(chat_services, router=router)
    turn = await start_turn(services, None, "hello?", use_web=False, user_id=LOCAL_USER_ID)
    events = [event async for event in stream_turn(turn)]
    assert types(events)[-1] == "done"
    assert [c["model"] for c in backup.calls] == ["down", "backup"]
    saved = await chat_store.list_messages(services.database.pool, turn.context.chat_id)
    assert saved[-1]["content"] == "answer from the backup"


async def test_a_hosted_chat_model_that_hangs_falls_back_after_its_stream_timeout(
    chat_services, model, settings, tmp_path
) -> None:
    """An OpenAI-compatible server that takes the request and never answers: `stream_timeout`
    (as core/models.yaml sets for hosted chat models) hands the turn to the fallback in seconds,
    not after the overall timeout."""
    import dataclasses

    from core.llm_router import build_router

    accepted: list[asyncio.StreamWriter] = []

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # read nothing, answer nothing

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = tmp_path / "models.yaml"
    config.write_text(
        "model_list:\n"
        "  - {model_name: chat, litellm_params: {model: openai/hangs, api_key: x,"
        f" api_base: 'http://127.0.0.1:{port}/v1', stream_timeout: 1}}}}\n"
        "  - {model_name: backup, litellm_params: {model: scripted/backup}}\n"
        "  - {model_name: utility, litellm_params: {model: scripted/utility}}\n"
        "router_settings:\n  num_retries: 0\n  timeout: 120\n  fallbacks: [{chat: [backup]}]\n"
    )
    router = build_router(settings.model_copy(update={"models_config": config}))
    model.push({"text": "answer from the backup"})
    services = dataclasses.replace(chat_services, router=router)
    started = time.monotonic()
    try:
        turn = await start_turn(services, None, "hello?", use_web=False, user_id=LOCAL_USER_ID)
        events = [event async for event in stream_turn(turn)]
    finally:
        server.close()
        for writer in accepted:
            writer.close()
    assert accepted, "the hosted model was never asked"
    assert types(events)[-1] == "done"
    assert time.monotonic() - started < 15  # not the 120 s overall timeout
    saved = await chat_store.list_messages(services.database.pool, turn.context.chat_id)
    assert saved[-1]["content"] == "answer from the backup"


async def test_second_message_while_streaming_is_refused(client, model) -> None:
    model.push({"text": "slow " * 30, "delay": 0.05}, {"text": "done now"})
    async with client.stream("POST", "/api/messages", json={"content": "First"}) as r:
        events = read_events(r)
        chat_id = (await anext(events))["chat_id"]
        busy = await client.post(f"/api/chats/{chat_id}/messages", json={"content": "Second"})
        assert busy.status_code == 409
        assert "still being written" in busy.json()["error"]
        remaining = [e async for e in events]
        assert remaining[-1]["type"] == "done"
    assert types(await send(client, "Now it works", chat_id))[-1] == "done"
    texts = [m["content"] for m in await messages_of(client, chat_id)]
    assert "Second" not in texts


@pytest.mark.parametrize(
    ("method", "url", "body", "status", "error"),
    [
        ("POST", "/api/messages", {"content": ""}, 422, "content: the message is empty"),
        ("POST", "/api/messages", {"content": " \n\t "}, 422, "content: the message is empty"),
        ("POST", "/api/messages", {"content": "x" * (MAX_MESSAGE_CHARS + 1)}, 422, "content:"),
        ("POST", "/api/messages", {}, 422, "content: Field required"),
        ("POST", f"/api/chats/{uuid.UUID(int=1)}/messages", {"content": "hi"}, 404, "No chat"),
        (
            "POST",
            "/api/chats/not-an-id/messages",
            {"content": "hi"},
            422,
            "chat_id: not a valid id",
        ),
        ("POST", "/api/messages", {"content": "hi", "use_web": True}, 400, "Web search"),
        ("GET", "/api/chats/not-an-id/messages", None, 422, "chat_id: not a valid id"),
        ("GET", f"/api/chats/{uuid.UUID(int=1)}/messages", None, 404, "No chat"),
        ("GET", f"/api/chats/{uuid.UUID(int=1)}/summary", None, 404, "No chat"),
        ("PATCH", f"/api/chats/{uuid.UUID(int=1)}", {"title": "x"}, 404, "No chat"),
        ("DELETE", f"/api/chats/{uuid.UUID(int=1)}", None, 404, "No chat"),
    ],
)
async def test_bad_input_gets_a_clear_4xx(client, model, method, url, body, status, error) -> None:
    response = await client.request(method, url, json=body)
    assert response.status_code == status
    assert error in response.json()["error"]
    assert model.calls == []


async def test_rename_delete_and_filter_chats(client, model) -> None:
    model.push({"text": "a"}, {"text": "b"})
    first = (await send(client, "Planning a garden"))[0]["chat_id"]
    second = (await send(client, "Fixing my bicycle"))[0]["chat_id"]
    renamed = await client.patch(f"/api/chats/{first}", json={"title": "  Vegetable garden  "})
    assert renamed.json()["title"] == "Vegetable garden"
    assert (await client.patch(f"/api/chats/{first}", json={"title": "   "})).status_code == 422
    found = (await client.get("/api/chats", params={"q": "GARDEN"})).json()
    assert [c["chat_id"] for c in found] == [first]
    listed = [c["chat_id"] for c in (await client.get("/api/chats")).json()]
    assert listed.index(second) < listed.index(first)  # newest activity first
    assert (await client.delete(f"/api/chats/{first}")).status_code == 204
    assert (await client.get(f"/api/chats/{first}/messages")).status_code == 404


# --- rolling summary -----------------------------------------------------------------------------


async def _chat_with_messages(pool: Any, count: int, temporary: bool = False) -> uuid.UUID:
    chat = await chat_store.create_chat(pool, "summary test", temporary=temporary)
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        await chat_store.add_message(pool, chat["chat_id"], role, f"{role} message {i}")
    return chat["chat_id"]


def utility_calls(model: Any) -> list[dict[str, Any]]:
    return [call for call in model.calls if call["model"] == "utility"]


async def test_summary_folds_the_oldest_batch_after_the_turn(client, model, chat_services) -> None:
    pool = chat_services.database.pool
    chat_id = await _chat_with_messages(pool, FOLD_AT_UNSUMMARISED - 4)
    model.push({"text": "reply"})
    await send(client, "message 16", chat_id)  # 18 unsummarised: no fold yet
    await summary.settled()
    assert utility_calls(model) == []

    model.push({"text": "reply"}, {"text": "The user sent messages 0 to 9."})
    events = await send(client, "message 18", chat_id)  # 20 unsummarised: fold the oldest 10
    # The fold runs after the stream ended: nothing about it is on the turn's stream.
    assert types(events)[-1] == "done" and "summary" not in types(events)
    await summary.settled()
    [request] = utility_calls(model)
    assert f"at most {summary_words(FOLD_MESSAGES)} words" in request["messages"][0]["content"]
    folded = request["messages"][1]["content"]
    assert "user message 0" in folded and "assistant message 9" in folded
    assert "user message 10" not in folded
    messages = await chat_store.list_messages(pool, chat_id)
    chat = await chat_store.get_chat(pool, chat_id, user_id=None)
    assert chat["summary"] == "The user sent messages 0 to 9."
    assert chat["summary_upto_message_id"] == messages[FOLD_MESSAGES - 1]["message_id"]
    stored = (await client.get(f"/api/chats/{chat_id}/summary")).json()
    assert stored["summary"] == "The user sent messages 0 to 9."

    # The next prompt: the summary, then every one of the 10 messages after it, then the new one.
    model.push({"text": "reply"})
    await send(client, "message 20", chat_id)
    await summary.settled()
    prompt = model.calls[-1]["messages"]
    assert "The user sent messages 0 to 9." in prompt[0]["content"]
    assert [m["content"] for m in prompt[1:-1]] == [m["content"] for m in messages[10:]]
    assert len(utility_calls(model)) == 1  # 12 unsummarised now: no second fold


async def test_a_summary_cut_by_the_length_limit_keeps_its_whole_sentences(
    client, model, chat_services
) -> None:
    """The local model's first fold of a chat once stopped at its token limit after "4.", a
    list item's number; the prompt then carried that torn text for good."""
    pool = chat_services.database.pool
    chat_id = await _chat_with_messages(pool, FOLD_AT_UNSUMMARISED - 2)
    whole = "The user plans a trip. The assistant gave tips:\n\n1. Research first."
    model.push({"text": "reply"}, {"text": whole + "\n\n2. Book a", "finish_reason": "length"})
    await send(client, "message 18", chat_id)
    await summary.settled()
    chat = await chat_store.get_chat(pool, chat_id, user_id=None)
    assert chat["summary"] == whole


class _FrozenClock(datetime):
    """`datetime.now` stuck at one moment: the instructions name the hour, and a test that ran
    across an hour's end would see the prefix change for that reason."""

    @classmethod
    def now(cls, tz: Any = None) -> _FrozenClock:
        return cls(2026, 3, 2, 9, 30, tzinfo=UTC)


async def test_twenty_turns_fold_rarely_and_keep_the_prompt_prefix(
    client, model, chat_services, monkeypatch
) -> None:
    turns = 20
    monkeypatch.setattr("chat.nodes.datetime", _FrozenClock)
    folds = iter(range(1, 100))
    monkeypatch.setattr(
        model,
        "responder",
        lambda name, messages: (
            {"text": f"Summary number {next(folds)}."}
            if name == "utility"
            else {"text": f"Reply to: {messages[-1]['content']}"}
        ),
    )
    pool = chat_services.database.pool
    # Temporary: no memories recalled into the new message, which would make it differ from the
    # same message in the next prompt's history.
    async with client.stream(
        "POST", "/api/messages", json={"content": "turn 0", "temporary": True}
    ) as response:
        assert response.status_code == 200
        events = [e async for e in read_events(response)]
    chat_id = uuid.UUID(events[0]["chat_id"])
    pointers = [None]  # the summary's last message when each turn's prompt was built
    for n in range(turns):
        if n:
            pointers.append(
                (await chat_store.get_chat(pool, chat_id, user_id=None))["summary_upto_message_id"]
            )
            events = await send(client, f"turn {n}", chat_id)
        assert types(events)[-1] == "done" and "summary" not in types(events)
        await summary.settled()

    prompts = [call["messages"] for call in model.calls if call["model"] == "chat"]
    assert len(prompts) == turns
    # 40 messages: folded after turns 10, 15 and 20, never more often than once per 5 turns.
    assert len(utility_calls(model)) <= turns // 5
    assert len(utility_calls(model)) == 3
    stable = 0
    for n in range(1, turns):
        previous, prompt = prompts[n - 1], prompts[n]
        if pointers[n] == pointers[n - 1]:
            # No fold in between: the whole previous prompt is this one's start, unchanged.
            assert prompt[: len(previous)] == previous, f"prompt {n} changed its prefix"
            assert len(prompt) == len(previous) + 2  # + the reply, + the new message
            stable += 1
        else:
            assert prompt[0] != previous[0]  # the new summary
            assert len(prompt) == len(previous) + 2 - FOLD_MESSAGES
    assert stable == turns - 1 - 2
    assert max(len(p) for p in prompts) - 2 < FOLD_AT_UNSUMMARISED  # history, never the cap


async def test_failed_fold_leaves_the_reply_alone_and_is_retried(
    client, model, chat_services
) -> None:
    pool = chat_services.database.pool
    chat_id = await _chat_with_messages(pool, FOLD_AT_UNSUMMARISED - 2)
    # utility fails, and so does its fallback (chat): the summary is skipped, not the reply.
    model.push({"text": "reply"}, {"error": "utility down"}, {"error": "chat down too"})
    events = await send(client, "message 18", chat_id)
    assert types(events)[-1] == "done" and "error" not in types(events)
    await summary.settled()
    assert model.remaining == 0  # the fold did try
    saved = await messages_of(client, str(chat_id))
    assert (saved[-1]["content"], saved[-1]["status"]) == ("reply", "complete")
    chat = await chat_store.get_chat(pool, chat_id, user_id=None)
    assert chat["summary"] is None and chat["summary_upto_message_id"] is None

    model.push({"text": "reply"}, {"text": "Folded at last."})
    events = await send(client, "message 20", chat_id)
    assert types(events)[-1] == "done"
    await summary.settled()
    chat = await chat_store.get_chat(pool, chat_id, user_id=None)
    messages = await chat_store.list_messages(pool, chat_id)
    assert chat["summary"] == "Folded at last."
    assert chat["summary_upto_message_id"] == messages[FOLD_MESSAGES - 1]["message_id"]


async def test_next_message_does_not_wait_for_a_running_fold(
    client, model, chat_services, monkeypatch
) -> None:
    pool = chat_services.database.pool
    chat_id = await _chat_with_messages(pool, FOLD_AT_UNSUMMARISED - 2)
    # The fold is held just before it stores its summary, after its model call.
    reached, release = asyncio.Event(), asyncio.Event()
    store = chat_store.set_summary

    async def held_store(*args: Any, **kwargs: Any) -> bool:
        reached.set()
        await release.wait()
        return await store(*args, **kwargs)

    monkeypatch.setattr(chat_store, "set_summary", held_store)
    model.push({"text": "first reply"}, {"text": "A summary of messages 0 to 9."})
    try:
        await send(client, "message 18", chat_id)
        await asyncio.wait_for(reached.wait(), 30)
        model.push({"text": "second reply"})
        events = await send(client, "message 20", chat_id)  # not 409, not held up
        assert types(events)[-1] == "done"
        saved = await messages_of(client, str(chat_id))
        assert saved[-1]["content"] == "second reply"
        assert (await chat_store.get_chat(pool, chat_id, user_id=None))[
            "summary"
        ] is None  # still folding
    finally:
        release.set()
    await summary.settled()
    chat = await chat_store.get_chat(pool, chat_id, user_id=None)
    assert chat["summary"] == "A summary of messages 0 to 9."
    assert len(utility_calls(model)) == 1  # the second turn's fold was left to the running one


async def test_fold_goes_on_when_the_client_leaves_after_done(model, chat_services) -> None:
    pool = chat_services.database.pool
    chat_id = await _chat_with_messages(pool, FOLD_AT_UNSUMMARISED - 2)
    model.push({"text": "reply"}, {"text": "Folded without its client."})
    turn = await start_turn(
        chat_services, chat_id, "message 18", use_web=False, user_id=LOCAL_USER_ID
    )
    stream = stream_turn(turn)
    async for event in stream:
        if event["type"] == "done":
            break
    await stream.aclose()  # the client is gone
    await summary.settled()
    chat = await chat_store.get_chat(pool, chat_id, user_id=None)
    assert chat["summary"] == "Folded without its client."
    assert await chat_store.claim_chat_run(
        pool, chat_id, uuid.uuid4(), 1, user_id=None
    )  # released, too


def test_summary_word_target() -> None:
    assert summary_words(2) == 68
    assert summary_words(100) == 460
    assert summary_words(1000) == 500
