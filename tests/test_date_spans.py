"""Counts of days from today to a date the user names: the date read by code, the expression
written for the calculator (core/date_spans.py)."""

from __future__ import annotations

from datetime import date

import pytest

from core.calculator import evaluate
from core.date_spans import span_expression, span_question

SEVENTH_OF_DECEMBER = date(2026, 12, 7)


def days(message: str, today: date = SEVENTH_OF_DECEMBER) -> float | None:
    """What the calculator makes of the expression written for `message`, None for none."""
    question = span_question(message)
    expression = span_expression(question, today) if question else None
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
        ("How many weeks until Easter?", 16),  # 28 March 2027: 111 days
        # Seen: for "since 1 January" the model wrote date(2026,1,1) - date(2026,12,7).
        ("How many days since 1 January?", 340),
        ("How many days since Christmas?", 347),  # the last one: 2025's
        ("How long ago was Halloween?", 37),
        ("How many days ago was 3 March 2026?", 279),
    ],
)
def test_a_span_from_today_is_counted_to_the_nearest_such_date(message: str, count: int) -> None:
    assert days(message) == pytest.approx(count, abs=0.01 if "weeks" not in message else 0.2)


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
