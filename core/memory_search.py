"""Finding memories: the facts about the user most relevant to a query, by meaning and by words.

`retrieve_memories` is the one search every reader uses (the automatic recall before a reply, the
`retrieve_memory` tool, the evals): the HNSW vector index and Postgres full-text search each bring
their best candidates, every candidate is scored on both (cosine similarity, and the rarity of the
words it shares with the query), and a relevance test leaves out what is neither close in meaning
nor a strong word match, so an unrelated query gets nothing rather than noise. Only current
memories are searched unless the caller asks for superseded ones too (a question about the past).
`few_memories` is the shortcut before it: all of a user's memories, when they are few;
`reply_wishes`, how the user wants replies, goes with the search's; `users_names`, what they are
called, with the extraction's.
Writing memories is core/memory_store.py's job.

Measured with `python -m evals memory-retrieval` (LoCoMo turns as memories, 498 questions; the
suite also counts how many unrelated SQuAD questions get nothing) and, for the alternatives below,
ad-hoc runs of variants of this query over the same data; evals/RESULTS.md has the suite's figures.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from core.grounding import REPLY_WISH, REPLY_WORDS
from core.memory_store import ITERATIVE_SCAN_SQL, MEMORY_COLUMNS, QueryEmbedder, check_embedding
from core.statements import fetch_all
from core.third_person import users_name

# Both thresholds are cosine similarities (1 - pgvector's `<=>` distance) of all-MiniLM-L6-v2
# vectors, measured by `python -m evals.memory_thresholds` (re-run it after changing the embedder).
#
# RELEVANCE_FLOOR: 387 LoCoMo questions (categories 1-4) searched over their conversation's turns
# (1,297 turns, as "<speaker>: <text>"). The 160 evidence turns that reach a question's top 5 score
# p1 0.365 / median 0.593; the best hit of 1,969 unrelated SQuAD questions searched in each
# conversation (5,907 searches) scores p95 0.318 / p99 0.390. 0.35 keeps 99.4% of those evidence
# hits (0.40 would keep 97.5%, 0.45 93.1%) and leaves 97.4% of unrelated searches empty.
# Cross-check with 30 hand-written questions about a user against 123 third-person facts
# (tests/data/memory_pairs.json): every answer is in its question's top 5 by meaning, and 0.35
# keeps 70% of them (0.30 87%, 0.25 97%); through this whole search, word admission included, 25
# of the 30 come back in the first 5, and "What is my job?" gets the same fact said another way.
# Lost: "Where did I grow up?" (0.336 to "The user grew up in Brazil."), "How do I get to work?"
# (0.263 to "takes the train to work", whose one shared word is in 14 of the 123 facts), and two the
# fact only implies ("Do I have any medical conditions?" / "has diabetes"). A relevant memory lost
# costs more than an unrelated one shown (the model can ignore it), hence the highest floor keeping
# >= 99% of evidence hits. With the word admission below (see WORDS_MIN_COVERAGE; recall@10 /
# unrelated searches left empty): 0.30 gives 0.713 / 94.9%, 0.35 0.707 / 97.9%, 0.40 0.693 / 98.8%.
RELEVANCE_FLOOR = 0.35

# How many candidates the HNSW index gathers for a memory search (pgvector's hnsw.ef_search, default
# 40; the rows returned are the best `limit` of them). Measured by `python -m bench.memory` (2,013
# real LoCoMo/SQuAD memories topped up with vectors made from them, 200 questions, k = 5), share of
# the exact top 5 found at 100k memories: 0.942 with 40, 0.986 with 100, 0.997 with 200; with the
# harder `--derived noise` vectors 0.70 with 40 and 0.85 with 100. At 10k: 0.990 / 0.997. 100 costs
# about half a millisecond more per search than 40 at 50k-100k rows; 200 doubles the index work
# again for little gain. On a small table (a few thousand rows) the planner reads it all instead
# (exact), whatever this says.
EF_SEARCH = 100

# Hybrid search: the CANDIDATES memories nearest in meaning (the HNSW index) and the CANDIDATES
# sharing the rarest words with the query (the GIN index of migration 0003), each then scored on
# both measures. On LoCoMo (recall@10), 10 / 20 / 40 per half: 0.696 / 0.707 / 0.706.
CANDIDATES = 20

# The word score of a memory: the IDF of the query's words it holds, summed, where a word in n of
# N memories has BM25's IDF ln(1 + (N - n + 0.5) / (n + 0.5)) (migration 0005 keeps the counts).
# That is BM25 counting each word once and without length normalization; memories are a sentence
# or two. On LoCoMo (recall@10 / MRR): 0.707 / 0.531; with length normalization (k1 0.9, b 0.2)
# 0.696 / 0.526; full BM25, repeats counted, 0.699 / 0.525 at twice the time (it unpacks every
# matching tsvector). The word half used to rank by ts_rank_cd, which ignores rarity: a speaker's
# name in half the turns weighed as much as a word in two of them.
#
# Ranking: MEANING_WEIGHT * cosine similarity + (1 - MEANING_WEIGHT) * word score / the best word
# score of the query. On LoCoMo: 0.707 / 0.531; weights 0.4 / 0.6: 0.695 / 0.531, 0.706 / 0.530;
# Reciprocal Rank Fusion (k = 60) of the same two lists instead: 0.681 / 0.459. (The search before
# this one, RRF of a ts_rank_cd list and the vector list with the cosine floor: 0.585 / 0.397.)
MEANING_WEIGHT = 0.5

# A memory less similar in meaning than RELEVANCE_FLOOR is still admitted, down to WORDS_FLOOR,
# when it holds at least WORDS_MIN_COVERAGE of the IDF of the query's words (words no memory holds
# count at the highest IDF, so a query about something else entirely covers little). On LoCoMo the
# floor alone dropped 13% of the evidence turns the ranking put in the top 10 (cosine median 0.27),
# mostly for the adversarial questions, which name the wrong person: the embedding follows the
# name, the word score barely weighs it. Recall@10 / share of 5,907 unrelated searches (each of
# 1,969 SQuAD questions in each LoCoMo conversation, first 5 results) that return nothing: floor
# alone 0.647 / 98.7%; coverage 0.5: 0.695 / 98.6%; 0.45: 0.703 / 98.3%; 0.4: 0.707 / 97.9%;
# 0.35: 0.718 / 97.4%; 0.3: 0.725 / 96.5% (all with cosine >= 0.1; 0.4 with no cosine minimum:
# 0.707 / 97.3%, with 0.2: 0.701 / 98.4%). 0.4 is the lowest coverage keeping about 98% of
# unrelated searches empty: the automatic recall runs before every reply, so precision matters.
WORDS_MIN_COVERAGE = 0.4
WORDS_FLOOR = 0.1

# The word half scores and looks for the query's rarest words only, so a long message (the
# automatic recall searches the user's whole message) can't make every memory a match to score,
# nor each score long: on 2,500 memories the search before this one, which looked for every word,
# took 0.3-0.7 s for a message as long as four memories (this one 12-16 ms; a loaded machine).
# LoCoMo questions have at most 15 distinct words after stemming and stop words, SQuAD ones 17.
MAX_SEARCHED_WORDS = 16

# Nor does it look for words in more than MAX_WORD_SHARE of the memories ("user", in "The user
# ..."; a LoCoMo speaker's name), though they still count in the scores of the memories found:
# their IDF is under ln 5 (a rare word's is 5-7) and looking for them makes the word half score
# much of the table. On LoCoMo, recall@10 0.707 with 0.2, 0.5 or no limit; 0.701 with 0.1 (which
# would also leave out, say, a partner's name in 15% of the memories). On 100,000 memories
# (bench.memory's 2,403 real ones repeated, so words are as frequent as in them), p50 in the
# server 33 ms with 0.2, 36 ms with 0.5, 15 ms with 0.1 (the search before this one: 109 ms; a
# loaded machine).
MAX_WORD_SHARE = 0.2


@dataclass(frozen=True)
class RetrievedMemory:
    """One memory found by `retrieve_memories`."""

    memory_id: uuid.UUID
    content: str
    quote: str  # the user's own words it was saved from
    # Cosine similarity to the query, 1 - pgvector's `<=>` distance; None when not searched for
    # (`few_memories`).
    similarity: float | None
    created_at: datetime
    valid_to: datetime | None  # set when a later fact superseded it


def ef_search_sql(limit: int, ef_search: int = EF_SEARCH) -> str:
    """The statement setting the HNSW search breadth for the current transaction (never below
    `limit`: the index returns at most ef_search rows; pgvector allows up to 1000)."""
    return f"SET LOCAL hnsw.ef_search = {min(max(int(limit), int(ef_search)), 1000)}"


# A word as a one-word tsquery: quoted, with quotes and backslashes doubled.
LEXEME_QUERY = r"('''' || replace(replace(lexeme, E'\\', E'\\\\'), '''', '''''') || '''')::tsquery"

# The IDF of the query's (scored) words a memory's `content_words` hold.
_SHARED_IDF = "(SELECT sum(idf) FROM scored_words WHERE {words} @@ scored_words.single)"

# words: the query's distinct words (the 'english' lexemes content_words holds) with their IDF;
# scored_words: the MAX_SEARCHED_WORDS rarest that some memory holds; the word half looks for
# those in at most MAX_WORD_SHARE of the memories. Each half is a shape its index answers: ORDER
# BY `<=>` LIMIT (HNSW), and `@@` a tsquery known when the scan starts (GIN: a scalar subquery; as
# a join the planner scans the table). Only their union (at most 2 * CANDIDATES memories) is
# scored on both measures. Memories sharing the same words tie on the word score; the newer go
# first (rather than by random id, which moved LoCoMo's recall@10 by up to 0.005 between runs).
HYBRID_SQL = f"""
WITH total AS (
    SELECT greatest(memories, 1)::float8 AS memories FROM memory_word_totals
), words AS (
    SELECT lexeme, coalesce(counts.memories, 0) AS memories,
           ln(1 + (greatest(total.memories - coalesce(counts.memories, 0), 0) + 0.5)
              / (coalesce(counts.memories, 0) + 0.5)) AS idf
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme
    CROSS JOIN total LEFT JOIN memory_word_counts counts USING (lexeme)
), scored_words AS (
    SELECT lexeme, idf, memories, {LEXEME_QUERY} AS single FROM words
    WHERE memories > 0 ORDER BY memories, lexeme LIMIT {MAX_SEARCHED_WORDS}
), by_meaning AS (
    SELECT memory_id FROM memories
    WHERE user_id = %(user)s AND embed_model = %(model)s AND (%(history)s OR valid_to IS NULL)
    ORDER BY embedding <=> %(vector)s LIMIT %(candidates)s
), by_words AS (
    SELECT memory_id, {_SHARED_IDF.format(words="content_words")} AS score FROM memories
    WHERE content_words @@ (
        SELECT string_agg(single::text, ' | ')::tsquery FROM scored_words
        WHERE memories <= {MAX_WORD_SHARE} * (SELECT memories FROM total)
    )
      AND user_id = %(user)s AND (%(history)s OR valid_to IS NULL)
    ORDER BY score DESC, created_at DESC, memory_id LIMIT %(candidates)s
), scored AS (
    SELECT {MEMORY_COLUMNS}, embedding <=> %(vector)s AS distance,
           coalesce({_SHARED_IDF.format(words="content_words")}, 0) AS shared_idf
    FROM (SELECT memory_id FROM by_meaning UNION SELECT memory_id FROM by_words) candidates
    JOIN memories USING (memory_id)
    WHERE embed_model = %(model)s
)
SELECT {MEMORY_COLUMNS}, distance FROM scored
WHERE distance <= %(max_distance)s
   OR (shared_idf >= {WORDS_MIN_COVERAGE} * (SELECT sum(idf) FROM words)
       AND distance <= {round(1 - WORDS_FLOOR, 6)})
ORDER BY {MEANING_WEIGHT} * (1 - distance) + {round(1 - MEANING_WEIGHT, 6)} * shared_idf
         / coalesce(nullif((SELECT max(score) FROM by_words), 0), 1) DESC,
         distance, memory_id
LIMIT %(limit)s
"""


async def retrieve_memories(
    pool: AsyncConnectionPool,
    embedder: QueryEmbedder,
    query: str,
    *,
    user_id: uuid.UUID,
    limit: int = 5,
    ef_search: int = EF_SEARCH,
    include_superseded: bool = False,
) -> list[RetrievedMemory]:
    """Up to `limit` of the user's memories most relevant to `query` (by meaning and by shared
    rare words, see `CANDIDATES` and `MEANING_WEIGHT`), best first.

    Memories less similar in meaning than `RELEVANCE_FLOOR` are left out unless their words match
    the query strongly (`WORDS_MIN_COVERAGE`), so an unrelated query returns nothing; the test
    applies to the candidates the indexes return, so it never makes them return fewer (the only
    other filter, the embedding model, matches every row after start-up's re-embedding).
    `similarity` is the cosine similarity either way. `ef_search`: see `EF_SEARCH`. Memories a
    later fact superseded are left out unless `include_superseded`. ValueError if the query is
    empty or `limit` is below 1.
    """
    text = " ".join(query.split())
    if not text:
        raise ValueError("The memory search query can't be empty")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    vector = check_embedding(await embedder.embed_query(text))
    candidates = max(limit, CANDIDATES)
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        # Pipelined: BEGIN, the setting (for this transaction only), the search and COMMIT go to
        # the server together instead of one round trip each.
        async with conn.pipeline(), conn.transaction():
            await conn.execute(ef_search_sql(candidates, ef_search))
            await conn.execute(ITERATIVE_SCAN_SQL)
            await cur.execute(
                HYBRID_SQL,
                {
                    "text": text,
                    "vector": vector,
                    "model": embedder.model_name,
                    "candidates": candidates,
                    "max_distance": 1.0 - RELEVANCE_FLOOR,
                    "limit": limit,
                    "history": include_superseded,
                    "user": user_id,
                },
            )
        rows = await cur.fetchall()
    return [_retrieved(row, 1.0 - float(row["distance"])) for row in rows]


async def few_memories(
    pool: AsyncConnectionPool,
    *,
    user_id: uuid.UUID,
    limit: int,
    chars: int,
    include_superseded: bool = False,
) -> list[RetrievedMemory] | None:
    """All the user's current memories (superseded ones too if `include_superseded`), oldest
    first, when there are at most `limit` of them and `chars` characters in all; None when there
    are more. One statement, no embedding."""
    rows = await fetch_all(
        pool,
        f"SELECT {MEMORY_COLUMNS} FROM memories"
        " WHERE user_id = %(user)s AND (%(history)s OR valid_to IS NULL)"
        " ORDER BY created_at, memory_id LIMIT %(over)s",
        {"user": user_id, "history": include_superseded, "over": limit + 1},
    )
    if len(rows) > limit or sum(len(row["content"]) for row in rows) > chars:
        return None
    return [_retrieved(row, None) for row in rows]


# How the user wants replies (core/grounding.py `REPLY_WISH`: "The user wants short replies.") is
# about every reply, not about the questions that share its words, so the search would not find
# it for "How do I merge two dicts?". The words go first (the full-text index): the regular
# expression alone scanned all of a user's memories, 170 ms at 100k, 0.3 ms with the words.
_REPLY_WORDS_QUERY = " | ".join(REPLY_WORDS)
_REPLY_WISH_SQL = REPLY_WISH.replace(r"\b", r"\y")  # Postgres's word boundary is \y


async def reply_wishes(
    pool: AsyncConnectionPool, *, user_id: uuid.UUID, limit: int
) -> list[RetrievedMemory]:
    """The user's current memories of how they want replies, newest first."""
    rows = await fetch_all(
        pool,
        f"SELECT {MEMORY_COLUMNS} FROM memories"
        " WHERE user_id = %(user)s AND valid_to IS NULL"
        " AND content_words @@ to_tsquery('english', %(words)s) AND content ~* %(wish)s"
        " ORDER BY created_at DESC, memory_id LIMIT %(limit)s",
        {"user": user_id, "words": _REPLY_WORDS_QUERY, "wish": _REPLY_WISH_SQL, "limit": limit},
    )
    return [_retrieved(row, None) for row in rows]


async def users_names(pool: AsyncConnectionPool, *, user_id: uuid.UUID) -> list[str]:
    """The names the user's current memories give them ("The user's name is Luc." → "Luc"),
    newest first."""
    rows = await fetch_all(
        pool,
        "SELECT content FROM memories WHERE user_id = %(user)s AND valid_to IS NULL"
        " AND content ILIKE 'the user_s %%name is %%' ORDER BY created_at DESC, memory_id",
        {"user": user_id},
    )
    return [name for row in rows if (name := users_name(row["content"]))]


def _retrieved(row: dict[str, Any], similarity: float | None) -> RetrievedMemory:
    return RetrievedMemory(
        memory_id=row["memory_id"],
        content=row["content"],
        quote=row["quote"],
        similarity=similarity,
        created_at=row["created_at"],
        valid_to=row["valid_to"],
    )
