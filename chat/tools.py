"""The tools the chat model can call: remembering facts about the user, looking them up, searching
the user's documents and the web (the search itself lives in rag/web_rag.py), a calculator
(core/calculator.py) and the current date and time in the user's time zone.

Each tool is a LangChain tool with a pydantic input schema. Its `config: RunnableConfig` parameter
is filled in by LangChain when the graph invokes it (never by the model, so it is not in the
schema); `turn_of(config)` gives the turn's services and chat ids. Tools return a short JSON
string for the model and raise on bad input (the graph's tools node turns that into an error
payload). Every read and write logs one plain line to the "resolveai.memory" logger.

`TOOLS` lists them, the one place that does (`SUMMARIES`: what each is for, as the Settings page
says it; a user can switch each off there); `tool_schemas()` gives their OpenAI function schemas
for binding to a model.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Collection, Iterable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_stream_writer
from pydantic import BaseModel, Field, field_validator

from chat.document_recall import RECALL_LIMIT
from chat.memory_recall import about_the_past, note_memories
from chat.state import TurnContext, turn_of
from chat.steps import step_event
from chat.user_errors import note_answer
from core import memory_store
from core.calculator import CalculatorError, evaluate, format_number
from core.clock import MAX_ZONE_CHARS, now_in, utc_offset
from core.memory_search import RetrievedMemory, retrieve_memories
from core.prompt_blocks import untrusted
from core.tracing import trace_metadata
from rag.document_search import search_documents as find_passages
from rag.link_reader import (
    MAX_LINKS,
    LinkError,
    LinkPolicy,
    ReadPages,
    read_link,
    without_links,
)
from rag.web_rag import (
    MAX_SEARCHES,
    WebSearchRound,
    chunks_kept_for,
    no_more_searches_message,
)

log = logging.getLogger("resolveai.memory")

LOGGED_TEXT_CHARS = 80  # log lines quote at most this much of a memory or query


class SaveMemoryInput(BaseModel):
    content: str = Field(
        description=(
            "One short fact about the user, in the third person, at most"
            f" {memory_store.MAX_MEMORY_CHARS} characters, e.g. 'The user is vegetarian'."
        )
    )
    quote: str = Field(
        description=(
            "The user's own words that state the fact, copied exactly from their message,"
            ' e.g. "I\'m vegetarian".'
        )
    )


class RetrieveMemoryInput(BaseModel):
    query: str = Field(
        description=(
            "A short question about the user, e.g. 'What pets does the user have?' or"
            " 'Does the user have any dietary restrictions?'."
        )
    )


def _quote(text: str) -> str:
    short = text if len(text) <= LOGGED_TEXT_CHARS else text[: LOGGED_TEXT_CHARS - 1] + "…"
    return repr(short)


def _elapsed_ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def _dumps(payload: dict[str, Any]) -> str:
    # ensure_ascii=False: names like "Kraków" stay readable and cost the model fewer tokens.
    return json.dumps(payload, ensure_ascii=False)


def tool_record(
    call_id: str, name: str, args: dict[str, Any], result: str, *, ok: bool, duration_ms: int
) -> dict[str, Any]:
    """A tool call as it is saved with the reply: what ran, with what, what came back."""
    return {"id": call_id, "name": name, "args": args, "result": result, "ok": ok,
            "duration_ms": duration_ms}  # fmt: skip


def calculator_result(expression: str, value: float) -> str:
    """What the calculator gives back for `expression` (JSON; the expression, written by a model
    or the user, kept as data)."""
    return _dumps({"expression": untrusted(expression), "result": format_number(value)})


# The docstrings below are what the model reads to decide when to call each tool.


@tool("save_memory", args_schema=SaveMemoryInput)
async def save_memory(content: str, quote: str, config: RunnableConfig) -> str:
    """Remember one lasting fact about the user for future chats, when the user asks you to.

    Facts the user states are saved automatically after each message; call this only when the
    user explicitly asks you to remember something ("remember that..."). Write one short fact in
    the third person, at most 500 characters, e.g. "The user's daughter is called Mia", and give as
    the quote the exact
    words of the user's message that state it. A fact the user did not say is refused. If the
    result says the fact is already known, do not save it again.
    """
    turn = turn_of(config)
    started = time.perf_counter()
    try:
        result = await memory_store.save_grounded_memory(
            turn.services.database.pool,
            turn.services.embedder,
            content,
            quote,
            turn.user_message_id,
        )
    except memory_store.NotGrounded as error:
        # Raised on: the tools node gives the model the reason as the tool's error.
        log.info("Memory: refused %s: %s", _quote(" ".join(content.split())), error)
        raise
    stored = result.memory["content"]
    where = f"chat {turn.chat_id.hex[:8]}, {_elapsed_ms(started)} ms"
    if result.saved:
        log.info("Memory: saved %s (%s)", _quote(stored), where)
        # A stored memory reaches the model as data: neutralised like every untrusted text.
        return _dumps({"saved": True, "memory": untrusted(stored)})
    log.info(
        "Memory: already known %s as %s (similarity %.2f, %s)",
        _quote(" ".join(content.split())),
        _quote(stored),
        result.similarity or 0.0,
        where,
    )
    return _dumps(
        {
            "saved": False,
            "already_known": untrusted(stored),
            "note": "This fact is already known; there is no need to save it again.",
        }
    )


@tool("retrieve_memory", args_schema=RetrieveMemoryInput)
async def retrieve_memory(query: str, config: RunnableConfig) -> str:
    """Look up what you know about the user from earlier chats.

    Use it when the answer may depend on the user's own life: their preferences, the people and
    pets in their life, their plans, or past events they told you about. Call it before
    answering a personal question ("What should I cook tonight?", "When is my daughter's
    birthday?") and when personalizing a recommendation. Ask a short question about the user,
    e.g. "What pets does the user have?". Returns the closest matching memories with the date
    each was saved, or none when nothing relevant is known.
    """
    turn = turn_of(config)
    started = time.perf_counter()
    found = await retrieve_memories(
        turn.services.database.pool,
        turn.services.embedder,
        query,
        user_id=turn.user_id,
        include_superseded=about_the_past(query),
    )
    where = f"chat {turn.chat_id.hex[:8]}, {_elapsed_ms(started)} ms"
    what = f"{len(found)} memories" if len(found) != 1 else "1 memory"
    log.info("Memory: %s found for %s (%s)", what, _quote(" ".join(query.split())), where)
    if not found:
        return _dumps({"memories": [], "note": "nothing relevant is known"})
    note_memories(turn, found)
    return _dumps({"memories": [_listed(memory) for memory in found]})


def _listed(memory: RetrievedMemory) -> dict[str, str]:
    listed = {
        "content": untrusted(memory.content),
        "saved_on": memory.created_at.date().isoformat(),
    }
    if memory.valid_to is not None:  # asked about the past: a fact the user has since changed
        listed["no_longer_true_since"] = memory.valid_to.date().isoformat()
    return listed


class SearchDocumentsInput(BaseModel):
    query: str = Field(
        min_length=1,
        max_length=400,
        description="What to look for in the user's documents: a short question or keywords.",
    )


@tool("search_documents", args_schema=SearchDocumentsInput)
async def search_documents(query: str, config: RunnableConfig) -> str:
    """Search the files the user uploaded (their documents) for passages about something.

    Passages that fit the user's message are already given with it, numbered; call this to look
    for something else in the documents. Cite each passage you use as [n] with its number.
    """
    turn = turn_of(config)
    started = time.perf_counter()
    found = await find_passages(
        turn.services.database.pool, turn.services.embedder, query,
        user_id=turn.user_id, chat_id=turn.chat_id, limit=RECALL_LIMIT,
    )  # fmt: skip
    known = {s["chunk_id"]: s["n"] for s in turn.document_sources}
    listed = []
    for chunk in found:
        if str(chunk.chunk_id) not in known:
            source = chunk.source(len(turn.document_sources) + 1)
            turn.document_sources.append(source)
            known[source["chunk_id"]] = source["n"]
        where = f", page {chunk.page}" if chunk.page is not None else ""
        listed.append({"n": known[str(chunk.chunk_id)], "file": untrusted(chunk.filename + where),
                       "text": untrusted(chunk.content)})  # fmt: skip
    what = _quote(" ".join(query.split()))
    log.info("Documents: %d passages for %s (chat %s, %d ms)", len(found), what,
             turn.chat_id.hex[:8], _elapsed_ms(started))  # fmt: skip
    if not listed:
        return _dumps({"passages": [], "note": "nothing relevant in the user's documents"})
    get_stream_writer()({"type": "sources", "sources": list(turn.document_sources)})
    return _dumps({"passages": listed})


MAX_CONTEXT_CHARS = 2000


def retrieval_hooks(turn: TurnContext, tool: str | None = None) -> dict[str, Any]:
    """What a web round or a research turn takes from the turn running it: the embedder and
    router, and where its steps, tokens, sources, tracing and answering deployment go."""
    writer = get_stream_writer()
    extra = {"tool": tool} if tool else {}
    return {
        "embedder": turn.services.embedder.ranking,
        "router": turn.services.router,
        "step": lambda text: step_event(turn, text, **extra),
        "token": lambda text: writer({"type": "token", "text": text}),
        "publish_sources": lambda sources: writer({"type": "sources", "sources": sources}),
        "metadata": lambda name: trace_metadata(
            turn.trace_id, str(turn.chat_id), name, user_id=str(turn.user_id)
        ),
        "embedding_cache": turn.embedding_cache,
        "answered": lambda response: note_answer(turn, response),
    }


class WebSearchInput(BaseModel):
    query: str = Field(
        min_length=1,
        max_length=400,
        description="What to search the web for: a focused search query.",
    )
    context: str = Field(
        default="",
        description=(
            "Background the answer must respect: what the user is really asking, details from"
            " the conversation, and what earlier searches already tried or missed."
            f" At most {MAX_CONTEXT_CHARS} characters."
        ),
    )

    @field_validator("context", mode="before")
    @classmethod
    def _cut_long_context(cls, value: object) -> object:
        # Too long a context is the model being wordy, not wrong: refusing the search for it
        # would cost a whole model call (minutes on the local model) for nothing.
        return value[:MAX_CONTEXT_CHARS] if isinstance(value, str) else value


@tool("web_search", args_schema=WebSearchInput, response_format="content_and_artifact")
async def web_search(query: str, context: str, config: RunnableConfig) -> tuple[str, Any]:
    """Search the web and answer from what it finds, with numbered citations.

    Use it for anything current or factual you are not certain of (news, prices, releases,
    schedules, statistics, people, places), and always when the user's message carries the note
    "use web tool to answer". When it finds enough evidence, it writes the answer for you. When it
    does not, it says what was missing: then call it again with a better query and context (at most
    3 searches per message).
    """
    turn = turn_of(config)
    provider = turn.services.search_provider
    if provider is None:
        raise RuntimeError("web search is not configured on this server")
    if len(turn.searches) >= MAX_SEARCHES:
        return _dumps({"error": no_more_searches_message()}), None
    turn.searches.append(query)
    result = await WebSearchRound(
        provider=provider,
        question=turn.user_text,
        query=query,
        context=context,
        number=len(turn.searches),
        **retrieval_hooks(turn, tool="web_search"),
        chunks_kept=chunks_kept_for(turn.services.model_plan),
        # A chat model without tools cannot search again: this search answers, whatever it found.
        last=not turn.services.model_plan.capability("chat", "tools"),
    ).run()
    if result.answer is None:
        left = MAX_SEARCHES - len(turn.searches)
        return _dumps(
            {
                "enough_evidence": False,
                # The check's reason was written by a model that read the pages.
                "reason": untrusted(result.reason),
                "searches_left": left,
                "next": "Call web_search again with a better query and context."
                if left
                else "Answer from what you know and say what you could not find.",
            }
        ), None
    return result.answer, {"final_answer": True, "answer": result.answer, "sources": result.sources}


class FetchUrlInput(BaseModel):
    urls: list[str] = Field(
        min_length=1,
        max_length=MAX_LINKS,
        description=(
            f"The http(s) addresses of 1 to {MAX_LINKS} pages to read, exactly as written,"
            " e.g. ['https://example.com/article']."
        ),
    )


@tool("fetch_url", args_schema=FetchUrlInput, response_format="content_and_artifact")
async def fetch_url(urls: list[str], config: RunnableConfig) -> tuple[str, Any]:
    """Read web pages by their address and answer from them, with numbered citations.

    Use it when the user gives a link, or to read in full a page a search found. It writes the
    answer for you. Only public pages are read (no private or local addresses).
    """
    turn = turn_of(config)
    settings = turn.services.settings
    if not settings.reads_links:
        raise RuntimeError("reading links is off on this server")
    if len(turn.links_read) + len(urls) > MAX_LINKS:
        return _dumps({"error": f"At most {MAX_LINKS} links are read per message."}), None
    turn.links_read.extend(urls)
    policy = LinkPolicy(settings.link_allowed_networks, settings.link_allowed_ports)
    for url in urls:
        step_event(turn, f"Reading {url}", tool="fetch_url")
    outcomes = await asyncio.gather(
        *(read_link(url, policy) for url in urls), return_exceptions=True
    )
    pages = []
    for outcome in outcomes:
        if isinstance(outcome, LinkError):
            # The user sees why a link was not read, whatever the model makes of it.
            step_event(turn, str(outcome), tool="fetch_url")
            turn.add_note(str(outcome))
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            pages.append(outcome)
    if not pages:
        # Not a failure of the tool: the model hears why, and what to do with it.
        return _dumps(
            {
                "error": untrusted(" ".join(str(outcome) for outcome in outcomes)),
                "next": "Say in one sentence that the link could not be read, and why. If the"
                " question can be answered without the page, answer it too.",
            }
        ), None
    result = await WebSearchRound(
        provider=ReadPages(pages),
        question=without_links(turn.user_text),
        query=without_links(turn.user_text),
        context="",
        number=1,
        **retrieval_hooks(turn, tool="fetch_url"),
        chunks_kept=chunks_kept_for(turn.services.model_plan),
        last=True,  # the user pointed at these pages: answer from them, saying what they lack
        user_pages=True,
    ).run()
    assert result.answer is not None  # a last round always answers
    return result.answer, {"final_answer": True, "answer": result.answer, "sources": result.sources}


class CalculatorInput(BaseModel):
    expression: str = Field(
        min_length=1,
        max_length=500,
        description=(
            "An arithmetic expression, e.g. '(17.5 * 3) / 4', '2 ** 32', 'sqrt(2) * pi',"
            " 'factorial(20)', 'log(1000, 10)', '15 % 4'."
        ),
    )


@tool("calculator", args_schema=CalculatorInput)
async def calculator(expression: str, config: RunnableConfig) -> str:
    """Compute an arithmetic expression exactly instead of doing the arithmetic yourself.

    Use it for any calculation with more than a couple of small numbers: sums, percentages, unit
    conversions, powers, roots, logarithms. Allowed: numbers, + - * / // % ** and parentheses, pi
    and e, and sqrt, log (natural, or log(x, base)), ln, log10, log2, exp, sin, cos, tan (radians),
    abs, round, floor, ceil, factorial, min and max; date(year, month, day) is a day number, so
    date(2026, 7, 19) - date(2026, 3, 3) is the days between them. Use ** for powers, not ^.
    """
    turn = turn_of(config)
    # Bounded (core/calculator.py), but CPU work all the same: off the event loop.
    try:
        value = await asyncio.to_thread(evaluate, expression)
    except CalculatorError as error:
        log.info("Calculator: refused %s: %s (chat %s)", _quote(expression), error,
                 turn.chat_id.hex[:8])  # fmt: skip
        # The model's own words come back (quoted in the reason too): data, like all its output.
        return _dumps({"expression": untrusted(expression), "error": untrusted(str(error))})
    return calculator_result(expression, value)


class CurrentDatetimeInput(BaseModel):
    time_zone: str | None = Field(
        default=None,
        max_length=MAX_ZONE_CHARS,
        description=(
            "An IANA time zone for the time somewhere else, e.g. 'Asia/Tokyo' or"
            " 'America/New_York'. Leave it out for the user's own time zone."
        ),
    )


@tool("current_datetime", args_schema=CurrentDatetimeInput)
async def current_datetime(time_zone: str | None, config: RunnableConfig) -> str:
    """Get the current date, time and weekday, in the user's time zone or another one.

    Use it whenever the answer depends on today's date or the time now: "what day is it", "how
    many days until…", "what time is it in Tokyo", ages and deadlines.
    """
    turn = turn_of(config)
    local = now_in(time_zone if time_zone else turn.time_zone)
    result: dict[str, Any] = {
        "time_zone": local.zone,
        "date": local.now.date().isoformat(),
        "weekday": local.now.strftime("%A"),
        "time": local.now.strftime("%H:%M"),
        "utc_offset": utc_offset(local.now),
    }
    if time_zone is None:
        result["whose"] = "the user's time zone"
    if local.note:  # may quote the zone the model (or the browser) gave
        result["note"] = untrusted(local.note)
    return _dumps(result)


TOOLS: list[BaseTool] = [
    save_memory,
    retrieve_memory,
    search_documents,
    web_search,
    fetch_url,
    calculator,
    current_datetime,
]

# What each tool does, for people (the Settings page): the docstrings above are the model's.
SUMMARIES: dict[str, str] = {
    "save_memory": "Remembers a fact about you when you ask it to.",
    "retrieve_memory": "Looks up what it remembers about you from earlier chats.",
    "search_documents": "Searches the documents you uploaded.",
    "web_search": "Searches the web and answers with citations.",
    "fetch_url": "Reads the web pages you link to and answers from them, with citations.",
    "calculator": "Computes arithmetic exactly (powers, roots, logarithms, days between dates…).",
    "current_datetime": "Tells the date and time now, in your time zone or another.",
}


def _plain_description(docstring: str) -> str:
    """The docstring as the model should see it: no indentation, one line per paragraph."""
    paragraphs = inspect.cleandoc(docstring).split("\n\n")
    return "\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)


for _tool in TOOLS:
    # @tool keeps the docstring's indentation and line breaks: tokens for nothing in every call.
    _tool.description = _plain_description(_tool.description)
del _tool
TOOLS_BY_NAME: dict[str, BaseTool] = {t.name: t for t in TOOLS}


MEMORY_TOOLS = ("save_memory", "retrieve_memory")


def available_tool_names(
    services: Any, memory_tools: bool = True, documents: bool = False, off: Collection[str] = ()
) -> list[str]:
    """The tools a turn can offer: web search only when a search provider is configured, reading
    links only when the server reads links (LINK_READING), the
    memory tools only when the chat model may have them and memory is on (`memory_tools`), the
    document search only when the user has documents (`documents`), none the user switched off
    (`off`, their `disabled_tools` setting)."""
    return [
        t.name
        for t in TOOLS
        if (t.name != "web_search" or services.search_provider)
        and (t.name != "fetch_url" or services.settings.reads_links)
        and (memory_tools or t.name not in MEMORY_TOOLS)
        and (documents or t.name != "search_documents")
        and t.name not in off
    ]


def tool_schemas(names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """OpenAI function schemas of the tools named (all of `TOOLS` by default), in that order.

    ValueError for a name that is not a tool here: a typo would otherwise silently leave the model
    without a tool.
    """
    if names is None:
        chosen = TOOLS
    else:
        wanted = list(names)
        unknown = [name for name in wanted if name not in TOOLS_BY_NAME]
        if unknown:
            raise ValueError(
                f"Unknown tool(s) {', '.join(unknown)}; known: {', '.join(TOOLS_BY_NAME)}"
            )
        chosen = [TOOLS_BY_NAME[name] for name in wanted]
    return [convert_to_openai_tool(t) for t in chosen]
