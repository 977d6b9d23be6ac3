"""Memory extraction: after a reply, the `memory` model reads the user's message for lasting facts.

One call per user message, never on the reply's path (core/memory_jobs.py queues it, the worker in
chat/memory_worker.py runs it); a second one, without the known facts, when a statement about the
user gave no fact with them shown, or only facts it does not state (they made the local model take
new facts as told already, or copy a known fact in place of the change the user told). The
model sees the message as numbered sentences, the assistant's reply before it (context only) and
the ~10 closest current memories, and answers with JSON operations constrained to
`MEMORY_OPERATIONS_SCHEMA`:

- `add`: a new fact, citing the sentences that state it;
- `update`: the same fact made more precise (the memory keeps its id, its evidence moves here);
- `supersede`: the user changed it (the old memory is closed, the new one current; both kept).
  A fact the model added from a sentence saying something changed may supersede too
  (chat/memory_changes.py: the local model adds "lives in Berlin" beside "lives in Lisbon").

An `update` or `supersede` naming a memory about something else (core/memory_store.py's `Unlike`)
is stored as an `add`: a model that picked the wrong number cannot overwrite or close a fact. An
`update` that drops a meaningful word of the memory it names (`refines`) is a change, stored as a
`supersede` (with the update's similarity bar): an update would lose the old fact's text.

The quote of each fact is the exact span of the cited sentences, so it is the user's own words by
construction, and core/memory_store.py checks it again before anything is written. A fact must be
about "the user"; one the model told of "they" is kept only as the user's own sentence, when they
said it of a "we" (`_told_of_us`). Bad output
writes nothing and logs one line; a fact the store refuses is dropped with one line.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from chat.memory_changes import replaced_memory
from chat.memory_forget import asked_to_forget
from core import chat_store, memory_store, tracing
from core.clock import now_in
from core.forget_requests import forget_requests
from core.grounding import (
    best_supporting_sentence,
    content_words,
    is_reply_wish,
    may_tell_about_user,
    numbered_sentences,
    sentence_span,
    shares_a_word,
    split_sentences,
    statements_of_themselves,
    told_by,
    told_of_us,
)
from core.memory_search import RetrievedMemory, retrieve_memories, users_names
from core.model_json import json_object_in
from core.preferences import with_defaults
from core.prompts import MEMORY_OPERATIONS_SCHEMA, memory_extraction_request
from core.relative_dates import absolute_dates
from core.services import Services
from core.third_person import named_as_user, named_relative, third_person, users_name

log = logging.getLogger("resolveai.memory")

KNOWN_MEMORIES = 10  # the closest current memories shown to the model, to update or supersede
MAX_OUTPUT_TOKENS = 400  # a few operations; a model that rambles is cut off, not waited for
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "memory_operations",
        "schema": MEMORY_OPERATIONS_SCHEMA,
        "strict": True,
    },
}
_MEMORY_NUMBER = re.compile(r"M?\s*(\d+)", re.IGNORECASE)
# Facts are written about "the user" (the instructions say so): anything else is the model
# summing up the message ("A bicycle gear is a mechanism…"), not something the user told about
# themselves.
_ABOUT_THE_USER = re.compile(r"\bthe user\b", re.IGNORECASE)
_PLURAL_SUBJECT = re.compile(r"\s*(?:they|we|both|our|their)\b", re.IGNORECASE)


@dataclass
class ExtractionResult:
    """What one extraction did, for logs, the evals and tests."""

    saved: list[dict[str, Any]] = field(default_factory=list)  # new memory rows
    updated: list[dict[str, Any]] = field(default_factory=list)
    superseded: list[dict[str, Any]] = field(default_factory=list)  # the closed rows
    duplicates: int = 0  # facts already known
    refused: list[str] = field(default_factory=list)  # why each dropped operation was dropped
    unstated: int = 0  # facts refused as not told by the message (not in it, or denied there)
    skipped: str | None = None  # why nothing was read (memory paused, temporary chat, no message)
    seconds: float = 0.0


class BadOutput(ValueError):
    """The model's answer is not the JSON asked for."""


def parse_operations(text: str) -> list[dict[str, Any]]:
    """The operations in the model's answer. Constrained models give the JSON alone; others may
    wrap it in prose or a code fence (core.model_json). BadOutput otherwise."""
    payload = json_object_in(text)
    if payload is None:
        raise BadOutput(f"no JSON object in {text[:120]!r}")
    operations = payload.get("operations")
    if not isinstance(operations, list):
        raise BadOutput("no 'operations' list")
    return [op for op in operations if isinstance(op, dict)]


async def extract_memories(services: Services, message_id: uuid.UUID) -> ExtractionResult:
    """Read one user message for facts and write them; raises only for failures worth a retry
    (the model or the database unreachable)."""
    started = time.monotonic()
    result = ExtractionResult()
    pool = services.database.pool
    message = await chat_store.user_message_in_context(pool, message_id)
    if message is None:
        result.skipped = "the message is gone"
    elif message["temporary"]:
        result.skipped = "temporary chat"
    elif with_defaults(message["preferences"])["memory_paused"]:
        result.skipped = "memory is paused"
    elif not may_tell_about_user(message["content"]):  # e.g. a reply recovered after a crash
        result.skipped = "nothing in it can tell about the user"
    if message is None or result.skipped:
        return result
    with tracing.message_trace(
        message_id, "memory extraction", chat_id=message["chat_id"],
        user_id=message["user_id"], input=message["content"],
    ) as root:  # fmt: skip
        await _extract(services, message_id, message, result)
        if root is not None:
            root.update(
                output={"saved": len(result.saved), "updated": len(result.updated),
                        "superseded": len(result.superseded), "refused": result.refused}
            )  # fmt: skip
    result.seconds = time.monotonic() - started
    return result


async def _extract(
    services: Services, message_id: uuid.UUID, message: dict[str, Any], result: ExtractionResult
) -> None:
    text = message["content"]
    known = await retrieve_memories(
        services.database.pool, services.embedder, text, user_id=message["user_id"],
        limit=KNOWN_MEMORIES,
    )  # fmt: skip
    operations = await _reading(services, message_id, message, known, result)
    # Known facts silence new ones, or are copied in their place: with "The user's daughter Mira
    # turns 7 on January 14." known, the local model gave nothing for "My son Tom turns 5 on 2
    # February." and 6 more new facts about family of 36 statements (16 of 17 new facts with
    # this second reading); with "The user lives in Glasgow." known, it read "Actually we just
    # moved to Edinburgh last month." as that fact again, which the message does not state. A
    # fact the second reading repeats is the store's duplicate, a change is found as for any new
    # fact.
    kept = result.saved or result.updated or result.duplicates
    if (
        operations is not None
        and known
        and not kept
        and (not operations or result.unstated)
        and statements_of_themselves(text)
    ):
        await _reading(services, message_id, message, [], result)


async def _reading(
    services: Services,
    message_id: uuid.UUID,
    message: dict[str, Any],
    known: list[RetrievedMemory],
    result: ExtractionResult,
) -> list[dict[str, Any]] | None:
    """One reading of `message` by the extraction model, shown `known`, and its operations
    applied; the operations, or None when the model's answer was unusable."""
    try:
        operations = await _operations(services, message_id, message, [m.content for m in known])
    except BadOutput as error:
        log.warning("Memory: extraction output unusable, nothing saved (%s)", error)
        result.refused.append(f"bad output: {error}")
        return None
    # Asked since to have forgotten (while the message waited, or the model read it): the facts
    # are not saved at all. Looked up once the model has answered, just before saving.
    since = (
        await chat_store.asking_to_forget_since(
            services.database.pool, message["user_id"], message["sent_at"]
        )
        if operations
        else []
    )
    forgotten = [what for later in since for what in forget_requests(later)]
    # The user's name first: the model may tell the message's other facts of it (`named_as_user`).
    operations.sort(key=lambda op: users_name(str(op.get("fact"))) is None)
    for operation in operations:
        await _apply(services, message, operation, known, result, forgotten)
    return operations


async def _operations(
    services: Services, message_id: uuid.UUID, message: dict[str, Any], known: list[str]
) -> list[dict[str, Any]]:
    """The extraction model's operations for `message`, shown `known` facts; BadOutput if its
    answer is unusable."""
    response = await services.router.acompletion(
        model="memory",
        messages=memory_extraction_request(
            numbered_sentences(message["content"]), message["previous_reply"], known,
            message["sent_at"],
        ),
        response_format=RESPONSE_FORMAT,
        max_tokens=MAX_OUTPUT_TOKENS,
        temperature=0,
        metadata=tracing.trace_metadata(
            str(message_id), str(message["chat_id"]), "memory extraction call",
            user_id=str(message["user_id"]),
        ),
    )  # fmt: skip
    return parse_operations(response.choices[0].message.content or "")


async def _apply(
    services: Services,
    message: dict[str, Any],
    operation: dict[str, Any],
    known: list[RetrievedMemory],
    result: ExtractionResult,
    forgotten: list[str],
) -> None:
    """One operation of the model's on the user's memories (`message`: the user message read,
    as `chat_store.user_message_in_context` gives it; `known`: the memories it was shown;
    `forgotten`: what the user asked since to have forgotten)."""
    pool, embedder = services.database.pool, services.embedder
    message_id, text = message["message_id"], message["content"]
    kind, fact = operation.get("op"), operation.get("fact")
    numbers = operation.get("sentences")
    if kind not in ("add", "update", "supersede") or not isinstance(fact, str):
        return  # "none", or nothing usable
    fact = third_person(fact)  # "I live in Lisbon." copied from the message is the user's fact
    # "Mira turns 7." from "My daughter Mira turns 7."; "Luc works as a nurse.", once the user is
    # Luc (the user's names are those saved before this fact: the name goes first).
    fact = named_relative(fact, text)
    fact = named_as_user(fact, await users_names(pool, user_id=message["user_id"]))
    # "last year" would be wrong next year; "yesterday" is the user's yesterday.
    zone = with_defaults(message["preferences"])["time_zone"]
    fact = absolute_dates(fact, now_in(zone, message["sent_at"]).now)
    if _ABOUT_THE_USER.search(fact):
        quote = _quote(text, numbers, fact)
        if quote is None and is_reply_wish(fact):
            # Put in the model's words ("The user wants short replies." for "Keep your answers
            # brief from now on."), a wish may share none with the user's: theirs are the wish.
            fact, quote = _wish_as_asked(text, numbers) or (fact, None)
        if quote is None:
            result.unstated += 1
            _refuse(result, fact, f"no sentence of the message states it (cited {numbers!r})")
            return
    else:
        quote = _told_of_us(text, numbers, fact)
        if quote is None:
            _refuse(result, fact, "not a fact about the user")
            return
        # The model's "they" may be anyone; the user's own sentence says who.
        fact = f'The user said: "{quote}"'
    if forgotten and (request := await asked_to_forget(embedder, fact, forgotten)):
        _refuse(result, fact, f"the user asked since to forget {request!r}")
        return
    target = _known_memory(operation.get("memory"), known)
    like = memory_store.SUPERSEDE_SIMILARITY
    if target is None:
        # No memory, or a bad number: the fact is still the user's, stored as new, unless the
        # user said it changed one they told before (the local model adds "lives in Berlin"
        # beside "lives in Lisbon").
        own = {row["memory_id"] for row in result.saved + result.updated}
        target = await replaced_memory(services, message, fact, quote, own)
        kind = "add" if target is None else "supersede"
    elif kind == "update" and not refines(fact, target.content):
        # Not the same fact made more precise but a change ("tea" → "coffee", which the local
        # model called an update): the old one is closed and kept, not overwritten. As alike as
        # an update must be, though: the model said it was the same fact.
        kind, like = "supersede", memory_store.UPDATE_SIMILARITY
    try:
        if kind == "update" and target is not None:
            row = await memory_store.update_memory(
                pool, embedder, target.memory_id, user_id=message["user_id"], content=fact,
                quote=quote, message_id=message_id, only_if_like=True,
            )  # fmt: skip
            if row is not None:
                result.updated.append(row)
                log.info("Memory: updated to %r (quote %r)", row["content"], row["quote"])
            return
        saved = await memory_store.save_grounded_memory(
            pool, embedder, fact, quote, message_id,
            supersedes=target.memory_id if target is not None and kind == "supersede" else None,
            like=like,
        )  # fmt: skip
    except memory_store.Unlike as error:
        # The model named the wrong memory: the fact is still the user's, the memory stays.
        log.info("Memory: %r is unlike the memory it names (%s), saved as a new one", fact, error)
        await _apply(services, message, {**operation, "op": "add"}, known, result, forgotten)
        return
    except (memory_store.NotGrounded, ValueError) as error:
        result.unstated += isinstance(error, memory_store.NotGrounded)
        _refuse(result, fact, str(error))
        return
    if not saved.saved:
        result.duplicates += 1
        log.info("Memory: already known %r as %r", fact, saved.memory["content"])
        return
    result.saved.append(saved.memory)
    if saved.superseded is not None:
        result.superseded.append(saved.superseded)
        log.info("Memory: %r replaces %r", saved.memory["content"], saved.superseded["content"])
    else:
        log.info("Memory: saved %r (quote %r)", saved.memory["content"], saved.memory["quote"])


def _quote(text: str, numbers: Any, fact: str) -> str | None:
    """The span of the user's message that states `fact`: the sentences the model cited, or when
    they do not tell it, the sentence that shares most of its words (None if none does)."""
    quote = None
    if isinstance(numbers, list) and all(isinstance(n, int) for n in numbers):
        quote = sentence_span(text, numbers)
    if quote is None or not shares_a_word(fact, quote) or not told_by(fact, quote):
        # A wrong sentence number: the fact may still be in another sentence, in its words.
        quote = best_supporting_sentence(text, fact)
    return quote


def _wish_as_asked(text: str, numbers: Any) -> tuple[str, str] | None:
    """(wish, sentence) for the first sentence of the message, the cited ones first, that asks
    for replies to be a certain way from now on, told in the third person (`third_person`)."""
    sentences = split_sentences(text)
    cited = [n - 1 for n in numbers if isinstance(n, int)] if isinstance(numbers, list) else []
    firsts = [sentences[n] for n in cited if 0 <= n < len(sentences)]
    for sentence in dict.fromkeys(firsts + sentences):
        wish = third_person(sentence)
        if is_reply_wish(wish) and told_by(wish, sentence):
            return wish, sentence
    return None


def _told_of_us(text: str, numbers: Any, fact: str) -> str | None:
    """For a fact the model told of "they" or "we" rather than of the user (seen: "They are both
    vegetarian." from "We're both vegetarian."), the sentence of the message stating it in which
    the user speaks of a "we" they belong to. None when there is none: then "they" are other
    people ("My sister lives in Rome. They have a bakery.") and the fact is not the user's."""
    if not _PLURAL_SUBJECT.match(fact):
        return None
    quote = _quote(text, numbers, fact)
    sentences = split_sentences(quote) if quote else []
    return next((s for s in sentences if shares_a_word(fact, s) and told_of_us(s)), None)


def _known_memory(reference: Any, known: list[RetrievedMemory]) -> RetrievedMemory | None:
    match = _MEMORY_NUMBER.fullmatch(str(reference or "").strip())
    if match is None:
        return None
    number = int(match.group(1))
    return known[number - 1] if 1 <= number <= len(known) else None


def refines(fact: str, known: str) -> bool:
    """Whether `fact` is `known` made more precise: it keeps every meaningful word of it ("has a
    dog" → "has a dog named Rex"). One that drops a word changed the fact ("tea" → "coffee"), or
    narrowed it ("nuts" → "peanuts"), and is stored as a supersede, which keeps the old text."""
    return content_words(known) <= content_words(fact)


def _refuse(result: ExtractionResult, fact: str, why: str) -> None:
    result.refused.append(why)
    log.info("Memory: not saved %r: %s", fact[:80], why)
