"""One round of web search, as the `web_search` tool runs it:

search → chunk and clean → rank → check the evidence → (not enough: tell the model why) or answer
with inline [n] citations from the numbered sources. The last search of a message (the third, or
the only one when the chat model cannot search again) skips the check and always answers, saying
what it could not find. Pages are untrusted: they reach models only inside delimited source blocks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from core.prompts import source_blocks, web_answer_request
from core.repetition import REPEATING_NOTE, Unlooped
from core.token_batcher import TokenBatcher
from core.tracing import span
from rag.chunk_judge import check_evidence
from rag.citations import SupportCitations
from rag.md_chunker import budget_for, chunk_pages
from rag.ranker import rank_chunks
from rag.search_providers import SearchProvider

if TYPE_CHECKING:
    from core.llm_router import ModelPlan

log = logging.getLogger("resolveai.web")

MAX_SEARCHES = 3  # per user message
RESULTS_PER_SEARCH = 5
CHUNKS_KEPT = 20
# The local model reads ~20-25 prompt tokens/s on one of 2 cores: 20 chunks (~5,000 tokens) would
# take minutes, so it reads only the best 6 (~1,300 tokens with the rest: about a minute). 5 cut a
# web answer from 78 to 66 s but answered 0 of 2 eval questions instead of 1 (n=2: a hint only).
CHUNKS_FOR_LOCAL_MODEL = 6
PASSAGE_CHARS = 600  # of a source's best chunk kept with the reply, for its citation's preview


def chunks_kept_for(model_plan: ModelPlan) -> int:
    """How many of the best chunks the models read: fewer when the chat model runs locally."""
    return CHUNKS_FOR_LOCAL_MODEL if model_plan.runs_locally("chat") else CHUNKS_KEPT


@dataclass
class Source:
    n: int
    title: str
    url: str
    texts: list[str] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        """As saved with the reply and sent to the browser: with its best passage (the chunk
        ranked highest), which the citation's preview quotes."""
        best = self.texts[0][:PASSAGE_CHARS] if self.texts else ""
        return {"n": self.n, "title": self.title, "url": self.url, "text": best}


@dataclass
class RoundResult:
    """Either an answer (with its sources) or why the evidence was not enough."""

    answer: str | None
    sources: list[dict[str, Any]]
    reason: str = ""


@dataclass
class WebSearchRound:
    """What one round needs from the turn running it."""

    provider: SearchProvider
    embedder: Any
    router: Any
    question: str  # what the user asked
    query: str  # what the model chose to search for
    context: str  # background the model gave
    number: int  # 1-based search number within the message
    step: Callable[[str], Any]  # reports a progress line
    token: Callable[[str], Any]  # streams a piece of the answer
    publish_sources: Callable[[list[dict[str, Any]]], Any]  # before the answer's first token
    metadata: Callable[[str], dict[str, Any]]  # tracing metadata for a named model call
    embedding_cache: dict[str, Any]
    chunks_kept: int = CHUNKS_KEPT  # how many of the best chunks the models read
    # No search can follow this one (a chat model without tools): a check could only lead to
    # "not enough", and on the local model it costs as much as the answer (it reads every chunk).
    last: bool = False
    # Told which deployment wrote the answer (the Router's response, before it is read).
    answered: Callable[[Any], Any] = lambda response: None
    # The pages are links the user gave, read already (and reported): no "Searching the web"
    # step, and their short pieces are content, kept as a document's are.
    user_pages: bool = False

    async def run(self) -> RoundResult:
        with span(f"web search {self.number}", input=self.query) as observation:
            result = await self._run()
            if observation is not None:
                observation.update(output=result.answer or f"not enough: {result.reason}")
            return result

    async def _run(self) -> RoundResult:
        if not self.user_pages:
            self.step(f"Searching the web for “{self.query}”")
        started = time.monotonic()
        with span("search", kind="retriever", input=self.query):
            results = await self.provider.search(self.query, RESULTS_PER_SEARCH)
        searched = time.monotonic()
        with span("chunk"):
            chunks = await asyncio.to_thread(self._chunk, results)
        chunked = time.monotonic()
        if not chunks:
            log.info("Web: search %d found nothing (%.1f s)", self.number, searched - started)
            if not self._is_last():
                return self._not_enough("the search returned no usable pages")
            answer = (
                "The linked pages have no text I could use."
                if self.user_pages
                else f"I couldn't find information about “{self.query}” on the web."
            )
            self.token(answer)
            return RoundResult(answer, [])
        pages, parts = len(results), len(chunks)
        self.step(f"Reading {pages} page{'s' * (pages != 1)} ({parts} chunk{'s' * (parts != 1)})")
        with span("rank", chunks=len(chunks)):
            ranked = await rank_chunks(
                self.query, chunks, self.embedder, top_k=self.chunks_kept,
                cache=self.embedding_cache,
            )  # fmt: skip
        ranked_at = time.monotonic()
        sources, blocks = numbered_sources([r.chunk for r in ranked])
        log.info(
            "Web: search %d: %d pages, %d chunks, top %d from %d sources"
            " (search %.2f s, chunking %.2f s, ranking %.2f s)",
            self.number, len(results), len(chunks), len(ranked), len(sources),
            searched - started, chunked - searched, ranked_at - chunked,
        )  # fmt: skip

        if not self._is_last():
            with span("check"):
                verdict = await check_evidence(
                    self.router, self.question, self.context, blocks,
                    self.metadata("evidence check"),
                )  # fmt: skip
            log.info(
                "Web: evidence check %s in %.1f s: %s",
                "yes" if verdict.enough else "no",
                verdict.seconds,
                verdict.reason,
            )
            if not verdict.enough:
                return self._not_enough(verdict.reason or "the sources do not answer every part")

        self.step(f"Writing the answer from {len(sources)} source{'s' * (len(sources) != 1)}")
        # Sources first: the browser can link each [n] as soon as it streams in.
        self.publish_sources([s.public() for s in sources])
        with span("answer"):
            answer = await self._write_answer(blocks, sources)
        elapsed = time.monotonic() - ranked_at
        log.info("Web: answer written (%d chars, %.1f s)", len(answer), elapsed)
        return RoundResult(answer, [s.public() for s in sources])

    def _chunk(self, results: list[Any]) -> list[Any]:
        """In a thread: the tokenizer's budget is read here too, as it waits for an embedder
        still loading (start-up does not wait for it)."""
        return chunk_pages(
            results, self.embedder.count_tokens, budget_for(self.embedder), self.user_pages
        )

    def _is_last(self) -> bool:
        return self.last or self.number >= MAX_SEARCHES

    def _not_enough(self, reason: str) -> RoundResult:
        self.step(f"Search {self.number} of {MAX_SEARCHES} was not enough: {reason}")
        return RoundResult(None, [], reason)

    async def _write_answer(self, blocks: str, sources: list[Source]) -> str:
        stream = await self.router.acompletion(
            model="chat",
            messages=web_answer_request(self.question, self.context, blocks, datetime.now(UTC)),
            stream=True,
            metadata=self.metadata("web answer"),
        )
        self.answered(stream)
        citations = SupportCitations({s.n: "\n".join(s.texts) for s in sources})
        shown: list[str] = []
        shown_to = TokenBatcher(self.token)
        unlooped = Unlooped(stream)
        try:
            async for chunk in unlooped:
                piece = chunk.choices[0].delta.content if chunk.choices else None
                if piece and (text := citations.feed(piece)):
                    shown.append(text)
                    shown_to.add(text)
        finally:
            shown_to.flush()  # before the step below, and what streamed before a failure
        if unlooped.looped:
            self.step(REPEATING_NOTE)
        if rest := citations.finish():
            shown.append(rest)
            self.token(rest)
        return "".join(shown).strip()


def numbered_sources(chunks: list[Any]) -> tuple[list[Source], str]:
    """The ranked chunks as sources numbered by their best chunk's rank (each keeps its chunks in
    rank order), and the delimited source blocks the models read."""
    by_url: dict[str, Source] = {}
    for chunk in chunks:
        source = by_url.get(chunk.url)
        if source is None:
            source = by_url[chunk.url] = Source(len(by_url) + 1, chunk.title, chunk.url)
        source.texts.append(chunk.text)
    sources = list(by_url.values())
    return sources, source_blocks([(s.n, s.title, s.texts) for s in sources])


def no_more_searches_message() -> str:
    return (
        f"The limit of {MAX_SEARCHES} web searches for this message is reached. Answer from what "
        "the searches found, and say what you could not find."
    )
