"""Suite `research`: multi-part questions in research mode, against the normal web answer.

    python -m evals research [--data PATH] [--limit N]

Data: the SQuAD 2.0 pages (../shared/evaldata/squad/pages.json, CC BY-SA 4.0, read in place), served
by the offline `pages` provider as in suite `web-answers`. Each item joins questions about
different pages into one message, "Answer all: Q1 Q2 [Q3]": two or three answerable questions, and
every third item has one unanswerable question mixed in (it is about one of the pages, but the page
does not answer it). `--limit N` asks N items (default 6).

Each item is asked twice, each time in a new chat through the real flow (evals/chat_driver.py):
once with `"mode": "research"` (rag/research.py), once with "Use web tool" ticked (the normal web
answer, rag/web_rag.py). Scored on the saved reply:

- parts answered: of the answerable parts, the share whose gold answer occurs in the reply
  (normalized as SQuAD does, citations removed);
- not found reported: of the items with an unanswerable part, the share whose reply says something
  was not found (research: a "## Not found" section; both: "I couldn't find…");
- citation precision: of the distinct sources a reply cites as [n], the share that is the page of
  one of the item's answerable parts (cited to the right page);
- searches (calls to the search provider) and seconds per item (p50).

Needs models: `chat` and `utility` as configured (the local model without keys: several minutes
per item).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import asdict, dataclass
from typing import Any

from core.services import Services
from evals.chat_driver import ask
from evals.datasets import SQUAD_FILE, Squad, SquadQuestion, load_squad, page_url
from evals.judge import contains_answer, says_dont_know
from evals.metrics import latency_summary
from evals.report import Report, Table
from evals.web_answers import CountingSearch, cited_numbers, run_on_pages, without_citations

DEFAULT_DATA = SQUAD_FILE
SUITE = "research"
DEFAULT_ITEMS = 6
MODES = ("research", "web answer")

log = logging.getLogger("resolveai.evals")


@dataclass(frozen=True)
class Item:
    parts: list[SquadQuestion]

    @property
    def message(self) -> str:
        # Some SQuAD questions end without a question mark: each part must read as one.
        asked = [q.question.strip() for q in self.parts]
        return "Answer all: " + " ".join(a if a[-1:] in "?.!" else f"{a}?" for a in asked)


def build_items(squad: Squad, count: int) -> list[Item]:
    """`count` items, deterministic: item k takes the next answerable question of two (or, every
    other item, three) different pages; every third item adds an unanswerable one."""
    pages = sorted({q.page for q in squad.answerable})
    answerable = {p: [q for q in squad.answerable if q.page == p] for p in pages}
    unanswerable = squad.unanswerable
    used = dict.fromkeys(pages, 0)  # questions taken from each page so far: none is asked twice
    items = []
    for k in range(count):
        width = 3 if k % 2 else 2
        chosen = [pages[(k + j) % len(pages)] for j in range(width)]
        parts = []
        for page in chosen:
            parts.append(answerable[page][used[page] % len(answerable[page])])
            used[page] += 1
        if k % 3 == 2 and unanswerable:
            parts.append(unanswerable[k % len(unanswerable)])
        items.append(Item(parts))
    return items


@dataclass
class Outcome:
    mode: str
    message: str
    reply: str
    status: str
    seconds: float
    searches: int
    parts: int  # answerable parts
    parts_answered: int
    has_unanswerable: bool
    reports_not_found: bool
    cited: int
    cited_right_page: int


async def ask_item(services: Services, search: CountingSearch, item: Item, mode: str) -> Outcome:
    search.queries.clear()
    if mode == "research":
        exchange = await ask(services, item.message, mode="research")
    else:
        exchange = await ask(services, item.message, use_web=True)
    reply = exchange.reply
    plain = without_citations(reply)
    golds = [q for q in item.parts if q.answerable]
    right_pages = {page_url(q.page) for q in golds}
    cited = cited_numbers(reply, exchange.sources)
    urls = {int(s["n"]): s["url"] for s in exchange.sources}
    return Outcome(
        mode=mode,
        message=item.message,
        reply=reply,
        status=exchange.status,
        seconds=round(exchange.seconds, 2),
        searches=len(search.queries),
        parts=len(golds),
        parts_answered=sum(contains_answer(plain, q.answers) for q in golds),
        has_unanswerable=any(not q.answerable for q in item.parts),
        reports_not_found="## Not found" in reply or says_dont_know(reply),
        cited=len(cited),
        cited_right_page=sum(urls.get(n) in right_pages for n in cited),
    )


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    by_mode: dict[str, Any] = {}
    for mode in MODES:
        rows = [o for o in outcomes if o.mode == mode]
        if not rows:
            continue
        parts = sum(o.parts for o in rows)
        mixed = [o for o in rows if o.has_unanswerable]
        cited = sum(o.cited for o in rows)
        by_mode[mode] = {
            "items": len(rows),
            "parts": parts,
            "parts_answered": sum(o.parts_answered for o in rows) / parts if parts else None,
            "items_with_unanswerable": len(mixed),
            "not_found_reported": (
                sum(o.reports_not_found for o in mixed) / len(mixed) if mixed else None
            ),
            "citations": cited,
            "citation_precision": (
                sum(o.cited_right_page for o in rows) / cited if cited else None
            ),
            "searches": sum(o.searches for o in rows) / len(rows),
            "errors": sum(o.status != "complete" for o in rows),
            "latency_seconds": latency_summary([o.seconds for o in rows]),
        }
    return {"by_mode": by_mode, "outcomes": [asdict(o) for o in outcomes]}


def _cell(value: float | None) -> float | str:
    return "–" if value is None else round(value, 3)


def tables(results: dict[str, Any]) -> list[Table]:
    table = Table(
        "Research mode against the normal web answer, on the same multi-part questions",
        [
            "mode", "items", "parts answered", "not found reported", "citation precision",
            "searches", "seconds p50", "errors",
        ],
    )  # fmt: skip
    for mode, row in results["by_mode"].items():
        table.rows.append(
            [
                mode,
                row["items"],
                _cell(row["parts_answered"]),
                _cell(row["not_found_reported"]),
                _cell(row["citation_precision"]),
                round(row["searches"], 1),
                round(row["latency_seconds"]["p50"]),
                row["errors"],
            ]
        )
    return [table]


async def evaluate(services: Services, args: argparse.Namespace) -> Report:
    """The suite on open services whose search provider serves the pages (see `run`)."""
    if services.search_provider is None:
        raise RuntimeError("research needs a search provider serving the pages")
    items = build_items(load_squad(args.data), args.limit or DEFAULT_ITEMS)
    search = CountingSearch(services.search_provider)
    counted = dataclasses.replace(services, search_provider=search)
    outcomes = []
    for number, item in enumerate(items, start=1):
        for mode in MODES:
            outcome = await ask_item(counted, search, item, mode)
            outcomes.append(outcome)
            log.info(
                "%s %d/%d (%s): %d of %d parts answered, %d searches, %d cited (%.0f s)",
                SUITE, number, len(items), mode, outcome.parts_answered, outcome.parts,
                outcome.searches, outcome.cited, outcome.seconds,
            )  # fmt: skip
    results = summarize(outcomes)
    plan = services.model_plan
    return Report(
        SUITE,
        args.data,
        tables(results),
        results,
        {
            "chat": plan.describe("chat"),
            "utility": plan.describe("utility"),
            "embedder": services.embedder.describe(),
        },
        [
            "Each item is asked twice, each in a new chat: in research mode and with 'Use web"
            " tool' ticked. Parts answered: a gold answer occurs in the reply (automatic check)."
            " Citation precision: cited sources that are the page of an answerable part.",
        ],
    )


async def run(args: argparse.Namespace) -> Report:
    return await run_on_pages(args, evaluate)
