-- 0015_message_documents: the documents a user message was sent with (attached in the composer).
--
-- The reply to that message reads them (chat/document_recall.py), and so does any later answer
-- to it (a regenerate, a continue, a recovered turn). Ids only, as `memory_ids`: a document
-- deleted later is simply not there to read or to show.

ALTER TABLE messages ADD COLUMN IF NOT EXISTS document_ids uuid[] NOT NULL DEFAULT '{}';
