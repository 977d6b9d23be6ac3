"""Suite `chat-replies`: what the chat model answers when a user talks about themselves.

    python -m evals chat-replies [--data PATH] [--limit N]

A new user's first messages are often not questions: "Hi! I'm Dana. I live in Lisbon." The chat
model must answer them as a person would (acknowledge, maybe ask back), not refuse them. This
suite sends real first-person statements, the LoCoMo first speaker's turns that a LoCoMo question
cites as evidence (../shared/evaldata/locomo/conversations.json, read in place), and the short
statements of our own issues' scenarios (`SHORT_STATEMENTS`: "I work as a nurse in Lyon."), and,
to see that a change for statements costs nothing elsewhere, everyday requests that are not about
code (`EVERYDAY_REQUESTS`: "Write a poem about autumn."), each as the first message of a new
chat, through the real chat flow (runner, graph, recall, the configured `chat` model: the local
model without keys), and grades each saved reply by patterns:

- refused: the reply declines ("I'm sorry, but I can't assist with that", "I cannot help with
  this request"), anywhere in it;
- disowned: it says it has no information or does not know (a statement asked nothing; "As an AI
  language model, I don't have personal experiences" counts);
- echoed instructions: it repeats our instructions to the user ("The conversation summary covers
  the older part of this chat", "Current date and time", "long-term memory");
- fenced: the reply opens with a code block of prose ("```markdown"), as a coder model told to
  write Markdown may do;
- markup: tool or prompt tags reached the saved text (`<tool_call>`, `<memories>`, …);
- empty or failed: no text saved, or the turn ended in an error.

Also the seconds per reply (p50, p95). `--limit N` takes N LoCoMo statements spread evenly over
the conversations (our own lists are always sent). On the local model a reply takes
~2-15 s on two quiet cores.
"""

from __future__ import annotations

import argparse
import logging
import re
from typing import Any

from chat.tool_markup import OPEN_TAGS, PROMPT_TAGS
from chat.warm_up import warm_local_model
from core.prompts import CHAT_INSTRUCTIONS, MEMORY_RULES
from core.services import Services
from evals.chat_driver import ask
from evals.datasets import LOCOMO_FILE, load_locomo, sample
from evals.judge import says_dont_know
from evals.memory_extraction import evidence_turns
from evals.metrics import latency_summary
from evals.report import Report, Table, share
from evals.scratch import forget_everything, scratch_services

DEFAULT_DATA = LOCOMO_FILE
log = logging.getLogger(__name__)

# A reply that declines the message: the wording small chat models use for what they take as a
# request they may not serve ("I'm sorry, but I can't assist with that.").
_REFUSAL = re.compile(
    r"\b(?:can(?:no|')?t|can not|unable to|not able to|won't)\s+(?:assist|help)"
    r"(?:\s+you)?\s+with\s+(?:that|this)\b",
    re.IGNORECASE,
)


# What a new user says first in our issues' scenarios: short statements about themselves.
SHORT_STATEMENTS = [
    "I work as a nurse in Lyon.",
    "I'm allergic to peanuts.",
    "Hi! I'm Dana. I live in Lisbon and I'm allergic to peanuts.",
    "I drink tea every morning.",
    "I switched to coffee.",
    "My cat is called Miso.",
]
# Everyday requests that are not about code, which a coder model may decline ("Write a long
# story…" drew "I'm sorry, but I can't assist with that request." from the local model).
EVERYDAY_REQUESTS = [
    "Write a long story (at least 1000 words) about a lighthouse.",
    "Write a long story (at least 1000 words) about a lighthouse keeper.",
    "Write a long story about a robot who learns to love.",
    "Write a short story about a dragon.",
    "Write a poem about autumn.",
    "Write a limerick about a cat.",
    "Write a cover letter for a barista job.",
    "Write an essay about climate change.",
    "Plan a 3-day trip to Rome.",
    "Summarize the plot of Hamlet.",
    "What's the capital of Australia?",
    "Translate 'good morning' into French.",
    "Tell me about yourself.",
    "I feel lonely today.",
]
# Words of our instructions that have no place in a reply to "I work as a nurse in Lyon."
_INSTRUCTION_TERMS = ("long-term memory", "conversation summary", "current date and time")
_WORD = re.compile(r"[a-z0-9']+")


def _straight(text: str) -> str:
    """Typographic apostrophes as straight ones ("can’t" is "can't")."""
    return text.replace("\u2019", "'")


def _shingles(text: str, size: int = 5) -> set[tuple[str, ...]]:
    words = _WORD.findall(_straight(text.lower()))
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


# Five-word runs of the chat instructions (every memory rule), which a reply should not repeat.
_INSTRUCTION_SHINGLES = _shingles(
    " ".join([CHAT_INSTRUCTIONS.split("\n", 2)[-1], *MEMORY_RULES.values()])
)


def refuses(reply: str) -> bool:
    return bool(_REFUSAL.search(_straight(reply)))


def echoes_instructions(reply: str) -> bool:
    lowered = reply.lower()
    return any(term in lowered for term in _INSTRUCTION_TERMS) or bool(
        _shingles(reply) & _INSTRUCTION_SHINGLES
    )


_PROSE_FENCES = {"", "markdown", "md", "text", "plaintext"}  # a fence's language, for prose


def fenced(reply: str) -> bool:
    """The reply opens with a code block of prose ("```markdown"): a coder model told to write
    Markdown may wrap its whole answer in one."""
    text = reply.lstrip()
    return text.startswith("```") and text[3:].split("\n", 1)[0].strip().lower() in _PROSE_FENCES


def shows_markup(reply: str) -> bool:
    return any(tag in reply for tag in (*OPEN_TAGS, *PROMPT_TAGS))


GRADES = {  # name: (column, test)
    "refused": ("refused", refuses),
    "disowned": ("no information / don't know", says_dont_know),
    "echoed": ("echoed instructions", echoes_instructions),
    "fenced": ("opens with a prose code block", fenced),
    "markup": ("tool/prompt markup", shows_markup),
}


def statements(path: Any, limit: int | None) -> list[str]:
    """The first speaker's evidence turns, in the data's order, `limit` of them spread evenly."""
    found = []
    for conversation in load_locomo(path):
        cited = evidence_turns(conversation)
        found += [
            turn.text
            for session in conversation.sessions
            for turn in session.turns
            if turn.id in cited and turn.text.strip()
        ]
    return sample(found, limit)


async def evaluate(services: Services, texts: list[tuple[str, str]]) -> dict[str, Any]:
    """Send each text (group, text) as a new chat's first message, with nothing remembered, and
    grade the saved replies."""
    rows: list[dict[str, Any]] = []
    for number, (group, text) in enumerate(texts, 1):
        # Each statement meets the model as a new user's first message: no memory of the ones
        # before it.
        await forget_everything(services.database.pool)
        exchange = await ask(services, text)
        row: dict[str, Any] = {"message": text, "group": group, "reply": exchange.reply}
        row |= {name: test(exchange.reply) for name, (_, test) in GRADES.items()}
        row["empty_or_failed"] = exchange.status == "error" or not exchange.reply.strip()
        row["seconds"] = exchange.seconds
        rows.append(row)
        log.info(
            "%d/%d %.1f s%s: %s",
            number,
            len(texts),
            exchange.seconds,
            "".join(f" {name.upper()}" for name in GRADES if row[name]),
            exchange.reply[:120].replace("\n", " "),
        )
    groups = {group: [r for r in rows if r["group"] == group] for group, _ in texts}
    return {
        "by_group": {name: _tally(members) for name, members in {**groups, "all": rows}.items()},
        "replies": rows,
    }


def _tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "messages": len(rows),
        **{name: sum(r[name] for r in rows) for name in [*GRADES, "empty_or_failed"]},
        **latency_summary([r["seconds"] for r in rows]),
    }


def table(results: dict[str, Any]) -> Table:
    columns = [column for column, _ in GRADES.values()]
    rows = []
    for group, tally in results["by_group"].items():
        count = tally["messages"]
        shares = [share(tally[name], count) for name in [*GRADES, "empty_or_failed"]]
        rows.append([group, count, *shares, round(tally["p50"], 1), round(tally["p95"], 1)])
    return Table(
        "Replies to first-person statements, each a new chat's first message",
        ["statements", "n", *columns, "empty or failed", "p50 s", "p95 s"],
        rows,
    )


async def run(args: argparse.Namespace) -> Report:
    async with scratch_services() as services:
        # As the server does after start-up: a new user's first message meets a warmed model.
        await warm_local_model(services)
        texts = [("LoCoMo evidence turns", text) for text in statements(args.data, args.limit)]
        texts += [("short statements", text) for text in SHORT_STATEMENTS]
        texts += [("everyday requests", text) for text in EVERYDAY_REQUESTS]
        results = await evaluate(services, texts)
        model = services.model_plan.describe("chat")
    return Report(
        "chat-replies",
        args.data,
        [table(results)],
        results,
        {"chat": model},
        [
            "Graded by patterns (evals/chat_replies.py): refused ('I can't assist with that'),"
            " no information / don't know (evals.judge.says_dont_know), echoed instructions (a"
            " five-word run of the chat instructions, or 'long-term memory', 'conversation"
            " summary', 'current date and time'), a reply opening with a prose code block."
        ],
    )
