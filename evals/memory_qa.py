"""Suite `memory-qa`: does the assistant remember what it was told, across chats?

    python -m evals memory-qa [--data PATH] [--limit N] [--sessions N] [--conversation ID]

Each LoCoMo conversation is replayed through the real chat flow (runner, graph, tools, the
configured `chat` model, a scratch database): the user is the conversation's first speaker, and
each session becomes one message in a new chat, "Here is my conversation with <other> on <date>"
followed by the session's turns. The model decides what to save (save_memory), as it would for a
real user. Then every question whose evidence lies in the replayed sessions is asked in a fresh
chat of its own ("About what I told you before: <question> Answer in a few words."), so only
long-term memory (retrieve_memory) can answer it.

Grading: token F1 of the reply against the gold answer (SQuAD's normalization; LoCoMo's own
metric) and "contains": the gold answer occurs in the reply. Adversarial questions (category 5)
have no answer in the conversation: they score 1 when the reply says it does not know, else 0.
When MODELS_CONFIG has a usable `judge` deployment, an LLM judge grades every reply too ("judge":
share judged correct). Also reported: memories saved per session, the share of questions for
which the model called retrieve_memory, and seconds per reply.

`--sessions N` replays only the first N sessions of each conversation (and asks only questions
whose evidence lies in them); `--limit N` asks at most N questions, spread evenly. With the local
model a session takes a minute or more on two cores: start with `--sessions 1 --limit 3`.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

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
from evals.metrics import mean_by, percentile, token_f1
from evals.report import Report, Table
from evals.scratch import forget_everything, scratch_services

DEFAULT_DATA = LOCOMO_FILE
# The same frame for every question. The questions name the speakers in the third person, so the
# frame says they are about what the user said before (as "When did I…?" would); short answers
# keep token F1 fair.
QUESTION_FRAME = "About what I told you before: {question} Answer in a few words."

log = logging.getLogger("resolveai.evals")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=None, help="replay the first N sessions")
    parser.add_argument(
        "--conversation", action="append", help="sample_id(s) to use (default: all)"
    )


def session_message(conversation: Conversation, session: Session) -> str:
    """A session as the user (the first speaker) would paste it into the chat."""
    me, other = conversation.speaker_a, conversation.speaker_b
    lines = "\n".join(f"{turn.speaker}: {turn.text}" for turn in session.turns)
    return (
        f"I'm {me}. Here is my conversation with {other} on {session.date}."
        f" Keep in mind what matters from it.\n\n{lines}"
    )


def question_message(question: LocomoQuestion) -> str:
    return QUESTION_FRAME.format(question=question.question)


async def count_memories(services: Services) -> int:
    async with services.database.pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM memories")
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


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


async def evaluate(
    services: Services,
    conversations: list[Conversation],
    limit: int | None = None,
    sessions: int | None = None,
) -> dict[str, Any]:
    judge = judge_model(services.model_plan)
    plan = [
        (conversation, sessions or len(conversation.sessions)) for conversation in conversations
    ]
    asked = sample([(c, q) for c, n in plan for q in answerable_in(c, n)], limit)
    replayed: list[dict[str, Any]] = []
    graded: list[tuple[str, dict[str, float]]] = []
    answers: list[dict[str, Any]] = []
    for conversation, replay in plan:
        questions = [q for c, q in asked if c is conversation]
        if not questions:
            continue
        await forget_everything(services.database.pool)
        for session in conversation.sessions[:replay]:
            before = await count_memories(services)
            exchange = await ask(services, session_message(conversation, session))
            saved = await count_memories(services) - before
            log.info(
                "memory-qa: %s session %d: %d memories saved (%.0f s)",
                conversation.sample_id,
                session.number,
                saved,
                exchange.seconds,
            )
            replayed.append(
                {
                    "conversation": conversation.sample_id,
                    "session": session.number,
                    "turns": len(session.turns),
                    "memories_saved": saved,
                    "seconds": exchange.seconds,
                    "status": exchange.status,
                }
            )
        for question in questions:
            exchange = await ask(services, question_message(question))
            scores = await grade(services, judge, question, exchange.reply)
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
                    **scores,
                }
            )
            log.info("memory-qa: %s F1 %.2f (%.0f s)", question.id, scores["F1"], scores["seconds"])
    seconds = [a["seconds"] for a in answers]
    return {
        "questions": len(answers),
        "sessions_replayed": len(replayed),
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
    columns += ["looked up memory", "seconds per reply"]
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
        cells += [f"{row['looked up memory']:.0%}", f"{row['seconds']:.1f}"]
        answers.rows.append(cells)
    sessions = Table(
        "Memories saved per replayed session",
        ["conversation", "session", "turns", "memories saved", "seconds", "status"],
        [
            [
                s["conversation"],
                s["session"],
                s["turns"],
                s["memories_saved"],
                f"{s['seconds']:.1f}",
                s["status"],
            ]
            for s in results["sessions"]
        ],
    )
    return [answers, sessions]


async def run(args: argparse.Namespace) -> Report:
    conversations = load_locomo(args.data)
    if args.conversation:
        conversations = [c for c in conversations if c.sample_id in args.conversation]
        if not conversations:
            raise SystemExit(f"No conversation {args.conversation} in {args.data}")
    async with scratch_services() as services:
        results = await evaluate(services, conversations, args.limit, args.sessions)
        models = {role: services.model_plan.describe(role) for role in ("chat", "utility")}
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
            + ("" if results["judge"] else " No `judge` deployment configured: no LLM judge.")
        ],
    )
