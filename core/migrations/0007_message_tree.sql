-- Messages form a tree, as in ChatGPT: regenerating a reply adds another reply to the same user
-- message, editing a question adds another question after the same message; each is a version of
-- the other, and every earlier version stays reachable. A message's parent is the message before
-- it on its branch (NULL for a chat's first question); the branch on screen, and in the prompt,
-- is the path from the chat's head (the last message shown) up to the root.
ALTER TABLE messages ADD COLUMN parent_id uuid REFERENCES messages ON DELETE CASCADE;
-- When the user last picked this version (‹ › in the UI): going back to a branch shows the
-- versions picked on it before, else the newest ones.
ALTER TABLE messages ADD COLUMN chosen_at timestamptz;
-- The turn that wrote a reply: one reply per turn (a turn's every save is an upsert on it).
ALTER TABLE messages ADD COLUMN run_id uuid;
-- Not a foreign key: chats and messages would reference each other, and deleting a chat
-- cascades to its messages. A head that is gone reads as the chat's latest message.
ALTER TABLE chats ADD COLUMN head_id uuid;

-- Until now a chat was one line of messages: each one's parent is the one before it.
UPDATE messages AS m SET parent_id = previous.parent_id
FROM (SELECT message_id,
             lag(message_id) OVER (PARTITION BY chat_id ORDER BY sent_at, message_id) AS parent_id
      FROM messages) AS previous
WHERE m.message_id = previous.message_id AND previous.parent_id IS NOT NULL;

UPDATE chats AS c SET head_id = (
    SELECT message_id FROM messages WHERE chat_id = c.chat_id
    ORDER BY sent_at DESC, message_id DESC LIMIT 1);

-- A user message may now have several replies (its versions), each written by its own turn.
DROP INDEX messages_reply_to_idx;
CREATE INDEX messages_reply_to_idx ON messages (reply_to) WHERE reply_to IS NOT NULL;
CREATE UNIQUE INDEX messages_run_id_idx ON messages (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX messages_parent_id_idx ON messages (parent_id);
