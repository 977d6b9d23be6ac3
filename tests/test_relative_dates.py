"""core/relative_dates.py: a memory's "last year" is dated from when the user said it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.relative_dates import absolute_dates

SAID = datetime(2026, 12, 5, 19, 30, tzinfo=UTC)  # a Saturday


@pytest.mark.parametrize(
    ("fact", "expected"),
    [
        ("The user moved to Lisbon last year.", "The user moved to Lisbon in 2025."),
        ("The user started running this year.", "The user started running in 2026."),
        ("The user will retire next year.", "The user will retire in 2027."),
        ("The user went to a support group yesterday.",
         "The user went to a support group on 4 December 2026."),
        ("Yesterday the user adopted a cat.", "On 4 December 2026 the user adopted a cat."),
        ("The user has a dentist appointment tomorrow.",
         "The user has a dentist appointment on 6 December 2026."),
        ("The user got married last month.", "The user got married in November 2026."),
        ("The user starts a new job next month.", "The user starts a new job in January 2027."),
        ("The user has lived in Lisbon since last year.",
         "The user has lived in Lisbon since 2025."),
        ("The user quit smoking two years ago.", "The user quit smoking in 2024."),
        ("The user moved 3 months ago.", "The user moved in September 2026."),
        ("The user broke a leg 10 days ago.", "The user broke a leg on 25 November 2026."),
        ("The user started a course fifteen days ago.",
         "The user started a course on 20 November 2026."),
        ("The user ran a marathon last Sunday.", "The user ran a marathon on 29 November 2026."),
        ("The user visited Rome last week.", "The user visited Rome in the week of 23 November"
         " 2026."),
        # Nothing relative: as it is ("today's" weather, "yearly", "the last year of school").
        ("The user lives in Lisbon.", "The user lives in Lisbon."),
        ("The user is in the last year of school.", "The user is in the last year of school."),
        ("The user works out yearly.", "The user works out yearly."),
    ],
)  # fmt: skip
def test_relative_times_become_dates(fact: str, expected: str) -> None:
    assert absolute_dates(fact, SAID) == expected


def test_months_and_years_roll_over() -> None:
    january = datetime(2027, 1, 10, tzinfo=UTC)
    assert (
        absolute_dates("The user moved last month.", january) == "The user moved in December 2026."
    )
    assert absolute_dates("The user moved 13 months ago.", january) == (
        "The user moved in December 2025."
    )
    march = datetime(2024, 3, 31, tzinfo=UTC)
    assert absolute_dates("The user left yesterday.", march) == "The user left on 30 March 2024."
