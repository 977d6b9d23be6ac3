"""How many days from today to a date the user names, with the date read by code.

Asked "How many days until Christmas?" on 7 December, the local model answered 24 (it is 18);
asked to write the sum for the calculator instead, it wrote date(2027,12,25) - date(2026,12,7)
and, for "since 1 January", date(2026,1,1) - date(2026,12,7), though told the date both times.
So the date is read here and the expression written from it: `span_question` finds the question
("how many days/weeks until/till/to/before/since …", "how long until …", "how long ago was …"),
`span_expression` reads the date (a holiday from `_HOLIDAYS`, otherwise dateparser in English with
the day and month required) at its nearest ahead of today for "until", behind it for "since",
and gives the calculator's `date(…) - date(…)` (asked in weeks, the days are told in weeks too:
`in_weeks`). A day the user told of before ("How many days until my sister's birthday?") is read
from the one recalled memory that names it; a day of someone's that nothing told of is found
too (`someones_day`, `told_of`), counted to or asked for ("When is my daughter's birthday?",
`day_question`), so the model can be told it is not known; asked for and told of, its date is read
from the memory (`day_in_memories`). A date it cannot read, a numeric date that reads two ways
("3/4"), or one on the wrong side of today gives None: the question is then left as it was.
English only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

from dateutil.easter import easter

# Fixed-date days people count down to or from (month, day); Easter is computed.
_HOLIDAYS: dict[str, tuple[int, int]] = {
    "christmas": (12, 25),
    "christmas day": (12, 25),
    "xmas": (12, 25),
    "christmas eve": (12, 24),
    "boxing day": (12, 26),
    "new year's eve": (12, 31),
    "new year": (1, 1),
    "new year's": (1, 1),
    "new year's day": (1, 1),
    "halloween": (10, 31),
    "valentine's day": (2, 14),
    "valentine's": (2, 14),
    "st patrick's day": (3, 17),
    "st. patrick's day": (3, 17),
    "saint patrick's day": (3, 17),
    "end of the year": (12, 31),
    "year end": (12, 31),
}
_EASTER = ("easter", "easter sunday", "easter day")

_SPAN = re.compile(
    r"\bhow (?:many (?P<unit>days|weeks|nights|sleeps)|long)\b(?P<words>[^.!?\n]*)"
    r"\b(?P<prep>until|till|til|'til|to|before|between (?:today|now) and)\s+"
    r"(?P<target>[^.!?\n]+)",
    re.IGNORECASE,
)
# "since" first: in "How many days since I moved to Lisbon?" the date is all that follows it.
_SINCE = re.compile(
    r"\bhow (?:many (?P<unit>days|weeks|nights)|long)\b[^.!?\n]*?\bsince\s+(?P<target>[^.!?\n]+)",
    re.IGNORECASE,
)
_AGO = re.compile(
    r"\bhow (?:many (?P<unit>days|weeks)|long) ago (?:was|is|were)\s+(?P<target>[^.!?\n]+)",
    re.IGNORECASE,
)
# "When is my daughter's birthday?", "What's the date of our anniversary?": the day itself asked.
_WHEN = re.compile(
    r"\b(?:when(?:'s|’s|\s+is|\s+was)|what(?:'s|’s|\s+is)(?:\s+the date of)?"
    r"|what date is|do you (?:know|remember))\s+(?P<target>[^.!?\n]+)",
    re.IGNORECASE,
)
# What may follow the date and is not part of it: "from now", ", roughly", "is it".
_AFTER_DATE = re.compile(
    r"(?:,(?!\s*\d)|\s+(?:from (?:now|today)|is it|are there|are left|left|to go)\b).*\Z",
    re.IGNORECASE,
)
_YEAR_AT_END = re.compile(r"\s+(?P<year>\d{4})\Z")
# "3/4", "04.05": day and month each 12 or under, so it reads two ways.
_TWO_WAY = re.compile(r"\A(?P<a>\d{1,2})[/.-](?P<b>\d{1,2})(?:[/.-]\d{2,4})?\Z")


# For a date told before: the words of "my sister's birthday" that name it, and its date in the
# memory ("March 3", "3rd of March 2027", "June 5, 2028").
_WORD = re.compile(r"[a-z]+")
_MY = re.compile(r"\bmy ([a-z]+)")
_NOT_NAMING = frozenset({"my", "the", "a", "an", "of", "our", "next", "this", "coming", "s", "i"})
_YEARLY = frozenset({"birthday", "anniversary"})
# A day of someone's: "Mira's birthday", "my anniversary", "our wedding"; not a feast named so
# ("Mother's Day", "New Year's Eve"), which the calendar gives.
_SOMEONES = re.compile(r"\b(?:my|our)\b|\w['’]s\b(?!\s+(?:day|eve)\b)", re.I)
# A birthday told without the word: "Mira turns 7 on January 14.", "Leo was born on 2 May 2020."
_BORN = re.compile(r"\b(?:turns|turning|will turn) \d+\b|\bborn\b")
_MONTH = (
    r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april"
    r"|june|july|august|september|october|november|december)\.?"
)
_DAY_OF_MONTH = r"\d{1,2}(?:st|nd|rd|th)?"
_DATE_IN_TEXT = re.compile(
    rf"\b(?:{_DAY_OF_MONTH} (?:of )?{_MONTH}|{_MONTH} (?:the )?{_DAY_OF_MONTH})(?:,? \d{{4}})?\b"
)
_YEAR_IN_DATE = re.compile(r",? \d{4}\Z")


@dataclass(frozen=True)
class AskedDay:
    """A day of someone's a message asks about ("my son's birthday"), and its date when a memory
    gives it, at its next occurrence (None: nothing the user told gives it)."""

    target: str
    day: date | None


@dataclass(frozen=True)
class SpanQuestion:
    target: str  # the date as the user wrote it: "Christmas", "1 March 2027"
    ahead: bool  # "until" (True) or "since"/"ago" (False)
    weeks: bool  # asked in weeks rather than days


def span_question(message: str) -> SpanQuestion | None:
    """The span from today `message` asks for ("How many days until Christmas?"), if it asks for
    one; the date is not read yet (see `span_expression`)."""
    if match := _SINCE.search(message):
        ahead = False
    elif match := _SPAN.search(message):
        ahead = True
    elif match := _AGO.search(message):
        ahead = False
    else:
        return None
    target = _AFTER_DATE.sub("", match["target"]).strip(" ,;:")
    weeks = (match["unit"] or "").lower() == "weeks"
    return SpanQuestion(target, ahead, weeks) if target else None


def day_question(message: str) -> SpanQuestion | None:
    """The yearly day `message` asks the date of ("When is my daughter's birthday?"), if it
    asks for one; whose it is, and whether anything told it, is for `someones_day` and
    `told_of`."""
    if not (match := _WHEN.search(message)):
        return None
    target = _AFTER_DATE.sub("", match["target"]).strip(" ,;:")
    if not _YEARLY & set(_WORD.findall(target.lower())):
        return None
    return SpanQuestion(target, ahead=True, weeks=False)


def span_expression(
    question: SpanQuestion, today: date, memories: Sequence[str] = ()
) -> str | None:
    """The calculator's expression for `question` counted from `today` ("date(2026,12,25) -
    date(2026,12,7)"), or None when its date cannot be read, or is on the wrong side of today.
    A target that is no date ("my sister's birthday") is looked up in `memories` (recalled
    facts: "The user's sister Ana's birthday is on March 3."). Loads dateparser's data on first
    use: call it off the event loop."""
    day = _read_date(question.target, today, question.ahead)
    if day is None and memories:
        day = day_in_memories(question, today, memories)
    if day is None or (day < today if question.ahead else day > today):
        return None
    later, earlier = (day, today) if question.ahead else (today, day)
    return f"{_as_call(later)} - {_as_call(earlier)}"


def in_weeks(days: int) -> str:
    """A count of days told in whole weeks and days ("2 weeks and 4 days"), as a person would
    rather than "2.57142857142857" weeks."""
    weeks, rest = divmod(days, 7)
    parts = [(weeks, "week"), (rest, "day")]
    return " and ".join(f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in parts if n) or "0 days"


def _as_call(day: date) -> str:
    return f"date({day.year},{day.month},{day.day})"


def _read_date(text: str, today: date, ahead: bool) -> date | None:
    name = " ".join(text.lower().replace("’", "'").split()).removeprefix("the ")
    year = None
    if match := _YEAR_AT_END.search(name):
        name, year = name[: match.start()], int(match["year"])
    if name in _HOLIDAYS or name in _EASTER:
        return _holiday(name, year, today, ahead)
    if (two_way := _TWO_WAY.match(text.strip())) and max(map(int, two_way.groups()[:2])) <= 12:
        return None
    settings = {
        "PREFER_DATES_FROM": "future" if ahead else "past",
        "RELATIVE_BASE": datetime(today.year, today.month, today.day),
        "REQUIRE_PARTS": ["day", "month"],
    }
    import dateparser  # ~0.1 s to import: only when a question needs it, not at start-up

    found = dateparser.parse(text, languages=["en"], settings=settings)  # type: ignore[arg-type]
    return found.date() if found else None


def day_in_memories(question: SpanQuestion, today: date, memories: Sequence[str]) -> date | None:
    """The date of the day `question` names, read from the one memory that says what its target
    names: every word of it in the memory ("sister", "birthday"), and "my X" as "the user's X"
    (so "my birthday" is not the sister's); None if no one memory does. A yearly day
    ("birthday", "anniversary") is counted to or from its nearest occurrence whatever year the
    memory gives; a birthday may be told as a day someone turns an age or was born (`_BORN`).
    Loads dateparser's data on first use: call it off the event loop."""
    naming = _Naming.of(question.target)
    yearly = bool(naming.words & _YEARLY)
    found = set()
    for memory in memories:
        said = _plain(memory)
        if not naming.in_memory(said):
            continue
        dates = _DATE_IN_TEXT.findall(said)
        if len(dates) != 1:
            return None  # no date, or which one is meant cannot be told
        written = _YEAR_IN_DATE.sub("", dates[0]) if yearly else dates[0]
        day = _read_date(written, today, question.ahead)
        if day is None:
            return None
        found.add(day)
    return found.pop() if len(found) == 1 else None


def someones_day(question: SpanQuestion, today: date) -> bool:
    """Whether `question` counts to or from a day of someone's that no calendar gives ("Mira's
    birthday", "my anniversary"): only the user can tell it. Not a day told by "her" or "it",
    whom the chat before says. Loads dateparser's data on first use: call it off the event
    loop."""
    target = question.target
    if not _SOMEONES.search(target) or _DATE_IN_TEXT.search(_plain(target)):
        return False  # no one's, or a date given with it ("my birthday on 12 May")
    return _read_date(target, today, question.ahead) is None


def told_of(question: SpanQuestion, memories: Sequence[str], messages: Sequence[str]) -> bool:
    """Whether one of `memories` ("The user's daughter Mira turns 7.") or `messages` (the chat's
    before this one: "My daughter Mira turns 7 on January 14.") speaks of the day `question`
    counts to, with a date or not."""
    naming = _Naming.of(question.target)
    return any(naming.in_memory(_plain(m)) for m in memories) or any(
        naming.words <= _words_in(_plain(m)) for m in messages
    )


@dataclass(frozen=True)
class _Naming:
    """What names a day: its words ("sister", "birthday"), and "my X" as "the user's X" in a
    memory (so "my birthday" is not the sister's)."""

    words: frozenset[str]
    owned: tuple[str, ...]

    @classmethod
    def of(cls, target: str) -> _Naming:
        text = _plain(target)
        words = frozenset(_WORD.findall(text)) - _NOT_NAMING
        return cls(words, tuple(f"the user's {thing}" for thing in _MY.findall(text)))

    def in_memory(self, said: str) -> bool:
        return self.words <= _words_in(said) and all(o in said for o in self.owned)


def _words_in(said: str) -> set[str]:
    """The words of `said`, with "birthday" for a birthday told without the word (`_BORN`)."""
    return set(_WORD.findall(said)) | ({"birthday"} if _BORN.search(said) else set())


def _plain(text: str) -> str:
    return " ".join(text.lower().replace("’", "'").split())


def _holiday(name: str, year: int | None, today: date, ahead: bool) -> date:
    def in_year(y: int) -> date:
        return easter(y) if name in _EASTER else date(y, *_HOLIDAYS[name])

    if year is not None:
        return in_year(year)
    around = [in_year(y) for y in (today.year - 1, today.year, today.year + 1)]
    return min(d for d in around if d >= today) if ahead else max(d for d in around if d <= today)
