"""Suite `evidence-check`: is the utility model's "enough evidence?" verdict right?

    python -m evals evidence-check [--data PATH] [--limit N]

Data: the SQuAD 2.0 pages (../shared/evaldata/squad/pages.json, CC BY-SA 4.0, read in place, never
copied; EVALDATA_DIR overrides the folder, --data the file). `--limit N` takes N questions, half
answerable and half not (each half spread evenly over the file); without it every question of the
file is asked (the file has more unanswerable than answerable ones).

For each question, exactly what a search round gives the check: the five pages are chunked with
rag/md_chunker.py, the chunks of ALL pages are ranked against the question (as in suite
`evidence-ranking`: as if one search had returned every page, the question being the query), the
best chunks become the numbered source blocks (rag/web_rag.numbered_sources) and
rag/chunk_judge.check_evidence asks the configured `utility` model through the app's router. The
number of chunks is the app's own choice (rag/web_rag.chunks_kept_for): CHUNKS_KEPT (20), or
CHUNKS_FOR_LOCAL_MODEL (6) when the chat model runs in-process. No context is given (the user's
question alone, as when "Use web tool" makes the first search).

Metrics, "yes, enough" being the positive class: accuracy, precision (of the "yes" verdicts, the
share that were right) and recall (of the cases that deserve "yes", the share that got it). Two
labellings: (1) the question is answerable (SQuAD's label); (2) an answer span of the question is
inside one of the chunks shown (span mapping of suite `evidence-ranking`): an answerable question
whose answer was ranked out deserves "no" too. "unchecked" counts verdicts the check could not
give (the call failed or the reply was not the JSON asked for): the app then answers anyway, so
they count as "yes" in every score, and a row with checked verdicts only shows what they hide.
Latency: seconds per check call (p50, p95, mean), retries and fallbacks of the router included.
Needs a model: the one configured for `utility` (the in-process local model without API keys,
30-120 s per call on 2 busy cores).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from dataclasses import asdict, dataclass
from typing import Any

from core.services import Services
from core.tracing import trace_metadata
from evals.datasets import SQUAD_FILE, Squad, SquadQuestion, load_squad, sample
from evals.evidence_ranking import find_evidence
from evals.metrics import latency_summary, verdict_scores
from evals.report import Report, Table
from evals.scratch import scratch_services
from rag.chunk_judge import check_evidence
from rag.md_chunker import budget_for, chunk_pages
from rag.ranker import rank_chunks
from rag.web_rag import chunks_kept_for, numbered_sources

DEFAULT_DATA = SQUAD_FILE
SUITE = "evidence-check"

log = logging.getLogger("resolveai.evals")


@dataclass
class Check:
    """One question's check: what it was shown and what it said."""

    id: str
    question: str
    page: str
    answerable: bool
    answer_shown: bool  # an answer span is inside one of the chunks shown
    enough: bool  # the verdict the app acted on ("yes" when unchecked)
    checked: bool  # False: the check failed and defaulted to "yes"
    reason: str
    seconds: float
    chunks: int
    sources: int


def pick_questions(squad: Squad, limit: int | None) -> list[SquadQuestion]:
    """Half answerable, half not (answerable first); every question without a limit."""
    if limit is None:
        return squad.answerable + squad.unanswerable
    return sample(squad.answerable, (limit + 1) // 2) + sample(squad.unanswerable, limit // 2)


async def check_questions(
    services: Services, squad: Squad, questions: list[SquadQuestion]
) -> list[Check]:
    embedder = services.embedder
    chunks = await asyncio.to_thread(
        chunk_pages, squad.results(), embedder.count_tokens, budget_for(embedder)
    )
    evidence = find_evidence(squad, [q for q in questions if q.answerable], chunks)
    index = {id(chunk): i for i, chunk in enumerate(chunks)}
    kept = chunks_kept_for(services.model_plan)
    log.info(
        "%s: %d questions, %d chunks from %d pages, the best %d shown to each check",
        SUITE, len(questions), len(chunks), len(squad.pages), kept,
    )  # fmt: skip
    cache: dict[str, Any] = {}  # chunk vectors: the same chunks are ranked for every question
    checks = []
    for number, q in enumerate(questions, start=1):
        ranked = await rank_chunks(q.question, chunks, embedder, top_k=kept, cache=cache)
        sources, blocks = numbered_sources([r.chunk for r in ranked])
        verdict = await check_evidence(
            services.router,
            q.question,
            "",
            blocks,
            trace_metadata(f"eval-{q.id}", "evals", "evidence check", trace_name=f"eval {SUITE}"),
        )
        shown = {index[id(r.chunk)] for r in ranked}
        check = Check(
            q.id,
            q.question,
            q.page,
            q.answerable,
            q.answerable and bool(evidence.by_span[q.id] & shown),
            verdict.enough,
            verdict.checked,
            verdict.reason,
            round(verdict.seconds, 2),
            len(ranked),
            len(sources),
        )
        checks.append(check)
        log.info(
            "%s %d/%d: %s question, answer %s → %s%s (%.1f s)",
            SUITE, number, len(questions),
            "answerable" if q.answerable else "unanswerable",
            "shown" if check.answer_shown else "not shown",
            "yes" if check.enough else "no",
            "" if check.checked else " (unchecked)",
            verdict.seconds,
        )  # fmt: skip
    return checks


def summarize(checks: list[Check], kept: int) -> dict[str, Any]:
    checked = [c for c in checks if c.checked]
    labellings = {
        "the question is answerable": verdict_scores((c.enough, c.answerable) for c in checks),
        "an answer span is in the chunks shown": verdict_scores(
            (c.enough, c.answer_shown) for c in checks
        ),
        "the question is answerable (checked verdicts only)": verdict_scores(
            (c.enough, c.answerable) for c in checked
        ),
    }
    groups = {
        "answerable": [c for c in checks if c.answerable],
        "answerable, answer shown": [c for c in checks if c.answer_shown],
        "answerable, answer not shown": [c for c in checks if c.answerable and not c.answer_shown],
        "unanswerable": [c for c in checks if not c.answerable],
        "all": checks,
    }
    verdicts = {
        name: {
            "n": len(group),
            "yes": sum(c.enough for c in group),
            "no": sum(not c.enough for c in group),
            "unchecked": sum(not c.checked for c in group),
        }
        for name, group in groups.items()
    }
    seconds = [c.seconds for c in checks]
    return {
        "questions": len(checks),
        "answerable": len(groups["answerable"]),
        "unanswerable": len(groups["unanswerable"]),
        "chunks_shown": kept,
        "unchecked": verdicts["all"]["unchecked"],
        "scores": labellings,
        "verdicts": verdicts,
        "latency_seconds": latency_summary(seconds),
        "checks": [asdict(c) for c in checks],
    }


def tables(results: dict[str, Any], utility: str) -> list[Table]:
    scores = Table(
        f"Evidence check: {results['questions']} SQuAD questions ({results['answerable']}"
        f" answerable, {results['unanswerable']} unanswerable), the best"
        f" {results['chunks_shown']} chunks shown; utility model {utility};"
        f" {results['unchecked']} verdicts unchecked (counted as yes)",
        ["'enough' is right when", "n", "accuracy", "precision", "recall"],
    )
    for name, row in results["scores"].items():
        scores.rows.append([name, row["n"], row["accuracy"], row["precision"], row["recall"]])
    latency = results["latency_seconds"]
    verdicts = Table(
        f"Verdicts by question group; seconds per check: p50 {latency['p50']:.1f},"
        f" p95 {latency['p95']:.1f}, mean {latency['mean']:.1f}",
        ["questions", "n", "yes", "no", "unchecked (defaulted to yes)"],
    )
    for name, row in results["verdicts"].items():
        label = f"**{name}**" if name == "all" else name
        verdicts.rows.append([label, row["n"], row["yes"], row["no"], row["unchecked"]])
    return [scores, verdicts]


async def evaluate(services: Services, args: argparse.Namespace) -> Report:
    """The suite on already-open services (`run` opens a scratch copy of the app's)."""
    squad = load_squad(args.data)
    questions = pick_questions(squad, args.limit)
    checks = await check_questions(services, squad, questions)
    results = summarize(checks, chunks_kept_for(services.model_plan))
    utility = services.model_plan.describe("utility")
    local = services.model_plan.runs_locally("chat")
    return Report(
        SUITE,
        args.data,
        tables(results, utility),
        results,
        {"utility": utility, "embedder": services.embedder.describe()},
        [
            "The chunks of all pages are ranked for every question (the question is the query);"
            f" the best {results['chunks_shown']} are shown to rag/chunk_judge.check_evidence"
            + (" (CHUNKS_FOR_LOCAL_MODEL: the chat model runs in-process)." if local else "."),
            "Unchecked verdicts (failed call or no usable JSON) count as 'yes', as in the app.",
        ],
    )


async def run(args: argparse.Namespace) -> Report:
    async with scratch_services() as services:
        return await evaluate(services, args)
