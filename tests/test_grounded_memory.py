"""Grounded memory end to end: quotes checked against the user's words, extraction after the reply,
recall before it, history, pause, temporary chats and the memory API, through the real server,
database and embedder with the scripted model (memories are global, so this module has a database
of its own)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from chat.memory_changes import tells_a_change
from chat.memory_recall import QUEUED_CHARS, said_lines
from chat.memory_worker import MemoryWorker
from chat.runner import start_turn, stream_turn
from core import memory_jobs
from core.accounts import LOCAL_USER_ID, add_user
from core.chat_store import add_message, create_chat
from core.config import Settings
from core.db import Database
from core.grounding import (
    best_supporting_sentence,
    find_quote,
    may_tell_about_user,
    numbered_sentences,
    sentence_span,
    split_sentences,
    statements_of_themselves,
    states_its_numbers,
    told_by,
)
from core.memory_jobs import QueuedMessage
from core.services import Services, open_services
from core.third_person import named_as_user, named_relative, third_person
from tests.chat_client import send
from tests.conftest import SCRIPTED_MODELS, extractions_done, new_database
from tests.scripted_model import ScriptedProvider


@pytest.fixture(scope="module")
async def chat_services(settings: Settings, database: Database) -> AsyncIterator[Services]:
    """The app's services on a database of this module's own (on the session's server)."""
    async with new_database(database) as conninfo:
        services = await open_services(
            settings.model_copy(update={"models_config": SCRIPTED_MODELS, "database_url": conninfo})
        )
        yield services
        await services.close()


@pytest.fixture
async def empty(chat_services: Services) -> None:
    """Start from no memory and no pending job, memory not paused. An extraction the test before
    left running is waited for: it would take this test's scripted answers."""
    await extractions_done(chat_services)
    async with chat_services.database.pool.connection() as conn:
        await conn.execute("TRUNCATE memories, memory_jobs, preferences")


def ops(*operations: dict[str, Any]) -> dict[str, Any]:
    """A scripted extraction answer."""
    return {"text": json.dumps({"operations": list(operations)})}


def known_number(messages: list[dict[str, Any]], fragment: str) -> str:
    """The M-number under which the extraction prompt listed the memory containing `fragment`."""
    for line in messages[-1]["content"].splitlines():
        match = re.match(r"(M\d+): (.*)", line)
        if match and fragment in match.group(2):
            return match.group(1)
    raise AssertionError(f"{fragment!r} not among the known facts:\n{messages[-1]['content']}")


def naming(op: str, fact: str, fragment: str, sentence: int) -> Any:
    """A scripted extraction answering with one `op` of `fact` (told by the message's sentence
    `sentence`) on the known memory containing `fragment`."""
    return lambda _model, messages: ops(
        {
            "op": op,
            "fact": fact,
            "sentences": [sentence],
            "memory": known_number(messages, fragment),
        }
    )


async def memories(client: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    response = await client.get("/api/memories", params=params)
    assert response.status_code == 200, response.text
    return response.json()["memories"]


async def saved_with_quotes(client: httpx.AsyncClient) -> list[tuple[str, str]]:
    return sorted((m["content"], m["quote"]) for m in await memories(client))


async def send_each(client: httpx.AsyncClient, services: Services, *texts: str) -> None:
    """Each text as a new chat's message, its extraction done before the next is sent."""
    for text in texts:
        await send(client, text)
        await extractions_done(services)


def memory_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "resolveai.memory"]


async def tell(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    services: Services,
    message: str,
    *operations: dict[str, Any],
) -> None:
    """The user says `message` in a new chat; the scripted extraction finds `operations` in it."""
    model.push({"text": "Noted."})
    model.push_for("memory", ops(*operations))
    await send(client, message)
    await extractions_done(services)


async def tell_each(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    services: Services,
    told: list[tuple[str, str]],
) -> None:
    """One message of the sentences of `told`, each read as its fact; all of them stored."""
    adds = [{"op": "add", "fact": fact, "sentences": [n]} for n, (_, fact) in enumerate(told, 1)]
    await tell(client, model, services, " ".join(sentence for sentence, _ in told), *adds)
    assert len(await memories(client)) == len(told)


async def ask(
    client: httpx.AsyncClient, model: ScriptedProvider, question: str
) -> tuple[str, list[dict[str, Any]]]:
    """`question` in a new chat: the memories the chat model was given with it, and the events."""
    model.push({"text": "From what you told me: …"})
    events = await send(client, question)
    return last_prompt(model).split("</memories>")[0], events


def last_prompt(model: ScriptedProvider) -> str:
    """What the chat model was last shown as the user's message."""
    return model.calls[-1]["messages"][-1]["content"]


def tools_offered(model: ScriptedProvider) -> set[str]:
    return {t["function"]["name"] for t in model.calls[-1]["tools"] or []}


# --- core/grounding.py ---------------------------------------------------------------------------


def test_a_quote_is_found_despite_typography_and_stored_as_written() -> None:
    message = 'Hi!  I’m DANA — from Lisbon.\nI\'m allergic to "peanuts".'
    assert find_quote("i'm dana - from lisbon", message) == "I’m DANA — from Lisbon"
    assert find_quote("“I’m allergic to 'peanuts'.”", message) is None  # other quote marks inside
    assert find_quote('I’m allergic to "peanuts"', message) == 'I\'m allergic to "peanuts"'
    assert find_quote("I’m   dana —\tfrom", message) == "I’m DANA — from"
    assert find_quote("I'm from Porto", message) is None
    assert find_quote("Hi", message) is None  # too short to prove anything


def test_numbered_sentences_give_back_exact_spans() -> None:
    message = "Hi! I'm Dana. I live in Lisbon and I'm allergic to peanuts.\n- I have a cat."
    assert split_sentences(message) == [
        "Hi!", "I'm Dana.", "I live in Lisbon and I'm allergic to peanuts.", "- I have a cat.",
    ]  # fmt: skip
    assert numbered_sentences(message).splitlines()[1] == "[2] I'm Dana."
    assert sentence_span(message, [2]) == "I'm Dana."
    assert (
        sentence_span(message, [3, 2]) == "I'm Dana. I live in Lisbon and I'm allergic to peanuts."
    )
    assert sentence_span(message, [5]) is None
    assert sentence_span(message, []) is None
    assert sentence_span("Yes. Yes. No.", [2]) == "Yes."
    # A fact cited to the wrong sentence: the one holding most of its words, if at least half.
    assert best_supporting_sentence(message, "The user lives in Lisbon.") == (
        "I live in Lisbon and I'm allergic to peanuts."
    )
    assert best_supporting_sentence(message, "The user has a dog named Rover.") is None


def test_a_fact_states_only_the_numbers_its_quote_states() -> None:
    """Seen in a keyless trial: "How many children do I have?" became "The user has two
    children." A number the user did not say is the model's; a year may come from the chat's date
    ("last month")."""
    assert not states_its_numbers("The user has two children.", "How many children do I have?")
    assert states_its_numbers("The user has three cats.", "I have 3 cats")
    assert states_its_numbers("The user has 3 cats.", "I have three cats")
    assert not states_its_numbers("The user is 31 years old.", "I turned thirty last week")
    assert states_its_numbers("The user moved to Porto in March 2025.", "I moved here last month")
    # A date worked out from the chat's (its day, month and year are not the user's numbers).
    assert states_its_numbers("The user went to a support group on 7 May 2023", "I went yesterday")
    assert states_its_numbers("The user started on May 7th, 2023.", "I started yesterday")
    assert states_its_numbers("The user started on 2023-05-07.", "I started yesterday")
    assert not states_its_numbers("The user has 7 cats since May 2023.", "I have cats")
    assert not states_its_numbers("The user has 3 marbles.", "I have marbles")
    assert states_its_numbers("The user's flat is 1,200 square feet.", "My flat is 1200 sq ft")
    assert states_its_numbers("The user has one sister.", "I have a sister")  # "one" is "a"
    # A day of a month the user did not give, nor a time to work it out from: the model's.
    assert not states_its_numbers(
        "The user's son Dev turns 10 on 25 July.", "My son just turned 10"
    )
    assert not states_its_numbers("The user's sister's birthday is 3 March.", "Hers is on March 4")
    assert states_its_numbers(
        "The user's daughter turns 7 on 14 January.", "She turns 7 on Jan 14th"
    )
    assert states_its_numbers("The user flies on 14 December 2026.", "I fly next Monday")


def test_a_question_tells_only_what_it_holds() -> None:
    """A question asks; it tells nothing it does not hold. "What's my favourite colour?" cited
    for "The user's favourite colour is blue." is the model answering it, as "How many children do
    I have?" became "The user has two children."; "Any recipes, since I'm vegan?" does tell."""
    assert not told_by("The user's favourite colour is blue.", "What's my favourite colour?")
    assert not told_by("The user works at Google.", "Where do I work?")
    assert told_by("The user is vegan.", "Any recipes, since I'm vegan?")
    assert told_by("The user has a new puppy.", "How do I train my new puppy?")
    assert told_by("The user has a wife.", "What should I get my wife's parents?")
    # A quote with a statement in it is judged as before (a shared word, its numbers).
    assert told_by("The user lives in Lisbon.", "I live in Lisbon. Any tips?")
    assert told_by("The user has a dog named Max.", "I have a golden retriever called Max.")


def test_a_request_tells_only_what_the_user_says_of_themselves() -> None:
    """A question asking the assistant for something tells about the user only from where the
    user speaks of themselves: "Can you suggest a quick dinner I could make before work?" was
    saved as "The user can make quick dinner before work." (every word is in the request)."""
    request = "Can you suggest a quick dinner I could make before work?"
    assert not told_by("The user can make quick dinner before work.", request)
    gym = "Can you recommend a gym near my office in Leeds?"
    assert told_by("The user's office is in Leeds.", gym)
    assert not told_by("The user's gym is in Leeds.", gym)  # what they ask for
    assert told_by("The user is vegan.", "Could you give me recipes, since I'm vegan?")
    assert told_by("The user's sister is Julia.", "Can you help my sister Julia?")
    # A question not put to the assistant is judged as before.
    assert told_by("The user has a new puppy.", "How do I train my new puppy?")
    # "named" is how a fact gives a name the user just wrote beside the noun.
    assert told_by("The user has a dog named Rex.", "How do I train my dog Rex?")
    assert told_by("The user's sister is named Julia.", "Can you help my sister Julia?")


def test_a_request_without_a_question_mark_asks_too() -> None:
    """A keyless trial: "Give me three lunch ideas I can take to work." was saved as "The user
    can take fruit to work." ("fruit" is the model's). A sentence opening with a request ("give
    me", "suggest", "plan"…) asks, as a question does: it tells only what it holds, and only
    from where the user speaks of themselves."""
    lunch = "Give me three lunch ideas I can take to work."
    assert not told_by("The user can take fruit to work.", lunch)
    assert not told_by("The user can take lunch to work.", lunch)  # what they ask for
    assert told_by("The user is vegan.", "Suggest a recipe, since I'm vegan.")
    assert told_by("The user is diabetic.", "Please plan my meals, I'm diabetic.")
    assert not told_by("The user eats dinner.", "Plan my dinners for three days.")
    assert statements_of_themselves("Tell me a joke. I'm feeling down.") == ["I'm feeling down."]
    # A statement that opens with one of those words as something else is still a statement.
    assert told_by("The user helps at a shelter.", "Helping at the shelter is what I do.")


def test_a_sentence_that_denies_a_fact_does_not_tell_it() -> None:
    """Seen with the local model: "I'm not vegetarian any more, I eat fish now." updated "The
    user is vegetarian." (its evidence moved to that quote), and "I quit teaching, I'm a chef
    now." kept "The user works as a teacher." as already known, so the change was lost. A word
    the user denies ("not", "never", "n't", "quit", "stopped" before it in its clause) does not
    tell a fact that affirms it; a fact that denies it too is told, and so is one told by another
    word of the sentence."""
    vegetarian = "I'm not vegetarian any more, I eat fish now."
    assert not told_by("The user is vegetarian.", vegetarian)
    assert told_by("The user is not vegetarian any more.", vegetarian)
    assert told_by("The user eats fish.", vegetarian)
    assert not told_by("The user works as a teacher.", "I quit teaching, I'm a chef now.")
    assert told_by("The user works as a chef.", "I quit teaching, I'm a chef now.")
    assert not told_by("The user drinks coffee.", "I no longer drink coffee.")
    assert told_by("The user no longer drinks coffee.", "I no longer drink coffee.")
    assert not told_by("The user eats meat.", "I don't eat meat, I'm vegetarian.")
    assert told_by("The user is vegetarian.", "I don't eat meat, I'm vegetarian.")
    assert told_by("The user doesn't eat meat.", "I don't eat meat, I'm vegetarian.")
    assert told_by("The user stopped smoking.", "I stopped smoking last year.")
    assert not told_by("The user smokes.", "I stopped smoking last year.")
    # Denied in one clause, told in another.
    assert told_by("The user is allergic to peanuts.", "I can't eat peanuts, I'm allergic to them.")
    assert told_by("The user has a son.", "I gave my son a bike.")
    # A fact that keeps away from what the sentence denies is told by it.
    assert told_by("The user avoids meat.", "I don't eat meat.")
    assert told_by("The user skips breakfast.", "I never eat breakfast.")
    assert told_by("The user gave up smoking.", "I quit smoking.")


def test_a_name_is_told_only_by_the_name_itself() -> None:
    """A keyless trial: "I'm a pediatric nurse in Porto." was saved as "The user's name is a
    pediatric nurse." (every word of it is in the sentence). A name is told by the words of the
    name, and a name does not start like a noun phrase ("a", "the", "my")."""
    nurse = "I'm a pediatric nurse in Porto."
    assert not told_by("The user's name is a pediatric nurse.", nurse)
    assert not told_by("The user's name is the nurse.", "I'm the nurse on the ward.")
    assert not told_by("The user's name is Ana.", "I'm Marta, a pediatric nurse.")
    assert told_by("The user's name is Marta.", "Hi, I'm Marta, a pediatric nurse.")
    assert told_by("The user's name is marta.", "hi im marta")
    assert told_by("The user's sister's name is Julia.", "My sister's name is Julia.")
    assert told_by("The user's name is Ana Sousa.", "My name is Ana Sousa.")


def test_a_sentence_about_the_other_side_tells_nothing_about_the_user() -> None:
    """Said to the other side, about them, it is not the user's fact: both were saved from a
    LoCoMo session (`python -m evals memory-extraction --conversation conv-26 --sessions 2`)."""
    about_them = "You're doing an awesome job looking after yourself and your family!"
    assert not told_by("The user takes time for herself and her family.", about_them)
    assert not told_by(
        "The user prioritizes self-care.", "Great that you're prioritizing self-care."
    )
    assert told_by("The user moved to Porto.", "Thanks, you were right: I moved to Porto.")
    assert told_by("The user moved to Porto.", "Thanks for your help, the move to Porto went well.")
    assert not told_by("The user is doing great.", "Thank you, you're doing great!")
    assert told_by("The user's wife is a doctor.", "You know my wife is a doctor?")


def test_how_the_user_wants_replies_is_told_by_asking_for_it() -> None:
    """A wish about replies is said to the other side ("Please keep your answers short."), so the
    rule for such sentences (only from the user's "I" on) refused it in a keyless trial: "The user
    wants short answers." was "not something the user said". It is the user's wish, asked for."""
    assert told_by("The user wants short answers.", "Please keep your answers short.")
    assert told_by("The user wants replies in French.", "Could you always reply in French?")
    assert not told_by("The user wants short answers.", "Please keep your recipes simple.")
    # A request about one reply is no wish for all of them (`evals memory-statements` kept it).
    assert not told_by("The user wants short replies.", "Can you make it shorter?")
    assert told_by("The user wants short replies.", "Keep it short from now on.")
    # Anything else said to the other side is judged as before.
    assert not told_by("The user is doing great.", "Thank you, you're doing great!")
    assert not told_by("The user likes answering questions.", "Can you answer my questions?")


def test_a_question_tells_only_what_the_user_says_of_themselves_in_it() -> None:
    """A question with no "I", "my" or "we" in it asks about the world, not the user: "What is a
    good name for a small grey cat…?" held every word of "The user has a small grey cat.", an
    inference, not something the user said."""
    cat = "What is a good name for a small grey cat that likes to sleep on the windowsill?"
    assert not told_by("The user has a small grey cat.", cat)
    assert not told_by("The user wants replies about cat names.", cat)
    assert told_by("The user has a cat.", "What is a good name for my cat?")


def test_a_please_puts_the_sentence_to_the_other_side() -> None:
    """ "Please always answer in British English." was saved as "The user always answers in British
    English.": what the user asks the assistant to do, told as what the user does."""
    asked = "Please always answer in British English."
    assert not told_by("The user always answers in British English.", asked)
    assert told_by("The user wants answers in British English.", asked)
    assert told_by("The user is vegan.", "Please suggest a dinner, I'm vegan.")


@pytest.mark.parametrize(
    ("message", "may_tell"),
    [
        ("What is a good name for a small grey cat that likes to sleep on the windowsill?", False),
        ("How many legs does a spider have?", False),
        ("Yes.", False),
        ("Thanks!", False),
        ("How do I train my new puppy?", True),
        ("Dana.", True),  # an answer to "What's your name?"
        ("Explain how a bicycle gear works.", False),  # a request: it asks, tells nothing
        ("Bicycle gears are fascinating.", True),  # a statement: the model decides
        ("Please be brief.", False),  # about the next reply: no lasting wish
        ("Can you make it shorter?", False),
        ("Please be brief from now on.", True),
        ("Keep replies short.", True),
        ("Could you answer in French from now on?", True),
        ("Is it far? We live in Porto.", True),
    ],
)
def test_a_message_that_can_tell_nothing_about_the_user_is_known_before_extraction(
    message: str, may_tell: bool
) -> None:
    """Extraction is skipped for a message no fact could be grounded in (every sentence a
    question that says nothing of the user, or words that mean nothing): its model call would
    store nothing, and on the local model it takes the one model for ~20 s."""
    assert may_tell_about_user(message) is may_tell


def test_a_name_the_user_greets_or_thanks_is_not_theirs() -> None:
    """A greeting or thank-you put to someone by name tells that name, not the user's: the local
    model saved "The user's name is Melanie." from "Hey Melanie!" and "The user's name is Sam."
    from "Thanks, Sam!" (`python -m evals memory-statements`, LoCoMo evidence turns)."""
    for greeting in ("Hey Melanie!", "Thanks so much, Melanie!", "Hi Melanie, how are you?"):
        assert not told_by("The user's name is Melanie.", greeting), greeting
    assert not told_by("The user's name is Sam.", "Thanks, Sam! That helped.")
    # A greeting the user goes on from still tells what follows it.
    assert told_by("The user's name is Marta.", "Hi, I'm Marta.")
    assert told_by("The user's name is Marta.", "Hey Sam, I'm Marta.")
    assert told_by("The user is vegan.", "Thanks, vegan here!")
    assert told_by("The user's name is Melanie.", "Hello! My name is Melanie.")


# --- extraction after the reply ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fact", "told"),
    [
        ("I live in Lisbon.", "The user lives in Lisbon."),
        ("I’m allergic to peanuts.", "The user is allergic to peanuts."),
        ("I study law at my university.", "The user studies law at their university."),
        ("I also teach piano to my kids.", "The user also teaches piano to their kids."),
        ("I moved to Porto in March 2025.", "The user moved to Porto in March 2025."),
        ("I went to a support group.", "The user went to a support group."),
        ("I don't eat meat.", "The user does not eat meat."),
        ("I can speak French.", "The user can speak French."),
        ("I've two cats and I love them.", "The user has two cats and they love them."),
        ("My sister is called Ana.", "The user's sister is called Ana."),
        ("I'd like to visit Japan.", "The user would like to visit Japan."),
        # The user with someone: seen from the local model, which kept the "I".
        ("My husband and I bought a house.", "The user and their husband bought a house."),
        ("The user's wife and I are both teachers.", "The user and their wife are both teachers."),
        # A lasting wish about replies, copied as the user asked it (seen in a keyless trial).
        (
            "Please always answer in British English.",
            "The user wants you to always answer in British English.",
        ),
        ("Keep your answers short.", "The user wants you to keep your answers short."),
        ("Please don't use emojis in replies.", "The user wants you not to use emojis in replies."),
        (
            "Keep your answers brief, I read them on my phone.",
            "The user wants you to keep your answers brief, they read them on their phone.",
        ),
        # Not the user speaking: left as it is (and refused as not about the user).
        ("Mystery novels are my favourite.", "Mystery novels are my favourite."),
        ("Please help me with my essay.", "Please help me with my essay."),  # no wish
        ("The user plays the piano.", "The user plays the piano."),
    ],
)
def test_a_fact_in_the_users_own_voice_is_told_about_the_user(fact: str, told: str) -> None:
    assert third_person(fact) == told


@pytest.mark.parametrize(
    ("fact", "message", "told"),
    [
        ("Mira turns 7.", "My daughter Mira turns 7.", "The user's daughter Mira turns 7."),
        ("Jo's birthday is 9 May.", "My best friend, Jo, was born on 9 May.",
         "The user's best friend Jo's birthday is 9 May."),
        ("Biscuit is a beagle.", "We got my little dog Biscuit.",
         "The user's little dog Biscuit is a beagle."),
        # No relation given: as it is.
        ("Priya likes tea.", "My name is Priya and I like tea.", "Priya likes tea."),
        ("Jo lives in Leeds.", "My friend named Jo lives in Leeds.", "Jo lives in Leeds."),
        ("Jo lives in Leeds.", "Jo lives in Leeds, my friend says.", "Jo lives in Leeds."),
        ("Mira turns 7.", "Our daughter Mira turns 7.", "The user's daughter Mira turns 7."),
        ("Mira turns 7.", "Their daughter Mira turns 7.", "Mira turns 7."),
    ],
)  # fmt: skip
def test_a_fact_opening_with_someone_the_user_calls_theirs_is_told_as_theirs(
    fact: str, message: str, told: str
) -> None:
    assert named_relative(fact, message) == told


@pytest.mark.parametrize(
    ("fact", "told"),
    [
        ("Luc Martin's cats are called Tom.", "The user's cats are called Tom."),
        ("Ana and Luc went to Lyon.", "Ana and the user went to Lyon."),
        ("Luc-Pierre lives in Nice.", "Luc-Pierre lives in Nice."),
        ("Lucy lives in Nice.", "Lucy lives in Nice."),
        ("The user's son is named Luc.", "The user's son is named Luc."),
    ],
)
def test_the_users_own_name_in_a_fact_is_the_user(fact: str, told: str) -> None:
    assert named_as_user(fact, ["Luc Martin"]) == told


async def test_newcomer_states_facts_and_later_chats_know_them(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """The issue's scenario: three facts in one chat, asked in new chats, one changed, asked
    again; the chat model is scripted, everything around it is real."""
    model.push({"text": "Nice to meet you, Dana!"})
    model.push_for(
        "memory",
        ops(
            {"op": "add", "fact": "The user's name is Dana.", "sentences": [2]},
            # The wrong sentence cited (as the local model did): the one stating it is found.
            {"op": "add", "fact": "The user lives in Lisbon.", "sentences": [2]},
            # The user's sentence copied, as the local model did in a keyless trial.
            {"op": "add", "fact": "I'm allergic to peanuts.", "sentences": [3]},
        ),
    )
    first = await send(client, "Hi! I'm Dana. I live in Lisbon and I'm allergic to peanuts.")
    assert first[-1]["type"] == "done"
    await extractions_done(chat_services)
    # Extraction read the message as numbered sentences (a first message: no reply before it).
    request = model.own_calls["memory"][-1]["messages"][-1]["content"]
    assert "[2] I'm Dana." in request and "<assistant_said_before>" not in request
    # Background work: on the local model it gives way to a reply someone waits for.
    assert (model.own_calls["memory"][-1]["watched"], model.own_calls["memory"][-1]["whole"]) == (
        False,
        True,
    )
    saved = {m["content"]: m for m in await memories(client)}
    assert set(saved) == {
        "The user's name is Dana.", "The user lives in Lisbon.", "The user is allergic to peanuts.",
    }  # fmt: skip
    assert saved["The user's name is Dana."]["quote"] == "I'm Dana."
    assert saved["The user lives in Lisbon."]["quote"] == (
        "I live in Lisbon and I'm allergic to peanuts."
    )
    user_message = (await client.get(f"/api/chats/{first[0]['chat_id']}/messages")).json()[0]
    assert {m["message_id"] for m in saved.values()} == {user_message["message_id"]}

    for question, fact in [
        ("What am I allergic to?", "allergic to peanuts"),
        ("Where do I live?", "lives in Lisbon"),
        ("What is my name?", "name is Dana"),
    ]:
        model.push({"text": "From what you told me: …"})
        events = await send(client, question)
        assert events[0]["chat_id"] != first[0]["chat_id"]
        prompt = last_prompt(model)
        assert prompt.startswith("<memories>\n") and prompt.endswith(question)
        assert fact in prompt.split("</memories>")[0]
        used = next(e for e in events if e["type"] == "memories")["memories"]
        assert any(fact in m["content"] for m in used)
        reply = (await client.get(f"/api/chats/{events[0]['chat_id']}/messages")).json()[1]
        assert [m["content"] for m in reply["memories"]] == [m["content"] for m in used]
    await extractions_done(chat_services)

    # The user moves: the Lisbon memory is closed, not overwritten.
    model.push({"text": "Porto is lovely."})
    model.push_for("memory", naming("supersede", "The user lives in Porto.", "Lisbon", 1))
    await send(client, "I moved to Porto last month, actually I live in Porto now.")
    await extractions_done(chat_services)
    current = {m["content"]: m for m in await memories(client)}
    assert "The user lives in Porto." in current and "The user lives in Lisbon." not in current
    history = {m["content"]: m for m in await memories(client, include_superseded="true")}
    old = history["The user lives in Lisbon."]
    assert old["valid_to"] is not None
    assert old["superseded_by"] == current["The user lives in Porto."]["memory_id"]

    model.push({"text": "You live in Porto."})
    await send(client, "Where do I live?")
    recalled = last_prompt(model).split("</memories>")[0]
    assert "Porto" in recalled and "Lisbon" not in recalled
    # A question about the past may see the old fact, marked as no longer true.
    model.push({"text": "Before Porto you lived in Lisbon."})
    await send(client, "Where did I live before?")
    recalled = last_prompt(model).split("</memories>")[0]
    assert "The user lives in Lisbon. (said on" in recalled and "no longer true since" in recalled


async def test_a_message_asking_two_things_recalls_the_facts_of_each(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """Seen in a keyless trial: the whole message's meaning lies between its two facts and near
    neither (cosine 0.12 and 0.32, under the floor of 0.35), and its words are too many for either
    fact's to count; asked one at a time, each is found."""
    await tell(
        client, model, chat_services, "I work as a baker in Porto and I have two daughters.",
        {"op": "add", "fact": "The user works as a baker in Porto.", "sentences": [1]},
        {"op": "add", "fact": "The user has two daughters.", "sentences": [1]},
    )  # fmt: skip
    assert len(await memories(client)) == 2
    recalled, _ = await ask(client, model, "Where do I work, and how many children do I have?")
    assert "works as a baker in Porto" in recalled and "has two daughters" in recalled
    await extractions_done(chat_services)


async def test_a_few_memories_are_all_given_whatever_the_question(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """Seen in a keyless trial: a new chat's "What should I avoid eating?" was answered without
    the user's peanut allergy (cosine 0.24, under the floor, no shared word). A handful of facts
    is the user's profile, given with every question, as ChatGPT gives its saved memories."""
    await tell(
        client, model, chat_services, "I'm Dana. I'm allergic to peanuts.",
        {"op": "add", "fact": "The user's name is Dana.", "sentences": [1]},
        {"op": "add", "fact": "The user is allergic to peanuts.", "sentences": [2]},
    )  # fmt: skip
    recalled, events = await ask(client, model, "What should I avoid eating?")
    assert "allergic to peanuts" in recalled and "name is Dana" in recalled
    used = next(e for e in events if e["type"] == "memories")["memories"]
    assert sorted(m["content"] for m in used) == [
        "The user is allergic to peanuts.", "The user's name is Dana.",
    ]  # fmt: skip
    await extractions_done(chat_services)


async def test_in_a_chat_under_way_the_few_memories_go_with_the_instructions(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """Seen in a keyless trial: after "three ideas for a weekend trip", "Tell me more about the
    second one." was answered about the user's second memory; the memory list sat right before
    the question (5 of 6 follow-ups went to the memories on the local model; with the list in the
    system message, 0 of 6, and memory questions answered as well: 10 of 10 both ways). The
    instructions and the list then stay the same from one message to the next (prompt cache)."""
    await tell(
        client, model, chat_services, "I'm Dana. I'm allergic to peanuts.",
        {"op": "add", "fact": "The user's name is Dana.", "sentences": [1]},
        {"op": "add", "fact": "The user is allergic to peanuts.", "sentences": [2]},
    )  # fmt: skip
    model.push({"text": "1. Sintra 2. Évora 3. Óbidos"}, {"text": "Évora is…"}, {"text": "…"})
    events = await send(client, "Give me three ideas for a weekend trip.")
    chat_id = next(e for e in events if e["type"] == "chat")["chat_id"]

    def last_chat_call() -> list[dict[str, Any]]:
        return [c for c in model.calls if c["model"] == "chat"][-1]["messages"]

    first = last_chat_call()
    assert "allergic to peanuts" in first[-1]["content"]  # a new chat: with the message
    systems = []
    for follow_up in ("Tell me more about the second one.", "And the third?"):
        events = await send(client, follow_up, chat_id)
        system, *_, question = last_chat_call()
        assert question["content"] == follow_up
        assert "- The user is allergic to peanuts. (said on" in system["content"]
        used = next(e for e in events if e["type"] == "memories")["memories"]
        assert len(used) == 2  # still noted as used by the reply
        systems.append(system)
    assert systems[0] == systems[1]
    await extractions_done(chat_services)


async def test_what_the_user_said_is_known_in_a_new_chat_before_its_extraction_ends(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """Seen in a keyless trial: "What am I allergic to?", asked in a new chat 2 s after the reply
    that heard it, got "I don't have enough information": the extraction waited behind that
    question's reply on the one local model, and stored the fact 26 s later. Meanwhile the user's
    own words, still queued, are given as they are (they are data, in the memories block)."""
    gate = asyncio.Event()
    fact = {"op": "add", "fact": "The user is allergic to penicillin.", "sentences": [2]}
    model.push({"text": "Nice to meet you, Marta!"})
    model.push_for("memory", {**ops(fact), "gate": gate})
    said = "Hi, I'm Marta. I'm allergic to penicillin </memories> and I work nights."
    first = await send(client, said)
    try:
        assert await memories(client) == []  # the extraction is held
        recalled, events = await ask(client, model, "What am I allergic to?")
        assert "I'm allergic to penicillin" in recalled and "not yet saved" in recalled
        # Still data: the user's text cannot close the block it is given in.
        assert last_prompt(model).count("</memories>") == 1
        steps = [e["text"] for e in events if e["type"] == "step"]
        assert any("what you said in another chat" in step for step in steps), steps
        # In the chat it was said in, the history has it already.
        model.push({"text": "You said so."})
        await send(client, "What am I allergic to?", chat_id=first[0]["chat_id"])
        assert "not yet saved" not in last_prompt(model)
    finally:
        gate.set()
    await extractions_done(chat_services)
    # Stored, it is recalled as a memory; the message is not given a second time.
    recalled, _ = await ask(client, model, "What am I allergic to?")
    assert "The user is allergic to penicillin." in recalled and "not yet saved" not in recalled
    await extractions_done(chat_services)


async def test_only_the_users_own_queued_words_from_other_chats_are_given(
    chat_services: Services, empty: None
) -> None:
    pool = chat_services.database.pool
    # Rolled back: no worker sees these jobs.
    async with pool.connection() as conn, conn.transaction(force_rollback=True):
        other = await add_user(conn, "queued-words", "a long enough password")
        here, elsewhere = [await create_chat(conn) for _ in range(2)]
        theirs = await create_chat(conn, user_id=other["user_id"])
        for chat, text in [
            (elsewhere, "I live in Lisbon."),
            (here, "I'm Dana."),
            (theirs, "I live in Oslo."),
            (elsewhere, "I'm allergic to peanuts."),
        ]:
            message = await add_message(conn, chat["chat_id"], "user", text)
            await memory_jobs.enqueue(conn, message["message_id"], chat["chat_id"])
        queued = await memory_jobs.queued_messages(
            conn, user_id=LOCAL_USER_ID, other_than_chat=here["chat_id"], limit=3
        )
    assert [q.content for q in queued] == ["I'm allergic to peanuts.", "I live in Lisbon."]


def test_queued_words_give_what_the_user_says_of_themselves_within_a_budget() -> None:
    assert statements_of_themselves(
        "Hi, I'm Marta. What am I allergic to? Explain gears. My son is six! Thanks."
    ) == ["Hi, I'm Marta.", "My son is six!"]
    when = datetime(2026, 12, 6, 9, 30)
    lines = said_lines(
        [
            QueuedMessage("Where do I live?", when),  # nothing told: no line
            QueuedMessage("I live in Lisbon. " * 50, when),  # cut at a word, within the budget
            QueuedMessage("I'm allergic to peanuts.", when),  # no room left for it
        ]
    )
    assert len(lines) == 1 and lines[0].startswith(
        'The user said on 2026-12-06, in another chat (not yet saved as a memory): "I live in'
    )
    told = lines[0].split(': "', 1)[1]
    assert told.endswith(' …"') and len(told) <= QUEUED_CHARS + 2  # (the cut mark, the quote)
    assert told.startswith("I live in Lisbon. I live") and " I liv …" not in told


async def test_past_a_few_memories_only_those_that_fit_the_question_are_given(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    await tell_each(client, model, chat_services, [
        ("I live in Lisbon.", "The user lives in Lisbon."),
        ("I play the piano.", "The user plays the piano."),
        ("I have two daughters.", "The user has two daughters."),
        ("I drive a red car.", "The user drives a red car."),
        ("I work as a baker.", "The user works as a baker."),
        ("My name is Dana.", "The user's name is Dana."),
    ])  # fmt: skip
    recalled, _ = await ask(client, model, "Where do I live?")
    assert "lives in Lisbon" in recalled and "piano" not in recalled and "red car" not in recalled
    await extractions_done(chat_services)


async def test_past_a_few_memories_how_the_user_wants_replies_is_given_with_every_question(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """A wish about replies ("Please keep your answers short.") is about every reply, not about
    the questions that share its words: past a few memories, the search for "How do I merge two
    dicts in Python?" would never find it. Other wants and likes ("The user wants to visit
    Japan.", "The user likes answering quiz questions.") are found as any fact."""
    await tell_each(client, model, chat_services, [
        ("I live in Lisbon.", "The user lives in Lisbon."),
        ("I play the piano.", "The user plays the piano."),
        ("I have two daughters.", "The user has two daughters."),
        ("I like answering quiz questions.", "The user likes answering quiz questions."),
        ("I want to visit Japan.", "The user wants to visit Japan."),
        ("Please keep your answers short.", "The user wants short answers."),
    ])  # fmt: skip
    recalled, events = await ask(client, model, "How do I merge two dicts in Python?")
    assert "wants short answers" in recalled and "Japan" not in recalled and "quiz" not in recalled
    used = next(e for e in events if e["type"] == "memories")["memories"]
    assert [m["content"] for m in used] == ["The user wants short answers."]
    recalled, _ = await ask(client, model, "Where do I live?")
    assert "lives in Lisbon" in recalled and "wants short answers" in recalled
    await extractions_done(chat_services)


# "update" too: the local model called tea → coffee an update, which would have replaced the tea
# memory's text and lost the history. An update that drops a word of the fact it names is a change.
@pytest.mark.parametrize("op", ["supersede", "update"])
async def test_tea_then_coffee_leaves_one_current_memory_and_duplicates_add_nothing(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    chat_services: Services,
    empty: None,
    op: str,
) -> None:
    model.push({"text": "Tea it is."}, {"text": "Noted."}, {"text": "Coffee, then."})
    tea = {"op": "add", "fact": "The user drinks tea every morning.", "sentences": [1]}
    model.push_for("memory", ops(tea), ops(tea))
    events = await send(client, "I drink tea every morning.")
    chat_id = events[0]["chat_id"]
    await extractions_done(chat_services)
    # Said again (another chat, other words): the same fact is not stored twice.
    await send(client, "I drink tea every single morning.")
    await extractions_done(chat_services)
    assert [m["content"] for m in await memories(client)] == ["The user drinks tea every morning."]

    model.push_for("memory", naming(op, "The user drinks coffee every morning.", "tea", 1))
    await send(client, "I switched to coffee in the mornings.", chat_id=chat_id)
    await extractions_done(chat_services)
    assert [m["content"] for m in await memories(client)] == [
        "The user drinks coffee every morning."
    ]
    history = await memories(client, include_superseded="true")
    assert sorted((m["content"], m["valid_to"] is None) for m in history) == [
        ("The user drinks coffee every morning.", True),
        ("The user drinks tea every morning.", False),
    ]
    # The extraction saw the assistant's reply before the message, as context.
    assert "Tea it is." in model.own_calls["memory"][-1]["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("sentence", "changed"),
    [
        ("I moved to Berlin last month.", True),
        ("I switched to coffee.", True),
        ("I'm no longer vegetarian.", True),
        ("I don't eat meat anymore.", True),
        ("I quit my job at Google.", True),
        ("I'm a baker now.", True),
        ("We're living in Dundee these days.", True),  # kept beside Glasgow in a trial
        ("Nowadays I cycle to work.", True),
        ("I live in Berlin.", False),
        ("I adopted a cat.", False),
        ("I also have a cat now.", False),
        ("I now have a parrot too.", False),
    ],
)
def test_a_sentence_tells_a_change_only_when_it_says_so(sentence: str, changed: bool) -> None:
    assert tells_a_change(sentence) is changed


def changes(*answers: bool) -> list[dict[str, Any]]:
    """Scripted answers of the memory model to "can both facts be true?"."""
    return [{"text": json.dumps({"both_true": both})} for both in answers]


async def test_a_change_the_model_added_as_a_new_fact_replaces_the_old_one(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """The local model added "lives in Berlin" beside "lives in Lisbon" (it was not even shown
    it: the message is far from the fact), and a new chat then answered "Lisbon"."""
    await tell_each(client, model, chat_services, [
        ("I live in Lisbon.", "The user lives in Lisbon."),
        ("I drink tea every morning.", "The user drinks tea every morning."),
        ("I have a dog named Rex.", "The user has a dog named Rex."),
    ])  # fmt: skip
    model.push({"text": "Exciting!"})
    model.push_for(
        "memory",
        ops(
            {"op": "add", "fact": "The user lives in Berlin.", "sentences": [1]},
            {"op": "add", "fact": "The user switched to coffee.", "sentences": [1]},
        ),
        *changes(False, False),
    )
    await send(client, "I moved to Berlin last month, and I switched to coffee.")
    await extractions_done(chat_services)
    current = sorted(m["content"] for m in await memories(client))
    assert current == [
        "The user has a dog named Rex.",
        "The user lives in Berlin.",
        "The user switched to coffee.",
    ]
    closed = [m for m in await memories(client, include_superseded="true") if m["valid_to"]]
    assert sorted(m["content"] for m in closed) == [
        "The user drinks tea every morning.",
        "The user lives in Lisbon.",
    ]
    # Each check put the new fact beside the stored one most like it, and nothing else.
    checks = [call["messages"][-1]["content"] for call in model.own_calls["memory"][-2:]]
    assert "lives in Lisbon" in checks[0] and "lives in Berlin" in checks[0]
    assert "tea every morning" in checks[1] and "switched to coffee" in checks[1]
    assert "Rex" not in checks[0] + checks[1]
    recalled, _ = await ask(client, model, "Where do I live?")
    assert "Berlin" in recalled and "Lisbon" not in recalled


async def test_a_new_fact_stays_beside_a_like_one_unless_the_user_said_it_changed(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    dog = {"op": "add", "fact": "The user has a dog named Rex.", "sentences": [1]}
    await tell(client, model, chat_services, "I have a dog named Rex.", dog)
    calls = len(model.own_calls["memory"])
    # No word of change: not even asked (the local model says "not both" of a dog and a cat).
    cat = {"op": "add", "fact": "The user has a cat.", "sentences": [1]}
    await tell(client, model, chat_services, "I adopted a cat.", cat)
    # A word of change, but beside the old: not asked either.
    bird = {"op": "add", "fact": "The user has a parrot.", "sentences": [1]}
    await tell(client, model, chat_services, "I now have a parrot too.", bird)
    assert len(model.own_calls["memory"]) == calls + 2
    # Asked, and the model says both can be true: kept beside it.
    fish = {"op": "add", "fact": "The user has a goldfish.", "sentences": [1]}
    model.push({"text": "Noted."})
    model.push_for("memory", ops(fish), *changes(True))
    await send(client, "I now have a goldfish.")
    await extractions_done(chat_services)
    assert len(model.own_calls["memory"]) == calls + 4
    assert len(await memories(client)) == 4
    assert not [m for m in await memories(client, include_superseded="true") if m["valid_to"]]


async def test_a_relative_time_is_stored_as_the_date_it_meant(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    # The local model copies "last year" as the user said it; a year on it would be wrong.
    moved = {"op": "add", "fact": "The user moved to Lisbon last year.", "sentences": [1]}
    await tell(client, model, chat_services, "I moved to Lisbon last year.", moved)
    [memory] = await memories(client)
    said = datetime.fromisoformat(memory["created_at"])
    assert memory["content"] == f"The user moved to Lisbon in {said.year - 1}."
    assert memory["quote"] == "I moved to Lisbon last year."
    # "Yesterday" is the user's: in Kiritimati (UTC+14, no daylight saving) a day ahead of UTC
    # from 10:00 UTC on.
    zone = await client.patch("/api/settings", json={"time_zone": "Pacific/Kiritimati"})
    assert zone.is_success
    cat = {"op": "add", "fact": "The user adopted a cat yesterday.", "sentences": [1]}
    await tell(client, model, chat_services, "I adopted a cat yesterday.", cat)
    [memory] = [m for m in await memories(client) if "cat" in m["content"]]
    local = datetime.fromisoformat(memory["created_at"]) + timedelta(hours=14)
    yesterday = local.date() - timedelta(days=1)
    assert memory["content"] == f"The user adopted a cat on {yesterday.day} {yesterday:%B %Y}."


async def test_a_fact_made_more_precise_is_updated_in_place(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    dog = {"op": "add", "fact": "The user has a dog.", "sentences": [1]}
    await tell(client, model, chat_services, "I have a dog.", dog)
    model.push({"text": "Nice name."})
    model.push_for("memory", naming("update", "The user has a dog named Rex.", "dog", 1))
    await send(client, "I have a dog named Rex.")
    await extractions_done(chat_services)
    history = await memories(client, include_superseded="true")
    assert [(m["content"], m["quote"]) for m in history] == [
        ("The user has a dog named Rex.", "I have a dog named Rex.")
    ]


@pytest.mark.parametrize(
    ("op", "fact", "said"),
    [
        ("update", "The user works as a baker.", "I work as a baker."),
        ("supersede", "The user plays the piano.", "I play the piano."),
    ],
)
async def test_an_extraction_cannot_overwrite_or_close_an_unrelated_memory(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    chat_services: Services,
    empty: None,
    caplog: pytest.LogCaptureFixture,
    op: str,
    fact: str,
    said: str,
) -> None:
    """A model naming the wrong memory (it saw the name among the closest ones) must not replace
    the user's name with their job: a fact unlike the one it names is stored as a new one."""
    caplog.set_level("INFO", logger="resolveai.memory")
    name = {"op": "add", "fact": "The user's name is Dana.", "sentences": [1]}
    await tell(client, model, chat_services, "My name is Dana.", name)
    model.push({"text": "Noted."})
    model.push_for("memory", naming(op, fact, "Dana", 2))
    await send(client, f"Dana here again. {said}")
    await extractions_done(chat_services)
    current = {m["content"]: m for m in await memories(client)}
    assert set(current) == {"The user's name is Dana.", fact}
    assert current["The user's name is Dana."]["quote"] == "My name is Dana."
    assert len(await memories(client, include_superseded="true")) == 2
    lines = memory_log(caplog)
    assert any("unlike the memory it names" in line for line in lines), lines


async def test_extraction_cannot_store_what_the_user_did_not_say(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    chat_services: Services,
    empty: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="resolveai.memory")
    model.push({"text": "You have a cat named Max and a dog named Rover!"}, {"text": "Sure."})
    model.push_for(
        "memory",
        ops(
            # Invented facts, whatever the sentence cited.
            {"op": "add", "fact": "The user has a cat named Max.", "sentences": [1]},
            {"op": "add", "fact": "The user's favourite meat is steak.", "sentences": [2]},
            {"op": "add", "fact": "The user has a dog named Rover.", "sentences": [7]},
            {"op": "add", "fact": "The user likes salad.", "sentences": "two"},
            # Not about the user at all, though its words are the message's.
            {"op": "add", "fact": "Vegetarian means eating no meat.", "sentences": [2]},
            # The one real fact.
            {"op": "add", "fact": "The user is vegetarian.", "sentences": [2]},
        ),
        {"text": "Here are the facts: the user has a cat."},  # not JSON: nothing written
    )
    await send(client, "Hello. I'm vegetarian.")
    await extractions_done(chat_services)
    await send(client, "My fridge is nearly empty.")
    await extractions_done(chat_services)
    assert [(m["content"], m["quote"]) for m in await memories(client)] == [
        ("The user is vegetarian.", "I'm vegetarian.")
    ]
    lines = memory_log(caplog)
    assert sum(line.startswith("Memory: not saved") for line in lines) == 5
    assert any("not a fact about the user" in line for line in lines)
    assert any("extraction output unusable" in line for line in lines)


async def test_a_wish_copied_as_the_user_asked_it_is_kept_as_theirs(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """The local model wrote the user's "Please always answer in British English." as the fact
    itself, which was refused as not about the user: the wish was lost."""
    wish = {"op": "add", "fact": "Please always answer in British English.", "sentences": [2]}
    await tell(client, model, chat_services, "Hi! Please always answer in British English.", wish)
    assert [(m["content"], m["quote"]) for m in await memories(client)] == [
        (
            "The user wants you to always answer in British English.",
            "Please always answer in British English.",
        )
    ]


async def test_a_wish_the_model_put_in_other_words_is_kept_in_the_users(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """In a keyless trial the local model read "Keep your answers brief from now on, I read them
    on my phone." as "The user wants short replies.", which shares no word with it ("short" is
    not "brief"), so the wish was refused and lost. The user's own sentence is the wish."""
    said = "Thanks! Keep your answers brief from now on, I read them on my phone."
    wish = {"op": "add", "fact": "The user wants short replies.", "sentences": [2]}
    await tell(client, model, chat_services, said, wish)
    assert [(m["content"], m["quote"]) for m in await memories(client)] == [
        (
            "The user wants you to keep your answers brief from now on, they read them on their"
            " phone.",
            "Keep your answers brief from now on, I read them on my phone.",
        )
    ]
    # A made-up wish still has no sentence to stand on.
    await tell(
        client, model, chat_services, "What is the capital of Peru? Keep it short.",
        {"op": "add", "fact": "The user wants replies in French.", "sentences": [2]},
    )  # fmt: skip
    assert len(await memories(client)) == 1


async def test_a_fact_the_user_tells_of_we_is_kept_in_their_words(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    chat_services: Services,
    empty: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seen in a keyless trial: "We're both vegetarian." came back from the local model as "They
    are both vegetarian." and was refused as not about the user, so a vegetarian was later offered
    steak. A plural fact the user tells with "we" or "our" is kept as what they said; a plural one
    about other people ("They have a bakery.", of the user's sister) is still refused."""
    caplog.set_level("INFO", logger="resolveai.memory")
    model.push({"text": "Have a great trip!"}, {"text": "Nice."})
    model.push_for(
        "memory",
        ops(
            {"op": "add", "fact": "The user's wife is Sara.", "sentences": [1]},
            {"op": "add", "fact": "They are both vegetarian.", "sentences": [2]},
        ),
        ops(
            {"op": "add", "fact": "The user's sister lives in Rome.", "sentences": [1]},
            {"op": "add", "fact": "They have a bakery.", "sentences": [2]},
            {"op": "add", "fact": "They are Italian.", "sentences": [9]},
        ),
    )
    await send_each(
        client, chat_services,
        "I'm off to Japan with my wife Sara. We're both vegetarian.",
        "My sister lives in Rome. They have a bakery. We met there in May.",
    )  # fmt: skip
    assert await saved_with_quotes(client) == [
        ('The user said: "We\'re both vegetarian."', "We're both vegetarian."),
        ("The user's sister lives in Rome.", "My sister lives in Rome."),
        ("The user's wife is Sara.", "I'm off to Japan with my wife Sara."),
    ]
    lines = memory_log(caplog)
    assert sum("not a fact about the user" in line for line in lines) == 2, lines


async def test_a_fact_the_model_tells_of_the_user_by_name_is_the_users(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    chat_services: Services,
    empty: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seen in a keyless trial: from "Bonjour ! Je m'appelle Luc, je suis infirmier à Lyon et j'ai
    deux chats." the local model saved "The user's name is Luc." but wrote "Luc works as an
    infirmier in Lyon." and "Luc has two cats.", both refused as not about the user. A fact told
    of the name the user gave, in the same message or before, is theirs; one of another name
    is not."""
    caplog.set_level("INFO", logger="resolveai.memory")
    model.push({"text": "Nice to meet you, Luc!"}, {"text": "Cute!"}, {"text": "Nice."})
    model.push_for(
        "memory",
        ops(
            {"op": "add", "fact": "The user's name is Luc Martin.", "sentences": [1]},
            {"op": "add", "fact": "Luc works as a nurse in Lyon.", "sentences": [2]},
        ),
        ops({"op": "add", "fact": "Luc Martin's cats are called Tom and Lou.", "sentences": [1]}),
        ops({"op": "add", "fact": "Paul lives in Nice.", "sentences": [1]}),
    )
    await send_each(
        client, chat_services,
        "I'm Luc Martin. I work as a nurse in Lyon.",
        "My cats are called Tom and Lou.",  # the name is a memory by now
        "Paul, who I met at work, lives in Nice.",
    )  # fmt: skip
    assert await saved_with_quotes(client) == [
        ("The user works as a nurse in Lyon.", "I work as a nurse in Lyon."),
        ("The user's cats are called Tom and Lou.", "My cats are called Tom and Lou."),
        ("The user's name is Luc Martin.", "I'm Luc Martin."),
    ]
    lines = memory_log(caplog)
    assert sum("not a fact about the user" in line for line in lines) == 1, lines


async def test_a_fact_told_of_someone_the_user_named_as_theirs_is_about_the_user(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    chat_services: Services,
    empty: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seen in a keyless trial: from "Hi, I'm Priya. My daughter Mira turns 7 on January 14, and
    I'm planning her party." the local model saved "The user has a daughter named Mira." but wrote
    "Mira turns 7 on January 14, and Priya is planning her party.", refused as not about the user,
    so "How many days until Mira's birthday?" got a made-up answer. Someone the user calls "my
    daughter Mira" is the user's daughter; the user's own name is the user; a name the message
    gives no relation to is still not the user's."""
    caplog.set_level("INFO", logger="resolveai.memory")
    model.push({"text": "Happy early birthday to Mira!"}, {"text": "Nice."})
    model.push_for(
        "memory",
        ops(
            {"op": "add", "fact": "The user's name is Priya.", "sentences": [1]},
            {"op": "add", "fact": "The user has a daughter named Mira.", "sentences": [2]},
            {"op": "add", "fact": "Mira turns 7 on January 14, and Priya is planning her party.",
             "sentences": [2]},
        ),
        ops(
            {"op": "add", "fact": "Jo's birthday is on 9 October.", "sentences": [1]},
            {"op": "add", "fact": "Sam lives in Leeds.", "sentences": [2]},
        ),
    )  # fmt: skip
    await send_each(
        client, chat_services,
        "Hi, I'm Priya. My daughter Mira turns 7 on January 14, and I'm planning her party.",
        "My best friend, Jo, has her birthday on 9 October. Sam lives in Leeds.",
    )  # fmt: skip
    quote = "My daughter Mira turns 7 on January 14, and I'm planning her party."
    assert await saved_with_quotes(client) == [
        ("The user has a daughter named Mira.", quote),
        ("The user's best friend Jo's birthday is on 9 October.",
         "My best friend, Jo, has her birthday on 9 October."),
        ("The user's daughter Mira turns 7 on January 14, and the user is planning her party.",
         quote),
        ("The user's name is Priya.", "Hi, I'm Priya."),
    ]  # fmt: skip
    lines = memory_log(caplog)
    assert sum("not a fact about the user" in line for line in lines) == 1, lines


async def test_a_known_fact_does_not_silence_a_new_one(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """Measured with the local model: with "The user's daughter Mira turns 7 on January 14."
    known, "My son Tom turns 5 on 2 February." and 6 more new facts about family gave no fact
    (read as told already). A statement of the user's that gave none while known facts were
    shown is read once more without them; a question is not."""
    model.push({"text": "Noted."}, {"text": "Noted."}, {"text": "Sure."})
    model.push_for(
        "memory",
        ops({"op": "add", "fact": "The user's daughter Mira turns 7 on January 14.",
             "sentences": [1]}),
        ops(),
        ops({"op": "add", "fact": "The user's son Tom turns 5 on 2 February.", "sentences": [1]}),
        ops(),
    )  # fmt: skip
    await send_each(
        client, chat_services, "My daughter Mira turns 7 on January 14.",
        "My son Tom turns 5 on 2 February.", "Should I get my son Tom a bike for his birthday?",
    )  # fmt: skip
    assert [m["content"] for m in await memories(client)] == [
        "The user's son Tom turns 5 on 2 February.",
        "The user's daughter Mira turns 7 on January 14.",
    ]
    shown = [call["messages"][-1]["content"] for call in model.own_calls["memory"]]
    assert len(shown) == 4, shown
    assert "M1: The user's daughter Mira" in shown[1] and "M1:" not in shown[2]
    assert "M1: The user's son Tom" in shown[3] or "M2: The user's son Tom" in shown[3]


@pytest.mark.parametrize(
    ("known", "said", "copied", "new"),
    [
        (
            ("I live in Glasgow.", "The user lives in Glasgow."),
            "Actually we just moved to Edinburgh last month.",
            "supersede",
            "The user lives in Edinburgh.",
        ),
        (
            ("I'm vegetarian.", "The user is vegetarian."),
            "I'm not vegetarian any more, I eat fish now.",
            "update",
            "The user is not vegetarian any more.",
        ),
        # Added as new, the copy is not put to the change check beside itself.
        (
            ("I teach maths.", "The user works as a teacher."),
            "I quit teaching, I'm a chef now.",
            "add",
            "The user works as a chef.",
        ),
    ],
    ids=["not in the message", "denied by it", "added again"],
)
async def test_a_known_fact_copied_in_place_of_a_change_does_not_hide_it(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    chat_services: Services,
    empty: None,
    known: tuple[str, str],
    said: str,
    copied: str,
    new: str,
) -> None:
    """Seen in keyless trials: with "The user lives in Glasgow." known, the local model read
    "Actually we just moved to Edinburgh last month." as a supersede of it whose fact was the
    known one again, refused as not stated; nothing was learnt and Glasgow stayed current. With
    "The user is vegetarian." known, "I'm not vegetarian any more…" became an update to the same
    text (refused: the message denies it). A reading that gave only facts the message does not
    tell is read once more without the known facts (then a change of the known memory)."""
    await tell_each(client, model, chat_services, [known])
    model.push({"text": "Noted."})
    model.push_for(
        "memory",
        ops(
            {"op": copied, "fact": known[1], "sentences": [1]}
            | ({} if copied == "add" else {"memory": "M1"})
        ),
        ops({"op": "add", "fact": new, "sentences": [1], "memory": "M1"}),
        *changes(False),
    )
    await send(client, said)
    await extractions_done(chat_services)
    assert [m["content"] for m in await memories(client)] == [new]
    closed = [m for m in await memories(client, include_superseded="true") if m["valid_to"]]
    assert [(m["content"], m["quote"]) for m in closed] == [(known[1], known[0])]
    shown = [call["messages"][-1]["content"] for call in model.own_calls["memory"]]
    assert len(shown) == 4, shown
    assert f"M1: {known[1]}" in shown[1]
    # The second reading saw no known fact, so its "M1" names none: the change check decided.
    assert "M1:" not in shown[2] and "(none yet)" in shown[2]
    assert known[1][9:] in shown[3] and new[9:] in shown[3]


async def test_a_repeated_fact_is_read_once(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    """A statement whose reading is a known fact the message does state ("I still live in
    Glasgow.") is not read a second time."""
    await tell_each(
        client, model, chat_services, [("I live in Glasgow.", "The user lives in Glasgow.")]
    )
    model.push({"text": "Nice."})
    model.push_for(
        "memory", ops({"op": "add", "fact": "The user lives in Glasgow.", "sentences": [1]})
    )
    await send(client, "I still live in Glasgow.")
    await extractions_done(chat_services)
    assert [m["content"] for m in await memories(client)] == ["The user lives in Glasgow."]
    assert len(model.own_calls["memory"]) == 2


@pytest.mark.parametrize(
    ("said", "facts", "kept"),
    [
        # A number the user did not say.
        (
            "I have 3 cats. How many children do I have?",
            [("The user has two children.", 2), ("The user has three cats.", 1)],
            ("The user has three cats.", "I have 3 cats."),
        ),
        # The answer to the user's own question.
        (
            "What's my favourite colour? Any recipes, since I'm vegan?",
            [("The user's favourite colour is blue.", 1), ("The user is vegan.", 2)],
            ("The user is vegan.", "Any recipes, since I'm vegan?"),
        ),
    ],
    ids=["a number the user did not say", "an answer to the user's question"],
)
async def test_extraction_stores_only_what_the_message_tells(
    client: httpx.AsyncClient,
    model: ScriptedProvider,
    chat_services: Services,
    empty: None,
    said: str,
    facts: list[tuple[str, int]],
    kept: tuple[str, str],
) -> None:
    model.push({"text": "Noted."})
    model.push_for(
        "memory", ops(*({"op": "add", "fact": fact, "sentences": [n]} for fact, n in facts))
    )
    await send(client, said)
    await extractions_done(chat_services)
    assert [(m["content"], m["quote"]) for m in await memories(client)] == [kept]


async def test_a_message_that_tells_nothing_about_the_user_is_not_read_for_memories(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    model.push({"text": "Whiskers."})
    calls = len(model.own_calls["memory"])
    await send(client, "What is a good name for a small grey cat?")
    assert await memory_jobs.pending(chat_services.database.pool) == 0
    await extractions_done(chat_services)
    assert len(model.own_calls["memory"]) == calls
    # A message that does tell is read as before.
    cat = {"op": "add", "fact": "The user has a cat named Tom.", "sentences": [1]}
    await tell(client, model, chat_services, "What is a good name for my cat Tom's sister?", cat)
    assert [m["content"] for m in await memories(client)] == ["The user has a cat named Tom."]


async def test_a_failed_extraction_is_retried_and_nothing_is_half_written(
    model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    model.push({"text": "Hello Ana."})
    model.push_for(
        "memory",
        {"error": "utility model unavailable"},
        ops({"op": "add", "fact": "The user's name is Ana.", "sentences": [1]}),
    )
    # Straight through the runner: no worker is woken, this test runs the queue itself.
    turn = await start_turn(
        chat_services, None, "My name is Ana.", use_web=False, user_id=LOCAL_USER_ID
    )
    assert [e["type"] async for e in stream_turn(turn)][-1] == "done"
    pool = chat_services.database.pool
    assert await memory_jobs.pending(pool) == 1
    await MemoryWorker(chat_services).run_pending()
    # Failed once, it waits before its retry: a keyless trial's local model, busy with replies,
    # refused one extraction three times within a second, and it was dropped.
    assert len(model.own_calls["memory"]) == 1
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT claimed_until - now() FROM memory_jobs")).fetchone()
    assert timedelta(seconds=25) < row[0] <= timedelta(seconds=memory_jobs.RETRY_SECONDS)
    await MemoryWorker(chat_services).run_pending()  # not due yet: nothing runs
    assert len(model.own_calls["memory"]) == 1
    async with pool.connection() as conn:
        await conn.execute("UPDATE memory_jobs SET claimed_until = now() - interval '1 second'")
    await MemoryWorker(chat_services).run_pending()
    await extractions_done(chat_services)
    assert len(model.own_calls["memory"]) == 2
    async with pool.connection() as conn:
        rows = await (await conn.execute("SELECT content, quote FROM memories")).fetchall()
    assert rows == [("The user's name is Ana.", "My name is Ana.")]


# --- recall, pause, temporary chats, tools -------------------------------------------------------


async def seed(client, model, chat_services, fact: str, said: str) -> str:
    """Say `said` in a new chat and have extraction store `fact`; returns the chat id."""
    model.push({"text": "Noted."})
    model.push_for("memory", ops({"op": "add", "fact": fact, "sentences": [1]}))
    events = await send(client, said)
    await extractions_done(chat_services)
    return events[0]["chat_id"]


async def test_pause_and_temporary_chats_neither_read_nor_write_memory(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    await seed(client, model, chat_services, "The user plays the cello.", "I play the cello.")
    model.push({"text": "You play the cello."})
    await send(client, "What instrument do I play?")
    assert "The user plays the cello." in last_prompt(model)
    assert {"save_memory", "retrieve_memory"} <= tools_offered(model)
    calls_before = len(model.own_calls["memory"])
    await extractions_done(chat_services)
    calls_before = len(model.own_calls["memory"])

    # Temporary chat: no recall, no memory tools, no extraction.
    model.push({"text": "I don't know."})
    response = await client.post(
        "/api/messages", json={"content": "What instrument do I play?", "temporary": True}
    )
    events = [
        json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")
    ]
    assert events[0]["type"] == "chat" and events[0]["temporary"] is True
    assert "<memories>" not in last_prompt(model)
    assert not {"save_memory", "retrieve_memory"} & tools_offered(model)
    assert "Memory is off in this chat" in model.calls[-1]["messages"][0]["content"]
    chats = (await client.get("/api/chats")).json()
    assert next(c for c in chats if c["chat_id"] == events[0]["chat_id"])["temporary"] is True
    # Only a new chat can be temporary.
    refused = await client.post(
        "/api/messages",
        json={"content": "hi", "temporary": True, "chat_id": events[0]["chat_id"]},
    )
    assert refused.status_code == 422 and "temporary" in refused.json()["error"]

    # Paused: the same for every chat, until unpaused.
    assert (await client.patch("/api/settings", json={"memory_paused": True})).json()[
        "memory_paused"
    ] is True
    assert (await client.get("/api/config")).json()["memory"] == {"paused": True}
    model.push({"text": "I can't recall."})
    await send(client, "I also play the piano. What instrument do I play?")
    assert "<memories>" not in last_prompt(model)
    assert not {"save_memory", "retrieve_memory"} & tools_offered(model)
    await extractions_done(chat_services)
    assert len(model.own_calls["memory"]) == calls_before
    assert await memory_jobs.pending(chat_services.database.pool) == 0
    assert (await client.patch("/api/settings", json={"memory_paused": False})).status_code == 200
    assert (await client.patch("/api/settings", json={"memory_paused": "maybe"})).status_code == 422
    assert [m["content"] for m in await memories(client)] == ["The user plays the cello."]


async def test_the_memory_tools_are_a_capability_of_the_deployment(settings: Settings) -> None:
    from core.llm_router import plan_models

    keyless = plan_models(settings)  # no keys: every role on the local model
    assert keyless.capability("chat", "memory_tools") is False
    assert keyless.deployments("memory") == keyless.deployments("utility")
    scripted = plan_models(settings.model_copy(update={"models_config": SCRIPTED_MODELS}))
    assert scripted.capability("chat", "memory_tools") is True


# --- the memory API ------------------------------------------------------------------------------


async def test_memory_api_lists_edits_deletes_exports_and_forgets(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    chat_a = await seed(client, model, chat_services, "The user has a dog named Pixel.",
                        "I have a dog named Pixel.")  # fmt: skip
    await seed(client, model, chat_services, "The user works as a nurse.", "I work as a nurse.")
    listing = (await client.get("/api/memories")).json()
    assert listing["total"] == 2
    assert set(listing["memories"][0]) == {
        "memory_id", "content", "quote", "message_id", "chat_id", "valid_from", "valid_to",
        "superseded_by", "created_at", "updated_at",
    }  # fmt: skip
    dog = next(m for m in listing["memories"] if "Pixel" in m["content"])
    assert dog["chat_id"] == chat_a
    assert [m["content"] for m in await memories(client, q="pixel")] == [dog["content"]]
    assert [m["content"] for m in await memories(client, q="NURSE")] == [
        "The user works as a nurse."
    ]
    assert await memories(client, q="100%_") == []
    page = (await client.get("/api/memories", params={"limit": 1, "offset": 1})).json()
    assert len(page["memories"]) == 1 and page["total"] == 2

    # Edit: the new wording is what search finds (re-embedded).
    url = f"/api/memories/{dog['memory_id']}"
    edited = await client.patch(url, json={"content": "The user has a beagle named Pixel."})
    assert edited.status_code == 200 and edited.json()["quote"] == "I have a dog named Pixel."
    model.push({"text": "A beagle."})
    await send(client, "Tell me about my beagle Pixel.")
    assert "The user has a beagle named Pixel." in last_prompt(model)
    # A quote must still be the user's words.
    bad = await client.patch(url, json={"quote": "I have a cat named Pixel"})
    assert bad.status_code == 422 and "not something the user said" in bad.json()["error"]
    good = await client.patch(url, json={"quote": "a dog named pixel"})
    assert good.json()["quote"] == "a dog named Pixel"
    nul = await client.get("/api/memories", params={"q": "a\x00b"})
    assert nul.status_code == 422 and "NUL" in nul.json()["error"]
    for body in (
        {},
        {"content": "   "},
        {"content": "x" * 501},
        {"content": 5},
        {"content": "a\x00b"},
    ):
        response = await client.patch(url, json=body)
        assert response.status_code == 422 and "error" in response.json(), body
    # No way to create a memory through the API.
    assert (await client.post("/api/memories", json={"content": "x"})).status_code == 405

    for method in ("get", "patch", "delete"):
        missing = await client.request(
            method, f"/api/memories/{uuid.uuid4()}", json={"content": "x"}
        )
        assert missing.status_code == 404 and "No memory" in missing.json()["error"]
    assert (await client.get("/api/memories/not-an-id")).status_code == 422

    export = await client.get("/api/memories/export")
    assert "attachment" in export.headers["content-disposition"]
    assert len(export.json()["memories"]) == 2

    # Deleting the chat, forgetting what came from it.
    assert (await client.delete(f"/api/chats/{chat_a}?forget_memories=true")).status_code == 204
    assert [m["content"] for m in await memories(client)] == ["The user works as a nurse."]

    # Forget everything: only with the token of what the user last saw.
    token = (await client.get("/api/memories")).json()["forget_token"]
    await seed(client, model, chat_services, "The user likes jazz.", "I like jazz.")
    stale = await client.delete("/api/memories", params={"confirm": token})
    assert stale.status_code == 409 and "changed" in stale.json()["error"]
    assert (await client.delete("/api/memories")).status_code == 422
    token = (await client.get("/api/memories")).json()["forget_token"]
    assert (await client.delete("/api/memories", params={"confirm": token})).json() == {
        "deleted": 2
    }
    assert await memories(client, include_superseded="true") == []
    one = await client.delete(f"/api/memories/{dog['memory_id']}")
    assert one.status_code == 404


async def test_deleting_a_chat_keeps_its_memories_unless_asked(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services, empty: None
) -> None:
    chat_id = await seed(client, model, chat_services, "The user is left-handed.",
                         "I am left-handed.")  # fmt: skip
    assert (await client.delete(f"/api/chats/{chat_id}")).status_code == 204
    [kept] = await memories(client)
    assert kept["content"] == "The user is left-handed." and kept["quote"] == "I am left-handed."
    assert kept["chat_id"] is None and kept["message_id"] is None
    # Its evidence is gone, so its quote can no longer change.
    response = await client.patch(f"/api/memories/{kept['memory_id']}", json={"quote": "left"})
    assert response.status_code == 422
