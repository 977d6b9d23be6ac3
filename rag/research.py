"""Research mode: a cited report from several searches, for questions with several parts.

plan (the `utility` model splits the question into sub-questions, reading the chat before it and
the memories recalled for it) → the user's documents searched for each sub-question → a round:
every open sub-question searched at once → the new pages chunked → the chunks ranked for each
sub-question (the documents' passages first) → one check (`utility`) of which sub-questions the
best chunks answer → another round for those still open, within the budget (rounds, time) → the
report. The last round has no check: its parts are written and say themselves what their sources
lack (measured on the local model, the check turned down parts its sources answered).

The report is assembled by code around what the `chat` model writes: a title; the short answer
(each part's first sentence); one part per answered sub-question, each written from that
sub-question's own best chunks with the web answer's prompt and the report's source numbers (a
small model answers one focused question well, and a whole report's structure poorly: measured,
the local model asked for the whole report copied its sources and its own "Sources" list into it);
"## Not found" (the sub-questions no source answered); "## Sources" (the cited ones only). A part
that cites nothing says which sources it read. Stopped (or failed) before the end, the report so
far (`report_so_far`) is the reply; it is also kept in the turn's event log as it grows (`draft`),
for a server that dies mid-research.

Same providers, chunker, ranker and source blocks as a web search (rag/web_rag.py). A failed plan
or check falls back (the question as its one sub-question; every sub-question counted answered),
logged, so the user still gets a report.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core.model_json import json_object_in
from core.prompts import (
    research_check_request,
    research_plan_request,
    source_blocks,
    web_answer_request,
)
from core.repetition import REPEATING_NOTE, Unlooped
from core.text_cuts import cut_at_word
from core.tracing import span
from rag.citations import CITATION, SupportCitations, says_not_found
from rag.document_search import FoundChunk
from rag.md_chunker import Chunk, budget_for, chunk_pages
from rag.ranker import RankedChunk, rank_chunks
from rag.search_providers import SearchError, SearchProvider, SearchResult
from rag.web_rag import RoundResult, Source, numbered_sources

log = logging.getLogger("resolveai.research")

MAX_SUB_QUESTION_CHARS = 300
# A sentence ends at . ! or ? followed by its citations, then the line's end or a space and what
# starts a sentence (not a digit or a lower-case letter: "c. 1,300,000", "e.g. the").
_SENTENCE = re.compile(r"(.+?[.!?](?:\s?\[\d+\])*)(?=$|\s+[^\s\da-z])")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
# Words that say nothing of what a sub-question asks about.
# fmt: off
_FUNCTION_WORDS = frozenset((
    "the", "and", "for", "are", "was", "were", "what", "when", "where", "which", "who", "whom",
    "whose", "why", "how", "does", "did", "has", "have", "had", "this", "that", "these", "those",
    "with", "from", "into", "about", "answer", "all", "tell", "please",
))
# fmt: on
TITLE_CHARS = 100
DOCUMENT_PASSAGES = 2  # of the user's documents, at most, per sub-question


@dataclass(frozen=True)
class ResearchBudget:
    """How far one research turn may go."""

    rounds: int  # of searching (each: every open sub-question searched once)
    sub_questions: int  # at most, in the plan
    seconds: float  # no new round starts after this long
    chunks_per_question: int  # of the best chunks, read by the check and the report
    pages: int  # each search reads (its best results)


@dataclass
class Research:
    """What one research turn needs from the turn running it."""

    provider: SearchProvider
    embedder: Any
    router: Any
    question: str
    context: str  # the conversation before the question, for what it refers to
    budget: ResearchBudget
    step: Callable[[str], Any]
    token: Callable[[str], Any]
    publish_sources: Callable[[list[dict[str, Any]]], Any]
    metadata: Callable[[str], dict[str, Any]]
    embedding_cache: dict[str, Any] = field(default_factory=dict)
    answered: Callable[[Any], Any] = lambda response: None
    # The user's documents, searched for each sub-question (None: they have none ready), and what
    # they told before (recalled memories), which the plan reads to make sub-questions concrete.
    documents: Callable[[str, int], Awaitable[list[FoundChunk]]] | None = None
    memories: list[str] = field(default_factory=list)
    # Where the report so far goes each time it gains a part (and once planned): the turn's event
    # log, so a reply whose server dies before the report streams keeps what was written.
    draft: Callable[[str], Any] = lambda text: None
    searches: int = 0  # made so far (for the log and the evals)
    # What the report has so far, for `report_so_far`: the plan, the text of each part being
    # written (by sub-question), the sources published.
    questions: list[str] = field(default_factory=list)
    written: dict[int, list[str]] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    # The documents' passages found for each sub-question (first in its best chunks), by url.
    passages: dict[str, FoundChunk] = field(default_factory=dict)

    async def run(self) -> RoundResult:
        started = time.monotonic()
        with span("research plan"):
            questions = self.questions = await self._plan()
        self.step(f"Research plan: {len(questions)} sub-question{'s' * (len(questions) > 1)}")
        for n, question in enumerate(questions, 1):
            self.step(f"{n}. {question}")
        self.draft(self.report_so_far())
        pages: dict[str, SearchResult] = {}
        chunks: list[Any] = []
        best: dict[int, list[RankedChunk]] = {}
        open_ = list(range(len(questions)))
        checked = True  # whether the check has judged what the last round found for `open_`
        in_documents = await self._search_documents(questions)
        for round_ in range(1, self.budget.rounds + 1):
            if round_ > 1 and time.monotonic() - started > self.budget.seconds:
                self.step("Out of research time: writing the report from what was found")
                break
            with span(f"research round {round_}", open=len(open_)):
                await self._search(questions, open_, round_, pages, chunks, best)
                for i in open_:
                    best[i] = in_documents.get(i, []) + best[i]
                if round_ == self.budget.rounds:
                    # No round follows: the check would decide nothing a part cannot. Each part
                    # is written and says itself what its sources lack (measured: the local
                    # model's check turned down parts its sources answered).
                    checked = False
                    break
                answered = await self._check(questions, open_, best)
            open_ = [i for i in open_ if i not in answered]
            done = len(questions) - len(open_)
            self.step(f"{done} of {len(questions)} sub-questions answered")
            if not open_:
                break
        found = [
            i for i in range(len(questions)) if (i not in open_ or not checked) and best.get(i)
        ]
        sources, _ = numbered_sources(_merged(best, len(questions)))
        log.info(
            "Research: %d sub-questions, %d parts, %d searches, %d pages, %d sources (%.1f s)",
            len(questions), len(found), self.searches, len(pages), len(sources),
            time.monotonic() - started,
        )  # fmt: skip
        public = self.sources = [
            self.passages[s.url].source(s.n) if s.url in self.passages else s.public()
            for s in sources
        ]
        self.publish_sources(public)  # before the report's first token: [n] links as it streams
        with span("research report"):
            sections = await asyncio.gather(
                *(
                    self._write_part(k, len(found), i, best[i], sources)
                    for k, i in enumerate(found, 1)
                )
            )
        written = dict(zip(found, sections, strict=True))
        parts = [i for i in found if not says_not_found(written[i])]  # the answering ones
        if not checked:
            self.step(f"{len(parts)} of {len(questions)} sub-questions answered")
        missing = [questions[i] for i in range(len(questions)) if i not in parts]
        report = _report(self.question, [(questions[i], written[i]) for i in parts], missing,
                         public)  # fmt: skip
        self.token(report)
        return RoundResult(report, public)

    async def _plan(self) -> list[str]:
        limit = self.budget.sub_questions
        try:
            response = await self.router.acompletion(
                model="utility",
                messages=research_plan_request(self.question, self.context, limit, self.memories),
                temperature=0,
                max_tokens=400,
                metadata=self.metadata("research plan"),
            )
            questions = parse_plan(response.choices[0].message.content or "", limit)
        except Exception as error:
            log.warning("Research: planning failed (%s: %s)", type(error).__name__, error)
            questions = []
        if not questions:
            log.info("Research: no usable plan; researching the question as it is")
            questions = [self.question[:MAX_SUB_QUESTION_CHARS]]
        return questions

    async def _search_documents(self, questions: list[str]) -> dict[int, list[RankedChunk]]:
        """The user's documents' best passages for each sub-question (by index): read once, as
        they do not change between rounds, and put first among the sub-question's chunks."""
        if self.documents is None:
            return {}
        try:
            found = await asyncio.gather(*(self.documents(q, DOCUMENT_PASSAGES) for q in questions))
        except Exception as error:  # the web still answers
            log.warning("Research: document search failed (%s: %s)", type(error).__name__, error)
            return {}
        ranked: dict[int, list[RankedChunk]] = {}
        for i, passages in enumerate(found):
            ranked[i] = [RankedChunk(_as_chunk(p), p.score, k) for k, p in enumerate(passages, 1)]
            self.passages.update((p.url, p) for p in passages)
        if self.passages:
            count = len(self.passages)
            self.step(f"Found {count} passage{'s' * (count > 1)} in your documents")
        return ranked

    async def _search(
        self,
        questions: list[str],
        open_: list[int],
        round_: int,
        pages: dict[str, SearchResult],
        chunks: list[Any],
        best: dict[int, list[RankedChunk]],
    ) -> None:
        # A later round searches again with the whole question's words added: the sub-question
        # alone found nothing that answers it.
        queries = [
            questions[i] if round_ == 1 else f"{questions[i]} {self.question}"[:400] for i in open_
        ]
        self.step(
            f"Searching the web for {len(queries)} sub-question{'s' * (len(queries) > 1)}"
            + (f" (round {round_})" if round_ > 1 else "")
        )
        found = await asyncio.gather(*(self._one_search(q) for q in queries))
        new = []  # the pages not read before (one copy of a page two searches found)
        for result in (result for results in found for result in results):
            if result.url not in pages:
                pages[result.url] = result
                new.append(result)
        if new:
            chunks.extend(
                await asyncio.to_thread(
                    chunk_pages, new, self.embedder.count_tokens, budget_for(self.embedder)
                )
            )
            read, parts = len(pages), len(chunks)
            self.step(f"Reading {read} page{'s' * (read != 1)} ({parts} chunk{'s' * (parts != 1)})")
        for i in open_:
            best[i] = await rank_chunks(
                questions[i], chunks, self.embedder,
                top_k=self.budget.chunks_per_question, cache=self.embedding_cache,
            )  # fmt: skip

    async def _one_search(self, query: str) -> list[SearchResult]:
        self.searches += 1
        log.info("Research: searching for %r", query[:200])
        try:
            return await self.provider.search(query, self.budget.pages)
        except SearchError as error:  # one failed search costs its sub-question, not the report
            log.warning("Research: search for %r failed: %s", query[:80], error)
            return []

    async def _check(
        self, questions: list[str], open_: list[int], best: dict[int, list[RankedChunk]]
    ) -> set[int]:
        """Which of the open sub-questions the best chunks answer (indices into `questions`)."""
        asked = [questions[i] for i in open_]
        ranked = {k: best.get(i, []) for k, i in enumerate(open_)}
        _, blocks = numbered_sources(_merged(ranked, len(open_)))
        if not blocks:
            return set()
        try:
            response = await self.router.acompletion(
                model="utility",
                messages=research_check_request(asked, blocks),
                temperature=0,
                max_tokens=100,
                metadata=self.metadata("research check"),
            )
            numbers = parse_answered(response.choices[0].message.content or "", len(asked))
        except Exception as error:
            log.warning("Research: check failed (%s: %s)", type(error).__name__, error)
            numbers = None
        if numbers is None:  # no usable verdict: the report says what the sources hold
            log.warning("Research: the check gave no usable answer; counting all as answered")
            return set(open_)
        return {open_[n - 1] for n in numbers}

    def report_so_far(self) -> str:
        """The report of a research stopped before its end ("" before there is a plan): the parts
        written so far (the last ones cut where they were), the sub-questions it did not get to,
        and the sources those parts cite."""
        if not self.questions:
            return ""
        texts = ["".join(self.written.get(i, [])).strip() for i in range(len(self.questions))]
        sections = [(q, text) for q, text in zip(self.questions, texts, strict=True) if text]
        missing = [q for q, text in zip(self.questions, texts, strict=True) if not text]
        return _report(self.question, sections, missing, self.sources, stopped=True)

    async def _write_part(
        self, k: int, parts: int, i: int, ranked: list[RankedChunk], sources: list[Source]
    ) -> str:
        """One section: sub-question `i` answered from its own best chunks, cited with the
        report's source numbers. Written whole before anything streams: the report starts with
        the short answer, drawn from every section."""
        question = self.questions[i]
        self.step(f"Writing part {k} of {parts}: {question}")
        by_url = {source.url: source for source in sources}
        texts: dict[int, list[str]] = {}
        for item in ranked:
            texts.setdefault(by_url[item.chunk.url].n, []).append(item.chunk.text)
        blocks = source_blocks([(n, sources[n - 1].title, texts[n]) for n in sorted(texts)])
        stream = await self.router.acompletion(
            model="chat",
            messages=web_answer_request(
                question,
                user_wording(self.question, question, len(self.questions)),
                blocks,
                datetime.now(UTC),
            ),
            stream=True,
            metadata=self.metadata(f"research part {k}"),
        )
        self.answered(stream)
        # The sources this part was shown, and only those.
        citations = SupportCitations({n: "\n".join(chunks) for n, chunks in texts.items()})
        written = self.written[i] = []
        unlooped = Unlooped(stream)
        async for chunk in unlooped:
            piece = chunk.choices[0].delta.content if chunk.choices else None
            if piece:
                written.append(citations.feed(piece))
        if unlooped.looped:
            self.step(f"Part {k}: {REPEATING_NOTE}")
        written.append(citations.finish())
        text = "".join(written).strip()
        if text and not CITATION.search(text) and not says_not_found(text):
            # No [n] from the model, and no sentence of the part is one a source states (those
            # were cited as it streamed): it was written from these sources alone, so it says
            # which it read.
            text += "\n\n_Read for this part: " + " ".join(f"[{n}]" for n in sorted(texts)) + "_"
        self.draft(self.report_so_far())
        return text


def user_wording(message: str, sub_question: str, sub_questions: int) -> str:
    """The user's own words for one sub-question, the context its part is written with: its
    wording ("in what country…") is the user's, the sub-question's the planner's. The whole
    message for a plan of one; else the message's sentence sharing the most words with the
    sub-question, or "" (none shares any, or the message is one sentence): shown the whole
    message, the local model answered every part of it in each part."""
    if sub_questions <= 1:
        return message
    sentences = [s.strip() for s in _SENTENCE_BREAK.split(message) if s.strip()]
    if len(sentences) < 2:
        return ""
    asked = _content_words(sub_question)
    best = max(sentences, key=lambda sentence: len(asked & _content_words(sentence)))
    return best if asked & _content_words(best) else ""


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w{3,}", text.lower()) if w not in _FUNCTION_WORDS}


def parse_plan(text: str, limit: int) -> list[str]:
    """The sub-questions of the planner's JSON reply (distinct, non-empty, at most `limit`)."""
    data = json_object_in(text)
    items = data.get("sub_questions") if data else None
    if not isinstance(items, list):
        return []
    questions: list[str] = []
    for item in items:
        text = " ".join(item.split())[:MAX_SUB_QUESTION_CHARS] if isinstance(item, str) else ""
        if text and text.lower() not in (q.lower() for q in questions):
            questions.append(text)
    return questions[:limit]


def parse_answered(text: str, count: int) -> set[int] | None:
    """The numbers (1..count) of the answered sub-questions in the check's JSON reply, or None
    when it is not the JSON asked for."""
    data = json_object_in(text)
    numbers = data.get("answered") if data else None
    if not isinstance(numbers, list):
        return None
    # bool is an int to Python, and `true` is not a number here
    return {n for n in numbers if type(n) is int and 1 <= n <= count}


def _as_chunk(passage: FoundChunk) -> Chunk:
    """A document's passage as a chunk of a page: numbered and read like the web's."""
    return Chunk(passage.content, passage.url, passage.title, passage.heading, 0, -1)


def _merged(best: dict[int, list[RankedChunk]], count: int) -> list[Any]:
    """The best chunks of every sub-question, interleaved by rank (each sub-question's best first),
    each chunk once: a source's number follows its best chunk's place."""
    lists = [best.get(i, []) for i in range(count)]
    seen: set[tuple[str, str]] = set()
    merged = []
    for rank in range(max((len(ranked) for ranked in lists), default=0)):
        for ranked in lists:
            if rank < len(ranked):
                chunk = ranked[rank].chunk
                if (chunk.url, chunk.text) not in seen:
                    seen.add((chunk.url, chunk.text))
                    merged.append(chunk)
    return merged


def _report(
    question: str,
    sections: list[tuple[str, str]],
    missing: list[str],
    sources: list[dict[str, Any]],
    *,
    stopped: bool = False,
) -> str:
    """The report in Markdown: a title, the short answer (each section's answering sentence), a
    section per answered sub-question, "Not found", and the cited sources only. `stopped`: the
    report so far of a research stopped before its end, said instead of the short answer."""
    title = cut_at_word(" ".join(question.split()), TITLE_CHARS)
    if stopped:
        lead = "_Stopped before the research was finished: the report so far._"
    else:
        answers = (_answering_sentence(asked, text) for asked, text in sections)
        short = " ".join(filter(None, answers)) or "The sources found do not answer this question."
        lead = f"**Short answer:** {short}"
    parts = [f"# {title}", lead]
    parts += [f"## {sub_question}\n\n{text}" for sub_question, text in sections]
    if missing:
        listing = "\n".join(f"- {sub_question}" for sub_question in missing)
        heading, says = (
            ("Not finished", "Not researched to the end")
            if stopped
            else ("Not found", "No source found answers")
        )
        parts.append(f"## {heading}\n\n{says}:\n\n{listing}")
    cited = {int(n) for _, text in sections for n in CITATION.findall(text)}
    listed = [s for s in sources if s["n"] in cited]
    if listed:
        parts.append("## Sources\n\n" + "\n".join(f"[{s['n']}] {_link(s)}" for s in listed))
    return "\n\n".join(parts)


def _answering_sentence(sub_question: str, text: str) -> str:
    """The sentence of a section sharing the most words with its sub-question (the first of
    equals), with its citations; "" when the section says it found nothing. The local model
    opens a part with context as often as with the answer ("The steam engine contributed much to
    thermodynamic theory." before the sentence naming Watt)."""
    lines = [line.strip(" -*#>") for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("_")]  # "_Read for this part…_"
    if not lines or says_not_found(lines[0]):
        return ""
    asked = _content_words(sub_question)
    sentences = [sentence for line in lines for sentence in _sentences(line)]
    return max(sentences, key=lambda sentence: len(asked & _content_words(sentence)))


def _sentences(line: str) -> list[str]:
    """A line's sentences, each with its citations. A period inside a sentence ("c. 1,300,000",
    "e.g. the") does not end it; an end with no mark ("Rollo [1]": a small model's bare answer)
    is given one, so the short answer does not run it into the next part's."""
    found = []
    while line:
        match = _SENTENCE.match(line)
        if not match:
            found.append(f"{line.rstrip(':;,')}.")
            break
        found.append(match.group(1).strip())
        line = line[match.end() :].strip()
    return found


def _link(source: dict[str, Any]) -> str:
    title = " ".join(str(source["title"]).split()).replace("[", "(").replace("]", ")")
    if source.get("kind") == "document":  # its [n] open it in the app; a link out of it won't
        return f"{title} (your document)"
    url = str(source["url"]).replace("(", "%28").replace(")", "%29").replace(" ", "%20")
    return f"[{title}]({url})"
