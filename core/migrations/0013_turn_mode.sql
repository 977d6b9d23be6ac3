-- 0013_turn_mode: how a turn was asked to answer, kept (like use_web) for a retry.
--
-- `mode` is "chat" (a reply, with tools) or "research" (a cited report from several searches,
-- rag/research.py). Turns started before this were chat turns.

ALTER TABLE turns ADD COLUMN IF NOT EXISTS mode text NOT NULL DEFAULT 'chat'
    CHECK (mode IN ('chat', 'research'));
