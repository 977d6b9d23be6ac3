"""Suite `memory-statements`: does extraction keep a short thing the user says about themselves,
and only that?

    python -m evals memory-statements [--data PATH] [--limit N]

A user tells an assistant about themselves in passing, often in one sentence and often as an
answer to its reply: "I don't eat meat, by the way." after a chicken recipe. Each message below is
a new chat's user message, after the assistant reply it answers when it has one, and runs through
the real extraction (chat/memory_extraction.py: the configured `memory` model, the local model
without keys, and the store's checks), with nothing remembered before it unless said. Counted per
group: the messages from which at least one memory was saved (the store's checks passed), and the
facts.

- `STATEMENTS`: one-sentence statements about the user of the kinds a ChatGPT user makes (diet,
  dislikes, health, habits, what they can't do), half of them after a reply;
- `FAMILY`: the user's family, their days and ages ("My son Tom turns 5 on 2 February.");
- both again with a daughter's birthday and the user's name remembered (`KNOWN_BEFORE`): a fact
  known made the local model take new ones like it as told already;
- `CHANGES`: changes of what the user told before ("We moved to Edinburgh last month."), read
  with it remembered (`CHANGE_KNOWN`): the old fact should be replaced;
- `REQUESTS`: questions and requests, some on the same subjects ("What are good exercises for bad
  knees?") or with the user in them ("Could you help me plan a trip I can afford?"): a memory
  saved from one is a fact the user never stated;
- LoCoMo evidence turns (../shared/evaldata/locomo/conversations.json, read in place): the first
  speaker's turns that a LoCoMo question cites, `--limit N` of them spread evenly (default 20),
  each alone (no reply before it), as real statements written by others.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from chat.memory_extraction import extract_memories
from chat.warm_up import warm_local_model
from core import chat_store, memory_store
from core.services import Services
from evals.chat_replies import statements
from evals.datasets import LOCOMO_FILE
from evals.metrics import latency_summary
from evals.report import Report, Table, share
from evals.scratch import forget_everything, scratch_services

DEFAULT_DATA = LOCOMO_FILE
DEFAULT_LIMIT = 20
log = logging.getLogger(__name__)

# (the assistant's reply before it or None, the user's message)
STATEMENTS: list[tuple[str | None, str]] = [
    ("Sure! Here's a quick dinner: a chicken stir-fry with rice.", "I don't eat meat, by the way."),
    (None, "I'm vegan, so no dairy please."),
    ("Here is a pasta recipe with bacon.", "Oh, I can't have gluten."),
    (None, "Just so you know, I hate coriander."),
    ("Happy to help with your trip!", "I'm terrified of flying, so trains please."),
    (None, "By the way, I prefer short answers."),
    ("Great question!", "My daughter Lily just turned 5."),
    (None, "I don't drink alcohol."),
    ("Here are some ideas for running.", "I have a bad knee so I can't run."),
    (None, "I usually work night shifts."),
    (None, "I'm diabetic, so keep the sugar low."),
    ("Here is a beach holiday plan.", "I burn easily, I'd rather go somewhere cool."),
    (None, "I'm learning Japanese at the moment."),
    (None, "We just adopted a puppy called Biscuit."),
    ("Here's a workout plan.", "I only have 20 minutes a day for exercise."),
    (None, "I'm allergic to penicillin."),
    (None, "Fyi I'm lactose intolerant."),
    ("Here's a breakfast plan for the week.", "I never eat breakfast."),
    ("How about a kayaking trip?", "I can't swim, so no water sports."),
    (None, "I'm left-handed."),
    ("You might enjoy The Shining.", "I'm not a fan of horror movies."),
    (None, "My wife and I are expecting twins in March."),
    ("Here's a commute plan.", "I work from home on Fridays."),
    (None, "I don't have a car."),
    ("Here's a chart in red and green.", "I'm colour-blind, so avoid red and green."),
    (None, "I get seasick easily."),
    ("Here are some paperback deals.", "I only read books on my Kindle."),
    (None, "I'm scared of dogs."),
    ("Here's a summary.", "Keep answers brief from now on, I read them on my phone."),
]
# The user's family, their days and ages: kept as the user's facts ("The user's son Tom turns 5 on
# 2 February."), with the day.
FAMILY: list[tuple[str | None, str]] = [
    (None, "My son Tom turns 5 on 2 February."),
    ("Here are some party ideas.", "It's for my son Jack, he turns 8 on 20 October."),
    (None, "My daughter Amy turns 3 on 5 June."),
    (None, "My son is 8."),
    (None, "My sister Ana's birthday is March 3."),
    (None, "My husband Raj was born on 12 August 1985."),
    (None, "Our dog Biscuit is 3 years old."),
    ("Here are some gift ideas.", "My mum turns 70 next Saturday."),
    (None, "My wedding anniversary is on 20 June."),
    (None, "My brother lives in Toronto."),
]
# Changes of what the user told before, read with it remembered (`CHANGE_KNOWN`): the old fact
# is closed and the new one current, or a new chat still answers from the old one. "We moved…"
# made the local model copy the known fact it changes in place of the new one.
CHANGE_KNOWN = (
    "The user's name is Sam.",
    "The user lives in Glasgow.",
    "The user is vegetarian.",
    "The user works as a teacher.",
    "The user drinks tea every morning.",
)
CHANGES: list[tuple[str | None, str]] = [
    (None, "Actually we just moved to Edinburgh last month."),
    (None, "We moved to Edinburgh last month."),
    (None, "I moved to Edinburgh last month."),
    ("Here are some things to do in Glasgow.", "We're living in Dundee these days."),
    (None, "I'm not vegetarian any more, I eat fish now."),
    ("Here is a lentil curry.", "I started eating meat again."),
    (None, "I quit teaching, I'm a chef now."),
    (None, "I switched to coffee."),
    ("Here's a morning routine with tea.", "These days I drink coffee instead of tea."),
    (None, "I left my teaching job in the summer and now I work at a bank."),
]
# Known before the statements are read again: shown to the local model, a daughter's birthday made
# it take new facts about family as told already.
KNOWN_BEFORE = ("The user's name is Priya.", "The user's daughter Mira turns 7 on January 14.")
REQUESTS: list[tuple[str | None, str]] = [
    (None, "How do I boil an egg?"),
    ("Here is a short poem.", "Can you make it shorter?"),
    (None, "Paris is the capital of France, right?"),
    (None, "What's the weather like in Rome in May?"),
    ("Glad it helped!", "Thanks, that's great!"),
    (None, "Write me a haiku about autumn."),
    (None, "Is it safe to eat raw eggs?"),
    (None, "Explain how vaccines work."),
    ("Here is the recipe.", "Can you give me one without meat?"),
    (None, "What are good exercises for bad knees?"),
    (None, "Do cats like being brushed?"),
    ("Here's a plan for your week.", "Could you put it in a table?"),
    (None, "Can you suggest a quick dinner I can cook after a night shift?"),
    (None, "Could you help me plan a trip I can afford?"),
    (None, "How do I tell my boss I need a day off?"),
    (None, "Is it OK if I run every day?"),
    (None, "Give me a short answer: what is 2+2?"),
]


async def extract_one(
    services: Services, before: str | None, text: str, known: tuple[str, ...] = ()
) -> dict[str, Any]:
    """`text` as a new chat's user message (after `before`, the assistant's), read for memories
    with only the `known` facts remembered."""
    pool = services.database.pool
    await forget_everything(pool)
    embedder = services.embedder
    for fact, vector in zip(known, await embedder.embed_documents(list(known)), strict=True):
        await memory_store.add_memory(pool, fact, vector, embedder.model_name)
    chat = await chat_store.create_chat(pool, text[:60])
    if before is not None:
        await chat_store.add_message(pool, chat["chat_id"], "assistant", before)
    message = await chat_store.add_message(pool, chat["chat_id"], "user", text)
    result = await extract_memories(services, message["message_id"])
    return {
        "message": text,
        "before": before,
        "saved": [row["content"] for row in result.saved],
        "replaced": [row["content"] for row in result.superseded],
        "refused": result.refused,
        "not_read": result.skipped is not None,
        "seconds": result.seconds,
    }


Group = tuple[list[tuple[str | None, str]], tuple[str, ...]]  # the messages, what is known


async def evaluate(services: Services, groups: dict[str, Group]) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {}
    for group, (messages, known) in groups.items():
        rows[group] = []
        for before, text in messages:
            row = await extract_one(services, before, text, known)
            rows[group].append(row)
            log.info("%s: %r -> %s", group, text, row["saved"] or "nothing")
    return {
        "by_group": {group: _tally(members) for group, members in rows.items()},
        "messages": rows,
    }


def _tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "messages": len(rows),
        "with_a_memory": sum(bool(r["saved"]) for r in rows),
        "memories": sum(len(r["saved"]) for r in rows),
        "replacing": sum(bool(r.get("replaced")) for r in rows),
        "refused": sum(len(r["refused"]) for r in rows),
        "not_read": sum(bool(r.get("not_read")) for r in rows),
        **latency_summary([r["seconds"] for r in rows]),
    }


def tables(results: dict[str, Any]) -> list[Table]:
    summary = Table(
        "Messages read for memories, each alone in a new chat with nothing else remembered",
        ["messages", "n", "not read (tells nothing of the user)", "with a memory saved",
         "memories", "replacing a known one", "refused by the store", "p50 s", "p95 s"],
        [
            [group, t["messages"], t.get("not_read", 0), share(t["with_a_memory"], t["messages"]),
             t["memories"], share(t.get("replacing", 0), t["messages"]), t["refused"],
             round(t["p50"], 1), round(t["p95"], 1)]
            for group, t in results["by_group"].items()
        ],
    )  # fmt: skip
    saved = Table(
        "What was kept from our statements and requests",
        ["group", "message", "memories saved"],
        [
            [
                group,
                row["message"],
                ("; ".join(row["saved"]) or "(none)")
                + "".join(f" (replacing: {old})" for old in row.get("replaced", [])),
            ]
            for group, rows in results["messages"].items()
            if group != "LoCoMo evidence turns"
            for row in rows
        ],
    )
    return [summary, saved]


async def run(args: argparse.Namespace) -> Report:
    limit = args.limit or DEFAULT_LIMIT
    async with scratch_services() as services:
        await warm_local_model(services)
        groups: dict[str, Group] = {
            "statements about the user": (STATEMENTS, ()),
            "statements about family": (FAMILY, ()),
            "both, with a daughter's birthday known": (STATEMENTS + FAMILY, KNOWN_BEFORE),
            "requests and questions": (REQUESTS, ()),
            "requests, with a daughter's birthday known": (REQUESTS, KNOWN_BEFORE),
            "changes of a known fact": (CHANGES, CHANGE_KNOWN),
            "LoCoMo evidence turns": ([(None, text) for text in statements(args.data, limit)], ()),
        }
        results = await evaluate(services, groups)
        model = services.model_plan.describe("memory")
    return Report(
        "memory-statements",
        args.data,
        tables(results),
        results,
        {"memory": model},
        [
            "Each message is read by chat/memory_extraction.extract_memories in a new chat with"
            " nothing remembered, or only the user's name and their daughter's birthday"
            f" ({' '.join(KNOWN_BEFORE)}) where a group says so, and the changes with"
            f" {' '.join(CHANGE_KNOWN)} remembered; 'with a memory saved' counts messages from"
            " which the store accepted at least one fact (grounded in the message, about the"
            " user); 'replacing a known one' those whose new fact closed a remembered one;"
            " 'not read' those in which no fact could be grounded"
            " (core/grounding.may_tell_about_user), so the model was not called."
        ],
    )
