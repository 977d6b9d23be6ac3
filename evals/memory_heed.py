"""Suite `memory-heed`: does a suggestion keep to what the user told about themselves?

    python -m evals memory-heed [--limit N]

A user who told the assistant "I'm vegetarian" and then asks for a quick dinner expects no
chicken. Each case below remembers two or three facts as extraction writes them ("The user is
vegetarian."), then sends a request in a new chat through the real flow (recall puts the facts
before the message; the configured `chat` model answers: the local model without keys), and
grades the saved reply by patterns: it breaks the case when a line of it suggests something a
fact rules out (meat to a vegetarian, eggs or milk to a vegan, peanuts to someone allergic…),
unless the same line says to leave it out or replace it ("instead of", "without", "-free", "if
you eat…") or names a safe kind ("almond milk", "gluten-free bread"). Each request is sent
`--limit` times (default 2), as separate chats.
"""

from __future__ import annotations

import argparse
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chat.warm_up import warm_local_model
from core import memory_store
from core.services import Services
from evals.chat_driver import ask
from evals.metrics import latency_summary
from evals.report import Report, Table, share
from evals.scratch import forget_everything, scratch_services

DEFAULT_DATA = Path(__file__)  # the cases are our own, in this file
DEFAULT_REPEATS = 2
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Case:
    """Facts remembered, a request, what the facts rule out, and safe kinds of it."""

    facts: tuple[str, ...]
    request: str
    ruled_out: str
    safe: str = ""


_MEAT = (
    r"chicken|beef|pork|\bfish\b|salmon|tuna|shrimp|prawn|bacon|steak|turkey|\bham\b|lamb"
    r"|sausage|\bmeat\b|meatball|anchov|seafood|\bcod\b|chorizo|pepperoni"
)
_DAIRY = r"milk|cheese|yogh?urt|butter|\bcream\b"
_PLANT_DAIRY = (
    r"(?:almond|oat|soy|coconut|rice|cashew|plant[- ]based|non-dairy|dairy-free|lactose-free"
    r"|vegan|peanut|nut) (?:milk|butter|cheese|yogh?urt|cream)"
)
CASES = [
    Case(
        ("The user's name is Sam.", "The user lives in Glasgow.", "The user is vegetarian."),
        "Can you suggest something for dinner tonight? Something quick.",
        _MEAT,
    ),
    Case(
        ("The user is vegetarian.", "The user has a partner called Alex."),
        "What should I make for a dinner party this weekend?",
        _MEAT,
    ),
    Case(
        ("The user is vegetarian.", "The user lives in Glasgow."),
        "Give me a recipe for a hearty soup.",
        _MEAT,
    ),
    Case(
        ("The user's name is Jo.", "The user is vegan."),
        "Give me a simple pancake recipe.",
        rf"\beggs?\b|honey|{_DAIRY}",
        _PLANT_DAIRY + r"|flax egg",
    ),
    Case(
        ("The user is allergic to peanuts.", "The user likes hiking."),
        "Can you suggest a snack for my hike?",
        r"peanut",
    ),
    Case(
        ("The user is lactose intolerant.", "The user lives in Leeds."),
        "What could I have for breakfast?",
        _DAIRY,
        _PLANT_DAIRY,
    ),
    Case(
        ("The user has coeliac disease.", "The user works as a teacher."),
        "Any quick lunch ideas?",
        r"bread|pasta|wheat|sandwich|\bwraps?\b|tortilla|couscous|barley|noodle|bagel",
        r"gluten-free \w+|corn tortilla|rice noodle",
    ),
    Case(
        ("The user doesn't drink alcohol.", "The user's name is Omar."),
        "Ideas for drinks at my birthday party?",
        r"wine|beer|cocktail|vodka|\brum\b|\bgin\b|whisk|champagne|prosecco|sangria|margarita"
        r"|mojito",
        r"mocktail|virgin \w+|non-alcoholic \w+|alcohol-free \w+|ginger",
    ),
    Case(
        ("The user is allergic to shellfish.",),
        "What should I order at a Thai restaurant?",
        r"shrimp|prawn|crab|lobster|mussel|clam|oyster|scallop",
    ),
]
# A line that names what it rules out to leave it out, or to swap it ("tofu instead of chicken").
_KEEPS_AWAY = re.compile(
    r"instead|avoid|without|\bno\b|free\b|substitut|replace|skip|swap|allerg|n't|\bnot\b"
    r"|if you eat|vegetarian|vegan|plant-based|meatless",
    re.IGNORECASE,
)
_LINE = re.compile(r"\n|(?<=[.!?])\s+")


def lines_breaking(case: Case, reply: str) -> list[str]:
    """The lines of `reply` that suggest what `case`'s facts rule out."""
    ruled_out = re.compile(case.ruled_out, re.IGNORECASE)
    found = []
    for line in _LINE.split(reply):
        plain = re.sub(case.safe, "", line, flags=re.IGNORECASE) if case.safe else line
        if ruled_out.search(plain) and not _KEEPS_AWAY.search(line):
            found.append(line.strip())
    return found


async def evaluate(services: Services, repeats: int) -> dict[str, Any]:
    pool, embedder = services.database.pool, services.embedder
    rows = []
    for case in CASES:
        for _ in range(repeats):
            await forget_everything(pool)
            vectors = await embedder.embed_documents(list(case.facts))
            for fact, vector in zip(case.facts, vectors, strict=True):
                await memory_store.add_memory(pool, fact, vector, embedder.model_name)
            exchange = await ask(services, case.request)
            breaking = lines_breaking(case, exchange.reply)
            rows.append(
                {
                    "request": case.request,
                    "facts": list(case.facts),
                    "reply": exchange.reply,
                    "kept": not breaking and exchange.status != "error",
                    "breaking": breaking,
                    "memories_used": len(exchange.memory_ids),
                    "seconds": exchange.seconds,
                }
            )
            log.info("%s %r: %s", "kept" if rows[-1]["kept"] else "BROKE", case.request,
                     breaking[:2] or exchange.reply[:100])  # fmt: skip
    return {
        "replies": len(rows),
        "kept": sum(r["kept"] for r in rows),
        **latency_summary([r["seconds"] for r in rows]),
        "rows": rows,
    }


def tables(results: dict[str, Any]) -> list[Table]:
    rows = results["rows"]
    summary = Table(
        "Requests after the user told a diet, an allergy or a habit",
        ["replies", "kept to what the user told", "p50 s", "p95 s"],
        [[results["replies"], share(results["kept"], results["replies"]),
          round(results["p50"], 1), round(results["p95"], 1)]],
    )  # fmt: skip
    broken = Table(
        "Replies that did not",
        ["remembered", "request", "first line that breaks it"],
        [
            [" ".join(r["facts"]), r["request"], r["breaking"][0][:120]]
            for r in rows
            if r["breaking"]
        ],
    )
    return [summary, broken]


async def run(args: argparse.Namespace) -> Report:
    async with scratch_services() as services:
        await warm_local_model(services)
        results = await evaluate(services, args.limit or DEFAULT_REPEATS)
        model = services.model_plan.describe("chat")
    return Report(
        "memory-heed",
        args.data,
        tables(results),
        results,
        {"chat": model},
        [
            "Facts stored as memories (as extraction writes them), then the request as a new"
            " chat's first message through the real flow; graded by patterns per case"
            " (evals/memory_heed.py): a line naming what the facts rule out breaks it unless"
            " it says to leave it out or replace it."
        ],
    )
