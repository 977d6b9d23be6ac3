-- 0010_search_titles_pins: full-text search over messages and chat titles, generated titles that
-- never overwrite the user's own, and pinned chats.
--
-- Search (core/chat_search.py) matches a query against one tsvector per message and per title:
-- the text under the `english` configuration (stemmed: "running" finds "run") concatenated with
-- the same text under `simple` (every word as written, English stop words too), so a word of
-- another language that English drops as a stop word ("no", "me", "was") is still found. The
-- query is parsed under both and OR-ed. The text is cut at 100,000 characters: a tsvector has a
-- 1 MB limit, and an insert over it would fail.
ALTER TABLE messages ADD COLUMN IF NOT EXISTS search_tsv tsvector GENERATED ALWAYS AS (
    to_tsvector('english'::regconfig, left(content, 100000))
    || to_tsvector('simple'::regconfig, left(content, 100000))) STORED;
CREATE INDEX IF NOT EXISTS messages_search_tsv_idx ON messages USING gin (search_tsv);

ALTER TABLE chats ADD COLUMN IF NOT EXISTS title_tsv tsvector GENERATED ALWAYS AS (
    to_tsvector('english'::regconfig, title) || to_tsvector('simple'::regconfig, title)) STORED;
CREATE INDEX IF NOT EXISTS chats_title_tsv_idx ON chats USING gin (title_tsv);

-- Where the title came from: 'auto' (the start of the first message), 'generated' (written by
-- the utility model after the first reply, chat/titles.py) or 'user' (renamed). A generated
-- title is stored only over an 'auto' one, so a rename made meanwhile is never overwritten.
ALTER TABLE chats ADD COLUMN IF NOT EXISTS title_source text NOT NULL DEFAULT 'auto'
    CHECK (title_source IN ('auto', 'generated', 'user'));

-- Pinned chats come first in the sidebar.
ALTER TABLE chats ADD COLUMN IF NOT EXISTS pinned boolean NOT NULL DEFAULT false;
