"""Forgetting on request in the chat (chat/memory_forget.py, core/forget_requests.py): the request
deletes the memory it names before the reply, the reply is told so, and the extraction does not
store the request as the fact again (a keyless trial: "Please forget that I live in Porto."
refreshed the memory, quoting the request)."""

from __future__ import annotations

import asyncio
from datetime import datetime

import httpx
import pytest

from chat.memory_recall import said_lines
from core.forget_requests import asks_to_forget, forget_requests
from core.grounding import sentences_of
from core.memory_jobs import QueuedMessage
from core.services import Services
from tests.chat_client import send
from tests.conftest import extractions_done, forget_memories
from tests.scripted_model import ScriptedProvider
from tests.test_grounded_memory import ops, tell


@pytest.mark.parametrize(
    ("message", "asked"),
    [
        ("Please forget that I live in Porto.", ["I live in Porto"]),
        ("Can you forget my allergy?", ["my allergy"]),
        ("Hey, forget about my job, I quit.", ["my job"]),
        ("I want you to stop remembering my address.", ["my address"]),
        ("Delete the memory about my wife's name!", ["my wife's name"]),
        ("Thanks. Forget the fact that we're vegetarian.", ["we're vegetarian"]),
        # Asks nothing: the user forgets, a reminder, a file, nothing named.
        ("I always forget my keys.", []),
        ("Don't forget to call Mum.", []),
        ("How do I delete a file in Python?", []),
        ("Forget it.", []),
    ],
)
def test_what_a_message_asks_to_have_forgotten(message: str, asked: list[str]) -> None:
    assert forget_requests(message) == asked


def test_a_request_to_forget_is_no_fact() -> None:
    assert asks_to_forget("Please forget that I live in Porto.")
    assert asks_to_forget("Forget it.")
    assert not asks_to_forget("I always forget my keys.")
    assert not asks_to_forget("I live in Porto, so forget Lisbon.")


def test_the_sentences_a_quote_is_part_of_say_whether_it_asks_to_forget() -> None:
    """The store refuses a quote all of whose sentences ask to forget (core/memory_store.py)."""
    message = "Forget my old job. I'm a baker now, in Porto."
    assert sentences_of("I'm a baker now", message) == ["I'm a baker now, in Porto."]
    assert sentences_of("old job. I'm a baker", message) == [
        "Forget my old job.",
        "I'm a baker now, in Porto.",
    ]
    assert sentences_of("my old job", message) == ["Forget my old job."]
    assert sentences_of("Lisbon", message) == []


def test_a_request_to_forget_is_not_given_as_what_the_user_said_elsewhere() -> None:
    """Seen in a keyless trial: "Hey, forget that I'm planning a trip to Japan." was given to the
    next chat as what the user said, and the reply there was about the trip."""
    when = datetime(2026, 12, 6, 9, 30)
    lines = said_lines(
        [QueuedMessage("Hey, forget that I'm planning a trip to Japan. I'm Ana, by the way.", when)]
    )
    assert len(lines) == 1 and lines[0].endswith(': "I\'m Ana, by the way."')
    assert said_lines([QueuedMessage("Please forget that I live in Porto.", when)]) == []


async def memories(client: httpx.AsyncClient) -> list[str]:
    response = await client.get("/api/memories")
    assert response.status_code == 200, response.text
    return sorted(m["content"] for m in response.json()["memories"])


def prompt_of(model: ScriptedProvider, said: str) -> str:
    """What the chat model was shown as the user's message saying `said`."""
    prompts = [c["messages"][-1]["content"] for c in model.calls if c["model"] == "chat"]
    return next(p for p in reversed(prompts) if said in p.split("</memories>")[-1])


async def test_asking_to_forget_deletes_that_memory_and_only_it(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services
) -> None:
    await forget_memories(chat_services)  # what another test left would be matched too
    await tell(
        client, model, chat_services,
        "I'm Ana. I live in Porto and I moved to Porto in March 2025. My wife is Sara.",
        {"op": "add", "fact": "The user's name is Ana.", "sentences": [1]},
        {"op": "add", "fact": "The user lives in Porto.", "sentences": [2]},
        {"op": "add", "fact": "The user moved to Porto in March 2025.", "sentences": [2]},
        {"op": "add", "fact": "The user's wife is Sara.", "sentences": [3]},
    )  # fmt: skip
    model.push({"text": "Done: I have forgotten that."})
    # The local model read the request as the fact again and refreshed the memory with it.
    model.push_for(
        "memory", ops({"op": "add", "fact": "The user lives in Porto.", "sentences": [1]})
    )
    events = await send(client, "Please forget that I live in Porto.")
    await extractions_done(chat_services)
    assert await memories(client) == [
        "The user moved to Porto in March 2025.",
        "The user's name is Ana.",
        "The user's wife is Sara.",
    ]
    prompt = prompt_of(model, "Please forget")
    # The user's words, not the memory's: the local model wrote the memory back in its reply.
    assert 'The user asked you to forget "I live in Porto", and it is now deleted' in prompt
    assert "- The user lives in Porto. (said on" not in prompt  # not recalled as well
    steps = [e["text"] for e in events if e["type"] == "step"]
    assert 'Forgot "The user lives in Porto."' in steps
    done = next(e for e in events if e["type"] == "done")
    assert done["notes"] == ['Forgotten, as you asked: "The user lives in Porto."']

    # The best match only, when the next is not as alike: the wife, not the user's name.
    model.push({"text": "Forgotten."}, {"text": "I can't find that."})
    model.push_for("memory", ops(), ops())
    await send(client, "Forget my wife's name.")
    assert await memories(client) == [
        "The user moved to Porto in March 2025.",
        "The user's name is Ana.",
    ]
    # Nothing like it: nothing deleted, and the reply is told so.
    events = await send(client, "Could you forget my favourite colour?")
    await extractions_done(chat_services)
    assert len(await memories(client)) == 2
    assert 'forget "my favourite colour", but no saved memory matches it' in (
        prompt_of(model, "favourite colour")
    )
    done = next(e for e in events if e["type"] == "done")
    assert done["notes"] == [
        'Nothing forgotten: no memory matches "my favourite colour". The Memory page lists what '
        "I remember."
    ]


async def test_a_fact_the_user_asks_to_forget_before_it_is_saved_is_never_saved(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services
) -> None:
    """A keyless trial: "I'm a pediatric nurse in Porto.", then in a new chat, while the local
    model still had that message to read, "Please forget that I'm a nurse." No memory matched
    yet, so none was deleted, and the extraction then saved "The user's name is a pediatric
    nurse." and "The user works in Porto.". A later request to forget holds for the facts of
    the messages before it, read after it."""
    await forget_memories(chat_services)
    held = asyncio.Event()
    model.push({"text": "Noted."})
    model.push_for(
        "memory",
        {
            **ops(
                {"op": "add", "fact": "The user works as a pediatric nurse.", "sentences": [1]},
                {"op": "add", "fact": "The user lives in Porto.", "sentences": [2]},
            ),
            "gate": held,  # the extraction waits behind the replies, as on the local model
        },
    )
    await send(client, "I'm a pediatric nurse. I live in Porto.")
    model.push({"text": "Done."})
    model.push_for("memory", ops())
    events = await send(client, "Please forget that I'm a nurse.")
    held.set()
    await extractions_done(chat_services)
    assert await memories(client) == ["The user lives in Porto."]
    # The reply is told it is forgotten (not "no saved memory matches it"), and is not given
    # the message that said it as what the user said elsewhere.
    prompt = prompt_of(model, "Please forget")
    assert 'The user asked you to forget "I\'m a nurse", and it is now deleted' in prompt
    assert "pediatric" not in prompt and "I live in Porto." in prompt
    done = next(e for e in events if e["type"] == "done")
    assert done["notes"] == ['Forgotten, as you asked: "I\'m a nurse" (it had not been saved yet)']
