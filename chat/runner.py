"""Runs one user message through the chat graph and yields the events the API streams.

`start_turn` does what must happen before any streaming (so errors can still be plain 4xx): it
creates the chat on its first message, claims the chat for this run (one reply at a time per chat,
held in Postgres so it holds across server processes) and saves the user's message before any model
is called. `stream_turn` then runs the graph and guarantees that whatever happens (the graph fails,
the client leaves) the reply is saved with what was produced and the claim is released. Once it
is, the chat's summary is folded if it is due (chat/summary.py), in the background: the next
message in the chat does not wait for it; a new chat's first reply is followed by its title
(chat/titles.py), in the background too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from chat import summary, titles
from chat.graph import graph
from chat.replies import ReplyNotSaved, done_event, save_reply
from chat.state import TurnContext
from chat.steps import short_id
from chat.turn_recovery import recover_turn
from chat.user_errors import reply_failed
from core import chat_store, tracing
from core.preferences import with_defaults
from core.services import Services
from core.text_cuts import cut_at_word
from core.turn_store import NewTurn

log = logging.getLogger("resolveai.chat")

MAX_MESSAGE_CHARS = 32_000  # longer messages are refused (422) rather than silently cut
MAX_SENT_DOCUMENTS = 10  # files sent with one message
TITLE_CHARS = 60


class ChatNotFound(LookupError):
    pass


class ChatBusy(RuntimeError):
    """Another reply is being written in this chat (by this or another server process)."""


class MessageNotFound(LookupError):
    """A regenerate or an edit named a message that is not (or not a question) in this chat."""


@dataclass
class Turn:
    """A user message saved and its chat claimed: ready to stream."""

    context: TurnContext
    run_id: uuid.UUID
    content: str
    use_web: bool
    new_chat: dict[str, Any] | None = None
    mode: str = "chat"  # or "research": a cited report from several searches
    released: bool = False  # the chat's claim given back (a database fault can prevent it)
    recorded: bool = False  # the turn's row written already, with the question it answers
    # The `done` event, once the reply is saved complete: emitted by the graph, or made here when
    # an ending (a Stop, a failure) came after the save's commit but before the graph emitted it.
    done: dict[str, Any] | None = None


def title_from(content: str) -> str:
    """The start of the first message, cut at a word boundary."""
    return cut_at_word(" ".join(content.split()), TITLE_CHARS)


async def start_turn(
    services: Services,
    chat_id: uuid.UUID | None,
    content: str,
    use_web: bool,
    *,
    user_id: uuid.UUID,
    temporary: bool = False,
    wake_memory: Callable[[], None] | None = None,
    regenerate: uuid.UUID | None = None,
    edit: uuid.UUID | None = None,
    resume: uuid.UUID | None = None,
    mode: str = "chat",
    document_ids: Sequence[uuid.UUID] = (),
    instructions: str | None = None,
) -> Turn:
    """Create/claim the chat (one of `user_id`'s) and save the user's message; raises ChatNotFound
    (also for another user's chat), ChatBusy or MessageNotFound. `temporary` makes a new chat one
    that neither reads nor writes memory.

    `regenerate`: answer this message again (a question, or the question of a reply): its new
    reply is another version, the others stay; `content` is then unused. `edit`: `content` is a
    new version of this question, answered on a branch of its own (the old branch stays).
    `resume`: continue this reply (stopped or failed, the chat's last): the turn's reply starts
    with its text and is saved in its place. `mode`: "chat", or "research" (a cited report from
    several searches, rag/research.py). `document_ids`: the user's documents sent with a new
    message (or an edited one), read for it. `instructions`: how to answer, for this turn, in place
    of the user's custom instructions (an OpenAI API client's system messages)."""
    pool = services.database.pool
    run_id = uuid.uuid4()
    new_chat = None
    continues = None
    recorded = False
    lease = services.settings.chat_lease_seconds  # renewed by chat/turn_jobs.py
    if chat_id is None:
        # Chat, claim and first message in one statement: nothing is left half-made if the
        # database refuses the message.
        new_chat, message_id = await chat_store.start_chat(
            pool, title_from(content), content, run_id, lease, user_id, temporary=temporary,
            document_ids=document_ids,
        )  # fmt: skip
        chat_id = new_chat["chat_id"]
        claimed: dict[str, Any] = new_chat
        message: dict[str, Any] = {
            "message_id": message_id, "content": content, "document_ids": list(document_ids)
        }  # fmt: skip
        log.info("Chat %s: created (%r)", short_id(chat_id), new_chat["title"])
    else:
        claimed = await chat_store.claim_chat_run(pool, chat_id, run_id, lease, user_id=user_id)
        if not claimed:
            # Claiming finds no row both when the chat is busy and when it is not the user's.
            if await chat_store.get_chat(pool, chat_id, user_id=user_id) is None:
                raise ChatNotFound(f"No chat with id {chat_id}")
            raise ChatBusy("A reply is still being written in this chat; wait for it or stop it.")
        if claimed["previous_run_id"] is not None:  # the last reply's server died writing it
            await recover_turn(services, claimed["previous_run_id"])
        try:
            if resume is not None:
                continues = await chat_store.resume_reply(pool, chat_id, resume, run_id)
                if continues is None:
                    raise MessageNotFound(
                        f"No reply with id {resume} to continue in this chat: only the last"
                        " reply, stopped or failed with some text written, can be continued."
                    )
            # A new question records its turn with it, so what the turn does is known now.
            use_web = _searches_web(use_web, claimed["preferences"])
            message, recorded = await _question(
                pool, chat_id, content, regenerate, edit, continues,
                NewTurn(run_id, use_web, mode), document_ids,
            )  # fmt: skip
        except BaseException:
            await chat_store.release_chat_run(pool, chat_id, run_id)
            raise
    content = message["content"]
    what = (
        "continuing a reply" if continues else "answering a message again" if regenerate
        else "edited message saved" if edit else None
    )  # fmt: skip
    log.info("Chat %s: %s (%d chars)", short_id(chat_id), what or "user message saved",
             len(content))  # fmt: skip
    preferences = with_defaults(claimed["preferences"])  # read by the claim, on the way
    if claimed["temporary"] or preferences["memory_paused"]:
        memory = "off"
    else:
        memory = "tools" if services.model_plan.capability("chat", "memory_tools") else "recall"
    context = TurnContext(
        services=services,
        chat_id=chat_id,
        user_id=user_id,
        user_message_id=message["message_id"],
        run_id=run_id,
        user_text=content,
        trace_id=str(message["message_id"]),
        started=time.monotonic(),
        continues=continues,
        steps=list(continues["steps"]) if continues else [],
        memory=memory,
        has_documents=claimed["has_documents"],
        sent_documents=list(message.get("document_ids") or []),
        time_zone=preferences["time_zone"],
        tools_off=frozenset(preferences["disabled_tools"]),
        custom_instructions=(
            preferences["custom_instructions"] if instructions is None else instructions
        ),
        wake_memory=wake_memory or (lambda: None),
    )
    use_web = _searches_web(use_web, claimed["preferences"])
    return Turn(context, run_id, content, use_web, new_chat, mode=mode, recorded=recorded)


def _searches_web(use_web: bool, preferences: dict[str, Any] | None) -> bool:
    """Web search switched off in Settings: a ticked "Use web tool" (or a message first sent with
    it, answered again) does not ask the model for a tool it is not offered."""
    return use_web and "web_search" not in with_defaults(preferences)["disabled_tools"]


async def _question(
    pool: Any,
    chat_id: uuid.UUID,
    content: str,
    regenerate: uuid.UUID | None,
    edit: uuid.UUID | None,
    continues: dict[str, Any] | None,
    turn: NewTurn,
    document_ids: Sequence[uuid.UUID],
) -> tuple[dict[str, Any], bool]:
    """The user message this turn answers, saved (or, for a regenerate or a continue, found), and
    whether `turn` was recorded with it (a question saved now)."""
    if continues is not None:
        message = await chat_store.get_message(pool, chat_id, continues["reply_to"])
        if message is None:
            raise MessageNotFound("The question of this reply is gone")
        return message, False
    if regenerate is not None:
        message = await chat_store.reanswer(pool, chat_id, regenerate)
        if message is None:
            raise MessageNotFound(f"No message with id {regenerate} in this chat")
        return message, False
    parent: Any = chat_store.HEAD
    if edit is not None:
        original = await chat_store.get_message(pool, chat_id, edit)
        if original is None or original["role"] != "user":
            raise MessageNotFound(f"No message of yours with id {edit} in this chat")
        parent = original["parent_id"]  # a sibling: another version of that question
        # Edited, a question keeps the files sent with it unless others are sent.
        document_ids = document_ids or original["document_ids"]
    message = await chat_store.add_message(
        pool, chat_id, "user", content, parent=parent, turn=turn, document_ids=document_ids
    )
    return message, True


async def stream_turn(turn: Turn) -> AsyncIterator[dict[str, Any]]:
    """The turn's events, in order; the reply is saved whatever happens."""
    context = turn.context
    pool = context.services.database.pool
    reply: list[str] = []
    sources: list[dict[str, Any]] = []  # the last published: an ended reply's [n] keep them
    try:
        if turn.new_chat is not None:
            yield {
                "type": "chat",
                "chat_id": str(context.chat_id),
                "title": turn.new_chat["title"],
                "temporary": turn.new_chat["temporary"],
            }
        # Which message this answers: a reader that did not send it (a reload, another tab) and a
        # retry need it.
        yield {"type": "turn", "user_message_id": str(context.user_message_id)}
        if context.continues is not None:
            # A continued reply streams (and is saved) whole: its text so far comes first.
            reply.append(context.continues["content"])
            yield {"type": "token", "text": context.continues["content"]}
            if context.continues["sources"]:
                yield {"type": "sources", "sources": context.continues["sources"]}
        config = {"configurable": {"turn": context}, "recursion_limit": 40}
        state = {"user_text": turn.content, "use_web": turn.use_web, "mode": turn.mode}
        with tracing.message_trace(
            context.user_message_id, "chat message", chat_id=context.chat_id,
            user_id=context.user_id, input=turn.content,
        ) as root:  # fmt: skip
            async for event in graph.astream(state, config, stream_mode="custom"):
                if event.get("type") == "token":
                    reply.append(event["text"])
                elif event.get("type") == "sources":
                    sources = event["sources"]
                elif event.get("type") == "done":
                    turn.done = event
                yield event
            if root is not None:
                root.update(output="".join(reply))
    except asyncio.CancelledError:
        if turn.done is None:
            for event in _text_so_far(context, reply):  # read before `interrupted`
                yield event
            await asyncio.shield(
                _save_partial(turn, "".join(reply), "interrupted", None, sources=sources)
            )
        raise
    except Exception as error:
        if turn.done is not None:  # after `done`: the reply is saved, the user has it
            log.warning("Chat %s: after the reply was saved: %s", short_id(context.chat_id),
                        error)  # fmt: skip
            return
        # The user reads a sentence and a ref; the raw reason is logged with that ref.
        message = reply_failed(error, context.chat_id)
        if turn.done is None:
            for event in _text_so_far(context, reply):
                yield event
        if not isinstance(error, ReplyNotSaved):
            try:
                await _save_partial(turn, "".join(reply), "error", message, sources=sources)
            except ReplyNotSaved as unsaved:
                message = str(unsaved)
        if turn.done is None:
            yield {"type": "error", "message": message}
        else:  # it failed after the save's commit, before `done`: the reply is complete
            yield turn.done
    finally:
        # Ended early (client gone, Stop): the graph's nodes must stop too, the model with them.
        context.stop_work()
        with contextlib.suppress(BaseException):
            await asyncio.shield(chat_store.release_chat_run(pool, context.chat_id, turn.run_id))
            turn.released = True
        # Only now, and as a task of its own: the fold (a model call) holds no lease, so the next
        # message in the chat never waits for it, and a client that left does not cancel it.
        summary.start_fold(
            context.services, context.chat_id, context.trace_id, context.seen.get("unsummarised")
        )
        # A new chat's first reply, saved: the utility model names the chat (chat/titles.py).
        if turn.new_chat is not None and turn.done is not None:
            titles.start_title(
                context.services, context.chat_id, turn.content, "".join(reply), context.trace_id
            )


def _text_so_far(context: TurnContext, reply: list[str]) -> list[dict[str, Any]]:
    """A turn ending before its text streamed (a research writing its report) ends with what it
    has: added to `reply`, and the event that streams it."""
    so_far = context.reply_so_far[-1]() if context.reply_so_far and not reply else ""
    if not so_far:
        return []
    reply.append(so_far)
    return [{"type": "token", "text": so_far}]


async def _save_partial(
    turn: Turn, text: str, status: str, error: str | None, *, sources: list[dict[str, Any]]
) -> None:
    """Save the reply so far as `status`, with the sources it was shown; if the graph had saved it
    complete already (the ending came between that save and its `done`), it stays complete and
    `turn.done` is set."""
    context = turn.context
    message = await save_reply(context, text, status=status, error=error, sources=sources)
    if message["status"] == "complete":
        turn.done = done_event(context, message)
        log.info("Chat %s: reply was saved complete already", short_id(context.chat_id))
        return
    log.info("Chat %s: reply saved as %s (%d chars)", short_id(context.chat_id), status, len(text))
