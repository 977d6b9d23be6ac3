"""Search across a user's chats: Postgres full-text search over message text and chat titles.

Migration 0010 keeps a tsvector per message (`search_tsv`) and per chat title (`title_tsv`): the
text under the `english` configuration (stemmed) concatenated with the same text under `simple`
(every word as written). A query is parsed the same two ways (`websearch_to_tsquery`: words,
"quoted phrases", -excluded, or) and OR-ed, so "running cats" finds "the cat runs" and a word of
another language that English takes for a stop word ("no", "me", "was") is still found.

Only the user's own chats are searched, never temporary ones. Every message counts, those on
branches not shown too (an earlier version of a reply is still the user's text); each hit says
whether its message is on the branch shown (`on_branch`), so the UI can show that version first.

Snippets come from `ts_headline` with two private-use characters as the match markers (taken out
of the text first), split here into plain-text parts: nothing the browser receives is HTML.
"""

from __future__ import annotations

import uuid
from typing import Any

from core.statements import Db, fetch_all

MAX_QUERY_CHARS = 200
START, STOP = "\ue000", "\ue001"  # ts_headline's markers: private-use characters, never shown
_HEADLINE = (
    f"StartSel={START}, StopSel={STOP}, MaxWords=24, MinWords=8, MaxFragments=2, ShortWord=0,"
    ' FragmentDelimiter=" … "'
)
_TITLE_HEADLINE = f"StartSel={START}, StopSel={STOP}, HighlightAll=true"

# The best-ranked message of each matching chat, and chats whose title matches; ranked by the
# message's rank plus 1 for a title match (a title match is the strongest sign), then by recency.
# ts_headline runs only on the rows returned: it reads the whole text, which costs.
_SEARCH = f"""
WITH q AS (
  SELECT websearch_to_tsquery('english', %(q)s) || websearch_to_tsquery('simple', %(q)s) AS query
), mine AS (
  SELECT c.chat_id, c.title, c.updated_at, c.pinned, c.title_tsv @@ q.query AS title_match
  FROM chats AS c, q WHERE c.user_id = %(user)s AND NOT c.temporary
), hits AS (
  SELECT DISTINCT ON (m.chat_id) m.chat_id, m.message_id, m.role, m.content, m.sent_at,
         ts_rank(m.search_tsv, q.query) AS rank
  FROM messages AS m JOIN mine USING (chat_id), q
  WHERE m.search_tsv @@ q.query
  ORDER BY m.chat_id, rank DESC, m.sent_at DESC
), found AS (
  SELECT mine.*, hits.message_id, hits.role, hits.content, hits.sent_at,
         COALESCE(hits.rank, 0) + CASE WHEN mine.title_match THEN 1 ELSE 0 END AS score
  FROM mine LEFT JOIN hits USING (chat_id)
  WHERE mine.title_match OR hits.message_id IS NOT NULL
  ORDER BY score DESC, mine.updated_at DESC LIMIT %(limit)s
), shown AS (
  SELECT found.*, translate(found.content, %(markers)s, '') AS text,
         ts_headline('english', translate(found.title, %(markers)s, ''), q.query,
                     '{_TITLE_HEADLINE}') AS title_headline
  FROM found, q
)
SELECT shown.chat_id, shown.title, shown.updated_at, shown.pinned, shown.message_id, shown.role,
       shown.sent_at, shown.title_headline,
       CASE WHEN shown.message_id IS NULL THEN NULL ELSE (
         SELECT CASE WHEN position(%(start)s IN h.en) > 0 THEN h.en ELSE
           ts_headline('simple', shown.text, q.query, '{_HEADLINE}') END
         FROM (SELECT ts_headline('english', shown.text, q.query, '{_HEADLINE}') AS en) AS h
       ) END AS headline,
       shown.message_id IS NOT NULL AND EXISTS (
         WITH RECURSIVE branch AS (
           SELECT m.message_id, m.parent_id FROM chats AS c JOIN messages AS m
             ON m.message_id = COALESCE(
               (SELECT h.message_id FROM messages AS h
                WHERE h.message_id = c.head_id AND h.chat_id = c.chat_id),
               (SELECT l.message_id FROM messages AS l WHERE l.chat_id = c.chat_id
                ORDER BY l.sent_at DESC, l.message_id DESC LIMIT 1))
           WHERE c.chat_id = shown.chat_id
           UNION ALL
           SELECT m.message_id, m.parent_id FROM branch AS b
             JOIN messages AS m ON m.message_id = b.parent_id
         ) SELECT 1 FROM branch WHERE branch.message_id = shown.message_id
       ) AS on_branch
FROM shown, q ORDER BY shown.score DESC, shown.updated_at DESC
"""


def parts(headline: str) -> list[dict[str, Any]]:
    """ts_headline's output as plain-text parts, `match` true for the highlighted ones."""
    result: list[dict[str, Any]] = []
    rest = headline
    while rest:
        start = rest.find(START)
        if start < 0:
            result.append({"text": rest, "match": False})
            break
        if start:
            result.append({"text": rest[:start], "match": False})
        stop = rest.find(STOP, start)
        stop = len(rest) if stop < 0 else stop
        if stop > start + 1:
            result.append({"text": rest[start + 1 : stop], "match": True})
        rest = rest[stop + 1 :]
    return result


async def search_chats(db: Db, user_id: uuid.UUID, query: str, limit: int = 20) -> list[dict]:
    """The user's chats (not temporary) matching `query`, best first: each with its title (and
    `title_parts`, the title with its matching words marked), and the best matching message's
    id, role, `on_branch` and `snippet` (parts; None when only the title matches)."""
    rows = await fetch_all(
        db,
        _SEARCH,
        {"q": query, "user": user_id, "limit": limit, "markers": START + STOP, "start": START},
    )
    return [
        {
            "chat_id": row["chat_id"],
            "title": row["title"],
            "title_parts": parts(row["title_headline"]),
            "updated_at": row["updated_at"],
            "pinned": row["pinned"],
            "message_id": row["message_id"],
            "role": row["role"],
            "sent_at": row["sent_at"],
            "on_branch": row["on_branch"],
            "snippet": parts(row["headline"]) if row["headline"] is not None else None,
        }
        for row in rows
    ]
