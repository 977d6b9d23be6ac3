"""Suite `memory-qa`: does the assistant remember what it was told, across chats?

    python -m evals memory-qa [--data PATH] [--limit N] [--sessions N] [--conversation ID]
                              [--replay session|turns]

Each LoCoMo conversation is replayed through the real chat flow (runner, graph, recall, tools, a
scratch database): the user is the conversation's first speaker. `--replay session` (the default):
each session becomes one message in a new chat, "Here is my conversation with <other> on <date>"
followed by the session's turns, answered by the configured `chat` model. `--replay turns`: each
of the first speaker's turns is a user message of the session's chat and the other speaker's turns
are the replies (scripted, as in suite `memory-extraction`), so memories come only from what the
user said (questions about the other speaker then have no memory to draw on, by design). Either
way the messages are dated to the session and, after each session, the extraction queue is run to
completion (`MemoryWorker(services).run_pending()`, the configured `memory` model), as the app's
worker would after each reply, and the memories are dated to their messages (recall shows when a
fact was said); a chat model with memory tools may also save_memory itself. Then
every question whose evidence lies in the replayed sessions is asked in a fresh chat of its own
("About what I told you before: <question> Answer in a few words."), so only long-term memory
can answer it: the memories recalled into the prompt before the model call, or retrieve_memory.
The questions' own messages are queued for extraction but never extracted, so one question
cannot feed the next.

Grading: token F1 of the reply against the gold answer (SQuAD's normalization; LoCoMo's own
metric) and "contains": the gold answer occurs in the reply. Adversarial questions (category 5)
have no answer in the conversation: they score 1 when the reply says it does not know, else 0.
When MODELS_CONFIG has a usable `judge` deployment, an LLM judge grades every reply too ("judge":
share judged correct). Also reported, per question: "evidence in memory" (a memory's quote lies in
one of the question's evidence turns: the turn's message, or its line of the pasted session),
"used memory" (the reply's messages.memory_ids is not empty: memories recalled into its prompt or
retrieved by the tool, "Used 2 memories" in the UI), "used evidence memory" (one of those quotes
an evidence turn), "looked up memory" (retrieve_memory was called) and seconds per reply; per
session, memories saved by the model's tool calls and memories extracted.

`--sessions N` replays only the first N sessions of each conversation (and asks only questions
whose evidence lies in them); `--limit N` asks at most N questions, spread evenly. With the local
model a session takes several minutes on two cores: start with `--sessions 1 --limit 3`.
"""

from __future__ import annotations

import argparse
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from core.services import Services
from evals.chat_driver import ask
from evals.datasets import (
    LOCOMO_CATEGORIES,
    LOCOMO_FILE,
    Conversation,
    LocomoQuestion,
    Session,
    load_locomo,
    sample,
)
from evals.judge import contains_answer, judge_answer, judge_model, says_dont_know
from evals.memory_extraction import (
    dataset_replies,
    date_chat,
    date_memories,
    extract_pending,
    replay_session,
    select,
)
from evals.metrics import mean_by, percentile, token_f1
from evals.report import Report, Table
from evals.scratch import forget_everything, scratch_services

DEFAULT_DATA = LOCOMO_FILE
# The same frame for every question. The questions name the speakers in the third person, so the
# frame says they are about what the user said before (as "When did I…?" would); short answers
# keep token F1 fair.
QUESTION_FRAME = "About what I told you before: {question} Answer in a few words."
REPLAYS = ("session", "turns")
# Per question, as shares (see the module docstring).
MEMORY_COLUMNS = ("evidence in memory", "used memory", "used evidence memory", "looked up memory")

log = logging.getLogger("resolveai.evals")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=None, help="replay the first N sessions")
    parser.add_argument(
        "--conversation", action="append", help="sample_id(s) to use (default: all)"
    )
    parser.add_argument(
        "--replay",
        choices=REPLAYS,
        default="session",
        help="a session as one pasted message (default), or the user's turns as messages",
    )


def session_message(conversation: Conversation, session: Session) -> str:
    """A session as the user (the first speaker) would paste it into the chat."""
    return pasted_session(conversation, session)[0]


def pasted_session(
    conversation: Conversation, session: Session
) -> tuple[str, dict[str, tuple[int, int]]]:
    """`session_message`, and where each turn's line is in it (start, end)."""
    me, other = conversation.speaker_a, conversation.speaker_b
    text = (
        f"I'm {me}. Here is my conversation with {other} on {session.date}."
        " Keep in mind what matters from it.\n\n"
    )
    spans = {}
    for number, turn in enumerate(session.turns):
        line = f"{turn.speaker}: {turn.text}"
        text += ("\n" if number else "") + line
        spans[turn.id] = (len(text) - len(line), len(text))
    return text, spans


def question_message(question: LocomoQuestion) -> str:
    return QUESTION_FRAME.format(question=question.question)


async def count_memories(services: Services) -> int:
    async with services.database.pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM memories")
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class Carrier:
    """Where a replayed turn is: its user message, and its span there (the whole message when
    each turn is a message of its own)."""

    message_id: uuid.UUID
    start: int
    end: int


async def memory_spans(pool: AsyncConnectionPool) -> dict[uuid.UUID, Carrier]:
    """Where each memory's quote is: its source message and the quote's span in it (the quote is
    the message's own text, so it is found)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT mem.memory_id, mem.source_message_id,"
            " strpos(msg.content, mem.quote) - 1, length(mem.quote)"
            " FROM memories AS mem JOIN messages AS msg ON msg.message_id = mem.source_message_id"
        )
        rows = await cursor.fetchall()
    return {
        memory_id: Carrier(source, start, start + length)
        for memory_id, source, start, length in rows
        if start >= 0
    }


def covers(quote: Carrier, turns: list[Carrier]) -> bool:
    """Whether a memory's quote overlaps one of these turns."""
    return any(
        quote.message_id == turn.message_id and quote.start < turn.end and turn.start < quote.end
        for turn in turns
    )


def answerable_in(conversation: Conversation, sessions: int) -> list[LocomoQuestion]:
    """Questions whose evidence turns all lie in the first `sessions` sessions."""
    known = {turn.id for s in conversation.sessions[:sessions] for turn in s.turns}
    return [q for q in conversation.questions if q.evidence and set(q.evidence) <= known]


async def grade(
    services: Services, judge: str | None, question: LocomoQuestion, reply: str
) -> dict[str, float]:
    if question.answer is None:  # adversarial: right only when it says it does not know
        right = float(says_dont_know(reply))
        scores = {"F1": right, "contains": right}
    else:
        scores = {
            "F1": token_f1(reply, question.answer),
            "contains": float(contains_answer(reply, [question.answer])),
        }
    if judge is not None:
        verdict = await judge_answer(services.router, question.question, question.answer, reply)
        scores["judge"] = float(bool(verdict))
    return scores


async def replay(
    services: Services, conversation: Conversation, session: Session, mode: str
) -> tuple[dict[str, Carrier], dict[str, Any]]:
    """One session replayed (not yet extracted): where each of its turns is (its `Carrier`),
    and what the session's row reports so far."""
    pool = services.database.pool
    if mode == "turns":
        with dataset_replies(services) as (replay_services, replies):
            turns = await replay_session(replay_services, replies, conversation, session)
        statuses = {t.reply_status for t in turns} - {"complete"}
        carriers = {t.turn.id: Carrier(t.message_id, 0, len(t.turn.text)) for t in turns}
        return carriers, {
            "user_messages": len(turns),
            "seconds": 0.0,  # scripted replies: nothing worth timing
            "status": ", ".join(sorted(statuses)) or "complete",
        }
    text, spans = pasted_session(conversation, session)
    exchange = await ask(services, text)
    await date_chat(pool, exchange.chat_id, session.started)
    message_id = exchange.user_message_id
    assert message_id is not None
    return {turn_id: Carrier(message_id, *span) for turn_id, span in spans.items()}, {
        "user_messages": 1,
        "seconds": exchange.seconds,
        "status": exchange.status,
    }


async def evaluate(
    services: Services,
    conversations: list[Conversation],
    limit: int | None = None,
    sessions: int | None = None,
    replay_mode: str = "session",
) -> dict[str, Any]:
    judge = judge_model(services.model_plan)
    pool = services.database.pool
    plan = [
        (conversation, sessions or len(conversation.sessions)) for conversation in conversations
    ]
    asked = sample([(c, q) for c, n in plan for q in answerable_in(c, n)], limit)
    replayed: list[dict[str, Any]] = []
    graded: list[tuple[str, dict[str, float]]] = []
    answers: list[dict[str, Any]] = []
    for conversation, replay_count in plan:
        questions = [q for c, q in asked if c is conversation]
        if not questions:
            continue
        await forget_everything(pool)
        carriers: dict[str, Carrier] = {}  # turn id → where the user sent it
        for session in conversation.sessions[:replay_count]:
            before = await count_memories(services)
            carried, row = await replay(services, conversation, session, replay_mode)
            carriers |= carried
            saved = await count_memories(services) - before
            extractions = await extract_pending(services)
            await date_memories(pool)
            extracted = sum(len(e.result.saved) for e in extractions if e.result)
            log.info(
                "memory-qa: %s session %d: %d memories saved by the model, %d extracted"
                " (%.0f s reply, %.0f s extraction)",
                conversation.sample_id,
                session.number,
                saved,
                extracted,
                row["seconds"],
                sum(e.seconds for e in extractions),
            )
            replayed.append(
                {
                    "conversation": conversation.sample_id,
                    "session": session.number,
                    "turns": len(session.turns),
                    "memories_saved": saved,
                    "memories_extracted": extracted,
                    "extraction_seconds": sum(e.seconds for e in extractions),
                    "failed_extractions": sum(e.result is None for e in extractions),
                }
                | row
            )
        quotes = await memory_spans(pool)
        for question in questions:
            exchange = await ask(services, question_message(question))
            scores = await grade(services, judge, question, exchange.reply)
            evidence = [carriers[t] for t in question.evidence if t in carriers]
            used = [quotes[m] for m in exchange.memory_ids if m in quotes]
            scores["evidence in memory"] = float(any(covers(q, evidence) for q in quotes.values()))
            scores["used memory"] = float(bool(exchange.memory_ids))
            scores["used evidence memory"] = float(any(covers(q, evidence) for q in used))
            scores["looked up memory"] = float(bool(exchange.calls_of("retrieve_memory")))
            scores["seconds"] = exchange.seconds
            graded.append((question.category_name, scores))
            answers.append(
                {
                    "id": question.id,
                    "category": question.category_name,
                    "question": question.question,
                    "gold": question.answer,
                    "reply": exchange.reply,
                    "status": exchange.status,
                    "memories_used": len(exchange.memory_ids),
                    **scores,
                }
            )
            log.info("memory-qa: %s F1 %.2f (%.0f s)", question.id, scores["F1"], scores["seconds"])
    seconds = [a["seconds"] for a in answers]
    return {
        "questions": len(answers),
        "sessions_replayed": len(replayed),
        "replay": replay_mode,
        "judge": judge,
        "by_category": mean_by(graded),
        "reply_seconds_p50": percentile(seconds, 0.5),
        "reply_seconds_p95": percentile(seconds, 0.95),
        "sessions": replayed,
        "answers": answers,
    }


def tables(results: dict[str, Any]) -> list[Table]:
    by_category = results["by_category"]
    judged = results["judge"] is not None
    columns = ["category", "n", "F1", "contains"] + (["judge"] if judged else [])
    columns += [*MEMORY_COLUMNS, "seconds per reply"]
    answers = Table(
        f"Memory QA: {results['questions']} questions after replaying"
        f" {results['sessions_replayed']} sessions (p50 reply {results['reply_seconds_p50']:.1f} s,"
        f" p95 {results['reply_seconds_p95']:.1f} s)",
        columns,
    )
    for name in (*LOCOMO_CATEGORIES.values(), "all"):
        row = by_category.get(name)
        if row is None:
            continue
        cells: list[Any] = [f"**{name}**" if name == "all" else name, row["n"], row["F1"]]
        cells.append(row["contains"])
        if judged:
            cells.append(row["judge"])
        cells += [f"{row[name]:.0%}" for name in MEMORY_COLUMNS] + [f"{row['seconds']:.1f}"]
        answers.rows.append(cells)
    sessions = Table(
        f"Memories per replayed session (replay: {results['replay']})",
        [
            "conversation",
            "session",
            "turns",
            "user messages",
            "saved by the model",
            "extracted",
            "reply seconds",
            "extraction seconds",
            "status",
        ],
        [
            [
                s["conversation"],
                s["session"],
                s["turns"],
                s["user_messages"],
                s["memories_saved"],
                s["memories_extracted"],
                f"{s['seconds']:.1f}",
                f"{s['extraction_seconds']:.1f}",
                s["status"],
            ]
            for s in results["sessions"]
        ],
    )
    return [answers, sessions]


async def run(args: argparse.Namespace) -> Report:
    conversations = select(load_locomo(args.data), args.conversation)
    replay_mode = getattr(args, "replay", "session")
    async with scratch_services() as services:
        results = await evaluate(services, conversations, args.limit, args.sessions, replay_mode)
        models = {
            role: services.model_plan.describe(role) for role in ("chat", "utility", "memory")
        }
    if replay_mode == "turns":
        models["replies"] = "scripted (the other speaker's turns)"
    if results["judge"]:
        models["judge"] = results["judge"]
    return Report(
        "memory-qa",
        args.data,
        tables(results),
        results,
        models,
        [
            "Grading: token F1 and 'contains' against LoCoMo's gold answer; adversarial questions"
            " score 1 when the reply says it does not know."
            + ("" if results["judge"] else " No `judge` deployment configured: no LLM judge."),
            "Memory: extraction (the `memory` model) runs after each replayed session; 'used"
            " memory' = the reply's memory_ids (recalled into the prompt or retrieved by the"
            " tool) is not empty; 'looked up memory' = retrieve_memory was called.",
        ],
    )
