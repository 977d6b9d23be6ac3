"""Whether a fact the user just told replaces one stored before: "I moved to Berlin." closes "The
user lives in Lisbon." even when the extraction's model added the new fact beside the old one.

The extraction shows its model the memories closest to the *message* and asks it to supersede the
one the message changes. The local model does not. In a keyless trial, "I moved to Berlin last
month, and I switched to coffee." added "The user lives in Berlin." and "The user switched to
coffee." beside "The user lives in Lisbon." and "The user drinks tea every morning." (it had not
even been shown them: cosine 0.29 and 0.24 to the message), and a new chat's "Where do I live,
and what do I drink in the morning?" got "Lisbon" and "tea".

So, for a fact added from a sentence that says something changed (`tells_a_change`), the current
memory most like the *fact* (0.61 and 0.52 here), if at least CHANGE_SIMILARITY alike, is put to
the model alone with it: can both be true at once? Only a clear "no" makes the new fact supersede
it (the old one is kept as history, as with any supersede). Both gates are needed. Asked of the
pairs of tests/data/memory_pairs.json alone (core/prompts.py's `memory_change_request`), the local
model says "not both" for 21 of 24 changes, but also for 7 of 27 pairs that hold together: 1 of 8
updates, 3 of the 11 unrelated pairs at least CHANGE_SIMILARITY alike, 3 of 8 more written for
this ("has a dog named Rex" / "has a cat", "is learning Spanish" / "speaks French"). The cue
leaves those alone unless the user said something changed. English only, like core/grounding.py.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from core import tracing
from core.memory_search import RetrievedMemory, retrieve_memories
from core.model_json import json_object_in
from core.prompts import MEMORY_CHANGE_SCHEMA, memory_change_request
from core.services import Services

log = logging.getLogger("resolveai.memory")

# Cosine similarity (all-MiniLM-L6-v2) of a new fact to the stored one it may replace. On
# tests/data/memory_pairs.json: 22 of the 24 changes ("lives in Lisbon" / "moved to Berlin in
# March 2025", 0.415) reach 0.40 (0.35: 22, 0.45: 20), and 11 of the 153 pairs of unrelated
# facts about one user do (0.35: 26, 0.45: 6), which the model is then asked about.
CHANGE_SIMILARITY = 0.40
CANDIDATES = 3  # memories most like the fact, of which the closest in meaning is asked about
MAX_OUTPUT_TOKENS = 20  # {"both_true": false}
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "memory_change", "schema": MEMORY_CHANGE_SCHEMA, "strict": True},
}

# Words saying a fact of the user's changed: a move, a switch, a stop, a new state.
_CHANGED = re.compile(
    r"\b(?:moved|moving|relocated|switched|switching|changed|now|nowadays|these days|no longer"
    r"|any ?more|stopped|quit|left|gave up|became|instead|again|retired|divorced|graduated|sold"
    r"|died|passed away|broke up|split up|got married|new job)\b",
    re.IGNORECASE,
)
# Words saying the new fact comes beside the old ones: "I now have a cat too."
_BESIDE = re.compile(r"\b(?:too|also|as well|another|both|in addition|besides)\b", re.IGNORECASE)


def tells_a_change(sentence: str) -> bool:
    """Whether the user's `sentence` says something of theirs changed ("I moved to Berlin.",
    "I'm no longer vegetarian.") rather than adding to it ("I also have a cat now.")."""
    return bool(_CHANGED.search(sentence)) and not _BESIDE.search(sentence)


async def replaced_memory(
    services: Services,
    message: dict[str, Any],
    fact: str,
    sentence: str,
    exclude: set[uuid.UUID],
) -> RetrievedMemory | None:
    """The current memory that `fact`, told by the user's `sentence` of `message` (as
    `chat_store.user_message_in_context` gives it), replaces; None when the sentence tells no
    change, no memory is alike enough, or the model does not clearly say both cannot be true.
    `exclude`: memories this extraction wrote, which the message told together."""
    if not tells_a_change(sentence):
        return None
    # A few more than this extraction wrote: the search ranks by words too, the pick is by meaning.
    found = await retrieve_memories(
        services.database.pool, services.embedder, fact,
        user_id=message["user_id"], limit=len(exclude) + CANDIDATES,
    )  # fmt: skip
    alike = [m for m in found if m.memory_id not in exclude and m.similarity is not None]
    nearest = max(alike, key=lambda m: m.similarity or 0.0, default=None)
    if nearest is None or (nearest.similarity or 0.0) < CHANGE_SIMILARITY:
        return None
    if nearest.content.casefold().split() == fact.casefold().split():
        return None  # the stored fact again (a model's copy): nothing to ask, nothing changed
    response = await services.router.acompletion(
        model="memory",
        messages=memory_change_request(nearest.content, fact),
        response_format=RESPONSE_FORMAT,
        max_tokens=MAX_OUTPUT_TOKENS,
        temperature=0,
        metadata=tracing.trace_metadata(
            str(message["message_id"]), str(message["chat_id"]), "memory change check",
            user_id=str(message["user_id"]),
        ),
    )  # fmt: skip
    if _both_true(response.choices[0].message.content or "") is not False:
        log.info("Memory: %r kept beside %r (both can be true)", fact, nearest.content)
        return None
    return nearest


def _both_true(answer: str) -> bool | None:
    """The model's answer; None when it gave none (then nothing is closed)."""
    payload = json_object_in(answer)
    both = payload.get("both_true") if payload else None
    return both if isinstance(both, bool) else None
