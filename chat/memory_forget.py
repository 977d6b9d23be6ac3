"""Forgetting on request in the chat: "Please forget that I live in Porto." deletes that memory
before the reply is written, and the reply is told what was deleted, or that nothing matched.

Runs where recall runs (chat/memory_recall.py), before it, so a memory just forgotten is not
recalled for the same reply; never in a temporary chat or with memory paused (no reads, no
writes). Which memories a request names: the one most like it in meaning (the request told about
the user, "The user lives in Porto."), if at least `FORGET_SIMILARITY` alike and sharing a word
with it, and any others as alike within `FORGET_MARGIN` of the best. A request that matches
nothing deletes nothing; the Memory page deletes any memory. The extraction never takes the
request itself for a fact (chat/memory_extraction.py).
"""

from __future__ import annotations

import logging

import numpy as np

from chat.state import TurnContext
from chat.steps import short_id, step_event
from core import memory_jobs, memory_store
from core.forget_requests import asks_to_forget, forget_requests
from core.grounding import shares_a_word, statements_of_themselves
from core.memory_search import RetrievedMemory, retrieve_memories
from core.third_person import third_person

log = logging.getLogger("resolveai.memory")

# Cosine similarities of all-MiniLM-L6-v2 between a request told about the user and the memory it
# names: "I live in Porto" / "The user lives in Porto." 0.99, "my allergy" / "… allergic to
# peanuts." 0.69, "my job" / "… works as a nurse." 0.56; and the next best, which must stay:
# "my wife's name" is 0.75 from "The user's wife is Sara." but 0.62 from "The user's name is
# Ana.", "I live in Porto" 0.75 from "The user moved to Porto in March 2025." (both pairs are in
# tests/test_memory_forget.py).
FORGET_SIMILARITY = 0.5
FORGET_MARGIN = 0.1
CANDIDATES = 5
QUEUED_LOOKED_AT = 10  # the user's messages not read yet: a few, on the local model


async def forget_what_is_asked(turn: TurnContext, text: str) -> list[str]:
    """Delete the memories the message asks to have forgotten; prompt lines telling the model what
    was deleted, or that nothing matched a request (so the reply does not claim it)."""
    requests = forget_requests(text)
    if not requests:
        return []
    lines = []
    for request in requests:
        named = await _memories_named(turn, request)
        deleted = [
            memory
            for memory in named
            if await memory_store.delete_memory(
                turn.services.database.pool, memory.memory_id, turn.user_id
            )
        ]
        for memory in deleted:
            log.info("Memory: forgot %r at the user's request (chat %s)",
                     memory.content, short_id(turn.chat_id))  # fmt: skip
        forgotten = "; ".join(f'"{m.content}"' for m in deleted)
        if deleted:
            lines.append(confirmation(request))
            step_event(turn, f"Forgot {forgotten}")
            # A small model may still answer otherwise: the note under the reply says it plainly.
            turn.add_note(f"Forgotten, as you asked: {forgotten}")
        elif await _not_yet_saved(turn, request):
            # Said in a message extraction has not read yet: its facts will not be saved
            # (`asked_to_forget`), so it is forgotten all the same.
            log.info("Memory: %r is in a message not read yet, it will not be saved (chat %s)",
                     request, short_id(turn.chat_id))  # fmt: skip
            lines.append(confirmation(request))
            step_event(turn, f'Forgot "{request}"')
            turn.add_note(f'Forgotten, as you asked: "{request}" (it had not been saved yet)')
        else:
            log.info("Memory: nothing matches %r, nothing forgotten (chat %s)",
                     request, short_id(turn.chat_id))  # fmt: skip
            lines.append(
                f'The user asked you to forget "{request}", but no saved memory matches it, so '
                'nothing was deleted. Say so in one short sentence, such as "I had nothing saved '
                'about that."'
            )
            turn.add_note(
                f'Nothing forgotten: no memory matches "{request}". The Memory page lists what '
                "I remember."
            )
    return lines


def confirmation(request: str) -> str:
    """The prompt line for a request that was done. In the user's words, not the memory's: told
    `You have forgotten "The user works as a pediatric nurse in Porto."`, the local model wrote
    it back ("I understand. Marta is a pediatric nurse in Porto.") in 2 of 4 keyless tries; with
    an example to follow, 4 of 4 replies were "Done, I have forgotten that." (the stop note)."""
    return (
        f'The user asked you to forget "{request}", and it is now deleted from your memory. '
        'Confirm it in one short sentence, such as "Done, I have forgotten that."'
    )


async def _not_yet_saved(turn: TurnContext, request: str) -> bool:
    """Whether a message of the user's not read for memories yet says something of themselves
    that shares a word with the request."""
    queued = await memory_jobs.queued_messages(
        turn.services.database.pool, user_id=turn.user_id, other_than_chat=None,
        limit=QUEUED_LOOKED_AT,
    )  # fmt: skip
    return any(names(request, s) for m in queued for s in told_of_themselves(m.content))


def told_of_themselves(message: str) -> list[str]:
    """The sentences of `message` in which the user tells something of themselves; a request to
    forget tells nothing (it was taken for the fact it names)."""
    return [s for s in statements_of_themselves(message) if not asks_to_forget(s)]


def names(request: str, sentence: str) -> bool:
    """Whether `request` (what the user asked to have forgotten) may name what `sentence` tells:
    they share a word."""
    return shares_a_word(third_person(request), third_person(sentence))


async def asked_to_forget(
    embedder: memory_store.Embedder, fact: str, requests: list[str]
) -> str | None:
    """Which of `requests` (what the user asked to have forgotten, after the message `fact` was
    read from) names `fact`, by the rule that picks the memories a request deletes; None if
    none does. The request may have come before the fact was saved: it holds all the same."""
    told = None
    for request in requests:
        query = third_person(request)
        if not shares_a_word(query, fact):
            continue
        if told is None:
            told = (await embedder.embed_documents([fact]))[0]
        # The embedder's vectors are normalized: their dot product is the cosine.
        if float(np.dot(await embedder.embed_query(query), told)) >= FORGET_SIMILARITY:
            return request
    return None


async def _memories_named(turn: TurnContext, request: str) -> list[RetrievedMemory]:
    query = third_person(request)
    found = await retrieve_memories(
        turn.services.database.pool,
        turn.services.embedder,
        query,
        user_id=turn.user_id,
        limit=CANDIDATES,
    )
    alike = [m for m in found if m.similarity is not None and shares_a_word(query, m.content)]
    if not alike:
        return []
    best = max(m.similarity for m in alike if m.similarity is not None)
    if best < FORGET_SIMILARITY:
        return []
    return [m for m in alike if m.similarity is not None and m.similarity >= best - FORGET_MARGIN]
