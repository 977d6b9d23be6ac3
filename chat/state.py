"""What one run of the chat graph carries: the turn's fixed context and the state nodes update."""

from __future__ import annotations

import asyncio
import functools
import operator
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig

from core.model_names import Answered
from core.services import Services


@dataclass(frozen=True)
class TurnContext:
    """One user message's run; passed to nodes and tools in `config["configurable"]["turn"]`.

    Lives exactly as long as the message's run, in the process running it: nothing here outlives
    the turn, so any server process can handle any message.
    """

    services: Services
    chat_id: uuid.UUID
    user_id: uuid.UUID  # whose chat it is: the memories read and written are theirs
    user_message_id: uuid.UUID
    run_id: uuid.UUID  # this turn's: its reply is saved under it (one reply per turn)
    user_text: str  # what the user typed
    trace_id: str
    started: float  # time.monotonic() when the turn began, for step timings
    # A continue: the reply being continued (its text so far starts this turn's reply).
    continues: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(
        default_factory=list
    )  # progress lines, saved with the reply
    searches: list[str] = field(default_factory=list)  # web searches made (queries), capped
    links_read: list[str] = field(default_factory=list)  # links fetched (fetch_url's), capped
    embedding_cache: dict[str, Any] = field(default_factory=dict)  # chunk text → vector
    # How this turn uses long-term memory: "tools" (recall + the memory tools), "recall" (recall
    # before the reply, extraction after it, no tools) or "off" (temporary chat, memory paused).
    memory: str = "recall"
    # The user has documents ready: their passages are searched for the message (read with the
    # chat's claim).
    has_documents: bool = False
    # The documents the user's message was sent with (attached in the composer): read for it.
    sent_documents: list[uuid.UUID] = field(default_factory=list)
    # The passages of the user's documents this reply may cite, numbered: found for the message,
    # then by the search_documents tool (saved as the reply's sources).
    document_sources: list[dict[str, Any]] = field(default_factory=list)
    # The user's settings for this turn: their browser's time zone (None: not known, UTC is used)
    # and the tools they switched off (never offered, never run).
    time_zone: str | None = None
    tools_off: frozenset[str] = frozenset()
    # How the user wants to be answered (Settings; or an OpenAI API request's system messages).
    custom_instructions: str = ""
    # The deployments that answered this turn's model calls, in order (the last wrote the reply),
    # and plain sentences shown with the reply (a fallback answered, web search off or failed).
    answered: list[Answered] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # What build_prompt read: "unsummarised", the messages its summary does not cover.
    seen: dict[str, int] = field(default_factory=dict)
    # The memories recalled or retrieved for the reply, in order (saved with it).
    memories: dict[uuid.UUID, str] = field(default_factory=dict)
    # Tells this process's memory worker that a job was queued (it polls anyway).
    wake_memory: Callable[[], None] = lambda: None
    # The graph's node tasks running now. LangGraph leaves them running when the run's consumer
    # is cancelled (a client gone, Stop), so the turn cancels them itself (`stop_work`): else a
    # model goes on writing a reply nobody reads.
    work: set[asyncio.Task[Any]] = field(default_factory=set)
    # What a turn stopped before its text streamed ends with (a research's report so far: its
    # node adds the function that writes it), streamed and saved as its reply.
    reply_so_far: list[Callable[[], str]] = field(default_factory=list)

    @property
    def model(self) -> str | None:
        """The LiteLLM model that wrote the reply (its last model call's)."""
        return self.answered[-1].model if self.answered else None

    def add_note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def stop_work(self) -> None:
        for task in list(self.work):
            task.cancel()


def turn_of(config: RunnableConfig) -> TurnContext:
    """The turn a node or tool is running for."""
    return config["configurable"]["turn"]


Node = Callable[[Any, RunnableConfig], Awaitable[dict[str, Any]]]


def stoppable(node: Node) -> Node:
    """A graph node whose task its turn can cancel (`TurnContext.stop_work`)."""

    @functools.wraps(node)
    async def run(state: Any, config: RunnableConfig) -> dict[str, Any]:
        work = turn_of(config).work
        task = asyncio.current_task()
        assert task is not None
        work.add(task)
        try:
            return await node(state, config)
        finally:
            work.discard(task)

    return run


class ChatState(TypedDict, total=False):
    """The graph's state for one user message. Messages are in OpenAI's chat format."""

    user_text: str  # exactly what the user typed (what is saved and shown)
    use_web: bool  # the user ticked "Use web tool"
    mode: str  # "chat", or "research": a cited report from several searches (rag/research.py)
    messages: Annotated[list[dict[str, Any]], operator.add]  # what the model sees, in order
    model_calls: int
    answer_now: bool  # the next model call gets no tools (the model was looping)
    reply: str  # the text shown to the user so far
    sources: list[dict[str, Any]]
    recalled: list[str]  # the memories recalled for the message, as the prompt shows them
    tool_calls: Annotated[list[dict[str, Any]], operator.add]  # each tool run: name, args, result
    tool_answer: dict[str, Any] | None  # a finished answer a tool produced (web_search)
    assistant_message_id: str | None
