"""The chat graph's nodes, each a plain async function of (state, config) returning an update.

Nodes report progress through LangGraph's stream writer as events the API forwards to the browser
(`token`, `step`, `tool_start`, `tool_end`, `sources`, `done`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer

from chat.arithmetic import asked_day, calculation_for, span_from_memories
from chat.document_recall import document_search, recall_documents
from chat.memory_recall import recall_memories
from chat.replies import done_event, save_reply
from chat.state import ChatState, TurnContext, turn_of
from chat.steps import short_id, step_event
from chat.summary import FOLD_AT_UNSUMMARISED
from chat.tool_markup import ToolCallStreamFilter
from chat.tools import (
    TOOLS_BY_NAME,
    available_tool_names,
    retrieval_hooks,
    tool_record,
    tool_schemas,
)
from chat.user_errors import LINKS_UNREAD, note_answer, web_search_failed
from core import chat_store
from core.model_progress import reading_what, watched_by, watched_quietly
from core.prompt_blocks import untrusted
from core.prompts import chat_instructions, user_turn
from core.repetition import REPEATING_NOTE, Unlooped
from core.token_batcher import TokenBatcher
from core.tracing import span, trace_metadata
from rag.citations import SupportCitations
from rag.link_reader import links_in
from rag.research import Research, ResearchBudget

if TYPE_CHECKING:
    from core.config import Settings
    from core.llm_router import ModelPlan

log = logging.getLogger("resolveai.chat")

MAX_MODEL_CALLS = 6  # per user message; the last one is made without tools
# The prompt carries every message the summary does not cover: about FOLD_AT_UNSUMMARISED at
# most while folds succeed. Only when they keep failing (the utility model down) does this cap the
# history to the latest messages, so a long chat still fits the model's context.
MAX_HISTORY_MESSAGES = 2 * FOLD_AT_UNSUMMARISED
# A forced web_search call (Use web tool) needs a query and a short context, not a reply: without a
# cap, the local model once wrote 1,024 tokens of context (half an hour on two cores) and the call
# failed validation anyway. Cut short, the call does not parse and the graph searches the user's
# own words instead.
FORCED_SEARCH_MAX_TOKENS = 600
# A reply cut by the length limit is continued this many times at most, then left as it is.
MAX_CONTINUATIONS = 2
CONTINUE_REQUEST = "Continue exactly where you stopped, without repeating anything."


# --- build_prompt --------------------------------------------------------------------------------


async def build_prompt(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
    """Instructions (+ summary), every message the summary does not cover yet, then the new
    message with the memories recalled for it, in that order.

    Not a window of the latest messages: that would shift every turn. As the summary changes only
    when a batch is folded into it (chat/summary.py), this prompt only grows at its end from one
    turn to the next, and the model's prefix cache keeps all of it but the new message.
    """
    turn = turn_of(config)
    pool = turn.services.database.pool
    # Research searches the documents for each of its sub-questions instead.
    research_mode = state.get("mode") == "research"
    sums_in = "" if research_mode or turn.continues else state["user_text"]
    (summary, history), recalled, (passages, documents), calculation = await asyncio.gather(
        _unsummarised(pool, turn.chat_id),
        recall_memories(turn, state["user_text"]),
        recall_documents(turn, "" if research_mode else state["user_text"]),
        calculation_for(turn, sums_in),
    )
    if calculation is None:  # "How many days until my sister's birthday?": a date told before
        calculation = await span_from_memories(turn, sums_in, recalled.memories)
    turn.seen["unsummarised"] = len(history)  # (the summary fold after the reply needs it)
    continues = turn.continues or {}
    earlier = [
        {"role": m["role"], "content": _with_sources(m["content"], m["sources"])}
        for m in history
        if m["message_id"] not in (turn.user_message_id, continues.get("message_id"))
        and m["content"].strip()
    ][-MAX_HISTORY_MESSAGES:]
    # A user's few memories are given with every message. In a chat under way they go with the
    # instructions: right before a follow-up ("Tell me more about the second one."), the local
    # model read them as what it referred to (5 of 6 follow-ups; 0 of 6 from the instructions).
    # With files sent, all that was recalled goes there: "Summarize this." was read as about the
    # line right before it (what the user had said in another chat) in 2 of 12 replies, 0 of 12.
    if turn.sent_documents:
        profile, with_message = recalled.lines(), []
    else:
        profile = recalled.memories if recalled.all_of_them and earlier else []
        with_message = recalled.for_this_message() if profile else recalled.lines()
    system = chat_instructions(
        datetime.now(UTC), summary, memory=turn.memory, memories=profile,
        custom=turn.custom_instructions,
    )  # fmt: skip
    links_unread = not turn.services.settings.reads_links and bool(links_in(state["user_text"]))
    if links_unread:
        step_event(turn, LINKS_UNREAD)
        turn.add_note(LINKS_UNREAD)
    day = None
    if calculation is None and sums_in:  # "When is my son's birthday?", "How long until …"
        said = [m["content"] for m in earlier]
        day = await asked_day(turn, sums_in, recalled.memories, said)
    question = user_turn(
        state["user_text"], state.get("use_web", False), with_message, documents, links_unread,
        calculation.worked_out if calculation else None, day,
    )  # fmt: skip
    messages = [
        {"role": "system", "content": system},
        *earlier,
        {"role": "user", "content": question},
    ]
    if continues:  # the reply so far, and the request to go on from where it stopped
        messages += [
            {"role": "assistant", "content": continues["content"]},
            {"role": "user", "content": CONTINUE_REQUEST},
        ]
    log.info(
        "Chat %s: prompt built (%d earlier messages%s%s%s)",
        short_id(turn.chat_id),
        len(earlier),
        ", with summary" if summary else "",
        f", {len(recalled.lines())} memories" if recalled.lines() else "",
        f", {len(passages)} document passages" if passages else "",
    )
    return {
        "messages": messages,
        "model_calls": 0,
        "reply": continues.get("content", ""),
        # The same list the search_documents tool adds to, so what it finds is saved too.
        "sources": continues.get("sources") or turn.document_sources,
        "recalled": recalled.lines(),
        # Saved with the reply as the calculator calls of a model that makes its own are.
        "tool_calls": [calculation.record] if calculation else [],
    }


async def _unsummarised(pool: Any, chat_id: uuid.UUID) -> tuple[str | None, list[dict[str, Any]]]:
    """The chat's summary and the messages of the branch shown after the last one it covers. A
    summary of another branch (the user picked another version of an earlier message) is left
    out, and the whole branch sent instead."""
    chat, history, covered = await chat_store.unsummarised(pool, chat_id)
    return (chat["summary"] if chat and covered else None), history


def _with_sources(content: str, sources: list[dict[str, Any]]) -> str:
    """A web answer as the model sees it later: its [n] citations resolved by a sources list (the
    pages' titles and URLs are theirs: untrusted)."""
    if not sources:
        return content
    listed = "\n".join(
        f"[{s['n']}] {untrusted(s['title'])}: {untrusted(s['url'])}" for s in sources
    )
    return f"{content}\n\nSources:\n{listed}"


# --- call_model ----------------------------------------------------------------------------------


async def call_model(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
    """One streamed call of the `chat` model; the last allowed call gets no tools.

    A chat model without tools (`capabilities: tools: false`, the local model) is never offered
    any: with "Use web tool" ticked the first search runs on the user's own words instead of a
    model call. Every model's text goes through the tool-markup filter, so call markup never
    reaches the screen or the saved reply; a reply cut by the length limit is continued.
    """
    turn = turn_of(config)
    calls = state.get("model_calls", 0) + 1
    with_tools = turn.services.model_plan.capability("chat", "tools")
    names = offered_tool_names(turn)
    # A continued reply read them already: its [n] cite the pages as they were then.
    unread = "fetch_url" in names and not turn.links_read and not turn.continues
    links = links_in(state["user_text"]) if unread else []
    if links:
        # Links in the message are read before anything else, on every model: the user pointed
        # at them (a failed read comes back as the tool's error, and the turn goes on).
        log.info("Chat %s: reading %d linked pages", short_id(turn.chat_id), len(links))
        assistant = {"role": "assistant", "content": None, "tool_calls": [_fetch_call(links)]}
        return {"messages": [assistant], "model_calls": calls - 1}
    wants_search = "web_search" in names and state.get("use_web") and not turn.searches
    if wants_search and not with_tools:
        log.info("Chat %s: searching the web for the message itself", short_id(turn.chat_id))
        assistant = {
            "role": "assistant",
            "content": None,
            "tool_calls": [_search_call(state["user_text"])],
        }
        return {"messages": [assistant], "model_calls": calls - 1}
    offered = with_tools and calls < MAX_MODEL_CALLS and not state.get("answer_now")
    tools = tool_schemas(names) if offered else None
    # "Use web tool" ticked: the first search of the message is not the model's choice.
    force_search = bool(tools) and wants_search
    tool_choice = {"type": "function", "function": {"name": "web_search"}} if force_search else None
    step_event(turn, "Thinking" if calls == 1 else "Thinking about what the tools found")
    reply = state.get("reply", "")
    # A new paragraph after what a tool step wrote; none inside a reply being continued.
    separator = "\n\n" if reply and not (calls == 1 and turn.continues) else ""

    # A reply continued after a space: the model's own leading space would make it two.
    trim = calls == 1 and bool(turn.continues) and reply[-1:].isspace()
    started = time.monotonic()
    messages = list(state["messages"])
    markup = ToolCallStreamFilter(set(names) if tools else set())
    # Document passages are numbered sources: their citations get the web answers' treatment.
    citations = (
        SupportCitations({s["n"]: s["text"] for s in turn.document_sources})
        if turn.document_sources
        else None
    )
    streamed = StreamedMessage()
    shown: list[str] = []
    writer = get_stream_writer()
    shown_to = TokenBatcher(lambda text: writer({"type": "token", "text": text}))
    # A slow model's progress ("Reading your message…") becomes steps; the provider reports it
    # while the stream is read, in this task, so the listener is set around the reading too.
    try:
        with watched_by(_progress_steps(turn)):
            for continuation in range(MAX_CONTINUATIONS + 1):
                answering = await _stream_chat(
                    turn, messages, tools, tool_choice, force_search, calls
                )
                note_answer(turn, answering)
                stream = Unlooped(answering)
                finish = None
                async for chunk in stream:
                    if not chunk.choices:
                        continue
                    choice = chunk.choices[0]
                    finish = choice.finish_reason or finish
                    streamed.add_tool_calls(choice.delta.tool_calls)
                    text = markup.feed(choice.delta.content or "")
                    if citations and text:
                        text = citations.feed(text)
                    if trim and text:
                        text = text.lstrip()
                        trim = not text
                    if text:
                        shown.append(text)
                        reply, separator = _show(shown_to, reply, separator, text)
                if stream.looped:
                    turn.add_note(REPEATING_NOTE)
                    break
                if finish != "length" or streamed.has_calls() or continuation == MAX_CONTINUATIONS:
                    break
                # Cut by the length limit: ask for the rest and stitch it on.
                log.info(
                    "Chat %s: reply cut by the length limit; continuing it", short_id(turn.chat_id)
                )
                messages += [
                    {"role": "assistant", "content": "".join(shown)},
                    {"role": "user", "content": CONTINUE_REQUEST},
                ]
    finally:
        shown_to.flush()
    rest, written_calls = markup.finish()
    if citations:
        rest = citations.feed(rest) + citations.finish()
    if rest:
        shown.append(rest)
        reply, separator = _show(shown_to, reply, separator, rest)
        shown_to.flush()
    message = streamed.message()
    tool_calls = message["tool_calls"] + [_tool_call(name, args) for name, args in written_calls]
    content = "".join(shown)
    log.info(
        "Chat %s: model call %d done in %d ms (%s)",
        short_id(turn.chat_id),
        calls,
        (time.monotonic() - started) * 1000,
        f"{len(tool_calls)} tool calls" if tool_calls else f"{len(content)} chars",
    )
    if force_search and not any(c["function"]["name"] == "web_search" for c in tool_calls):
        # A model that ignored tool_choice still searches: with the user's own words.
        log.info(
            "Chat %s: the model did not search; searching for the message itself",
            short_id(turn.chat_id),
        )
        tool_calls = [_search_call(state["user_text"])]
    if tool_calls and all(_already_done(call, state) for call in tool_calls):
        # Small models tend to repeat a call instead of reading its result: answer now instead.
        log.info(
            "Chat %s: the model repeated a tool call; asking for the answer", short_id(turn.chat_id)
        )
        return {"model_calls": calls, "reply": reply, "answer_now": True}
    assistant: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        assistant["tool_calls"] = tool_calls
    else:
        assistant["content"] = content
    return {"messages": [assistant], "model_calls": calls, "reply": reply}


async def _stream_chat(
    turn: TurnContext,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    tool_choice: dict[str, Any] | None,
    force_search: bool,
    calls: int,
) -> Any:
    return await turn.services.router.acompletion(
        model="chat",
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        **({"max_tokens": FORCED_SEARCH_MAX_TOKENS} if force_search else {}),
        stream=True,
        metadata=trace_metadata(
            turn.trace_id, str(turn.chat_id), f"chat call {calls}", user_id=str(turn.user_id)
        ),
    )


def _progress_steps(turn: TurnContext) -> Any:
    def step(text: str) -> None:
        if not turn.steps or turn.steps[-1]["text"] != text:
            step_event(turn, text)

    return step


def _show(to: TokenBatcher, reply: str, separator: str, text: str) -> tuple[str, str]:
    """Stream `text` to the browser after the separator still owed; the new (reply, separator)."""
    to.add(separator + text)
    return reply + separator + text, ""


def _tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call in the structured form: one the model wrote as text, or one the turn makes
    itself (a search for the message, the links in it)."""
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


class StreamedMessage:
    """A streamed reply put back together: its text, and its tool calls from their fragments.

    What `litellm.stream_chunk_builder` does for the two fields we read, at a fraction of its cost
    (it also rebuilds usage and cost, a few ms per message; `bench/turn.py` measures it). As there,
    fragments of one call share its `index`: the id and name are taken when given, the arguments
    are concatenated.
    """

    def __init__(self) -> None:
        self.content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}

    def add_tool_calls(self, fragments: Any) -> None:
        for fragment in fragments or ():
            function = getattr(fragment, "function", None)
            if function is None:
                continue
            index = getattr(fragment, "index", None) or 0
            call = self._calls.setdefault(index, {"id": None, "name": None, "arguments": []})
            if getattr(fragment, "id", None):
                call["id"] = fragment.id
            if getattr(function, "name", None):
                call["name"] = function.name
            if getattr(function, "arguments", None):
                call["arguments"].append(function.arguments)

    def has_calls(self) -> bool:
        return bool(self._calls)

    def message(self) -> dict[str, Any]:
        """{"content": the text, "tool_calls": in OpenAI's format, in index order}."""
        tool_calls = [
            {
                "id": call["id"] or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
            }
            for _, call in sorted(self._calls.items())
        ]
        return {"content": "".join(self.content), "tool_calls": tool_calls}


def _search_call(query: str) -> dict[str, Any]:
    return _tool_call("web_search", {"query": query[:400], "context": ""})


def _fetch_call(urls: list[str]) -> dict[str, Any]:
    return _tool_call("fetch_url", {"urls": urls})


def _already_done(call: dict[str, Any], state: ChatState) -> bool:
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
    except ValueError:
        return False
    return any(
        done["name"] == call["function"]["name"] and done["args"] == args
        for done in state.get("tool_calls", [])
    )


def route_after_model(state: ChatState) -> str:
    last = state["messages"][-1]
    if last.get("role") == "assistant" and last.get("tool_calls"):
        return "tools"
    return (
        "call_model" if state.get("answer_now") and last.get("role") != "assistant" else "save_turn"
    )


# --- tools ---------------------------------------------------------------------------------------


def offered_tool_names(turn: TurnContext) -> list[str]:
    """The tools this turn may offer the model (and so run)."""
    return available_tool_names(
        turn.services,
        memory_tools=turn.memory == "tools",
        documents=turn.has_documents,
        off=turn.tools_off,
    )


STEP_TEXT = {
    "retrieve_memory": "Looking up what I know about you",
    "save_memory": "Saving to memory: {content}",
    "search_documents": "Searching your documents: {query}",
    "web_search": None,  # reports its own steps, round by round
    "fetch_url": None,  # reports each link it reads
    "calculator": "Calculating {expression}",
    "current_datetime": "Checking the date and time",
}


# Tools that write (and stream) the reply themselves: one of them a step, or two answers would
# stream into each other.
ANSWERING_TOOLS = ("web_search", "fetch_url")
ONE_ANSWER_AT_A_TIME = json.dumps(
    {"error": "Only one web search or page reading runs at a time; the first one answered."}
)


async def run_tools(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
    """Run every requested tool (concurrently); a failing tool gives the model an error to read.

    Of the tools that answer the user themselves (web_search), only the first requested runs; the
    others are told so. What the model wrote before it (a preamble) stays part of the reply, set
    apart from the answer by a blank line, streamed like the rest: what streamed is what is saved.
    """
    turn = turn_of(config)
    requested = state["messages"][-1]["tool_calls"]
    answering = [c for c in requested if c["function"]["name"] in ANSWERING_TOOLS]
    skipped = {c["id"] for c in answering[1:]}
    update: dict[str, Any] = {}
    if answering and state.get("reply", "").strip():
        get_stream_writer()({"type": "token", "text": "\n\n"})
        update["reply"] = state["reply"] + "\n\n"
    results = await asyncio.gather(
        *(_run_tool(turn, call, config) for call in requested if call["id"] not in skipped)
    )
    update["messages"] = [r["message"] for r in results] + [
        {"role": "tool", "tool_call_id": call_id, "content": ONE_ANSWER_AT_A_TIME}
        for call_id in skipped
    ]
    update["tool_calls"] = [r["record"] for r in results]
    answers = [r["answer"] for r in results if r["answer"]]
    if answers:
        update["tool_answer"] = answers[-1]
    return update


async def _run_tool(turn: TurnContext, call: dict[str, Any], config: RunnableConfig) -> dict:
    writer = get_stream_writer()
    name = call["function"]["name"]
    started = time.monotonic()
    answer = None
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
        if not isinstance(args, dict):
            raise ValueError("tool arguments must be a JSON object")
    except ValueError as error:
        args = {}
        failure: str | None = f"the arguments are not valid JSON ({error})"
    else:
        failure = (
            None if name in offered_tool_names(turn)
            else f"there is no tool called {name!r}" if name not in TOOLS_BY_NAME
            # Not offered (switched off, no documents…): a model naming it anyway runs nothing.
            else f"the tool {name!r} is not available in this chat"
        )  # fmt: skip
    if STEP_TEXT.get(name, "") is not None:
        step_event(turn, _step_text(name, args), tool=name)
    writer({"type": "tool_start", "id": call["id"], "name": name, "args": args})
    if failure is None:
        # A tool's model calls (the web answer) are watched too: their progress becomes steps.
        reading = reading_what.set("the sources")
        try:
            with (
                watched_by(_progress_steps(turn)),
                span(f"tool {name}", kind="tool", input=args) as observation,
            ):
                result = await TOOLS_BY_NAME[name].ainvoke(
                    {"name": name, "args": args, "id": call["id"], "type": "tool_call"},
                    config=config,
                )
                assert isinstance(result, ToolMessage)
                content = str(result.content)
                if observation is not None:
                    observation.update(output=content)
            if isinstance(result.artifact, dict) and result.artifact.get("final_answer"):
                answer = result.artifact
        except Exception as error:  # the model reads the error and may try something else
            failure = f"{type(error).__name__}: {error}"
        finally:
            reading_what.reset(reading)
    if failure is not None:
        # An error may quote what failed (a search service's answer, the model's own arguments).
        content = json.dumps({"error": f"Tool {name} failed: {untrusted(failure)}"})
        log.warning("Chat %s: tool %s failed: %s", short_id(turn.chat_id), name, failure)
        if name == "web_search":  # the user asked for the web, or expects it: say it failed
            turn.add_note(web_search_failed(failure, turn.chat_id))
    duration_ms = round((time.monotonic() - started) * 1000)
    writer(
        {"type": "tool_end", "id": call["id"], "name": name, "ok": failure is None,
         "duration_ms": duration_ms}
    )  # fmt: skip
    record = tool_record(
        call["id"], name, args, content, ok=failure is None, duration_ms=duration_ms
    )
    message = {"role": "tool", "tool_call_id": call["id"], "content": content}
    return {"message": message, "record": record, "answer": answer}


def _step_text(name: str, args: dict[str, Any]) -> str:
    template = STEP_TEXT.get(name) or f"Using the {name} tool"
    try:
        return template.format(**{k: str(v)[:80] for k, v in args.items()})
    except (KeyError, IndexError):
        return template.split(":")[0]


def route_after_tools(state: ChatState) -> str:
    return "use_tool_answer" if state.get("tool_answer") else "call_model"


# --- use_tool_answer -----------------------------------------------------------------------------


async def use_tool_answer(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
    """A tool (web_search) already wrote the answer and streamed it: it becomes the reply."""
    answer = state["tool_answer"] or {}
    # The tool already sent the `sources` event, before the answer's first token. What the model
    # wrote before calling it streamed first and stays first.
    reply = state.get("reply", "") + answer.get("answer", "")
    return {"reply": reply, "sources": answer.get("sources", [])}


# --- research ------------------------------------------------------------------------------------

RESEARCH_CONTEXT_MESSAGES = 4  # of the conversation before the question, for the plan
RESEARCH_CONTEXT_CHARS = 300  # of each


def route_after_prompt(state: ChatState) -> str:
    return "research" if state.get("mode") == "research" else "call_model"


def research_budget(settings: Settings, plan: ModelPlan) -> ResearchBudget:
    """RESEARCH_* settings; smaller for the local model, for which every call takes a minute."""
    if plan.runs_locally("chat"):
        return ResearchBudget(
            rounds=1,
            sub_questions=min(3, settings.research_sub_questions),
            seconds=settings.research_seconds,
            chunks_per_question=2,
            pages=settings.research_pages,
        )
    return ResearchBudget(
        rounds=settings.research_rounds,
        sub_questions=settings.research_sub_questions,
        seconds=settings.research_seconds,
        chunks_per_question=4,
        pages=settings.research_pages,
    )


async def research(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
    """Research mode: the question answered as a cited report from several searches."""
    turn = turn_of(config)
    provider = turn.services.search_provider
    assert provider is not None  # the API refuses research mode without web search
    earlier = [
        f"{m['role']}: {str(m.get('content') or '')[:RESEARCH_CONTEXT_CHARS]}"
        for m in state["messages"][:-1]
        if m.get("role") in ("user", "assistant") and m.get("content")
    ][-RESEARCH_CONTEXT_MESSAGES:]
    work = Research(
        provider=provider,
        question=state["user_text"],
        context="\n".join(earlier),
        budget=research_budget(turn.services.settings, turn.services.model_plan),
        documents=document_search(turn) if turn.has_documents else None,
        memories=state.get("recalled", []),
        draft=lambda text: get_stream_writer()({"type": "draft", "text": text}),
        **retrieval_hooks(turn),
    )
    turn.reply_so_far.append(work.report_so_far)  # a Stop saves the report so far
    # Someone watches the report being made: its model calls go before background work on the
    # local model (and make it give way). Their progress is not shown: the research's own steps
    # say what it is doing, and its calls run several at a time.
    with watched_quietly():
        result = await work.run()
    return {"reply": result.answer or "", "sources": result.sources}


# --- save_turn -----------------------------------------------------------------------------------


async def save_turn(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
    """Save the reply with its sources, steps and tool calls; the client gets `done` now."""
    turn = turn_of(config)
    message = await save_reply(
        turn,
        state.get("reply", ""),
        sources=state.get("sources", []),
        tool_calls=state.get("tool_calls", []),
    )
    log.info(
        "Chat %s: reply saved (%d chars, %d ms after the message)",
        short_id(turn.chat_id),
        len(state.get("reply", "")),
        (time.monotonic() - turn.started) * 1000,
    )
    get_stream_writer()(done_event(turn, message))
    return {"assistant_message_id": str(message["message_id"])}
