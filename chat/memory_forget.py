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

from chat.state import TurnContext
from chat.steps import short_id, step_event
from core import memory_store
from core.forget_requests import forget_requests
from core.grounding import shares_a_word
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
            # Worded as what the model did: the local model then confirms it more often than
            # when told what "was deleted" (keyless trial: 3 of 4 tries against 0 of 4).
            lines.append(
                f'You have forgotten "{memory.content}": it was deleted because the user asked. '
                "Confirm this in one sentence."
            )
        forgotten = "; ".join(f'"{m.content}"' for m in deleted)
        if deleted:
            step_event(turn, f"Forgot {forgotten}")
            # A small model may still answer otherwise: the note under the reply says it plainly.
            turn.add_note(f"Forgotten, as you asked: {forgotten}")
        else:
            log.info("Memory: nothing matches %r, nothing forgotten (chat %s)",
                     request, short_id(turn.chat_id))  # fmt: skip
            lines.append(
                f'You could not forget "{request}": no saved memory matches it, so nothing was '
                "deleted. Say so in one sentence."
            )
            turn.add_note(
                f'Nothing forgotten: no memory matches "{request}". The Memory page lists what '
                "I remember."
            )
    return lines


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
