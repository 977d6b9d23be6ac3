"""Turns and their event logs in Postgres (migration 0006): how a reply outlives its connection.

A turn is one user message being answered. While it runs, its events are appended here in order,
numbered from 1, so any server process can replay them and follow the rest; a Stop request is a
flag on the turn, seen by whichever process runs it. One statement a call (core/statements.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from core.statements import Db, execute, fetch_all, fetch_one

# Events that end a turn's stream: the reply saved (done), failed (error), or stopped.
FINAL_EVENTS = ("done", "error", "interrupted")


@dataclass(frozen=True)
class NewTurn:
    """A turn to record with the question it answers, by the statement that saves the question
    (`chat_store.add_message(turn=…)`): one round trip less per message."""

    run_id: uuid.UUID
    use_web: bool = False
    mode: str = "chat"

    def insert_sql(self, source: str) -> str:
        """An INSERT of this turn for the message of `source` (a CTE with chat_id, message_id),
        its parameters from `params`."""
        return (
            "INSERT INTO turns (run_id, chat_id, user_message_id, use_web, mode)"
            f" SELECT %(turn_run)s, chat_id, message_id, %(turn_web)s, %(turn_mode)s FROM {source}"
        )

    def params(self) -> dict[str, Any]:
        return {"turn_run": self.run_id, "turn_web": self.use_web, "turn_mode": self.mode}


async def create_turn(
    db: Db,
    run_id: uuid.UUID,
    chat_id: uuid.UUID,
    user_message_id: uuid.UUID,
    use_web: bool = False,
    mode: str = "chat",
) -> None:
    await execute(
        db,
        "INSERT INTO turns (run_id, chat_id, user_message_id, use_web, mode)"
        " VALUES (%s, %s, %s, %s, %s)",
        (run_id, chat_id, user_message_id, use_web, mode),
    )


async def asked_for(db: Db, user_message_id: uuid.UUID) -> tuple[bool, str]:
    """How the latest answer to this message (a question, or the question of this reply) was
    asked for: whether to use the web, and its mode ("chat" or "research")."""
    row = await fetch_one(
        db,
        "SELECT use_web, mode FROM turns WHERE user_message_id = COALESCE("
        " (SELECT reply_to FROM messages WHERE message_id = %(m)s), %(m)s)"
        " ORDER BY started_at DESC LIMIT 1",
        {"m": user_message_id},
    )
    return (bool(row["use_web"]), row["mode"]) if row else (False, "chat")


async def wrote_research(db: Db, chat_id: uuid.UUID, message_id: uuid.UUID) -> bool:
    """Whether this message of this chat is a reply written by a research turn (a report)."""
    row = await fetch_one(
        db,
        "SELECT 1 AS found FROM messages AS m JOIN turns AS t ON t.run_id = m.run_id"
        " WHERE m.message_id = %s AND m.chat_id = %s AND t.mode = 'research'",
        (message_id, chat_id),
    )
    return row is not None


# `(run_id, seq, event)` triples of any turns, in one statement (a process stores the new events
# of all the replies it is writing at once). A triple stored already (a retried write) is left as
# it was; one whose turn is gone (its chat was deleted) is dropped: it cannot fail the others'.
_INSERT_EVENTS = (
    "INSERT INTO turn_events (run_id, seq, event)"
    " SELECT run_id, seq, event"
    " FROM unnest(%(runs)s::uuid[], %(seqs)s::int[], %(events)s::jsonb[]) AS e(run_id, seq, event)"
    " WHERE EXISTS (SELECT 1 FROM turns AS t WHERE t.run_id = e.run_id)"
    " ON CONFLICT DO NOTHING"
)

Event = tuple[uuid.UUID, int, dict]  # a turn's run id, the event's number in it, the event


def _events_params(events: Sequence[Event]) -> dict[str, Any]:
    return {
        "runs": [run_id for run_id, _, _ in events],
        "seqs": [seq for _, seq, _ in events],
        "events": [Jsonb(event) for _, _, event in events],
    }


async def append_events(db: Db, events: Sequence[Event]) -> None:
    """Store `(run_id, seq, event)` triples, of one turn or several (see `_INSERT_EVENTS`)."""
    if not events:
        return
    # A chat deleted between the statement's look at `turns` and its insert fails it on the
    # foreign key; the statement run again no longer sees that turn. A few tries, then the error.
    for attempt in range(3):
        try:
            await execute(db, _INSERT_EVENTS, _events_params(events))
            return
        except psycopg.errors.ForeignKeyViolation:
            if attempt == 2:
                raise


async def events_after(db: Db, run_id: uuid.UUID, after: int) -> list[tuple[int, dict]]:
    rows = await fetch_all(
        db,
        "SELECT seq, event FROM turn_events WHERE run_id = %s AND seq > %s ORDER BY seq",
        (run_id, after),
    )
    return [(row["seq"], row["event"]) for row in rows]


async def latest_turn(db: Db, chat_id: uuid.UUID) -> dict[str, Any] | None:
    """The chat's latest turn, with `live`: whether its run still holds the chat (a process that
    died leaves `live` false and `finished_at` empty: see `claim_stale_turn`)."""
    return await fetch_one(
        db,
        "SELECT t.*, (c.run_id = t.run_id AND c.run_expires_at > now()) IS TRUE AS live"
        " FROM turns AS t JOIN chats AS c USING (chat_id)"
        " WHERE t.chat_id = %s ORDER BY t.started_at DESC LIMIT 1",
        (chat_id,),
    )


async def request_stop(db: Db, chat_id: uuid.UUID) -> uuid.UUID | None:
    """Ask the chat's running turn to stop; its run id, or None if no reply is being written."""
    row = await fetch_one(
        db,
        "UPDATE turns AS t SET stop_requested = true FROM chats AS c"
        " WHERE c.chat_id = %s AND t.run_id = c.run_id AND c.run_expires_at > now()"
        " AND t.finished_at IS NULL RETURNING t.run_id",
        (chat_id,),
    )
    return row["run_id"] if row else None


async def stopped_turns(db: Db, run_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these turns were asked to stop, or are gone (their chat was deleted): one
    statement for all the replies a process is writing."""
    rows = await fetch_all(
        db,
        "SELECT r.run_id FROM unnest(%s::uuid[]) AS r(run_id) LEFT JOIN turns AS t USING (run_id)"
        " WHERE t.run_id IS NULL OR t.stop_requested",
        (list(run_ids),),
    )
    return {row["run_id"] for row in rows}


async def finish_turn(
    db: Db, run_id: uuid.UUID, last_events: Sequence[tuple[int, dict]] = ()
) -> None:
    """Store the turn's `last_events`, mark it finished and drop the chat's earlier turns with
    their events (each chat keeps its latest turn's, for a reader that arrives just as it ends).
    One statement: a turn's end costs one round trip."""
    await execute(
        db,
        f"WITH stored AS ({_INSERT_EVENTS}),"
        " finished AS (UPDATE turns SET finished_at = now() WHERE run_id = %(run)s"
        " RETURNING chat_id, started_at)"
        " DELETE FROM turns AS t USING finished AS f"
        " WHERE t.chat_id = f.chat_id AND t.started_at < f.started_at AND t.run_id <> %(run)s"
        " AND t.finished_at IS NOT NULL",
        {**_events_params([(run_id, seq, event) for seq, event in last_events]), "run": run_id},
    )


async def claim_stale_turn(db: Db, run_id: uuid.UUID | None = None) -> dict[str, Any] | None:
    """Take over one unfinished turn whose process is gone (its chat's claim expired or moved on):
    `run_id`'s, or any. Marks it finished, so exactly one process recovers each, and returns it
    (run_id, chat_id, user_message_id); None if there is none."""
    return await fetch_one(
        db,
        "UPDATE turns SET finished_at = now() WHERE run_id = ("
        " SELECT t.run_id FROM turns AS t JOIN chats AS c USING (chat_id)"
        " WHERE t.finished_at IS NULL AND (%(run)s::uuid IS NULL OR t.run_id = %(run)s)"
        " AND (c.run_id IS DISTINCT FROM t.run_id OR c.run_expires_at <= now())"
        " ORDER BY t.started_at LIMIT 1 FOR UPDATE OF t SKIP LOCKED)"
        " RETURNING run_id, chat_id, user_message_id",
        {"run": run_id},
    )
