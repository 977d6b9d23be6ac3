"""The calculator for a chat model that cannot call it: the sum a message asks for is worked out
before the model answers.

The local model is offered no tools (`capabilities: tools: false`), so it did its arithmetic
itself, and wrongly: in a keyless trial "What is 17.5% of 2,340?" got 418.5 (it is 409.5). For a
message that shows arithmetic (`asks_for_arithmetic`: numbers with an operator, a percentage, or
a word such as "times" or "square root"), the expression is the message itself when it is just a
sum ("What is 1,234 × 5,678?", `written_out`), or written by code for a count of days from
today ("How many days until Christmas?", core/date_spans.py) or a unit conversion ("How many
kilometres is 26.2 miles?", core/unit_conversions.py); otherwise the utility model is asked
for it alone (core/prompts.py `arithmetic_request`, JSON with a schema), which it writes far better
than it computes (a few seconds on the local model). The calculator computes it. The user sees
the step ("Calculating 17.5/100*2340 = 409.5"), the result goes with the message to the chat model
(core/prompts.py `user_turn`), and the reply is saved with it as a calculator call. Anything
else (no expression, one the calculator refuses, a failed call) leaves the turn as it was.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

from chat.state import TurnContext
from chat.steps import short_id, step_event
from chat.tools import calculator_result, tool_record
from core import tracing
from core.calculator import CalculatorError, Number, evaluate, format_number
from core.clock import now_in
from core.date_spans import (
    AskedDay,
    SpanQuestion,
    day_in_memories,
    day_question,
    in_weeks,
    someones_day,
    span_expression,
    span_question,
    told_of,
)
from core.model_json import json_object_in
from core.model_progress import watched_quietly
from core.prompts import ARITHMETIC_SCHEMA, arithmetic_request
from core.unit_conversions import conversion_expression, conversion_question

log = logging.getLogger("resolveai.chat")

MAX_OUTPUT_TOKENS = 80  # {"expression": "…"}
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "arithmetic", "schema": ARITHMETIC_SCHEMA, "strict": True},
}

_NUMBER = r"\d[\d,]*(?:\.\d+)?"
# "12 * 4", "2^10", "3 x 7", "96/3", "5 - 2"; a minus only between spaces: "555-1234" is a phone
# number, "10-11am" a range.
_OPERATION = re.compile(rf"{_NUMBER}(?:\s*(?:\*\*|[+*/×÷^]|\bx\b)|\s+[-−]\s)\s*\(?\s*{_NUMBER}")
_PERCENT = re.compile(rf"{_NUMBER}\s*(?:%|percent\b|per cent\b)", re.IGNORECASE)
_ARITHMETIC_WORDS = re.compile(
    r"\b(?:plus|minus|times|multiplied by|divided by|squared|cubed|square root|cube root"
    r"|to the power|factorial|calculate|compute|sqrt|log)\b",
    re.IGNORECASE,
)
_NUMBERS = re.compile(_NUMBER)
# Days between two dates the message gives, which the calculator counts (date(y, m, d) - date(y,
# m, d)): "How many days are there between March 3 and July 19?" got 30 from the local model (it
# is 138). A span from today ("How many days until Christmas?") is not the model's to write: it
# wrote date(2027,12,25) - date(2026,12,7) though told the date; core/date_spans.py reads those.
_DATE_SPAN = re.compile(
    r"\bhow many (?:days|weeks|months|nights)\b[^.!?]*?\b(?:between|from)\b", re.IGNORECASE
)


def asks_for_arithmetic(message: str) -> bool:
    """Whether `message` shows arithmetic to do: an operation between numbers, a percentage with
    another number, an arithmetic word with a number, or a count of days between two dates. Not in a
    message with code in it ("Why does `0.1 + 0.2` print 0.30000000000000004?"): the question is
    about the code."""
    if "`" in message:
        return False
    numbers = len(_NUMBERS.findall(message))
    return bool(
        _OPERATION.search(message)
        or (_PERCENT.search(message) and numbers >= 2)
        or (_ARITHMETIC_WORDS.search(message) and numbers >= 1)
        or _DATE_SPAN.search(message)
    )


# What may open a sum written out in full ("What's 1,234 × 5,678?"): then no model is needed.
_ASKING = re.compile(
    r"\s*(?:what(?:['’]s| is| are)|how much is|calculate|compute|work out|solve)\b[\s:]*",
    re.IGNORECASE,
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TIMES = re.compile(r"(?<=[\d)])\s*[x×]\s*(?=[\d(])")
# Only numbers, spaces and + - * / ( ): "%" would be the calculator's modulo, not a percentage.
_SUM_ONLY = re.compile(r"[\d\s.+\-*/()]*\d[\d\s.+\-*/()]*")


def written_out(message: str) -> str | None:
    """The sum `message` is, when it is nothing but one ("1,234 × 5,678", "What is 2^10 - 1?"),
    as the calculator takes it ("1234 * 5678", "2**10 - 1"); None otherwise."""
    text = message.strip()
    asking = _ASKING.match(text)
    text = text[asking.end() :] if asking else text
    text = in_calculator_signs(_THOUSANDS.sub("", text.rstrip(" ?=.!")))
    if not _SUM_ONLY.fullmatch(text) or not _OPERATION.search(text):
        return None
    return " ".join(text.split())


def in_calculator_signs(sum_: str) -> str:
    """A sum written in the usual signs ("2^10", "3 × 4", "8 ÷ 2") in the calculator's ("2**10",
    "3 * 4", "8 / 2"), whether the user or a model wrote it: "^" is a power in both."""
    return _TIMES.sub(" * ", sum_).replace("÷", "/").replace("−", "-").replace("^", "**")


@dataclass(frozen=True)
class Calculation:
    worked_out: str  # for people: "17.5/100*2340 = 409.5", "1234 * 5678 = 7,006,652"
    record: dict[str, Any]  # the calculator call, saved with the reply


async def calculation_for(turn: TurnContext, message: str) -> Calculation | None:
    """The sum `message` asks for, worked out, when the chat model cannot call the calculator
    (and the user did not switch it off) and the message shows arithmetic; None otherwise."""
    if not _calculator_first(turn):
        return None
    started = time.monotonic()
    today = now_in(turn.time_zone).now.date()
    expression, span = written_out(message), span_question(message)
    if expression is None and span:
        expression = await asyncio.to_thread(span_expression, span, today)
        if expression:
            return await _calculated(turn, expression, started, _in_days(span))
    if expression is None and (conversion := conversion_question(message)):
        expression = await asyncio.to_thread(conversion_expression, conversion)
        if expression:
            return await _calculated(turn, expression, started, lambda _: f" {conversion.told_in}")
    if expression is None:
        if not asks_for_arithmetic(message):
            return None
        step_event(turn, "Working out the numbers")
        expression = await _expression_for(turn, message, today)
    return await _calculated(turn, expression, started) if expression else None


async def span_from_memories(
    turn: TurnContext, message: str, memories: list[str]
) -> Calculation | None:
    """For a count of days to or from a day the user told of before ("How many days until my
    sister's birthday?"): the days to the date in the recalled memory that names it ("The
    user's sister Ana's birthday is on March 3."); None otherwise. Asked without it, the local
    model answered 10 (it was 86)."""
    if not memories or not _calculator_first(turn) or not (span := span_question(message)):
        return None
    started = time.monotonic()
    today = now_in(turn.time_zone).now.date()
    expression = await asyncio.to_thread(span_expression, span, today, memories)
    return await _calculated(turn, expression, started, _in_days(span)) if expression else None


async def asked_day(
    turn: TurnContext, message: str, memories: list[str], earlier: list[str]
) -> AskedDay | None:
    """A day of someone's that `message` asks about, for the model: with its date when the
    message asks when it is and one recalled memory gives it ("When is my son's birthday?", "The
    user's son Tom turns 5 on 2 February."); without one when the message counts to it or asks
    when it is and neither a recalled memory nor an earlier message of the chat (`earlier`)
    speaks of it; None otherwise. Left to itself, the local model misread the memory ("February
    5") and made up dates and counts ("There are 10 days until Mira's birthday.")."""
    if not _calculator_first(turn):
        return None
    span, asked = span_question(message), day_question(message)
    if not (question := span or asked):
        return None
    today = now_in(turn.time_zone).now.date()
    if asked and (day := await asyncio.to_thread(day_in_memories, asked, today, memories)):
        return AskedDay(asked.target, day)
    if told_of(question, memories, earlier) or not await asyncio.to_thread(
        someones_day, question, today
    ):
        return None
    return AskedDay(question.target, None)


def _calculator_first(turn: TurnContext) -> bool:
    """Whether sums are worked out before the model answers: it cannot call the calculator
    itself, and the user did not switch the calculator off."""
    tools = turn.services.model_plan.capability("chat", "tools")
    return not tools and "calculator" not in turn.tools_off


async def _calculated(
    turn: TurnContext,
    expression: str,
    started: float,
    told_in: Callable[[Number], str] = lambda _: "",
) -> Calculation | None:
    """`expression` computed, shown as a step, and recorded; None if the calculator refuses it.
    `told_in`: the units the result is in, after it (" days", " kilometres")."""
    try:
        # Bounded (core/calculator.py), but CPU work all the same: off the event loop.
        value = await asyncio.to_thread(evaluate, expression)
    except CalculatorError as error:
        log.info("Chat %s: no sum in %r (%s)", short_id(turn.chat_id), expression[:80], error)
        return None
    worked_out = f"{expression} = {format_number(value, grouped=True)}{told_in(value)}"
    step_event(turn, f"Calculating {worked_out}", tool="calculator")
    record = tool_record(
        f"call_{uuid.uuid4().hex[:24]}", "calculator", {"expression": expression},
        calculator_result(expression, value), ok=True,
        duration_ms=round((time.monotonic() - started) * 1000),
    )  # fmt: skip
    return Calculation(worked_out, record)


def _in_days(span: SpanQuestion) -> Callable[[Number], str]:
    """A count of days told in days, and in weeks too when asked in weeks ("… = 18 days, that is
    2 weeks and 4 days": written "= 18 days = 2 weeks and 4 days", the local model answered "2
    weeks")."""

    def told(days: Number) -> str:
        in_weeks_too = span.weeks and isinstance(days, int) and days >= 7
        return f" days, that is {in_weeks(days)}" if in_weeks_too else " days"

    return told


async def _expression_for(turn: TurnContext, message: str, today: date) -> str | None:
    """The expression the utility model writes for what `message` asks; None when it gave none
    or the call failed."""
    # Someone waits for it: on the local model it goes before background work (titles, memory
    # extraction) rather than behind it, and is not refused when much of that waits (seen in a
    # keyless trial: "The local model is busy with 4 requests already"). "Working out the
    # numbers" says what it does; its reading progress is not shown.
    try:
        with watched_quietly():
            response = await turn.services.router.acompletion(
                model="utility",
                messages=arithmetic_request(message, today),
                response_format=RESPONSE_FORMAT,
                max_tokens=MAX_OUTPUT_TOKENS,
                temperature=0,
                metadata=tracing.trace_metadata(
                    str(turn.user_message_id), str(turn.chat_id), "arithmetic",
                    user_id=str(turn.user_id),
                ),
            )  # fmt: skip
    except Exception as error:  # the answer goes on without it
        log.info("Chat %s: no expression for the sum (%s)", short_id(turn.chat_id), error)
        return None
    payload = json_object_in(response.choices[0].message.content)
    expression = payload.get("expression") if payload else None
    if not isinstance(expression, str):
        return None
    # The JSON's braces, sometimes written into the string too ("120*(1-35/100)}"); "^" for a
    # power ("5000*(1+0.04)^10"), which the calculator refused, so the model did the sum itself.
    return in_calculator_signs(expression.strip().strip("{}").strip()) or None
