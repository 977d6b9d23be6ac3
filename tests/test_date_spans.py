"""Counts of days from today to a date the user names: the date read by code, the expression
written for the calculator (core/date_spans.py)."""

from __future__ import annotations

from datetime import date

import pytest

from core.calculator import evaluate
from core.date_spans import (
    day_question,
    in_weeks,
    someones_day,
    span_expression,
    span_question,
    told_of,
)

SEVENTH_OF_DECEMBER = date(2026, 12, 7)


def days(
    message: str, today: date = SEVENTH_OF_DECEMBER, memories: tuple[str, ...] = ()
) -> float | None:
    """What the calculator makes of the expression written for `message`, None for none."""
    question = span_question(message)
    expression = span_expression(question, today, memories) if question else None
    return evaluate(expression) if expression else None


@pytest.mark.parametrize(
    ("message", "count"),
    [
        # Seen keyless on 7 December: the model said 24 days, and wrote 2027's Christmas.
        ("How many days until Christmas?", 18),
        ("How many days are left until Christmas Eve?", 17),
        ("How long until New Year?", 25),
        ("How many days to Christmas?", 18),
        ("How many days to go until the 4th of July?", 209),
        ("How many days from now until 25 December?", 18),
        ("How many days between today and Valentine's Day?", 69),
        ("How many days until the end of the year?", 24),
        ("How many days until Christmas, roughly?", 18),
        ("How many nights until Christmas 2027?", 383),
        ("How many days until June 5, 2028?", 546),
        ("How many days is it until March 1st 2027?", 84),
        ("How many weeks until Easter?", 111),  # 28 March 2027, told as weeks by in_weeks
        # Seen: for "since 1 January" the model wrote date(2026,1,1) - date(2026,12,7).
        ("How many days since 1 January?", 340),
        ("How many days since Christmas?", 347),  # the last one: 2025's
        ("How long ago was Halloween?", 37),
        ("How many days ago was 3 March 2026?", 279),
    ],
)
def test_a_span_from_today_is_counted_to_the_nearest_such_date(message: str, count: int) -> None:
    assert days(message) == count


@pytest.mark.parametrize(
    ("days_", "told"),
    [(0, "0 days"), (3, "3 days"), (7, "1 week"), (8, "1 week and 1 day"),
     (18, "2 weeks and 4 days"), (111, "15 weeks and 6 days")],
)  # fmt: skip
def test_days_are_told_in_whole_weeks_and_days(days_: int, told: str) -> None:
    assert in_weeks(days_) == told


def test_after_the_day_itself_the_next_one_is_meant() -> None:
    assert days("How many days until Christmas?", date(2026, 12, 25)) == 0
    assert days("How many days until Christmas?", date(2026, 12, 26)) == 364
    assert days("How many days since Christmas?", date(2026, 12, 26)) == 1


@pytest.mark.parametrize(
    "message",
    [
        "How many days until 3/4?",  # 3 April or 4 March
        "How many days until my birthday?",
        "How many days until I go to Paris on June 5?",
        "How many days until Jan 1 2020?",  # behind today
        "How many days since 1 January 2030?",  # ahead of today
        "How many days did it take to build Rome?",
        "How long does it take to boil an egg?",
        "How many hours until Christmas?",
        "Christmas is in 18 days.",
    ],
)
def test_no_date_it_can_read_the_right_way_round_gives_no_expression(message: str) -> None:
    assert days(message) is None


MEMORIES = (
    "The user's name is Dana. (said on 2026-11-30)",
    "The user's sister Ana's birthday is on March 3. (said on 2026-12-01)",
    "The user's birthday is on the 12th of May. (said on 2026-12-01)",
    "The user moved to Lisbon on 3 March 2025. (said on 2026-12-02)",
    "The user's wedding anniversary is June 5, 2019. (said on 2026-12-02)",
    "The user's daughter Mira turns 7 on January 14. (said on 2026-12-03)",
    "The user's son Leo was born on 2 February 2020. (said on 2026-12-03)",
)


@pytest.mark.parametrize(
    ("message", "count"),
    [
        # Seen keyless: told the birthday in one chat, asked in another, the model said 10.
        ("How many days until my sister's birthday?", 86),
        ("How many days until Ana's birthday?", 86),
        ("How many days until my birthday?", 156),  # the user's, not the sister's
        ("How many days since I moved to Lisbon?", 644),  # the year told is kept
        ("How many days until our wedding anniversary?", 180),  # yearly: the next one
        # Seen keyless: the turning 7 saved, "Mira's birthday" got 10 days from the model.
        ("How many days until Mira's birthday?", 38),
        ("How many days until my daughter's birthday?", 38),
        ("How many days until Leo's birthday?", 57),  # the day he was born, yearly
    ],
)
def test_a_day_told_before_is_counted_from_the_memory_that_names_it(
    message: str, count: int
) -> None:
    assert days(message, memories=MEMORIES) == count
    assert days(message) is None  # without memories, no date


@pytest.mark.parametrize(
    ("message", "memories"),
    [
        ("How many days until my mother's birthday?", MEMORIES),
        ("How many days until my anniversary?", MEMORIES),  # "wedding anniversary" is not it
        # Two birthdays it could be, or two dates in the one memory: which is meant is unclear.
        (
            "How many days until Ana's birthday?",
            ("Ana's birthday is on March 3.", "The user's friend Ana's birthday is on 9 May."),
        ),
        ("How many days until my trip?", ("The user's trip is from 3 May to 10 May.",)),
    ],
)
def test_no_one_memory_with_one_date_gives_no_expression(
    message: str, memories: tuple[str, ...]
) -> None:
    assert days(message, memories=memories) is None


@pytest.mark.parametrize(
    ("message", "someones"),
    [
        ("How many days until Mira's birthday?", True),
        ("How long until my birthday?", True),
        ("How many days since our wedding?", True),
        ("How many days until Mother's Day?", False),  # the calendar's
        ("How many days until New Year's Eve?", False),
        ("How many days until her birthday?", False),  # the chat says whose
        ("How many days until Christmas?", False),
        ("How many days until my birthday on 12 May?", False),  # a date it reads
    ],
)
def test_a_day_of_someones_is_one_only_the_user_can_tell(message: str, someones: bool) -> None:
    question = span_question(message)
    assert question is not None and someones_day(question, SEVENTH_OF_DECEMBER) is someones


@pytest.mark.parametrize(
    ("message", "memories", "messages", "told"),
    [
        ("How many days until Mira's birthday?", MEMORIES, (), True),  # turns 7 on 14 January
        ("How many days until Mira's birthday?", (), ("My daughter Mira turns 7 in May.",), True),
        ("How many days until Mira's birthday?", (), ("When is Mira's birthday?",), True),
        ("How many days until Jo's birthday?", MEMORIES, ("My daughter Mira turns 7.",), False),
        # Only the sister's is known: not the user's own.
        ("How long until my birthday?", MEMORIES[1:2], (), False),
        ("How long until my birthday?", MEMORIES[2:3], (), True),
    ],
)
def test_a_day_is_told_of_by_a_memory_or_a_message_that_names_it(
    message: str, memories: tuple[str, ...], messages: tuple[str, ...], told: bool
) -> None:
    question = span_question(message)
    assert question is not None and told_of(question, memories, messages) is told


@pytest.mark.parametrize(
    ("message", "target"),
    [
        # Seen keyless with nothing remembered: "When is my daughter's birthday?" got "December
        # 15th".
        ("When is my daughter's birthday?", "my daughter's birthday"),
        ("when's Mira's birthday", "Mira's birthday"),
        ("What's the date of our anniversary?", "our anniversary"),
        ("What date is my wedding anniversary?", "my wedding anniversary"),
        ("Do you remember my sister's birthday?", "my sister's birthday"),
        ("What is my birthday?", "my birthday"),
        # Not a day only the user can tell, or not asked when it is.
        ("When is Christmas?", None),
        ("When is Mother's Day?", None),
        ("When is the best time to plant my tomatoes?", None),
        ("What's my name?", None),
        ("Write a poem for my daughter's birthday.", None),
        ("When is my birthday on 12 May?", None),
    ],
)
def test_a_question_asking_when_someones_day_is_names_that_day(
    message: str, target: str | None
) -> None:
    question = day_question(message)
    asked = question.target if question and someones_day(question, SEVENTH_OF_DECEMBER) else None
    assert asked == target
