"""Suite `documents-qa`: the SQuAD pages uploaded as documents, and where the passage holding each
answer lands when the app searches them.

    python -m evals documents-qa [--data PATH] [--limit N]

Data: the SQuAD 2.0 pages (../shared/evaldata/squad/pages.json, CC BY-SA 4.0, read in place). In a
scratch database, the five pages go through the real document pipeline (rag/document_ingest.py:
the converter in its child process, the chunker, the embedder, Postgres) twice: as Markdown files
for one user, and rendered to PDF (evals/pdf_pages.py, one page of the PDF per 60 lines of text)
for another. Each answerable question is then searched as a chat message would search them
(rag/document_search.py: HNSW + full text in Postgres, RRF), over all five documents of the user.

Precision: `--unrelated N` LoCoMo questions (about people's lives, nothing in the pages; spread
evenly, 500 by default, 0 for none) are searched too, as the automatic recall before every reply
searches (top 5): the share that finds any passage is how often a chat about something else is
handed passages of the user's documents.

Relevance is evidence-ranking's (evals/evidence_ranking.py): a chunk is relevant when it holds an
answer span at its place in the page; the looser "answer text occurs in the chunk" is reported
too. Metrics: recall@5, recall@20, MRR, and the search's latency (the query embedded, the SQL).
Compare with `evidence-ranking`'s hybrid row (the web ranker on the same pages, in memory).
No language model.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from core import accounts, document_store
from core.accounts import LOCAL_USER_ID
from evals.datasets import SQUAD_FILE, Squad, SquadQuestion, load_locomo, load_squad, sample
from evals.evidence_ranking import KS, find_evidence
from evals.metrics import latency_summary
from evals.pdf_pages import LINES_PER_PAGE, pdf_with_pages, wrap
from evals.report import Report, Table
from evals.scratch import scratch_database
from rag.document_ingest import ingest_document
from rag.document_search import search_documents
from rag.embedder import Embedder
from rag.md_chunker import NO_SECTION, Chunk

DEFAULT_DATA = SQUAD_FILE
SEARCHED = 20
UNRELATED = 500  # LoCoMo questions: 1,000 searches, about 15 s
UNRELATED_SEARCHED = 5  # what the automatic recall asks for (chat/document_recall.py)


def add_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--unrelated",
        type=int,
        default=UNRELATED,
        help=f"LoCoMo questions searched over the pages, for precision (default {UNRELATED})",
    )


async def given_passages(
    pool: Any, embedder: Embedder, questions: list[str], user_id: Any
) -> float:
    """The share of `questions` for which the search returns any passage."""
    found = 0
    for question in questions:
        found += bool(
            await search_documents(
                pool, embedder, question, user_id=user_id, limit=UNRELATED_SEARCHED
            )
        )
    return found / len(questions) if questions else 0.0


def as_pdf(markdown: str) -> bytes:
    lines = wrap(markdown)
    pages = [lines[i : i + LINES_PER_PAGE] for i in range(0, len(lines), LINES_PER_PAGE)]
    return pdf_with_pages(pages)


async def upload_pages(
    pool: Any, embedder: Embedder, squad: Squad, user_id: Any, pdf: bool
) -> list[Chunk]:
    """The pages as the user's documents, processed; their chunks as the ranking code reads them
    (`source_index`: the page's place in the data, `url`: the chunk's id)."""
    titles = list(squad.pages)
    for title, markdown in squad.pages.items():
        name, data = (
            (f"{title}.pdf", as_pdf(markdown)) if pdf else (f"{title}.md", markdown.encode())
        )
        row, _ = await document_store.add_document(pool, user_id, name, "", data)
        await ingest_document(pool, embedder, row["document_id"], name, data)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT c.chunk_id, d.filename, c.heading, c.content FROM document_chunks c"
            " JOIN documents d USING (document_id) WHERE d.user_id = %s"
            " ORDER BY d.filename, c.ordinal",
            (user_id,),
        )
        rows = await cursor.fetchall()
    return [
        Chunk(content, str(chunk_id), filename, heading or NO_SECTION, 0,
              titles.index(filename.rsplit(".", 1)[0]))
        for chunk_id, filename, heading, content in rows
    ]  # fmt: skip


async def score(
    pool: Any, embedder: Embedder, squad: Squad, questions: list[SquadQuestion], user_id: Any,
    chunks: list[Chunk], name: str,
) -> dict[str, Any]:  # fmt: skip
    evidence = find_evidence(squad, questions, chunks)
    index = {chunk.url: i for i, chunk in enumerate(chunks)}
    hits = {k: 0 for k in KS}
    text_hits = 0
    reciprocal = 0.0
    seconds = []
    for q in questions:
        started = time.perf_counter()
        found = await search_documents(pool, embedder, q.question, user_id=user_id, limit=SEARCHED)
        seconds.append(time.perf_counter() - started)
        ranked = [index[str(f.chunk_id)] for f in found]
        rank = next((r for r, i in enumerate(ranked, 1) if i in evidence.by_span[q.id]), None)
        if rank is not None:
            reciprocal += 1 / rank
            for k in KS:
                hits[k] += rank <= k
        text_hits += any(i in evidence.by_text[q.id] for i in ranked[:SEARCHED])
    n = len(questions)
    return {
        "documents": name,
        "chunks": len(chunks),
        "questions": n,
        "recall_at_5": hits[5] / n,
        "recall_at_20": hits[20] / n,
        "mrr": reciprocal / n,
        "recall_at_20_answer_text": text_hits / n,
        "search_ms": {k: v * 1000 for k, v in latency_summary(seconds).items()},
    }


async def run(args: argparse.Namespace) -> Report:
    squad = load_squad(args.data)
    questions = sample(squad.answerable, args.limit)
    unrelated = sample(
        [q.question for c in load_locomo() for q in c.questions], args.unrelated
    ) if args.unrelated else []  # fmt: skip
    async with Embedder() as embedder, scratch_database() as database:
        pool = database.pool
        pdf_user = (await accounts.add_user(pool, "pdf-reader", "not used here"))["user_id"]
        rows = []
        for name, user_id, pdf in (("Markdown files", LOCAL_USER_ID, False),
                                   ("the same as PDFs", pdf_user, True)):  # fmt: skip
            chunks = await upload_pages(pool, embedder, squad, user_id, pdf)
            row = await score(pool, embedder, squad, questions, user_id, chunks, name)
            row["unrelated_given_passages"] = await given_passages(
                pool, embedder, unrelated, user_id
            )
            rows.append(row)
    table = Table(
        f"Documents: {len(questions)} answerable SQuAD questions searched over the five pages"
        " uploaded as documents (rag/document_search.py, top 20)",
        ["documents", "chunks", "recall@5", "recall@20", "MRR", "recall@20 (answer text)",
         f"unrelated given passages (of {len(unrelated)})", "search p50 ms", "search p95 ms"],
    )  # fmt: skip
    for row in rows:
        table.rows.append([
            row["documents"], row["chunks"], row["recall_at_5"], row["recall_at_20"], row["mrr"],
            row["recall_at_20_answer_text"], f"{row['unrelated_given_passages']:.1%}",
            f"{row['search_ms']['p50']:.1f}",
            f"{row['search_ms']['p95']:.1f}",
        ])  # fmt: skip
    return Report(
        "documents-qa",
        args.data,
        [table],
        {"questions": len(questions), "unrelated_questions": len(unrelated), "rows": rows},
        {"embedder": embedder.describe()},
        ["Search latency includes embedding the question (about 10 ms of it on these machines)."],
    )
