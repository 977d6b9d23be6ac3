"""Versions of a message (core/chat_store.py's message tree, chat/routes.py's endpoints).

Through the real server (real Postgres, scripted model): regenerating a reply adds a version and
keeps the others; editing a question starts a branch of its own and keeps the old one; picking a
version shows its branch, and the next prompt reads that branch only, without the summary of
another branch.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from core import chat_store
from core.services import Services
from tests.chat_client import messages_of, read_events, send


async def stream(client: httpx.AsyncClient, method: str, path: str, **body: Any) -> list[dict]:
    async with client.stream(method, path, json=body) as response:
        assert response.status_code == 200, await response.aread()
        events = [e async for e in read_events(response) if e["type"] != "heartbeat"]
    assert events[-1]["type"] == "done", events
    return events


def chat_prompts(model: Any) -> list[list[dict[str, Any]]]:
    return [call["messages"] for call in model.calls if call["model"] == "chat"]


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages]


async def test_regenerate_keeps_every_version_and_the_prompt_reads_the_one_shown(
    client, model
) -> None:
    model.push({"text": "First answer."})
    chat_id = (await send(client, "Name a colour."))[0]["chat_id"]
    first = (await messages_of(client, chat_id))[1]

    model.push({"text": "Second answer."})
    events = await stream(
        client, "POST", f"/api/chats/{chat_id}/messages/{first['message_id']}/regenerate"
    )
    assert "chat" not in [e["type"] for e in events]  # the same chat, the same question
    shown = await messages_of(client, chat_id)
    assert contents(shown) == ["Name a colour.", "Second answer."]
    assert shown[1]["versions"] == [first["message_id"], shown[1]["message_id"]]
    assert shown[0]["versions"] == [shown[0]["message_id"]]  # asked once
    # The regenerate's prompt: the question once, no earlier answer.
    assert contents(chat_prompts(model)[-1][1:]) == ["Name a colour."]

    # Back to the first version: its branch is shown, and it is what the next reply reads.
    response = await client.post(f"/api/chats/{chat_id}/messages/{first['message_id']}/show")
    assert response.status_code == 200
    assert contents(response.json()) == ["Name a colour.", "First answer."]
    model.push({"text": "Another one."})
    await send(client, "And another?", chat_id)
    assert contents(chat_prompts(model)[-1][1:]) == [
        "Name a colour.", "First answer.", "And another?",
    ]  # fmt: skip
    assert contents(await messages_of(client, chat_id)) == [
        "Name a colour.", "First answer.", "And another?", "Another one.",
    ]  # fmt: skip

    # The second version's branch ends at it; the first one's keeps its later messages.
    response = await client.post(f"/api/chats/{chat_id}/messages/{shown[1]['message_id']}/show")
    assert contents(response.json()) == ["Name a colour.", "Second answer."]
    response = await client.post(f"/api/chats/{chat_id}/messages/{first['message_id']}/show")
    assert contents(response.json())[-1] == "Another one."


async def test_editing_a_question_answers_it_on_a_branch_of_its_own(client, model) -> None:
    model.push({"text": "Paris."}, {"text": "About 2 million."})
    chat_id = (await send(client, "Capital of France?"))[0]["chat_id"]
    await send(client, "Its population?", chat_id)
    before = await messages_of(client, chat_id)

    model.push({"text": "Rome."})
    question = before[0]["message_id"]
    await stream(
        client, "PATCH", f"/api/chats/{chat_id}/messages/{question}", content="Capital of Italy?"
    )
    shown = await messages_of(client, chat_id)
    assert contents(shown) == ["Capital of Italy?", "Rome."]
    assert shown[0]["versions"] == [question, shown[0]["message_id"]]
    # Nothing of the old branch reached the model.
    assert contents(chat_prompts(model)[-1][1:]) == ["Capital of Italy?"]

    # The old branch is one version away, whole.
    response = await client.post(f"/api/chats/{chat_id}/messages/{question}/show")
    assert contents(response.json()) == contents(before)

    # Only your own messages can be edited, in their own chat, with a real message.
    reply = before[1]["message_id"]
    for path, body, status in (
        (f"/api/chats/{chat_id}/messages/{reply}", {"content": "x"}, 404),
        (f"/api/chats/{chat_id}/messages/{uuid.uuid4()}", {"content": "x"}, 404),
        (f"/api/chats/{uuid.uuid4()}/messages/{question}", {"content": "x"}, 404),
        (f"/api/chats/{chat_id}/messages/{question}", {"content": "  "}, 422),
    ):
        response = await client.patch(path, json=body)
        assert response.status_code == status and "error" in response.json(), response.text
    assert contents(await messages_of(client, chat_id)) == contents(before)


async def test_a_summary_of_another_branch_stays_out_of_the_prompt(
    client, model, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    # Temporary: no memory is recalled into the prompts compared below (memories are the whole
    # session's, and which ones a search admits depends on what other tests left).
    chat = await chat_store.create_chat(pool, "summarised", temporary=True)
    ids = []
    for i in range(3):
        for role in ("user", "assistant"):
            ids.append(
                (await chat_store.add_message(pool, chat["chat_id"], role, f"{role} {i}"))[
                    "message_id"
                ]
            )
    assert await chat_store.set_summary(pool, chat["chat_id"], "They counted to one.", ids[3])

    # Editing the second question forks the chat before the summary's last message.
    model.push({"text": "edited answer"})
    path = f"/api/chats/{chat['chat_id']}/messages/{ids[2]}"
    await stream(client, "PATCH", path, content="user 1, edited")
    prompt = chat_prompts(model)[-1]
    assert "They counted to one." not in prompt[0]["content"]
    assert contents(prompt[1:]) == ["user 0", "assistant 0", "user 1, edited"]

    # Back on the summarised branch, the summary is read again, and the messages after it.
    await client.post(f"/api/chats/{chat['chat_id']}/messages/{ids[2]}/show")
    model.push({"text": "fine"})
    await send(client, "next", chat["chat_id"])
    prompt = chat_prompts(model)[-1]
    assert "They counted to one." in prompt[0]["content"]
    assert contents(prompt[1:]) == ["user 2", "assistant 2", "next"]


async def test_picking_a_version_needs_a_message_of_the_chat_and_no_reply_being_written(
    client, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "versions")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "Hi")
    other = await chat_store.create_chat(pool, "another")
    path = f"/api/chats/{other['chat_id']}/messages/{question['message_id']}/show"
    response = await client.post(path)
    assert response.status_code == 404 and "No message" in response.json()["error"]
    assert (
        await client.post(f"/api/chats/{uuid.uuid4()}/messages/{uuid.uuid4()}/show")
    ).status_code == 404

    assert await chat_store.claim_chat_run(pool, chat["chat_id"], uuid.uuid4(), 60, user_id=None)
    response = await client.post(
        f"/api/chats/{chat['chat_id']}/messages/{question['message_id']}/show"
    )
    assert response.status_code == 409 and "being written" in response.json()["error"]


async def test_continue_goes_on_from_where_a_stopped_reply_ended(
    client, model, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "continued")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "Count to four.")
    sources = [{"n": 1, "title": "Numbers", "url": "https://example.org/n"}]
    stopped = await chat_store.add_message(
        pool, chat["chat_id"], "assistant", "One, two", status="interrupted", sources=sources,
        reply_to=question["message_id"], run_id=uuid.uuid4(),
    )  # fmt: skip
    path = f"/api/chats/{chat['chat_id']}/messages/{stopped['message_id']}/continue"
    model.push({"text": ", three, four."})
    events = await stream(client, "POST", path)
    # What streams is the whole reply: its text so far first, then the rest.
    tokens = [e["text"] for e in events if e["type"] == "token"]
    assert tokens[0] == "One, two" and "".join(tokens) == "One, two, three, four."
    assert next(e for e in events if e["type"] == "sources")["sources"] == sources
    assert events[-1]["message_id"] == str(stopped["message_id"])  # saved in its place
    saved = await messages_of(client, chat["chat_id"])
    assert [(m["content"], m["status"]) for m in saved] == [
        ("Count to four.", "complete"), ("One, two, three, four.", "complete"),
    ]  # fmt: skip
    assert saved[1]["sources"] == sources and len(saved[1]["versions"]) == 1
    prompt = chat_prompts(model)[-1]
    assert contents(prompt[-3:-1]) == ["Count to four.", "One, two"]
    assert prompt[-1]["role"] == "user" and "Continue" in prompt[-1]["content"]

    # A complete reply, or one with messages after it, is not continued.
    response = await client.post(path)
    assert response.status_code == 404 and "can be continued" in response.json()["error"]
    assert (
        await client.post(path.replace(str(chat["chat_id"]), str(uuid.uuid4())))
    ).status_code == 404


async def test_a_continued_reply_whose_server_died_keeps_its_first_part(
    chat_services: Services,
) -> None:
    from chat.turn_recovery import recover_turn
    from core import turn_store

    pool = chat_services.database.pool
    chat = await chat_store.create_chat(pool, "continued, then crashed")
    question = await chat_store.add_message(pool, chat["chat_id"], "user", "Count.")
    stopped = await chat_store.add_message(
        pool, chat["chat_id"], "assistant", "One", status="interrupted",
        reply_to=question["message_id"], run_id=uuid.uuid4(),
    )  # fmt: skip
    run_id = uuid.uuid4()
    assert await chat_store.claim_chat_run(
        pool, chat["chat_id"], run_id, -1, user_id=None
    )  # expired at once
    assert await chat_store.resume_reply(pool, chat["chat_id"], stopped["message_id"], run_id)
    await turn_store.create_turn(pool, run_id, chat["chat_id"], question["message_id"])
    tokens = [
        (run_id, 1, {"type": "token", "text": "One"}),
        (run_id, 2, {"type": "token", "text": ", two"}),
    ]
    await turn_store.append_events(pool, tokens)
    assert await recover_turn(chat_services, run_id)
    saved = await chat_store.list_messages(pool, chat["chat_id"])
    assert [(m["content"], m["status"]) for m in saved[1:]] == [("One, two", "interrupted")]
