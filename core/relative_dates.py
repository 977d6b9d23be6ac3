"""Relative times in a memory, dated from when the user said them.

A memory outlives the chat it came from: "The user moved to Lisbon last year." is wrong a year
later, and a month later "yesterday" means nothing. The extraction prompt asks for dates, but the
local model copies "last year" as the user said it (a keyless trial, stop 40), so the fact is dated
by code from the message's time: "last year" said in 2026 is "in 2025", "yesterday" is "on 4
December 2026". Only the fact changes; its quote stays the user's words. Days are the user's
(the caller gives the time in their time zone).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from core.number_words import UNITS

_NUMBERS = {"a": 1, "an": 1} | {word: n for n, word in enumerate(UNITS) if n}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# A preposition the user put before the time ("since last year"): it stays, in place of ours.
_PREPOSITIONS = "since|from|until|till|by|before|after|in|on|during|around"
_RELATIVE = re.compile(
    rf"(?<![\w'’-])(?:(?P<prep>{_PREPOSITIONS})\s+)?(?:"
    r"(?P<day>yesterday|today|tonight|tomorrow)"
    r"|(?P<which>last|this|next)\s+(?P<unit>year|month|week"
    rf"|{'|'.join(_WEEKDAYS)})"
    rf"|(?P<count>\d+|{'|'.join(_NUMBERS)})\s+(?P<units>years?|months?|weeks?|days?)\s+ago"
    r")(?![\w'’-])",
    re.IGNORECASE,
)
# "the last year of school", "my last week at work": a determiner makes it not a time.
_DETERMINER = re.compile(r"\b(?:the|a|an|my|his|her|their|our|your|its|first|final)\s*\Z", re.I)


def absolute_dates(fact: str, said: datetime) -> str:
    """`fact` with its relative times ("last year", "yesterday", "3 months ago", "last Sunday")
    as dates, counted from `said`."""
    today = said.date()

    def replace(match: re.Match[str]) -> str:
        if _DETERMINER.search(fact, 0, match.start()):
            return match.group()
        preposition, when = _dated(match, today)
        if match.group("prep"):
            preposition = match.group("prep")
        text = f"{preposition} {when}"
        return text[0].upper() + text[1:] if match.group()[0].isupper() else text

    return _RELATIVE.sub(replace, fact)


def _dated(match: re.Match[str], today: date) -> tuple[str, str]:
    """(our preposition, the date) for one relative time."""
    if day := match.group("day"):
        offset = {"yesterday": -1, "tomorrow": 1}.get(day.lower(), 0)
        return "on", _day(today + timedelta(days=offset))
    if match.group("which"):
        amount = {"last": -1, "this": 0, "next": 1}[match.group("which").lower()]
        unit = match.group("unit").lower()
    else:
        count = match.group("count").lower()
        amount = -(int(count) if count.isdigit() else _NUMBERS[count])
        unit = match.group("units").lower().removesuffix("s")
    if unit == "year":
        return "in", str(today.year + amount)
    if unit == "month":
        months = today.year * 12 + today.month - 1 + amount
        return "in", f"{date(months // 12, months % 12 + 1, 1):%B %Y}"
    if unit == "week":
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=amount)
        if match.group("which"):
            return "in", f"the week of {_day(monday)}"
        return "around", _day(today + timedelta(weeks=amount))
    if unit == "day":
        return "on", _day(today + timedelta(days=amount))
    # A weekday: the last one before today, or the next one after it ("this": in this week).
    weekday = _WEEKDAYS.index(unit)
    if amount < 0:
        back = (today.weekday() - weekday) % 7 or 7
        return "on", _day(today - timedelta(days=back))
    if amount > 0:
        ahead = (weekday - today.weekday()) % 7 or 7
        return "on", _day(today + timedelta(days=ahead))
    return "on", _day(today + timedelta(days=weekday - today.weekday()))


def _day(day: date) -> str:
    return f"{day.day} {day:%B %Y}"
