"""Automatic recall: the memories that fit the user's message, found before the first model call.

Every model gets them, with or without memory tools. A user with only a few memories (at most
`RECALL_LIMIT`, `RECALL_CHARS` in all) gets them all with every message, as ChatGPT gives its saved
memories: they are the user's profile, and the one that matters is often nothing like the question
("What should I avoid eating?" is 0.24 from "The user is allergic to peanuts.", with no word in
common). Past that, the hybrid search of core/memory_search.py with the user's words finds
them: at most `RECALL_LIMIT` above the relevance floor and `RECALL_CHARS` in all, after how the
user wants replies ("The user wants short replies."), which fits every message and shares words
with none (`reply_wishes`). Either way, current memories only (superseded ones too when the
question is about the past). A message of several clauses ("Where do I work, and how many
children do I have?") is searched clause by clause too: the whole message's meaning lies between
its parts' facts and may reach none of them. They are noted on the turn (saved with the reply:
"Used 2 memories") and announced to the browser with a `memories` event.

What the user said in another chat that extraction has not read yet (on the local model it waits
behind the replies, tens of seconds) is given too: the sentences of those messages in which the
user states something of themselves, as they wrote them. Asked in a new chat right after telling
it, "What am I allergic to?" is answered from the user's own words until the memory exists.

Before any of it, what the message asks to have forgotten is deleted (chat/memory_forget.py).

Where they go in the prompt is chat/nodes.py's: with the message, except a user's few memories in
a chat under way, which go with the instructions (`Recalled.all_of_them`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chat.memory_forget import forget_what_is_asked, names, told_of_themselves
from chat.state import TurnContext
from chat.steps import send_event, short_id, step_event
from core import memory_jobs
from core.forget_requests import forget_requests
from core.memory_jobs import QueuedMessage
from core.memory_search import RetrievedMemory, few_memories, reply_wishes, retrieve_memories
from core.text_cuts import cut_at_word
from core.tracing import traced

log = logging.getLogger("resolveai.memory")

RECALL_LIMIT = 5
REPLY_WISHES = 2  # of those, at most this many of how the user wants replies ("short replies")
# ~150 tokens of facts (about 4 characters a token): enough for 5 short facts, small enough that
# the local model reads them in a few seconds.
RECALL_CHARS = 600
# The user's messages not read by extraction yet: the newest few, as much again in all.
QUEUED_LIMIT = 3
QUEUED_CHARS = 600
MIN_SAID_CHARS = 40  # less room left than this: no cut-off fragment
# A question about the past ("where did I live before?") may need facts the user has since
# changed; any other question gets current facts only.
_ABOUT_THE_PAST = re.compile(
    r"\b(used to|before|previous(ly)?|formerly|earlier|originally|in the past|last (year|time)"
    r"|did i|was i|were my|what was|what were|anymore|any more|no longer)\b",
    re.IGNORECASE,
)


# Clauses: split after a sentence's end, and at a comma or semicolon; a clause of fewer than
# CLAUSE_MIN_WORDS words ("Lisbon, Portugal") is too little to search on its own. The word joining
# a clause to the one before goes: "and how many children do I have?" is 0.34 from "The user has
# two daughters." and "how many children do I have?" 0.41, the relevance floor 0.35 between.
_CLAUSE_BREAK = re.compile(r"(?<=[.!?])\s+|[,;]\s+")
_JOINER = re.compile(r"^(?:and|or|but|also|plus|then)\s+", re.IGNORECASE)
CLAUSE_MIN_WORDS = 3
MAX_CLAUSES = 4


def about_the_past(text: str) -> bool:
    return bool(_ABOUT_THE_PAST.search(text))


def clauses(text: str) -> list[str]:
    """The message's clauses worth a search of their own; none for a message of one clause."""
    parts = [_JOINER.sub("", p.strip()) for p in _CLAUSE_BREAK.split(text)]
    parts = [p for p in parts if len(p.split()) >= CLAUSE_MIN_WORDS]
    return parts[:MAX_CLAUSES] if len(parts) > 1 else []


def _interleaved(lists: list[list[RetrievedMemory]]) -> list[RetrievedMemory]:
    """Each list's best first, in turn (the whole message's list leads), without repeats."""
    seen: set[Any] = set()
    merged = []
    for rank in range(max(map(len, lists), default=0)):
        for found in lists:
            if rank < len(found) and found[rank].memory_id not in seen:
                seen.add(found[rank].memory_id)
                merged.append(found[rank])
    return merged


@dataclass(frozen=True)
class Recalled:
    """What recall gives the prompt, as lines: what was forgotten at this message's request, the
    memories (each dated), then what the user said in other chats that extraction has not read
    yet. `all_of_them`: the memories are all of the user's few, not found by this message, so
    they are the same from one message to the next (chat/nodes.py puts them with the
    instructions in a chat under way)."""

    forgotten: list[str] = field(default_factory=list)
    memories: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    all_of_them: bool = False

    def lines(self) -> list[str]:
        return [*self.forgotten, *self.memories, *self.said]

    def for_this_message(self) -> list[str]:
        """The lines that belong to this message alone."""
        return [*self.forgotten, *self.said]


@traced("memory recall", kind="retriever")
async def recall_memories(turn: TurnContext, text: str) -> Recalled:
    """The recalled facts, noted on the turn, and what goes with them (`Recalled`); nothing when
    memory is off for this turn."""
    if turn.memory == "off" or not text.strip():
        return Recalled()
    started = time.perf_counter()
    try:
        # First, so a memory the user asks to have forgotten is not recalled for this reply.
        forgotten = await forget_what_is_asked(turn, text)
        (found, all_of_them), queued = await asyncio.gather(
            _memories_for(turn, text),
            memory_jobs.queued_messages(
                turn.services.database.pool, user_id=turn.user_id,
                other_than_chat=turn.chat_id, limit=QUEUED_LIMIT,
            ),
        )  # fmt: skip
    except Exception as error:  # a reply without memories beats no reply
        log.warning("Memory: recall failed, answering without it (%s: %s)",
                    type(error).__name__, error)  # fmt: skip
        return Recalled()
    kept: list[RetrievedMemory] = []
    used = 0
    for memory in found:
        if used + len(memory.content) > RECALL_CHARS and kept:
            break
        kept.append(memory)
        used += len(memory.content)
    said = said_lines(queued, forget_requests(text))
    log.info(
        "Memory: recalled %d%s for chat %s (%d ms)",
        len(kept),
        f" and {len(said)} messages not yet read" if said else "",
        short_id(turn.chat_id),
        (time.perf_counter() - started) * 1000,
    )
    if kept:
        note_memories(turn, kept)
    if kept or said:
        step_event(turn, using_step(len(kept), bool(said)))
    return Recalled(forgotten, [prompt_line(memory) for memory in kept], said, all_of_them)


async def _memories_for(turn: TurnContext, text: str) -> tuple[list[RetrievedMemory], bool]:
    """All of a few memories, else those the message's words find (best first); and whether
    they are all of them."""
    pool, past = turn.services.database.pool, about_the_past(text)
    found = await few_memories(
        pool, user_id=turn.user_id, limit=RECALL_LIMIT, chars=RECALL_CHARS,
        include_superseded=past,
    )  # fmt: skip
    if found is not None:
        return found, True
    searches = [text, *clauses(text)]
    wishes, *found = await asyncio.gather(
        reply_wishes(pool, user_id=turn.user_id, limit=REPLY_WISHES),
        *(
            retrieve_memories(
                pool,
                turn.services.embedder,
                query,
                user_id=turn.user_id,
                limit=RECALL_LIMIT,
                include_superseded=past,
            )
            for query in searches
        ),
    )
    # How the user wants replies first: it fits this message whatever it asks.
    wished = {memory.memory_id for memory in wishes}
    rest = [memory for memory in _interleaved(found) if memory.memory_id not in wished]
    return [*wishes, *rest][:RECALL_LIMIT], False


def said_lines(queued: list[QueuedMessage], forgotten: Sequence[str] = ()) -> list[str]:
    """Prompt lines of what the user said of themselves in `queued` (newest first), at most
    `QUEUED_CHARS` of their words in all: a longer message is cut at a word. Not what this
    message asks to have `forgotten`."""
    lines: list[str] = []
    room = QUEUED_CHARS
    for message in queued:
        told = " ".join(
            s
            for s in told_of_themselves(message.content)
            if not any(names(request, s) for request in forgotten)
        )
        if not told or room < MIN_SAID_CHARS:
            continue
        told = cut_at_word(told, room, mark=" …")
        room -= len(told)
        said = message.sent_at.date().isoformat()
        lines.append(
            f'The user said on {said}, in another chat (not yet saved as a memory): "{told}"'
        )
    return lines


def using_step(memories: int, said: bool) -> str:
    """E.g. 'Using 2 memories about you and what you said in another chat'."""
    parts = []
    if memories:
        parts.append(f"{memories} {'memory' if memories == 1 else 'memories'} about you")
    if said:
        parts.append("what you said in another chat")
    return "Using " + " and ".join(parts)


def prompt_line(memory: RetrievedMemory) -> str:
    """E.g. 'The user lives in Lisbon (said on 2026-11-30)'; a superseded fact says until when."""
    said = memory.created_at.date().isoformat()
    if memory.valid_to is not None:
        return f"{memory.content} (said on {said}; no longer true since {memory.valid_to.date()})"
    return f"{memory.content} (said on {said})"


def note_memories(turn: TurnContext, memories: list[Any]) -> None:
    """Add memories to those the reply used, and tell the browser the whole list so far."""
    for memory in memories:
        turn.memories.setdefault(memory.memory_id, memory.content)
    send_event(
        {
            "type": "memories",
            "memories": [
                {"memory_id": str(memory_id), "content": content}
                for memory_id, content in turn.memories.items()
            ],
        }
    )
