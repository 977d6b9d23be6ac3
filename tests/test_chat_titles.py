"""Generated chat titles (chat/titles.py): after a new chat's first reply the utility model (the
tests' `title` group, a scripted queue of its own) names the chat, in the background.

Real server and database; the scripted model writes the replies and the titles.
"""

from __future__ import annotations

import asyncio

import pytest

from chat import titles
from chat.runner import title_from
from chat.titles import MAX_CHARS, clean_title, is_about
from tests.chat_client import send


async def chat_row(client, chat_id: str) -> dict:
    [chat] = [c for c in (await client.get("/api/chats")).json() if c["chat_id"] == chat_id]
    return chat


@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ("Planning a Lisbon trip", "Planning a Lisbon trip"),
        ('"Planning a Lisbon Trip."', "Planning a Lisbon Trip"),
        ("**Title:** *Fixing* a `Flask` import error", "Fixing a Flask import error"),
        ("# Recette de crêpes sans œufs\n\nMore text after it.", "Recette de crêpes sans œufs"),
        ("«Reise nach Japan im Frühling»", "Reise nach Japan im Frühling"),
        ("\n\n  Title: C# tips for beginners!  \n", "C# tips for beginners"),
        ("<think>The user wants…</think>Sourdough starter care", "Sourdough starter care"),
        ("one two three four five six seven eight", "one two three four five six"),
        ("- [Rust](https://x.y) lifetimes explained", "Rust lifetimes explained"),
        ("", ""),
        ('  "" ...  ', ""),
        ("\x00\ue000***\n---", ""),
    ],
)
def test_clean_title(answer: str, title: str) -> None:
    assert clean_title(answer) == title


def test_clean_title_caps_long_words() -> None:
    title = clean_title("Pneumonoultramicroscopicsilicovolcanoconiosis " * 3)
    assert 0 < len(title) <= MAX_CHARS and title.startswith("Pneumono")


@pytest.mark.parametrize(
    ("title", "question", "reply", "about"),
    [
        ("Allergy Chat", "I'm allergic to peanuts.", "I'm sorry to hear that.", True),
        ("Nurse in Lyon", "I work as a nurse in Lyon.", "That's great!", True),
        ("Nursing support", "I work as a nurse in Lyon.", "That's great!", True),
        ("Bonjour", "Translate 'good morning' into French.", "Bonjour", True),
        ("Recette de crêpes", "Comment faire des crêpes ?", "Mélangez la farine…", True),
        ("法国首都", "法国的首都是哪里？", "巴黎。", True),  # no spaces: not judged
        # What the local model wrote when unsure: the instructions' example, or made up.
        ("Fixing a Flask import error", "Write a story about a lighthouse.", "As I sit…", False),
        ("Weather updates", "What's the capital of Australia?", "It is Canberra.", False),
        ("user", "Write a limerick about a cat.", "There once was a cat…", False),
        # Most of its words invented, one borrowed (local model, keyless trials).
        (
            "Currency exchange rate tracker",
            "According to my document, what is the capital of Indonesia and its currency?",
            "The capital of Indonesia is Jakarta [1]. Indonesia uses the Rupia [1].",
            False,
        ),
        ("What is the plot of Romeo", "Summarize the plot of Hamlet.", "Hamlet is a…", False),
        ("Candles flicker in the night", "Write a haiku about rain.", "Silent night…", False),
        # Half said is enough: a title may name what the chat is about in its own words.
        ("Home loan explained", "Can you explain what a mortgage is?", "A loan…", True),
        ("Repairing a leaking tap", "How do I fix a leaking tap?", "To fix it…", True),
        ("Understanding cups and tablespoons", "How many tablespoons in a cup?", "16.", True),
        ("Chat com alergia a marisco", "Sou alérgica a marisco.", "Olá, Ana!", True),
    ],
)
def test_a_title_must_be_mostly_words_of_the_chat(
    title: str, question: str, reply: str, about: bool
) -> None:
    assert is_about(title, question, reply) is about


async def test_a_title_about_nothing_said_leaves_the_first_title(client, model) -> None:
    model.push({"text": "The capital of Australia is Canberra."})
    model.push_for("title", {"text": "Fixing a Flask import error"})
    chat_id = (await send(client, "What's the capital of Australia?"))[0]["chat_id"]
    await titles.settled()
    assert len(model.own_calls["title"]) == 1
    chat = await chat_row(client, chat_id)
    assert (chat["title"], chat["title_source"]) == ("What's the capital of Australia?", "auto")


async def test_title_comes_from_the_utility_model_after_the_first_reply(client, model) -> None:
    model.push({"text": "Spring is a lovely time for Lisbon."}, {"text": "Take the tram."})
    model.push_for("title", {"text": '"**Lisbon Trip Planning**"', "delay": 0.5})
    question = "Hi! Can you help me plan a trip to Lisbon next spring with my kids please?"
    events = await send(client, question)
    chat_id = events[0]["chat_id"]
    assert events[0]["title"] == title_from(question)
    # `done` came before the title (its call takes 0.5 s and starts after the reply).
    assert (await chat_row(client, chat_id))["title_source"] == "auto"

    await titles.settled()
    chat = await chat_row(client, chat_id)
    assert (chat["title"], chat["title_source"]) == ("Lisbon Trip Planning", "generated")
    [call] = model.own_calls["title"]
    prompt = call["messages"][-1]["content"]
    assert question in prompt and "Spring is a lovely time for Lisbon." in prompt
    assert call["max_tokens"] == titles.MAX_TOKENS
    # Background work: on the local model it gives way to a reply someone waits for.
    assert (call["watched"], call["whole"]) == (False, True)

    # The next message does not title the chat again.
    await send(client, "And then?", chat_id)
    await titles.settled()
    assert len(model.own_calls["title"]) == 1
    assert (await chat_row(client, chat_id))["title"] == "Lisbon Trip Planning"


async def test_the_title_reads_only_the_start_of_the_question_and_reply(client, model) -> None:
    # On the local model a title call holds the model: the shorter its prompt, the sooner the
    # user's next message is served.
    reply = "Lisbon has trams. " * 60 + "REPLY END"
    model.push({"text": reply})
    model.push_for("title", {"text": "Lisbon trip"})
    question = "Plan my Lisbon trip. " * 40 + "QUESTION END"
    await send(client, question)
    await titles.settled()
    [call] = model.own_calls["title"]
    prompt = call["messages"][-1]["content"]
    assert question[: titles.PROMPT_CHARS] in prompt and "QUESTION END" not in prompt
    assert reply[: titles.PROMPT_CHARS] in prompt and "REPLY END" not in prompt


async def test_a_rename_is_never_overwritten(client, model) -> None:
    model.push({"text": "Sure."})
    model.push_for("title", {"text": "Generated name", "delay": 0.5})
    chat_id = (await send(client, "Name this chat later"))[0]["chat_id"]
    # The title call starts after the reply has ended: rename while its answer is on the way (a
    # rename before it starts skips the call, and a CI run once got there first).
    for _ in range(250):
        if model.own_calls["title"]:
            break
        await asyncio.sleep(0.02)
    response = await client.patch(f"/api/chats/{chat_id}", json={"title": "My own name"})
    assert response.status_code == 200

    await titles.settled()
    assert len(model.own_calls["title"]) == 1  # it was asked, and its answer dropped
    chat = await chat_row(client, chat_id)
    assert (chat["title"], chat["title_source"]) == ("My own name", "user")


async def test_a_failing_or_empty_title_call_leaves_the_first_title(client, model) -> None:
    long_question = "Could you explain how the Krebs cycle produces energy in human muscle cells?"
    model.push({"text": "Yes."}, {"text": "Yes."}, {"text": "Yes."})
    model.push_for("title", {"error": "utility model unavailable"}, {"text": "  **  "})
    failed = (await send(client, long_question))[0]["chat_id"]
    await titles.settled()
    empty = (await send(client, "Second chat, empty title"))[0]["chat_id"]
    await titles.settled()

    chat = await chat_row(client, failed)
    assert (chat["title"], chat["title_source"]) == (title_from(long_question), "auto")
    assert chat["title"].endswith("…") and len(chat["title"]) <= 61
    chat = await chat_row(client, empty)
    assert (chat["title"], chat["title_source"]) == ("Second chat, empty title", "auto")
    assert len(model.own_calls["title"]) == 2


async def test_a_failed_reply_gets_no_title(client, model) -> None:
    model.push({"error": "the chat model is down"})
    events = await send(client, "This reply fails")
    assert events[-1]["type"] == "error"
    await titles.settled()
    assert model.own_calls["title"] == []
    assert (await chat_row(client, events[0]["chat_id"]))["title"] == "This reply fails"
