"""Suite `arithmetic`: does a reply give the exact result of the sum the user asks for?

    python -m evals arithmetic

The local model is offered no tools, so it did arithmetic itself, and wrongly ("What is 17.5% of
2,340?" got 418.5). chat/arithmetic.py works the sum out with the calculator before it answers.
This suite sends `QUESTIONS` (sums, short word problems, days between dates and from today, unit
conversions, written for it, each with its exact answer), each as a new chat's first message
through the real chat flow (the configured `chat` and `utility` models: the local model without
keys), twice: as shipped ("calculator first"), and with the calculator switched off in the user's
settings, which is the model's own arithmetic ("model alone"). A reply is right when a number in
it is the answer (within 0.006, or 0.01% of it). Also the seconds per reply, and how often the
calculator ran.

Cost where there is no sum: the share of other messages that would get the extra model call
(`asks_for_arithmetic`), or be read as a sum, a date span or a unit conversion, over the LoCoMo
first speaker's evidence turns and chat-replies' lists; no model is needed for it.
"""

from __future__ import annotations

import argparse
import logging
import re
from datetime import UTC, date, datetime
from typing import Any

from chat.arithmetic import asks_for_arithmetic, written_out
from chat.warm_up import warm_local_model
from core.accounts import LOCAL_USER_ID
from core.date_spans import span_expression, span_question
from core.preferences import set_preferences
from core.services import Services
from core.unit_conversions import conversion_expression, conversion_question
from evals.chat_driver import ask
from evals.chat_replies import EVERYDAY_REQUESTS, SHORT_STATEMENTS, statements
from evals.datasets import LOCOMO_FILE
from evals.metrics import latency_summary
from evals.report import Report, Table, share
from evals.scratch import forget_everything, scratch_services

DEFAULT_DATA = LOCOMO_FILE
log = logging.getLogger(__name__)

_TODAY = datetime.now(UTC).date()


def _next(month: int, day: int) -> date:
    """The next `day` of `month`, today included."""
    this_year = date(_TODAY.year, month, day)
    return this_year if this_year >= _TODAY else date(_TODAY.year + 1, month, day)


QUESTIONS: list[tuple[str, float]] = [
    ("What is 17.5% of 2,340?", 409.5),
    ("What's 1,234 × 5,678?", 7006652),
    ("If I earn 52,000 a year and pay 22% tax, how much is left per month?", 3380),
    ("What is 3 times 47 plus 128?", 269),
    ("What is the square root of 2 times 3?", 4.2426),
    ("How much is 15% of 86.40?", 12.96),
    ("Calculate 2^20", 1048576),
    ("What is 987 divided by 7?", 141),
    ("A jacket costs 120 and is 35% off. What do I pay?", 78),
    ("What is 123.45 + 678.9 - 45.6?", 756.75),
    ("I split a 187.50 bill between 5 people plus a 12% tip. How much does each pay?", 42),
    ("What is 45 squared?", 2025),
    ("What's 8% of 12,500?", 1000),
    ("What is 365 * 24 * 60?", 525600),
    ("What is 7.5% of 480 plus 19?", 55),
    ("What is 1,000,000 divided by 37?", 27027.03),
    ("How many days are there between March 3 2026 and July 19 2026?", 138),
    ("How many weeks are there between 5 January 2026 and 30 March 2026?", 12),
    # Counted from the day the suite runs (UTC's, the scratch user's): the model said 24 days to
    # Christmas on 7 December.
    ("How many days until Christmas?", (_next(12, 25) - _TODAY).days),
    ("How many days since 1 January?", (_TODAY - date(_TODAY.year, 1, 1)).days),
    # Unit conversions: the model said 41.95 km for 26.2 miles.
    ("How many kilometres is 26.2 miles?", 42.1648),
    ("Convert 100°F to Celsius", 37.7778),
]
ARMS = {"calculator first": [], "model alone": ["calculator"]}  # name: tools switched off
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_GROUPED = re.compile(r"(?<=\d),(?=\d{3})")


def gives(reply: str, answer: float) -> bool:
    """Whether a number in `reply` is `answer` (commas between thousands allowed)."""
    numbers = [float(n) for n in _NUMBER.findall(_GROUPED.sub("", reply))]
    return any(abs(n - answer) <= max(0.006, abs(answer) * 1e-4) for n in numbers)


async def evaluate(services: Services) -> dict[str, Any]:
    by_arm: dict[str, Any] = {}
    for arm, off in ARMS.items():
        await set_preferences(services.database.pool, LOCAL_USER_ID, disabled_tools=off)
        rows = []
        for question, answer in QUESTIONS:
            await forget_everything(services.database.pool)
            exchange = await ask(services, question)
            rows.append(
                {
                    "question": question,
                    "reply": exchange.reply,
                    "right": gives(exchange.reply, answer),
                    "calculated": any("Calculating" in s for s in exchange.steps),
                    "seconds": exchange.seconds,
                }
            )
            log.info("%s: %s %.1f s %r", arm, "right" if rows[-1]["right"] else "WRONG",
                     exchange.seconds, exchange.reply[-100:])  # fmt: skip
        by_arm[arm] = {
            "questions": len(rows),
            "right": sum(r["right"] for r in rows),
            "calculated": sum(r["calculated"] for r in rows),
            **latency_summary([r["seconds"] for r in rows]),
            "replies": rows,
        }
    await set_preferences(services.database.pool, LOCAL_USER_ID, disabled_tools=[])
    return by_arm


def other_messages(path: Any) -> dict[str, dict[str, int]]:
    """Per group of messages with no sum to do: how many, and how many would get the extra
    model call, or are taken as a written-out sum or a span from today."""
    groups = {
        "LoCoMo evidence turns": statements(path, None),
        "chat-replies' statements and requests": SHORT_STATEMENTS + EVERYDAY_REQUESTS,
    }
    counts = {}
    for name, texts in groups.items():
        how = [_worked_out_by(t) for t in texts]
        counts[name] = {"messages": len(texts)} | {
            way: how.count(way) for way in ("asked", "written_out", "from_today", "converted")
        }
    return counts


def _worked_out_by(message: str) -> str | None:
    """How chat/arithmetic.py would get the expression for `message`, None for not at all."""
    if written_out(message) is not None:
        return "written_out"
    span = span_question(message)
    if span and span_expression(span, _TODAY):
        return "from_today"
    conversion = conversion_question(message)
    if conversion and conversion_expression(conversion):
        return "converted"
    return "asked" if asks_for_arithmetic(message) else None


def tables(results: dict[str, Any]) -> list[Table]:
    replies = Table(
        f"Sums asked as a new chat's first message ({len(QUESTIONS)} questions)",
        ["arm", "right", "calculator ran", "p50 s", "p95 s"],
    )
    for arm, row in results["by_arm"].items():
        n = row["questions"]
        replies.rows.append(
            [arm, share(row["right"], n), share(row["calculated"], n),
             round(row["p50"], 1), round(row["p95"], 1)]
        )  # fmt: skip
    others = Table(
        "Messages with no sum: how many would get the extra model call",
        ["messages", "n", "expression asked of the model", "taken as a written-out sum",
         "read as a span from today", "read as a unit conversion"],
    )  # fmt: skip
    for name, row in results["other_messages"].items():
        n = row["messages"]
        others.rows.append(
            [name, n, share(row["asked"], n), share(row["written_out"], n),
             share(row["from_today"], n), share(row.get("converted", 0), n)]
        )  # fmt: skip
    return [replies, others]


async def run(args: argparse.Namespace) -> Report:
    async with scratch_services() as services:
        await warm_local_model(services)
        by_arm = await evaluate(services)
        models = {role: services.model_plan.describe(role) for role in ("chat", "utility")}
    results = {"by_arm": by_arm, "other_messages": other_messages(args.data)}
    return Report(
        "arithmetic",
        args.data,
        tables(results),
        results,
        models,
        [
            "Right: a number in the saved reply is the exact answer (within 0.006 or 0.01%)."
            " 'model alone': the calculator switched off in the user's settings."
        ],
    )
