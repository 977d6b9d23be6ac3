"""The calculator for a chat model without tools (the local model): a message with arithmetic in
it gets the exact result before the model answers. Real database, embedder and graph; the model
scripted, its capabilities those of the local model."""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from chat.arithmetic import asks_for_arithmetic, written_out
from chat.runner import start_turn, stream_turn
from core import chat_store, memory_store
from core.accounts import LOCAL_USER_ID
from core.services import Services
from tests.scripted_model import ScriptedProvider


def without_tools(services: Services) -> Services:
    plan = copy.deepcopy(services.model_plan)
    plan.capabilities["scripted/chat"] = {"tools": False, "memory_tools": False}
    return dataclasses.replace(services, model_plan=plan)


async def run(services: Services, text: str) -> list[dict[str, Any]]:
    return await run_in(services, None, text)


async def run_in(services: Services, chat: uuid.UUID | None, text: str) -> list[dict[str, Any]]:
    """`text` sent in `chat` (None: a new one), the turn's events."""
    turn = await start_turn(services, chat, text, use_web=False, user_id=LOCAL_USER_ID)
    events = [event async for event in stream_turn(turn)]
    assert events[-1]["type"] == "done"
    return events


def chat_id(events: list[dict[str, Any]]) -> uuid.UUID:
    return uuid.UUID(next(e["chat_id"] for e in events if e["type"] == "chat"))


def days_until(month: int, day: int) -> tuple[int, str]:
    """The days from today to the next `day` of `month`, and the sum as the calculator shows
    it ("date(2026,12,25) - date(2026,12,7) = 18 days")."""
    today = datetime.now(UTC).date()  # no time zone known: the user's date is UTC's
    then = date(today.year, month, day)
    then = then if then >= today else date(today.year + 1, month, day)
    days = (then - today).days
    return days, f"{then:date(%Y,%-m,%-d)} - {today:date(%Y,%-m,%-d)} = {days} days"


async def remember(services: Services, said: str, fact: str) -> None:
    """`fact` stored as a memory of the user's message `said`, in a chat of its own."""
    pool = services.database.pool
    chat = await chat_store.create_chat(pool)
    message = await chat_store.add_message(pool, chat["chat_id"], "user", said)
    saved = await memory_store.save_grounded_memory(
        pool, services.embedder, fact, said, message["message_id"]
    )
    assert saved.saved


def expression(text: str) -> dict[str, str]:
    return {"text": json.dumps({"expression": text})}


async def test_a_sum_is_computed_before_a_model_without_tools_answers(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial: "What is 17.5% of 2,340?" got 418.5 from the local model (it is
    409.5). The utility model writes the expression, the calculator computes it, the user sees
    the step, the chat model answers with the result in its message, and the reply is saved with
    the calculator call."""
    services = without_tools(chat_services)
    model.push(expression("17.5/100*2340"), {"text": "17.5% of 2,340 is 409.5."})
    events = await run(services, "What is 17.5% of 2,340?")
    assert [c["model"] for c in model.calls] == ["utility", "chat"]
    asked = model.calls[0]
    assert asked["response_format"]["json_schema"]["name"] == "arithmetic"
    assert asked["watched"]  # on the local model: before background work, never refused for it
    assert "What is 17.5% of 2,340?" in asked["messages"][-1]["content"]
    answer = model.calls[1]
    assert answer["tools"] is None  # still no tools offered
    said = answer["messages"][-1]
    assert said["role"] == "user" and said["content"].startswith("What is 17.5% of 2,340?")
    assert "17.5/100*2340 = 409.5" in said["content"]
    assert not [m for m in answer["messages"] if m["role"] == "tool"]
    steps = [e["text"] for e in events if e["type"] == "step"]
    assert "Calculating 17.5/100*2340 = 409.5" in steps
    saved = await chat_store.list_messages(services.database.pool, chat_id(events))
    assert [(c["name"], c["args"]) for c in saved[-1]["tool_calls"]] == [
        ("calculator", {"expression": "17.5/100*2340"})
    ]


@pytest.mark.parametrize(
    ("written", "computed"),
    [
        ("5000*(1+0.04)^10", "5000*(1+0.04)**10 = 7,401.22142459172"),
        ("12 × 4 ÷ 3", "12 * 4 / 3 = 16"),
    ],
)
async def test_a_sum_written_in_the_usual_signs_is_computed(
    chat_services: Services, model: ScriptedProvider, written: str, computed: str
) -> None:
    """Seen in a keyless trial: for "If I invest 5000 at 4% a year, how much will I have after 10
    years?" the local model wrote "5000*(1+0.04)^10", which the calculator refused ("^" is not
    its power), so the model computed it itself: $7401.27 (it is $7,401.22). Written by the
    model for the calculator, "^" is a power, "×" a product and "÷" a quotient."""
    model.push(expression(written), {"text": "Done."})
    events = await run(
        without_tools(chat_services),
        "If I invest 5000 at 4% a year, how much will I have after 10 years?",
    )
    assert f"Calculating {computed}" in [e["text"] for e in events if e["type"] == "step"]
    assert computed in model.calls[1]["messages"][-1]["content"]


async def test_days_between_dates_are_counted_by_the_calculator(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial: "How many days are there between March 3 2026 and July 19
    2026?" got 30 from the local model (it is 138). The model writing the expression is told
    today's date, and the calculator counts the days."""
    model.push(expression("date(2026,7,19) - date(2026,3,3)"), {"text": "138 days."})
    await run(
        without_tools(chat_services),
        "How many days are there between March 3 2026 and July 19 2026?",
    )
    today = datetime.now(UTC).date()  # no time zone known: the user's date is UTC's
    assert f"Today is {today:%A, %d %B %Y}" in model.calls[0]["messages"][0]["content"]
    assert "date(2026,7,19) - date(2026,3,3) = 138" in model.calls[1]["messages"][-1]["content"]


async def test_days_until_a_date_from_today_are_counted_from_the_date_read_by_code(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial on 7 December: "How many days until Christmas?" got 24 from the
    local model (it is 18), and asked for the expression it wrote 2027's Christmas. The date is
    read by code (core/date_spans.py): no model writes the sum."""
    days, worked_out = days_until(12, 25)
    model.push({"text": f"{days} days."})
    events = await run(without_tools(chat_services), "How many days until Christmas?")
    assert [c["model"] for c in model.calls] == ["chat"]
    assert worked_out in model.calls[0]["messages"][-1]["content"]
    assert f"Calculating {worked_out}" in [e["text"] for e in events if e["type"] == "step"]


async def test_weeks_until_a_date_are_told_in_weeks_and_days(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial: "How many weeks until Christmas?" showed "… / 7 =
    2.57142857142857", which the model then repeated. The days are counted, and told in whole
    weeks and days as a person would."""
    days, worked_out = days_until(12, 25)
    weeks, rest = divmod(days, 7)
    in_weeks = " and ".join(
        f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((weeks, "week"), (rest, "day")) if n
    )
    model.push({"text": f"{in_weeks}."})
    events = await run(without_tools(chat_services), "How many weeks until Christmas?")
    shown = f"{worked_out}, that is {in_weeks}" if weeks else worked_out
    assert shown in model.calls[0]["messages"][-1]["content"]
    assert f"Calculating {shown}" in [e["text"] for e in events if e["type"] == "step"]


async def test_a_unit_conversion_is_computed_from_the_units_read_by_code(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial: "How many kilometres is 26.2 miles?" got 41.95 from the local
    model (it is 42.16). The units are read by code (core/unit_conversions.py), the calculator
    converts, and the result goes to the model in the units asked for; no model writes the sum."""
    model.push({"text": "26.2 miles is 42.16 kilometres."})
    events = await run(without_tools(chat_services), "How many kilometres is 26.2 miles?")
    assert [c["model"] for c in model.calls] == ["chat"]
    worked_out = "26.2 * 1.609344 = 42.1648128 kilometres"
    assert worked_out in model.calls[0]["messages"][-1]["content"]
    assert f"Calculating {worked_out}" in [e["text"] for e in events if e["type"] == "step"]


async def test_days_until_a_day_never_told_are_not_guessed(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial: with only the user's name remembered, "How many days until Mira's
    birthday?" got "There are 10 days until Mira's birthday." The model is told that no memory or
    message gives that day, and to ask for it; a day said earlier in the chat gets no such note,
    nor does a date it can read."""
    model.push({"text": "When is Mira's birthday?"}, {"text": "Noted!"}, {"text": "38 days."})
    services = without_tools(chat_services)
    first = await run(services, "How many days until Mira's birthday?")
    said = model.calls[0]["messages"][-1]["content"]
    assert "do not guess" in said and "Mira's birthday" in said
    assert not [e for e in first if e["type"] == "step" and e["text"].startswith("Calculating")]
    chat = chat_id(first)
    await run_in(services, chat, "My daughter Mira turns 7 on January 14.")
    await run_in(services, chat, "So how many days until Mira's birthday?")
    assert "do not guess" not in model.calls[2]["messages"][-1]["content"]


async def test_when_a_day_never_told_is_asked_it_is_not_guessed(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial, nothing remembered: "When is my daughter's birthday?" got
    "December 15th". The model is told that nothing gives that day; once the chat says it, not."""
    model.push({"text": "I don't know, when is it?"}, {"text": "Noted!"}, {"text": "14 January."})
    services = without_tools(chat_services)
    first = await run(services, "When is my daughter's birthday?")
    said = model.calls[0]["messages"][-1]["content"]
    assert "do not guess" in said and "my daughter's birthday" in said
    chat = chat_id(first)
    await run_in(services, chat, "My daughter Mira turns 7 on January 14.")
    await run_in(services, chat, "Remind me, when is my daughter's birthday?")
    assert "do not guess" not in model.calls[2]["messages"][-1]["content"]


async def test_days_until_a_day_told_before_are_counted_from_its_memory(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial: "My sister Ana's birthday is on March 3." saved as a memory, then
    in a new chat "How many days until my sister's birthday?" got 10 (it was 86)."""
    await remember(
        chat_services, "My sister Ana's birthday is on March 3.",
        "The user's sister Ana's birthday is on March 3.",
    )  # fmt: skip
    days, worked_out = days_until(3, 3)
    model.push({"text": f"{days} days."})
    events = await run(without_tools(chat_services), "How many days until my sister's birthday?")
    assert [c["model"] for c in model.calls] == ["chat"]
    said = model.calls[0]["messages"][-1]["content"]
    assert worked_out in said and "Ana's birthday is on March 3" in said
    assert f"Calculating {worked_out}" in [e["text"] for e in events if e["type"] == "step"]


async def test_the_date_of_a_day_told_before_is_read_from_its_memory(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen in a keyless trial: with "The user's son Tom turns 5 on 2 February." remembered,
    "When is my son's birthday?" got "Tom's birthday is on February 5." The model is given the
    date read from the memory, at its next occurrence."""
    await remember(
        chat_services, "My son Tom turns 5 on 2 February.",
        "The user's son Tom turns 5 on 2 February.",
    )  # fmt: skip
    days, _ = days_until(2, 2)
    then = datetime.now(UTC).date() + timedelta(days=days)
    model.push({"text": "On 2 February."})
    await run(without_tools(chat_services), "When is my son's birthday?")
    said = model.calls[0]["messages"][-1]["content"]
    assert f"{then:%A} {then.day} February {then.year}" in said and "do not guess" not in said


async def test_the_jsons_braces_written_into_the_expression_are_left_out(
    chat_services: Services, model: ScriptedProvider
) -> None:
    """Seen on the local model: {"expression": "120*(1-35/100)}"}."""
    model.push(expression("120*(1-35/100)}"), {"text": "You pay 78."})
    await run(without_tools(chat_services), "A jacket costs 120 and is 35% off. What do I pay?")
    assert "120*(1-35/100) = 78" in model.calls[1]["messages"][-1]["content"]


@pytest.mark.parametrize(
    "written",
    ["", "Paris", "lambda x, y: x + y", "not json"],
    ids=["no expression", "a word", "code", "not JSON"],
)
async def test_no_sum_the_calculator_accepts_leaves_the_turn_as_it_was(
    chat_services: Services, model: ScriptedProvider, written: str
) -> None:
    services = without_tools(chat_services)
    model.push(
        expression(written) if written != "not json" else {"text": written}, {"text": "Sure."}
    )
    events = await run(services, "What is 3 times the number of planets?")
    assert [c["model"] for c in model.calls] == ["utility", "chat"]
    assert "The calculator" not in model.calls[1]["messages"][-1]["content"]
    saved = await chat_store.list_messages(services.database.pool, chat_id(events))
    assert not saved[-1]["tool_calls"]


async def test_a_message_that_is_just_a_sum_needs_no_model_to_write_it(
    chat_services: Services, model: ScriptedProvider
) -> None:
    model.push({"text": "It is 7,006,652."})
    events = await run(without_tools(chat_services), "What's 1,234 × 5,678?")
    assert [c["model"] for c in model.calls] == ["chat"]
    assert "1234 * 5678 = 7,006,652" in model.calls[0]["messages"][-1]["content"]
    steps = [e["text"] for e in events if e["type"] == "step"]
    assert "Calculating 1234 * 5678 = 7,006,652" in steps  # grouped: the model misplaced commas


@pytest.mark.parametrize(
    ("message", "sum_"),
    [
        ("What is 2^10 - 1?", "2**10 - 1"),
        ("Calculate 2^20", "2**20"),
        ("What is 2**8?", "2**8"),
        ("Calculate (3 + 4) x 5", "(3 + 4) * 5"),
        ("2 + 2 = ?", "2 + 2"),
        ("17.5% of 2,340", None),  # a percentage: written by the model
        ("What is 3 times 7?", None),
        ("whatever 2 + 2", None),
        ("2026-03-03", None),
    ],
)
def test_a_sum_written_out_is_taken_as_it_is(message: str, sum_: str | None) -> None:
    assert written_out(message) == sum_


async def test_a_message_without_arithmetic_or_a_model_with_tools_is_not_asked(
    chat_services: Services, model: ScriptedProvider
) -> None:
    model.push({"text": "Gears trade force for speed."}, {"text": "409.5."})
    await run(without_tools(chat_services), "Explain how a bicycle gear works.")
    await run(chat_services, "What is 17.5% of 2,340?")  # it can call the calculator itself
    assert [c["model"] for c in model.calls] == ["chat", "chat"]
    assert model.calls[1]["tools"]  # offered, the calculator among them


@pytest.mark.parametrize(
    ("message", "shows"),
    [
        ("What is 17.5% of 2,340?", True),
        ("If I earn 52,000 a year and pay 22% tax, how much is left per month?", True),
        ("What is 100 - 37?", True),
        ("Calculate 2^10", True),
        ("What is the square root of 144?", True),
        ("What is (3 + 4) * 5?", True),
        ("I have 2 kids aged 5 and 7.", False),
        ("My phone number is 555-1234.", False),
        ("Can we meet at 10-11am on 2026-03-03?", False),
        ("What happened in 1989?", False),
        ("How many days are there between March 3 2026 and July 19 2026?", True),
        ("How many weeks are there from 5 January to 30 March?", True),
        ("How many days until Christmas?", False),  # from today: read by code, not the model
        ("How long ago was 1989?", False),
        ("I slept 8 hours and it's been 3 days since my trip.", False),
        ("Write a function that returns x*y.", False),
        ("Why does `0.1 + 0.2` print 0.30000000000000004?", False),
        ("Fix this:\n```\ntotal = 3 * 4\n```", False),
    ],
)
def test_a_message_shows_arithmetic_by_its_numbers_and_operations(
    message: str, shows: bool
) -> None:
    assert asks_for_arithmetic(message) is shows
