"""Unit conversions a message asks for: the units read by code (pint), the conversion written for
the calculator (core/unit_conversions.py)."""

from __future__ import annotations

import pytest

from core.calculator import evaluate
from core.unit_conversions import conversion_expression, conversion_question


def converted(message: str) -> tuple[float, str] | None:
    """What the calculator makes of the expression written for `message`, with the units it is
    told in; None for none."""
    question = conversion_question(message)
    expression = conversion_expression(question) if question else None
    return (float(evaluate(expression)), question.told_in) if expression and question else None


@pytest.mark.parametrize(
    ("message", "value", "told_in"),
    [
        # Seen keyless: the local model said 41.95.
        ("How many kilometres is 26.2 miles?", 42.1648128, "kilometres"),
        ("Convert 100°F to Celsius", 37.7777777777778, "°C"),
        ("What is -40 degrees Fahrenheit in Celsius?", -40.0, "°C"),
        ("20 C to F", 68.0, "°F"),
        ("what's 5 feet in cm", 152.4, "cm"),
        ("150 lbs to kg", 68.0388555, "kg"),
        ("How many ml in a cup?", 236.5882365, "ml"),
        ("How many teaspoons are in 3 tablespoons?", 9.0, "teaspoons"),
        ("Convert 60 mph to km/h.", 96.56064, "km/h"),
        ("1,500 square feet in square metres?", 139.35456, "square metres"),
        ("How many fl oz is 1 litre?", 33.8140227, "fl oz"),
        ("10 stone in pounds", 140.0, "pounds"),
        ("please convert 2.5 hours to minutes", 150.0, "minutes"),
        ("How many miles per hour is 100 kph?", 62.1371192, "miles per hour"),
    ],
)
def test_a_conversion_is_written_for_the_calculator(
    message: str, value: float, told_in: str
) -> None:
    assert converted(message) == (pytest.approx(value, rel=1e-7), told_in)


@pytest.mark.parametrize(
    "message",
    [
        "How many kilometres is 26.2 dollars?",  # no unit
        "Convert 3 cups to grams",  # a volume is no mass (it depends on what is in the cup)
        "20 USD in EUR",  # currencies: rates change daily
        "How many degrees is 2 radians?",  # units without a dimension (angles, bytes) are not read
        "I ran 5 km in 30 minutes",  # not a conversion
        "I have 2 dogs in Lisbon",
        "My son is 4 feet tall, how tall is that in a few years?",
        "How many days until Christmas?",
    ],
)
def test_no_conversion_it_cannot_read_gives_no_expression(message: str) -> None:
    assert converted(message) is None


@pytest.mark.parametrize(
    ("message", "written"),
    [
        ("Convert 100°F to Celsius", "(100 - 32) * 5/9"),  # not pint's 0.5555555555555429
        ("20 C to F", "20 * 1.8 + 32"),
        ("300 kelvin in celsius", "(300 - 273.15)"),
        ("How many kilometres is 26.2 miles?", "26.2 * 1.609344"),
        ("1 foot in yards", "1 * 1/3"),
    ],
)
def test_a_conversion_is_written_as_people_know_it(message: str, written: str) -> None:
    question = conversion_question(message)
    assert question is not None and conversion_expression(question) == written
