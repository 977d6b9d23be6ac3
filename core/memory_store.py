"""Long-term memories in Postgres: facts about the user, each grounded in the user's own words.

A memory is a short third-person fact (1-500 characters) with its **evidence**: the user message
it came from and a quote, the exact span of that message stating the fact. Nothing is stored
without it: `save_grounded_memory` looks the message up (user messages only: the assistant's own
words, tool results and web pages are never evidence) and finds the quote in it, comparing after
normalising whitespace, case, quotes and dashes (`grounding.find_quote`); otherwise it raises
`NotGrounded`, whatever model asked. Memories are global to the install (one user).

- A fact saying the same as a current memory (cosine similarity at least `DUPLICATE_SIMILARITY`)
  is not stored twice.
- History: `supersedes` closes the memory a new fact replaces (valid_to, superseded_by) instead of
  overwriting it; searches (core/memory_search.py) read current memories unless asked for the past.
- A fact replaces (`supersedes`, or an extraction's `update_memory(..., only_if_like=True)`) only a
  memory like it (`SUPERSEDE_SIMILARITY`, `UPDATE_SIMILARITY`); otherwise `Unlike`, and the memory
  is left as it was.
- The user's own changes (`update_memory`, `delete_memory`, `forget_all`, `delete_chat_memories`)
  come from the API; an edit re-embeds.
- When the configured embedding model changes, `reembed_stale_memories` recomputes the vectors at
  start-up. Searches only compare vectors of the current model.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import psycopg
from fastapi.encoders import jsonable_encoder
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from core.forget_requests import asks_to_forget
from core.grounding import find_quote, sentences_of, shares_a_word, states_its_numbers, told_by

logger = logging.getLogger("resolveai.db")

MAX_MEMORY_CHARS = 500
EMBED_DIMENSIONS = 384
REEMBED_BATCH_SIZE = 64

# Cosine similarity (1 - pgvector's `<=>` distance) of all-MiniLM-L6-v2 vectors, measured by
# `python -m evals.memory_thresholds` (re-run it after changing the embedder).
#
# DUPLICATE_SIMILARITY: 40 hand-written paraphrase pairs of one fact (tests/data/memory_pairs.json)
# score median 0.905 (p5 0.789); 40 pairs of different facts on the same topic ("is vegetarian" /
# "is vegan") median 0.776, p95 0.907; real distinct facts (393 LoCoMo evidence turns against the
# nearest other evidence turn of their conversation) median 0.683, p99 0.856. At 0.90: recall 55%
# of paraphrases (22/40), 3/40 same-topic pairs merged ("prefers tea to coffee" / "coffee to tea"
# 0.997, "is learning" / "teaches Spanish" 0.924, "a sister" / "a brother named Ana" 0.906: word
# order and one-word changes look alike to this model), 2/393 LoCoMo facts merged; precision 0.88
# against the same-topic pairs. 0.85 would catch 85% of paraphrases but merge 28% of same-topic
# pairs. Merging loses a new fact while a missed paraphrase only stores it twice, hence the rule:
# the lowest threshold merging <= 5% of same-topic pairs and <= 1% of LoCoMo facts. On these pairs
# it gives 0.91 (one same-topic pair and three paraphrases fewer); the first set of pairs, never
# committed, gave 0.90, kept. tests/test_memory_thresholds.py holds these figures.
DUPLICATE_SIMILARITY = 0.90

# SUPERSEDE_SIMILARITY / UPDATE_SIMILARITY: how like the memory it names a fact must be to close it
# (supersede: the user changed it) or to overwrite it (update: the same fact made more precise).
# 32 hand-written pairs (tests/data/memory_pairs.json): 24 changes ("tea every morning" /
# "coffee every morning", "a nurse in Porto" / "a baker") score min 0.340, median 0.677; 8 updates
# ("has a dog" / "has a dog named Rex") min 0.632, median 0.780; the 153 pairs of 18 unrelated facts
# about one user median 0.256, p95 0.428, max 0.673 ("lives in Lisbon" / "studies at the
# University of Lisbon"). Every change and update passes; 69% of unrelated pairs cannot close each
# other, 99% cannot overwrite each other. An update loses the old text, so its bar is higher.
# `python -m evals.memory_thresholds` prints the table; tests/test_memory_thresholds.py checks it.
SUPERSEDE_SIMILARITY = 0.30
UPDATE_SIMILARITY = 0.55

# Fixed key for the advisory lock around re-embedding ("ResolveM"); differs from the migration
# lock in core/db.py.
REEMBED_LOCK_KEY = 0x5265736F6C76654D
# Fixed key for the transaction lock around save_memory's check-then-insert ("ResolveS"): two
# processes saving the same fact at once would both find nothing and both insert without it.
SAVE_LOCK_KEY = 0x5265736F6C766553

PUBLIC_MEMORY_FIELDS = ("memory_id", "content", "quote", "message_id", "chat_id", "valid_from",
                        "valid_to", "superseded_by", "created_at", "updated_at")  # fmt: skip
MEMORY_COLUMNS = (
    "memory_id, content, quote, embed_model, source_chat_id, source_message_id, valid_from,"
    " valid_to, superseded_by, created_at, updated_at"
)

# The current memories closest to a vector, with their cosine distance. ORDER BY the bare `<=>`
# with a LIMIT is the shape the HNSW index (vector_cosine_ops) answers; ordering by a similarity
# expression or filtering on the distance would scan the whole table, so thresholds are applied
# to the rows this returns. Only vectors of the current model are comparable; after start-up's
# re-embedding that is every row, so the filter removes nothing the index scan would need.
NEAREST_SQL = (
    f"SELECT {MEMORY_COLUMNS}, embedding <=> %(vector)s AS distance FROM memories"
    " WHERE user_id = %(user)s AND embed_model = %(model)s AND valid_to IS NULL"
    " ORDER BY embedding <=> %(vector)s LIMIT %(limit)s"
)


# HNSW with a WHERE (one user's memories among everyone's): pgvector 0.8's iterative scan goes on
# past ef_search candidates until enough rows pass the filter, instead of returning too few.
ITERATIVE_SCAN_SQL = "SET LOCAL hnsw.iterative_scan = relaxed_order"


class NotGrounded(ValueError):
    """The quote is not in the user's message: the fact is not something the user said."""


class Unlike(ValueError):
    """The fact is about something else than the memory it would replace or close."""


class Embedder(Protocol):
    """What this module needs from an embedding model (the real one lives elsewhere)."""

    model_name: str

    async def embed_documents(self, texts: list[str]) -> Sequence[np.ndarray]: ...


class QueryEmbedder(Embedder, Protocol):
    """An embedder that can also embed search queries (rag/embedder.py's `Embedder`)."""

    async def embed_query(self, text: str) -> np.ndarray: ...


@dataclass(frozen=True)
class SaveResult:
    """What a save did: stored `memory`, or found it already known as `memory`."""

    saved: bool
    # The new row, or the current memory that already says the same (row without the embedding).
    memory: dict[str, Any]
    # When not saved: how similar the stored memory is to the one offered (1.0 for the same text).
    similarity: float | None = None
    # The memory the new one replaced (its row after closing it), when it superseded one.
    superseded: dict[str, Any] | None = None


def normalize_memory(content: str) -> str:
    """`content` with runs of whitespace made single spaces; ValueError if empty or too long."""
    text = " ".join(content.split())
    if not text:
        raise ValueError("A memory can't be empty: give one short fact about the user")
    if len(text) > MAX_MEMORY_CHARS:
        raise ValueError(
            f"A memory must be at most {MAX_MEMORY_CHARS} characters, not {len(text)}:"
            " save one short fact about the user"
        )
    return text


def check_embedding(embedding: Any) -> np.ndarray:
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.shape != (EMBED_DIMENSIONS,):
        raise ValueError(f"An embedding must have {EMBED_DIMENSIONS} numbers, not {vector.shape}")
    return vector


async def add_memory(
    pool: AsyncConnectionPool,
    content: str,
    embedding: Any,
    embed_model: str,
    quote: str | None = None,
) -> dict[str, Any]:
    """Insert a memory as given, vector included: for evals and benchmarks loading data sets into
    scratch databases (their texts are their own evidence). The app never calls it: its writes go
    through `save_grounded_memory`, which checks the quote. ValueError if too long."""
    # The database checks the length too; checking here gives a clearer message.
    if not 1 <= len(content) <= MAX_MEMORY_CHARS:
        raise ValueError(f"A memory must be 1 to {MAX_MEMORY_CHARS} characters, not {len(content)}")
    vector = check_embedding(embedding)
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "INSERT INTO memories (content, quote, embedding, embed_model)"
            f" VALUES (%s, %s, %s, %s) RETURNING {MEMORY_COLUMNS}",
            (content, quote or content, vector, embed_model),
        )
        row = await cur.fetchone()
    assert row is not None
    return row


async def _user_message(
    cur: Any, message_id: uuid.UUID, user_id: uuid.UUID | None = None
) -> dict[str, Any]:
    """The user message that is a memory's evidence, with its chat's owner (`user_id`, whose the
    memory is); NotGrounded if there is none by that id (of `user_id`'s, when given)."""
    await cur.execute(
        "SELECT m.message_id, m.chat_id, m.content, c.user_id FROM messages AS m"
        " JOIN chats AS c USING (chat_id) WHERE m.message_id = %s AND m.role = 'user'"
        " AND (%s::uuid IS NULL OR c.user_id = %s)",
        (message_id, user_id, user_id),
    )
    row = await cur.fetchone()
    if row is None:
        raise NotGrounded("that is not something the user said (no user message to quote)")
    return row


def _grounded_quote(fact: str, quote: str, message: str) -> str:
    """The exact span of `message` that `quote` copies, checked to be about `fact`; NotGrounded if
    the quote is not in the message or shares no meaningful word with the fact (a real sentence
    with an invented fact attached). Meaning alone is not enough: all-MiniLM-L6-v2 puts "The
    user's favourite meat is steak" as close to "I'm vegetarian" (0.50) as "The user's home is
    Porto" to "I live in Porto" (0.64) is to its source, so no similarity threshold separates a
    paraphrase from a contradiction on the same topic."""
    span = find_quote(quote, message)
    if span is None:
        raise NotGrounded(
            "that is not something the user said: the quote is not in the user's message"
        )
    around = sentences_of(span, message)
    if around and all(asks_to_forget(sentence) for sentence in around):
        # "Please forget that I live in Porto." holds the words but tells nothing.
        raise NotGrounded("that is not something the user said: they asked to forget it")
    if not shares_a_word(fact, span):
        raise NotGrounded("that is not something the user said: the quote does not state that fact")
    if not states_its_numbers(fact, span):
        raise NotGrounded("that is not something the user said: the quote lacks its numbers")
    # Judged by whole sentences: "a small grey cat" out of a question is still asked.
    if not told_by(fact, "\n".join(around) or span):
        raise NotGrounded(
            "that is not something the user said: they asked it, denied it or said it of "
            "someone else, not told it of themselves"
        )
    return span


async def save_grounded_memory(
    pool: AsyncConnectionPool,
    embedder: Embedder,
    content: str,
    quote: str,
    message_id: uuid.UUID,
    supersedes: uuid.UUID | None = None,
    like: float = SUPERSEDE_SIMILARITY,
) -> SaveResult:
    """Store one fact with its evidence, unless a current memory already says the same.

    `quote` must be found in the user message `message_id` and be about the fact (see
    `_grounded_quote`); the span stored is the message's own text. With `supersedes`, that
    current memory is closed in the same transaction (valid_to now, superseded_by the new one),
    and is not counted as a duplicate; Unlike (nothing written) when the fact is less similar to
    it than `like` (about something else). Raises NotGrounded, or ValueError for an empty or too
    long fact.
    """
    text = normalize_memory(content)
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        message = await _user_message(cur, message_id)
    # Check and embed before the transaction: the model is the slow part and needs no lock.
    span = _grounded_quote(text, quote, message["content"])
    vector = check_embedding((await embedder.embed_documents([text]))[0])
    try:
        async with (
            pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            # Held until the transaction ends, so a concurrent save of the same fact (another
            # request, another server process) checks only after this one's row is committed.
            await cur.execute("SELECT pg_advisory_xact_lock(%s)", (SAVE_LOCK_KEY,))
            await cur.execute(ITERATIVE_SCAN_SQL)
            await cur.execute(
                NEAREST_SQL,
                {"vector": vector, "model": embedder.model_name, "limit": 2,
                 "user": message["user_id"]},
            )  # fmt: skip
            for nearest in await cur.fetchall():
                similarity = 1.0 - float(nearest.pop("distance"))
                if nearest["memory_id"] != supersedes and similarity >= DUPLICATE_SIMILARITY:
                    return SaveResult(saved=False, memory=nearest, similarity=similarity)
            if supersedes is not None:
                await _check_like(cur, supersedes, vector, message["user_id"], like)
            await cur.execute(
                "INSERT INTO memories (content, quote, embedding, embed_model, source_chat_id,"
                " source_message_id, user_id) VALUES (%(content)s, %(quote)s, %(vector)s,"
                " %(model)s, %(chat)s, %(message)s, %(user)s)"
                f" RETURNING {MEMORY_COLUMNS}",
                {
                    "content": text,
                    "quote": span,
                    "vector": vector,
                    "model": embedder.model_name,
                    "chat": message["chat_id"],
                    "message": message["message_id"],
                    "user": message["user_id"],
                },
            )
            row = await cur.fetchone()
            assert row is not None
            superseded = None
            if supersedes is not None:
                await cur.execute(
                    "UPDATE memories SET valid_to = now(), superseded_by = %s, updated_at = now()"
                    f" WHERE memory_id = %s AND valid_to IS NULL RETURNING {MEMORY_COLUMNS}",
                    (row["memory_id"], supersedes),
                )
                superseded = await cur.fetchone()
    except psycopg.errors.ForeignKeyViolation:  # the chat was deleted meanwhile
        raise NotGrounded("the message this fact came from was deleted") from None
    return SaveResult(saved=True, memory=row, superseded=superseded)


async def _check_like(
    cur: psycopg.AsyncCursor[dict[str, Any]],
    memory_id: uuid.UUID,
    vector: np.ndarray,
    user_id: uuid.UUID,
    floor: float,
) -> None:
    """Unlike if the user's current memory `memory_id` is less than `floor` similar to `vector` (a
    fact about to replace it); a memory closed or gone meanwhile passes."""
    await cur.execute(
        "SELECT content, 1 - (embedding <=> %s) AS similarity FROM memories"
        " WHERE memory_id = %s AND user_id = %s AND valid_to IS NULL",
        (vector, memory_id, user_id),
    )
    row = await cur.fetchone()
    if row is not None and row["similarity"] < floor:
        raise Unlike(f"{row['content']!r} is about something else (similarity"
                     f" {row['similarity']:.2f})")  # fmt: skip


async def update_memory(
    pool: AsyncConnectionPool,
    embedder: Embedder,
    memory_id: uuid.UUID,
    *,
    user_id: uuid.UUID,
    content: str | None = None,
    quote: str | None = None,
    message_id: uuid.UUID | None = None,
    only_if_like: bool = False,
) -> dict[str, Any] | None:
    """Change one of the user's memories' text (re-embedded) and/or its evidence; None if the user
    has no such memory.

    A new `quote` must be found in the memory's source message, or in `message_id` when given (the
    evidence then moves to that message: an extraction making a fact more precise). NotGrounded
    otherwise, also when the source message was deleted. With `only_if_like` (a model's change,
    not the user's own edit), Unlike when the new text is about something else.
    """
    text = normalize_memory(content) if content is not None else None
    vector = check_embedding((await embedder.embed_documents([text]))[0]) if text else None
    async with (
        pool.connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await cur.execute(
            "SELECT memory_id, content, source_message_id FROM memories WHERE memory_id = %s"
            " AND user_id = %s FOR UPDATE",
            (memory_id, user_id),
        )
        current = await cur.fetchone()
        if current is None:
            return None
        if only_if_like and vector is not None:
            await _check_like(cur, memory_id, vector, user_id, UPDATE_SIMILARITY)
        values: dict[str, Any] = {}
        if text is not None:
            values |= {"content": text, "embedding": vector, "embed_model": embedder.model_name}
        if quote is not None:
            source = message_id or current["source_message_id"]
            if source is None:
                raise NotGrounded("the message this memory came from was deleted")
            message = await _user_message(cur, source, user_id)
            fact = text or current["content"]
            values |= {
                "quote": _grounded_quote(fact, quote, message["content"]),
                "source_message_id": message["message_id"],
                "source_chat_id": message["chat_id"],
            }
        if not values:
            await cur.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE memory_id = %s", (memory_id,)
            )
            return await cur.fetchone()
        # Column names come from the fixed keys above, never from the caller.
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = {}").format(sql.Identifier(name), sql.Placeholder(name))
            for name in values
        )
        await cur.execute(
            sql.SQL(
                "UPDATE memories SET {}, updated_at = now() WHERE memory_id = {} RETURNING {}"
            ).format(assignments, sql.Placeholder("memory_id"), sql.SQL(MEMORY_COLUMNS)),
            {**values, "memory_id": memory_id},
        )
        return await cur.fetchone()


async def get_memory(
    pool: AsyncConnectionPool, memory_id: uuid.UUID, user_id: uuid.UUID
) -> dict[str, Any] | None:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE memory_id = %s AND user_id = %s",
            (memory_id, user_id),
        )
        return await cur.fetchone()


async def get_memories(
    pool: AsyncConnectionPool, memory_ids: Sequence[uuid.UUID]
) -> list[dict[str, Any]]:
    """The memories with these ids that still exist, in the order given."""
    if not memory_ids:
        return []
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE memory_id = ANY(%s)", (list(memory_ids),)
        )
        rows = {row["memory_id"]: row for row in await cur.fetchall()}
    return [rows[i] for i in memory_ids if i in rows]


async def list_memories(
    pool: AsyncConnectionPool,
    user_id: uuid.UUID,
    q: str | None = None,
    limit: int = 50,
    offset: int = 0,
    include_superseded: bool = False,
) -> tuple[list[dict[str, Any]], int]:
    """The user's memories newest first, and how many match in all; `q` finds text in the fact
    or quote."""
    pattern = None
    if q and q.strip():
        escaped = q.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
    where = (
        " WHERE user_id = %(user)s AND (%(history)s OR valid_to IS NULL)"
        " AND (%(pattern)s::text IS NULL OR content ILIKE %(pattern)s OR quote ILIKE %(pattern)s)"
    )
    params = {"history": include_superseded, "pattern": pattern, "limit": limit,
              "offset": offset, "user": user_id}  # fmt: skip
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        async with conn.pipeline():
            await cur.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories{where}"
                " ORDER BY created_at DESC, memory_id LIMIT %(limit)s OFFSET %(offset)s",
                params,
            )
            rows = await cur.fetchall()
            await cur.execute(f"SELECT count(*) AS n FROM memories{where}", params)
            total = await cur.fetchone()
        await conn.commit()
    return rows, int(total["n"]) if total else 0


def public_memory(row: dict[str, Any]) -> dict[str, Any]:
    """A memory as the API and the exports show it (JSON-ready): its evidence as `message_id`
    and `chat_id`, no vector."""
    named = {**row, "message_id": row["source_message_id"], "chat_id": row["source_chat_id"]}
    return jsonable_encoder({name: named[name] for name in PUBLIC_MEMORY_FIELDS})


async def export_memories(pool: AsyncConnectionPool, user_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every memory of the user's, superseded ones included, newest first, as `public_memory`
    shows them: what `GET /api/memories/export` and the full export (core/data_transfer.py)
    write."""
    rows, _ = await list_memories(pool, user_id, limit=1_000_000, include_superseded=True)
    return [public_memory(row) for row in rows]


async def delete_memory(
    pool: AsyncConnectionPool, memory_id: uuid.UUID, user_id: uuid.UUID
) -> bool:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "DELETE FROM memories WHERE memory_id = %s AND user_id = %s", (memory_id, user_id)
        )
        return cursor.rowcount > 0


async def delete_chat_memories(conn: Any, chat_id: uuid.UUID) -> int:
    """Delete the memories that came from a chat (within the caller's transaction)."""
    cursor = await conn.execute("DELETE FROM memories WHERE source_chat_id = %s", (chat_id,))
    return max(cursor.rowcount, 0)


async def forget_token(pool: AsyncConnectionPool, user_id: uuid.UUID) -> str:
    """A token naming the user's memories as they are now: "forget everything" must quote it, so a
    memory saved after the user looked (or a stale page) makes the request fail instead of
    deleting what the user never saw."""
    async with pool.connection() as conn:
        return await _forget_token(conn, user_id)


async def _forget_token(conn: Any, user_id: uuid.UUID) -> str:
    cursor = await conn.execute(
        "SELECT count(*), max(updated_at), max(created_at) FROM memories WHERE user_id = %s",
        (user_id,),
    )
    count, updated, created = await cursor.fetchone() or (0, None, None)
    digest = hashlib.sha256(f"{count}|{updated}|{created}".encode()).hexdigest()[:16]
    return f"{count}-{digest}"


async def forget_all(pool: AsyncConnectionPool, user_id: uuid.UUID, token: str) -> int | None:
    """Delete every memory of the user's if `token` is their current `forget_token`; how many,
    or None."""
    async with pool.connection() as conn, conn.transaction():
        # One at a time: a save between the check and the delete would be lost unseen.
        await conn.execute("LOCK TABLE memories IN SHARE ROW EXCLUSIVE MODE")
        if token != await _forget_token(conn, user_id):
            return None
        cursor = await conn.execute("DELETE FROM memories WHERE user_id = %s", (user_id,))
        return max(cursor.rowcount, 0)


async def reembed_stale_memories(pool: AsyncConnectionPool, embedder: Embedder) -> int:
    """Re-embed every memory made by another model than `embedder`; returns how many.

    Holds a session advisory lock on one connection for the whole run, so when two processes
    start together the second waits and then finds nothing left to do (and when this returns,
    every memory matches the current model). Each batch commits on its own, so no transaction
    stays open while the model runs, and an interrupted run resumes where it stopped.
    """
    model = embedder.model_name
    count = 0
    async with pool.connection() as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (REEMBED_LOCK_KEY,))
        await conn.commit()
        try:
            last_id: uuid.UUID | None = None
            while True:
                # Keyset pagination by memory_id: each row is visited once even if an update
                # below is skipped, so the loop always ends.
                cursor = await conn.execute(
                    "SELECT memory_id, content FROM memories WHERE embed_model <> %s"
                    " AND (%s::uuid IS NULL OR memory_id > %s) ORDER BY memory_id LIMIT %s",
                    (model, last_id, last_id, REEMBED_BATCH_SIZE),
                )
                batch = await cursor.fetchall()
                await conn.commit()
                if not batch:
                    break
                last_id = batch[-1][0]
                vectors = await embedder.embed_documents([content for _, content in batch])
                if len(vectors) != len(batch):
                    raise RuntimeError(
                        f"Embedder {model} returned {len(vectors)} vectors for {len(batch)} texts"
                    )
                async with conn.cursor() as cur:
                    # `content = %s`: if the memory was edited meanwhile, its new text was
                    # embedded by whoever edited it; do not overwrite that with a stale vector.
                    await cur.executemany(
                        "UPDATE memories SET embedding = %s, embed_model = %s"
                        " WHERE memory_id = %s AND content = %s AND embed_model <> %s",
                        [
                            (check_embedding(vector), model, memory_id, content, model)
                            for (memory_id, content), vector in zip(batch, vectors, strict=True)
                        ],
                    )
                    count += max(cur.rowcount, 0)
                await conn.commit()
        finally:
            # Roll back first: after an error the connection's transaction may be aborted.
            await conn.rollback()
            await conn.execute("SELECT pg_advisory_unlock(%s)", (REEMBED_LOCK_KEY,))
            await conn.commit()
    if count:
        logger.info("Memories: re-embedded %d with %s", count, model)
    return count
