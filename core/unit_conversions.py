"""Unit conversions a message asks for ("How many kilometres is 26.2 miles?", "100°F in Celsius"),
read by code and written as the sum the calculator computes.

The local model converts from memory, and wrongly: in a keyless trial "How many kilometres is 26.2
miles?" got 41.95 (it is 42.16). A message that is nothing but a conversion is read here
(`conversion_question`); pint's unit registry reads the units and gives the factor (and the offset,
for temperatures), so the sum is "26.2 * 1.609344", and the result is told in the units the user
named. Left to the model: currencies (their rates change daily), units without a dimension (angles,
bytes, which pint also reads from words such as "degrees"), and a unit and a number in any other
sentence ("I ran 5 km in 30 minutes").
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

# "26.2", "1,500", "-40", "a" (cup), "one".
_AMOUNT = r"(?P<amount>-?\d[\d,]*(?:\.\d+)?|-?\.\d+|an?|one)"
# A unit as written: a word or a few ("square feet", "miles per hour", "°F", "km/h"), no digits.
_UNIT = r"°?\s?[^\W\d_][^\d?!,;:]{0,30}?"
_AS = r"(?:to|in|into|in terms of|as)"
# The whole message (less "please", "can you" and the closing mark) is the conversion.
_OPENING = (
    r"(?:(?:please|can you|could you)\s+)?"
    r"(?:(?:convert|change|turn)\s+|what(?:['’]s| is| are)\s+|how much is\s+)?"
)
_CONVERSIONS = [
    # "Convert 100°F to Celsius", "150 lbs to kg", "what's 5 feet in cm"
    re.compile(rf"{_OPENING}{_AMOUNT}\s*(?P<source>{_UNIT})\s+{_AS}\s+(?P<target>{_UNIT})", re.I),
    # "How many kilometres is 26.2 miles?", "How many ml in a cup?"
    re.compile(
        rf"{_OPENING}how many\s+(?P<target>{_UNIT})\s+(?:is|are|are there in|are in|in|make"
        rf"|makes|equals?)\s+{_AMOUNT}\s*(?P<source>{_UNIT})",
        re.I,
    ),
]
_CLOSING = re.compile(r"[\s?.!]*(?:please)?[\s?.!]*\Z", re.I)

# Units as people write them, in the names pint knows. Temperatures first: pint reads "degrees" as
# an angle and "F" as a farad.
_SPELLINGS = [
    (re.compile(r"(?:degrees? |° ?)?(?:fahrenheit|f)"), "degF"),
    (re.compile(r"(?:degrees? |° ?)?(?:celsius|centigrade|c)"), "degC"),
    (re.compile(r"fl\.? ?oz|fluid ounces?"), "fluid_ounce"),
    (re.compile(r"nautical miles?"), "nautical_mile"),
    (re.compile(r"light ?years?"), "light_year"),
    (re.compile(r"mpg"), "mile/gallon"),
    (re.compile(r"(?:square|sq\.?) (\w+)"), r"\1**2"),
    (re.compile(r"(\w+) squared"), r"\1**2"),
    (re.compile(r"cubic (\w+)"), r"\1**3"),
]
_TOLD_AS = {"degF": "°F", "degC": "°C"}


@dataclass(frozen=True)
class ConversionQuestion:
    """A conversion a message asks for, as written: "26.2" "miles" to "kilometres"."""

    amount: str
    source: str  # the units as pint reads them ("mile", "degF")
    target: str
    told_in: str  # the units the result is told in: the user's words ("kilometres", "°C")


def conversion_question(message: str) -> ConversionQuestion | None:
    """The conversion `message` is nothing but ("How many kilometres is 26.2 miles?"), else None.
    Reads no unit: `conversion_expression` does."""
    text = _CLOSING.sub("", " ".join(message.split()))
    for pattern in _CONVERSIONS:
        match = pattern.fullmatch(text)
        if match is None:
            continue
        source, target = _unit(match["source"]), _unit(match["target"])
        if source is None or target is None:
            return None
        amount = match["amount"].replace(",", "").lower()
        told_in = _TOLD_AS.get(target, " ".join(match["target"].split()))
        return ConversionQuestion(
            "1" if amount in ("a", "an", "one") else amount, source, target, told_in
        )
    return None


def conversion_expression(question: ConversionQuestion) -> str | None:
    """The calculator's sum for `question` ("26.2 * 1.609344", "(100 - 32) * 5/9"), or None when
    pint does not know a unit, or the two measure different things (a cup is no weight) or
    nothing (angles, bytes). Loads pint's registry on first use (0.3 s): call it off the event
    loop."""
    registry = _registry()
    try:
        source, target = registry.Unit(question.source), registry.Unit(question.target)
    except Exception:  # pint raises several kinds for a word it does not know
        return None
    if source.dimensionless or source.dimensionality != target.dimensionality:
        return None
    offset = registry.Quantity(0, source).to(target).magnitude
    scale = registry.Quantity(1, source).to(target).magnitude - offset
    if not offset:
        return f"{question.amount} * {_factor(scale)}"
    # A temperature. Written as the formula people know when it has one ("(100 - 32) * 5/9" for
    # °F to °C), else the scale then the offset ("20 * 1.8 + 32").
    shift = offset / scale
    if abs(shift - round(shift, 2)) < 1e-9:
        sign = "+" if shift > 0 else "-"
        scaled = "" if math.isclose(scale, 1) else f" * {_factor(scale)}"
        return f"({question.amount} {sign} {abs(round(shift, 2)):g}){scaled}"
    return f"{question.amount} * {_factor(scale)} {'+' if offset > 0 else '-'} {abs(offset):.12g}"


def _factor(number: float) -> str:
    """A factor as the calculator takes it: the small fraction it is when its decimals never end
    ("5/9"), else to 12 significant digits ("1.609344"; pint's own is 0.5555555555555429)."""
    fraction = Fraction(number).limit_denominator(100)
    endless = fraction.denominator // math.gcd(fraction.denominator, 10**6) > 1
    if endless and math.isclose(fraction, number, rel_tol=1e-12):
        return f"{fraction.numerator}/{fraction.denominator}"
    return f"{number:.12g}"


def _unit(written: str) -> str | None:
    """`written` as pint names it, or None when it is more than one word pint could read as a
    product ("fl oz" is femtolitre-ounces to it)."""
    unit = " ".join(written.lower().split()).strip(" .")
    for spelling, name in _SPELLINGS:
        unit = spelling.sub(name, unit) if spelling.fullmatch(unit) else unit
    unit = unit.replace(" per ", "/")
    return None if not unit or " " in unit else unit


@functools.cache
def _registry() -> Any:
    import pint  # 0.3 s to import and read its definitions: only when a conversion is asked

    return pint.UnitRegistry()
