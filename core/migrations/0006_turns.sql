-- 0006_turns: a reply is a job that outlives its connection.
--
-- A turn is one user message being answered (run_id is the chat's run claim of 0002 while it runs).
-- Its events (steps, tokens, sources, done, ...) are appended to turn_events with a sequence number,
-- so any server process can replay a reply being written and follow it; Stop is a flag any process
-- can set. A turn left unfinished by a process that died is finished as interrupted, its text
-- recovered from these events, by whichever process notices first (finished_at guards that).
-- Each chat keeps only its latest turn's events.

CREATE TABLE turns (
    run_id uuid PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats ON DELETE CASCADE,
    user_message_id uuid NOT NULL REFERENCES messages ON DELETE CASCADE,
    use_web boolean NOT NULL DEFAULT false,  -- what the user asked for, kept for a retry
    stop_requested boolean NOT NULL DEFAULT false,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

CREATE INDEX turns_chat_id_idx ON turns (chat_id, started_at DESC);
CREATE INDEX turns_user_message_id_idx ON turns (user_message_id);
CREATE INDEX turns_unfinished_idx ON turns (started_at) WHERE finished_at IS NULL;

CREATE TABLE turn_events (
    run_id uuid NOT NULL REFERENCES turns ON DELETE CASCADE,
    seq integer NOT NULL CHECK (seq > 0),
    event jsonb NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Exactly one reply per user message, whichever path writes it (the reply, its recovery after a
-- crash, a retry): replies are written by upsert on this.
ALTER TABLE messages ADD COLUMN reply_to uuid REFERENCES messages ON DELETE CASCADE;
CREATE UNIQUE INDEX messages_reply_to_idx ON messages (reply_to) WHERE reply_to IS NOT NULL;
