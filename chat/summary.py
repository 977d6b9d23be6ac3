"""A chat's rolling summary: folded in batches, after the turn, outside the chat's run lease.

`build_prompt` (chat/nodes.py) sends the instructions with the chat's summary, then every message
the summary does not cover yet. For the model's prefix cache to keep that prompt from one turn to
the next, the summary changes rarely: only once `FOLD_AT_UNSUMMARISED` messages are not yet in it
are the oldest `FOLD_MESSAGES` folded in, by one `utility` call. Between folds the prompt only
grows at its end, and a fold costs one summary call per `FOLD_MESSAGES / 2` turns.

The fold runs after the turn has ended and released its chat (chat/runner.py), as a task of its
own: the next message in the chat never waits for it, and a client that leaves does not cancel
it. Postgres keeps all that matters: the summary and the last message it covers, stored
compare-and-set, so when two folds of one chat race (two server processes) the second is refused,
and a fold that fails, or dies with its process, leaves the pointer where it was for the next
turn's fold to try again. What this module holds in memory is only this process's running tasks:
so they are not garbage-collected, a chat is not folded twice at once here, and tests and
benchmarks can wait for them (`settled`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid

from chat.steps import short_id
from core import chat_store
from core.logs import first_line
from core.prompts import summary_request
from core.services import Services
from core.tracing import trace_metadata

log = logging.getLogger("resolveai.chat")

FOLD_AT_UNSUMMARISED = 20  # fold once this many messages are not yet in the summary...
FOLD_MESSAGES = 10  # ...the oldest this many of them, in one utility call
SHUTDOWN_WAIT_SECONDS = 5.0  # at shutdown, how long running folds may finish before cancelled

# This process's folds, by chat; a turn that ends while its chat's fold runs asks it to look again.
_running: dict[uuid.UUID, asyncio.Task[None]] = {}
_look_again: set[uuid.UUID] = set()


# The end of a sentence, and a list item's number left alone on the last line ("…\n\n4.").
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*(?=\s|$)")
_OPEN_ITEM = re.compile(r"(?:^|\n)[ \t]*(?:\d+[.)]|[-*•])[ \t]*$")


def whole_sentences(summary: str) -> str:
    """A summary the length limit cut mid-sentence, up to the last sentence it finished (the
    local model's first fold of a chat once stopped at "…to help you make the most of your
    trip:\n\n1. … 4."); as it is when it has no finished sentence."""
    ends = [match.end() for match in _SENTENCE_END.finditer(summary)]
    # A list item's number ends no sentence: cut before one left alone at the end.
    return _OPEN_ITEM.sub("", summary[: ends[-1]] if ends else summary).rstrip()


def summary_words(messages_summarised: int) -> int:
    """Target summary length: grows with what it covers, capped at 500 words."""
    return min(500, 60 + 4 * messages_summarised)


def start_fold(
    services: Services,
    chat_id: uuid.UUID,
    trace_id: str | None = None,
    unsummarised: int | None = None,
) -> None:
    """After a turn: fold the chat's summary in the background if enough messages wait for it.
    `unsummarised`: how many the turn's prompt read (its reply makes one more); when that is too
    few for a fold, nothing is read again (two round trips a message).

    Returns at once. A fold of this chat already running here looks again when it is done,
    rather than a second one folding the same messages (and calling the model twice for one
    stored summary).
    """
    if unsummarised is not None and unsummarised + 1 < FOLD_AT_UNSUMMARISED:
        return
    running = _running.get(chat_id)
    if running is not None and not running.done() and _of_this_loop(running):
        _look_again.add(chat_id)
        return
    task = asyncio.create_task(
        _fold_while_due(services, chat_id, trace_id), name=f"summary fold {short_id(chat_id)}"
    )
    _running[chat_id] = task
    task.add_done_callback(lambda done: _forget(chat_id, done))


async def settled() -> None:
    """Return once no fold started in this event loop is running (tests, benchmarks, evals)."""
    while pending := _pending():
        await asyncio.wait(pending)


async def close(wait_seconds: float = SHUTDOWN_WAIT_SECONDS) -> None:
    """At shutdown: give running folds `wait_seconds` to finish, then cancel the rest. A cancelled
    fold stored nothing, so a later turn folds those messages again."""
    pending = _pending()
    if not pending:
        return
    _, unfinished = await asyncio.wait(pending, timeout=wait_seconds)
    for task in unfinished:
        task.cancel()
    if unfinished:
        log.info("Summary: %d fold(s) cancelled at shutdown", len(unfinished))
        await asyncio.wait(unfinished)


async def fold_summary(services: Services, chat_id: uuid.UUID, trace_id: str | None = None) -> bool:
    """Fold the oldest `FOLD_MESSAGES` unsummarised messages into the summary, if at least
    `FOLD_AT_UNSUMMARISED` are; True if a new summary was stored.

    A failing model call is logged and returns False with the pointer left where it was (the next
    turn tries again); a failing database raises.
    """
    pool = services.database.pool
    chat, pending, covered = await chat_store.unsummarised(pool, chat_id)
    if chat is None:  # deleted meanwhile
        return False
    previous_upto = chat["summary_upto_message_id"]
    if len(pending) < FOLD_AT_UNSUMMARISED:
        return False
    to_fold = pending[:FOLD_MESSAGES]
    # A summary of another branch (another version of an earlier message is shown) is not
    # built on: the branch shown is folded from its start.
    previous_summary = chat["summary"] if covered else None
    already = 0
    if covered:
        already = await chat_store.branch_position(pool, chat_id, previous_upto)
    words = summary_words(already + len(to_fold))
    started = time.monotonic()
    try:
        response = await services.router.acompletion(
            model="utility",
            messages=summary_request(
                previous_summary,
                [(m["role"], m["content"]) for m in to_fold if m["content"].strip()],
                words,
            ),
            max_tokens=int(words * 2),
            metadata=trace_metadata(trace_id or str(chat_id), str(chat_id), "summary"),
        )
        summary = (response.choices[0].message.content or "").strip()
        if response.choices[0].finish_reason == "length":
            summary = whole_sentences(summary)
        if not summary:
            raise ValueError("the model returned an empty summary")
    except Exception as error:
        log.warning(
            "Chat %s: summary not updated, the next turn tries again (%s: %s)",
            short_id(chat_id),
            type(error).__name__,
            first_line(error),
        )
        return False
    stored = await chat_store.set_summary(
        pool, chat_id, summary, to_fold[-1]["message_id"], previous_upto_message_id=previous_upto
    )
    if stored:
        log.info(
            "Chat %s: summary updated with %d messages (%d words, %d ms)",
            short_id(chat_id),
            len(to_fold),
            len(summary.split()),
            (time.monotonic() - started) * 1000,
        )
    else:  # another process folded these messages first (or the chat was deleted)
        log.info("Chat %s: summary already updated elsewhere; this fold dropped", short_id(chat_id))
    return stored


async def _fold_while_due(services: Services, chat_id: uuid.UUID, trace_id: str | None) -> None:
    # Folds again while the last one stored (a chat that fell behind catches up) or a turn ended
    # meanwhile; each stored fold moves the pointer on, so this ends.
    try:
        while True:
            _look_again.discard(chat_id)
            folded = await fold_summary(services, chat_id, trace_id)
            if not folded and chat_id not in _look_again:
                return
    except Exception as error:  # the database: nothing stored, the next turn tries again
        log.warning(
            "Chat %s: summary fold failed, the next turn tries again (%s: %s)",
            short_id(chat_id),
            type(error).__name__,
            error,
        )


def _forget(chat_id: uuid.UUID, task: asyncio.Task[None]) -> None:
    if _running.get(chat_id) is task:
        del _running[chat_id]
        _look_again.discard(chat_id)


def _of_this_loop(task: asyncio.Task[None]) -> bool:
    # A task of an event loop that was closed with it pending (a test's, a benchmark's) never
    # finishes: it must neither block a new fold of its chat nor be waited for.
    return task.get_loop() is asyncio.get_running_loop()


def _pending() -> list[asyncio.Task[None]]:
    return [task for task in _running.values() if not task.done() and _of_this_loop(task)]
