"""Suite `web-answers`: SQuAD questions through the real chat flow with "Use web tool" ticked.

    python -m evals web-answers [--data PATH] [--limit N]

Data: the SQuAD 2.0 pages (../shared/evaldata/squad/pages.json, CC BY-SA 4.0, read in place, never
copied into the repo; EVALDATA_DIR overrides the folder, --data the file). The five pages are
written to a temporary folder as Markdown with front matter (title, Wikipedia url), and a scratch
copy of the app (evals/scratch.py: the configured models, a temporary database) searches them with
the offline `pages` provider. `--limit N` asks N questions, half answerable and half not (each half
spread evenly over the file); without it every question of the file is asked.

Each question is one new chat, sent as a user would with "Use web tool" ticked (evals/chat_driver:
chat/runner.py start_turn + stream_turn, the graph, the `web_search` tool with its up to 3 search
rounds, evidence checks and cited answer). What is scored is the reply as saved, and its sources.

- correct: answerable questions: the LLM judge's verdict (evals/judge.py) when MODELS_CONFIG has a
  usable `judge` deployment, else the automatic check "a gold answer occurs in the reply" (both
  normalized as SQuAD does: lower case, no punctuation or articles). Unanswerable questions: the
  judge's verdict (gold "(no answer)"), else "the reply says it could not find it". The report
  says which one was used.
- contains gold, token F1: the automatic checks, always reported (F1 = SQuAD's word overlap of the
  whole reply, citations removed, with the best gold answer: low for long replies by construction).
- "I couldn't find": share of replies saying they could not find (or do not know) the answer
  (evals/judge.says_dont_know). Wanted high on unanswerable questions, low on answerable ones.
- citation precision (answerable questions): of the distinct sources a reply cites as [n], the
  share whose text, exactly the chunks the answer model read as source n, holds the answer.
  "answer text": a gold answer occurs in it (normalized; lenient, short answers occur often);
  "answer span": one of its chunks holds an answer span at its place in the page (the span mapping
  of suite `evidence-ranking`). "cited" is the share of replies citing at least one source.
- searches: web searches run per question (calls to the search provider; at most 3).
- seconds: wall time per question, from sending the message to the saved reply (p50, p95).

Needs models: `chat` and `utility` as configured (the in-process local model without API keys:
several minutes per question on 2 busy cores).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import re
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.services import Services
from evals.chat_driver import ask
from evals.datasets import SQUAD_FILE, Squad, SquadQuestion, load_squad, page_url, sample
from evals.evidence_ranking import Evidence, find_evidence
from evals.judge import contains_answer, judge_answer, judge_model, says_dont_know
from evals.metrics import latency_summary, token_f1
from evals.report import Report, Table
from evals.scratch import scratch_services
from rag.md_chunker import Chunk, budget_for, chunk_pages
from rag.search_providers import SearchProvider, SearchResult
from rag.web_rag import MAX_SEARCHES

DEFAULT_DATA = SQUAD_FILE
SUITE = "web-answers"
ANSWER_CALL = "web answer"  # the generation_name rag/web_rag.py gives the answer-writing call

log = logging.getLogger("resolveai.evals")

_CITATION = re.compile(r"\[(\d+)\]")
_SOURCE_BLOCK = re.compile(r'<source n="(\d+)" title="[^"]*">\n(.*?)\n</source>', re.DOTALL)
_UNSAFE_NAME = re.compile(r"[^\w.-]+")


# --- the pages folder and what the chat flow did ---------------------------------------------


def write_pages(squad: Squad, folder: Path) -> None:
    """The pages as the `pages` provider reads them: Markdown with a title/url front matter."""
    folder.mkdir(parents=True, exist_ok=True)
    for title, markdown in squad.pages.items():
        name = _UNSAFE_NAME.sub("_", title) + ".md"
        (folder / name).write_text(
            f"---\ntitle: {title}\nurl: {page_url(title)}\n---\n\n{markdown}\n", encoding="utf-8"
        )


class CountingSearch:
    """The configured search provider, counting the searches it runs."""

    def __init__(self, provider: SearchProvider) -> None:
        self.provider = provider
        self.name = getattr(provider, "name", "search")
        self.queries: list[str] = []

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        self.queries.append(query)
        return await self.provider.search(query, max_results)


class RecordingRouter:
    """The app's router, keeping the messages of each call by its step name (tracing metadata)."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []

    async def acompletion(self, **kwargs: Any) -> Any:
        step = str((kwargs.get("metadata") or {}).get("generation_name", ""))
        self.calls.append((step, kwargs.get("messages") or []))
        return await self.router.acompletion(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router, name)


def answer_sources(calls: list[tuple[str, list[dict[str, Any]]]]) -> dict[int, str]:
    """Source number → the text the answer model read as that source (the last answer call)."""
    for step, messages in reversed(calls):
        if step == ANSWER_CALL:
            prompt = "\n".join(str(m.get("content") or "") for m in messages)
            return {int(n): text for n, text in _SOURCE_BLOCK.findall(prompt)}
    return {}


def cited_numbers(reply: str, sources: list[dict[str, Any]]) -> list[int]:
    """The distinct source numbers the reply cites as [n], in order of first citation."""
    known = {int(s["n"]) for s in sources}
    seen: list[int] = []
    for match in _CITATION.finditer(reply):
        n = int(match.group(1))
        if n in known and n not in seen:
            seen.append(n)
    return seen


def without_citations(reply: str) -> str:
    return " ".join(_CITATION.sub(" ", reply).split())


# --- one question ----------------------------------------------------------------------------


@dataclass
class Answer:
    id: str
    question: str
    page: str
    answerable: bool
    answers: list[str]
    reply: str
    status: str
    error: str | None
    seconds: float
    searches: int
    queries: list[str]
    sources: list[str]  # "n. title"
    cited: list[int]
    cited_with_answer_text: list[int]
    cited_with_answer_span: list[int]
    contains_gold: bool
    f1: float
    dont_know: bool
    judge: bool | None  # None: no judge, or its reply was not usable
    correct: bool
    notes: list[str] = field(default_factory=list)


class Scorer:
    """What a reply is scored against: the gold answers and the chunks that hold their spans."""

    def __init__(self, squad: Squad, questions: list[SquadQuestion], chunks: list[Chunk]) -> None:
        self.chunks = chunks
        self.evidence: Evidence = find_evidence(
            squad, [q for q in questions if q.answerable], chunks
        )

    def source_holds_span(self, q: SquadQuestion, text: str) -> bool:
        """Whether one of the chunks the source was made of holds an answer span."""
        return any(self.chunks[i].text in text for i in self.evidence.by_span.get(q.id, ()))


async def grade(
    services: Services, judge: str | None, q: SquadQuestion, reply: str, suite: str
) -> tuple[bool, bool, bool | None, bool]:
    """(contains gold, says "I couldn't find", the judge's verdict, correct) for one reply:
    correct is the judge's verdict when there is a judge, else the automatic check."""
    plain = without_citations(reply)
    contains = q.answerable and contains_answer(plain, q.answers)
    dont_know = says_dont_know(reply)
    verdict = None
    correct = contains if q.answerable else dont_know
    if judge is not None:
        gold = " / ".join(dict.fromkeys(q.answers)) if q.answerable else None
        try:
            verdict = await judge_answer(services.router, q.question, gold, plain)
        except Exception as error:  # one failed grading must not lose an hour of answers
            log.warning(
                "%s: the judge failed on %s (%s: %s)", suite, q.id, type(error).__name__, error
            )
        correct = bool(verdict)
    return contains, dont_know, verdict, correct


async def answer_question(
    services: Services,
    search: CountingSearch,
    router: RecordingRouter,
    scorer: Scorer,
    judge: str | None,
    q: SquadQuestion,
) -> Answer:
    search.queries.clear()
    router.calls.clear()
    exchange = await ask(services, q.question, use_web=True)
    reply = exchange.reply
    plain = without_citations(reply)
    texts = answer_sources(router.calls) if exchange.sources else {}
    cited = cited_numbers(reply, exchange.sources)
    with_text = [n for n in cited if q.answerable and contains_answer(texts.get(n, ""), q.answers)]
    with_span = [n for n in cited if q.answerable and scorer.source_holds_span(q, texts.get(n, ""))]
    f1 = max((token_f1(plain, gold) for gold in q.answers), default=0.0)
    contains, dont_know, verdict, correct = await grade(services, judge, q, reply, SUITE)
    notes = []
    if cited and not texts:
        notes.append("cited sources, but no answer-writing call was recorded")
    return Answer(
        q.id,
        q.question,
        q.page,
        q.answerable,
        q.answers,
        reply,
        exchange.status,
        exchange.error,
        round(exchange.seconds, 2),
        len(search.queries),
        list(search.queries),
        [f"{s['n']}. {s['title']}" for s in exchange.sources],
        cited,
        with_text,
        with_span,
        contains,
        round(f1, 4),
        dont_know,
        verdict,
        correct,
        notes,
    )


# --- the suite -------------------------------------------------------------------------------


def pick_questions(squad: Squad, limit: int | None) -> list[SquadQuestion]:
    """Half answerable, half not (answerable first); every question without a limit."""
    if limit is None:
        return squad.answerable + squad.unanswerable
    return sample(squad.answerable, (limit + 1) // 2) + sample(squad.unanswerable, limit // 2)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def group_scores(answers: list[Answer], judged: bool) -> dict[str, Any]:
    cited = sum(len(a.cited) for a in answers)
    answerable = all(a.answerable for a in answers)
    return {
        "n": len(answers),
        "correct": _mean([float(a.correct) for a in answers]),
        "contains_gold": _mean([float(a.contains_gold) for a in answers if a.answerable]),
        "token_f1": _mean([a.f1 for a in answers if a.answerable]),
        "dont_know": _mean([float(a.dont_know) for a in answers]),
        "cited": _mean([float(bool(a.cited)) for a in answers]),
        "citations": cited,
        "citation_precision_text": (
            sum(len(a.cited_with_answer_text) for a in answers) / cited
            if cited and answerable
            else None
        ),
        "citation_precision_span": (
            sum(len(a.cited_with_answer_span) for a in answers) / cited
            if cited and answerable
            else None
        ),
        "searches": _mean([float(a.searches) for a in answers]),
        "searches_histogram": {
            str(n): sum(a.searches == n for a in answers) for n in range(MAX_SEARCHES + 1)
        },
        "errors": sum(a.status != "complete" or a.error is not None for a in answers),
        "judge_unusable": sum(a.judge is None for a in answers) if judged else 0,
    }


def summarize(answers: list[Answer], judge: str | None) -> dict[str, Any]:
    seconds = [a.seconds for a in answers]
    groups = {
        "answerable": [a for a in answers if a.answerable],
        "unanswerable": [a for a in answers if not a.answerable],
        "all": answers,
    }
    return {
        "questions": len(answers),
        "correctness": f"LLM judge ({judge})"
        if judge
        else "automatic (answerable: a gold answer occurs in the reply; unanswerable: the reply"
        " says it could not find it)",
        "by_group": {
            name: group_scores(group, judge is not None) for name, group in groups.items() if group
        },
        "latency_seconds": latency_summary(seconds),
        "answers": [asdict(a) for a in answers],
    }


def _cell(value: float | None) -> float | str:
    return "–" if value is None else value


def tables(results: dict[str, Any]) -> list[Table]:
    by_group = results["by_group"]
    answers = Table(
        f"Web answers: {results['questions']} SQuAD questions through web_search (pages"
        f" provider); correct = {results['correctness']}",
        [
            "questions", "n", "correct", "contains gold", "token F1", "'I couldn't find'",
            "cited", "citation precision (answer text)", "citation precision (answer span)",
            "errors",
        ],
    )  # fmt: skip
    for name, row in by_group.items():
        answers.rows.append(
            [
                f"**{name}**" if name == "all" else name,
                row["n"],
                _cell(row["correct"]),
                _cell(row["contains_gold"]),
                _cell(row["token_f1"]),
                _cell(row["dont_know"]),
                _cell(row["cited"]),
                _cell(row["citation_precision_text"]),
                _cell(row["citation_precision_span"]),
                row["errors"],
            ]
        )
    latency = results["latency_seconds"]
    cost = Table(
        f"Searches and time per question; seconds per question: p50 {latency['p50']:.0f},"
        f" p95 {latency['p95']:.0f}, mean {latency['mean']:.0f}",
        ["questions", "searches (mean)", *[f"{n} searches" for n in range(MAX_SEARCHES + 1)]],
    )
    for name, row in by_group.items():
        counts = list(row["searches_histogram"].values())
        label = f"**{name}**" if name == "all" else name
        cost.rows.append([label, _cell(row["searches"]), *counts])
    return [answers, cost]


async def evaluate(services: Services, args: argparse.Namespace) -> Report:
    """The suite on open services whose search provider serves the pages (see `run`)."""
    if services.search_provider is None:
        raise RuntimeError("web-answers needs a search provider serving the pages")
    squad = load_squad(args.data)
    questions = pick_questions(squad, args.limit)
    embedder = services.embedder
    chunks = await asyncio.to_thread(
        chunk_pages, squad.results(), embedder.count_tokens, budget_for(embedder)
    )
    scorer = Scorer(squad, questions, chunks)
    search = CountingSearch(services.search_provider)
    router = RecordingRouter(services.router)
    recorded = dataclasses.replace(services, search_provider=search, router=router)
    judge = judge_model(services.model_plan)
    log.info(
        "%s: %d questions; correctness by %s",
        SUITE, len(questions), f"the judge {judge}" if judge else "the automatic check",
    )  # fmt: skip
    answers = []
    for number, q in enumerate(questions, start=1):
        answer = await answer_question(recorded, search, router, scorer, judge, q)
        answers.append(answer)
        log.info(
            "%s %d/%d: %s question, %d searches, %s, cited %s (%.0f s)",
            SUITE, number, len(questions),
            "answerable" if q.answerable else "unanswerable",
            answer.searches,
            "correct" if answer.correct else "not correct",
            answer.cited or "nothing",
            answer.seconds,
        )  # fmt: skip
    results = summarize(answers, judge)
    plan = services.model_plan
    models = {"chat": plan.describe("chat"), "utility": plan.describe("utility")}
    models |= {"judge": judge or "none (automatic checks)"}
    models |= {"embedder": services.embedder.describe()}
    return Report(
        SUITE,
        args.data,
        tables(results),
        results,
        models,
        [
            f"Correctness: {results['correctness']}."
            + (
                f" Judge replies not usable (counted as not correct):"
                f" {results['by_group']['all']['judge_unusable']}."
                if judge
                else ""
            ),
            "Each question is a new chat with 'Use web tool' ticked; the reply and sources are"
            " the saved message. Citation precision counts distinct cited sources per reply.",
        ],
    )


async def run_on_pages(
    args: argparse.Namespace,
    evaluate: Callable[[Services, argparse.Namespace], Awaitable[Report]],
) -> Report:
    """`evaluate` on a scratch copy of the app whose `pages` provider serves the data's pages."""
    squad = load_squad(args.data)
    with tempfile.TemporaryDirectory(prefix="resolveai-eval-pages-") as folder:
        write_pages(squad, Path(folder))
        async with scratch_services(web_search_provider="pages", web_pages_dir=Path(folder)) as s:
            return await evaluate(s, args)


async def run(args: argparse.Namespace) -> Report:
    return await run_on_pages(args, evaluate)
