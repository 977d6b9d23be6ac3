"""Suite `evidence-ranking`: where the chunk holding a SQuAD answer lands in a search round.

    python -m evals evidence-ranking [--data PATH] [--limit N] [--budget N]

Data: the SQuAD 2.0 pages (../shared/evaldata/squad/pages.json, CC BY-SA 4.0, read in place, never
copied; EVALDATA_DIR overrides the folder, --data the file). The five pages are chunked with
rag/md_chunker.py exactly as a search round would, and for each answerable question the chunks of
ALL five pages are ranked, as if one search had returned every page. Unanswerable questions are
left out (they have no evidence to find).

Relevance: a chunk is relevant when it contains one of the question's answer spans, at its place in
the page. Each chunk is mapped back to the page: its text is cut into lines and sentences, each
one is found in the page (whitespace-insensitive, searching forward from the previous one), and
consecutive finds less than MAX_GAP_CHARS apart are joined (the gap is text the cleaner changed,
such as a removed "[citation needed]"). A span counts for a chunk only if it lies inside one of the
chunk's mapped intervals. A plain "the answer text occurs in the chunk" check is reported too: it
is more lenient (short answers such as "France" or "1066" occur in many chunks).

Metrics: recall@k (share of questions with a relevant chunk in the top k) and MRR (mean of 1 / rank
of the first relevant chunk, 0 if none is ranked). Also: chunk count and size statistics, and the
share of answer spans that no chunk holds (what cleaning and merging threw away).

Rows: the default (hybrid: BM25 prefilter, then dense, fused with RRF) and the alternatives it was
chosen over, all in the same run. Takes about two minutes on a laptop CPU; no language model.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evals.datasets import SQUAD_FILE, Squad, SquadQuestion, load_squad, sample
from evals.report import Report, Table
from rag import ranker
from rag.embedder import Embedder, RankingEmbedder
from rag.md_chunker import Chunk, budget_for, chunk_pages

DEFAULT_DATA = SQUAD_FILE

MAX_GAP_CHARS = 250
AT_BUDGET = 0.95  # a chunk "at the budget" uses at least this share of it
KS = (5, 20)

_FRAGMENT_SPLIT = re.compile(r"\n+|(?<=[.!?])\s+")
_WHITESPACE = re.compile(r"\s+")
_SECTION_MARKER = re.compile(r"^\[Section: [^\]]*\]$")


# --- mapping chunks back to the page ---------------------------------------------------------


class NormalizedPage:
    """The page with whitespace runs collapsed, and the way back to original offsets."""

    def __init__(self, text: str) -> None:
        chars: list[str] = []
        self.origin: list[int] = []
        previous_space = False
        for index, char in enumerate(text):
            space = char.isspace()
            if space and previous_space:
                continue
            chars.append(" " if space else char)
            self.origin.append(index)
            previous_space = space
        self.text = "".join(chars)

    def to_original(self, start: int, end: int) -> tuple[int, int]:
        return self.origin[start], self.origin[end - 1] + 1


def chunk_intervals(chunk: Chunk, page: NormalizedPage) -> list[tuple[int, int]]:
    """Where the chunk's text lies in the original page, as (start, end) intervals."""
    found: list[tuple[int, int]] = []
    cursor = 0
    for fragment in _FRAGMENT_SPLIT.split(chunk.body):
        fragment = _WHITESPACE.sub(" ", fragment).strip()
        if len(fragment) < 2 or _SECTION_MARKER.match(fragment):
            continue
        at = page.text.find(fragment, cursor)
        if at < 0:
            at = page.text.find(fragment)
        if at < 0:
            continue  # changed by cleaning: the gap rule below covers it
        found.append((at, at + len(fragment)))
        cursor = at + len(fragment)
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and 0 <= start - merged[-1][1] <= MAX_GAP_CHARS:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return [page.to_original(start, end) for start, end in merged]


@dataclass
class Evidence:
    """For each question, the indices of the chunks that hold an answer span."""

    by_span: dict[str, set[int]]
    by_text: dict[str, set[int]]


def find_evidence(squad: Squad, questions: list[SquadQuestion], chunks: list[Chunk]) -> Evidence:
    pages = {title: NormalizedPage(text) for title, text in squad.pages.items()}
    titles = list(squad.pages)
    intervals = [chunk_intervals(c, pages[titles[c.source_index]]) for c in chunks]
    by_span: dict[str, set[int]] = {}
    by_text: dict[str, set[int]] = {}
    lowered = [c.body.lower() for c in chunks]
    for q in questions:
        page_index = titles.index(q.page)
        by_span[q.id] = {
            i
            for i, chunk in enumerate(chunks)
            if chunk.source_index == page_index
            and any(a <= s and e <= b for s, e in q.spans for a, b in intervals[i])
        }
        by_text[q.id] = {
            i for i, body in enumerate(lowered) if any(a.lower() in body for a in q.answers)
        }
    return Evidence(by_span, by_text)


# --- metrics ---------------------------------------------------------------------------------


@dataclass
class Scores:
    method: str
    questions: int
    recall_at_5: float
    recall_at_20: float
    mrr: float
    recall_at_20_answer_text: float
    embedded_per_question: float


def first_relevant_rank(
    ranked: list[ranker.RankedChunk], index: dict[int, int], relevant: set[int]
) -> int | None:
    """The rank of the first relevant chunk, or None."""
    for item in ranked:
        if index[id(item.chunk)] in relevant:
            return item.rank
    return None


class QueryCachingEmbedder:
    """The real embedder, with query vectors and chunk vectors computed once for the whole eval
    (the ranker's own cache is per message; here every question ranks the same chunks). Counts
    the chunks each ranking asked for, to report the prefilter's saving."""

    def __init__(self, embedder: Embedder | RankingEmbedder) -> None:
        self.embedder = embedder
        self.queries: dict[str, np.ndarray] = {}
        self.requested = 0

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return await self.embedder.embed_documents(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        if text not in self.queries:
            self.queries[text] = await self.embedder.embed_query(text)
        return self.queries[text]


async def score_method(
    name: str,
    questions: list[SquadQuestion],
    chunks: list[Chunk],
    evidence: Evidence,
    embedder: QueryCachingEmbedder,
    cache: dict[str, np.ndarray],
    **options: Any,
) -> Scores:
    index = {id(c): i for i, c in enumerate(chunks)}
    hits = {k: 0 for k in KS}
    hits_text = 0
    reciprocal = 0.0
    embedded = 0
    for q in questions:
        counting: dict[str, np.ndarray] = CountingCache(cache)
        ranked = await ranker.rank_chunks(
            q.question, chunks, embedder, top_k=len(chunks), cache=counting, **options
        )
        embedded += counting.reads
        rank = first_relevant_rank(ranked, index, evidence.by_span[q.id])
        if rank is not None:
            reciprocal += 1.0 / rank
            for k in KS:
                hits[k] += rank <= k
        text_rank = first_relevant_rank(ranked, index, evidence.by_text[q.id])
        hits_text += text_rank is not None and text_rank <= 20
    n = len(questions)
    return Scores(
        name,
        n,
        hits[5] / n,
        hits[20] / n,
        reciprocal / n,
        hits_text / n,
        embedded / n,
    )


class CountingCache(dict):
    """A view of the shared vector cache that counts how many chunk vectors a ranking used."""

    def __init__(self, shared: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.shared = shared
        self.reads = 0

    def __contains__(self, key: object) -> bool:
        return key in self.shared

    def __getitem__(self, key: str) -> np.ndarray:
        self.reads += 1
        return self.shared[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.shared.update(*args, **kwargs)


def chunk_statistics(chunks: list[Chunk], budget: int) -> dict[str, float]:
    tokens = np.array([c.token_count for c in chunks])
    return {
        "chunks": len(chunks),
        "budget": budget,
        "median_tokens": float(np.median(tokens)),
        "p10_tokens": float(np.percentile(tokens, 10)),
        "max_tokens": int(tokens.max()),
        "share_at_budget": float((tokens >= AT_BUDGET * budget).mean()),
    }


def spans_kept(questions: list[SquadQuestion], evidence: Evidence) -> float:
    return sum(bool(evidence.by_span[q.id]) for q in questions) / len(questions)


# --- main ------------------------------------------------------------------------------------

METHODS: list[tuple[str, dict[str, Any]]] = [
    ("dense", {"method": "dense"}),
    ("bm25", {"method": "bm25"}),
    ("hybrid (RRF), all chunks embedded", {"method": "hybrid", "dense_candidates": None}),
    *[
        (
            f"hybrid (RRF), BM25 top {n} embedded"
            + (" (default)" if n == ranker.DENSE_CANDIDATES else ""),
            {"method": "hybrid", "dense_candidates": n},
        )
        for n in (10, 15, 20, 30, 40)
    ],
]


async def evaluate(
    embedder: Embedder, squad: Squad, questions: list[SquadQuestion], budget: int
) -> dict[str, Any]:
    chunks = chunk_pages(squad.results(), embedder.count_tokens, budget)
    evidence = find_evidence(squad, questions, chunks)
    wrapped = QueryCachingEmbedder(embedder.ranking)  # what a search round ranks with
    cache: dict[str, np.ndarray] = {}
    rows = [
        await score_method(name, questions, chunks, evidence, wrapped, cache, **options)
        for name, options in METHODS
    ]
    return {
        "budget": budget,
        "chunk_statistics": chunk_statistics(chunks, budget),
        "answer_spans_kept": spans_kept(questions, evidence),
        "methods": [asdict(r) for r in rows],
    }


def tables(results: dict[str, Any]) -> list[Table]:
    out = []
    for result in results["budgets"]:
        stats = result["chunk_statistics"]
        table = Table(
            f"Evidence ranking: {results['questions']} answerable SQuAD questions, chunk budget"
            f" {result['budget']} tokens: {stats['chunks']} chunks (median"
            f" {stats['median_tokens']:.0f} tokens, {stats['share_at_budget']:.0%} at the budget),"
            f" answer spans kept {result['answer_spans_kept']:.1%}",
            [
                "method",
                "recall@5",
                "recall@20",
                "MRR",
                "recall@20 (answer text)",
                "chunks embedded",
            ],
        )
        for row in result["methods"]:
            table.rows.append(
                [
                    row["method"],
                    row["recall_at_5"],
                    row["recall_at_20"],
                    row["mrr"],
                    row["recall_at_20_answer_text"],
                    f"{row['embedded_per_question']:.0f}",
                ]
            )
        out.append(table)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget", type=int, action="append", help="chunk budget(s); default: the model's"
    )
    parser.add_argument(
        "--rank-precision",
        choices=["auto", "bfloat16", "float32"],
        default="auto",
        help="the ranking vectors' precision (WEB_RANK_PRECISION); default: auto",
    )


async def run(args: argparse.Namespace) -> Report:
    async with Embedder(rank_precision=args.rank_precision) as embedder:
        squad = load_squad(args.data)
        questions = sample(squad.answerable, args.limit)
        budgets = args.budget or [budget_for(embedder)]
        results = {
            "questions": len(questions),
            "pages": len(squad.pages),
            "default_method": ranker.DEFAULT_METHOD,
            "dense_candidates": ranker.DENSE_CANDIDATES,
            "rrf_k": ranker.RRF_K,
            "budgets": [await evaluate(embedder, squad, questions, budget) for budget in budgets],
        }
    return Report(
        "evidence-ranking",
        args.data,
        tables(results),
        results,
        {"embedder": embedder.describe(), "rank_precision": embedder.ranking.precision},
        [
            f"Default: {ranker.DEFAULT_METHOD}, BM25 prefilter {ranker.DENSE_CANDIDATES},"
            f" RRF k={ranker.RRF_K}. The chunks of all {len(squad.pages)} pages are ranked for"
            " every question, as if one search had returned them all.",
        ],
    )
