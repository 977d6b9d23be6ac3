"""Suite `memory-extraction`: what automatic memory extraction keeps from a real conversation.

    python -m evals memory-extraction [--data PATH] [--conversation ID] [--sessions N]
                                      [--limit N] [--free-quote]

Each LoCoMo session (../shared/evaldata/locomo/conversations.json, read in place) is replayed
through the real chat flow (runner, graph, recall, `save_reply` queueing the extraction), one chat
per session. The user is the conversation's first speaker: each of their turns is sent as its own
user message, and the other speaker's next turn is the assistant's reply, so extraction sees what
it sees in the app (one user message, the reply before it as context) with the conversation's real
words on both sides. A session that the other speaker opens starts with that turn as the chat's
first assistant message. The replies come from the scripted provider (tests/scripted_model.py)
playing the `chat` and `utility` roles (summaries): they are data, not what is measured, and a local
chat model would cost a minute a turn. The `memory` role stays the configured one (the local model
without keys), with its own fallbacks: extraction runs for real. The session's messages are
dated to the session's date (the extraction writes "yesterday" as a date from it), then the
extraction queue is run to completion (`MemoryWorker(services).run_pending()`), as the app's
worker would after each reply.

Reported, per session and in all:
- memories made (new rows), facts already known (not stored twice), superseded and updated
  memories, facts refused by the store, unusable outputs, failed calls;
- grounding: the share of memories whose quote is in the user message it cites, checked apart
  from the store, from the tables alone (SQL + core.grounding.find_quote); it must be 100%;
- coverage: of the first speaker's turns that are evidence for a LoCoMo question (the questions'
  `evidence` ids), the share from whose message a memory was made (a memory row, current or
  superseded, whose source is that message; an `update` moves the source to the later message);
  also the share of all their turns with a memory, to show how selective extraction is;
- near-duplicates kept: pairs of current memories at cosine >= NEAR_DUPLICATE_SIMILARITY;
- seconds per extraction (p50, p95): one message's whole job, model call included.

`--free-quote` also asks the memory model, for every message and before the real extraction (same
known facts, same reply before it), with the one change the design avoided: the message as plain
text and a free "quote" to copy instead of sentence numbers (the rule, the worked examples and the
JSON schema rewritten to match, nothing else). Nothing of it is stored; it reports
how many facts each design grounds and the evidence turns each covers (numbered: facts the store
accepted, already known ones included; free quote: quotes that core.grounding.find_quote finds
and that share a word with their fact, the store's own test). It doubles the model calls.

`--sessions N`: the first N sessions of each conversation; `--limit N`: at most N user turns in
all, the first ones (a session is cut short rather than skipped). On the local model a message
takes ~10-60 s on two busy cores: start with `--conversation conv-26 --sessions 1`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from litellm import Router
from psycopg_pool import AsyncConnectionPool

import chat.memory_extraction
import chat.memory_worker
from chat.memory_extraction import (
    KNOWN_MEMORIES,
    MAX_OUTPUT_TOKENS,
    BadOutput,
    ExtractionResult,
    parse_operations,
)
from chat.memory_worker import MemoryWorker
from chat.runner import title_from
from core import chat_store
from core.accounts import LOCAL_USER_ID
from core.grounding import best_supporting_sentence, find_quote, shares_a_word
from core.llm_router import ModelPlan, provider_handler, register_provider
from core.memory_search import retrieve_memories
from core.prompts import MEMORY_OPERATIONS_SCHEMA, memory_extraction_request
from core.services import Services
from evals.chat_driver import ask
from evals.datasets import LOCOMO_FILE, Conversation, Session, Turn, load_locomo
from evals.metrics import percentile
from evals.report import Report, Table, share
from evals.scratch import forget_everything, scratch_services
from tests.scripted_model import ScriptedProvider

DEFAULT_DATA = LOCOMO_FILE
# The roles the scripted provider plays while a conversation is replayed: the reply (the other
# speaker's turn) and the summaries of long chats. Every other role keeps its configured models.
SCRIPTED_ROLES = {"chat": "scripted/chat", "utility": "scripted/utility"}
SCRIPTED_SUMMARY = "The user and the assistant talked (scripted summary: replayed conversation)."
# Replayed messages are this far apart (their order is what matters; the app orders by sent_at).
SECONDS_BETWEEN_MESSAGES = 30
# 0.85 merges 78% of hand-written paraphrase pairs (core/memory_store.py, DUPLICATE_SIMILARITY):
# a pair of current memories this close is most likely one fact stored twice.
NEAR_DUPLICATE_SIMILARITY = 0.85
MEMORIES_LISTED = 30  # the facts shown in the report (all of them are in the JSON record)

log = logging.getLogger("resolveai.evals")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=None, help="replay the first N sessions")
    parser.add_argument(
        "--conversation", action="append", help="sample_id(s) to use (default: all)"
    )
    parser.add_argument(
        "--free-quote",
        action="store_true",
        help="also ask for a free quote instead of sentence numbers, to compare coverage",
    )


# --- replaying a conversation ----------------------------------------------------------------


class DatasetReplies:
    """The scripted `chat` and `utility` models of a replay: the chat answers with the turn set
    in `next_reply` (the other speaker's), summaries are a fixed line."""

    def __init__(self) -> None:
        self.next_reply = ""

    def __call__(self, model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if model == "chat":
            return {"text": self.next_reply}
        if model == "utility":
            return {"text": SCRIPTED_SUMMARY}
        raise AssertionError(f"the replay asked the scripted {model!r} model")


def replay_plan(plan: ModelPlan) -> ModelPlan:
    """`plan` with the `chat` and `utility` roles on the scripted provider. Their configured
    deployments stay, renamed, as the fallbacks of the roles that named them (the `memory` role
    falls back to `utility` and `chat` in models.yaml): a failed extraction call must reach a
    real model, never the scripted one."""
    renamed = {role: f"configured-{role}" for role in SCRIPTED_ROLES}
    model_list = [
        {**copy.deepcopy(d), "model_name": renamed.get(d["model_name"], d["model_name"])}
        for d in plan.model_list
    ]
    model_list += [
        {"model_name": role, "litellm_params": {"model": model}}
        for role, model in SCRIPTED_ROLES.items()
    ]
    fallbacks = [
        {group: [renamed.get(target, target) for target in targets]}
        for entry in plan.fallbacks
        for group, targets in entry.items()
        if group not in SCRIPTED_ROLES  # the scripted provider does not fail
    ]
    capabilities = dict(plan.capabilities)
    # The turn uses memory as it would with the configured chat model (tools or recall only).
    first_chat = next(iter(plan.deployments("chat")), "")
    capabilities[SCRIPTED_ROLES["chat"]] = dict(plan.capabilities.get(first_chat, {}))
    return ModelPlan(model_list, fallbacks, dict(plan.router_settings), plan.left_out, capabilities)


@contextlib.contextmanager
def dataset_replies(services: Services) -> Iterator[tuple[Services, DatasetReplies]]:
    """`services` (same database, embedder and memory model) with the replay's scripted roles,
    and the replies to set turn by turn. The scripted provider's responder is restored after."""
    provider = provider_handler("scripted")
    if not isinstance(provider, ScriptedProvider):
        provider = ScriptedProvider()
        register_provider("scripted", provider)
    plan = replay_plan(services.model_plan)
    router = Router(model_list=plan.model_list, fallbacks=plan.fallbacks, **plan.router_settings)
    replies = DatasetReplies()
    previous, provider.responder = provider.responder, replies
    try:
        yield replace(services, model_plan=plan, router=router), replies
    finally:
        provider.responder = previous


@dataclass(frozen=True)
class ReplayedTurn:
    """One of the first speaker's turns, sent as a user message."""

    conversation: str
    session: int
    turn: Turn
    message_id: uuid.UUID
    chat_id: uuid.UUID
    reply_status: str


async def replay_session(
    services: Services,
    replies: DatasetReplies,
    conversation: Conversation,
    session: Session,
    max_turns: int | None = None,
) -> list[ReplayedTurn]:
    """The session in a new chat, the first speaker's turns as user messages (at most
    `max_turns`), dated to the session (see `date_chat`). `services` and `replies` come from
    `dataset_replies`. Extraction is queued, not run."""
    pool = services.database.pool
    user = conversation.speaker_a
    turns = session.turns
    mine = [i for i, turn in enumerate(turns) if turn.speaker == user]
    if max_turns is not None:
        mine = mine[:max_turns]
    if not mine:
        return []
    chat_id: uuid.UUID | None = None
    opening = [t.text for t in turns[: mine[0]]]
    if opening:
        # The other speaker opened the session: their words are the chat's first assistant
        # message, so the user's first message has the reply before it that it answers.
        chat = await chat_store.create_chat(pool, title_from(turns[mine[0]].text))
        chat_id = chat["chat_id"]
        await chat_store.add_message(pool, chat_id, "assistant", "\n\n".join(opening))
    replayed = []
    for position, index in enumerate(mine):
        upto = mine[position + 1] if position + 1 < len(mine) else len(turns)
        # No two turns in a row are the same speaker's in LoCoMo; joined in case a file has them.
        replies.next_reply = "\n\n".join(t.text for t in turns[index + 1 : upto])
        exchange = await ask(services, turns[index].text, chat_id)
        chat_id = exchange.chat_id
        assert exchange.user_message_id is not None
        replayed.append(
            ReplayedTurn(
                conversation.sample_id,
                session.number,
                turns[index],
                exchange.user_message_id,
                chat_id,
                exchange.status,
            )
        )
    await date_chat(pool, chat_id, session.started)
    return replayed


async def date_chat(
    pool: AsyncConnectionPool, chat_id: uuid.UUID | None, when: datetime | None
) -> None:
    """Move the chat's messages to `when` (in their order, SECONDS_BETWEEN_MESSAGES apart): the
    extraction reads dates relative to the message's date, which must be the session's, not
    today. Done before extraction runs."""
    if chat_id is None or when is None:
        return
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE messages AS m SET sent_at = %(when)s + make_interval(secs => o.n * %(gap)s)"
            " FROM (SELECT message_id,"
            "   (row_number() OVER (ORDER BY sent_at, message_id) - 1)::float8 AS n"
            "   FROM messages WHERE chat_id = %(chat)s) AS o"
            " WHERE m.message_id = o.message_id",
            {"when": when, "gap": SECONDS_BETWEEN_MESSAGES, "chat": chat_id},
        )


async def date_memories(pool: AsyncConnectionPool) -> None:
    """Date each memory to the message it came from. In the app a memory is made seconds after
    its message, and recall shows that date ("said on 2023-05-08"); a replay dates its messages
    to the session (`date_chat`) but extracts today, so without this every fact would look said
    today, and an answer about when would be dated today."""
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE memories AS mem SET created_at = msg.sent_at, valid_from = msg.sent_at"
            " FROM messages AS msg"
            " WHERE msg.message_id = mem.source_message_id AND mem.created_at > msg.sent_at"
        )


# --- running the extraction queue ------------------------------------------------------------


@dataclass
class Extraction:
    """One extraction job the worker ran (a retried job has one per attempt)."""

    message_id: uuid.UUID
    seconds: float
    result: ExtractionResult | None  # None when it raised (the worker retries it)
    error: str | None = None
    free_quote: dict[str, Any] | None = None  # the free-quote comparison, with --free-quote

    @property
    def grounded_facts(self) -> int:
        """Facts the store accepted as the user's words (stored, updated or already known)."""
        if self.result is None:
            return 0
        return len(self.result.saved) + len(self.result.updated) + self.result.duplicates

    @property
    def unusable(self) -> bool:
        return self.result is not None and any(
            why.startswith("bad output") for why in self.result.refused
        )


@contextlib.contextmanager
def recorded_extractions(
    services: Services, free_quote: bool = False
) -> Iterator[list[Extraction]]:
    """Record every extraction the worker runs meanwhile. `run_pending` returns only a count, so
    the worker's reference to `extract_memories` is wrapped (nothing else changes): the wrapper
    times the real call and keeps its result; with `free_quote`, it first asks the free-quote
    variant on the same inputs."""
    original = chat.memory_worker.extract_memories
    records: list[Extraction] = []

    async def recording(job_services: Services, message_id: uuid.UUID) -> ExtractionResult:
        compared = await free_quote_extraction(services, message_id) if free_quote else None
        started = time.perf_counter()
        try:
            result = await original(job_services, message_id)
        except Exception as error:
            records.append(
                Extraction(
                    message_id, time.perf_counter() - started, None,
                    f"{type(error).__name__}: {error}", compared,
                )
            )  # fmt: skip
            raise
        records.append(
            Extraction(message_id, time.perf_counter() - started, result, None, compared)
        )
        return result

    chat.memory_worker.extract_memories = recording  # type: ignore[assignment]
    try:
        yield records
    finally:
        chat.memory_worker.extract_memories = original


async def extract_pending(services: Services, free_quote: bool = False) -> list[Extraction]:
    """Run the extraction queue to completion, as the app's worker does; what each job did."""
    with recorded_extractions(services, free_quote) as records:
        await MemoryWorker(services).run_pending()
    return records


# --- the free-quote variant (--free-quote) ------------------------------------------------------

# The production request (core/prompts.py), changed only where it asks for sentence numbers: the
# rule citing them, any worked example (a numbered message and its answer become the plain message
# and the same facts with the text of the sentences cited as the quote), and the message itself.
FREE_QUOTE_RULE = (
    '- "quote": the exact words of the user\'s message that state the fact, copied character for'
    " character."
)
# The app's test that a fact is about the user (it refuses the others before any quote is
# looked at), applied to the free-quote facts too so that both designs are graded alike. Read
# from chat/memory_extraction.py, where it is private, so the two cannot drift apart.
ABOUT_THE_USER: re.Pattern[str] | None = getattr(chat.memory_extraction, "_ABOUT_THE_USER", None)
_SENTENCES_RULE = re.compile(r'^- "sentences":.*$', re.MULTILINE)
_NUMBERED_LINE = re.compile(r"^\[(\d+)\] (.*)$")
_USER_MESSAGE = re.compile(r"(<user_message>\n)(.*?)(\n</user_message>)", re.DOTALL)


def free_quote_schema() -> dict[str, Any]:
    schema = copy.deepcopy(MEMORY_OPERATIONS_SCHEMA)
    item = schema["properties"]["operations"]["items"]
    del item["properties"]["sentences"]
    item["properties"]["quote"] = {"type": "string", "maxLength": 300}
    item["required"] = ["op", "fact", "quote"]
    return schema


def free_quote_request(
    text: str, previous_reply: str | None, known: list[str], today: datetime
) -> list[dict[str, str]]:
    """The extraction request with plain messages and quotes asked for instead of sentence
    numbers; ValueError when the production request no longer has the shape this rewrites (then
    the comparison would not be like for like)."""
    system, *turns = memory_extraction_request(text, previous_reply, known, today)
    instructions, rules = _SENTENCES_RULE.subn(FREE_QUOTE_RULE, system["content"])
    if rules != 1:
        raise ValueError('the extraction prompt has no single "sentences" rule to rewrite')
    instructions = instructions.replace(" (numbered sentences)", "")
    instructions = instructions.replace('"sentences": [1]', '"quote": "..."')
    rewritten = [{"role": "system", "content": instructions}]
    sentences: dict[int, str] = {}
    for turn in turns[:-1]:  # worked examples; the last turn is the message, already plain
        content = turn["content"]
        if turn["role"] == "user":
            content, sentences = _plain_example(content)
        elif turn["role"] == "assistant":
            content = _quoted_answer(content, sentences)
        rewritten.append({"role": turn["role"], "content": content})
    rewritten.append(turns[-1])
    if any('"sentences"' in m["content"] for m in rewritten):
        raise ValueError('the extraction prompt still asks for "sentences" after the rewrite')
    return rewritten


def _plain_example(content: str) -> tuple[str, dict[int, str]]:
    """An example's input with its numbered message made plain, and its sentences by number."""
    match = _USER_MESSAGE.search(content)
    if match is None:
        raise ValueError("a worked example has no <user_message>")
    numbered = [_NUMBERED_LINE.match(line) for line in match.group(2).splitlines()]
    if not all(numbered):
        raise ValueError("a worked example's message is not numbered sentences")
    sentences = {int(m.group(1)): m.group(2) for m in numbered if m}
    plain = " ".join(sentences.values())
    return content[: match.start(2)] + plain + content[match.end(2) :], sentences


def _quoted_answer(content: str, sentences: dict[int, str]) -> str:
    """An example's answer with each operation's sentence numbers replaced by their text."""
    answer = json.loads(content)
    for operation in answer.get("operations", []):
        cited = operation.pop("sentences", [])
        operation["quote"] = " ".join(sentences[n] for n in range(min(cited), max(cited) + 1))
    return json.dumps(answer)


async def free_quote_extraction(services: Services, message_id: uuid.UUID) -> dict[str, Any]:
    """Ask the memory model for facts with free quotes (stores nothing): facts proposed, how many
    the store's test would ground, and the time taken."""
    started = time.perf_counter()
    pool = services.database.pool
    outcome: dict[str, Any] = {"proposed": 0, "grounded": 0, "grounded_with_rescue": 0}
    outcome |= {"facts": [], "seconds": 0.0}
    message = await chat_store.user_message_in_context(pool, message_id)
    if message is None:
        return outcome | {"error": "no message"}
    text = message["content"]
    known = await retrieve_memories(
        pool, services.embedder, text, limit=KNOWN_MEMORIES, user_id=LOCAL_USER_ID
    )
    request = free_quote_request(
        text, message["previous_reply"], [m.content for m in known], message["sent_at"]
    )
    try:
        response = await services.router.acompletion(
            model="memory",
            messages=request,
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": "memory_operations_free_quote",
                    "schema": free_quote_schema(),
                    "strict": True,
                },
            },
            max_tokens=MAX_OUTPUT_TOKENS,
            temperature=0,
        )
        operations = parse_operations(response.choices[0].message.content or "")
    except BadOutput as error:
        outcome["error"] = f"bad output: {error}"
        operations = []
    except Exception as error:  # the comparison must not stop the real extraction
        outcome["error"] = f"{type(error).__name__}: {error}"
        operations = []
    for operation in operations:
        fact, quote = operation.get("fact"), operation.get("quote")
        if operation.get("op") not in ("add", "update", "supersede") or not isinstance(fact, str):
            continue
        outcome["proposed"] += 1
        about = ABOUT_THE_USER is None or bool(ABOUT_THE_USER.search(fact))
        span = find_quote(quote, text) if isinstance(quote, str) else None
        grounded = about and span is not None and shares_a_word(fact, span)
        # The app's fallback for a wrong sentence number, applied to a quote not found: the
        # sentence sharing most of the fact's words.
        rescued = grounded or (about and best_supporting_sentence(text, fact) is not None)
        outcome["grounded"] += int(grounded)
        outcome["grounded_with_rescue"] += int(rescued)
        outcome["facts"].append(
            {"fact": fact, "quote": quote, "grounded": grounded, "rescued": rescued}
        )
    outcome["seconds"] = time.perf_counter() - started
    return outcome


# --- checks straight from the tables ------------------------------------------------------------


async def check_grounding(pool: AsyncConnectionPool) -> dict[str, Any]:
    """Every memory (superseded ones too) against the message it cites, read from the tables
    and checked with find_quote, apart from the store's own check: the evidence must be a user
    message holding the quote. `exact`: the quote is a verbatim substring (what the store saves)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT mem.memory_id, mem.content, mem.quote, msg.role, msg.content"
            " FROM memories AS mem LEFT JOIN messages AS msg"
            " ON msg.message_id = mem.source_message_id"
        )
        rows = await cursor.fetchall()
    grounded = exact = 0
    failures = []
    for memory_id, fact, quote, role, message in rows:
        found = role == "user" and find_quote(quote, message) is not None
        grounded += int(found)
        exact += int(role == "user" and quote in message)
        if not found:
            failures.append(
                {"memory_id": str(memory_id), "fact": fact, "quote": quote, "role": role}
            )
    return {
        "memories": len(rows),
        "grounded": grounded,
        "exact": exact,
        "share": grounded / len(rows) if rows else 1.0,
        "not_grounded": failures,
    }


async def memory_sources(pool: AsyncConnectionPool) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """Every memory row by the message it came from."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT source_message_id, content, quote, valid_to IS NOT NULL FROM memories"
            " WHERE source_message_id IS NOT NULL ORDER BY created_at"
        )
        rows = await cursor.fetchall()
    sources: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for message_id, fact, quote, superseded in rows:
        sources.setdefault(message_id, []).append(
            {"fact": fact, "quote": quote, "superseded": superseded}
        )
    return sources


def listed_memories(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The memories made, turn by turn, without their quotes: the quotes are LoCoMo's text, which
    is read in place and not copied into this repository's records (the turn id points to it)."""
    return [
        {
            "turn": r["turn"],
            "evidence": r["evidence"],
            "fact": m["fact"],
            "current": not m["superseded"],
        }
        for r in records
        for m in r["memories"]
    ]


async def near_duplicates(pool: AsyncConnectionPool) -> list[dict[str, Any]]:
    """Pairs of current memories at cosine >= NEAR_DUPLICATE_SIMILARITY (a scan: eval sizes)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT a.content, b.content, 1 - (a.embedding <=> b.embedding) AS similarity"
            " FROM memories AS a JOIN memories AS b ON a.memory_id < b.memory_id"
            " WHERE a.valid_to IS NULL AND b.valid_to IS NULL"
            " AND 1 - (a.embedding <=> b.embedding) >= %s ORDER BY similarity DESC",
            (NEAR_DUPLICATE_SIMILARITY,),
        )
        rows = await cursor.fetchall()
    return [{"a": a, "b": b, "similarity": round(float(s), 3)} for a, b, s in rows]


def evidence_turns(conversation: Conversation) -> set[str]:
    """The first speaker's turns that some question cites as evidence."""
    speaker = {t.id: t.speaker for s in conversation.sessions for t in s.turns}
    cited = {turn_id for q in conversation.questions for turn_id in q.evidence}
    return {t for t in cited if speaker.get(t) == conversation.speaker_a}


# --- the suite -------------------------------------------------------------------------------


def _tally(extractions: list[Extraction]) -> dict[str, Any]:
    done = [e for e in extractions if e.result is not None]
    seconds = [e.seconds for e in done]
    return {
        "extractions": len(done),
        "new": sum(len(e.result.saved) for e in done if e.result),
        "already_known": sum(e.result.duplicates for e in done if e.result),
        "superseded": sum(len(e.result.superseded) for e in done if e.result),
        "updated": sum(len(e.result.updated) for e in done if e.result),
        "refused": sum(
            sum(not why.startswith("bad output") for why in e.result.refused)
            for e in done
            if e.result
        ),
        "unusable_outputs": sum(e.unusable for e in done),
        "failed_attempts": sum(e.result is None for e in extractions),
        "seconds_p50": percentile(seconds, 0.5),
        "seconds_p95": percentile(seconds, 0.95),
    }


def _coverage(turns: list[ReplayedTurn], evidence: set[str], covered: set[str]) -> dict[str, Any]:
    cited = [t.turn.id for t in turns if t.turn.id in evidence]
    return {
        "evidence_turns": len(cited),
        "evidence_covered": sum(t in covered for t in cited),
        "coverage": sum(t in covered for t in cited) / len(cited) if cited else None,
        "user_turns": len(turns),
        "user_turns_with_memory": sum(t.turn.id in covered for t in turns),
    }


async def evaluate(
    services: Services,
    conversations: list[Conversation],
    limit: int | None = None,
    sessions: int | None = None,
    free_quote: bool = False,
) -> dict[str, Any]:
    pool = services.database.pool
    if free_quote:  # a prompt this cannot rewrite fails here, before any model call
        free_quote_request("I live in Porto.", None, [], datetime.now(UTC))
    budget = limit
    replayed: list[ReplayedTurn] = []
    extractions: list[Extraction] = []
    per_session: list[dict[str, Any]] = []
    evidence: dict[str, set[str]] = {}
    near: list[dict[str, Any]] = []
    grounding = {"memories": 0, "grounded": 0, "exact": 0, "not_grounded": []}
    records: dict[str, dict[str, Any]] = {}
    for conversation in conversations:
        if budget is not None and budget <= 0:
            break
        await forget_everything(pool)  # memories are global to an install: one per conversation
        evidence[conversation.sample_id] = evidence_turns(conversation)
        mine: list[ReplayedTurn] = []
        with dataset_replies(services) as (replay_services, replies):
            for session in conversation.sessions[:sessions]:
                if budget is not None and budget <= 0:
                    break
                turns = await replay_session(
                    replay_services, replies, conversation, session, budget
                )
                if budget is not None:
                    budget -= len(turns)
                done = await extract_pending(services, free_quote)
                mine += turns
                extractions += done
                per_session.append(
                    {
                        "conversation": conversation.sample_id,
                        "session": session.number,
                        "turns": turns,
                        "extractions": done,
                    }
                )
                log.info(
                    "memory-extraction: %s session %d: %d user messages, %d memories",
                    conversation.sample_id,
                    session.number,
                    len(turns),
                    sum(len(e.result.saved) for e in done if e.result),
                )
        # Checked before the next conversation empties the tables.
        checked = await check_grounding(pool)
        for key in ("memories", "grounded", "exact"):
            grounding[key] += checked[key]
        grounding["not_grounded"] += checked["not_grounded"]
        near += [
            pair | {"conversation": conversation.sample_id} for pair in await near_duplicates(pool)
        ]
        sources = await memory_sources(pool)
        for turn in mine:
            records[f"{turn.conversation}/{turn.turn.id}"] = {
                "conversation": turn.conversation,
                "turn": turn.turn.id,
                "evidence": turn.turn.id in evidence[conversation.sample_id],
                "memories": sources.get(turn.message_id, []),
                "reply_status": turn.reply_status,
            }
        replayed += mine
    by_message = {t.message_id: t for t in replayed}
    for extraction in extractions:
        turn = by_message.get(extraction.message_id)
        if turn is None:
            continue
        record = records[f"{turn.conversation}/{turn.turn.id}"]
        record["seconds"] = round(extraction.seconds, 2)
        if extraction.result is not None:
            record["refused"] = extraction.result.refused
            record["grounded_facts"] = extraction.grounded_facts
        if extraction.error:
            record.setdefault("errors", []).append(extraction.error)
        if extraction.free_quote is not None:
            record["free_quote"] = extraction.free_quote

    def covered_turns(turns: list[ReplayedTurn]) -> set[str]:
        return {t.turn.id for t in turns if records[f"{t.conversation}/{t.turn.id}"]["memories"]}

    sessions_out = []
    for entry in per_session:
        turns = entry["turns"]
        cited = evidence[entry["conversation"]]
        sessions_out.append(
            {"conversation": entry["conversation"], "session": entry["session"]}
            | _coverage(turns, cited, covered_turns(turns))
            | _tally(entry["extractions"])
        )
    all_evidence = {f"{c}/{t}" for c, turns in evidence.items() for t in turns}
    covered_all = {k for k, r in records.items() if r["memories"]}
    cited = [k for k in records if k in all_evidence]
    overall = _tally(extractions) | {
        "user_turns": len(records),
        "user_turns_with_memory": len(covered_all),
        "evidence_turns": len(cited),
        "evidence_covered": sum(k in covered_all for k in cited),
        "coverage": sum(k in covered_all for k in cited) / len(cited) if cited else None,
        "memories": grounding["memories"],
        "grounded": grounding["grounded"],
        "grounded_share": grounding["grounded"] / grounding["memories"]
        if grounding["memories"]
        else 1.0,
        "exact_quotes": grounding["exact"],
        "near_duplicates": len(near),
    }
    turns_out = list(records.values())
    results: dict[str, Any] = {
        "overall": overall,
        "sessions": sessions_out,
        "not_grounded": grounding["not_grounded"],
        "near_duplicate_pairs": near,
        "near_duplicate_similarity": NEAR_DUPLICATE_SIMILARITY,
        "memories": listed_memories(turns_out),
        "turns": [
            {k: v for k, v in r.items() if k != "memories"} | {"memories": len(r["memories"])}
            for r in turns_out
        ],
    }
    if free_quote:
        results["free_quote"] = compare_designs(list(records.values()))
    return results


def compare_designs(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Sentence numbers (what ran) against free quotes (asked on the same inputs): facts
    proposed, facts grounded, and the turns with at least one grounded fact. Numbered: what the
    store accepted (the app's checks and its fallback for a wrong number included). Free quote:
    facts about the user (the app's own test) whose quote find_quote finds and shares a word with
    the fact; "+ rescue": also those the app's fallback (core.grounding.best_supporting_sentence)
    would ground without the quote."""
    compared = [r for r in records if "free_quote" in r and "grounded_facts" in r]

    def bad(why: str) -> bool:
        return why.startswith("bad output")

    rows = {
        "numbered sentences (as shipped)": [
            (
                r["grounded_facts"] + sum(not bad(why) for why in r.get("refused", [])),
                r["grounded_facts"],
                any(bad(why) for why in r.get("refused", [])),
                r["seconds"],
            )
            for r in compared
        ],
        "free quote": [
            (
                r["free_quote"]["proposed"],
                r["free_quote"]["grounded"],
                bool(r["free_quote"].get("error")),
                r["free_quote"]["seconds"],
            )
            for r in compared
        ],
        "free quote + rescue": [
            (
                r["free_quote"]["proposed"],
                r["free_quote"]["grounded_with_rescue"],
                bool(r["free_quote"].get("error")),
                r["free_quote"]["seconds"],
            )
            for r in compared
        ],
    }
    designs: dict[str, dict[str, Any]] = {}
    for name, per_message in rows.items():
        proposed = sum(p for p, _, _, _ in per_message)
        grounded = [g for _, g, _, _ in per_message]
        cited = [g for g, r in zip(grounded, compared, strict=True) if r["evidence"]]
        designs[name] = {
            "messages": len(per_message),
            "proposed": proposed,
            "grounded": sum(grounded),
            "grounded_share": sum(grounded) / proposed if proposed else None,
            "unusable_outputs": sum(u for _, _, u, _ in per_message),
            "evidence_turns": len(cited),
            "evidence_covered": sum(g > 0 for g in cited),
            "coverage": sum(g > 0 for g in cited) / len(cited) if cited else None,
            "user_turns_with_fact": sum(g > 0 for g in grounded),
            "seconds_p50": percentile([s for _, _, _, s in per_message], 0.5),
        }
    return designs


def tables(results: dict[str, Any], memory_model: str) -> list[Table]:
    overall = results["overall"]
    summary = Table(
        f"Memory extraction: {overall['user_turns']} user messages from"
        f" {len(results['sessions'])} sessions, memory model {memory_model}; seconds per"
        f" extraction p50 {overall['seconds_p50']:.1f}, p95 {overall['seconds_p95']:.1f}",
        [
            "memories",
            "quote in its user message",
            "coverage of evidence turns",
            "user turns with a memory",
            "already known",
            "superseded",
            "updated",
            "refused",
            "unusable outputs",
            "failed calls",
            f"near-duplicate pairs (>= {NEAR_DUPLICATE_SIMILARITY})",
        ],
        [
            [
                overall["memories"],
                share(overall["grounded"], overall["memories"]),
                share(overall["evidence_covered"], overall["evidence_turns"]),
                share(overall["user_turns_with_memory"], overall["user_turns"]),
                overall["already_known"],
                overall["superseded"],
                overall["updated"],
                overall["refused"],
                overall["unusable_outputs"],
                overall["failed_attempts"],
                overall["near_duplicates"],
            ]
        ],
    )
    sessions = Table(
        "Per session",
        [
            "conversation",
            "session",
            "user turns",
            "new memories",
            "evidence turns covered",
            "already known",
            "superseded",
            "refused",
            "seconds p50",
            "seconds p95",
        ],
        [
            [
                s["conversation"],
                s["session"],
                s["user_turns"],
                s["new"],
                share(s["evidence_covered"], s["evidence_turns"]),
                s["already_known"],
                s["superseded"],
                s["refused"],
                f"{s['seconds_p50']:.1f}",
                f"{s['seconds_p95']:.1f}",
            ]
            for s in results["sessions"]
        ],
    )
    out = [summary, sessions]
    listed = results["memories"]
    if listed:
        shown = listed[:MEMORIES_LISTED]
        more = f" (the first {len(shown)} of {len(listed)})" if len(listed) > len(shown) else ""
        out.append(
            Table(
                f"Memories made{more}: grounding proves the words are the user's, not that the"
                " fact reads them right",
                ["turn", "evidence turn", "fact", "current"],
                [
                    [
                        m["turn"],
                        "yes" if m["evidence"] else "",
                        m["fact"],
                        "yes" if m["current"] else "superseded",
                    ]
                    for m in shown
                ],
            )
        )
    if "free_quote" in results:
        out.append(
            Table(
                "Numbered sentences (the design) against a free quote, same messages and context",
                [
                    "asked for",
                    "messages",
                    "facts proposed",
                    "grounded",
                    "evidence turns with a grounded fact",
                    "user turns with a grounded fact",
                    "unusable outputs",
                    "seconds p50",
                ],
                [
                    [
                        name,
                        d["messages"],
                        d["proposed"],
                        share(d["grounded"], d["proposed"]),
                        share(d["evidence_covered"], d["evidence_turns"]),
                        share(d["user_turns_with_fact"], d["messages"]),
                        d["unusable_outputs"],
                        f"{d['seconds_p50']:.1f}",
                    ]
                    for name, d in results["free_quote"].items()
                ],
            )
        )
    return out


def select(conversations: list[Conversation], wanted: list[str] | None) -> list[Conversation]:
    if not wanted:
        return conversations
    chosen = [c for c in conversations if c.sample_id in wanted]
    if not chosen:
        raise SystemExit(f"No conversation {wanted}")
    return chosen


async def run(args: argparse.Namespace) -> Report:
    conversations = select(load_locomo(args.data), args.conversation)
    async with scratch_services() as services:
        results = await evaluate(
            services, conversations, args.limit, args.sessions, getattr(args, "free_quote", False)
        )
        memory_model = services.model_plan.describe("memory")
    notes = [
        "Each first-speaker turn is a user message in the session's chat; the other speaker's"
        " turns are the (scripted) replies. Extraction runs on the configured `memory` model"
        " after each session (MemoryWorker.run_pending).",
        "Quote in its user message: checked from the tables (memories joined to messages, role"
        " 'user', core.grounding.find_quote), superseded memories included. Coverage: evidence"
        " turns of the first speaker (the questions' `evidence`) from whose message a memory was"
        " made.",
    ]
    if results["overall"]["grounded_share"] < 1.0:
        notes.insert(0, f"NOT GROUNDED: {len(results['not_grounded'])} memories (see the JSON).")
    if "free_quote" in results:
        notes.append(
            "Free quote: the same request (rule, worked examples, schema) asking for a quote"
            " copied from the plain message instead of sentence numbers, on the same inputs;"
            " grounded = a fact about the user (the app's test) whose quote find_quote finds and"
            " shares a word with it (the store's test);"
            " '+ rescue' adds facts the app's fallback for a wrong sentence number"
            " (best_supporting_sentence) would ground; nothing from it is stored. Numbered: facts"
            " the store accepted (already known ones included)."
        )
    return Report(
        "memory-extraction",
        args.data,
        tables(results, memory_model),
        results,
        {"memory": memory_model, "replies": "scripted (the other speaker's turns)"},
        notes,
    )
