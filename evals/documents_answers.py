"""Suite `documents-answers`: SQuAD questions answered from the user's documents, through the real
chat flow, by the configured models (the model half of `documents-qa`, which ranks only).

    python -m evals documents-answers [--data PATH] [--limit N]

Data: the SQuAD 2.0 pages (../shared/evaldata/squad/pages.json, CC BY-SA 4.0, read in place). In a
scratch copy of the app (evals/scratch.py: the configured models, a temporary database) a new user
uploads the five pages as Markdown files through the real document pipeline (as `documents-qa`
does). Each question is then one new chat of that user, without "Use web tool": the automatic
document search (chat/document_recall.py) puts the passages above its floor in the prompt as
numbered sources, and the model answers (evals/chat_driver). What is scored is the reply as saved
and its sources. `--limit N`: half answerable, half not, as `web-answers` picks them.

- correct, contains gold, token F1, "I couldn't find": as `web-answers` scores them (the judge
  when MODELS_CONFIG has a `judge` deployment, else the automatic checks).
- cited: share of replies citing at least one of their sources as [n].
- citation precision (answerable questions): of the distinct sources a reply cites, the share
  whose passage holds the answer: "answer text" (a gold answer occurs in it) and "answer span"
  (the passage is one of the chunks holding an answer span at its place in the page).
- found: share of answerable questions whose sources include a passage holding an answer span
  (what the model had to work with).
"""

from __future__ import annotations

import argparse
import logging
import uuid
from typing import Any

from core import accounts
from core.services import Services
from evals.chat_driver import ask
from evals.datasets import SQUAD_FILE, SquadQuestion, load_squad
from evals.documents_qa import upload_pages
from evals.evidence_ranking import find_evidence
from evals.judge import contains_answer, judge_model
from evals.metrics import token_f1
from evals.report import Report, Table
from evals.scratch import scratch_services
from evals.web_answers import (
    Answer,
    cited_numbers,
    grade,
    pick_questions,
    summarize,
    without_citations,
)

DEFAULT_DATA = SQUAD_FILE
SUITE = "documents-answers"

log = logging.getLogger("resolveai.evals")


async def answer_question(
    services: Services,
    user_id: uuid.UUID,
    passages: dict[str, str],
    holding_span: set[str],
    judge: str | None,
    q: SquadQuestion,
) -> tuple[Answer, bool]:
    """One question in a new chat: the scored answer, and whether a passage holding an answer span
    was among its sources. `passages`: chunk id → text; `holding_span`: this question's chunks
    holding an answer span."""
    exchange = await ask(services, q.question, user_id=user_id)
    reply = exchange.reply
    plain = without_citations(reply)
    texts = {int(s["n"]): passages.get(str(s.get("chunk_id")), "") for s in exchange.sources}
    chunk_of = {int(s["n"]): str(s.get("chunk_id")) for s in exchange.sources}
    cited = cited_numbers(reply, exchange.sources)
    with_text = [n for n in cited if q.answerable and contains_answer(texts[n], q.answers)]
    with_span = [n for n in cited if q.answerable and chunk_of[n] in holding_span]
    contains, dont_know, verdict, correct = await grade(services, judge, q, reply, SUITE)
    answer = Answer(
        q.id, q.question, q.page, q.answerable, q.answers, reply, exchange.status, exchange.error,
        round(exchange.seconds, 2), 0, [], [f"{s['n']}. {s['title']}" for s in exchange.sources],
        cited, with_text, with_span, contains,
        round(max((token_f1(plain, gold) for gold in q.answers), default=0.0), 4),
        dont_know, verdict, correct,
    )  # fmt: skip
    return answer, any(chunk in holding_span for chunk in chunk_of.values())


async def evaluate(services: Services, args: argparse.Namespace) -> Report:
    """The suite on open services (see `run`)."""
    squad = load_squad(args.data)
    questions = pick_questions(squad, args.limit)
    pool = services.database.pool
    name = f"documents-reader-{uuid.uuid4().hex[:8]}"
    user_id = (await accounts.add_user(pool, name, "not used here"))["user_id"]
    chunks = await upload_pages(pool, services.embedder, squad, user_id, pdf=False)
    evidence = find_evidence(squad, [q for q in questions if q.answerable], chunks)
    passages = {chunk.url: chunk.text for chunk in chunks}
    judge = judge_model(services.model_plan)
    log.info("%s: %d questions over %d passages; correctness by %s", SUITE, len(questions),
             len(chunks), f"the judge {judge}" if judge else "the automatic check")  # fmt: skip
    answers: list[Answer] = []
    found = 0
    for number, q in enumerate(questions, start=1):
        holding = {chunks[i].url for i in evidence.by_span.get(q.id, ())}
        answer, had_it = await answer_question(services, user_id, passages, holding, judge, q)
        answers.append(answer)
        found += q.answerable and had_it
        log.info("%s %d/%d: %s question, %s, cited %s (%.0f s)", SUITE, number, len(questions),
                 "answerable" if q.answerable else "unanswerable",
                 "correct" if answer.correct else "not correct", answer.cited or "nothing",
                 answer.seconds)  # fmt: skip
    results = summarize(answers, judge)
    answerable = sum(q.answerable for q in questions)
    results["found"] = found / answerable if answerable else None
    plan = services.model_plan
    models = {"chat": plan.describe("chat"), "judge": judge or "none (automatic checks)"}
    models |= {"embedder": services.embedder.describe()}
    return Report(
        SUITE,
        args.data,
        [table(results)],
        results,
        models,
        [
            f"Correctness: {results['correctness']}.",
            f"The passage holding the answer was among the sources for"
            f" {_cell(results['found'])} of the answerable questions.",
            "Each question is a new chat of a user whose documents are the five pages (Markdown);"
            " 'Use web tool' off. Citation precision counts distinct cited sources per reply.",
        ],
    )


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def table(results: dict[str, Any]) -> Table:
    seconds = results["latency_seconds"]
    answers = Table(
        f"Document answers: {results['questions']} SQuAD questions answered from the pages"
        f" uploaded as documents; correct = {results['correctness']}; seconds per question"
        f" p50 {seconds['p50']:.1f}, p95 {seconds['p95']:.1f}",
        ["questions", "n", "correct", "contains gold", "'I couldn't find'", "cited",
         "citation precision (answer text)", "citation precision (answer span)", "errors"],
    )  # fmt: skip
    for name, row in results["by_group"].items():
        answers.rows.append([
            f"**{name}**" if name == "all" else name, row["n"], _cell(row["correct"]),
            _cell(row["contains_gold"]), _cell(row["dont_know"]), _cell(row["cited"]),
            _cell(row["citation_precision_text"]), _cell(row["citation_precision_span"]),
            row["errors"],
        ])  # fmt: skip
    return answers


async def run(args: argparse.Namespace) -> Report:
    async with scratch_services() as services:
        return await evaluate(services, args)
