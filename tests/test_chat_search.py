"""Search across chats (`GET /api/search`, core/chat_search.py) and pinned chats (`PATCH
/api/chats/{id}` with `pinned`): real server, database and Postgres full-text search; the scripted
model writes the replies.

Every test makes up words of its own (`word()`): the chats of other tests share the database.
"""

from __future__ import annotations

import random
import string
import uuid

from core import chat_store
from core.chat_search import START, STOP, parts, search_chats
from core.statements import fetch_one
from tests.chat_client import messages_of, send


def word() -> str:
    """A made-up word no other chat holds (letters only: one token to the parser)."""
    return "".join(random.choices(string.ascii_lowercase, k=12))


def text_of(snippet: list[dict]) -> str:
    return "".join(part["text"] for part in snippet)


def matches(snippet: list[dict]) -> list[str]:
    return [part["text"] for part in snippet if part["match"]]


async def search(client, q: str, **params) -> list[dict]:
    response = await client.get("/api/search", params={"q": q, **params})
    assert response.status_code == 200, response.text
    return response.json()


# --- search --------------------------------------------------------------------------------------


async def test_finds_a_word_only_the_reply_has(client, model) -> None:
    secret = word()
    model.push({"text": f"The answer is {secret}, said the oracle at length."})
    events = await send(client, "What is the answer?")
    chat_id, reply_id = events[0]["chat_id"], events[-1]["message_id"]

    found = await search(client, secret)
    assert [hit["chat_id"] for hit in found] == [chat_id]
    hit = found[0]
    assert hit["message_id"] == reply_id and hit["role"] == "assistant" and hit["on_branch"]
    assert hit["title"] == "What is the answer?"
    assert matches(hit["snippet"]) == [secret]
    assert "The answer is" in text_of(hit["snippet"])
    # An uppercase query finds it too, and a word nobody wrote finds nothing.
    assert [h["chat_id"] for h in await search(client, secret.upper())] == [chat_id]
    assert await search(client, word()) == []


async def test_title_matches_rank_first_and_mark_the_title(client, model) -> None:
    topic = word()
    model.push({"text": f"Something about {topic}."}, {"text": "Nothing much."})
    in_reply = (await send(client, "Tell me something"))[0]["chat_id"]
    in_title = (await send(client, "Some questions"))[0]["chat_id"]
    response = await client.patch(f"/api/chats/{in_title}", json={"title": f"{topic} questions"})
    assert response.status_code == 200

    found = await search(client, topic)
    assert [hit["chat_id"] for hit in found] == [in_title, in_reply]
    assert matches(found[0]["title_parts"]) == [topic]
    assert text_of(found[0]["title_parts"]) == f"{topic} questions"
    # The title matched and its messages did not: no message, no snippet.
    assert found[0]["message_id"] is None and found[0]["snippet"] is None


async def test_english_stems_and_simple_keeps_every_word(client, model) -> None:
    tag = word()
    model.push({"text": f"{tag}: she was gardening all day."}, {"text": f"{tag}: no me gusta."})
    english = (await send(client, "Hi"))[0]["chat_id"]
    spanish = (await send(client, "Hola"))[0]["chat_id"]

    # "gardens" and "gardening" share the English stem "garden".
    found = await search(client, f"{tag} gardens")
    assert [hit["chat_id"] for hit in found] == [english]
    assert matches(found[0]["snippet"]) == [tag, "gardening"]
    # "no" and "me" are English stop words: only the `simple` half of the vector keeps them.
    found = {hit["chat_id"]: hit for hit in await search(client, '"no me"', limit=50)}
    assert spanish in found and english not in found
    assert matches(found[spanish]["snippet"]) == ["no", "me"]
    assert [hit["chat_id"] for hit in await search(client, f"{tag} -gusta")] == [english]


async def test_snippets_are_plain_text_and_markers_cannot_be_forged(client, model) -> None:
    secret = word()
    model.push({"text": f"<img src=x onerror=alert(1)> {START}fake{STOP} and {secret} here"})
    chat_id = (await send(client, "Show me"))[0]["chat_id"]

    [hit] = await search(client, secret)
    assert hit["chat_id"] == chat_id
    assert matches(hit["snippet"]) == [secret]  # the private-use markers in the text are dropped
    assert START not in text_of(hit["snippet"]) and STOP not in text_of(hit["snippet"])
    assert "fake" in text_of(hit["snippet"])
    assert all(set(part) == {"text", "match"} for part in hit["snippet"])


def test_parts_split_a_headline() -> None:
    assert parts(f"a {START}b{STOP} c {START}d{STOP}") == [
        {"text": "a ", "match": False},
        {"text": "b", "match": True},
        {"text": " c ", "match": False},
        {"text": "d", "match": True},
    ]
    assert parts("") == [] and parts("plain") == [{"text": "plain", "match": False}]


async def test_temporary_chats_are_not_searched(client, model) -> None:
    secret = word()
    model.push({"text": f"Temporary {secret}."})
    body = {"content": f"Remember {secret}", "temporary": True}
    async with client.stream("POST", "/api/messages", json=body) as response:
        assert response.status_code == 200
        await response.aread()
    assert await search(client, secret) == []


async def test_only_the_users_own_chats_are_searched(pool, client, model) -> None:
    secret = word()
    other = await fetch_one(
        pool, "INSERT INTO users (username) VALUES (%s) RETURNING user_id", (f"u{word()}",)
    )
    theirs = await chat_store.create_chat(pool, "Theirs", user_id=other["user_id"])
    await chat_store.add_message(pool, theirs["chat_id"], "user", f"my {secret}")

    assert await search(client, secret) == []  # the local user's search
    found = await search_chats(pool, other["user_id"], secret)
    assert [hit["chat_id"] for hit in found] == [theirs["chat_id"]]


async def test_versions_not_shown_are_found_and_say_so(client, model) -> None:
    old, new = word(), word()
    model.push({"text": f"First version {old}."}, {"text": f"Second version {new}."})
    events = await send(client, "Answer twice")
    chat_id, first_reply = events[0]["chat_id"], events[-1]["message_id"]
    url = f"/api/chats/{chat_id}/messages/{first_reply}/regenerate"
    async with client.stream("POST", url, json={}) as response:
        assert response.status_code == 200
        await response.aread()

    [hit] = await search(client, old)
    assert hit["message_id"] == first_reply and hit["on_branch"] is False
    [hit] = await search(client, new)
    shown = await messages_of(client, chat_id)
    assert hit["message_id"] == shown[-1]["message_id"] and hit["on_branch"] is True


async def test_limit_and_bad_queries(client, model) -> None:
    tag = word()
    model.push(*({"text": f"{tag} number {n}"} for n in range(3)))
    for n in range(3):
        await send(client, f"Message {n}")
    assert len(await search(client, tag)) == 3
    assert len(await search(client, tag, limit=2)) == 2
    assert await search(client, "!!!") == []  # nothing searchable in it: nothing found

    for params in ({}, {"q": ""}, {"q": "   "}, {"q": "x" * 201}, {"q": tag, "limit": 0},
                   {"q": tag, "limit": 51}, {"q": "a\x00b"}):  # fmt: skip
        response = await client.get("/api/search", params=params)
        assert response.status_code == 422, (params, response.text)
        assert "error" in response.json()


# --- pinned chats --------------------------------------------------------------------------------


async def test_pinned_chats_come_first(client, model) -> None:
    model.push({"text": "One."}, {"text": "Two."})
    first = (await send(client, "Older chat"))[0]["chat_id"]
    second = (await send(client, "Newer chat"))[0]["chat_id"]
    listed = [c["chat_id"] for c in (await client.get("/api/chats")).json()]
    assert listed.index(second) < listed.index(first)

    response = await client.patch(f"/api/chats/{first}", json={"pinned": True})
    assert response.status_code == 200, response.text
    assert response.json()["pinned"] is True
    chats = (await client.get("/api/chats")).json()
    pinned = [c["chat_id"] for c in chats if c["pinned"]]
    assert first in pinned
    assert [c["chat_id"] for c in chats].index(first) < [c["chat_id"] for c in chats].index(second)
    assert all(c["pinned"] for c in chats[: len(pinned)])  # every pinned chat before the rest

    response = await client.patch(f"/api/chats/{first}", json={"pinned": False})
    assert response.json()["pinned"] is False
    listed = [c["chat_id"] for c in (await client.get("/api/chats")).json()]
    assert listed.index(second) < listed.index(first)


async def test_edit_chat_rejects_bad_bodies(client, model) -> None:
    model.push({"text": "Ok."})
    chat_id = (await send(client, "Edit me"))[0]["chat_id"]
    for body in ({}, {"pinned": None}, {"title": None}, {"pinned": "yes"}, {"pinned": 1},
                 {"title": "  "}, {"color": "red"}):  # fmt: skip
        response = await client.patch(f"/api/chats/{chat_id}", json=body)
        assert response.status_code == 422, (body, response.text)
    response = await client.patch(f"/api/chats/{uuid.uuid4()}", json={"pinned": True})
    assert response.status_code == 404

    # Both at once, in one statement; the rename makes the title the user's.
    response = await client.patch(f"/api/chats/{chat_id}", json={"title": "Mine", "pinned": True})
    assert response.status_code == 200
    assert {k: response.json()[k] for k in ("title", "title_source", "pinned")} == {
        "title": "Mine",
        "title_source": "user",
        "pinned": True,
    }
    await client.patch(f"/api/chats/{chat_id}", json={"pinned": False})
